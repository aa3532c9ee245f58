//! The background thread that forces the log to disk: on demand for `--fsync always` (group
//! commit: concurrent writers share one fsync) or once a second for `everysec`.

use super::guard::{WalGuard, PROBE_INTERVAL};
use super::lock;
use crate::{Fsync, StoreError};
use rocksdb::DB;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::watch;

/// The background thread that forces the log to disk: on demand (`always`) or every second.
pub(super) struct Syncer {
    pub(super) shared: Arc<SyncShared>,
    pub(super) synced: watch::Receiver<u64>,
    pub(super) thread: Option<JoinHandle<()>>,
}

pub(super) struct SyncShared {
    /// Highest sequence number some writer waits to see durable.
    pub(super) wanted: Mutex<u64>,
    pub(super) wake: Condvar,
    pub(super) stop: AtomicBool,
}

impl Syncer {
    pub(super) fn start(
        db: Arc<DB>,
        guard: Arc<WalGuard>,
        fsync: Fsync,
    ) -> Result<Syncer, StoreError> {
        Self::start_on(std::thread::Builder::new(), db, guard, fsync)
    }

    /// Starts the thread from `builder`. Without it `--fsync always` could acknowledge no
    /// write and `everysec` would never sync, so a refusal from the OS fails the open.
    fn start_on(
        builder: std::thread::Builder,
        db: Arc<DB>,
        guard: Arc<WalGuard>,
        fsync: Fsync,
    ) -> Result<Syncer, StoreError> {
        let shared = Arc::new(SyncShared {
            wanted: Mutex::new(0),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let (tx, synced) = watch::channel(0u64);
        let thread_shared = shared.clone();
        let thread = builder
            .name("mantle-wal-sync".into())
            .spawn(move || sync_loop(&db, &guard, &thread_shared, &tx, fsync))
            .map_err(|err| no_thread_error(&err, fsync))?;
        Ok(Syncer {
            shared,
            synced,
            thread: Some(thread),
        })
    }
}

fn no_thread_error(err: &std::io::Error, fsync: Fsync) -> StoreError {
    StoreError(format!(
        "cannot start the thread that syncs the write-ahead log for --fsync {} ({err})",
        fsync.as_str()
    ))
}

fn sync_loop(
    db: &DB,
    guard: &WalGuard,
    shared: &SyncShared,
    synced: &watch::Sender<u64>,
    fsync: Fsync,
) {
    let mut done = 0u64;
    loop {
        {
            let mut wanted = lock(&shared.wanted);
            while !shared.stop.load(Ordering::Relaxed)
                && (fsync == Fsync::Always && *wanted <= done)
            {
                wanted = shared
                    .wake
                    .wait(wanted)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            if fsync == Fsync::EverySec && !shared.stop.load(Ordering::Relaxed) {
                let (guard, _) = shared
                    .wake
                    .wait_timeout(wanted, Duration::from_secs(1))
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                drop(guard);
            }
        }
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        if guard.is_failed() {
            // Wake the writers waiting on this sync: they answer with the store's error.
            // Probing for recovery is the write path's job.
            synced.send_modify(|_| {});
            if fsync == Fsync::Always {
                std::thread::sleep(PROBE_INTERVAL);
            }
            continue;
        }
        let target = db.latest_sequence_number();
        if guard.flush(db, true).is_ok() {
            done = target;
            synced.send_replace(target);
        } else {
            synced.send_modify(|_| {});
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sync_thread_the_os_refuses_fails_the_open_with_the_fsync_mode_named() {
        let dir = std::env::temp_dir().join(format!("mantle-wal-sync-{}", std::process::id()));
        let db = Arc::new(DB::open_default(&dir).unwrap());
        for fsync in [Fsync::Always, Fsync::EverySec] {
            // No OS gives a thread an exabyte of stack.
            let refused = std::thread::Builder::new().stack_size(1 << 60);
            let err = Syncer::start_on(refused, db.clone(), Arc::new(WalGuard::new(0)), fsync)
                .err()
                .expect("no thread, no syncer");
            assert!(err.0.contains("syncs the write-ahead log"), "{}", err.0);
            assert!(err.0.contains(fsync.as_str()), "{}", err.0);
        }
        let mut started = Syncer::start(db.clone(), Arc::new(WalGuard::new(0)), Fsync::EverySec)
            .expect("a thread of the default size starts");
        started.shared.stop.store(true, Ordering::Relaxed);
        started.shared.wake.notify_all();
        started.thread.take().unwrap().join().unwrap();
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
