//! The cluster's central log (seed 003: errors and version changes go to the monitors'
//! central log): one ordered, bounded record of what happened on every node — policy
//! activations, errors, fallbacks, slot migrations begun and done. Under
//! `/mantle/<cluster>/log/`:
//!
//! - `seq`: the last sequence number given out;
//! - `e/<seq, 20 digits>`: one [`LogEntry`] as JSON.
//!
//! An append takes the next numbers, writes the entries and deletes those that fell out of
//! the last `capacity` in one transaction that compares `seq`'s revision, so concurrent
//! appenders never share a number and the log never grows past its bound.
//!
//! Nodes append through a [`LogQueue`]: a bounded queue drained by a background task, so a
//! caller never waits for etcd and an outage only delays (or, past the queue's bound, drops)
//! entries.

use crate::control::{now_ms, ClusterError, ControlPlane};
use crate::node::NodeId;
use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, SortOrder, SortTarget, Txn, TxnOp,
};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Entries kept by default.
pub const DEFAULT_CAPACITY: u64 = 1_000;
/// Entries a [`LogQueue`] holds while etcd is slow or away; more are dropped (and counted).
pub const QUEUE_CAPACITY: usize = 1_024;
/// Entries written per transaction (etcd's default limit is 128 operations per txn).
const BATCH: usize = 64;
const APPEND_ATTEMPTS: usize = 32;

/// How serious a [`LogEntry`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Info,
    Warn,
    Error,
}

/// What a [`LogEntry`] records. Serialized in snake case (`rolled_back`), the word
/// `POLICY LOG` shows after `event=` and the dashboard shows in its log table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogKind {
    /// A version was stored in the registry.
    Loaded,
    Activated,
    RolledBack,
    /// A version that does not compile was refused.
    Rejected,
    Error,
    /// A decision changed the cache's capacity.
    Capacity,
    /// A policy's own `log()` line.
    Log,
    Param,
    /// A version whose tick never finished is not reactivated.
    Quarantined,
    /// `--no-policy`: the active version is not run.
    Suspended,
    /// A node joining with `--policy` keeps the cluster's active version.
    Kept,
    Shadow,
    Switch,
    Switched,
    /// An engine thread stuck in a tick or request was replaced.
    Abandoned,
    Balance,
    MigrationBegun,
    MigrationDone,
    MigrationFailed,
    SlotsReassigned,
    /// A registry record that cannot be read back was skipped at start.
    Unreadable,
    /// An unreadable registry record was deleted (`POLICY UNREADABLE DROP`).
    Dropped,
    /// A kind this build does not know (an entry written by a newer node).
    #[serde(other)]
    Other,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

impl LogKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LogKind::Loaded => "loaded",
            LogKind::Activated => "activated",
            LogKind::RolledBack => "rolled_back",
            LogKind::Rejected => "rejected",
            LogKind::Error => "error",
            LogKind::Capacity => "capacity",
            LogKind::Log => "log",
            LogKind::Param => "param",
            LogKind::Quarantined => "quarantined",
            LogKind::Suspended => "suspended",
            LogKind::Kept => "kept",
            LogKind::Shadow => "shadow",
            LogKind::Switch => "switch",
            LogKind::Switched => "switched",
            LogKind::Abandoned => "abandoned",
            LogKind::Balance => "balance",
            LogKind::MigrationBegun => "migration_begun",
            LogKind::MigrationDone => "migration_done",
            LogKind::MigrationFailed => "migration_failed",
            LogKind::SlotsReassigned => "slots_reassigned",
            LogKind::Unreadable => "unreadable",
            LogKind::Dropped => "dropped",
            LogKind::Other => "other",
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for LogKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event of a policy log: a node's own journal (the server's `live::journal`), the
/// cluster's central log, `POLICY LOG` and the dashboard all carry this one type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Given by the log when the entry is appended.
    pub seq: u64,
    /// Milliseconds since the Unix epoch, on the node that wrote it.
    pub at_ms: u64,
    pub level: Level,
    pub kind: LogKind,
    /// `name@N`, or empty when no policy version is concerned.
    pub policy: String,
    pub message: String,
    /// The node it happened on; empty in a node's own journal.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node: String,
}

impl LogEntry {
    pub fn new(level: Level, kind: LogKind, policy: &str, message: &str) -> LogEntry {
        LogEntry {
            seq: 0,
            at_ms: now_ms(),
            level,
            kind,
            policy: policy.to_string(),
            message: message.to_string(),
            node: String::new(),
        }
    }

    /// A slot migration started: `ranges` (e.g. `0-99,200`) leave `from` for `to`.
    pub fn migration_begun(ranges: &str, from: &NodeId, to: &NodeId) -> LogEntry {
        LogEntry::new(
            Level::Info,
            LogKind::MigrationBegun,
            "",
            &format!("slots {ranges} from {from} to {to}"),
        )
    }

    /// A slot migration finished (`ok`) or was abandoned, with why in `detail`.
    pub fn migration_done(
        ranges: &str,
        from: &NodeId,
        to: &NodeId,
        ok: bool,
        detail: &str,
    ) -> LogEntry {
        let (level, kind) = if ok {
            (Level::Info, LogKind::MigrationDone)
        } else {
            (Level::Error, LogKind::MigrationFailed)
        };
        let mut message = format!("slots {ranges} from {from} to {to}");
        if !detail.is_empty() {
            message.push_str(": ");
            message.push_str(detail);
        }
        LogEntry::new(level, kind, "", &message)
    }

    /// The line `POLICY LOG` returns and a server's stderr shows: `key=value` words, the
    /// message quoted (it may hold spaces), `node=` only in a cluster's central log. For
    /// people and `grep`; programs read the entry itself (the dashboard gets it as JSON).
    pub fn line(&self) -> String {
        let mut line = format!(
            "seq={} at_ms={} level={} event={} policy={} msg={:?}",
            self.seq,
            self.at_ms,
            self.level,
            self.kind,
            if self.policy.is_empty() {
                "-"
            } else {
                &self.policy
            },
            self.message,
        );
        if !self.node.is_empty() {
            line.push_str(" node=");
            line.push_str(&self.node);
        }
        line
    }
}

#[derive(Clone)]
pub struct CentralLog {
    plane: ControlPlane,
    node: NodeId,
    capacity: u64,
}

impl CentralLog {
    /// The log of `plane`'s cluster, written as `node`, keeping the last `capacity` entries.
    pub fn new(plane: ControlPlane, node: NodeId, capacity: u64) -> CentralLog {
        CentralLog {
            plane,
            node,
            capacity: capacity.max(1),
        }
    }

    fn seq_key(&self) -> String {
        self.plane.key("log/seq")
    }

    fn entry_key(&self, seq: u64) -> String {
        self.plane.key(&format!("log/e/{seq:020}"))
    }

    /// Appends `entries` in order as this node, and returns the sequence number of the
    /// last one.
    pub async fn append(&self, entries: &[LogEntry]) -> Result<u64, ClusterError> {
        let mut last = 0;
        for batch in entries.chunks(BATCH) {
            last = self.append_batch(batch).await?;
        }
        Ok(last)
    }

    async fn append_batch(&self, entries: &[LogEntry]) -> Result<u64, ClusterError> {
        let key = self.seq_key();
        for _ in 0..APPEND_ATTEMPTS {
            let resp = self
                .plane
                .bounded(self.plane.client().get(key.clone(), None))
                .await?;
            let (seq, revision) = match resp.kvs().first() {
                Some(kv) => {
                    let seq = std::str::from_utf8(kv.value())
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                        .ok_or_else(|| ClusterError::Corrupt("central log sequence".into()))?;
                    (seq, kv.mod_revision())
                }
                None => (0, 0),
            };
            let last = seq + entries.len() as u64;
            let compare = if revision == 0 {
                Compare::create_revision(key.clone(), CompareOp::Equal, 0)
            } else {
                Compare::mod_revision(key.clone(), CompareOp::Equal, revision)
            };
            let mut ops = vec![TxnOp::put(key.clone(), last.to_string(), None)];
            for (i, entry) in entries.iter().enumerate() {
                let mut entry = entry.clone();
                entry.seq = seq + 1 + i as u64;
                entry.node = self.node.to_string();
                let value = serde_json::to_vec(&entry).expect("a log entry serialises");
                ops.push(TxnOp::put(self.entry_key(entry.seq), value, None));
            }
            if last > self.capacity {
                // Everything before the first kept entry: a range, so entries a crashed
                // appender might have left behind go too.
                let first_kept = last - self.capacity + 1;
                ops.push(TxnOp::delete(
                    self.entry_key(0),
                    Some(DeleteOptions::new().with_range(self.entry_key(first_kept))),
                ));
            }
            let txn = Txn::new().when([compare]).and_then(ops);
            if self
                .plane
                .bounded(self.plane.client().txn(txn))
                .await?
                .succeeded()
            {
                return Ok(last);
            }
        }
        Err(ClusterError::Conflict(APPEND_ATTEMPTS))
    }

    /// The last `n` entries, oldest first.
    pub async fn tail(&self, n: usize) -> Result<Vec<LogEntry>, ClusterError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Key, SortOrder::Descend)
            .with_limit(i64::try_from(n).unwrap_or(i64::MAX));
        let resp = self
            .plane
            .bounded(
                self.plane
                    .client()
                    .get(self.plane.key("log/e/"), Some(options)),
            )
            .await?;
        let mut entries = resp
            .kvs()
            .iter()
            .map(|kv| {
                serde_json::from_slice::<LogEntry>(kv.value())
                    .map_err(|e| ClusterError::Corrupt(format!("central log entry: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        entries.reverse();
        Ok(entries)
    }

    /// Starts the background appender of a [`LogQueue`] on the current tokio runtime.
    pub fn queue(self) -> LogQueue {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let (written_tx, written_rx) = watch::channel(0u64);
        let counters = Arc::new(Counters::default());
        let task = tokio::spawn(drain(self, rx, written_tx, Arc::clone(&counters)));
        LogQueue {
            tx,
            written: written_rx,
            counters,
            task,
        }
    }
}

#[derive(Default)]
struct Counters {
    queued: AtomicU64,
    dropped: AtomicU64,
}

/// Writes queued entries in batches; while etcd is away it retries the batch it holds and
/// lets the queue fill up.
async fn drain(
    log: CentralLog,
    mut rx: mpsc::Receiver<LogEntry>,
    written: watch::Sender<u64>,
    counters: Arc<Counters>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(entry) => batch.push(entry),
                Err(_) => break,
            }
        }
        let mut backoff = Duration::from_millis(100);
        while let Err(e) = log.append(&batch).await {
            if matches!(e, ClusterError::Corrupt(_)) {
                counters
                    .dropped
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                break;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
        let n = batch.len() as u64;
        batch.clear();
        written.send_modify(|w| *w += n);
    }
}

/// A node's way into the central log: [`LogQueue::push`] never waits.
pub struct LogQueue {
    tx: mpsc::Sender<LogEntry>,
    written: watch::Receiver<u64>,
    counters: Arc<Counters>,
    task: tokio::task::JoinHandle<()>,
}

impl LogQueue {
    /// Queues `entry`; false (and counted) when the queue is full because etcd has been
    /// away for a while.
    pub fn push(&self, entry: LogEntry) -> bool {
        match self.tx.try_send(entry) {
            Ok(()) => {
                self.counters.queued.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Waits until everything queued so far is in etcd, for at most `within`; false on
    /// timeout.
    pub async fn flush(&self, within: Duration) -> bool {
        let target = self.counters.queued.load(Ordering::Relaxed);
        let mut written = self.written.clone();
        tokio::time::timeout(within, written.wait_for(|w| *w >= target))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Entries dropped because the queue was full (or etcd refused them).
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for LogQueue {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod entry_tests {
    use super::*;

    #[test]
    fn entries_serialize_with_typed_words_and_read_unknown_kinds() {
        let mut entry = LogEntry::new(
            Level::Warn,
            LogKind::RolledBack,
            "p@2",
            "a \"quoted\"\nline",
        );
        entry.at_ms = 5;
        let json = serde_json::to_value(&entry).unwrap();
        assert_eq!(json["level"], "warn");
        assert_eq!(json["kind"], "rolled_back");
        assert!(json.get("node").is_none(), "empty node left out");
        let back: LogEntry = serde_json::from_value(json).unwrap();
        assert_eq!(back, entry);
        assert!(entry
            .line()
            .starts_with("seq=0 at_ms=5 level=warn event=rolled_back policy=p@2 msg="));
        let newer = r#"{"seq":1,"at_ms":2,"level":"info","kind":"teleported","policy":"","message":"m","node":"n"}"#;
        let read: LogEntry = serde_json::from_str(newer).unwrap();
        assert_eq!(read.kind, LogKind::Other);
        for kind in [
            LogKind::Loaded,
            LogKind::SlotsReassigned,
            LogKind::Abandoned,
        ] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }
}
