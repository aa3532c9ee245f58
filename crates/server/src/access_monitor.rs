//! The server's access monitor (Bonfire's, seed 001): for each key read or written it keeps a
//! count, the last access and the start of the current run of accesses — enough to rank keys
//! for any of the four warm-up strategies after a restart. The rankings are
//! `cache::warmup::choose`, the ones the replay simulator uses
//! (`crates/sim/src/warmup/monitor.rs`), and it is shared by every connection.
//!
//! Bounds and costs:
//! - At most `track` keys (`--warmup-track`), split over [`SHARDS`] independently locked
//!   shards. A shard that outgrows its share drops its least recently used half, so the
//!   monitor forgets the coldest keys first (replay's rule).
//! - At most 16 bytes per tracked key, whatever the key's length ([`bytes_per_tracked_key`];
//!   a test pins it): a 14-byte slot holding the key's 36-bit tag (4 bits pick the shard, 32
//!   are kept) and packed counters ([`slots`]), in a table at most 7/8 full. No key bytes:
//!   when a warm-up needs the keys it walks the store and looks each stored key up by its
//!   tag ([`AccessMonitor::tracked`]). Times live in one log of marks for the whole monitor
//!   ([`clock`]; at most 8 bytes per second of First-K's period). Two keys whose tags agree
//!   share a record (odds about n² / 2³⁷ for n tracked keys), and a stored key whose tag
//!   matches a tracked one by chance is ranked with that record: a warm-up may load a key
//!   less hot than it looks, never a wrong value.
//! - Keys longer than [`MAX_TRACKED_KEY_LEN`] bytes are not tracked (counted in
//!   [`AccessMonitor::too_long`]): a key that long is read by few clients, and a warm-up
//!   would read each such value whole.
//! - Recording never waits: a shard busy with another connection (or with the tick) skips
//!   the access and counts it in [`AccessMonitor::skipped`]. The monitor is a statistic, and
//!   a client request must not queue behind it.
//! - Recording does not allocate once a shard's table exists; the time is a coarse clock
//!   (whole seconds) the persister ticks each second, not a clock read per request.
//!
//! Order numbers are 32 bits in a slot. Before the monitor-wide counter reaches 2³¹ the tick
//! renumbers every kept one densely (in order, so every ranking is unchanged); an access that
//! finds the counter past 2³² before that (four billion accesses in a second) is skipped.
//!
//! It sits beside `db` rather than in `warmup` because every request records into it, while
//! `warmup` (the fill and the persister) uses the cache: the request path then never depends
//! on warm-up's jobs.

mod clock;
mod slots;

use cache::warmup::{choose, Name, Record, Strategy, Unit};
use clock::{Clock, Mark};
use slots::{Slot, Slots};
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
/// The counter value past which the tick renumbers the kept order numbers.
const RENUMBER_AT: u64 = 1 << 31;

/// Memory of the monitor per tracked key at its bound, `track` keys: the shards' slot tables
/// (the clock's marks are per second, not per key; see [`clock`]).
pub fn bytes_per_tracked_key(track: usize) -> f64 {
    let per_shard = per_shard(track);
    (SHARDS * slots::capacity(per_shard) * slots::SLOT_BYTES) as f64 / (SHARDS * per_shard) as f64
}

fn per_shard(track: usize) -> usize {
    if track == 0 {
        0
    } else {
        track.div_ceil(SHARDS).max(2)
    }
}

/// Which record a key's table hash selects: a shard and a fingerprint in it. As a `u64`
/// (`shard << 32 | fingerprint`) it is what the persisted record keeps per key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    shard: usize,
    fp: u32,
}

impl Tag {
    pub fn of(hash: u64) -> Tag {
        Tag {
            // Bits the key table and the write stripes do not lean on.
            shard: (hash >> 40) as usize & (SHARDS - 1),
            fp: Slots::fingerprint(hash),
        }
    }

    pub fn id(self) -> u64 {
        (self.shard as u64) << 32 | u64::from(self.fp)
    }

    pub fn from_id(id: u64) -> Tag {
        Tag {
            shard: (id >> 32) as usize & (SHARDS - 1),
            fp: (id as u32).max(1),
        }
    }
}

pub struct AccessMonitor {
    shards: Box<[Mutex<Slots>]>,
    clock: Mutex<Clock>,
    /// Keys each shard may hold; 0 turns recording off.
    per_shard: AtomicUsize,
    /// First-K's look-back in seconds (a run restarts after a longer gap).
    period_s: AtomicU64,
    seq: AtomicU64,
    /// An access to a key last accessed below this order number (more than a period ago)
    /// starts a new run; set by the tick.
    run_before: AtomicU64,
    skipped: AtomicU64,
    too_long: AtomicU64,
    trims: AtomicU64,
}

impl AccessMonitor {
    /// A monitor keeping at most `track` keys (0: off).
    pub fn new(track: usize, period_s: u64) -> AccessMonitor {
        let monitor = AccessMonitor {
            shards: (0..SHARDS).map(|_| Mutex::new(Slots::default())).collect(),
            clock: Mutex::default(),
            per_shard: AtomicUsize::new(0),
            period_s: AtomicU64::new(period_s),
            seq: AtomicU64::new(0),
            run_before: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            too_long: AtomicU64::new(0),
            trims: AtomicU64::new(0),
        };
        monitor.set_track(track);
        monitor.tick_at(unix_seconds());
        monitor
    }

    /// Changes the bound (0 turns recording off; what is tracked stays until trimmed).
    pub fn set_track(&self, track: usize) {
        self.per_shard.store(per_shard(track), Ordering::Relaxed);
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

    /// Advances the coarse clock accesses are stamped with (the persister calls it each
    /// second).
    pub fn tick_clock(&self) {
        self.tick_at(unix_seconds());
    }

    /// The tick at Unix second `now`: with every shard locked (so no access straddles it),
    /// renumbers order numbers that near 32 bits, marks the second and sets which accesses
    /// start a new run.
    fn tick_at(&self, now: u64) {
        let mut shards: Vec<MutexGuard<'_, Slots>> = self.shards.iter().map(lock).collect();
        let mut clock = lock(&self.clock);
        if self.seq.load(Ordering::Relaxed) >= RENUMBER_AT {
            let units = self.units_locked(&shards, &clock);
            self.rebuild_locked(&mut shards, &mut clock, units);
        }
        self.stamp_locked(&mut clock, now);
    }

    fn stamp_locked(&self, clock: &mut Clock, now: u64) {
        let next = self.seq.load(Ordering::Relaxed) + 1;
        let next = u32::try_from(next).unwrap_or(u32::MAX);
        let period = self.period_s();
        let now = clock.tick(Clock::seconds(now), next, period);
        let window = u64::from(now).saturating_sub(period);
        let run_before = if window == 0 {
            0
        } else {
            clock.first_seq_at(window as u32, next)
        };
        self.run_before
            .store(u64::from(run_before), Ordering::Relaxed);
    }

    /// Starts loading where [`AccessMonitor::record`] will look for each of `hashes` (see
    /// `Db::prefetch`); skips a shard another thread holds.
    pub fn prefetch(&self, hashes: &[u64]) {
        if self.per_shard.load(Ordering::Relaxed) == 0 {
            return;
        }
        for &hash in hashes {
            let tag = Tag::of(hash);
            if let Ok(units) = self.shards[tag.shard].try_lock() {
                units.prefetch(tag.fp);
            }
        }
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
        let tag = Tag::of(hash);
        let mut units = match self.shards[tag.shard].try_lock() {
            Ok(units) => units,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let Ok(seq) = u32::try_from(seq) else {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if let Some(slot) = units.get_mut(tag.fp) {
            slot.count = slot.count.saturating_add(1);
            if u64::from(slot.last) < self.run_before.load(Ordering::Relaxed) {
                slot.run = seq;
            }
            slot.last = seq;
            return;
        }
        let fresh = Slot {
            fp: tag.fp,
            last: seq,
            run: seq,
            count: 1,
        };
        if units.insert(fresh, limit) {
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

    /// Heap bytes the monitor holds now (slot tables and the clock's marks).
    pub fn heap_bytes(&self) -> usize {
        let slots: usize = self.shards.iter().map(|s| lock(s).heap_bytes()).sum();
        slots + lock(&self.clock).heap_bytes()
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

    /// Every tracked key's tag (as a `u64`, [`Tag::id`]) and record, times included.
    pub fn units(&self) -> Vec<(u64, Record)> {
        let shards: Vec<MutexGuard<'_, Slots>> = self.shards.iter().map(lock).collect();
        let clock = lock(&self.clock);
        self.units_locked(&shards, &clock)
    }

    fn units_locked(&self, shards: &[MutexGuard<'_, Slots>], clock: &Clock) -> Vec<(u64, Record)> {
        let mut out = Vec::with_capacity(shards.iter().map(|s| s.len()).sum());
        for (shard, slots) in shards.iter().enumerate() {
            for slot in slots.iter() {
                let tag = Tag { shard, fp: slot.fp };
                out.push((tag.id(), record_of(slot, clock)));
            }
        }
        out
    }

    /// The record of the key whose table hash is `hash`, as a unit carrying `key`, when it is
    /// tracked (a warm-up asks this of every stored key).
    pub fn tracked<K>(&self, hash: u64, key: K) -> Option<Unit<K>> {
        let tag = Tag::of(hash);
        let slot = lock(&self.shards[tag.shard]).get(tag.fp)?;
        let record = record_of(slot, &lock(&self.clock));
        Some(Unit {
            record,
            payload: key,
        })
    }

    /// Puts back what an earlier run persisted (at start, before traffic), keeping the newer
    /// record when a tag comes twice; later accesses are ordered after all of them.
    pub fn restore(&self, units: Vec<(u64, Record)>) {
        if self.per_shard.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut shards: Vec<MutexGuard<'_, Slots>> = self.shards.iter().map(lock).collect();
        let mut clock = lock(&self.clock);
        let mut all = self.units_locked(&shards, &clock);
        all.extend(units);
        // The newer record of a tag first, then keep the first of each tag.
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.last_seq.cmp(&a.1.last_seq)));
        all.dedup_by_key(|u| u.0);
        self.rebuild_locked(&mut shards, &mut clock, all);
        let now = clock_now(&clock);
        self.stamp_locked(&mut clock, now.max(unix_seconds()));
    }

    /// Refills the shards and the clock with `units`, their order numbers renumbered densely
    /// from 1 in the same order, and their times as marks.
    fn rebuild_locked(
        &self,
        shards: &mut [MutexGuard<'_, Slots>],
        clock: &mut Clock,
        units: Vec<(u64, Record)>,
    ) {
        let mut stamps: Vec<(u64, u64)> = units
            .iter()
            .flat_map(|(_, r)| {
                [
                    (r.last_seq, r.last_time as u64),
                    (r.run_seq, r.run_time as u64),
                ]
            })
            .collect();
        stamps.sort_unstable();
        stamps.dedup_by_key(|s| s.0);
        // New order number of `seq`: its place among the distinct ones, from 1.
        let number = |seq: u64| (stamps.partition_point(|s| s.0 < seq) + 1) as u32;
        let mut marks: Vec<Mark> = Vec::new();
        for (i, &(_, time)) in stamps.iter().enumerate() {
            let time = Clock::seconds(time);
            match marks.last() {
                // A time that goes back (a wall clock set back in an earlier run) joins the
                // mark before it, so times never fall along the order numbers.
                Some(last) if time <= last.time => {}
                _ => marks.push(Mark {
                    seq: i as u32 + 1,
                    time,
                }),
            }
        }
        clock.reset(marks);
        let limit = self.per_shard.load(Ordering::Relaxed).max(2);
        let mut by_shard: Vec<Vec<Slot>> = vec![Vec::new(); SHARDS];
        for (id, r) in &units {
            let tag = Tag::from_id(*id);
            by_shard[tag.shard].push(Slot {
                fp: tag.fp,
                last: number(r.last_seq),
                run: number(r.run_seq),
                count: r.count.min(u64::from(u16::MAX)) as u16,
            });
        }
        for (shard, mut slots) in by_shard.into_iter().enumerate() {
            if slots.len() > limit {
                // Keep the most recent, as a trim would.
                slots.sort_unstable_by_key(|s| std::cmp::Reverse(s.last));
                slots.truncate(limit / 2);
            }
            shards[shard].rebuild(slots, limit);
        }
        self.seq.store(stamps.len() as u64, Ordering::Relaxed);
    }

    /// The keys `strategy` picks among `units` (from [`AccessMonitor::tracked`]), best first
    /// (at most `k`), ranked as replay ranks trace ids (`cache::warmup::choose`). `now_s` is
    /// the start time (for First-K's period); `seed` drives Random-K.
    pub fn choose<K: AsRef<[u8]>>(
        &self,
        units: Vec<Unit<K>>,
        strategy: Strategy,
        k: u64,
        now_s: u64,
        seed: u64,
    ) -> Vec<K> {
        let window = (now_s as f64, self.period_s() as f64);
        choose(
            units,
            strategy,
            k,
            window,
            seed,
            |u| &u.record,
            |u| Name::Bytes(u.payload.as_ref()),
        )
        .into_iter()
        .map(|u| u.payload)
        .collect()
    }
}

/// A slot's record, its times read off the clock.
fn record_of(slot: Slot, clock: &Clock) -> Record {
    let time = |seq: u32| f64::from(clock.time_of(seq).unwrap_or(0));
    Record {
        count: u64::from(slot.count),
        last_seq: u64::from(slot.last),
        last_time: time(slot.last),
        run_time: time(slot.run),
        run_seq: u64::from(slot.run),
    }
}

fn clock_now(clock: &Clock) -> u64 {
    u64::from(clock.time_of(u32::MAX).unwrap_or(0))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests;
