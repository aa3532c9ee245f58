//! LRU miss-ratio curve from reuse (stack) distances, exact or SHARDS-sampled.
//!
//! The stack distance of an access is the number of distinct keys touched since the previous
//! access to the same key; an LRU cache of `C` objects hits iff that distance is below `C`.
//! Distances are counted with a Fenwick tree over access slots (one mark per key at its last
//! access); slots are renumbered when they run out, so the tree holds at most twice the
//! tracked keys. Tracked keys are bounded by `max_keys`: past it the analysis switches to
//! fixed-size SHARDS (Waldspurger et al., FAST'15): only keys whose hash falls under a
//! threshold are tracked, the threshold halves whenever the sample outgrows `max_keys`,
//! distances are scaled by 1/rate and the histogram is rescaled on each halving.
//!
//! Semantics follow replay: gets and accesses are lookups (counted), puts refresh recency
//! without counting, deletes remove the key. Distances below 1024 are binned exactly; above,
//! 16 bins per doubling, and the curve is reported at bin edges where it is exact.

use rustc_hash::FxHashMap;
use serde::Serialize;
use xxhash_rust::xxh3::xxh3_64;

const EXACT_BINS: usize = 1024;
const BINS_PER_DOUBLING: f64 = 16.0;
const HASH_SPACE: u64 = 1 << 24;

/// Where `key` falls in the sampling hash space; a key is in a sample of threshold `t` iff
/// this is below `t`. SHARDS here and the miniature caches of [`crate::curves`] share it, so
/// at one rate they see the same keys.
#[inline]
pub(crate) fn key_hash(key: u64) -> u64 {
    xxh3_64(&key.to_le_bytes()) % HASH_SPACE
}

/// The threshold of sampling rate `rate` (at least one hash value, at most all), and the rate
/// it really samples at.
pub(crate) fn threshold_of(rate: f64) -> (u64, f64) {
    let t = ((rate * HASH_SPACE as f64).round() as u64).clamp(1, HASH_SPACE);
    (t, t as f64 / HASH_SPACE as f64)
}

/// Fenwick (binary indexed) tree of slot marks.
struct Fenwick {
    tree: Vec<i32>,
}

impl Fenwick {
    fn new(len: usize) -> Self {
        Fenwick {
            tree: vec![0; len + 1],
        }
    }

    fn add(&mut self, slot: usize, delta: i32) {
        let mut i = slot + 1;
        while i < self.tree.len() {
            self.tree[i] += delta;
            i += i & i.wrapping_neg();
        }
    }

    /// Marks in slots `0..=slot`.
    fn prefix(&self, slot: usize) -> i64 {
        let mut i = slot + 1;
        let mut sum = 0i64;
        while i > 0 {
            sum += i64::from(self.tree[i]);
            i -= i & i.wrapping_neg();
        }
        sum
    }
}

fn bin_of(distance: f64) -> usize {
    if distance < EXACT_BINS as f64 {
        distance as usize
    } else {
        let above = (distance / EXACT_BINS as f64).log2() * BINS_PER_DOUBLING;
        EXACT_BINS + above as usize
    }
}

/// Smallest distance that falls in bin `b` (a cache of this size hits every distance in the
/// bins below `b`).
fn bin_floor(b: usize) -> f64 {
    if b < EXACT_BINS {
        b as f64
    } else {
        (EXACT_BINS as f64 * 2f64.powf((b - EXACT_BINS) as f64 / BINS_PER_DOUBLING)).ceil()
    }
}

/// Streaming LRU stack-distance histogram.
pub struct MissRatioCurve {
    max_keys: usize,
    threshold: u64,
    slot_of: FxHashMap<u64, u32>,
    slot_key: Vec<u64>,
    fenwick: Fenwick,
    next_slot: usize,
    histogram: Vec<f64>,
    cold: f64,
    lookups: f64,
    /// Largest stack distance of a lookup (scaled when sampled).
    max_distance: Option<f64>,
    /// Fixed-rate SHARDS only: lookups by unscaled distance in the sample, so the curve can
    /// be read at any size exactly (see [`MissRatioCurve::miss_ratio_at`]).
    sampled_distances: Option<Vec<u64>>,
}

/// One point of the curve.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MrcPoint {
    pub cache_size: u64,
    pub miss_ratio: f64,
}

/// Reuse miss ratios the sizing recommendation gives a cache size for: 0.01%, 0.1%, 1% of
/// lookups missing on a key seen before (first accesses miss in any cache).
pub const SIZING_TARGETS: [f64; 3] = [0.0001, 0.001, 0.01];

/// `ratio` as a percentage without trailing zeros: 0.0001 is `0.01%`, 0.01 is `1%`.
pub fn percent(ratio: f64) -> String {
    let text = format!("{:.4}", 100.0 * ratio);
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}%")
}

/// The smallest LRU cache whose reuse misses stay within a target.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SizeFor {
    /// Misses on keys seen before, as a fraction of lookups.
    pub reuse_miss_ratio: f64,
    pub cache_size: u64,
    /// The miss ratio at that size, first accesses included.
    pub miss_ratio: f64,
}

/// The curve and how it was obtained.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MrcResult {
    /// `"exact"` or `"shards"`.
    pub method: String,
    /// Fraction of keys tracked (1.0 when exact).
    pub sample_rate: f64,
    pub points: Vec<MrcPoint>,
    /// Smallest LRU cache (objects) that misses only on first accesses: the largest stack
    /// distance plus one (an estimate when sampled). Null without reuses.
    pub no_miss_size: Option<u64>,
    /// For each of [`SIZING_TARGETS`], the smallest size that meets it (exact below 1024
    /// objects, at 1/16-doubling bin edges above; estimates when sampled).
    pub sizing: Vec<SizeFor>,
}

impl MissRatioCurve {
    /// `max_keys` bounds the keys tracked (and so memory, about 40 bytes per key).
    pub fn new(max_keys: usize) -> Self {
        let max_keys = max_keys.max(16);
        let capacity = 1024;
        MissRatioCurve {
            max_keys,
            threshold: HASH_SPACE,
            slot_of: FxHashMap::default(),
            slot_key: vec![0; capacity],
            fenwick: Fenwick::new(capacity),
            next_slot: 0,
            histogram: Vec::new(),
            cold: 0.0,
            lookups: 0.0,
            max_distance: None,
            sampled_distances: None,
        }
    }

    /// Fixed-rate SHARDS: keys whose hash falls under `rate` of the hash space are tracked,
    /// however many there are (memory grows with the sampled keys).
    pub fn fixed_rate(rate: f64) -> Self {
        let mut mrc = MissRatioCurve::new(usize::MAX);
        mrc.threshold = threshold_of(rate).0;
        mrc.sampled_distances = Some(Vec::new());
        mrc
    }

    /// The rate keys are sampled at (1.0 when every key is tracked).
    pub fn sample_rate(&self) -> f64 {
        self.rate()
    }

    /// A fixed-rate curve's misses and lookups (of the sample) for an LRU cache of `size`
    /// objects: an access hits iff its distance in the sample is below `size × rate` (rounded
    /// up), which is exactly the hit condition of an LRU cache of that many objects fed the
    /// sampled keys only. `None` for a curve not made by [`MissRatioCurve::fixed_rate`].
    pub fn sampled_misses_at(&self, size: u64) -> Option<(f64, f64)> {
        let distances = self.sampled_distances.as_ref()?;
        let below = ((size as f64 * self.rate()).ceil() as usize).max(1);
        let hits: u64 = distances.iter().take(below).sum();
        Some((self.lookups - hits as f64, self.lookups))
    }

    fn rate(&self) -> f64 {
        self.threshold as f64 / HASH_SPACE as f64
    }

    fn sampled(&self, key: u64) -> bool {
        self.threshold == HASH_SPACE || key_hash(key) < self.threshold
    }

    /// A lookup (get or access): counted, and the key becomes most recent.
    pub fn lookup(&mut self, key: u64) {
        if !self.sampled(key) {
            return;
        }
        self.lookups += 1.0;
        match self.touch(key) {
            Some(distance) => {
                if let Some(raw) = &mut self.sampled_distances {
                    let d = distance as usize;
                    if d >= raw.len() {
                        raw.resize(d + 1, 0);
                    }
                    raw[d] += 1;
                }
                let scaled = distance as f64 / self.rate();
                self.max_distance = Some(self.max_distance.map_or(scaled, |m| m.max(scaled)));
                let bin = bin_of(scaled);
                if bin >= self.histogram.len() {
                    self.histogram.resize(bin + 1, 0.0);
                }
                self.histogram[bin] += 1.0;
            }
            None => self.cold += 1.0,
        }
    }

    /// A put: the key becomes most recent, nothing is counted.
    pub fn insert(&mut self, key: u64) {
        if self.sampled(key) {
            self.touch(key);
        }
    }

    /// A delete: the key leaves the stack.
    pub fn remove(&mut self, key: u64) {
        if let Some(slot) = self.slot_of.remove(&key) {
            self.fenwick.add(slot as usize, -1);
        }
    }

    /// Moves `key` to the top; returns its stack distance if it was tracked.
    fn touch(&mut self, key: u64) -> Option<u64> {
        if self.next_slot == self.slot_key.len() {
            self.compact();
        }
        let slot = self.next_slot;
        self.next_slot += 1;
        let previous = self.slot_of.insert(key, slot as u32);
        let distance = previous.map(|old| {
            let old = old as usize;
            let newer = self.fenwick.prefix(slot - 1) - self.fenwick.prefix(old);
            self.fenwick.add(old, -1);
            newer as u64
        });
        self.fenwick.add(slot, 1);
        self.slot_key[slot] = key;
        if previous.is_none() && self.slot_of.len() > self.max_keys {
            self.lower_rate();
        }
        distance
    }

    /// Renumbers live slots `0..live` in recency order and sizes the tree to twice that.
    fn compact(&mut self) {
        let mut live: Vec<(u32, u64)> = self.slot_of.iter().map(|(&k, &s)| (s, k)).collect();
        live.sort_unstable();
        let capacity = (live.len() * 2).max(1024);
        self.slot_key = vec![0; capacity];
        self.fenwick = Fenwick::new(capacity);
        for (new_slot, &(_, key)) in live.iter().enumerate() {
            self.slot_key[new_slot] = key;
            self.slot_of.insert(key, new_slot as u32);
            self.fenwick.add(new_slot, 1);
        }
        self.next_slot = live.len();
    }

    /// Halves the sampling rate, dropping keys that fall out of the sample.
    fn lower_rate(&mut self) {
        while self.slot_of.len() > self.max_keys && self.threshold > 1 {
            self.threshold /= 2;
            let threshold = self.threshold;
            let dropped: Vec<(u64, u32)> = self
                .slot_of
                .iter()
                .filter(|(&k, _)| key_hash(k) >= threshold)
                .map(|(&k, &s)| (k, s))
                .collect();
            for (key, slot) in dropped {
                self.slot_of.remove(&key);
                self.fenwick.add(slot as usize, -1);
            }
            for count in &mut self.histogram {
                *count *= 0.5;
            }
            self.cold *= 0.5;
            self.lookups *= 0.5;
        }
    }

    /// Misses of an LRU cache of `size` objects (in sampled units).
    fn misses_at_bin(&self, bin: usize) -> f64 {
        self.cold + self.histogram.iter().skip(bin).sum::<f64>()
    }

    /// The curve at exact points: every size up to 16, then about 4 sizes per doubling, up to
    /// the size where only cold misses remain.
    pub fn result(&self) -> MrcResult {
        let method = if self.threshold == HASH_SPACE {
            "exact"
        } else {
            "shards"
        };
        let mut points = Vec::new();
        if self.lookups > 0.0 {
            let last_bin = self.histogram.len();
            let mut bins: Vec<usize> = (1..=16.min(last_bin)).collect();
            let mut size = 16.0f64;
            loop {
                size *= 2f64.powf(0.25);
                let bin = bin_of(size.round());
                if bin >= last_bin {
                    break;
                }
                if bins.last() != Some(&bin) {
                    bins.push(bin);
                }
            }
            if bins.last() != Some(&last_bin) {
                bins.push(last_bin);
            }
            for bin in bins {
                points.push(MrcPoint {
                    cache_size: bin_floor(bin) as u64,
                    miss_ratio: self.misses_at_bin(bin) / self.lookups,
                });
            }
        }
        MrcResult {
            method: method.to_string(),
            sample_rate: self.rate(),
            points,
            no_miss_size: self.max_distance.map(|d| d.round() as u64 + 1),
            sizing: self.sizing(),
        }
    }

    /// The smallest size meeting each of [`SIZING_TARGETS`]: the lowest bin whose reuse
    /// misses (the distances in it and above) are within the target.
    fn sizing(&self) -> Vec<SizeFor> {
        if self.lookups <= 0.0 {
            return Vec::new();
        }
        SIZING_TARGETS
            .iter()
            .map(|&target| {
                let mut above = 0.0;
                let mut bin = self.histogram.len();
                while bin > 0 && (above + self.histogram[bin - 1]) / self.lookups <= target {
                    above += self.histogram[bin - 1];
                    bin -= 1;
                }
                SizeFor {
                    reuse_miss_ratio: target,
                    cache_size: bin_floor(bin) as u64,
                    miss_ratio: self.misses_at_bin(bin) / self.lookups,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Misses of a plain LRU list of `size` objects, lookups insert on miss, puts insert.
    fn brute_force(trace: &[(bool, u64)], size: usize) -> (u64, u64) {
        let mut lru: VecDeque<u64> = VecDeque::new();
        let (mut misses, mut lookups) = (0, 0);
        for &(is_lookup, key) in trace {
            let pos = lru.iter().position(|&k| k == key);
            if is_lookup {
                lookups += 1;
                if pos.is_none() {
                    misses += 1;
                }
            }
            if let Some(p) = pos {
                lru.remove(p);
            }
            lru.push_front(key);
            lru.truncate(size);
        }
        (misses, lookups)
    }

    fn small_trace() -> Vec<(bool, u64)> {
        // Zipf-ish over 300 keys with phases, deterministic.
        let mut x: u64 = 12345;
        (0..20_000)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = (x >> 33) % 1000;
                let key = if r < 600 {
                    r % 20
                } else {
                    (r * 7 + i / 500) % 300
                };
                (i % 11 != 0, key)
            })
            .collect()
    }

    #[test]
    fn no_miss_size_is_the_smallest_lru_with_only_cold_misses() {
        let trace = small_trace();
        let mut mrc = MissRatioCurve::new(1 << 20);
        for &(is_lookup, key) in &trace {
            if is_lookup {
                mrc.lookup(key);
            } else {
                mrc.insert(key);
            }
        }
        let size = mrc.result().no_miss_size.unwrap() as usize;
        let cold = brute_force(&trace, usize::MAX).0;
        assert_eq!(brute_force(&trace, size).0, cold);
        assert!(brute_force(&trace, size - 1).0 > cold);
        assert_eq!(MissRatioCurve::new(16).result().no_miss_size, None);
    }

    #[test]
    fn sizing_gives_the_smallest_lru_within_each_reuse_miss_ratio() {
        let trace = small_trace();
        let mut mrc = MissRatioCurve::new(1 << 20);
        for &(is_lookup, key) in &trace {
            if is_lookup {
                mrc.lookup(key);
            } else {
                mrc.insert(key);
            }
        }
        let cold = brute_force(&trace, usize::MAX).0;
        let sizing = mrc.result().sizing;
        assert_eq!(sizing.len(), SIZING_TARGETS.len());
        for s in sizing {
            let reuse = |size: usize| {
                let (misses, lookups) = brute_force(&trace, size);
                (misses - cold) as f64 / lookups as f64
            };
            let size = s.cache_size as usize;
            assert!(reuse(size) <= s.reuse_miss_ratio, "{s:?}");
            assert!(size == 0 || reuse(size - 1) > s.reuse_miss_ratio, "{s:?}");
            let (misses, lookups) = brute_force(&trace, size);
            assert!((s.miss_ratio - misses as f64 / lookups as f64).abs() < 1e-12);
        }
    }

    #[test]
    fn exact_curve_matches_brute_force_lru() {
        let trace = small_trace();
        let mut mrc = MissRatioCurve::new(1 << 20);
        for &(is_lookup, key) in &trace {
            if is_lookup {
                mrc.lookup(key);
            } else {
                mrc.insert(key);
            }
        }
        let result = mrc.result();
        assert_eq!(result.method, "exact");
        assert!(result.points.len() > 10);
        for p in &result.points {
            let (misses, lookups) = brute_force(&trace, p.cache_size as usize);
            let expected = misses as f64 / lookups as f64;
            assert!(
                (p.miss_ratio - expected).abs() < 1e-12,
                "size {}: {} vs brute force {expected}",
                p.cache_size,
                p.miss_ratio
            );
        }
        assert!(result
            .points
            .windows(2)
            .all(|w| w[0].miss_ratio >= w[1].miss_ratio));
    }

    #[test]
    fn compaction_keeps_distances_exact() {
        // Far more accesses than initial slots, few keys: many compactions.
        let trace: Vec<(bool, u64)> = (0..50_000u64).map(|i| (true, (i * i) % 97)).collect();
        let mut mrc = MissRatioCurve::new(1 << 20);
        for &(_, key) in &trace {
            mrc.lookup(key);
        }
        for p in mrc.result().points {
            let (misses, lookups) = brute_force(&trace, p.cache_size as usize);
            assert!((p.miss_ratio - misses as f64 / lookups as f64).abs() < 1e-12);
        }
    }

    #[test]
    fn deleted_keys_miss_again() {
        let mut mrc = MissRatioCurve::new(1 << 20);
        mrc.lookup(1);
        mrc.remove(1);
        mrc.lookup(1);
        let r = mrc.result();
        assert_eq!(r.points.last().unwrap().miss_ratio, 1.0);
    }

    #[test]
    fn shards_sampling_stays_bounded_and_close() {
        let mut x: u64 = 99;
        let trace: Vec<(bool, u64)> = (0..200_000)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = (x >> 11) % 1_000_000;
                // 80% of lookups on 2000 hot keys, the rest spread over 50k.
                let key = if r < 800_000 {
                    r % 2000
                } else {
                    10_000 + r % 50_000
                };
                (true, key)
            })
            .collect();
        let mut exact = MissRatioCurve::new(1 << 20);
        let mut sampled = MissRatioCurve::new(4000);
        for &(_, key) in &trace {
            exact.lookup(key);
            sampled.lookup(key);
        }
        assert!(sampled.slot_of.len() <= 4000);
        let s = sampled.result();
        assert_eq!(s.method, "shards");
        assert!(s.sample_rate < 0.2);
        let e = exact.result();
        let at = |r: &MrcResult, size: u64| {
            r.points
                .iter()
                .rev()
                .find(|p| p.cache_size <= size)
                .map(|p| p.miss_ratio)
                .unwrap()
        };
        for size in [1000, 2000, 4000, 16_000] {
            let (a, b) = (at(&e, size), at(&s, size));
            assert!((a - b).abs() < 0.05, "size {size}: exact {a} sampled {b}");
        }
    }
}
