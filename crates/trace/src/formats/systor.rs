//! SNIA SYSTOR'17 VDI block traces: CSV with header `Timestamp,Response,IOType,LUN,Offset,Size`,
//! Timestamp in Unix seconds (fractional), IOType `R` or `W`, Offset and Size in bytes.
//!
//! Key: the I/O's byte offset, with the LUN folded in by [`crate::block::volume_key`].
//! The header line is skipped wherever the first line is not a record.

use crate::block::{BlockEmitter, BlockIo};
use crate::input::Input;
use crate::parse::{fields_array, parse_time, parse_u64, snippet, trim, TIME_EXPECTED};
use crate::source::Source;
use crate::{ReadOptions, Request, TraceError, TraceReader};

pub(crate) struct SystorReader {
    input: Input,
    blocks: BlockEmitter,
    first: bool,
}

impl SystorReader {
    pub(crate) fn new(source: Source, opts: &ReadOptions) -> Self {
        SystorReader {
            input: Input::new(source),
            blocks: BlockEmitter::new(opts),
            first: true,
        }
    }
}

fn parse_line(line: &[u8]) -> Result<BlockIo, String> {
    let (f, n) = fields_array::<6>(line, b',');
    if n < 6 {
        return Err(format!(
            "expected `Timestamp,Response,IOType,LUN,Offset,Size`, found {n} fields in `{}`",
            snippet(line)
        ));
    }
    let bad = |i: usize, what: &str| {
        format!(
            "expected {what} in field {}, found `{}`",
            i + 1,
            snippet(trim(f[i]))
        )
    };
    let time = parse_time(f[0]).ok_or_else(|| bad(0, TIME_EXPECTED))?;
    let write = match trim(f[2]) {
        t if t.eq_ignore_ascii_case(b"r") || t.eq_ignore_ascii_case(b"read") => false,
        t if t.eq_ignore_ascii_case(b"w") || t.eq_ignore_ascii_case(b"write") => true,
        _ => return Err(bad(2, "an IOType of R or W")),
    };
    let lun = parse_u64(f[3]).ok_or_else(|| bad(3, "a LUN"))?;
    let offset = parse_u64(f[4]).ok_or_else(|| bad(4, "a byte offset"))?;
    let len = parse_u64(f[5]).ok_or_else(|| bad(5, "a size in bytes"))?;
    Ok(BlockIo {
        time,
        volume: lun,
        key: offset,
        offset,
        len,
        write,
    })
}

impl TraceReader for SystorReader {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        if let Some(r) = self.blocks.pending() {
            return Ok(Some(r));
        }
        while let Some(line) = self.input.line()? {
            if trim(line).is_empty() {
                continue;
            }
            let first = std::mem::replace(&mut self.first, false);
            if first && !trim(line).first().is_some_and(u8::is_ascii_digit) {
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
