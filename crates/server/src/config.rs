//! What an operator can set when starting the server, with the defaults documented in
//! `docs/server.md`. Kept free of any argument-parsing crate so the CLI, the tests and other
//! embedders build a [`Config`] the same way.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Redis's default `proto-max-bulk-len`: the largest single argument a client may send.
pub const DEFAULT_PROTO_MAX_BULK_LEN: u64 = 512 * 1024 * 1024;
/// Redis's default `maxclients`.
pub const DEFAULT_MAXCLIENTS: usize = 10_000;
/// Cache budget when neither `--max-keys` nor `--maxmemory` is given.
pub const DEFAULT_MAXMEMORY: u64 = 256 * 1024 * 1024;

/// Largest reply one command may produce (`--client-output-limit`): a client that asks for
/// more (`MGET` of many big values) gets an error instead of the server building it.
pub const DEFAULT_CLIENT_OUTPUT_LIMIT: u64 = 1024 * 1024 * 1024;
/// Most Tokio worker threads `--threads` accepts; more only cost memory and scheduling.
pub const MAX_THREADS: usize = 1024;
/// How long opening a connection to the upstream may take (`--upstream-connect-timeout`).
pub const DEFAULT_UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one upstream operation may take in all (`--upstream-timeout`).
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);

/// Policy decision period when `--tick` is not given.
pub const DEFAULT_TICK: Duration = Duration::from_secs(1);

/// Parses one of the server's periods (`--tick`, timeouts, `--warmup-persist`,
/// `--cluster-ttl`) in the grammar every flag shares (`units::parse_duration`: `200ms`, `1s`,
/// `1.5s`, `1m`), within the server's bounds: under 1 ms the engine would spin, and past a
/// day a period is a typo rather than a plan.
pub fn parse_period(text: &str) -> Result<Duration, String> {
    let period = units::parse_duration(text)?;
    if !(Duration::from_millis(1)..=Duration::from_secs(86_400)).contains(&period) {
        return Err(format!(
            "invalid duration '{text}': must be between 1ms and 24h"
        ));
    }
    Ok(period)
}

// The store's own settings, named here as every flag is.
pub use store::{Backend, Fsync, WalRecovery};

/// Versions kept per policy name (`--policy-keep-versions`); older ones are deleted when a
/// new one is stored, except those on the activation stack or recorded as wedged.
pub const DEFAULT_KEEP_VERSIONS: usize = 50;

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub backend: Backend,
    /// `--state-dir`: in front of an upstream, where the policy registry, the policy log and
    /// the warm-up record are kept (a small RocksDB holding no keys); `None`: in memory.
    pub state_dir: Option<PathBuf>,
    /// Cache capacity in objects (`--max-keys`).
    pub max_keys: Option<u64>,
    /// Cache capacity in bytes (`--maxmemory`); see `ENTRY_OVERHEAD` in `db.rs` for what counts.
    pub maxmemory: Option<u64>,
    pub eviction: cache::Algorithm,
    pub maxclients: usize,
    pub proto_max_bulk_len: u64,
    pub requirepass: Option<String>,
    /// Tokio worker threads; 0 means one per core; at most [`MAX_THREADS`].
    pub threads: usize,
    /// Tasks serving the connections (`crate::connection_groups`); 0: a task per connection.
    pub connection_groups: usize,
    /// Largest reply to one command, in bytes; 0: unlimited (`--client-output-limit`).
    pub client_output_limit: u64,
    /// Most bytes all clients' buffers and replies may hold together; 0: unlimited
    /// (`--maxmemory-clients`, see `client_memory`).
    pub maxmemory_clients: u64,
    /// Bound on connecting to the upstream (`--upstream-connect-timeout`).
    pub upstream_connect_timeout: Duration,
    /// Bound on one upstream operation, connecting included (`--upstream-timeout`).
    pub upstream_timeout: Duration,
    /// A Lua policy to store in the registry and activate at start (`--policy FILE`).
    pub policy: Option<PathBuf>,
    /// Wall-clock period of the policy's decision ticks (`--tick`).
    pub tick: Duration,
    /// `--tick manual`: no wall-clock ticks; `POLICY TICK [now]` runs one, and the policy's
    /// clock (`now`, the series' timestamps) is what `POLICY TICK`/`POLICY CLOCK` last set.
    pub manual_tick: bool,
    /// `--timeseries N`: most access events kept for `timeseries()`; 0 turns it off.
    pub timeseries: usize,
    /// `--classes FILE`: the cache's classes, as in `mantle replay --classes`.
    pub classes: Option<cache::classes::ClassSet>,
    /// Instruction, memory, time and failure limits of live policies (`--policy-instructions`,
    /// `--policy-memory`, `--policy-time-limit`).
    pub policy_limits: policy::Limits,
    /// The same limits for each function or script call (`--function-instructions`,
    /// `--function-memory`, `--function-time-limit`; the memory limit is that of the one
    /// Lua state all libraries share).
    pub function_limits: policy::Limits,
    /// Write policy events to stderr as well as to the durable log.
    pub policy_echo: bool,
    /// Start with no policy running, leaving the registry as it is (`--no-policy`).
    pub no_policy: bool,
    /// `--policy-keep-versions N`: versions of each policy name the registry keeps.
    pub policy_keep_versions: usize,
    /// Where to serve Prometheus metrics over HTTP (`--metrics-listen`).
    pub metrics_listen: Option<SocketAddr>,
    /// Let the dashboard change the policy, with the server's password (`--http-admin`).
    pub http_admin: bool,
    /// Accept FLUSHDB / FLUSHALL (`--enable-flush`); refused otherwise.
    pub enable_flush: bool,
    /// Bulk-load what the last run accessed at start, in the background (`--warmup`).
    pub warmup: Option<cache::warmup::WarmupSpec>,
    /// Most keys the access monitor tracks; 0 turns it off (`--warmup-track`).
    pub warmup_track: usize,
    /// How often the monitor's record is persisted (`--warmup-persist`).
    pub warmup_persist: Duration,
    /// What to do with a damaged write-ahead log at start (`--wal-recovery`).
    pub wal_recovery: WalRecovery,
    /// Join a cluster on etcd (`--cluster`); `None` runs alone.
    pub cluster: Option<ClusterSettings>,
    /// Nodes each shared-log entry is written to (`--log-replicas`), told to clients by
    /// `ZLOG.OPEN`; every node of a cluster must be started with the same value.
    pub log_replicas: u8,
    /// This node holds only shared-log data, which clients replicate on `log_replicas` nodes
    /// (`--log-node`): when it dies its slots go to the surviving log nodes.
    pub log_node: bool,
}

impl Config {
    /// A config with every default, storing in `data_dir`, listening on `127.0.0.1:6380`.
    pub fn new(backend: Backend) -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 6380)),
            backend,
            state_dir: None,
            max_keys: None,
            maxmemory: None,
            eviction: cache::Algorithm::Lru,
            maxclients: DEFAULT_MAXCLIENTS,
            proto_max_bulk_len: DEFAULT_PROTO_MAX_BULK_LEN,
            requirepass: None,
            threads: 0,
            connection_groups: 0,
            client_output_limit: DEFAULT_CLIENT_OUTPUT_LIMIT,
            maxmemory_clients: crate::client_memory::DEFAULT_LIMIT,
            upstream_connect_timeout: DEFAULT_UPSTREAM_CONNECT_TIMEOUT,
            upstream_timeout: DEFAULT_UPSTREAM_TIMEOUT,
            policy: None,
            tick: DEFAULT_TICK,
            manual_tick: false,
            timeseries: crate::access_series::DEFAULT_TIMESERIES,
            classes: None,
            policy_limits: policy::Limits::default(),
            function_limits: policy::Limits::default(),
            policy_echo: true,
            no_policy: false,
            policy_keep_versions: DEFAULT_KEEP_VERSIONS,
            metrics_listen: None,
            http_admin: false,
            enable_flush: false,
            warmup: None,
            warmup_track: crate::access_monitor::DEFAULT_TRACK,
            warmup_persist: DEFAULT_WARMUP_PERSIST,
            wal_recovery: WalRecovery::Strict,
            cluster: None,
            log_replicas: crate::log::DEFAULT_REPLICAS,
            log_node: false,
        }
    }

    /// Refuses settings the server cannot run with, naming the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.state_dir.is_some() && matches!(self.backend, Backend::RocksDb { .. }) {
            return Err(
                "--state-dir is for --upstream; with --data-dir the state is kept there".into(),
            );
        }
        if !(1..=crate::log::MAX_REPLICAS).contains(&self.log_replicas) {
            return Err(format!(
                "--log-replicas {} is outside 1..={}",
                self.log_replicas,
                crate::log::MAX_REPLICAS
            ));
        }
        if self.log_node && self.cluster.is_none() {
            return Err("--log-node needs --cluster (it is about who takes over slots)".into());
        }
        if self.log_node && self.log_replicas < 2 {
            return Err(
                "--log-node needs --log-replicas 2 or more: with one copy a dead node's \
                 entries are gone, and its slots must wait for it"
                    .into(),
            );
        }
        if self.threads > MAX_THREADS {
            return Err(format!(
                "--threads {} is above the most supported, {MAX_THREADS} (0: one per core)",
                self.threads
            ));
        }
        if self.connection_groups > MAX_THREADS {
            return Err(format!(
                "--connection-groups {} is above the most supported, {MAX_THREADS} (0: a task per \
                 connection)",
                self.connection_groups
            ));
        }
        if let Some(n) = self.max_keys {
            cache::capacity::limit(n, "--max-keys")?;
        }
        if let Some(n) = self.maxmemory {
            cache::capacity::limit(n, "--maxmemory")?;
        }
        Ok(())
    }

    /// The cache capacity the flags ask for; a zero limit means "unlimited" as in Redis.
    pub fn capacity(&self) -> cache::Capacity {
        let nonzero = |v: Option<u64>| v.filter(|&n| n > 0);
        match (self.max_keys, self.maxmemory) {
            (None, None) => cache::Capacity {
                bytes: Some(DEFAULT_MAXMEMORY),
                objects: None,
            },
            (keys, bytes) => cache::Capacity {
                bytes: nonzero(bytes),
                objects: nonzero(keys),
            },
        }
    }
}

impl Config {
    /// RocksDB's memtables and block cache: a share of `--maxmemory` (docs/server.md).
    pub fn store_memory(&self) -> store::rocks::MemoryBudget {
        store::rocks::MemoryBudget::for_maxmemory(self.capacity().bytes)
    }

    /// How the store reaches an upstream tier (`Backend::Upstream`).
    pub fn upstream_options(&self) -> store::upstream::UpstreamOptions {
        store::upstream::UpstreamOptions {
            connect_timeout: self.upstream_connect_timeout,
            timeout: self.upstream_timeout,
            max_bulk_len: self.proto_max_bulk_len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_use_the_shared_grammar_within_the_servers_bounds() {
        assert_eq!(parse_period("200ms").unwrap(), Duration::from_millis(200));
        assert_eq!(parse_period("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_period("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_period("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_period("24h").unwrap(), Duration::from_secs(86_400));
        for bad in ["0s", "5 fortnights", "500us", "25h", "-1s"] {
            let err = parse_period(bad).unwrap_err();
            assert!(
                err.starts_with(&format!("invalid duration '{bad}'")),
                "{err}"
            );
        }
    }

    #[test]
    fn validation_names_the_flag() {
        let mut config = Config::new(Backend::Upstream {
            url: "redis://127.0.0.1:1".into(),
        });
        assert!(config.validate().is_ok());
        config.threads = 100_000;
        let err = config.validate().unwrap_err();
        assert!(err.contains("--threads 100000"), "{err}");
        config.threads = MAX_THREADS;
        assert!(config.validate().is_ok());
        config.connection_groups = MAX_THREADS + 1;
        let err = config.validate().unwrap_err();
        assert!(err.contains("--connection-groups 1025"), "{err}");
        config.connection_groups = MAX_THREADS;
        assert!(config.validate().is_ok());
    }

    #[test]
    fn fsync_modes_parse() {
        assert_eq!("EverySec".parse::<Fsync>().unwrap(), Fsync::EverySec);
        assert!("sometimes".parse::<Fsync>().is_err());
    }

    #[test]
    fn capacity_defaults_to_a_memory_budget_and_zero_means_unlimited() {
        let mut config = Config::new(Backend::Upstream {
            url: "redis://127.0.0.1:1".into(),
        });
        assert_eq!(config.capacity().bytes, Some(DEFAULT_MAXMEMORY));
        config.max_keys = Some(10);
        assert_eq!(
            config.capacity(),
            cache::Capacity {
                bytes: None,
                objects: Some(10)
            }
        );
        config.max_keys = Some(0);
        config.maxmemory = Some(0);
        assert_eq!(config.capacity(), cache::Capacity::default());
    }
}

/// How often the warm-up monitor's record is persisted when `--warmup-persist` is not given.
pub const DEFAULT_WARMUP_PERSIST: Duration = Duration::from_secs(10);

/// Largest `proto-max-bulk-len` accepted: cached keys and values are sized in 32 bits.
pub const MAX_BULK_LEN_LIMIT: u64 = u32::MAX as u64;

// The cluster's settings live here with every other setting, so `config` depends on no module
// that reads it.
/// What `--cluster` and its companion flags say.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// `etcd://HOST:PORT[,HOST:PORT...]`.
    pub etcd: String,
    pub name: String,
    pub node_id: String,
    /// `host:port` clients are sent to (`-MOVED`), default the listen address.
    pub advertise: Option<String>,
    /// Lease TTL: how long after a crash the node disappears from the cluster.
    pub ttl: Duration,
    pub mode: ClusterMode,
    /// This node's `--requirepass`: every node of a cluster shares it, and connections
    /// between nodes (migration, proxy) authenticate with it.
    pub password: Option<String>,
}

/// What a node does with a request for a key another node owns (`--cluster-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClusterMode {
    /// Redirect: `-MOVED slot host:port` (cluster-aware clients).
    #[default]
    Client,
    /// Forward to the owner and relay its reply (any client).
    Proxy,
}

impl std::str::FromStr for ClusterMode {
    type Err = String;
    fn from_str(text: &str) -> Result<ClusterMode, String> {
        match text {
            "client" => Ok(ClusterMode::Client),
            "proxy" => Ok(ClusterMode::Proxy),
            other => Err(format!("expected client or proxy, got '{other}'")),
        }
    }
}
