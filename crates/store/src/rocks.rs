//! The embedded RocksDB store: the source of truth behind the cache. Every write goes through
//! RocksDB's write-ahead log before it is acknowledged; `--fsync` decides when that log is
//! forced to disk. With `always`, concurrent writers share fsyncs (group commit) through one
//! sync thread instead of each blocking a worker thread on its own fsync.
//!
//! Callers serialise writes to the same key (see `db.rs`), which is what makes the exact key
//! count below race-free.
//!
//! Failure (disk full, I/O errors): every write and every log flush passes through
//! [`WalGuard`]. A failed log flush leaves RocksDB's log writer in an error state in which the
//! next append aborts the process (the distribution's library is built with assertions), and
//! RocksDB only stops further writes a moment after the flush returned; so flushes take the
//! guard exclusively and writes share it, and the first failure stops writes here, before
//! they reach RocksDB. Writes are refused with the cause until a probe write succeeds again
//! (RocksDB recovers by itself from a full disk once there is room for a memtable flush).

use crate::record::{self, Record};
use crate::{Condition, Fsync, StoreError};
use bytes::Bytes;
use rocksdb::{WriteBatch, DB};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

mod batch;
mod group;
mod guard;
mod idle_flush;
mod keyspace;
mod memory;
mod open;
mod policy_space;
mod slots;
mod sync;
use batch::Batch;
use group::GroupCommit;
pub use guard::Health;
use guard::WalGuard;
use idle_flush::IdleFlusher;
pub use keyspace::KeyPage;
pub use memory::MemoryBudget;
pub use open::OpenOptions;
pub use policy_space::{Pair, PolicySpace};
pub use slots::Tracker;
use sync::Syncer;

/// Column family of the policy registry (see `live::registry`).
pub const POLICY_FAMILY: &str = "mantle.policy";

/// Marks a store whose keys carry their slot (see [`stored_key`]); a data dir without it that
/// holds keys was written before, with bare keys, and is refused.
const LAYOUT_KEY: &[u8] = b"store/layout";
const LAYOUT: &[u8] = b"slot-prefixed-v1";

/// Bytes of the slot prefix before every key in the default family.
pub const SLOT_PREFIX: usize = 2;

/// The on-disk key of `key`: its slot, big-endian, then the key, so one slot (and a range of
/// slots) is one contiguous key range to iterate, copy or `delete_range`. Keys up to 254
/// bytes are built on the stack; longer ones (rare) in a vector.
fn stored_key<R>(key: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    let slot = ::slots::key_slot(key).to_be_bytes();
    let len = SLOT_PREFIX + key.len();
    if len <= 256 {
        let mut buf = [0u8; 256];
        buf[..SLOT_PREFIX].copy_from_slice(&slot);
        buf[SLOT_PREFIX..len].copy_from_slice(key);
        f(&buf[..len])
    } else {
        let mut buf = Vec::with_capacity(len);
        buf.extend_from_slice(&slot);
        buf.extend_from_slice(key);
        f(&buf)
    }
}

thread_local! {
    /// Reused to encode records, so a write does not allocate for its encoding.
    static ENCODE_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

pub struct RocksStore {
    db: Arc<DB>,
    guard: Arc<WalGuard>,
    /// What recovering a damaged log cost at open, for INFO and the log.
    wal_report: Option<String>,
    /// Keys physically present (expired-but-unread ones included), as Redis's DBSIZE counts.
    keys: AtomicU64,
    fsync: Fsync,
    syncer: Option<Syncer>,
    /// Hands the memtable to disk when writes pause; dropped (stopped) before the final sync.
    /// Boxed: `Store`'s two back ends stay of similar size.
    idle_flusher: Option<Box<IdleFlusher>>,
    /// Writes to a slot range being migrated away (see [`Tracker`]).
    tracker: Tracker,
    group: GroupCommit,
}

impl RocksStore {
    pub fn key_count(&self) -> u64 {
        self.keys.load(Ordering::Relaxed)
    }

    /// The stored record, expired or not; the caller decides what an expired one means.
    pub fn get(&self, key: &[u8]) -> Result<Option<Record>, StoreError> {
        let raw = stored_key(key, |k| self.db.get_pinned(k)).map_err(rocks_error)?;
        let Some(raw) = raw else {
            return Ok(None);
        };
        let (expires_at_ms, value) =
            record::decode(&raw).ok_or_else(|| StoreError(corrupt(key)))?;
        Ok(Some(Record {
            value: Bytes::copy_from_slice(value),
            expires_at_ms,
        }))
    }

    /// Presence of `key`: `(physically stored, live at now_ms)`.
    fn presence(&self, key: &[u8], now_ms: u64) -> Result<(bool, bool), StoreError> {
        match stored_key(key, |k| self.db.get_pinned(k)).map_err(rocks_error)? {
            None => Ok((false, false)),
            Some(raw) => {
                let (expires_at_ms, _) =
                    record::decode(&raw).ok_or_else(|| StoreError(corrupt(key)))?;
                Ok((true, expires_at_ms == 0 || expires_at_ms > now_ms))
            }
        }
    }

    pub fn exists(&self, key: &[u8], now_ms: u64) -> Result<bool, StoreError> {
        Ok(self.presence(key, now_ms)?.1)
    }

    /// Whether a SET under `condition` may write `key`: `None` if not, else `Some(present)`.
    /// `known_live` says the caller knows the key exists (it is cached), which saves a read.
    fn admit(
        &self,
        key: &[u8],
        condition: Condition,
        now_ms: u64,
        known_live: bool,
    ) -> Result<Option<bool>, StoreError> {
        let (present, live) = if known_live {
            (true, true)
        } else {
            self.presence(key, now_ms)?
        };
        let allowed = match condition {
            Condition::Always => true,
            Condition::IfAbsent => !live,
            Condition::IfPresent => live,
        };
        Ok(allowed.then_some(present))
    }

    fn wrote(&self, key: &[u8], present: bool) {
        if !present {
            self.keys.fetch_add(1, Ordering::Relaxed);
        }
        self.tracker.note(key);
    }

    /// Writes `record` under `key` if `condition` holds; returns whether it wrote.
    /// The write is in RocksDB's WAL buffer when this returns: [`RocksStore::flush_wal`] and
    /// [`RocksStore::durable`] must run before it is acknowledged.
    pub fn set(
        &self,
        key: &[u8],
        record: &Record,
        condition: Condition,
        now_ms: u64,
        known_live: bool,
    ) -> Result<bool, StoreError> {
        let Some(present) = self.admit(key, condition, now_ms, known_live)? else {
            return Ok(false);
        };
        ENCODE_BUFFER.with(|buffer| {
            let mut buffer = buffer.borrow_mut();
            record.encode_into(&mut buffer);
            let result = self.guard.write(&self.db, |db| {
                stored_key(key, |k| db.put(k, buffer.as_slice()))
            });
            if buffer.capacity() > 1 << 20 {
                *buffer = Vec::new(); // do not keep a huge value's buffer per thread
            }
            result
        })?;
        self.wrote(key, present);
        Ok(true)
    }

    /// [`RocksStore::set`] through group commit: concurrent writers share one write batch
    /// (see `group.rs`). Same result and the same state on return; a failed batch fails
    /// every write in it.
    pub async fn set_grouped(
        &self,
        key: &[u8],
        record: &Record,
        condition: Condition,
        now_ms: u64,
        known_live: bool,
    ) -> Result<bool, StoreError> {
        let Some(present) = self.admit(key, condition, now_ms, known_live)? else {
            return Ok(false);
        };
        Batch::fits(key, record)?;
        let add = |batch: &mut Batch| batch.put_record(key, record);
        let write = |batch: Batch| {
            self.guard
                .write(&self.db, |db| db.write(batch.into_write_batch()))
        };
        self.group.submit(add, &write).await?;
        self.wrote(key, present);
        Ok(true)
    }

    /// Writes all pairs in one atomic batch. `known_live[i]` says the caller knows pair i's
    /// key exists (it is cached), which saves reading it to keep the key count exact.
    pub fn set_many(
        &self,
        pairs: &[(Bytes, Record)],
        known_live: &[bool],
    ) -> Result<(), StoreError> {
        let mut batch = Batch::default();
        let mut created = 0;
        // Keys read for presence, so a key named twice is counted once (no allocation while
        // every key is known).
        let mut seen = std::collections::HashSet::new();
        for (i, (key, record)) in pairs.iter().enumerate() {
            let known = known_live.get(i).copied().unwrap_or(false);
            if !known
                && seen.insert(&key[..])
                && stored_key(key, |k| self.db.get_pinned(k))
                    .map_err(rocks_error)?
                    .is_none()
            {
                created += 1;
            }
            Batch::fits(key, record)?;
            batch.put_record(key, record);
        }
        self.guard
            .write(&self.db, |db| db.write(batch.into_write_batch()))?;
        self.keys.fetch_add(created, Ordering::Relaxed);
        for (key, _) in pairs {
            self.tracker.note(key);
        }
        Ok(())
    }

    /// Applies a transaction's changes (a record to put, or `None` to delete) as one atomic
    /// batch: one WAL record, so a crash keeps all of them or none. Keys are distinct.
    pub fn write_batch(&self, changes: &[(Bytes, Option<Record>)]) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        let mut created = 0u64;
        let mut removed = 0u64;
        let mut encoded = Vec::new();
        for (key, change) in changes {
            let present = stored_key(key, |k| self.db.get_pinned(k))
                .map_err(rocks_error)?
                .is_some();
            match change {
                Some(record) => {
                    Batch::fits(key, record)?;
                    encoded.clear();
                    record.encode_into(&mut encoded);
                    stored_key(key, |k| batch.put(k, &encoded));
                    created += u64::from(!present);
                }
                None if present => {
                    stored_key(key, |k| batch.delete(k));
                    removed += 1;
                }
                None => {}
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.guard.write(&self.db, |db| db.write(batch))?;
        self.keys.fetch_add(created, Ordering::Relaxed);
        self.keys.fetch_sub(removed, Ordering::Relaxed);
        for (key, _) in changes {
            self.tracker.note(key);
        }
        Ok(())
    }

    /// Deletes the keys; returns how many of them were live.
    pub fn delete(&self, keys: &[Bytes], now_ms: u64) -> Result<u64, StoreError> {
        let mut batch = WriteBatch::default();
        let mut removed_live = 0;
        let mut removed = 0;
        let mut seen = std::collections::HashSet::with_capacity(keys.len());
        for key in keys {
            if !seen.insert(key.clone()) {
                continue;
            }
            let (present, live) = self.presence(key, now_ms)?;
            if present {
                stored_key(key, |k| batch.delete(k));
                removed += 1;
                removed_live += u64::from(live);
            }
        }
        if removed > 0 {
            self.guard.write(&self.db, |db| db.write(batch))?;
            self.keys.fetch_sub(removed, Ordering::Relaxed);
            for key in keys {
                self.tracker.note(key);
            }
        }
        Ok(removed_live)
    }

    /// Deletes `key` if it is stored but expired; returns whether it did.
    pub fn purge_expired(&self, key: &[u8], now_ms: u64) -> Result<bool, StoreError> {
        let (present, live) = self.presence(key, now_ms)?;
        if !present || live {
            return Ok(false);
        }
        self.guard
            .write(&self.db, |db| stored_key(key, |k| db.delete(k)))?;
        self.keys.fetch_sub(1, Ordering::Relaxed);
        self.tracker.note(key);
        Ok(true)
    }

    /// Hands the WAL records buffered so far to the operating system: from then on they
    /// survive the process being killed. Concurrent callers share the write.
    pub fn flush_wal(&self) -> Result<(), StoreError> {
        // Group commit leaves many connections committing the same writes: the first one's
        // flush covers the others (a failed store still answers with its error).
        if !self.guard.is_failed()
            && self.guard.flushed.load(Ordering::Acquire) >= self.db.latest_sequence_number()
        {
            return Ok(());
        }
        self.guard.flush(&self.db, false)
    }

    /// Whether some write is not yet as durable as `--fsync` promises; a reply that could
    /// reveal it waits for [`RocksStore::flush_wal`] and [`RocksStore::durable`] first.
    pub fn has_undurable_writes(&self) -> bool {
        let latest = self.db.latest_sequence_number();
        let durable = match (&self.syncer, self.fsync) {
            (Some(syncer), Fsync::Always) => *syncer.synced.borrow(),
            _ => self.guard.flushed.load(Ordering::Acquire),
        };
        latest > durable
    }

    pub fn health(&self) -> Health {
        self.guard.health()
    }

    /// What recovering a damaged log lost at open, if it was damaged.
    pub fn wal_report(&self) -> Option<&str> {
        self.wal_report.as_deref()
    }

    /// Waits until every write made before this call is as durable as `--fsync` promises.
    pub async fn durable(&self) -> Result<(), StoreError> {
        if self.fsync != Fsync::Always {
            return Ok(());
        }
        let Some(syncer) = &self.syncer else {
            return Ok(());
        };
        let target = self.db.latest_sequence_number();
        let mut synced = syncer.synced.clone();
        if *synced.borrow() >= target {
            return Ok(());
        }
        {
            let mut wanted = lock(&syncer.shared.wanted);
            *wanted = (*wanted).max(target);
        }
        syncer.shared.wake.notify_one();
        // The sync thread wakes waiters when the store fails, too: they get the error.
        let guard = &self.guard;
        synced
            .wait_for(|&done| done >= target || guard.is_failed())
            .await
            .map_err(|_| StoreError("the WAL sync thread stopped".into()))?;
        if *synced.borrow() >= target {
            Ok(())
        } else {
            Err(guard.refusal())
        }
    }

    /// Forces the log to disk; used at shutdown whatever `--fsync` says.
    pub fn sync_now(&self) -> Result<(), StoreError> {
        self.guard.flush(&self.db, true)
    }

    pub fn fsync(&self) -> Fsync {
        self.fsync
    }

    /// The policy registry's column family in this database.
    pub fn policy_space(&self) -> PolicySpace {
        PolicySpace {
            db: self.db.clone(),
            guard: self.guard.clone(),
        }
    }

    /// Bytes RocksDB's memtables and block cache hold now (within [`MemoryBudget`]), for INFO.
    pub fn memory_bytes(&self) -> u64 {
        let property = |name| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
        property("rocksdb.size-all-mem-tables") + property("rocksdb.block-cache-usage")
    }

    /// An estimate RocksDB keeps of its on-disk size, for INFO.
    pub fn disk_bytes(&self) -> u64 {
        self.db
            .property_int_value("rocksdb.total-sst-files-size")
            .ok()
            .flatten()
            .unwrap_or(0)
    }
}

impl Drop for RocksStore {
    fn drop(&mut self) {
        drop(self.idle_flusher.take());
        if let Some(mut syncer) = self.syncer.take() {
            syncer.shared.stop.store(true, Ordering::Relaxed);
            syncer.shared.wake.notify_all();
            if let Some(thread) = syncer.thread.take() {
                let _ = thread.join();
            }
        }
        if !self.guard.is_failed() {
            let _ = self.guard.flush(&self.db, true);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn rocks_error(e: rocksdb::Error) -> StoreError {
    StoreError(format!("RocksDB: {e}"))
}

fn corrupt(key: &[u8]) -> String {
    format!(
        "RocksDB holds a record this server did not write under key '{}'",
        String::from_utf8_lossy(key)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(value: &'static str, expires_at_ms: u64) -> Record {
        Record {
            value: Bytes::from_static(value.as_bytes()),
            expires_at_ms,
        }
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("mantle-rocks-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn conditions_counts_and_reopen() {
        let dir = temp_dir("basic");
        {
            let store = RocksStore::open(&dir, Fsync::No, OpenOptions::default()).unwrap();
            assert!(store
                .set(b"a", &record("1", 0), Condition::Always, 0, false)
                .unwrap());
            assert!(!store
                .set(b"a", &record("2", 0), Condition::IfAbsent, 0, false)
                .unwrap());
            assert!(store
                .set(b"a", &record("3", 0), Condition::IfPresent, 0, true)
                .unwrap());
            assert!(!store
                .set(b"b", &record("4", 0), Condition::IfPresent, 0, false)
                .unwrap());
            store
                .set_many(
                    &[
                        (Bytes::from_static(b"b"), record("5", 0)),
                        (Bytes::from_static(b"b"), record("6", 0)),
                        (Bytes::from_static(b"c"), record("7", 50)),
                    ],
                    &[],
                )
                .unwrap();
            assert_eq!(store.key_count(), 3);
            assert_eq!(store.get(b"b").unwrap().unwrap().value, "6");
            // `c` expired at 50: it is stored but not live.
            assert!(!store.exists(b"c", 60).unwrap());
            let removed = store
                .delete(&[Bytes::from_static(b"c"), Bytes::from_static(b"zz")], 60)
                .unwrap();
            assert_eq!(removed, 0);
            assert_eq!(store.key_count(), 2);
        }
        let store = RocksStore::open(&dir, Fsync::Always, OpenOptions::default()).unwrap();
        assert_eq!(store.key_count(), 2, "the key count is rebuilt on open");
        assert_eq!(store.get(b"a").unwrap().unwrap().value, "3");
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn memtables_are_built_with_few_in_place_update_locks() {
        // RocksDB writes the options it opened with to OPTIONS-NNNNNN; each memtable builds
        // this many read-write locks (10,000 by default: 0.55 MiB per memtable).
        let dir = temp_dir("locks");
        let store = RocksStore::open(&dir, Fsync::No, OpenOptions::default()).unwrap();
        drop(store);
        let options = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| {
                path.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with("OPTIONS-")
            })
            .map(|path| std::fs::read_to_string(path).unwrap())
            .next()
            .expect("RocksDB wrote an OPTIONS file");
        let data_family = options
            .split("[CFOptions \"default\"]")
            .nth(1)
            .expect("the data family's options");
        let locks: usize = data_family
            .lines()
            .find_map(|line| line.trim().strip_prefix("inplace_update_num_locks="))
            .expect("inplace_update_num_locks in the data family's options")
            .parse()
            .unwrap();
        assert_eq!(locks, open::INPLACE_UPDATE_LOCKS);
        assert!(locks <= 256, "{locks} lock stripes per memtable");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn fsync_always_waits_for_the_sync_thread() {
        let dir = temp_dir("always");
        let store = RocksStore::open(&dir, Fsync::Always, OpenOptions::default()).unwrap();
        for i in 0..20u8 {
            store
                .set(&[i], &record("v", 0), Condition::Always, 0, false)
                .unwrap();
            store.durable().await.unwrap();
        }
        let synced = *store.syncer.as_ref().unwrap().synced.borrow();
        assert!(synced >= store.db.latest_sequence_number());
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
    /// Bytes this thread has read through system calls so far (`rchar`: page cache included).
    fn thread_bytes_read() -> u64 {
        let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
        io.lines()
            .find_map(|line| line.strip_prefix("rchar: "))
            .unwrap()
            .parse()
            .unwrap()
    }

    #[test]
    fn a_lookup_reads_a_partition_of_a_large_tables_filter_not_all_of_it() {
        // 500,000 keys make one table whose whole filter (~1.25 B per key) is larger than a
        // block-cache shard (512 KiB with the default budget): such a filter left the cache as
        // soon as it was read, and every lookup read all of it from the file again.
        let dir = temp_dir("partitioned");
        let store = RocksStore::open(&dir, Fsync::No, OpenOptions::default()).unwrap();
        let keys = 500_000u32;
        for i in 0..keys {
            let key = format!("key:{i:012}");
            store
                .set(key.as_bytes(), &record("v", 0), Condition::Always, 0, true)
                .unwrap();
        }
        store.db.compact_range(None::<&[u8]>, None::<&[u8]>);
        let lookups = 2_000u32;
        let before = thread_bytes_read();
        for i in 0..lookups {
            let absent = format!("absent:{i:012}");
            assert!(store.get(absent.as_bytes()).unwrap().is_none());
        }
        for i in (0..keys).step_by((keys / lookups) as usize) {
            let present = format!("key:{i:012}");
            assert!(store.get(present.as_bytes()).unwrap().is_some());
        }
        let per_lookup = (thread_bytes_read() - before) / u64::from(2 * lookups);
        assert!(
            per_lookup < 32 << 10,
            "{per_lookup} bytes read from the table per lookup"
        );
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn memtable_bytes(store: &RocksStore) -> u64 {
        store
            .db
            .property_int_value("rocksdb.cur-size-active-mem-table")
            .unwrap()
            .unwrap()
    }

    /// Polls `done` for up to 30 s (the idle flush needs two ticks of 500 ms and a background
    /// flush; a loaded machine stretches both, and the wait is not what the test checks).
    fn eventually(mut done: impl FnMut() -> bool) -> bool {
        for _ in 0..300 {
            if done() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        done()
    }

    fn write_keys(store: &RocksStore, n: u32) {
        let value = "x".repeat(64).leak();
        for i in 0..n {
            let key = format!("key:{i:012}");
            store
                .set(
                    key.as_bytes(),
                    &record(value, 0),
                    Condition::Always,
                    0,
                    true,
                )
                .unwrap();
        }
    }

    #[test]
    fn a_memtable_is_flushed_once_writes_pause_and_its_keys_stay_readable() {
        let dir = temp_dir("idle-flush");
        let store = RocksStore::open(&dir, Fsync::EverySec, OpenOptions::default()).unwrap();
        write_keys(&store, 30_000); // ~3 MB of memtable, within the default 6 MiB one
        let full = memtable_bytes(&store);
        assert!(full >= idle_flush::MIN_IDLE_FLUSH, "{full} bytes buffered");
        assert!(
            eventually(|| memtable_bytes(&store) < full / 4
                && store
                    .db
                    .property_int_value("rocksdb.num-immutable-mem-table")
                    .unwrap()
                    == Some(0)),
            "the memtable still holds {} bytes",
            memtable_bytes(&store)
        );
        for i in [0u32, 14_999, 29_999] {
            let key = format!("key:{i:012}");
            assert_eq!(store.get(key.as_bytes()).unwrap().unwrap().value.len(), 64);
        }
        drop(store);
        let store = RocksStore::open(&dir, Fsync::No, OpenOptions::default()).unwrap();
        assert_eq!(store.key_count(), 30_000);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_small_or_switched_off_idle_memtable_is_left_alone() {
        let table_files = |store: &RocksStore| {
            store
                .db
                .property_int_value("rocksdb.num-files-at-level0")
                .unwrap()
                .unwrap()
        };
        let dir = temp_dir("idle-small");
        let store = RocksStore::open(&dir, Fsync::No, OpenOptions::default()).unwrap();
        write_keys(&store, 100); // ~10 KB: below the flush's minimum
        let off = temp_dir("idle-off");
        let switched_off = RocksStore::open(
            &off,
            Fsync::No,
            OpenOptions {
                flush_idle_memtables: false,
                ..OpenOptions::default()
            },
        )
        .unwrap();
        write_keys(&switched_off, 30_000);
        std::thread::sleep(idle_flush::TICK * 6);
        assert_eq!(table_files(&store), 0, "a tiny table file was written");
        assert_eq!(table_files(&switched_off), 0);
        assert!(memtable_bytes(&switched_off) >= idle_flush::MIN_IDLE_FLUSH);
        drop((store, switched_off));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&off);
    }
}
