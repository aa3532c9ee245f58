//! Tencent QQ photo-cache (CDN) traces (SNIA IOTTA, 2016): space-separated, no header,
//! `timestamp photo_id image_format size_spec returned_bytes flag terminal n`, timestamp as
//! `YYYYMMDDhhmmss`.
//!
//! Object: one rendition of a photo, the (photo_id, image_format, size_spec) triple, hashed
//! to a key (as Caffeine's reader of this trace does). Size: returned_bytes. Time: the
//! timestamp read as UTC, in Unix seconds (the trace's time zone is not recorded; only
//! differences matter to replay). Every request is an `Access` (a CDN lookup that fills on
//! miss); the undocumented fields 6-8 are ignored.

use xxhash_rust::xxh3::Xxh3;

use crate::input::Input;
use crate::parse::{parse_u64, snippet, unix_seconds, words};
use crate::source::Source;
use crate::{Op, Request, TraceError, TraceReader};

pub(crate) struct TencentPhotoReader {
    input: Input,
}

impl TencentPhotoReader {
    pub(crate) fn new(source: Source) -> Self {
        TencentPhotoReader {
            input: Input::new(source),
        }
    }
}

/// `YYYYMMDDhhmmss` as Unix seconds.
fn compact_time(t: &[u8]) -> Option<f64> {
    if t.len() != 14 || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = |a: usize, b: usize| parse_u64(&t[a..b]);
    let (y, mo, d, h, mi, s) = (
        n(0, 4)?,
        n(4, 6)?,
        n(6, 8)?,
        n(8, 10)?,
        n(10, 12)?,
        n(12, 14)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    Some(unix_seconds(y as i64, mo as u32, d as u32, h as u32, mi as u32, s as u32) as f64)
}

fn parse_line(line: &[u8]) -> Result<Request, String> {
    let mut w = words(line);
    let mut f: [&[u8]; 5] = [&[]; 5];
    let mut n = 0;
    for (slot, word) in f.iter_mut().zip(&mut w) {
        *slot = word;
        n += 1;
    }
    if n < 5 {
        return Err(format!(
            "expected `timestamp photo_id format size_spec bytes ...`, found {n} fields in `{}`",
            snippet(line)
        ));
    }
    let time = compact_time(f[0]).ok_or_else(|| {
        format!(
            "expected a YYYYMMDDhhmmss timestamp in field 1, found `{}`",
            snippet(f[0])
        )
    })?;
    let size = parse_u64(f[4])
        .and_then(|s| u32::try_from(s).ok())
        .ok_or_else(|| {
            format!(
                "expected a byte count in field 5, found `{}`",
                snippet(f[4])
            )
        })?;
    let mut h = Xxh3::new();
    h.update(f[1]);
    h.update(&[0]);
    h.update(f[2]);
    h.update(&[0]);
    h.update(f[3]);
    Ok(Request {
        time,
        key: h.digest(),
        size,
        op: Op::Access,
        offset: 0,
    })
}

impl TraceReader for TencentPhotoReader {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        while let Some(line) = self.input.line()? {
            if line.trim_ascii().is_empty() {
                continue;
            }
            return match parse_line(line) {
                Ok(r) => Ok(Some(r)),
                Err(msg) => Err(self.input.line_error(msg)),
            };
        }
        Ok(None)
    }

    fn progress(&self) -> Option<(u64, u64)> {
        Some(self.input.progress())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_record() {
        let r = parse_line(
            b"20160201164604 085abb02a06850729bb01479466420d9e102d325 5 m 12903 1 PHONE 1",
        )
        .unwrap();
        assert_eq!((r.time, r.size, r.op), (1_454_345_164.0, 12903, Op::Access));
        let other = parse_line(
            b"20160201164604 085abb02a06850729bb01479466420d9e102d325 0 m 12903 1 PHONE 1",
        )
        .unwrap();
        assert_ne!(r.key, other.key, "formats are distinct objects");
        assert!(parse_line(b"2016020116460 x 5 m 1").is_err());
    }
}
