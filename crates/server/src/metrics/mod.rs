//! Every number the server counts, in one place: the request path's counters ([`Stats`]), the
//! per-client bounds ([`Guards`]), the live policy's gauges ([`PolicyGauges`]), warm-up's
//! progress ([`WarmupProgress`]), the store read latency ([`LatencyHistogram`]) and each
//! command's latency ([`CommandLatencies`]), owned by
//! one [`Metrics`] that `Db` holds. `INFO`, `CACHE STATS`, `POLICY TICK` and `GET /metrics`
//! all read it; [`exposition`] registers it in a `prometheus-client` registry for
//! `/metrics`.
//!
//! The request path only adds to relaxed atomics: nothing here allocates or locks per request.
//! This module depends on no other module of the server, so anything may count into it.

mod commands;
mod counters;
pub mod exposition;
mod histogram;
mod shadows;

pub use commands::{CommandFigures, CommandLatencies, MAX_COMMANDS};
pub use counters::{Guards, PolicyGauges, Stats, WarmupProgress};
pub use exposition::{render, Readings, UpstreamFigures, CONTENT_TYPE};
pub use histogram::{LatencyHistogram, READ_LATENCY_BOUNDS_US};
pub use shadows::{CandidateFigures, ShadowBoard, ShadowReport};

use std::sync::Arc;

/// The server's one set of metrics.
#[derive(Default)]
pub struct Metrics {
    pub stats: Stats,
    pub guards: Guards,
    /// Shared with the policy engine's thread, which stores into it.
    pub policy: Arc<PolicyGauges>,
    pub warmup: WarmupProgress,
    /// How long store reads take (cache misses and warm-up loads).
    pub store_read: LatencyHistogram,
    /// Shadows' and the active version's window figures (see `shadow`).
    pub shadows: ShadowBoard,
    /// How long each command takes, by its row in the command table.
    pub commands: CommandLatencies,
}

/// A snapshot of the cache for INFO, CACHE STATS and `/metrics` (the cache's own figures,
/// read under its lock at the time asked).
#[derive(Clone, Debug, PartialEq)]
pub struct CacheSnapshot {
    pub algorithm: cache::Algorithm,
    pub objects: u64,
    pub bytes: u64,
    pub capacity: cache::Capacity,
    pub evictions: u64,
    /// Heap bytes of the server's key table plus the algorithm's metadata.
    pub metadata_bytes: u64,
    pub object_overhead: u64,
}
