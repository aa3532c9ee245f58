//! Where the data lives behind the cache and how durable a write is: the store's settings,
//! which the server's configuration names.

use std::path::PathBuf;
use std::str::FromStr;

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
