//! LIRS paper traces (Jiang & Zhang, SIGMETRICS'02): one decimal block number per line; a
//! line `*` is a checkpoint marker and is skipped, as are blank lines. Every request is an
//! `Access` of size 1 (the traces record no block size).

use crate::input::Input;
use crate::parse::{parse_u64, snippet, trim};
use crate::source::Source;
use crate::{Op, Request, TraceError, TraceReader};

pub(crate) struct LirsReader {
    input: Input,
}

impl LirsReader {
    pub(crate) fn new(source: Source) -> Self {
        LirsReader {
            input: Input::new(source),
        }
    }
}

impl TraceReader for LirsReader {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        while let Some(line) = self.input.line()? {
            let t = trim(line);
            if t.is_empty() || t == b"*" {
                continue;
            }
            let Some(block) = parse_u64(t) else {
                let msg = format!("expected a block number or `*`, found `{}`", snippet(t));
                return Err(self.input.line_error(msg));
            };
            return Ok(Some(Request {
                time: 0.0,
                key: block,
                size: 1,
                op: Op::Access,
                offset: 0,
            }));
        }
        Ok(None)
    }

    fn progress(&self) -> Option<(u64, u64)> {
        Some(self.input.progress())
    }

    fn has_timestamps(&self) -> bool {
        false
    }
}
