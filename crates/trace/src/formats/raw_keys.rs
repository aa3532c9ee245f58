//! Raw arrays of integer keys (`bin32le`, `bin32be`, `bin64le`, `bin64be`), the layout of
//! the cache2k, Scarab and Corda traces: no header, no time, no size. Each key is one
//! `Access` of size 1; 32-bit keys are zero-extended.

use crate::input::Input;
use crate::source::Source;
use crate::{Op, Request, TraceError, TraceReader};

pub(crate) struct RawKeysReader {
    input: Input,
    width: usize,
    big_endian: bool,
}

impl RawKeysReader {
    pub(crate) fn new(source: Source, width: usize, big_endian: bool) -> Self {
        RawKeysReader {
            input: Input::new(source),
            width,
            big_endian,
        }
    }
}

impl TraceReader for RawKeysReader {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        let Some(rec) = self.input.record(self.width)? else {
            return Ok(None);
        };
        let mut bytes = [0u8; 8];
        let key = if self.width == 4 {
            bytes[..4].copy_from_slice(rec);
            let word = [bytes[0], bytes[1], bytes[2], bytes[3]];
            u64::from(if self.big_endian {
                u32::from_be_bytes(word)
            } else {
                u32::from_le_bytes(word)
            })
        } else {
            bytes.copy_from_slice(rec);
            if self.big_endian {
                u64::from_be_bytes(bytes)
            } else {
                u64::from_le_bytes(bytes)
            }
        };
        Ok(Some(Request {
            time: 0.0,
            key,
            size: 1,
            op: Op::Access,
            offset: 0,
        }))
    }

    fn progress(&self) -> Option<(u64, u64)> {
        Some(self.input.progress())
    }

    fn has_timestamps(&self) -> bool {
        false
    }
}
