//! Plain text traces: one key per line, no time or size (libCacheSim's `txt`). Decimal keys
//! are kept as numbers, anything else is hashed; blank lines are skipped. A line with more
//! than one whitespace-separated field is an error. Every request is an `Access` of size 1.

use crate::input::Input;
use crate::parse::{key_of, snippet, trim, words};
use crate::source::Source;
use crate::{Op, Request, TraceError, TraceReader};

pub(crate) struct TxtReader {
    input: Input,
}

impl TxtReader {
    pub(crate) fn new(source: Source) -> Self {
        TxtReader {
            input: Input::new(source),
        }
    }
}

impl TraceReader for TxtReader {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        while let Some(line) = self.input.line()? {
            let key = trim(line);
            if key.is_empty() {
                continue;
            }
            // A key never holds whitespace here: a line with several fields is another
            // format (arc, csv, ...) read as txt, and hashing it whole would invent keys.
            if key.iter().any(u8::is_ascii_whitespace) {
                let msg = format!(
                    "expected one key per line, found {} fields in `{}` (is it another format? pass --format)",
                    words(key).count(),
                    snippet(key)
                );
                return Err(self.input.line_error(msg));
            }
            return Ok(Some(Request {
                time: 0.0,
                key: key_of(key),
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
