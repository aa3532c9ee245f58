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

    fn progress(&self) -> Option<(u64, u64)> {
        Some(self.input.progress())
    }
}
