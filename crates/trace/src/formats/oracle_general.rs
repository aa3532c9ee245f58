//! libCacheSim's `oracleGeneral` binary: headerless packed little-endian records of
//! `{u32 clock_time; u64 obj_id; u32 obj_size; i64 next_access_vtime}` (24 bytes).
//!
//! As in libCacheSim, records of size 0 are skipped and every request is an `Access`.

use super::le;
use crate::input::Input;
use crate::source::Source;
use crate::{Op, Request, TraceError, TraceReader};

pub(crate) const RECORD: usize = 24;

/// Decodes one 24-byte record (also the layout of `lcs` v1).
#[inline]
pub(crate) fn decode(rec: &[u8; RECORD]) -> Request {
    Request {
        time: f64::from(le::u32_at(rec, 0)),
        key: le::u64_at(rec, 4),
        size: le::u32_at(rec, 12),
        op: Op::Access,
        offset: 0,
    }
}

pub(crate) struct OracleGeneralReader {
    input: Input,
}

impl OracleGeneralReader {
    pub(crate) fn new(source: Source) -> Self {
        OracleGeneralReader {
            input: Input::new(source),
        }
    }
}

impl TraceReader for OracleGeneralReader {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        while let Some(rec) = self.input.array::<RECORD>()? {
            let req = decode(rec);
            if req.size != 0 {
                return Ok(Some(req));
            }
        }
        Ok(None)
    }

    /// Decodes straight from the input buffer, a run of whole records at a time: no
    /// per-record length check, refill test or `Option` (about a third of the per-request
    /// instructions of the one-at-a-time path). Every record of a run is decoded into place
    /// (a loop of known length, without a capacity test per request); size-0 records, which
    /// real traces rarely have, are dropped afterwards by one scan of the run.
    fn next_batch(&mut self, out: &mut Vec<Request>, max: usize) -> Result<(), TraceError> {
        let goal = out.len() + max;
        while out.len() < goal {
            let (records, _) = self
                .input
                .records::<RECORD>(goal - out.len())?
                .as_chunks::<RECORD>();
            if records.is_empty() {
                break;
            }
            let start = out.len();
            // Whether a record of size 0 is among them, noted while decoding (a second scan
            // of the decoded requests cost about 6 instructions a request).
            let mut empty = false;
            out.extend(records.iter().map(|rec| {
                let req = decode(rec);
                empty |= req.size == 0;
                req
            }));
            if empty {
                let mut kept = start;
                for i in start..out.len() {
                    if out[i].size != 0 {
                        out[kept] = out[i];
                        kept += 1;
                    }
                }
                out.truncate(kept);
            }
        }
        Ok(())
    }

    fn progress(&self) -> Option<(u64, u64)> {
        Some(self.input.progress())
    }

    fn requests_bound(&self) -> Option<u64> {
        self.input.records_bound(RECORD)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Format, ReadOptions, TraceReader};

    fn record(time: u32, key: u64, size: u32) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&time.to_le_bytes());
        r.extend_from_slice(&key.to_le_bytes());
        r.extend_from_slice(&size.to_le_bytes());
        r.extend_from_slice(&(-1i64).to_le_bytes());
        r
    }

    /// Batches (of every size, across the input's chunk boundaries, skipping size-0
    /// records) hand out exactly the requests of the one-at-a-time path, and a truncated
    /// last record is the same error.
    #[test]
    fn batches_decode_like_single_requests() {
        let dir = tempfile::tempdir().unwrap();
        let mut data = Vec::new();
        // More than one 256 KiB input chunk, which 24 does not divide.
        for i in 0..30_000u64 {
            let size = if i % 7 == 3 { 0 } else { (i % 100) as u32 + 1 };
            data.extend(record(i as u32 / 10, i * 31 % 5_000, size));
        }
        let whole = dir.path().join("t.oracleGeneral.bin");
        std::fs::write(&whole, &data).unwrap();
        data.extend_from_slice(&[1, 2, 3]);
        let cut = dir.path().join("cut.oracleGeneral.bin");
        std::fs::write(&cut, &data).unwrap();
        let open = |p: &std::path::Path| {
            crate::open(p, Some(Format::OracleGeneral), &ReadOptions::default()).unwrap()
        };
        for path in [&whole, &cut] {
            let mut one = open(path);
            let mut single = Vec::new();
            let single_end = loop {
                match one.next_request() {
                    Ok(Some(r)) => single.push(r),
                    Ok(None) => break None,
                    Err(e) => break Some(e.to_string()),
                }
            };
            for max in [1, 5, 1024, 100_000] {
                let mut batched = open(path);
                let mut got = Vec::new();
                let end = loop {
                    let before = got.len();
                    match batched.next_batch(&mut got, max) {
                        Ok(()) if got.len() == before => break None,
                        Ok(()) => assert!(got.len() - before <= max),
                        Err(e) => break Some(e.to_string()),
                    }
                };
                assert_eq!(got, single, "max {max}");
                assert_eq!(end, single_end, "max {max}");
            }
            assert_eq!(single.len(), (0..30_000).filter(|i| i % 7 != 3).count());
        }
    }

    /// The file's size over the record size bounds the requests (records of size 0 are
    /// skipped, so it is a bound, not a count); a compressed file's is unknown up front.
    #[test]
    fn the_file_size_bounds_the_requests() {
        let dir = tempfile::tempdir().unwrap();
        let mut data = Vec::new();
        for i in 0..1_000u64 {
            data.extend(record(i as u32, i % 300, (i % 5) as u32));
        }
        let plain = dir.path().join("t.oracleGeneral.bin");
        std::fs::write(&plain, &data).unwrap();
        let packed = dir.path().join("t.oracleGeneral.bin.zst");
        std::fs::write(&packed, zstd::encode_all(&data[..], 1).unwrap()).unwrap();
        let open = |p: &std::path::Path| {
            crate::open(p, Some(Format::OracleGeneral), &ReadOptions::default()).unwrap()
        };
        let mut reader = open(&plain);
        assert_eq!(reader.requests_bound(), Some(1_000));
        let mut n = 0;
        while reader.next_request().unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, 800, "size-0 records are skipped");
        assert_eq!(open(&packed).requests_bound(), None);
    }
}
