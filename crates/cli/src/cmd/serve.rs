//! `mantle serve`: runs the cache tier (crates/server) until SIGTERM or SIGINT. Only turns
//! flags (and a configuration file's directives, expanded into flags by `config_file`) into a
//! `server::Config`; see docs/server.md.

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A configuration file: one `flag-name value` per line (`max-keys 5000`), `#` comments;
    /// flags on the command line override it (see docs/server.md).
    #[arg(value_name = "CONFIG_FILE")]
    pub config_file: Option<PathBuf>,
    /// The configuration file, as a flag.
    #[arg(long = "config", value_name = "FILE", conflicts_with = "config_file")]
    pub config: Option<PathBuf>,
    /// Directory of the embedded RocksDB store, the source of truth (created if missing).
    #[arg(
        long,
        required_unless_present = "upstream",
        conflicts_with = "upstream"
    )]
    pub data_dir: Option<PathBuf>,
    /// Another tier to sit in front of instead of RocksDB: redis://HOST:PORT (Mantle or Redis).
    #[arg(long)]
    pub upstream: Option<String>,
    /// With --upstream: a directory (created if missing) for the policy registry, the policy
    /// log and the warm-up record, so they survive restarts; it holds no keys.
    #[arg(long, value_name = "DIR", requires = "upstream")]
    pub state_dir: Option<PathBuf>,
    /// Address to listen on; loopback unless told otherwise.
    #[arg(long, default_value = "127.0.0.1:6380")]
    pub listen: SocketAddr,
    /// Port to listen on, at --listen's address (Redis's `port`).
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Cache capacity in objects (0: unlimited).
    #[arg(long)]
    pub max_keys: Option<u64>,
    /// Cache capacity in bytes, e.g. 256MiB or 1GB (0: unlimited). Default 256MiB when neither
    /// this nor --max-keys is given.
    #[arg(long, value_parser = units::parse_bytes)]
    pub maxmemory: Option<u64>,
    /// Eviction algorithm: lru, fifo, clock, sieve, s3fifo, arc, twoq, slru, lfu, lfuda,
    /// random, hyperbolic or lirs (docs/cache.md).
    #[arg(long, default_value = "lru")]
    pub eviction: cache::Algorithm,
    /// When RocksDB's write-ahead log is forced to disk: always, everysec or no.
    #[arg(long, default_value = "everysec")]
    pub fsync: server::Fsync,
    /// On a damaged write-ahead log at start: strict (refuse to start), point-in-time (drop
    /// everything logged after the damage) or skip-corrupted (drop only damaged records).
    #[arg(long, default_value = "strict")]
    pub wal_recovery: server::WalRecovery,
    /// Most simultaneous clients; further ones get an error and are closed.
    #[arg(long, default_value_t = server::config::DEFAULT_MAXCLIENTS)]
    pub maxclients: usize,
    /// Largest single argument a client may send, e.g. 512MiB (refused before allocation).
    #[arg(long, default_value = "512MiB", value_parser = units::parse_bytes)]
    pub proto_max_bulk_len: u64,
    /// Password clients must give with AUTH (or HELLO ... AUTH) before anything else.
    #[arg(long)]
    pub requirepass: Option<String>,
    /// Threads that serve connections and run commands (0: one per core; at most 1024).
    /// RocksDB's background threads are not among them.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Tasks the clients' connections are shared among (0: a task per connection; at most
    /// --threads). One group saves a thread wake-up per request for a few round-trip clients
    /// (a shared-log sequencer) but serves all of its clients on one core at a time.
    #[arg(long, default_value_t = 0)]
    pub connection_groups: usize,
    /// Largest reply to one command, e.g. 1GiB (0: unlimited); a larger one is an error.
    #[arg(long, default_value = "1GiB", value_parser = units::parse_bytes)]
    pub client_output_limit: u64,
    /// Most memory all clients' request buffers and replies may hold together, e.g. 1GiB
    /// (0: unlimited); the client that would pass it is refused or disconnected.
    #[arg(long, default_value = "2GiB", value_parser = units::parse_bytes)]
    pub maxmemory_clients: u64,
    /// Longest wait for a connection to --upstream, e.g. 1s or 500ms.
    #[arg(long, default_value = "1s", value_parser = server::parse_period)]
    pub upstream_connect_timeout: std::time::Duration,
    /// Longest an operation on --upstream may take, connecting included, e.g. 2s.
    #[arg(long, default_value = "2s", value_parser = server::parse_period)]
    pub upstream_timeout: std::time::Duration,
    /// A Lua policy to store in the server's policy registry (as a new version of the file's
    /// name, unless unchanged) and run; the registry's active policy otherwise runs.
    #[arg(long, conflicts_with = "no_policy")]
    pub policy: Option<PathBuf>,
    /// Start with no policy running: the registry's active version is not reactivated (the
    /// registry is unchanged; POLICY USE or ROLLBACK resumes). The way out of a policy that
    /// breaks the server at every start.
    #[arg(long)]
    pub no_policy: bool,
    /// Instruction budget of one policy callback (counted in steps of 10,000).
    #[arg(long, value_name = "N", default_value_t = policy::Limits::default().instructions, value_parser = clap::value_parser!(u64).range(1..))]
    pub policy_instructions: u64,
    /// Memory limit of the policy's Lua state (bytes, or with a unit: 64MiB).
    #[arg(long, value_name = "BYTES", default_value = "64MiB", value_parser = units::parse_bytes)]
    pub policy_memory: u64,
    /// Wall-clock cut-off of one policy callback, e.g. 10s or 500ms.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = server::parse_period)]
    pub policy_time_limit: std::time::Duration,
    /// Instruction budget of one function or script call (FCALL, EVAL); its keys stay locked
    /// while it runs, so keep it small. Default: --policy-instructions.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub function_instructions: Option<u64>,
    /// Memory limit of the Lua state that holds every function library and cached script.
    /// Default: --policy-memory.
    #[arg(long, value_name = "BYTES", value_parser = units::parse_bytes)]
    pub function_memory: Option<u64>,
    /// Wall-clock cut-off of one function or script call. Default: --policy-time-limit.
    #[arg(long, value_name = "DURATION", value_parser = server::parse_period)]
    pub function_time_limit: Option<std::time::Duration>,
    /// Versions of each policy name the node's registry keeps; older ones are deleted when a
    /// new one is stored, except those on the activation (rollback) stack.
    #[arg(long, default_value_t = server::live::registry::DEFAULT_KEEP_VERSIONS as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub policy_keep_versions: u64,
    /// Wall-clock period of policy decision ticks, e.g. 1s or 200ms; or `manual`: no
    /// wall-clock ticks, POLICY TICK [now] runs one (what `replay --server --tick` drives).
    #[arg(long, default_value = "1s", value_parser = parse_tick, value_name = "PERIOD|manual")]
    pub tick: TickArg,
    /// Class file (same format and rules as replay's --classes; see docs/cache-hints.md):
    /// priorities, allocation caps, soft and hard pins; `hint:` rules match SET ... HINT name.
    #[arg(long, value_name = "FILE")]
    pub classes: Option<PathBuf>,
    /// Most access events kept for the policy's timeseries() (recorded only while the running
    /// policy reads it); 0 turns it off.
    #[arg(long, value_name = "N", default_value_t = server::access_series::DEFAULT_TIMESERIES)]
    pub timeseries: usize,
    /// Serve the live dashboard (/) and Prometheus metrics (/metrics) over HTTP at this
    /// address, e.g. 127.0.0.1:9121 (--metrics-listen is the old name).
    #[arg(long = "http", value_name = "ADDR", alias = "metrics-listen")]
    pub http: Option<SocketAddr>,
    /// Let the dashboard push policy versions, roll back and set parameters, with the
    /// server's password (needs --http and --requirepass).
    #[arg(long, requires = "http")]
    pub http_admin: bool,
    /// Accept FLUSHDB and FLUSHALL, which delete every key of this node from the store;
    /// without it they are refused.
    #[arg(long)]
    pub enable_flush: bool,
    /// At start, bulk-load in the background what the last run accessed: lastk:K, topk:K,
    /// randomk:K or firstk:K[:PERIOD] (needs --data-dir, or --state-dir with --upstream).
    #[arg(long, value_parser = parse_warmup)]
    pub warmup: Option<server::warmup::WarmupSpec>,
    /// Most keys the access monitor remembers for warm-up (at most 16 bytes each, whatever
    /// the key's length); 0 turns it off.
    #[arg(long, default_value_t = server::warmup::monitor::DEFAULT_TRACK)]
    pub warmup_track: usize,
    /// How often the access monitor's record is written to the store, e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = server::parse_period)]
    pub warmup_persist: std::time::Duration,
    /// Join a cluster whose control plane is etcd at these endpoints
    /// (etcd://HOST:PORT[,HOST:PORT...]); see docs/cluster.md.
    #[arg(
        long,
        alias = "etcd",
        value_name = "etcd://HOST:PORT",
        requires_all = ["cluster_name", "node_id"]
    )]
    pub cluster: Option<String>,
    /// With --cluster: the cluster's name (several clusters can share one etcd).
    #[arg(long, alias = "name", value_name = "NAME", requires = "cluster")]
    pub cluster_name: Option<String>,
    /// With --cluster: this node's id, unique in the cluster (letters, digits, - and _).
    #[arg(long, value_name = "ID", requires = "cluster")]
    pub node_id: Option<String>,
    /// With --cluster: the HOST:PORT clients are redirected to (default: --listen).
    #[arg(long, value_name = "HOST:PORT", requires = "cluster")]
    pub advertise: Option<String>,
    /// With --cluster: how soon after a crash the node drops out of the cluster.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = server::parse_period)]
    pub cluster_ttl: std::time::Duration,
    /// With --cluster: for keys another node owns, `client` answers -MOVED (cluster-aware
    /// clients), `proxy` forwards the request to the owner (any client).
    #[arg(
        long,
        value_name = "client|proxy",
        default_value = "client",
        requires = "cluster"
    )]
    pub cluster_mode: server::cluster::ClusterMode,
    /// Nodes each shared-log entry is written to by its clients (told by ZLOG.OPEN; give
    /// every node of a cluster the same value); see docs/shared-log.md.
    #[arg(long, value_name = "R", default_value_t = server::log::DEFAULT_REPLICAS)]
    pub log_replicas: u8,
    /// With --cluster: this node holds only shared-log data (replicated by the clients on
    /// --log-replicas nodes), so when it dies the surviving log nodes take its slots.
    #[arg(long, requires = "cluster")]
    pub log_node: bool,
}

fn parse_warmup(text: &str) -> Result<server::warmup::WarmupSpec, String> {
    text.parse()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let backend = match (args.data_dir, args.upstream) {
        (_, Some(url)) => server::Backend::Upstream { url },
        (Some(data_dir), None) => server::Backend::RocksDb {
            data_dir,
            fsync: args.fsync,
        },
        (None, None) => anyhow::bail!("give --data-dir DIR or --upstream redis://HOST:PORT"),
    };
    let mut config = server::Config::new(backend);
    config.state_dir = args.state_dir;
    config.listen = args.listen;
    if let Some(port) = args.port {
        config.listen.set_port(port);
    }
    config.max_keys = args.max_keys;
    config.maxmemory = args.maxmemory;
    if args.eviction.is_offline() {
        anyhow::bail!(
            "--eviction {}: an offline algorithm needs each request's next access, which a server cannot know (use it in mantle replay)",
            args.eviction
        );
    }
    config.eviction = args.eviction;
    config.maxclients = args.maxclients;
    config.proto_max_bulk_len = args.proto_max_bulk_len;
    config.requirepass = args.requirepass;
    config.threads = args.threads;
    config.connection_groups = args.connection_groups;
    config.client_output_limit = args.client_output_limit;
    config.maxmemory_clients = args.maxmemory_clients;
    config.upstream_connect_timeout = args.upstream_connect_timeout;
    config.upstream_timeout = args.upstream_timeout;
    config.policy = args.policy;
    config.no_policy = args.no_policy;
    config.policy_keep_versions = args.policy_keep_versions as usize;
    config.policy_limits = policy::Limits {
        instructions: args.policy_instructions,
        memory_bytes: usize::try_from(args.policy_memory).unwrap_or(usize::MAX),
        time_limit: args.policy_time_limit,
        ..policy::Limits::default()
    };
    config.function_limits = policy::Limits {
        instructions: args
            .function_instructions
            .unwrap_or(args.policy_instructions),
        memory_bytes: usize::try_from(args.function_memory.unwrap_or(args.policy_memory))
            .unwrap_or(usize::MAX),
        time_limit: args.function_time_limit.unwrap_or(args.policy_time_limit),
        ..policy::Limits::default()
    };
    config.manual_tick = args.tick == TickArg::Manual;
    if let TickArg::Every(period) = args.tick {
        config.tick = period;
    }
    config.timeseries = args.timeseries;
    config.classes = args
        .classes
        .as_deref()
        .map(cache::classes::ClassSet::from_file)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--classes {e}"))?;
    config.metrics_listen = args.http;
    config.http_admin = args.http_admin;
    config.enable_flush = args.enable_flush;
    config.warmup = args.warmup;
    config.warmup_track = args.warmup_track;
    config.warmup_persist = args.warmup_persist;
    config.wal_recovery = args.wal_recovery;
    config.log_replicas = args.log_replicas;
    config.log_node = args.log_node;
    if let (Some(etcd), Some(name), Some(node_id)) = (args.cluster, args.cluster_name, args.node_id)
    {
        if args.cluster_ttl < std::time::Duration::from_secs(2) {
            anyhow::bail!("--cluster-ttl must be at least 2s (etcd's shortest lease)");
        }
        config.cluster = Some(server::cluster::ClusterSettings {
            etcd,
            name,
            node_id,
            advertise: args.advertise,
            ttl: args.cluster_ttl,
            mode: args.cluster_mode,
            password: config.requirepass.clone(),
        });
    }
    server::serve(config)
}

/// `--tick`: a wall-clock period, or `manual`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TickArg {
    Every(std::time::Duration),
    Manual,
}

fn parse_tick(text: &str) -> Result<TickArg, String> {
    if text.eq_ignore_ascii_case("manual") {
        Ok(TickArg::Manual)
    } else {
        server::parse_period(text).map(TickArg::Every)
    }
}
