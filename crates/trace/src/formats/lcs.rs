//! libCacheSim's `lcs` binary: an 8192-byte header (start magic, version, trace statistics,
//! end magic) followed by packed little-endian records whose layout the version selects.
//!
//! Versions 1-8 are read. v1 is the `oracleGeneral` record; v2 adds an op and tenant; v3+
//! widen the size to 64 bits and add a TTL (v4-v8 append feature words, ignored). Records of
//! size 0 are skipped, as libCacheSim does. Requests are `Access`, as libCacheSim's
//! simulator treats them; with `rw_ops` the v2+ op field maps reads to `Get`, writes to
//! `Put` and deletes to `Delete`.

use super::{le, oracle_general};
use crate::input::Input;
use crate::source::Source;
use crate::{Op, ReadOptions, Request, TraceError, TraceReader};

/// The first and last eight bytes of every lcs header.
pub(crate) const LCS_MAGIC: u64 = 0x1234_5678_9abc_def0;
const HEADER: usize = 8192;

pub(crate) struct LcsReader {
    input: Input,
    version: u64,
    record: usize,
    rw_ops: bool,
}

/// Record length of each version (index = version).
const RECORD_LEN: [usize; 9] = [0, 24, 28, 36, 40, 44, 52, 68, 100];

impl LcsReader {
    pub(crate) fn new(source: Source, opts: &ReadOptions) -> Result<Self, TraceError> {
        let mut input = Input::new(source);
        let fields = match input.record(HEADER) {
            Ok(Some(h)) => Some((
                le::u64_at(h, 0),
                le::u64_at(h, 8),
                le::u64_at(h, HEADER - 8),
            )),
            Ok(None) | Err(TraceError::Record { .. }) => None,
            Err(e) => return Err(e),
        };
        let Some((start, version, end)) = fields else {
            return Err(
                input.record_error(format!("truncated lcs header: expected {HEADER} bytes"))
            );
        };
        if start != LCS_MAGIC || end != LCS_MAGIC {
            return Err(input.record_error(format!(
                "not an lcs trace: header magic is {start:#x}/{end:#x}, expected {LCS_MAGIC:#x}"
            )));
        }
        let record = match RECORD_LEN.get(version as usize) {
            Some(&len) if len > 0 => len,
            _ => {
                return Err(input.record_error(format!(
                    "unsupported lcs version {version}, expected 1 to 8"
                )))
            }
        };
        Ok(LcsReader {
            input,
            version,
            record,
            rw_ops: opts.rw_ops,
        })
    }

    /// libCacheSim's `req_op_e` codes.
    fn op(&self, code: u8) -> Op {
        if !self.rw_ops {
            return Op::Access;
        }
        match code {
            1 | 2 | 12 => Op::Get,
            3..=8 | 10 | 11 | 13 | 14 => Op::Put,
            9 => Op::Delete,
            _ => Op::Access,
        }
    }
}

impl TraceReader for LcsReader {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        loop {
            let req = if self.version == 1 {
                match self.input.array::<{ oracle_general::RECORD }>()? {
                    Some(rec) => oracle_general::decode(rec),
                    None => return Ok(None),
                }
            } else {
                let Some(rec) = self.input.record(self.record)? else {
                    return Ok(None);
                };
                let (size, op_at) = if self.version == 2 {
                    (u64::from(le::u32_at(rec, 12)), 16)
                } else {
                    (le::u64_at(rec, 12), 20)
                };
                let (time, key, code) = (le::u32_at(rec, 0), le::u64_at(rec, 4), rec[op_at]);
                // Objects are below 4 GiB here; clamping a larger one would change the
                // byte figures silently.
                let Ok(size) = u32::try_from(size) else {
                    return Err(self.input.record_error(format!(
                        "object size {size} is 4 GiB or more (expected below 2^32 bytes)"
                    )));
                };
                Request {
                    time: f64::from(time),
                    key,
                    size,
                    op: self.op(code),
                    offset: 0,
                }
            };
            if req.size != 0 {
                return Ok(Some(req));
            }
        }
    }

    fn progress(&self) -> Option<(u64, u64)> {
        Some(self.input.progress())
    }
}
