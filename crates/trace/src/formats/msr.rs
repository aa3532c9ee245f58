//! MSR Cambridge block traces (SNIA IOTTA 388): CSV without header,
//! `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, where Timestamp is a
//! Windows FILETIME (100 ns ticks since 1601-01-01), Type is `Read` or `Write`, and Offset
//! and Size are bytes.
//!
//! Key: the byte offset of the I/O within its disk (the disk number is folded in with
//! [`crate::block::volume_key`]; each MSR file is one host, so the host name is not).
//! Time: Unix seconds.

use crate::block::{BlockEmitter, BlockIo};
use crate::input::Input;
use crate::parse::{fields_array, parse_u64, snippet, trim};
use crate::source::Source;
use crate::{ReadOptions, Request, TraceError, TraceReader};

/// Seconds from 1601-01-01 (FILETIME epoch) to 1970-01-01.
const FILETIME_TO_UNIX: u64 = 11_644_473_600;
const TICKS_PER_SECOND: u64 = 10_000_000;

pub(crate) struct MsrReader {
    input: Input,
    blocks: BlockEmitter,
}

impl MsrReader {
    pub(crate) fn new(source: Source, opts: &ReadOptions) -> Self {
        MsrReader {
            input: Input::new(source),
            blocks: BlockEmitter::new(opts),
        }
    }
}

/// FILETIME ticks as Unix seconds, computed in integers first to keep sub-microsecond digits.
fn filetime_to_unix(ticks: u64) -> f64 {
    let secs = (ticks / TICKS_PER_SECOND) as i64 - FILETIME_TO_UNIX as i64;
    secs as f64 + (ticks % TICKS_PER_SECOND) as f64 / TICKS_PER_SECOND as f64
}

fn parse_line(line: &[u8]) -> Result<BlockIo, String> {
    let (f, n) = fields_array::<7>(line, b',');
    if n < 6 {
        return Err(format!(
            "expected `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, found {n} fields in `{}`",
            snippet(line)
        ));
    }
    let number = |i: usize, what: &str| {
        parse_u64(f[i]).ok_or_else(|| {
            format!(
                "expected {what} in field {}, found `{}`",
                i + 1,
                snippet(trim(f[i]))
            )
        })
    };
    let ticks = number(0, "a FILETIME timestamp")?;
    let disk = number(2, "a disk number")?;
    let write = match trim(f[3]) {
        t if t.eq_ignore_ascii_case(b"write") => true,
        t if t.eq_ignore_ascii_case(b"read") => false,
        t => {
            return Err(format!(
                "expected `Read` or `Write` in field 4, found `{}`",
                snippet(t)
            ))
        }
    };
    let offset = number(4, "a byte offset")?;
    let len = number(5, "a size in bytes")?;
    Ok(BlockIo {
        time: filetime_to_unix(ticks),
        volume: disk,
        key: offset,
        offset,
        len,
        write,
    })
}

impl TraceReader for MsrReader {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        if let Some(r) = self.blocks.pending() {
            return Ok(Some(r));
        }
        while let Some(line) = self.input.line()? {
            if trim(line).is_empty() {
                continue;
            }
            match parse_line(line) {
                Ok(io) => match self.blocks.start(io) {
                    Ok(r) => return Ok(Some(r)),
                    Err(msg) => return Err(self.input.line_error(msg)),
                },
                Err(msg) => return Err(self.input.line_error(msg)),
            }
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
    fn filetime_epoch() {
        // 2007-02-22, the first day of the MSR Cambridge traces.
        let t = filetime_to_unix(128_166_385_295_514_663);
        assert!((t - 1_172_164_929.551_466_2).abs() < 1e-6, "{t}");
    }

    #[test]
    fn parses_a_record() {
        let io = parse_line(b"128166385295514663,hm,0,Write,9056014336,2048,2833").unwrap();
        assert_eq!(
            (io.key, io.len, io.write, io.volume),
            (9_056_014_336, 2048, true, 0)
        );
        let err = parse_line(b"128166385295514663,hm,0,Erase,1,2,3").unwrap_err();
        assert!(err.contains("`Read` or `Write`"), "{err}");
    }
}
