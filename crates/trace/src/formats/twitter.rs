//! Twitter Twemcache production traces (twitter/cache-trace, OSDI'20): CSV without header,
//! `timestamp,anonymized_key,key_size,value_size,client_id,operation,TTL`.
//!
//! Size = key_size + value_size, as libCacheSim's Twitter reader computes it. Ops:
//! get/gets → `Get`; set/add/cas/replace/append/prepend/incr/decr → `Put`; delete →
//! `Delete`. Keys are hashed (numeric keys kept). Unlike libCacheSim's binary Twitter
//! reader, gets of zero-size values are kept: every line is a request.

use crate::input::Input;
use crate::parse::{fields_array, key_of, parse_time, parse_u64, snippet, trim, TIME_EXPECTED};
use crate::source::Source;
use crate::{Op, Request, TraceError, TraceReader};

pub(crate) struct TwitterReader {
    input: Input,
}

impl TwitterReader {
    pub(crate) fn new(source: Source) -> Self {
        TwitterReader {
            input: Input::new(source),
        }
    }
}

/// The op of a Twemcache command name.
pub(crate) fn twitter_op(name: &[u8]) -> Option<Op> {
    Some(match trim(name) {
        b"get" | b"gets" => Op::Get,
        b"set" | b"add" | b"cas" | b"replace" | b"append" | b"prepend" | b"incr" | b"decr" => {
            Op::Put
        }
        b"delete" => Op::Delete,
        _ => return None,
    })
}

fn parse_line(line: &[u8]) -> Result<Request, String> {
    let (f, n) = fields_array::<7>(line, b',');
    if n < 6 {
        return Err(format!(
            "expected `timestamp,key,key_size,value_size,client_id,op,ttl`, found {n} fields in `{}`",
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
    let key_size = parse_u64(f[2]).ok_or_else(|| bad(2, "a key size"))?;
    let value_size = parse_u64(f[3]).ok_or_else(|| bad(3, "a value size"))?;
    let op = twitter_op(f[5]).ok_or_else(|| {
        bad(
            5,
            "an op (get, gets, set, add, cas, replace, append, prepend, incr, decr, delete)",
        )
    })?;
    let size = key_size
        .checked_add(value_size)
        .and_then(|s| u32::try_from(s).ok())
        .ok_or_else(|| bad(3, "a value size below 4 GiB"))?;
    Ok(Request {
        time,
        key: key_of(f[1]),
        size,
        op,
        offset: 0,
    })
}

impl TraceReader for TwitterReader {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        while let Some(line) = self.input.line()? {
            if trim(line).is_empty() {
                continue;
            }
            return match parse_line(line) {
                Ok(r) => Ok(Some(r)),
                Err(msg) => Err(self.input.line_error(msg)),
            };
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
    fn size_is_key_plus_value() {
        let r = parse_line(b"0,q:q:1:8WTwl7huJeQ,17,249,1,get,0").unwrap();
        assert_eq!((r.size, r.op, r.time), (266, Op::Get, 0.0));
        let r = parse_line(b"3,k,1,2,9,cas,0").unwrap();
        assert_eq!(r.op, Op::Put);
        let err = parse_line(b"3,k,1,2,9,flush,0").unwrap_err();
        assert!(err.contains("field 6") && err.contains("`flush`"), "{err}");
    }
}
