//! ParSplice key-value traces (Mantle paper, CCGrid'18), in both shapes:
//!
//! * the raw `semanticPerf.<rank>` logs, `unix_seconds,event,db_index,key`. The in-memory
//!   tiers (ranks 3 and 4) log one logical get as `DBMemoryGet` + `DBMemoryMRUGet` and one
//!   put as `DBMemoryPut` + `DBMemoryPutUnique` + `DBMemoryMRUPut`: the request is emitted
//!   at `DBMemoryGet` / `DBMemoryPut` and the companion lines are skipped. The persistent
//!   tier (rank 2) logs `LDBGet` / `LDBPut` (one line each) and `LDBCreate` (no key,
//!   skipped).
//! * the derived CSV with header `timestamp_s,op,key`, op `GET` or `PUT`.
//!
//! Keys are the 64-bit state ids as logged (a non-zero `db_index` is folded in with
//! [`crate::block::volume_key`]); size 1 (the logs record none); time in seconds (1 s
//! resolution, so replay order is line order).

use crate::block::volume_key;
use crate::input::Input;
use crate::parse::{fields_array, parse_f64, parse_u64, snippet, trim};
use crate::source::Source;
use crate::{Op, Request, TraceError, TraceReader};

pub(crate) struct ParspliceReader {
    input: Input,
}

impl ParspliceReader {
    pub(crate) fn new(source: Source) -> Self {
        ParspliceReader {
            input: Input::new(source),
        }
    }
}

/// What a line stands for.
enum Event {
    /// A request at `(db_index, key)`.
    Request(Op, u64, u64),
    /// A companion line of a request already emitted, or a line without a key.
    Skip,
}

fn event(name: &[u8]) -> Option<(Op, bool)> {
    // (op, whether the line is the one that counts)
    Some(match name {
        b"DBMemoryGet" | b"LDBGet" => (Op::Get, true),
        b"DBMemoryPut" | b"LDBPut" => (Op::Put, true),
        b"DBMemoryMRUGet" => (Op::Get, false),
        b"DBMemoryPutUnique" | b"DBMemoryMRUPut" | b"LDBCreate" => (Op::Put, false),
        _ => return None,
    })
}

fn parse_line(line: &[u8]) -> Result<(f64, Event), String> {
    let (f, n) = fields_array::<4>(line, b',');
    let time = parse_f64(f[0]).ok_or_else(|| {
        format!(
            "expected `unix_seconds,event,db_index,key` or `timestamp_s,op,key`, found `{}`",
            snippet(line)
        )
    })?;
    let name = trim(f[1]);
    let numeric = |i: usize, what: &str| {
        parse_u64(f[i]).ok_or_else(|| {
            format!(
                "expected {what} in field {}, found `{}`",
                i + 1,
                snippet(trim(f[i]))
            )
        })
    };
    let derived = match name {
        b"GET" | b"get" => Some(Op::Get),
        b"PUT" | b"put" => Some(Op::Put),
        _ => None,
    };
    if let Some(op) = derived {
        return Ok((time, Event::Request(op, 0, numeric(2, "a key")?)));
    }
    match event(name) {
        Some((op, true)) => {
            if n < 4 {
                return Err(format!(
                    "expected 4 fields for `{}`, found {n}",
                    snippet(name)
                ));
            }
            Ok((
                time,
                Event::Request(op, numeric(2, "a db index")?, numeric(3, "a key")?),
            ))
        }
        Some((_, false)) => Ok((time, Event::Skip)),
        None => Err(format!(
            "unknown event `{}` (expected GET, PUT, DBMemoryGet, DBMemoryMRUGet, DBMemoryPut, \
             DBMemoryPutUnique, DBMemoryMRUPut, LDBGet, LDBPut or LDBCreate)",
            snippet(name)
        )),
    }
}

impl TraceReader for ParspliceReader {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        while let Some(line) = self.input.line()? {
            let t = trim(line);
            if t.is_empty() || t.starts_with(b"timestamp_s") {
                continue;
            }
            match parse_line(t) {
                Ok((time, Event::Request(op, db, key))) => {
                    return Ok(Some(Request {
                        time,
                        key: volume_key(db, key),
                        size: 1,
                        op,
                        offset: 0,
                    }))
                }
                Ok((_, Event::Skip)) => continue,
                Err(msg) => return Err(self.input.line_error(msg)),
            }
        }
        Ok(None)
    }

    fn progress(&self) -> Option<(u64, u64)> {
        Some(self.input.progress())
    }
}
