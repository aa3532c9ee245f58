//! Memtables handed to disk once writes pause. Behind a cache the memtable is a second copy of
//! the latest writes: the cache serves them, so once a burst of writes is over the copy only
//! costs memory (up to the whole memtable budget: at 100,000 keys of 64 B, every key twice).
//! A thread looks at the store every [`TICK`]; when no write arrived since its last look and
//! the data's memtable holds at least [`MIN_IDLE_FLUSH`] bytes, it switches the memtable, and
//! RocksDB writes the old one to a table file and frees it. Under a steady write load nothing
//! changes: the memtables fill to their budget and flush as before.

use super::guard::WalGuard;
use rocksdb::DB;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long writes must pause before the memtable is flushed.
pub(super) const TICK: Duration = Duration::from_millis(500);

/// Fewest memtable bytes worth a flush: below it the table file would be tiny (more files
/// for compaction to merge) for little memory back.
pub(super) const MIN_IDLE_FLUSH: u64 = 1 << 20;

/// The thread that flushes idle memtables; dropping it stops and joins the thread.
pub(super) struct IdleFlusher {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl IdleFlusher {
    pub(super) fn start(db: Arc<DB>, guard: Arc<WalGuard>) -> IdleFlusher {
        Self::start_on(std::thread::Builder::new(), db, guard)
    }

    /// Starts the thread from `builder`; when the OS refuses it the store still serves (its
    /// memtables flush when full, as without the idle flush), and the log says so.
    fn start_on(builder: std::thread::Builder, db: Arc<DB>, guard: Arc<WalGuard>) -> IdleFlusher {
        let (stop, stopped) = std::sync::mpsc::channel();
        let spawned = builder
            .name("mantle-idle-flush".into())
            .spawn(move || idle_loop(&db, &guard, &stopped));
        let thread = match spawned {
            Ok(thread) => Some(thread),
            Err(err) => {
                crate::log_line!("{}", no_thread_warning(&err));
                None
            }
        };
        IdleFlusher {
            stop: Some(stop),
            thread,
        }
    }
}

fn no_thread_warning(err: &std::io::Error) -> String {
    format!(
        "mantle: cannot start the thread that flushes idle memtables ({err}); \
         a memtable is flushed only once full, and holds up to its budget of memory until then"
    )
}

impl Drop for IdleFlusher {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Whether the memtable is worth flushing: no write between two looks (`before` and `now`
/// are the store's latest sequence numbers) and at least [`MIN_IDLE_FLUSH`] bytes in it.
pub(super) fn is_idle_and_worth_flushing(before: u64, now: u64, memtable_bytes: u64) -> bool {
    before == now && memtable_bytes >= MIN_IDLE_FLUSH
}

fn idle_loop(db: &DB, guard: &WalGuard, stopped: &Receiver<()>) {
    let mut before = db.latest_sequence_number();
    loop {
        match stopped.recv_timeout(TICK) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = db.latest_sequence_number();
        let memtable_bytes = db
            .property_int_value("rocksdb.cur-size-active-mem-table")
            .ok()
            .flatten()
            .unwrap_or(0);
        if is_idle_and_worth_flushing(before, now, memtable_bytes) {
            // A failure has failed the store (the guard logs it); the write path probes it.
            let _ = guard.switch_memtable(db);
        }
        before = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_the_os_refuses_leaves_a_store_without_idle_flushes_and_a_warning() {
        let dir = std::env::temp_dir().join(format!("mantle-idle-flush-{}", std::process::id()));
        let db = Arc::new(DB::open_default(&dir).unwrap());
        // No OS gives a thread an exabyte of stack.
        let refused = std::thread::Builder::new().stack_size(1 << 60);
        let flusher = IdleFlusher::start_on(refused, db.clone(), Arc::new(WalGuard::new(0)));
        assert!(flusher.thread.is_none());
        drop(flusher); // and stopping it does not wait for a thread that never ran
        let started = IdleFlusher::start(db.clone(), Arc::new(WalGuard::new(0)));
        assert!(started.thread.is_some());
        drop(started);
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);

        let err = std::io::Error::from(std::io::ErrorKind::OutOfMemory);
        let warning = no_thread_warning(&err);
        assert!(warning.contains("flushes idle memtables"), "{warning}");
        assert!(warning.contains(&err.to_string()), "{warning}");
    }

    #[test]
    fn only_an_idle_memtable_of_a_megabyte_or_more_is_flushed() {
        assert!(is_idle_and_worth_flushing(7, 7, MIN_IDLE_FLUSH));
        assert!(
            !is_idle_and_worth_flushing(7, 8, 64 << 20),
            "writes arrived"
        );
        assert!(
            !is_idle_and_worth_flushing(7, 7, MIN_IDLE_FLUSH - 1),
            "too small"
        );
    }
}
