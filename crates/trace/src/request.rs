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
