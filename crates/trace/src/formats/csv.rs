//! Generic CSV traces described by a libCacheSim-style column spec ([`CsvSpec`]).
//!
//! Without a spec only the two CSV layouts libCacheSim ships samples of are recognised, by
//! their header, and read with libCacheSim's documented spec for them. Ids follow
//! `obj-id-is-num`; without it, numbers are kept and other ids hashed. Requests are
//! `Access` unless an op column is given.

use crate::input::Input;
use crate::parse::{
    hash_key, parse_f64, parse_time, parse_u64, parse_u64_auto, snippet, trim, Fields,
    TIME_EXPECTED,
};
use crate::source::Source;
use crate::{CsvSpec, Op, ReadOptions, Request, TraceError, TraceReader};

/// The spec libCacheSim documents for a known header line, if `line` is one.
pub(crate) fn preset_for_header(line: &[u8]) -> Option<CsvSpec> {
    let squashed: Vec<u8> = line
        .iter()
        .filter(|c| !c.is_ascii_whitespace())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    let spec = match squashed.as_slice() {
        // libCacheSim's cloudPhysicsIO.csv.
        b"version,time,op,size,lbn" => {
            "time-col=2,obj-id-col=5,obj-size-col=4,obj-id-is-num=true,has-header=true"
        }
        // libCacheSim's twitter_cluster52.csv.
        b"#time,object,size,next_access_vtime" => {
            "time-col=1,obj-id-col=2,obj-size-col=3,obj-id-is-num=true,has-header=true"
        }
        _ => return None,
    };
    spec.parse().ok()
}

/// Parses an op name as CSV traces spell it.
pub(crate) fn op_from_name(name: &[u8]) -> Option<Op> {
    let name = trim(name);
    let mut lower = [0u8; 16];
    if name.len() > lower.len() {
        return None;
    }
    for (l, c) in lower.iter_mut().zip(name) {
        *l = c.to_ascii_lowercase();
    }
    Some(match &lower[..name.len()] {
        b"get" | b"gets" | b"read" | b"r" | b"get_lease" => Op::Get,
        b"set" | b"put" | b"add" | b"cas" | b"replace" | b"append" | b"prepend" | b"incr"
        | b"decr" | b"write" | b"w" | b"update" | b"set_lease" => Op::Put,
        b"delete" | b"del" | b"remove" => Op::Delete,
        b"access" => Op::Access,
        _ => return None,
    })
}

/// Whether the first line of a CSV is a header under `spec`: it starts with `#`, or a
/// column that must be numeric is not.
fn looks_like_header(line: &[u8], spec: &CsvSpec) -> bool {
    if trim(line).starts_with(b"#") {
        return true;
    }
    let numeric_cols = [spec.time_col, spec.obj_size_col]
        .into_iter()
        .flatten()
        .chain((spec.obj_id_is_num == Some(true)).then_some(spec.obj_id_col));
    Fields::new(line, spec.delimiter)
        .enumerate()
        .any(|(i, f)| numeric_cols.clone().any(|c| c == i + 1) && parse_f64(f).is_none())
}

pub(crate) struct CsvReader {
    input: Input,
    spec: CsvSpec,
    last_col: usize,
    skip_first: bool,
}

impl CsvReader {
    pub(crate) fn new(source: Source, opts: &ReadOptions) -> Result<Self, TraceError> {
        let first_line = source.head.split(|c| *c == b'\n').next().unwrap_or(&[]);
        let spec = match &opts.csv {
            Some(spec) => spec.clone(),
            None => preset_for_header(first_line).ok_or_else(|| {
                TraceError::format(
                    &source.path,
                    "csv needs a column spec, e.g. \
                     `time-col=1,obj-id-col=2,obj-size-col=3,has-header=true`",
                )
            })?,
        };
        let skip_first = spec
            .has_header
            .unwrap_or_else(|| looks_like_header(first_line, &spec));
        Ok(CsvReader {
            last_col: spec.last_col(),
            spec,
            input: Input::new(source),
            skip_first,
        })
    }
}

fn parse_line(line: &[u8], spec: &CsvSpec, last_col: usize) -> Result<Request, String> {
    let mut time: &[u8] = b"";
    let mut id: &[u8] = b"";
    let mut size: &[u8] = b"";
    let mut op: &[u8] = b"";
    let mut seen = 0;
    for (i, field) in Fields::new(line, spec.delimiter).take(last_col).enumerate() {
        let col = i + 1;
        seen = col;
        if col == spec.obj_id_col {
            id = field;
        }
        if Some(col) == spec.time_col {
            time = field;
        }
        if Some(col) == spec.obj_size_col {
            size = field;
        }
        if Some(col) == spec.op_col {
            op = field;
        }
    }
    if seen < last_col {
        return Err(format!(
            "expected at least {last_col} `{}`-separated fields, found {seen} in `{}`",
            spec.delimiter as char,
            snippet(line)
        ));
    }
    let bad = |what: &str, col: usize, field: &[u8]| {
        format!(
            "expected {what} in column {col}, found `{}`",
            snippet(trim(field))
        )
    };
    let key = match spec.obj_id_is_num {
        Some(true) => parse_u64_auto(id).ok_or_else(|| bad("a numeric id", spec.obj_id_col, id))?,
        Some(false) => hash_key(trim(id)),
        None => {
            let t = trim(id);
            parse_u64(t).unwrap_or_else(|| hash_key(t))
        }
    };
    let time = match spec.time_col {
        Some(c) => parse_time(time).ok_or_else(|| bad(TIME_EXPECTED, c, time))?,
        None => 0.0,
    };
    let size = match spec.obj_size_col {
        Some(c) => parse_u64(size)
            .and_then(|s| u32::try_from(s).ok())
            .ok_or_else(|| bad("a size in bytes below 2^32", c, size))?,
        None => 1,
    };
    let op = match spec.op_col {
        Some(c) => op_from_name(op).ok_or_else(|| {
            bad(
                "an op (get, gets, set, add, cas, replace, append, prepend, delete, read, write)",
                c,
                op,
            )
        })?,
        None => Op::Access,
    };
    Ok(Request {
        time,
        key,
        size,
        op,
        offset: 0,
    })
}

impl TraceReader for CsvReader {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        loop {
            let Some(line) = self.input.line()? else {
                return Ok(None);
            };
            if self.skip_first {
                self.skip_first = false;
                continue;
            }
            if trim(line).is_empty() {
                continue;
            }
            match parse_line(line, &self.spec, self.last_col) {
                Ok(r) => return Ok(Some(r)),
                Err(msg) => return Err(self.input.line_error(msg)),
            }
        }
    }

    fn progress(&self) -> Option<(u64, u64)> {
        Some(self.input.progress())
    }

    fn has_timestamps(&self) -> bool {
        self.spec.time_col.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_for_libcachesim_samples() {
        let s = preset_for_header(b"version,time,op,size,lbn").unwrap();
        assert_eq!(
            (s.time_col, s.obj_id_col, s.obj_size_col),
            (Some(2), 5, Some(4))
        );
        let s = preset_for_header(b"# time, object, size, next_access_vtime").unwrap();
        assert_eq!(
            (s.time_col, s.obj_id_col, s.obj_size_col),
            (Some(1), 2, Some(3))
        );
        assert!(preset_for_header(b"a,b,c").is_none());
    }

    #[test]
    fn header_guess() {
        let spec: CsvSpec = "time-col=1,obj-id-col=2,obj-size-col=3".parse().unwrap();
        assert!(looks_like_header(b"time,key,size", &spec));
        assert!(looks_like_header(b"# anything", &spec));
        assert!(!looks_like_header(b"1,abc,3", &spec));
    }

    #[test]
    fn ops() {
        assert_eq!(op_from_name(b"GET"), Some(Op::Get));
        assert_eq!(op_from_name(b" set "), Some(Op::Put));
        assert_eq!(op_from_name(b"Delete"), Some(Op::Delete));
        assert_eq!(op_from_name(b"frobnicate"), None);
        assert_eq!(op_from_name(b"averyveryverylongopname"), None);
    }

    #[test]
    fn line_errors_name_the_column() {
        let spec: CsvSpec = "time-col=1,obj-id-col=2,obj-size-col=3".parse().unwrap();
        let err = parse_line(b"1,k,big", &spec, 3).unwrap_err();
        assert_eq!(
            err,
            "expected a size in bytes below 2^32 in column 3, found `big`"
        );
        let err = parse_line(b"1,k", &spec, 3).unwrap_err();
        assert!(err.contains("at least 3"), "{err}");
        let r = parse_line(b"1.5, 42 ,7", &spec, 3).unwrap();
        assert_eq!((r.time, r.key, r.size, r.op), (1.5, 42, 7, Op::Access));
    }
}
