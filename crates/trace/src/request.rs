//! The request type every reader produces and every consumer (replay, analysis, server) takes.

/// What a request asks of the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Op {
    /// Read; on a miss the replay fetches from the back-end and inserts.
    Get,
    /// Write; written through to the back-end and (re)inserted.
    Put,
    /// Remove the object from the cache (and the back-end).
    Delete,
    /// A lookup that inserts on miss: block traces and traces without operations.
    #[default]
    Access,
}

impl Op {
    /// The lower-case name used in docs, class rules (`op:get`) and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Put => "put",
            Op::Delete => "delete",
            Op::Access => "access",
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses the names [`Op::name`] gives, case-insensitively.
impl std::str::FromStr for Op {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Op::Get, Op::Put, Op::Delete, Op::Access]
            .into_iter()
            .find(|op| op.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| format!("unknown op `{s}`; expected get, put, delete or access"))
    }
}

/// One request of a trace, as every reader produces it.
///
/// `time` is in seconds on the trace's own clock (not rebased). `key` is a 64-bit object id;
/// traces with string keys hash them. `size` is the object size in bytes (1 when the trace has
/// none). `offset` is the byte offset for block traces (0 otherwise), used by class rules.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Request {
    pub time: f64,
    pub key: u64,
    pub size: u32,
    pub op: Op,
    pub offset: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_names_round_trip() {
        for op in [Op::Get, Op::Put, Op::Delete, Op::Access] {
            assert_eq!(op.to_string().to_uppercase().parse::<Op>(), Ok(op));
        }
        assert!("fetch".parse::<Op>().unwrap_err().contains("`fetch`"));
    }
}
