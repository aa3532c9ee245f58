//! Trace replay: feeds a trace through the cache and a model of the store behind it, runs
//! decision ticks for a controller (a policy), and reports hit ratio, footprint over time
//! and back-end load.

pub mod backend;
pub mod cache_metrics;
pub mod ceiling;
pub mod compare;
pub mod metrics_csv;
pub mod nodes;
pub mod page;
pub mod policy_driver;
pub mod replay;
pub mod replay_cache;
pub mod summary;
pub mod tick_schedule;
pub mod ticks;
pub mod warmup;
pub mod working_set;

// The controller seam lives in `adapt`, below both hosts, so the server can host shadows
// without compiling the simulator; `replay` takes one, so its types are named here too.
pub use adapt::control::{
    Action, Controller, ControllerSummary, TickContext, TickDecision, TickMetrics,
};
pub use backend::{BackendParams, BackendSpec, BackendSummary};
pub use replay::{
    replay, replay_batches, ClientFigures, HookSource, LiveRun, ReplayConfig, ReplayError,
    ReplayReport, TickRow, BATCH, MAX_EMPTY_TICKS,
};
pub use replay_cache::ClassReport;
pub use tick_schedule::Tick;
pub use units::{parse_bytes, parse_duration, CacheSize};
pub use warmup::{
    Granularity, RestartAt, Strategy, WarmupConfig, WarmupFlags, WarmupReport, WarmupSpec,
};
pub use working_set::{resolve_capacity, WorkingSet};
