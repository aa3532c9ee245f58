//! The WAL guard: orders writes against log flushes and remembers the store's failure (see
//! the module doc of `rocks`), and probes a failed store until it takes writes again.

use super::{lock, rocks_error, POLICY_FAMILY};
use crate::StoreError;
use rocksdb::DB;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

/// Least time between two probes of a failed store's write path.
pub(super) const PROBE_INTERVAL: Duration = Duration::from_millis(500);
/// Key of the probe write (in the policy family, outside every prefix the registry scans).
const PROBE_KEY: &[u8] = b"store/probe";
/// Orders writes against log flushes and remembers the store's failure (see the module doc).
pub(super) struct WalGuard {
    /// Writes hold it shared, log flushes exclusively.
    gate: RwLock<()>,
    /// Highest sequence number handed to the operating system.
    pub(super) flushed: AtomicU64,
    failed: AtomicBool,
    failure: Mutex<Option<Failure>>,
}

struct Failure {
    cause: String,
    since: Instant,
    last_probe: Instant,
}

/// What the store's write path is doing, for INFO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    Ok,
    /// Writes are refused since `seconds` ago because of `cause`.
    Failed {
        cause: String,
        seconds: u64,
    },
}

impl WalGuard {
    pub(super) fn new(flushed: u64) -> WalGuard {
        WalGuard {
            gate: RwLock::new(()),
            flushed: AtomicU64::new(flushed),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
        }
    }

    pub(super) fn shared(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.gate
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn exclusive(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        self.gate
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Stops writes; the first cause is kept (later errors are its consequences).
    pub(super) fn fail(&self, cause: &str) {
        let mut failure = lock(&self.failure);
        if failure.is_none() {
            crate::log_line!("mantle: store failed, refusing writes until it recovers: {cause}");
            let now = Instant::now();
            *failure = Some(Failure {
                cause: cause.to_string(),
                since: now,
                last_probe: now,
            });
        }
        self.failed.store(true, Ordering::Release);
    }

    pub(super) fn refusal(&self) -> StoreError {
        let cause = lock(&self.failure)
            .as_ref()
            .map(|f| f.cause.clone())
            .unwrap_or_default();
        StoreError(format!(
            "writes refused until the store recovers (free disk space in the data dir): {cause}"
        ))
    }

    /// A write that raced the first failure gets RocksDB's later message ("Seen error. Skip
    /// writing buffer"), which does not say why: add the cause that started it.
    pub(super) fn with_first_cause(&self, error: StoreError) -> StoreError {
        match lock(&self.failure).as_ref().map(|f| f.cause.clone()) {
            Some(first) if first != error.0 => StoreError(format!("{} (after: {first})", error.0)),
            _ => error,
        }
    }

    pub fn health(&self) -> Health {
        match &*lock(&self.failure) {
            None => Health::Ok,
            Some(failure) => Health::Failed {
                cause: failure.cause.clone(),
                seconds: failure.since.elapsed().as_secs(),
            },
        }
    }

    /// Runs one write unless the store has failed; a failed write fails the store.
    pub(super) fn write<T>(
        &self,
        db: &DB,
        write: impl FnOnce(&DB) -> Result<T, rocksdb::Error>,
    ) -> Result<T, StoreError> {
        if self.is_failed() && !self.recover(db) {
            return Err(self.refusal());
        }
        let _shared = self.shared();
        write(db).map_err(|e| {
            let error = rocks_error(e);
            self.fail(&error.0);
            self.with_first_cause(error)
        })
    }

    /// Hands the log to the OS (and with `sync` to the disk); every write made before is
    /// covered. A failure fails the store.
    pub(super) fn flush(&self, db: &DB, sync: bool) -> Result<(), StoreError> {
        if self.is_failed() && !self.recover(db) {
            return Err(self.refusal());
        }
        let _exclusive = self.exclusive();
        let target = db.latest_sequence_number();
        match db.flush_wal(sync) {
            Ok(()) => {
                self.flushed.fetch_max(target, Ordering::AcqRel);
                Ok(())
            }
            Err(e) => {
                let error = rocks_error(e);
                self.fail(&error.0);
                Err(self.with_first_cause(error))
            }
        }
    }

    /// Switches the data's memtable for an empty one and lets RocksDB write the full one to
    /// a table file in the background (see `idle_flush`). Switching hands the log's buffer to
    /// the OS, like [`WalGuard::flush`], so it excludes writes the same way and a failure
    /// fails the store. A failed store is left to the write path's probes.
    pub(super) fn switch_memtable(&self, db: &DB) -> Result<(), StoreError> {
        if self.is_failed() {
            return Err(self.refusal());
        }
        let _exclusive = self.exclusive();
        let mut options = rocksdb::FlushOptions::default();
        options.set_wait(false);
        match db.flush_opt(&options) {
            Ok(()) => Ok(()),
            Err(e) => {
                let error = rocks_error(e);
                self.fail(&error.0);
                Err(self.with_first_cause(error))
            }
        }
    }

    /// Probes a failed store (at most every [`PROBE_INTERVAL`]): a write and a log flush.
    /// When both succeed RocksDB has recovered (its recovery flushes the memtables, so every
    /// write it holds is on disk) and writes resume. Returns whether the store is healthy.
    pub(super) fn recover(&self, db: &DB) -> bool {
        {
            let mut failure = lock(&self.failure);
            match failure.as_mut() {
                None => return true,
                Some(f) if f.last_probe.elapsed() < PROBE_INTERVAL => return false,
                Some(f) => f.last_probe = Instant::now(),
            }
        }
        let _exclusive = self.exclusive();
        let Some(family) = db.cf_handle(POLICY_FAMILY) else {
            return false;
        };
        let target = db.latest_sequence_number();
        if db.put_cf(family, PROBE_KEY, b"").is_err() || db.flush_wal(false).is_err() {
            return false;
        }
        self.flushed.fetch_max(target + 1, Ordering::AcqRel);
        if let Some(failure) = lock(&self.failure).take() {
            crate::log_line!(
                "mantle: store writable again after {}s (it had failed: {})",
                failure.since.elapsed().as_secs(),
                failure.cause
            );
        }
        self.failed.store(false, Ordering::Release);
        true
    }
}
