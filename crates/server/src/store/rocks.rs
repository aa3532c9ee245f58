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

use super::record::{self, Record};
use super::{wal_scan, Condition, StoreError};
use crate::config::{Fsync, WalRecovery};
use bytes::Bytes;
use rocksdb::{
    BlockBasedOptions, ColumnFamilyDescriptor, DBCompressionType, DBRecoveryMode, LogLevel,
    MemtableFactory, Options, ReadOptions, SliceTransform, WriteBatch, DB,
};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::watch;

mod batch;
mod group;
mod slots;
use batch::Batch;
use group::GroupCommit;
pub use slots::Tracker;

/// Column family of the policy registry (see `live::registry`).
pub const POLICY_FAMILY: &str = "mantle.policy";

/// Hash buckets of each memtable (8 bytes each): one per slot, the memtable's hash prefix.
const MEMTABLE_BUCKETS: usize = cluster::SLOTS as usize;

/// Bytes of one memtable of the data (RocksDB keeps up to two: the one filling, one flushing).
const WRITE_BUFFER_BYTES: usize = 8 << 20;

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
    let slot = cluster::key_slot(key).to_be_bytes();
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

/// Least time between two probes of a failed store's write path.
const PROBE_INTERVAL: Duration = Duration::from_millis(500);
/// Key of the probe write (in the policy family, outside every prefix the registry scans).
const PROBE_KEY: &[u8] = b"store/probe";
/// Free space below which the store does not open. Opening writes RocksDB's log header, a
/// manifest, an options file and a new WAL; if the disk fills while RocksDB writes its own log,
/// the distribution's librocksdb (built with assertions) aborts instead of returning an error.
const MIN_FREE_TO_OPEN: u64 = 1 << 20;

/// How to open the store, beyond `--fsync`.
#[derive(Clone, Copy, Debug)]
pub struct OpenOptions {
    /// Most table files RocksDB keeps open: its share of the descriptor budget (`server.rs`).
    pub max_open_files: i32,
    pub wal_recovery: WalRecovery,
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions {
            max_open_files: 256,
            wal_recovery: WalRecovery::Strict,
        }
    }
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
    /// Writes to a slot range being migrated away (see [`Tracker`]).
    tracker: Tracker,
    group: GroupCommit,
}

/// The background thread that forces the log to disk: on demand (`always`) or every second.
struct Syncer {
    shared: Arc<SyncShared>,
    synced: watch::Receiver<u64>,
    thread: Option<JoinHandle<()>>,
}

/// Orders writes against log flushes and remembers the store's failure (see the module doc).
pub struct WalGuard {
    /// Writes hold it shared, log flushes exclusively.
    gate: RwLock<()>,
    /// Highest sequence number handed to the operating system.
    flushed: AtomicU64,
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
    fn new(flushed: u64) -> WalGuard {
        WalGuard {
            gate: RwLock::new(()),
            flushed: AtomicU64::new(flushed),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
        }
    }

    fn shared(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.gate
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn exclusive(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        self.gate
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Stops writes; the first cause is kept (later errors are its consequences).
    fn fail(&self, cause: &str) {
        let mut failure = lock(&self.failure);
        if failure.is_none() {
            crate::log::log_line!(
                "mantle: store failed, refusing writes until it recovers: {cause}"
            );
            let now = Instant::now();
            *failure = Some(Failure {
                cause: cause.to_string(),
                since: now,
                last_probe: now,
            });
        }
        self.failed.store(true, Ordering::Release);
    }

    fn refusal(&self) -> StoreError {
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
    fn with_first_cause(&self, error: StoreError) -> StoreError {
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
    fn write<T>(
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
    fn flush(&self, db: &DB, sync: bool) -> Result<(), StoreError> {
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

    /// Probes a failed store (at most every [`PROBE_INTERVAL`]): a write and a log flush.
    /// When both succeed RocksDB has recovered (its recovery flushes the memtables, so every
    /// write it holds is on disk) and writes resume. Returns whether the store is healthy.
    fn recover(&self, db: &DB) -> bool {
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
            crate::log::log_line!(
                "mantle: store writable again after {}s (it had failed: {})",
                failure.since.elapsed().as_secs(),
                failure.cause
            );
        }
        self.failed.store(false, Ordering::Release);
        true
    }
}

struct SyncShared {
    /// Highest sequence number some writer waits to see durable.
    wanted: Mutex<u64>,
    wake: Condvar,
    stop: AtomicBool,
}

impl RocksStore {
    pub fn open(dir: &Path, fsync: Fsync, open: OpenOptions) -> Result<RocksStore, StoreError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError(format!("cannot create data dir {}: {e}", dir.display())))?;
        check_free_space(dir)?;
        let scan = wal_scan::scan(dir).map_err(|e| {
            StoreError(format!(
                "cannot read the write-ahead log in {}: {e}",
                dir.display()
            ))
        })?;
        if scan.is_damaged() && open.wal_recovery == WalRecovery::Strict {
            return Err(StoreError(format!(
                "refusing to open the store in {}: {}. Nothing was changed. To start anyway and \
                 accept the loss, pass --wal-recovery point-in-time (drops everything logged \
                 after the damage) or --wal-recovery skip-corrupted (drops only the damaged \
                 records); copy the data dir first to keep the evidence",
                dir.display(),
                scan.describe()
            )));
        }
        let mut options = Options::default();
        options.create_if_missing(true);
        options.set_max_open_files(open.max_open_files);
        // The scan above has vetted the log: what is left to tolerate is a torn last record.
        options.set_wal_recovery_mode(match open.wal_recovery {
            WalRecovery::Strict => DBRecoveryMode::TolerateCorruptedTailRecords,
            WalRecovery::PointInTime => DBRecoveryMode::PointInTime,
            WalRecovery::SkipCorrupted => DBRecoveryMode::SkipAnyCorruptedRecord,
        });
        options.set_max_background_jobs(2);
        options.set_keep_log_file_num(4);
        // RocksDB's own log file (LOG in the data dir) keeps only its header: version and
        // options. Anything more is written again after the disk has filled, and the
        // distribution's librocksdb (built with assertions) aborts the process when a file
        // writer that has failed is written again. The errors that matter reach the server
        // as statuses and are logged by it with their cause.
        options.set_log_level(LogLevel::Header);
        options.set_max_log_file_size(16 << 20);
        // The WAL is written to the OS when the server is about to acknowledge writes (see
        // `flush_wal`), so a pipelined batch of writes costs one write system call, not one each.
        options.set_manual_wal_flush(true);
        // A hashed memtable with one bucket per slot (the prefix): a point write or read
        // looks only at its slot's few buffered writes, and a slot is iterated within its
        // bucket. Scans across slots (the key count at start-up) ask for total order. Linked
        // lists rather than skip lists per bucket: a SET's insert cost 2.4% fewer instructions
        // without pipelining, 3.8% at `-P 16` (bench/RESULTS.md), and RocksDB turns a bucket
        // past 256 entries into a skip list, so one hot slot (`redis-benchmark --cluster`
        // puts every key of a node under one hash tag) stays logarithmic.
        options.set_prefix_extractor(SliceTransform::create_fixed_prefix(SLOT_PREFIX));
        options.set_memtable_factory(MemtableFactory::HashLinkList {
            bucket_count: MEMTABLE_BUCKETS,
        });
        options.set_allow_concurrent_memtable_write(false);
        // Overwriting a key still in the memtable with a value no larger replaces it there
        // instead of stacking a new version (cache workloads overwrite hot keys constantly;
        // without it a SET cost 14-23% more, flushes included).
        options.set_inplace_update_support(true);
        // A bloom filter over the memtable's keys: most presence checks are for absent keys.
        options.set_memtable_prefix_bloom_ratio(0.02);
        options.set_memtable_whole_key_filtering(true);
        // A write-through tier behind a cache: the cache holds the hot values, so a memtable
        // that holds a second copy of every recent write (64 MiB by default, all resident)
        // buys little; smaller ones bound the server's memory at the cost of more flushes.
        options.set_write_buffer_size(WRITE_BUFFER_BYTES);
        // The first levels are rewritten by compaction soon: compressing them would spend
        // CPU the request path competes for on small machines.
        options.set_compression_per_level(&[
            DBCompressionType::None,
            DBCompressionType::None,
            DBCompressionType::Snappy,
            DBCompressionType::Snappy,
            DBCompressionType::Snappy,
            DBCompressionType::Snappy,
            DBCompressionType::Snappy,
        ]);
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        options.set_block_based_table_factory(&table);
        options.create_missing_column_families(true);
        // The policy registry lives in its own column family with ordinary (sorted) memtables:
        // it is scanned in key order, and never mixes with the cached data's key count.
        let families = vec![
            ColumnFamilyDescriptor::new(rocksdb::DEFAULT_COLUMN_FAMILY_NAME, options.clone()),
            ColumnFamilyDescriptor::new(POLICY_FAMILY, Options::default()),
        ];
        let db = DB::open_cf_descriptors(&options, dir, families)
            .map_err(|e| StoreError(format!("cannot open RocksDB in {}: {e}", dir.display())))?;
        let db = Arc::new(db);
        check_layout(&db, dir)?;
        let keys = count_keys(&db)?;
        let wal_report = scan.is_damaged().then(|| {
            let recovered = db.latest_sequence_number();
            let dropped_tail = scan.end_sequence.saturating_sub(recovered + 1);
            let lost = scan.gap_writes.max(dropped_tail);
            let report = format!(
                "{}; recovered with --wal-recovery {}: {lost} logged writes lost, {keys} keys left",
                scan.describe(),
                open.wal_recovery.as_str()
            );
            crate::log::log_line!("mantle: write-ahead log damaged: {report}");
            report
        });
        let guard = Arc::new(WalGuard::new(db.latest_sequence_number()));
        let syncer = match fsync {
            Fsync::No => None,
            Fsync::Always | Fsync::EverySec => {
                Some(Syncer::start(db.clone(), guard.clone(), fsync))
            }
        };
        Ok(RocksStore {
            db,
            guard,
            wal_report,
            keys: AtomicU64::new(keys),
            fsync,
            syncer,
            tracker: Tracker::default(),
            group: GroupCommit::default(),
        })
    }

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

impl Syncer {
    fn start(db: Arc<DB>, guard: Arc<WalGuard>, fsync: Fsync) -> Syncer {
        let shared = Arc::new(SyncShared {
            wanted: Mutex::new(0),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let (tx, synced) = watch::channel(0u64);
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("mantle-wal-sync".into())
            .spawn(move || sync_loop(&db, &guard, &thread_shared, &tx, fsync))
            .ok();
        Syncer {
            shared,
            synced,
            thread,
        }
    }
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

/// A key and its value, owned.
pub type Pair = (Vec<u8>, Vec<u8>);

/// The registry's view of RocksDB: sorted keys in [`POLICY_FAMILY`], written in atomic
/// batches that reach the operating system (and, with `sync`, the disk) before returning.
#[derive(Clone)]
pub struct PolicySpace {
    db: Arc<DB>,
    guard: Arc<WalGuard>,
}

impl PolicySpace {
    fn family(&self) -> Result<&rocksdb::ColumnFamily, StoreError> {
        self.db
            .cf_handle(POLICY_FAMILY)
            .ok_or_else(|| StoreError(format!("RocksDB: column family {POLICY_FAMILY} missing")))
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.db.get_cf(self.family()?, key).map_err(rocks_error)
    }

    /// Applies the puts (`Some`) and deletes (`None`) atomically.
    pub fn write(
        &self,
        changes: &[(Vec<u8>, Option<Vec<u8>>)],
        sync: bool,
    ) -> Result<(), StoreError> {
        let family = self.family()?;
        let mut batch = WriteBatch::default();
        for (key, value) in changes {
            match value {
                Some(value) => batch.put_cf(family, key, value),
                None => batch.delete_cf(family, key),
            }
        }
        self.guard.write(&self.db, |db| db.write(batch))?;
        // The WAL is flushed by hand (see `open`): without this a SIGKILL could lose the batch.
        self.guard.flush(&self.db, sync)
    }

    /// Every pair whose key starts with `prefix`, in key order.
    pub fn scan(&self, prefix: &[u8]) -> Result<Vec<Pair>, StoreError> {
        let mut iter = self.db.raw_iterator_cf(self.family()?);
        iter.seek(prefix);
        let mut out = Vec::new();
        while iter.valid() {
            let (Some(key), Some(value)) = (iter.key(), iter.value()) else {
                break;
            };
            if !key.starts_with(prefix) {
                break;
            }
            out.push((key.to_vec(), value.to_vec()));
            iter.next();
        }
        iter.status().map_err(rocks_error)?;
        Ok(out)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Refuses a data dir written with bare keys (before keys carried their slot) and marks a
/// new one. Reading bare keys as slot-prefixed ones would serve garbage, and rewriting them in
/// place could be cut short by a crash half-way, so the operator decides.
fn check_layout(db: &DB, dir: &Path) -> Result<(), StoreError> {
    let family = db
        .cf_handle(POLICY_FAMILY)
        .ok_or_else(|| StoreError(format!("RocksDB: column family {POLICY_FAMILY} missing")))?;
    match db.get_cf(family, LAYOUT_KEY).map_err(rocks_error)? {
        Some(layout) if layout == LAYOUT => Ok(()),
        Some(layout) => Err(StoreError(format!(
            "refusing to open the store in {}: its key layout '{}' is not one this Mantle \
             knows ({}); it was written by a newer version",
            dir.display(),
            String::from_utf8_lossy(&layout),
            String::from_utf8_lossy(LAYOUT)
        ))),
        None => {
            let mut read = ReadOptions::default();
            read.set_total_order_seek(true);
            let mut iter = db.raw_iterator_opt(read);
            iter.seek_to_first();
            if iter.valid() {
                return Err(StoreError(format!(
                    "refusing to open the store in {}: it was written by an earlier Mantle, \
                     whose keys do not start with their cluster slot. Nothing was changed. \
                     Start this version with an empty --data-dir (the cache refills from the \
                     clients), or keep serving this one with the older version",
                    dir.display()
                )));
            }
            iter.status().map_err(rocks_error)?;
            drop(iter);
            db.put_cf(family, LAYOUT_KEY, LAYOUT).map_err(rocks_error)?;
            db.flush_wal(true).map_err(rocks_error)
        }
    }
}

/// Refuses to open on a (nearly) full filesystem with a message saying so: see
/// [`MIN_FREE_TO_OPEN`].
fn check_free_space(dir: &Path) -> Result<(), StoreError> {
    let free = free_bytes(dir).map_err(|e| {
        StoreError(format!(
            "cannot read the free space of data dir {}: {e}",
            dir.display()
        ))
    })?;
    if free < MIN_FREE_TO_OPEN {
        return Err(StoreError(format!(
            "refusing to open the store in {}: its filesystem has {free} bytes free, and \
             RocksDB needs at least {MIN_FREE_TO_OPEN} to start (its log, manifest, options \
             file and a new write-ahead log). Nothing was changed; free some space and start \
             again",
            dir.display()
        )));
    }
    Ok(())
}

/// Bytes an unprivileged writer may still use on `dir`'s filesystem (what `df` shows).
fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs reads the NUL-terminated path and writes only into `stat`.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

fn count_keys(db: &DB) -> Result<u64, StoreError> {
    let mut read = ReadOptions::default();
    read.set_total_order_seek(true);
    let mut iter = db.raw_iterator_opt(read);
    iter.seek_to_first();
    let mut n = 0;
    while iter.valid() {
        n += 1;
        iter.next();
    }
    iter.status().map_err(rocks_error)?;
    Ok(n)
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
}
