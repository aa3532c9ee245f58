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
        let (stop, stopped) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("mantle-idle-flush".into())
            .spawn(move || idle_loop(&db, &guard, &stopped))
            .ok();
        IdleFlusher {
            stop: Some(stop),
            thread,
        }
    }
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
