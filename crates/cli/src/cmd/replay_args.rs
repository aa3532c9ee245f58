//! The command line of `mantle replay`, apart from what runs it: the simulated replay
//! (`replay`) and the cluster one (`nodes`) both read it, and neither depends on the other for it.

use super::trace_args::TraceArgs;
use cache::Algorithm;
use sim::{BackendSpec, CacheSize, Tick};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub input: TraceArgs,
    /// Cache size: objects (1000), bytes with a unit (64MiB, 1GB), a percentage of the
    /// trace's working set (10%: in bytes when the trace has sizes, else objects), or unlimited.
    #[arg(long, value_name = "SIZE", required_unless_present = "server")]
    pub cache_size: Option<CacheSize>,
    /// A ceiling on the cache whatever --cache-size or a policy asks for (same forms as
    /// --cache-size): a policy's larger capacity is cut to it, and the cuts are counted.
    #[arg(long, value_name = "SIZE")]
    pub max_cache_size: Option<CacheSize>,
    /// --server and the flags that go with it (boxed: they are rarely given).
    #[command(flatten)]
    pub live: Box<super::replay_flags::LiveArgs>,
    /// --nodes and the flags of a simulated cluster.
    #[command(flatten)]
    pub cluster: Box<super::replay_flags::NodesArgs>,
    /// Eviction algorithm (docs/cache.md lists them). The offline ones (belady,
    /// beladysize) read the trace twice: once to learn each request's next access.
    #[arg(long, default_value = "lru", value_name = "ALGORITHM")]
    pub eviction: Algorithm,
    /// Admission policy in front of the eviction algorithm: size[:size=BYTES],
    /// prob[:prob=P], bloomfilter or adaptsize[:max-iteration=N,reconf-interval=N]
    /// (docs/cache.md, "Admission policies").
    #[arg(long, value_name = "NAME[:param=value,...]")]
    pub admission: Option<cache::Admission>,
    /// Model of the store behind the cache: lsm (default), lsm:rate=N,compact_every=N,stall=S, or none.
    #[arg(long, default_value = "lsm", value_name = "MODEL|none")]
    pub backend: BackendSpec,
    /// Decision tick: trace time (1s, 500ms) or requests (1000ops). Default: 1s, or 1000ops
    /// on a trace without timestamps (where a time tick would never fire).
    #[arg(long, value_name = "1s|Nops")]
    pub tick: Option<Tick>,
    /// --policy and the flags that go with it.
    #[command(flatten)]
    pub policy: super::replay_flags::PolicyArgs,
    /// --shadow, --switch and the flags that go with them.
    #[command(flatten)]
    pub shadow: super::replay_flags::ShadowArgs,
    /// Write the per-tick metrics time series to this CSV file.
    #[arg(long, value_name = "FILE.csv")]
    pub metrics_out: Option<PathBuf>,
    /// Write an HTML report (cache size, hit ratio and back-end load over time).
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Class file (Open CAS layout, see docs/cache-hints.md): one queue per class, with
    /// priorities, allocation caps and pinning.
    #[arg(long, value_name = "FILE")]
    pub classes: Option<PathBuf>,
    /// --restart-at and the warm-up flags that go with it.
    #[command(flatten)]
    pub warmup: super::replay_flags::WarmupArgs,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    pub json: bool,
    /// Print nothing on stderr but errors: no progress bar, notices or warnings.
    #[arg(long, conflicts_with = "progress")]
    pub quiet: bool,
    /// Show the progress bar even when stderr is not a terminal (one line per update).
    #[arg(long)]
    pub progress: bool,
}
