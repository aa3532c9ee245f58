//! What a user can tell the readers beyond the format: the CSV column spec and how block
//! traces become requests.

use std::str::FromStr;

use crate::TraceError;

/// Options shared by every reader; [`ReadOptions::default`] is what `mantle` uses without flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// Column spec for the `csv` format. Without one, `csv` only reads files whose header it
    /// recognises (libCacheSim's `cloudPhysicsIO.csv` and `twitter_cluster52.csv` layouts).
    pub csv: Option<CsvSpec>,
    /// Block size in bytes used when block I/Os are expanded into blocks (and by `arc`,
    /// whose page requests get this size). Default 512.
    pub block_size: u32,
    /// Block traces (`vscsi`, `msr`, `tencent-cbs`, `systor`): when false (the default, and
    /// libCacheSim's convention) one I/O is one request for the object at its start offset
    /// with the I/O length as size; when true each I/O becomes one request per
    /// `block_size` block it touches.
    pub expand_blocks: bool,
    /// Traces whose records say read or write but whose requests are lookups (`Access`) by
    /// default — block traces and `lcs` v2+ — report reads as `Get` and writes as `Put`.
    pub rw_ops: bool,
    /// The most requests one record may stand for: an `arc` block range, a `cachelib`
    /// `op_count`, a block I/O expanded into blocks. A record asking for more is an error
    /// naming the file and line (or byte offset), so a few bytes of trace cannot demand
    /// endless work. Default [`ReadOptions::DEFAULT_MAX_RECORD_REQUESTS`].
    pub max_record_requests: u64,
}

impl ReadOptions {
    /// 2^20: far above what real traces state per record (the ARC traces' longest range,
    /// CacheLib's op counts, a 512 MiB I/O in 512-byte blocks), and about 10 ms of replay.
    pub const DEFAULT_MAX_RECORD_REQUESTS: u64 = 1 << 20;
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            csv: None,
            block_size: 512,
            expand_blocks: false,
            rw_ops: false,
            max_record_requests: Self::DEFAULT_MAX_RECORD_REQUESTS,
        }
    }
}

/// Which columns of a CSV trace hold what, in libCacheSim's `-t` syntax:
/// `time-col=2,obj-id-col=5,obj-size-col=4,op-col=3,delimiter=,,has-header=true,obj-id-is-num=true`.
/// Columns are 1-based.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvSpec {
    /// Column of the timestamp in seconds (none: time is 0).
    pub time_col: Option<usize>,
    /// Column of the object id (required).
    pub obj_id_col: usize,
    /// Column of the object size in bytes (none: size 1).
    pub obj_size_col: Option<usize>,
    /// Column of the operation (`get`, `set`, `delete`, `read`, `write`, ...; none: `Access`).
    pub op_col: Option<usize>,
    /// Field separator byte. Default `,`.
    pub delimiter: u8,
    /// Whether the first line is a header; `None` guesses from the first line.
    pub has_header: Option<bool>,
    /// Whether ids are numbers (`true`: a non-number is an error; `false`: ids are hashed
    /// as strings; `None`: numbers are kept and anything else is hashed).
    pub obj_id_is_num: Option<bool>,
}

impl CsvSpec {
    /// A spec with only the id column set and every other field at its default.
    pub fn with_id_col(obj_id_col: usize) -> Self {
        CsvSpec {
            time_col: None,
            obj_id_col,
            obj_size_col: None,
            op_col: None,
            delimiter: b',',
            has_header: None,
            obj_id_is_num: None,
        }
    }

    /// The highest column the reader has to reach on every line.
    pub(crate) fn last_col(&self) -> usize {
        [
            self.time_col,
            Some(self.obj_id_col),
            self.obj_size_col,
            self.op_col,
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(self.obj_id_col)
    }
}

/// Keys libCacheSim accepts that carry nothing Mantle's requests can hold; accepted so a spec
/// copied from a libCacheSim command line still works.
const IGNORED_KEYS: [&str; 6] = [
    "ttl-col",
    "cnt-col",
    "tenant-col",
    "next-access-col",
    "feature-cols",
    "block-size",
];

impl FromStr for CsvSpec {
    type Err = TraceError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let bad = |msg: String| TraceError::BadSpec {
            spec: spec.to_string(),
            msg,
        };
        let mut out = CsvSpec::with_id_col(0);
        let mut rest = spec.trim();
        while !rest.is_empty() {
            let Some(eq) = rest.find('=') else {
                return Err(bad(format!("`{rest}` is not of the form key=value")));
            };
            let key = rest[..eq].trim().replace('_', "-").to_ascii_lowercase();
            let after = &rest[eq + 1..];
            // The delimiter's value may itself be a comma, so it is read before splitting.
            let (value, next) = if key == "delimiter" && after.starts_with(',') {
                (",", after[1..].strip_prefix(',').unwrap_or(&after[1..]))
            } else {
                match after.find(',') {
                    Some(i) => (&after[..i], &after[i + 1..]),
                    None => (after, ""),
                }
            };
            let value = value.trim();
            match key.as_str() {
                "time-col" => out.time_col = Some(column(value).map_err(&bad)?),
                "obj-id-col" => out.obj_id_col = column(value).map_err(&bad)?,
                "obj-size-col" => out.obj_size_col = Some(column(value).map_err(&bad)?),
                "op-col" | "op-type-col" => out.op_col = Some(column(value).map_err(&bad)?),
                "delimiter" => out.delimiter = delimiter(value).map_err(&bad)?,
                "has-header" => out.has_header = Some(boolean(value).map_err(&bad)?),
                "obj-id-is-num" => out.obj_id_is_num = Some(boolean(value).map_err(&bad)?),
                k if IGNORED_KEYS.contains(&k) => {}
                k => {
                    return Err(bad(format!(
                        "unknown key `{k}` (expected time-col, obj-id-col, obj-size-col, \
                         op-col, delimiter, has-header, obj-id-is-num)"
                    )))
                }
            }
            rest = next.trim_start();
        }
        if out.obj_id_col == 0 {
            return Err(bad("obj-id-col is required".to_string()));
        }
        Ok(out)
    }
}

/// The error for a record that states more requests than `limit` allows.
pub(crate) fn too_many_requests(what: &str, count: u64, limit: u64) -> String {
    format!(
        "{what} stands for {count} requests, more than the limit of {limit} per record; \
         raise it with --max-record-requests (Python: max_record_requests=)"
    )
}

fn column(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(c) if c >= 1 => Ok(c),
        _ => Err(format!("column `{value}` is not a 1-based column number")),
    }
}

fn boolean(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(format!("`{value}` is not true/false")),
    }
}

fn delimiter(value: &str) -> Result<u8, String> {
    match value {
        "\\t" | "tab" | "\t" => Ok(b'\t'),
        "space" | "" => Ok(b' '),
        v if v.len() == 1 && v.is_ascii() => Ok(v.as_bytes()[0]),
        v => Err(format!("delimiter `{v}` is not a single ASCII character")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_libcachesim_spec() {
        let s: CsvSpec =
            "time-col=2,obj-id-col=5,obj-size-col=4,obj-id-is-num=true,has-header=true"
                .parse()
                .unwrap();
        assert_eq!(s.time_col, Some(2));
        assert_eq!(s.obj_id_col, 5);
        assert_eq!(s.obj_size_col, Some(4));
        assert_eq!(s.obj_id_is_num, Some(true));
        assert_eq!(s.has_header, Some(true));
        assert_eq!(s.delimiter, b',');
        assert_eq!(s.op_col, None);
        assert_eq!(s.last_col(), 5);
    }

    #[test]
    fn comma_delimiter_followed_by_more_keys() {
        let s: CsvSpec = "time-col=1,op-type-col=2,obj-id-col=3,delimiter=,,obj-id-is-num=0"
            .parse()
            .unwrap();
        assert_eq!(s.delimiter, b',');
        assert_eq!(s.op_col, Some(2));
        assert_eq!(s.obj_id_is_num, Some(false));
        let s: CsvSpec = "obj-id-col=1,delimiter=\\t".parse().unwrap();
        assert_eq!(s.delimiter, b'\t');
        let s: CsvSpec = "delimiter=|,obj-id-col=2".parse().unwrap();
        assert_eq!((s.delimiter, s.obj_id_col), (b'|', 2));
        let s: CsvSpec = "obj-id-col=2,delimiter=,".parse().unwrap();
        assert_eq!(s.delimiter, b',');
    }

    #[test]
    fn rejects_bad_specs_with_a_reason() {
        for (spec, why) in [
            ("time-col=1", "obj-id-col is required"),
            ("obj-id-col=0", "1-based"),
            ("obj-id-col=x", "1-based"),
            ("obj-id-col=1,colour=red", "unknown key `colour`"),
            ("obj-id-col=1,has-header=maybe", "true/false"),
            ("obj-id-col", "key=value"),
        ] {
            let err = spec.parse::<CsvSpec>().unwrap_err().to_string();
            assert!(err.contains(why), "{spec}: {err}");
            assert!(err.contains(spec), "{err}");
        }
    }

    #[test]
    fn ignores_libcachesim_keys_it_cannot_use() {
        let s: CsvSpec = "obj-id-col=2,ttl-col=5".parse().unwrap();
        assert_eq!(s.obj_id_col, 2);
    }
}
