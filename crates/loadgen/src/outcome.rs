//! What one trace request came to on the server: what the driver produces and the per-key
//! ordering of requests in flight (`keys`) consumes, kept apart from both so neither imports
//! the other.

use redis::RedisError;
use std::time::Duration;
use trace::Request;

/// The result of one trace request on the server.
pub(super) struct Outcome {
    pub(super) request: Request,
    /// The round trip of the request's own command (a fill's SET not included).
    pub(super) latency: Duration,
    /// A GET answered nil: the key is in neither the cache nor the store.
    pub(super) nil: bool,
    /// The nil was followed by a SET of the request's size that stored it.
    pub(super) filled: bool,
    /// The server answered with an error (the connection itself is fine).
    pub(super) error: Option<RedisError>,
}
