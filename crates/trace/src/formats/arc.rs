//! ARC paper traces (Megiddo & Modha, FAST'03), `.lis` files: each line is
//! `start_block num_blocks ignored request_number` and stands for `num_blocks` consecutive
//! page requests `start_block .. start_block + num_blocks - 1`. Pages are 512 bytes (the
//! `block_size` option); keys are page numbers; the traces have no time, so time is 0.
//! Only reads were traced; every request is an `Access`.

use crate::input::Input;
use crate::options::too_many_requests;
use crate::parse::{parse_u64, snippet, words};
use crate::source::Source;
use crate::{Op, ReadOptions, Request, TraceError, TraceReader};

pub(crate) struct ArcReader {
    input: Input,
    page_size: u32,
    /// The longest block range a line may state.
    max_range: u64,
    /// Pages of the current line still to hand out: next page, one past the last.
    next: u64,
    stop: u64,
}

impl ArcReader {
    pub(crate) fn new(source: Source, opts: &ReadOptions) -> Self {
        ArcReader {
            input: Input::new(source),
            page_size: opts.block_size,
            max_range: opts.max_record_requests,
            next: 0,
            stop: 0,
        }
    }

    fn page(&mut self) -> Request {
        let page = self.next;
        self.next += 1;
        Request {
            time: 0.0,
            key: page,
            size: self.page_size,
            op: Op::Access,
            offset: page.saturating_mul(u64::from(self.page_size)),
        }
    }
}

fn parse_line(line: &[u8], max_range: u64) -> Result<Option<(u64, u64)>, String> {
    let mut w = words(line);
    let Some(start) = w.next() else {
        return Ok(None);
    };
    let count = w.next();
    match (parse_u64(start), count.and_then(parse_u64)) {
        (Some(_), Some(n)) if n > max_range => Err(too_many_requests(
            &format!("a block range of {n} pages"),
            n,
            max_range,
        )),
        (Some(s), Some(n)) => match s.checked_add(n) {
            Some(stop) => Ok(Some((s, stop))),
            None => Err(format!("block range overflows in `{}`", snippet(line))),
        },
        _ => Err(format!(
            "expected `start_block num_blocks ignored request_number`, found `{}`",
            snippet(line)
        )),
    }
}

impl TraceReader for ArcReader {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        if self.next < self.stop {
            return Ok(Some(self.page()));
        }
        while let Some(line) = self.input.line()? {
            match parse_line(line, self.max_range) {
                Ok(Some((start, stop))) if start < stop => {
                    self.next = start;
                    self.stop = stop;
                    return Ok(Some(self.page()));
                }
                Ok(_) => continue,
                Err(msg) => return Err(self.input.line_error(msg)),
            }
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
