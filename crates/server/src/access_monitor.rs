//! The server's access monitor (Bonfire's, seed 001): for each key read or written it keeps a
//! count, the last access and the start of the current run of accesses — enough to rank keys
//! for any of the four warm-up strategies after a restart. The record, the bounded table and
//! the rankings are `cache::warmup`'s, the same the replay simulator uses
//! (`crates/sim/src/warmup/monitor.rs`); this front end holds key bytes and is shared by every
//! connection.
//!
//! Bounds and costs:
//! - At most `track` keys (`--warmup-track`), split over [`SHARDS`] independently locked
//!   shards. A shard that outgrows its share drops its least recently used half, so the
//!   monitor forgets the coldest keys first. Memory: about 100 bytes of table and entry per
//!   key plus the key itself, so the default 100,000 keys with 20-byte keys cost about 12 MB.
//! - Keys longer than [`MAX_TRACKED_KEY_LEN`] bytes are not tracked (counted in
//!   [`AccessMonitor::too_long`]): clients choose key lengths (up to `--proto-max-bulk-len`),
//!   and a GET of a missing key costs the client nothing, so without this cap 300 GETs of
//!   missing 4 MB keys made the monitor (and its persisted record) 1.2 GB. With it the monitor
//!   holds at most `track` × (100 + 256) bytes, 36 MB by default.
//! - Recording never waits: a shard busy with another connection (or with a snapshot) skips
//!   the access and counts it in [`AccessMonitor::skipped`]. The monitor is a statistic, and
//!   a client request must not queue behind it.
//! - Recording allocates only the first time a key is seen (to copy its bytes); the time is a
//!   coarse clock (whole seconds) refreshed by the persister, not a clock read per request.
//!
//! It sits beside `db` rather than in `warmup` because every request records into it, while
//! `warmup` (the fill and the persister) uses the cache: the request path then never depends
//! on warm-up's jobs.

use cache::warmup::{choose, Name, Stamp, Strategy, UnitTable};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

/// Independently locked parts of the monitor; a power of two.
pub const SHARDS: usize = 16;
/// Keys tracked when `--warmup-track` is not given.
pub const DEFAULT_TRACK: usize = 100_000;
/// Longest key the monitor tracks (a warm-up of keys longer than this is not offered).
pub const MAX_TRACKED_KEY_LEN: usize = 256;
/// First-K's look-back when the spec does not give one (Bonfire's 24 hours).
pub const DEFAULT_PERIOD: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// What the monitor knows about one key: its record and the key's bytes.
pub type Unit = cache::warmup::Unit<Box<[u8]>>;

/// The keys are hashed already (by the server's table hasher), so the map uses that hash as is.
#[derive(Clone, Copy, Default)]
pub struct PassThrough;

pub struct PassThroughHasher(u64);

impl BuildHasher for PassThrough {
    type Hasher = PassThroughHasher;
    fn build_hasher(&self) -> PassThroughHasher {
        PassThroughHasher(0)
    }
}

impl Hasher for PassThroughHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Units = UnitTable<Box<[u8]>, PassThrough>;

pub struct AccessMonitor {
    shards: Box<[Mutex<Units>]>,
    /// Keys each shard may hold; 0 turns recording off.
    per_shard: AtomicUsize,
    /// First-K's look-back in seconds (a run restarts after a longer gap).
    period_s: AtomicU64,
    seq: AtomicU64,
    clock_s: AtomicU64,
    skipped: AtomicU64,
    too_long: AtomicU64,
    trims: AtomicU64,
}

impl AccessMonitor {
    /// A monitor keeping at most `track` keys (0: off).
    pub fn new(track: usize, period_s: u64) -> AccessMonitor {
        let monitor = AccessMonitor {
            shards: (0..SHARDS).map(|_| Mutex::new(Units::default())).collect(),
            per_shard: AtomicUsize::new(0),
            period_s: AtomicU64::new(period_s),
            seq: AtomicU64::new(0),
            clock_s: AtomicU64::new(unix_seconds()),
            skipped: AtomicU64::new(0),
            too_long: AtomicU64::new(0),
            trims: AtomicU64::new(0),
        };
        monitor.set_track(track);
        monitor
    }

    /// Changes the bound (0 turns recording off; what is tracked stays until trimmed).
    pub fn set_track(&self, track: usize) {
        let per_shard = if track == 0 {
            0
        } else {
            track.div_ceil(SHARDS).max(2)
        };
        self.per_shard.store(per_shard, Ordering::Relaxed);
    }

    pub fn set_period(&self, period_s: u64) {
        self.period_s.store(period_s, Ordering::Relaxed);
    }

    pub fn period_s(&self) -> u64 {
        self.period_s.load(Ordering::Relaxed)
    }

    /// Most keys tracked at once.
    pub fn track(&self) -> usize {
        self.per_shard.load(Ordering::Relaxed) * SHARDS
    }

    /// Refreshes the coarse clock accesses are stamped with (the persister calls it each second).
    pub fn tick_clock(&self) {
        self.clock_s.store(unix_seconds(), Ordering::Relaxed);
    }

    /// Records one access to `key`, whose table hash is `hash`. Never blocks.
    #[inline]
    pub fn record(&self, hash: u64, key: &[u8]) {
        let limit = self.per_shard.load(Ordering::Relaxed);
        if limit == 0 {
            return;
        }
        if key.len() > MAX_TRACKED_KEY_LEN {
            self.too_long.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut units = match self.shards[shard_of(hash)].try_lock() {
            Ok(units) => units,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let at = Stamp {
            seq,
            time: self.clock_s.load(Ordering::Relaxed) as f64,
        };
        let period = self.period_s.load(Ordering::Relaxed) as f64;
        // The table is keyed by the key's 64-bit table hash already; comparing the key's bytes
        // too would cost a dependent read of a cold allocation on every access, to guard
        // against a collision whose worst outcome is one key counted for another of the same
        // length (a warm-up then loads a key less hot than it looks). A key of another length
        // with the same hash takes the slot. Allocates only for a new key.
        let trimmed = units.record(
            hash,
            at,
            period,
            limit,
            |known| known.len() == key.len(),
            || key.into(),
        );
        if trimmed {
            self.trims.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Keys tracked now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Accesses not recorded because their shard was busy.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Accesses not recorded because the key is longer than [`MAX_TRACKED_KEY_LEN`].
    pub fn too_long(&self) -> u64 {
        self.too_long.load(Ordering::Relaxed)
    }

    /// Times a full shard dropped its colder half.
    pub fn trims(&self) -> u64 {
        self.trims.load(Ordering::Relaxed)
    }

    /// The order number of the latest access (changes whenever something was recorded).
    pub fn last_seq(&self) -> u64 {
        self.seq.load(Ordering::Relaxed)
    }

    /// Calls `visit` with every tracked key, one shard locked at a time.
    pub fn for_each(&self, mut visit: impl FnMut(&Unit)) {
        for shard in self.shards.iter() {
            for (_, unit) in lock(shard).iter() {
                visit(unit);
            }
        }
    }

    /// Puts back what an earlier run persisted (at start, before traffic), keeping the newer
    /// record when a key is already tracked; later accesses are ordered after all of them.
    pub fn restore(&self, units: Vec<Unit>, hash: impl Fn(&[u8]) -> u64) {
        let limit = self.per_shard.load(Ordering::Relaxed);
        if limit == 0 {
            return;
        }
        let mut top = 0;
        for unit in units {
            if unit.payload.len() > MAX_TRACKED_KEY_LEN {
                continue;
            }
            top = top.max(unit.record.last_seq).max(unit.record.run_seq);
            let h = hash(&unit.payload);
            let mut shard = lock(&self.shards[shard_of(h)]);
            let newer = shard
                .get(h)
                .is_none_or(|old| old.record.last_seq < unit.record.last_seq);
            if newer {
                shard.insert(h, unit, limit);
            }
        }
        self.seq.fetch_max(top, Ordering::Relaxed);
    }

    /// The keys `strategy` picks, best first (at most `k`), ranked as replay ranks trace ids
    /// (`cache::warmup::choose`). `now_s` is the start time (for First-K's period); `seed`
    /// drives Random-K.
    pub fn choose(&self, strategy: Strategy, k: u64, now_s: u64, seed: u64) -> Vec<Box<[u8]>> {
        let mut units: Vec<Unit> = Vec::with_capacity(self.len());
        self.for_each(|u| units.push(u.clone()));
        let window = (now_s as f64, self.period_s() as f64);
        choose(
            units,
            strategy,
            k,
            window,
            seed,
            |u| &u.record,
            |u| Name::Bytes(&u.payload),
        )
        .into_iter()
        .map(|u| u.payload)
        .collect()
    }
}

fn shard_of(hash: u64) -> usize {
    // Bits the key table and the write stripes do not lean on.
    (hash >> 40) as usize & (SHARDS - 1)
}

fn lock(shard: &Mutex<Units>) -> MutexGuard<'_, Units> {
    shard.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(key: &[u8]) -> u64 {
        ahash::RandomState::with_seeds(1, 2, 3, 4).hash_one(key)
    }

    fn monitor_at(accesses: &[(u64, &str)], period_s: u64) -> AccessMonitor {
        let m = AccessMonitor::new(1000, period_s);
        for &(t, key) in accesses {
            m.clock_s.store(t, Ordering::Relaxed);
            m.record(hash(key.as_bytes()), key.as_bytes());
        }
        m
    }

    fn names(keys: Vec<Box<[u8]>>) -> Vec<String> {
        keys.iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect()
    }

    #[test]
    fn the_four_strategies_rank_as_bonfire_defines_them() {
        let m = monitor_at(
            &[(0, "e"), (1, "f"), (2, "e"), (3, "g"), (4, "h"), (5, "e")],
            100,
        );
        assert_eq!(names(m.choose(Strategy::LastK, 2, 5, 0)), ["e", "h"]);
        assert_eq!(names(m.choose(Strategy::TopK, 2, 5, 0)), ["e", "h"]);
        assert_eq!(names(m.choose(Strategy::FirstK, 3, 5, 0)), ["e", "f", "g"]);
        let random = m.choose(Strategy::RandomK, 4, 5, 9);
        assert_eq!(m.choose(Strategy::RandomK, 4, 5, 9), random, "seeded");
        let mut all = names(random);
        all.sort();
        assert_eq!(all, ["e", "f", "g", "h"]);
    }

    #[test]
    fn first_k_looks_only_at_the_last_period() {
        // Period 100 s, start at 300: the window opens at 200. "a" was last seen at 10 (out);
        // "b" returned at 250 after a long gap (its run starts then); "c" entered at 210.
        let m = monitor_at(
            &[(10, "a"), (20, "b"), (210, "c"), (250, "b"), (260, "d")],
            100,
        );
        assert_eq!(
            names(m.choose(Strategy::FirstK, 10, 300, 0)),
            ["c", "b", "d"]
        );
    }

    #[test]
    fn memory_stays_bounded_and_keeps_the_recent_keys() {
        let m = AccessMonitor::new(160, 1000);
        for i in 0..5000u32 {
            let key = format!("k{i}");
            m.record(hash(key.as_bytes()), key.as_bytes());
            assert!(m.len() <= m.track());
        }
        assert!(m.trims() > 0);
        assert_eq!(names(m.choose(Strategy::LastK, 1, 0, 0)), ["k4999"]);
        let kept = names(m.choose(Strategy::LastK, 1000, 0, 0));
        assert!(kept
            .iter()
            .all(|k| k[1..].parse::<u32>().unwrap() >= 5000 - 320));
    }

    #[test]
    fn off_records_nothing_and_restore_keeps_the_newer_record() {
        let off = AccessMonitor::new(0, 1000);
        off.record(hash(b"x"), b"x");
        assert!(off.is_empty());

        let long = vec![b'k'; MAX_TRACKED_KEY_LEN + 1];
        let capped = AccessMonitor::new(1000, 1000);
        capped.record(hash(&long), &long);
        capped.record(hash(&long[1..]), &long[1..]);
        assert_eq!((capped.len(), capped.too_long()), (1, 1));

        let m = monitor_at(&[(1, "x"), (2, "y")], 1000);
        let mut saved = Vec::new();
        m.for_each(|u| saved.push(u.clone()));
        let fresh = AccessMonitor::new(1000, 1000);
        fresh.restore(saved, hash);
        assert_eq!(fresh.len(), 2);
        fresh.record(hash(b"x"), b"x");
        assert_eq!(
            names(fresh.choose(Strategy::LastK, 2, 0, 0)),
            ["x", "y"],
            "accesses after a restore rank after the restored ones"
        );
    }
}
