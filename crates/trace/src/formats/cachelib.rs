//! Meta CacheLib cachebench replay traces, CSV with a header naming the columns (their order
//! differs between files, so columns are found by name). Two kinds:
//!
//! * kvcache: `op_time,key,key_size,op,op_count,size,...`; op GET/GET_LEASE → `Get`,
//!   SET/SET_LEASE → `Put`, DELETE → `Delete`; size = key_size + size (key plus value, the
//!   convention used for Twitter traces too).
//! * block_chunk (Tectonic): `op_time,block_id,block_id_size,io_size,io_offset,...,op_name,op_count,...`;
//!   `getChunkData.*` → `Get`, `putChunk.*` → `Put`; key = block_id, size = io_size,
//!   offset = io_offset.
//!
//! Each row stands for `op_count` identical requests (expanded here). Keys are hashed
//! (decimal keys kept as numbers).

use crate::input::Input;
use crate::options::too_many_requests;
use crate::parse::{fields_array, key_of, parse_time, parse_u64, snippet, trim, TIME_EXPECTED};
use crate::source::Source;
use crate::{Op, ReadOptions, Request, TraceError, TraceReader};

/// The widest header handled; columns past it are ignored.
const MAX_COLS: usize = 32;

/// Column positions (0-based) found in the header.
#[derive(Clone, Copy, Debug)]
struct Columns {
    time: usize,
    key: usize,
    op: usize,
    count: Option<usize>,
    key_size: Option<usize>,
    size: Option<usize>,
    offset: Option<usize>,
    /// Block-chunk layout: op names like `getChunkData.Permanent`.
    block: bool,
}

impl Columns {
    fn from_header(header: &[u8]) -> Result<Self, String> {
        let (names, n) = fields_array::<MAX_COLS>(header, b',');
        let find = |name: &str| {
            names[..n.min(MAX_COLS)]
                .iter()
                .position(|c| trim(c).eq_ignore_ascii_case(name.as_bytes()))
        };
        let need = |name: &str| {
            find(name).ok_or_else(|| {
                format!(
                    "cachelib header lacks column `{name}`; found `{}`",
                    snippet(header)
                )
            })
        };
        let block = find("block_id").is_some();
        Ok(if block {
            Columns {
                time: need("op_time")?,
                key: need("block_id")?,
                op: need("op_name")?,
                count: find("op_count"),
                key_size: None,
                size: Some(need("io_size")?),
                offset: find("io_offset"),
                block,
            }
        } else {
            Columns {
                time: need("op_time")?,
                key: need("key")?,
                op: need("op")?,
                count: find("op_count"),
                key_size: find("key_size"),
                size: find("size"),
                offset: None,
                block,
            }
        })
    }
}

fn kv_op(name: &[u8]) -> Option<Op> {
    Some(match trim(name) {
        b"GET" | b"GET_LEASE" | b"get" | b"get_lease" => Op::Get,
        b"SET" | b"SET_LEASE" | b"set" | b"set_lease" => Op::Put,
        b"DELETE" | b"delete" => Op::Delete,
        _ => return None,
    })
}

fn block_op(name: &[u8]) -> Option<Op> {
    let lower = trim(name).to_ascii_lowercase();
    if lower.starts_with(b"get") {
        Some(Op::Get)
    } else if lower.starts_with(b"put") {
        Some(Op::Put)
    } else if lower.starts_with(b"del") {
        Some(Op::Delete)
    } else {
        None
    }
}

pub(crate) struct CachelibReader {
    input: Input,
    cols: Columns,
    /// The largest `op_count` a row may state.
    max_count: u64,
    /// Copies of `last` still to hand out for the current row's `op_count`.
    repeat: u64,
    last: Request,
}

impl CachelibReader {
    pub(crate) fn new(source: Source, opts: &ReadOptions) -> Result<Self, TraceError> {
        let mut input = Input::new(source);
        let header = match input.line()? {
            Some(h) => Columns::from_header(h),
            None => Err("empty file: expected a cachelib CSV header".to_string()),
        };
        let cols = header.map_err(|msg| input.line_error(msg))?;
        Ok(CachelibReader {
            input,
            cols,
            max_count: opts.max_record_requests,
            repeat: 0,
            last: Request::default(),
        })
    }
}

fn parse_line(line: &[u8], c: &Columns, max_count: u64) -> Result<(Request, u64), String> {
    let (f, n) = fields_array::<MAX_COLS>(line, b',');
    let needed = [
        Some(c.time),
        Some(c.key),
        Some(c.op),
        c.count,
        c.key_size,
        c.size,
        c.offset,
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(0)
        + 1;
    if n < needed {
        return Err(format!(
            "expected at least {needed} fields as the header names, found {n} in `{}`",
            snippet(line)
        ));
    }
    let bad = |i: usize, what: &str| {
        format!(
            "expected {what} in column {}, found `{}`",
            i + 1,
            snippet(trim(f[i]))
        )
    };
    let number = |col: Option<usize>, what: &str, default: u64| match col {
        Some(i) => parse_u64(f[i]).ok_or_else(|| bad(i, what)),
        None => Ok(default),
    };
    let time = parse_time(f[c.time]).ok_or_else(|| bad(c.time, TIME_EXPECTED))?;
    let op = if c.block {
        block_op(f[c.op]).ok_or_else(|| bad(c.op, "an op name starting with get, put or delete"))?
    } else {
        kv_op(f[c.op]).ok_or_else(|| bad(c.op, "an op (GET, GET_LEASE, SET, SET_LEASE, DELETE)"))?
    };
    let count = number(c.count, "an op count", 1)?;
    if count > max_count {
        return Err(too_many_requests(
            &format!("op_count {count}"),
            count,
            max_count,
        ));
    }
    let (key_size, value_size) = (
        number(c.key_size, "a key size", 0)?,
        number(c.size, "a size", 1)?,
    );
    let size = key_size
        .checked_add(value_size)
        .and_then(|s| u32::try_from(s).ok())
        .ok_or_else(|| format!("object size {key_size} + {value_size} is 4 GiB or more"))?;
    let offset = number(c.offset, "an offset", 0)?;
    let key = key_of(f[c.key]);
    Ok((
        Request {
            time,
            key,
            size,
            op,
            offset,
        },
        count,
    ))
}

impl TraceReader for CachelibReader {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        if self.repeat > 0 {
            self.repeat -= 1;
            return Ok(Some(self.last));
        }
        while let Some(line) = self.input.line()? {
            if trim(line).is_empty() {
                continue;
            }
            match parse_line(line, &self.cols, self.max_count) {
                Ok((_, 0)) => continue,
                Ok((req, count)) => {
                    self.last = req;
                    self.repeat = count - 1;
                    return Ok(Some(req));
                }
                Err(msg) => return Err(self.input.line_error(msg)),
            }
        }
        Ok(None)
    }

    fn progress(&self) -> Option<(u64, u64)> {
        Some(self.input.progress())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_columns_by_name() {
        let c = Columns::from_header(
            b"op_time,key,key_size,op,op_count,size,cache_hits,usecase,sub_usecase,ttl",
        )
        .unwrap();
        let (r, n) = parse_line(b"603347270,2748536847,56,GET,2,21,2,1,1,0", &c, 2).unwrap();
        assert_eq!((r.key, r.size, r.op, n), (2_748_536_847, 77, Op::Get, 2));
    }

    #[test]
    fn block_columns_by_name() {
        let c = Columns::from_header(
            b"op_time,block_id,block_id_size,io_size,io_offset,user_name,user_namespace,op_name,op_count,host_name,rs_shard_id",
        )
        .unwrap();
        assert!(c.block);
        let (r, n) = parse_line(
            b"1702598275,f99f6c8061f76eaa-6d72cc99bab466f7,40,8388608,4096,5,3,putChunk.Permanent,1,3,12",
            &c,
            1,
        )
        .unwrap();
        assert_eq!((r.size, r.offset, r.op, n), (8_388_608, 4096, Op::Put, 1));
    }

    #[test]
    fn missing_column_is_named() {
        let err = Columns::from_header(b"op_time,key,size").unwrap_err();
        assert!(err.contains("`op`"), "{err}");
    }
}
