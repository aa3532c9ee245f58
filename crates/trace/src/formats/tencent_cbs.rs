//! Tencent Cloud Block Storage traces (SNIA IOTTA, 2018): CSV without header,
//! `Timestamp,Offset,Size,IOType,VolumeID`, Timestamp in Unix seconds, Offset and Size in
//! 512-byte sectors, IOType 0 = read, 1 = write.
//!
//! Key: the I/O's byte offset within its volume, with the volume folded in by
//! [`crate::block::volume_key`]. Size: bytes.

use crate::block::{BlockEmitter, BlockIo};
use crate::input::Input;
use crate::parse::{fields_array, parse_time, parse_u64, snippet, trim, TIME_EXPECTED};
use crate::source::Source;
use crate::{ReadOptions, Request, TraceError, TraceReader};

const SECTOR: u64 = 512;

pub(crate) struct TencentCbsReader {
    input: Input,
    blocks: BlockEmitter,
}

impl TencentCbsReader {
    pub(crate) fn new(source: Source, opts: &ReadOptions) -> Self {
        TencentCbsReader {
            input: Input::new(source),
            blocks: BlockEmitter::new(opts),
        }
    }
}

fn parse_line(line: &[u8]) -> Result<BlockIo, String> {
    let (f, n) = fields_array::<5>(line, b',');
    if n < 5 {
        return Err(format!(
            "expected `Timestamp,Offset,Size,IOType,VolumeID`, found {n} fields in `{}`",
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
    let sectors = |i: usize, what: &str| {
        parse_u64(f[i])
            .and_then(|s| s.checked_mul(SECTOR))
            .ok_or_else(|| bad(i, what))
    };
    let offset = sectors(1, "an offset in sectors")?;
    let len = sectors(2, "a size in sectors")?;
    let write = match trim(f[3]) {
        b"0" => false,
        b"1" => true,
        _ => return Err(bad(3, "an IOType of 0 (read) or 1 (write)")),
    };
    let volume = parse_u64(f[4]).ok_or_else(|| bad(4, "a volume id"))?;
    Ok(BlockIo {
        time,
        volume,
        key: offset,
        offset,
        len,
        write,
    })
}

impl TraceReader for TencentCbsReader {
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
