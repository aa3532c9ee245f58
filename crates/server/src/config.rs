//! What an operator can set when starting the server, with the defaults documented in
//! `docs/server.md`. Kept free of any argument-parsing crate so the CLI, the tests and other
//! embedders build a [`Config`] the same way.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
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

/// Parses a tick period: a number with `ms`, `s`, `m` or `h` (`200ms`, `1s`, `1.5s`); a bare
/// number is seconds. Periods under 1 ms are refused (the engine would spin).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "invalid duration '{text}': unknown unit '{other}' (use ms, s, m or h)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration '{text}': expected a number with a unit"))?;
    let seconds = value * scale;
    if !seconds.is_finite() || !(0.001..=86_400.0).contains(&seconds) {
        return Err(format!(
            "invalid duration '{text}': must be between 1ms and 24h"
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// When RocksDB's write-ahead log is forced to stable storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fsync {
    /// Every acknowledged write is on disk (group commit: concurrent writers share one fsync).
    Always,
    /// A background thread syncs the log once a second (Redis's `appendfsync everysec`).
    EverySec,
    /// The operating system decides; writes still reach the log before they are acknowledged.
    No,
}

impl Fsync {
    pub fn as_str(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::EverySec => "everysec",
            Fsync::No => "no",
        }
    }
}

impl FromStr for Fsync {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "always" => Ok(Fsync::Always),
            "everysec" => Ok(Fsync::EverySec),
            "no" => Ok(Fsync::No),
            other => Err(format!(
                "unknown fsync mode '{other}' (expected always, everysec or no)"
            )),
        }
    }
}

/// What to do when RocksDB's write-ahead log is damaged at start (`--wal-recovery`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WalRecovery {
    /// Refuse to start on damage before the log's end; a torn last record (power loss) is
    /// dropped, as it was never acknowledged with `--fsync always`.
    #[default]
    Strict,
    /// Replay up to the first damage and drop everything logged after it.
    PointInTime,
    /// Replay every intact record, dropping only the damaged ones.
    SkipCorrupted,
}

impl WalRecovery {
    pub fn as_str(self) -> &'static str {
        match self {
            WalRecovery::Strict => "strict",
            WalRecovery::PointInTime => "point-in-time",
            WalRecovery::SkipCorrupted => "skip-corrupted",
        }
    }
}

impl FromStr for WalRecovery {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "strict" => Ok(WalRecovery::Strict),
            "point-in-time" => Ok(WalRecovery::PointInTime),
            "skip-corrupted" => Ok(WalRecovery::SkipCorrupted),
            other => Err(format!(
                "unknown WAL recovery mode '{other}' (expected strict, point-in-time or skip-corrupted)"
            )),
        }
    }
}

/// Where the data lives behind the cache: the source of truth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Embedded RocksDB in this directory (created if missing).
    RocksDb { data_dir: PathBuf, fsync: Fsync },
    /// Another tier speaking RESP, as `redis://HOST:PORT[/DB]`.
    Upstream { url: String },
}

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub backend: Backend,
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
    /// Largest reply to one command, in bytes; 0: unlimited (`--client-output-limit`).
    pub client_output_limit: u64,
    /// Bound on connecting to the upstream (`--upstream-connect-timeout`).
    pub upstream_connect_timeout: Duration,
    /// Bound on one upstream operation, connecting included (`--upstream-timeout`).
    pub upstream_timeout: Duration,
    /// A Lua policy to store in the registry and activate at start (`--policy FILE`).
    pub policy: Option<PathBuf>,
    /// Wall-clock period of the policy's decision ticks (`--tick`).
    pub tick: Duration,
    /// Instruction, memory and failure limits of live policies.
    pub policy_limits: policy::Limits,
    /// Write policy events to stderr as well as to the durable log.
    pub policy_echo: bool,
    /// Start with no policy running, leaving the registry as it is (`--no-policy`).
    pub no_policy: bool,
    /// Where to serve Prometheus metrics over HTTP (`--metrics-listen`).
    pub metrics_listen: Option<SocketAddr>,
    /// Let the dashboard change the policy, with the server's password (`--http-admin`).
    pub http_admin: bool,
    /// Bulk-load what the last run accessed at start, in the background (`--warmup`).
    pub warmup: Option<crate::warmup::WarmupSpec>,
    /// Most keys the access monitor tracks; 0 turns it off (`--warmup-track`).
    pub warmup_track: usize,
    /// How often the monitor's record is persisted (`--warmup-persist`).
    pub warmup_persist: Duration,
    /// What to do with a damaged write-ahead log at start (`--wal-recovery`).
    pub wal_recovery: WalRecovery,
    /// Join a cluster on etcd (`--cluster`); `None` runs alone.
    pub cluster: Option<crate::cluster::ClusterSettings>,
}

impl Config {
    /// A config with every default, storing in `data_dir`, listening on `127.0.0.1:6380`.
    pub fn new(backend: Backend) -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 6380)),
            backend,
            max_keys: None,
            maxmemory: None,
            eviction: cache::Algorithm::Lru,
            maxclients: DEFAULT_MAXCLIENTS,
            proto_max_bulk_len: DEFAULT_PROTO_MAX_BULK_LEN,
            requirepass: None,
            threads: 0,
            client_output_limit: DEFAULT_CLIENT_OUTPUT_LIMIT,
            upstream_connect_timeout: DEFAULT_UPSTREAM_CONNECT_TIMEOUT,
            upstream_timeout: DEFAULT_UPSTREAM_TIMEOUT,
            policy: None,
            tick: DEFAULT_TICK,
            policy_limits: policy::Limits::default(),
            policy_echo: true,
            no_policy: false,
            metrics_listen: None,
            http_admin: false,
            warmup: None,
            warmup_track: crate::warmup::monitor::DEFAULT_TRACK,
            warmup_persist: crate::warmup::DEFAULT_PERSIST,
            wal_recovery: WalRecovery::Strict,
            cluster: None,
        }
    }

    /// Refuses settings the server cannot run with, naming the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.threads > MAX_THREADS {
            return Err(format!(
                "--threads {} is above the most supported, {MAX_THREADS} (0: one per core)",
                self.threads
            ));
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

/// Parses a byte size: a plain number of bytes, or a number with a unit. Decimal units
/// (`KB`, `MB`, `GB`, `TB`, also `k`, `m`, `g`) are powers of 1000 and binary units (`KiB`,
/// `MiB`, `GiB`, `TiB`) powers of 1024, case-insensitively; a trailing `B` alone means bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        other => {
            return Err(format!(
                "invalid size '{text}': unknown unit '{other}' (use B, KB, MB, GB, KiB, MiB, GiB)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid size '{text}': expected a number with an optional unit"))?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("invalid size '{text}': out of range"));
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_accept_decimal_and_binary_units() {
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert_eq!(parse_size("292272B").unwrap(), 292_272);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1GB").unwrap(), 1_000_000_000);
        assert_eq!(parse_size("1.5kib").unwrap(), 1536);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("-5").is_err());
    }

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("200ms").unwrap(), Duration::from_millis(200));
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5 fortnights").is_err());
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
