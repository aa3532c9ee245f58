//! Opening the store: vetting the write-ahead log and the disk first, RocksDB's options for a
//! write-through tier behind a cache, and the checks of the data dir's layout.

use super::guard::WalGuard;
use super::idle_flush::IdleFlusher;
use super::memory::MemoryBudget;
use super::sync::Syncer;
use super::{
    rocks_error, GroupCommit, RocksStore, Tracker, LAYOUT, LAYOUT_KEY, POLICY_FAMILY, SLOT_PREFIX,
};
use crate::{wal_scan, Fsync, StoreError, WalRecovery};
use rocksdb::{
    BlockBasedIndexType, BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBCompressionType,
    DBRecoveryMode, LogLevel, MemtableFactory, Options, ReadOptions, SliceTransform, DB,
};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Hash buckets of each memtable (8 bytes each): one per slot, the memtable's hash prefix.
const MEMTABLE_BUCKETS: usize = ::slots::SLOTS as usize;

/// Lock stripes of in-place updates in each memtable. RocksDB's default, 10,000, builds as
/// many `pthread_rwlock_t`s (56 B each) with every memtable: 0.55 MiB written at start and
/// per memtable (two while one flushes), the largest single part of the server's anonymous
/// memory at start (bench/RESULTS.md, issue 30). Writes reach the memtable from one thread
/// (no concurrent memtable writes) and reads from the few worker threads, so 256 stripes
/// keep two of them on one stripe rare.
pub(crate) const INPLACE_UPDATE_LOCKS: usize = 256;

/// Target size of one partition of a table's filter or index: a data block's.
const METADATA_BLOCK_BYTES: usize = 4096;

/// Memtable bytes of the policy registry's family (it holds versions of small sources).
const POLICY_WRITE_BUFFER_BYTES: usize = 1 << 20;

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
    /// RocksDB's memtables and block cache (its share of `--maxmemory`).
    pub memory: MemoryBudget,
    /// Flush the data's memtable once writes pause (see `idle_flush`): the server's default;
    /// off for tools that open a store briefly.
    pub flush_idle_memtables: bool,
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions {
            max_open_files: 256,
            wal_recovery: WalRecovery::Strict,
            memory: MemoryBudget::default(),
            flush_idle_memtables: true,
        }
    }
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
        options.set_inplace_update_locks(INPLACE_UPDATE_LOCKS);
        // A bloom filter over the memtable's keys: most presence checks are for absent keys.
        options.set_memtable_prefix_bloom_ratio(0.02);
        options.set_memtable_whole_key_filtering(true);
        // A write-through tier behind a cache: the cache holds the hot values, so a memtable
        // that holds a second copy of every recent write (64 MiB by default, all resident)
        // buys little; smaller ones bound the server's memory at the cost of more flushes.
        // All memtables together stay within the budget (`db_write_buffer_size` flushes the
        // largest when their sum reaches it).
        options.set_db_write_buffer_size(open.memory.memtables);
        options.set_write_buffer_size(open.memory.write_buffer());
        options.set_max_write_buffer_number(2);
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
        // One block cache for both families, holding the tables' index and filter blocks
        // too: without that they sit outside any bound, one set per open table file.
        let block_cache = Cache::new_lru_cache(open.memory.block_cache)
            .map_err(|e| StoreError(format!("cannot create RocksDB's block cache: {e}")))?;
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        table.set_block_cache(&block_cache);
        table.set_cache_index_and_filter_blocks(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        // Filters and indexes in partitions of about one data block, behind a small top
        // level pinned with the table: a whole filter or index grows with its table (~1.25
        // and ~0.7 bytes per key), and one larger than a block-cache shard (RocksDB cuts the
        // cache into up to 64 shards of at least 512 KiB) is dropped as soon as it has been
        // read, so every lookup of a key read it from the file again: loading 10M keys fell
        // to a few hundred SETs per second, each reading a 2 MB filter (bench/RESULTS.md).
        table.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
        table.set_partition_filters(true);
        table.set_metadata_block_size(METADATA_BLOCK_BYTES);
        table.set_pin_top_level_index_and_filter(true);
        options.set_block_based_table_factory(&table);
        options.create_missing_column_families(true);
        // The policy registry lives in its own column family with ordinary (sorted) memtables:
        // it is scanned in key order, and never mixes with the cached data's key count.
        let mut policy = Options::default();
        policy.set_write_buffer_size(POLICY_WRITE_BUFFER_BYTES);
        policy.set_block_based_table_factory(&table);
        let families = vec![
            ColumnFamilyDescriptor::new(rocksdb::DEFAULT_COLUMN_FAMILY_NAME, options.clone()),
            ColumnFamilyDescriptor::new(POLICY_FAMILY, policy),
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
            crate::log_line!("mantle: write-ahead log damaged: {report}");
            report
        });
        let guard = Arc::new(WalGuard::new(db.latest_sequence_number()));
        let syncer = match fsync {
            Fsync::No => None,
            Fsync::Always | Fsync::EverySec => {
                Some(Syncer::start(db.clone(), guard.clone(), fsync)?)
            }
        };
        let idle_flusher = open
            .flush_idle_memtables
            .then(|| Box::new(IdleFlusher::start(db.clone(), guard.clone())));
        Ok(RocksStore {
            db,
            guard,
            wal_report,
            keys: AtomicU64::new(keys),
            fsync,
            syncer,
            idle_flusher,
            tracker: Tracker::default(),
            group: GroupCommit::default(),
        })
    }
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
