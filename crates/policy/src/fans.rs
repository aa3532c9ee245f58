//! Native scans of the time series: access fans (seed 000 Fig. 9, `timeseries():fans()` and
//! `:fansummary()`) and open fans (`:openfans()`, `:distinct()`).
//!
//! The fans are the `fans` crate's forward stack of suffix minima (the same scan `mantle
//! analyze` runs), fed the events recorded since the previous tick when the host reports
//! [`TimeSeries::recorded`] (else rebuilt in one O(n) pass in Rust). Two things keep a tick's
//! price at what changed rather than at the retained series: the oldest fan, which loses
//! events as the window slides, gets its top back from block maxima ([`RangeMax`]) instead of
//! a rescan, and the tallest fan is kept in a heap with lazy deletion, so `:fansummary()`
//! answers without walking the fans.

use std::collections::{BinaryHeap, VecDeque};

use fans::FanStack;

use crate::series::TimeSeries;

/// One access fan, as Fig. 9 defines it. Indices are 1-based positions in the series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fan {
    /// Oldest event of the fan.
    pub first: usize,
    /// Newest event of the fan (where the backward scan found `bottom`).
    pub last: usize,
    /// Timestamp of `first`.
    pub start: f64,
    /// Timestamp of `last`.
    pub finish: f64,
    /// Lowest key id accessed from `first` to the end of the series.
    pub bottom: u64,
    /// Highest key id accessed within the fan.
    pub top: u64,
}

/// Maxima of the key ids by absolute position, in blocks of 64 and superblocks of 4,096
/// events, for the top of a fan whose oldest events left the window. A query reads at most
/// 4 * 63 events and `len / 4096` superblocks; memory is 1/64 + 1/4096 of a `u64` per event.
#[derive(Debug, Default)]
struct RangeMax {
    /// Block index of `blocks[0]` (absolute position / 64).
    block0: u64,
    blocks: VecDeque<u64>,
    /// Superblock index of `supers[0]` (absolute position / 4096).
    super0: u64,
    supers: VecDeque<u64>,
}

const BLOCK: u64 = 64;
const SUPER: u64 = 64 * 64;

impl RangeMax {
    /// Starts empty at absolute position `base`.
    fn starting_at(base: u64) -> RangeMax {
        RangeMax {
            block0: base / BLOCK,
            super0: base / SUPER,
            ..RangeMax::default()
        }
    }

    /// Records the id at `pos`, one past the previous one.
    fn record(&mut self, pos: u64, id: u64) {
        for (unit, maxima) in [(BLOCK, &mut self.blocks), (SUPER, &mut self.supers)] {
            match maxima.back_mut() {
                Some(m) if !pos.is_multiple_of(unit) => *m = (*m).max(id),
                _ => maxima.push_back(id),
            }
        }
    }

    /// Forgets the blocks wholly before `base`.
    fn drop_before(&mut self, base: u64) {
        while self.block0 < base / BLOCK && self.blocks.pop_front().is_some() {
            self.block0 += 1;
        }
        while self.super0 < base / SUPER && self.supers.pop_front().is_some() {
            self.super0 += 1;
        }
        if self.blocks.is_empty() {
            *self = RangeMax::starting_at(base);
        }
    }

    /// Highest id at positions `from..=to` (recorded, not dropped), reading single events
    /// through `id_at`.
    fn max(&self, from: u64, to: u64, id_at: impl Fn(u64) -> u64) -> u64 {
        let mut top = 0;
        let mut p = from;
        while p <= to {
            if p.is_multiple_of(SUPER) && to - p >= SUPER - 1 {
                top = top.max(self.supers[(p / SUPER - self.super0) as usize]);
                p += SUPER;
            } else if p.is_multiple_of(BLOCK) && to - p >= BLOCK - 1 {
                top = top.max(self.blocks[(p / BLOCK - self.block0) as usize]);
                p += BLOCK;
            } else {
                top = top.max(id_at(p));
                p += 1;
            }
        }
        top
    }
}

/// The fans of one policy's series, kept across ticks.
#[derive(Debug, Default)]
pub(crate) struct FanIndex {
    /// Positions are absolute (counting every event ever recorded).
    stack: FanStack,
    maxima: RangeMax,
    /// `(height, last)` of fans, possibly stale: an entry counts only while the stack holds
    /// a fan ending at `last` with that height.
    tallest: BinaryHeap<(u64, u64)>,
    /// Absolute position one past the newest processed event.
    processed: u64,
    /// The newest processed event, to detect a host whose series changed under us.
    newest: Option<(f64, u64)>,
}

impl FanIndex {
    /// Brings the stack up to date with `series` and returns its fans, newest first.
    pub(crate) fn fans(&mut self, series: &dyn TimeSeries) -> Vec<Fan> {
        let base = self.sync(series);
        self.stack
            .fans()
            .iter()
            .rev()
            .map(|f| Fan {
                first: (f.first - base) as usize + 1,
                last: (f.last - base) as usize + 1,
                start: f.start,
                finish: f.finish,
                bottom: f.bottom,
                top: f.top,
            })
            .collect()
    }

    /// Brings the stack up to date and returns the number of fans and the greatest
    /// `top - bottom` among them (0 without fans), without walking them.
    pub(crate) fn summary(&mut self, series: &dyn TimeSeries) -> (usize, u64) {
        self.sync(series);
        while let Some(&(height, last)) = self.tallest.peek() {
            if self
                .stack
                .ending_at(last)
                .is_some_and(|f| f.height() == height)
            {
                return (self.stack.len(), height);
            }
            self.tallest.pop();
        }
        (self.stack.len(), 0)
    }

    /// Processes the events recorded since the previous call (or the whole retained series
    /// when it cannot resume) and drops what left the window; returns the absolute position
    /// of the oldest retained event.
    fn sync(&mut self, series: &dyn TimeSeries) -> u64 {
        let len = series.len();
        if len == 0 {
            *self = FanIndex::default();
            return 0;
        }
        let recorded = series.recorded().filter(|&r| r >= len as u64);
        let base = recorded.map_or(0, |r| r - len as u64);
        if !self.can_resume(series, recorded, base) {
            *self = FanIndex {
                processed: base,
                maxima: RangeMax::starting_at(base),
                ..FanIndex::default()
            };
        }
        let end = base + len as u64;
        for pos in self.processed..end {
            let (time, id) = series.get((pos - base) as usize);
            self.stack.push(pos, time, id);
            self.maxima.record(pos, id);
        }
        // Only fans ending in the new events are new or changed; the others kept their height.
        for fan in self.stack.fans().iter().rev() {
            if fan.last < self.processed {
                break;
            }
            self.tallest.push((fan.height(), fan.last));
        }
        self.processed = end;
        self.newest = Some(series.get(len - 1));
        self.expire(series, base);
        // Stale heap entries are dropped lazily at the top; bound the rest.
        if self.tallest.len() > 2 * self.stack.len() + 1024 {
            self.tallest = self
                .stack
                .fans()
                .iter()
                .map(|f| (f.height(), f.last))
                .collect();
        }
        base
    }

    fn can_resume(&self, series: &dyn TimeSeries, recorded: Option<u64>, base: u64) -> bool {
        let (Some(recorded), Some(newest)) = (recorded, self.newest) else {
            return false;
        };
        // The previous newest event must still be retained and unchanged.
        if self.processed > recorded || self.processed <= base {
            return false;
        }
        series.get((self.processed - 1 - base) as usize) == newest
    }

    /// Drops fans that left the window and trims the oldest one to it, recomputing its top
    /// (its old top may have been an expired event) from the block maxima.
    fn expire(&mut self, series: &dyn TimeSeries, base: u64) {
        while self.stack.fans().front().is_some_and(|f| f.last < base) {
            self.stack.pop_front();
        }
        self.maxima.drop_before(base);
        let maxima = &self.maxima;
        if let Some(front) = self.stack.front_mut() {
            if front.first < base {
                front.first = base;
                front.start = series.get(0).0;
                front.top = maxima.max(base, front.last, |p| series.get((p - base) as usize).1);
                self.tallest.push((front.height(), front.last));
            }
        }
    }
}

/// What `series:openfans(hold)` reports: how far back the fans still being read reach.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpenFans {
    /// Earliest previous-access time still held open by a read (see [`ReuseIndex`]); `None`
    /// when no held read reaches back at all.
    pub since: Option<f64>,
    /// Longest reuse age seen so far: the largest gap, in seconds, between two accesses to
    /// one key (a return to an older basin sets it).
    pub record: f64,
    /// Keys seen for the first time in the events processed by this call (0 after a rescan,
    /// when what is new since the previous call is unknown).
    pub new_keys: u64,
    /// Distinct keys whose latest access is retained.
    pub keys: u64,
    /// Reads in the hold queue (each reaches back to an open fan; expired ones below the
    /// oldest held one are dropped lazily).
    pub held: u64,
}

/// A held read: the key's previous access at `from`, read again at `at`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Held {
    from: f64,
    at: f64,
}

impl Eq for Held {}
impl Ord for Held {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Min-heap on `from` inside std's max-heap.
        other.from.total_cmp(&self.from)
    }
}
impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Latest accesses by absolute position, one bit each, with a count per block of 4,096
/// positions, to answer "how many distinct keys were accessed in positions a..b": O(1) per
/// update (an event moves a key's mark), O(blocks + 128 words) per query, which a tick asks
/// once or twice. Covers positions `origin..origin + 64 * words.len()`; 1/8 byte per position,
/// so it stays in cache where a tree of counters would not.
#[derive(Debug, Default)]
struct Marks {
    origin: u64,
    words: Vec<u64>,
    blocks: Vec<u32>,
}

const WORDS_PER_BLOCK: usize = 64;

impl Marks {
    /// Marks over `span` positions from `origin` (rounded up to whole blocks).
    fn new(origin: u64, span: usize) -> Marks {
        let blocks = span.div_ceil(64 * WORDS_PER_BLOCK).max(1);
        Marks {
            origin,
            words: vec![0; blocks * WORDS_PER_BLOCK],
            blocks: vec![0; blocks],
        }
    }

    fn covers(&self, pos: u64) -> bool {
        pos >= self.origin && pos - self.origin < 64 * self.words.len() as u64
    }

    fn set(&mut self, pos: u64, on: bool) {
        if !self.covers(pos) {
            return;
        }
        let i = (pos - self.origin) as usize;
        let bit = 1u64 << (i % 64);
        let word = &mut self.words[i / 64];
        if (*word & bit != 0) != on {
            *word ^= bit;
            let count = &mut self.blocks[i / 64 / WORDS_PER_BLOCK];
            *count = if on { *count + 1 } else { *count - 1 };
        }
    }

    /// Marks at positions `from..to` (clamped to what is covered).
    fn between(&self, from: u64, to: u64) -> u64 {
        let span = 64 * self.words.len() as u64;
        let lo = from.saturating_sub(self.origin).min(span) as usize;
        let hi = to.saturating_sub(self.origin).min(span) as usize;
        if lo >= hi {
            return 0;
        }
        let bits = |w: usize, from_bit: usize, to_bit: usize| -> u64 {
            let word = self.words[w] >> from_bit;
            let width = to_bit - from_bit;
            let mask = if width == 64 {
                u64::MAX
            } else {
                (1u64 << width) - 1
            };
            u64::from((word & mask).count_ones())
        };
        let (first_word, last_word) = (lo / 64, (hi - 1) / 64);
        if first_word == last_word {
            return bits(first_word, lo % 64, (hi - 1) % 64 + 1);
        }
        let mut n = bits(first_word, lo % 64, 64) + bits(last_word, 0, (hi - 1) % 64 + 1);
        let mut w = first_word + 1;
        while w < last_word {
            if w % WORDS_PER_BLOCK == 0 && w + WORDS_PER_BLOCK <= last_word {
                n += u64::from(self.blocks[w / WORDS_PER_BLOCK]);
                w += WORDS_PER_BLOCK;
            } else {
                n += u64::from(self.words[w].count_ones());
                w += 1;
            }
        }
        n
    }
}

/// Which access fans are still open, for the second-generation dynamically sized cache.
///
/// Seed 000's fans are groups of keys a superbasin keeps reading. A fan is *open* while its
/// keys are still read; the evidence is a reuse: a read at time `at` of a key last accessed at
/// `from` shows that what was read at `from` is still wanted. Each reuse holds `from` open for
/// `hold * (at - from)` seconds after `at` (a fan shown alive for A seconds is trusted for a
/// share of A more), then it is forgotten: fans close by themselves once no read reaches back
/// into them. `since` is the earliest `from` still held; an LRU cache that keeps every key
/// accessed since then serves every open fan. The index also keeps, per key, the position of
/// its latest access, so `distinct_since` counts the keys such a cache must hold.
///
/// Work per event is one hash lookup, two bit flips and, once `openfans` was asked for, at
/// most one heap push (O(log n)); a tick only processes the events recorded since the
/// previous one when the host reports [`TimeSeries::recorded`], and otherwise rebuilds from
/// the retained series. Memory: one map entry per key whose latest access is retained, 2-4
/// bits per retained event ([`Marks`]), and one heap entry per held read (expired entries are
/// purged once there are more than four per retained event; on the real ParSplice log at
/// most 2,540 are queued).
#[derive(Debug, Default)]
pub(crate) struct ReuseIndex {
    /// Key id → (absolute position, time) of its latest access.
    latest: std::collections::HashMap<u64, (u64, f64), IdHash>,
    marks: Marks,
    held: std::collections::BinaryHeap<Held>,
    record: f64,
    processed: u64,
    newest: Option<(f64, u64)>,
    /// The `hold` of the last `openfans`; `None` until one is asked for, and then no read is
    /// held (`:distinct()` alone needs none, so a policy using only it pays no heap).
    hold: Option<f64>,
    /// Positions whose event is older than the one before it (only some hosts' clocks step
    /// back), where a binary search on time would go wrong.
    descents: VecDeque<u64>,
    last_time: Option<f64>,
}

/// Hashes the key ids of [`ReuseIndex::latest`]: they are plain integers the policy cannot
/// choose, so a multiply is enough where SipHash would cost most of an event's work.
type IdHash = std::hash::BuildHasherDefault<IdHasher>;

#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

impl ReuseIndex {
    /// Brings the index up to date with `series` and reports the open fans; `hold` is the
    /// share of a reuse's age for which it keeps its fan open (a change rebuilds the index).
    pub(crate) fn open_fans(&mut self, series: &dyn TimeSeries, hold: f64) -> OpenFans {
        if self.hold != Some(hold) {
            *self = ReuseIndex {
                hold: Some(hold),
                ..ReuseIndex::default()
            };
        }
        let (new_keys, end) = self.sync(series);
        OpenFans {
            since: self.held.peek().map(|h| h.from),
            record: self.record,
            new_keys,
            keys: self.marks.between(end - series.len() as u64, end),
            held: self.held.len() as u64,
        }
    }

    /// Forgets the held reads whose hold has run out by the newest event.
    fn release(&mut self, retained: usize) {
        let Some(hold) = self.hold else {
            return;
        };
        let now = self.newest.map_or(0.0, |(t, _)| t);
        let expired = |h: &Held| h.at + hold * (h.at - h.from) < now;
        while self.held.peek().is_some_and(expired) {
            self.held.pop();
        }
        // Expired reads below the top are dropped lazily; bound them by the series length.
        if self.held.len() > 4 * retained.max(1024) {
            self.held.retain(|h| !expired(h));
        }
    }

    /// Processes the events recorded since the previous call (or the whole retained series
    /// when it cannot resume); returns the keys first seen in them (0 after a rebuild) and
    /// the absolute position one past the newest event.
    fn sync(&mut self, series: &dyn TimeSeries) -> (u64, u64) {
        let len = series.len();
        let recorded = series.recorded().filter(|&r| r >= len as u64);
        let base = recorded.map_or(0, |r| r - len as u64);
        let end = base + len as u64;
        let resumed = self.can_resume(series, recorded, base);
        if !resumed {
            *self = ReuseIndex {
                hold: self.hold,
                processed: base,
                ..ReuseIndex::default()
            };
        }
        if len > 0 && !self.marks.covers(end - 1) {
            self.remark(base, end);
        }
        let keys_before = self.latest.len() as u64;
        for pos in self.processed..end {
            let (time, id) = series.get((pos - base) as usize);
            self.push(pos, time, id);
        }
        let new_keys = if resumed {
            self.latest.len() as u64 - keys_before
        } else {
            0
        };
        self.processed = end;
        self.newest = (len > 0).then(|| series.get(len - 1));
        self.release(len);
        (new_keys, end)
    }

    fn can_resume(&self, series: &dyn TimeSeries, recorded: Option<u64>, base: u64) -> bool {
        let (Some(recorded), Some(newest)) = (recorded, self.newest) else {
            return false;
        };
        if self.processed > recorded || self.processed <= base {
            return false;
        }
        series.get((self.processed - 1 - base) as usize) == newest
    }

    /// Re-anchors the position marks on the retained series (amortised: it doubles), and
    /// forgets keys whose latest access left the series, so memory follows the series bound.
    fn remark(&mut self, base: u64, end: u64) {
        let mut marks = Marks::new(base, (2 * (end - base)).max(1024) as usize);
        self.latest.retain(|_, (pos, _)| *pos >= base);
        for &(pos, _) in self.latest.values() {
            marks.set(pos, true);
        }
        self.marks = marks;
    }

    fn push(&mut self, pos: u64, time: f64, id: u64) {
        debug_assert!(self.marks.covers(pos), "sync re-anchors before pushing");
        if self.last_time.is_some_and(|t| time < t) {
            self.descents.push_back(pos);
        }
        self.last_time = Some(time);
        if let Some((before, from)) = self.latest.insert(id, (pos, time)) {
            self.marks.set(before, false);
            let age = time - from;
            if age > 0.0 {
                self.record = self.record.max(age);
                if self.hold.is_some() {
                    self.held.push(Held { from, at: time });
                }
            }
        }
        self.marks.set(pos, true);
    }

    /// Distinct keys read in the newest events back to (not including) the newest one older
    /// than `time`: when times never step back, the keys whose latest retained access is at or
    /// after `time`. A binary search finds where that suffix starts, or a backward walk when
    /// a retained event is older than the one before it.
    pub(crate) fn distinct_since(&mut self, series: &dyn TimeSeries, time: f64) -> u64 {
        let (_, end) = self.sync(series);
        let len = series.len();
        let base = end - len as u64;
        while self.descents.front().is_some_and(|&p| p <= base) {
            self.descents.pop_front();
        }
        let start = if self.descents.is_empty() {
            let (mut lo, mut hi) = (0usize, len);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if series.get(mid).0 < time {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        } else {
            (0..len)
                .rev()
                .find(|&i| series.get(i).0 < time)
                .map_or(0, |i| i + 1)
        };
        self.marks.between(base + start as u64, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::VecSeries;

    /// Fig. 9 transcribed literally, as the oracle.
    fn fig9(events: &[(f64, u64)]) -> Vec<Fan> {
        let n = events.len();
        let mut fans = Vec::new();
        let (t, id) = events[n - 1];
        let mut fan = Fan {
            first: 0,
            last: n,
            start: 0.0,
            finish: t,
            bottom: id,
            top: 0,
        };
        for i in (0..n).rev() {
            let (t, id) = events[i];
            if id < fan.bottom {
                fan.first = i + 2;
                fan.start = events[i + 1].0;
                fans.push(fan);
                fan = Fan {
                    first: 0,
                    last: i + 1,
                    start: 0.0,
                    finish: t,
                    bottom: id,
                    top: 0,
                };
            }
            fan.top = fan.top.max(id);
        }
        fan.first = 1;
        fan.start = events[0].0;
        fans.push(fan);
        fans
    }

    fn pseudo_random_events(n: usize, seed: u64) -> Vec<(f64, u64)> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Ids drift upwards with noise, like fans of a growing key space.
                let id = (i as u64 / 10) + x % 40;
                (i as f64 * 0.5, id)
            })
            .collect()
    }

    /// A random stream (xorshift, fixed seed): ids drift upwards with noise of width
    /// `spread`, and now and then one of the first ids comes back, opening a fan that spans
    /// most of the window and is then trimmed as the window slides.
    fn random_stream(n: usize, seed: u64, spread: u64, step_back: bool) -> Vec<(f64, u64)> {
        let mut x = seed.max(1);
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        (0..n)
            .map(|i| {
                let r = next();
                let id = if r % 997 == 0 {
                    r % 5
                } else {
                    i as u64 / 10 + r % spread
                };
                // Some hosts' clocks step back now and then.
                let jitter = if step_back && next() % 50 == 0 {
                    -3.0
                } else {
                    0.0
                };
                (i as f64 * 0.25 + jitter, id)
            })
            .collect()
    }

    /// Feeds `events` to `series` in chunks of random size, keeping at most `window` events,
    /// and calls `check` after each chunk.
    fn slide(events: &[(f64, u64)], seed: u64, window: usize, mut check: impl FnMut(&VecSeries)) {
        let mut series = VecSeries::new(Vec::new());
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut i = 0;
        while i < events.len() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let chunk = 1 + (x % 1500) as usize;
            for &(t, id) in &events[i..(i + chunk).min(events.len())] {
                series.push(t, id);
            }
            i += chunk;
            if series.len() > window {
                series.drop_oldest(series.len() - window);
            }
            check(&series);
        }
    }

    #[test]
    fn incremental_fans_and_summary_equal_a_fresh_scan_on_random_streams() {
        for seed in 1..=12u64 {
            let spread = [3, 40, 400][seed as usize % 3];
            let window = [700, 5000, 13_000][(seed as usize / 3) % 3];
            let events = random_stream(40_000, seed, spread, false);
            let mut index = FanIndex::default();
            let mut summary_only = FanIndex::default();
            slide(&events, seed, window, |series| {
                let expected = fig9(series.events());
                let tallest = expected.iter().map(|f| f.top - f.bottom).max().unwrap_or(0);
                assert_eq!(index.fans(series), expected, "seed {seed}");
                assert_eq!(
                    index.summary(series),
                    (expected.len(), tallest),
                    "seed {seed}"
                );
                // A policy that never asks for the fans themselves.
                assert_eq!(summary_only.summary(series), (expected.len(), tallest));
            });
        }
    }

    #[test]
    fn the_block_maxima_answer_every_range() {
        let events = random_stream(20_000, 3, 400, false);
        let base = 777u64;
        let mut maxima = RangeMax::starting_at(base);
        for (i, &(_, id)) in events.iter().enumerate() {
            maxima.record(base + i as u64, id);
        }
        let id_at = |p: u64| events[(p - base) as usize].1;
        let mut x = 5u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = (x % 20_000) as usize;
            let b = a + ((x >> 20) % (20_000 - a as u64)) as usize;
            let naive = events[a..=b].iter().map(|e| e.1).max().unwrap();
            assert_eq!(maxima.max(base + a as u64, base + b as u64, id_at), naive);
        }
        maxima.drop_before(base + 9000);
        assert_eq!(
            maxima.max(base + 9000, base + 19_999, id_at),
            events[9000..].iter().map(|e| e.1).max().unwrap()
        );
    }

    #[test]
    fn the_marks_count_every_range() {
        let origin = 1000u64;
        let mut marks = Marks::new(origin, 20_000);
        let mut naive = vec![false; 64 * marks.words.len()];
        let mut x = 11u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..30_000 {
            let p = next() % naive.len() as u64;
            let on = next() % 3 != 0;
            marks.set(origin + p, on);
            naive[p as usize] = on;
        }
        for _ in 0..3000 {
            let a = next() % (naive.len() as u64 + 100);
            let b = a + next() % 25_000;
            let expected = naive
                .iter()
                .enumerate()
                .filter(|&(i, &on)| on && (i as u64) >= a && (i as u64) < b)
                .count() as u64;
            assert_eq!(marks.between(origin + a, origin + b), expected, "{a}..{b}");
        }
        assert_eq!(marks.between(0, origin), 0, "nothing before the origin");
    }

    /// What decay.lua's plain scan counts: distinct ids walking back from the newest event
    /// until one is older than `time`.
    fn walk_back_distinct(events: &[(f64, u64)], time: f64) -> u64 {
        let mut seen = std::collections::HashSet::new();
        for &(t, id) in events.iter().rev() {
            if t < time {
                break;
            }
            seen.insert(id);
        }
        seen.len() as u64
    }

    #[test]
    fn incremental_distinct_equals_a_backward_walk_on_random_streams() {
        for seed in 1..=8u64 {
            let step_back = seed % 2 == 0;
            let events = random_stream(
                30_000,
                seed,
                [3, 40, 400, 4000][seed as usize % 4],
                step_back,
            );
            let mut index = ReuseIndex::default();
            slide(&events, seed, 6000, |series| {
                let newest = series.events().last().unwrap().0;
                for back in [0.0, 1.0, 10.0, 100.0, 1e9] {
                    assert_eq!(
                        index.distinct_since(series, newest - back),
                        walk_back_distinct(series.events(), newest - back),
                        "seed {seed} back {back}"
                    );
                }
            });
            // Only `:distinct()` was asked: no read is held.
            assert!(index.held.is_empty());
        }
    }

    #[test]
    fn matches_fig9_on_a_full_scan() {
        let events = pseudo_random_events(5000, 42);
        let mut index = FanIndex::default();
        let series = VecSeries::new(events.clone());
        assert_eq!(index.fans(&series), fig9(&events));
    }

    #[test]
    fn incremental_updates_with_a_sliding_window_match_fig9() {
        let events = pseudo_random_events(20_000, 7);
        let mut series = VecSeries::new(Vec::new());
        let mut index = FanIndex::default();
        let window = 3000;
        for chunk in events.chunks(731) {
            for &(t, id) in chunk {
                series.push(t, id);
            }
            if series.len() > window {
                series.drop_oldest(series.len() - window);
            }
            assert_eq!(index.fans(&series), fig9(series.events()));
        }
    }

    #[test]
    fn rebuilds_when_the_series_is_replaced() {
        let mut index = FanIndex::default();
        let a = VecSeries::new(pseudo_random_events(500, 1));
        index.fans(&a);
        let b = VecSeries::new(pseudo_random_events(800, 2));
        assert_eq!(index.fans(&b), fig9(b.events()));
        assert!(index.fans(&VecSeries::default()).is_empty());
    }

    /// The open-fans report computed naively from the retained events.
    fn naive_open(events: &[(f64, u64)], hold: f64) -> (Option<f64>, f64, u64) {
        let now = events.last().map_or(0.0, |e| e.0);
        let mut latest: std::collections::HashMap<u64, f64> = Default::default();
        let (mut since, mut record) = (None::<f64>, 0.0f64);
        for &(t, id) in events {
            if let Some(from) = latest.insert(id, t) {
                let age = t - from;
                if age > 0.0 {
                    record = record.max(age);
                    if t + hold * age >= now {
                        since = Some(since.map_or(from, |s| s.min(from)));
                    }
                }
            }
        }
        (since, record, latest.len() as u64)
    }

    fn naive_distinct(events: &[(f64, u64)], time: f64) -> u64 {
        let mut latest: std::collections::HashMap<u64, f64> = Default::default();
        for &(t, id) in events {
            latest.insert(id, t);
        }
        latest.values().filter(|&&t| t >= time).count() as u64
    }

    #[test]
    fn open_fans_and_distinct_match_a_naive_scan_while_the_window_slides() {
        let events = pseudo_random_events(20_000, 11);
        let mut series = VecSeries::new(Vec::new());
        let mut index = ReuseIndex::default();
        let window = 4000;
        let mut keys_seen = std::collections::HashSet::new();
        for (n, chunk) in events.chunks(613).enumerate() {
            let mut fresh = 0;
            for &(t, id) in chunk {
                series.push(t, id);
                fresh += u64::from(keys_seen.insert(id));
            }
            if series.len() > window {
                series.drop_oldest(series.len() - window);
            }
            let open = index.open_fans(&series, 0.5);
            // The record and the held reads span every event processed, not only the
            // retained ones; compare on the first window, where they coincide.
            if (n + 1) * 613 <= window {
                let (since, record, keys) = naive_open(series.events(), 0.5);
                assert_eq!((open.since, open.record, open.keys), (since, record, keys));
                if n > 0 {
                    assert_eq!(open.new_keys, fresh);
                }
            }
            let (newest, _) = *series.events().last().unwrap();
            for back in [0.0, 3.0, 50.0, 400.0, 1e9] {
                assert_eq!(
                    index.distinct_since(&series, newest - back),
                    naive_distinct(series.events(), newest - back),
                    "chunk {n} back {back}"
                );
            }
        }
    }

    #[test]
    fn a_closed_fan_is_forgotten_after_its_hold() {
        // Keys 0..10 read for 100 s, then only keys 100.. (a new superbasin).
        let mut events = Vec::new();
        for t in 0..100 {
            events.push((t as f64, t % 10));
        }
        for t in 100..400 {
            events.push((t as f64, 100 + t % 5));
        }
        let mut index = ReuseIndex::default();
        let mut series = VecSeries::new(events[..100].to_vec());
        let open = index.open_fans(&series, 1.0);
        // Reads at t of keys last read at t - 10 are held until t + 10: those from t = 89 on.
        assert_eq!(open.since, Some(79.0));
        for &(t, id) in &events[100..] {
            series.push(t, id);
        }
        let open = index.open_fans(&series, 1.0);
        // The old fan's reads were held until 109 at most; the new fan's reads reach back
        // 5 s and are held 5 s.
        assert_eq!(open.since, Some(389.0));
        assert_eq!(open.record, 10.0);
        assert_eq!(index.distinct_since(&series, 395.0), 5);
    }

    #[test]
    fn a_changed_hold_or_a_replaced_series_rebuilds() {
        let a = VecSeries::new(pseudo_random_events(500, 1));
        let mut index = ReuseIndex::default();
        let first = index.open_fans(&a, 0.5);
        let b = VecSeries::new(pseudo_random_events(800, 2));
        let (since, record, keys) = naive_open(b.events(), 2.0);
        let open = index.open_fans(&b, 2.0);
        assert_eq!((open.since, open.record, open.keys), (since, record, keys));
        assert_eq!(open.new_keys, 0);
        assert_eq!(first.new_keys, 0);
        let empty = index.open_fans(&VecSeries::default(), 2.0);
        assert_eq!((empty.since, empty.keys), (None, 0));
    }

    #[test]
    fn a_rising_series_is_one_fan_per_event_and_a_constant_one_is_one_fan() {
        let rising: Vec<(f64, u64)> = (0..5).map(|i| (i as f64, i)).collect();
        let fans = FanIndex::default().fans(&VecSeries::new(rising));
        assert_eq!(fans.len(), 5);
        assert_eq!((fans[0].bottom, fans[0].top), (4, 4));
        let flat: Vec<(f64, u64)> = (0..5).map(|i| (i as f64, 3)).collect();
        let fans = FanIndex::default().fans(&VecSeries::new(flat));
        assert_eq!(fans.len(), 1);
        assert_eq!((fans[0].first, fans[0].last), (1, 5));
    }
}
