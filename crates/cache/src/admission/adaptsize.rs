//! AdaptSize admission (Berger, Sitaraman, Harchol-Balter, NSDI'17) as libCacheSim 0.3.5's
//! `AdaptSizeAdmissioner` runs it: a miss of an object of `size` bytes is admitted with
//! probability `exp(-size / c)`, and `c` is re-tuned every `reconf-interval` requests
//! (default 30000; postponed by 1000 while the objects seen add up to at most three cache
//! sizes) by a Markov model of the cache's hit ratio under each candidate `c`: a coarse
//! scan over `log2 c` in steps of 4, then a golden-section search of at most
//! `max-iteration` steps (default 15). The model counts every request (hit or miss) per
//! object, folded into an exponentially weighted long-term count (decay 0.3) at each
//! reconfiguration; objects whose count falls below 0.1 are forgotten, which bounds the
//! state to the objects seen in the last few intervals.
//!
//! Draws come from this policy's own Knuth MMIX generator with a fixed seed (libCacheSim's
//! is shared process-wide, see [`super::Probabilistic`]), so a replay is reproducible and
//! its miss ratio statistically, not bit-, equal to libCacheSim's; the model also sums in
//! a different object order than libCacheSim's `unordered_map`, which can move `c` by
//! rounding.

use hashbrown::HashMap;

const MODULUS: u64 = 10_000_000;
const SEED: u64 = 0x6164_6170_7473_697a;
const EWMA_DECAY: f64 = 0.3;
const GOLDEN_R: f64 = 0.61803399;
const TOLERANCE: f64 = 3.0e-8;
/// The first `c` (2^15), before any reconfiguration.
const INITIAL_C: f64 = 32768.0;
/// Requests a reconfiguration is put off by while too few bytes were seen.
const POSTPONE: u64 = 1000;

type Metadata = HashMap<u64, Seen, foldhash::fast::FixedState>;

fn metadata() -> Metadata {
    HashMap::with_hasher(foldhash::fast::FixedState::with_seed(0))
}

/// What the model knows of one object.
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    times: f64,
    size: u32,
}

#[derive(Clone, Debug)]
pub struct AdaptSize {
    max_iteration: u64,
    reconf_interval: u64,
    /// Capacity in bytes the model sizes for (the cache tells it).
    cache_bytes: u64,
    next_reconf: u64,
    /// Bytes of the distinct objects in both maps.
    stat_bytes: u64,
    c: f64,
    interval: Metadata,
    longterm: Metadata,
    state: u64,
}

impl AdaptSize {
    /// AdaptSize with libCacheSim's parameters; both must be at least 1.
    pub fn new(max_iteration: u64, reconf_interval: u64) -> Result<AdaptSize, String> {
        if reconf_interval == 0 {
            return Err("reconf-interval must be at least 1".into());
        }
        Ok(AdaptSize {
            max_iteration,
            reconf_interval,
            cache_bytes: 0,
            next_reconf: reconf_interval,
            stat_bytes: 0,
            c: INITIAL_C,
            interval: metadata(),
            longterm: metadata(),
            state: SEED,
        })
    }

    pub fn max_iteration(&self) -> u64 {
        self.max_iteration
    }

    pub fn reconf_interval(&self) -> u64 {
        self.reconf_interval
    }

    /// The current `c` (bytes): an object of `c` bytes is admitted with probability 1/e.
    pub fn c(&self) -> f64 {
        self.c
    }

    pub(crate) fn fresh(&self) -> AdaptSize {
        AdaptSize::new(self.max_iteration, self.reconf_interval).expect("valid parameters")
    }

    /// Counts one request (hit or miss) of `key` of `size` bytes against a cache of
    /// `cache_bytes` (libCacheSim's `updateStats`, called on every lookup).
    pub fn observe(&mut self, key: u64, size: u32, cache_bytes: u64) {
        self.cache_bytes = cache_bytes;
        self.reconfigure();
        let known = [self.interval.get(&key), self.longterm.get(&key)];
        if known.iter().all(Option::is_none) {
            self.stat_bytes += u64::from(size);
        } else {
            for seen in known.into_iter().flatten() {
                if seen.size != size {
                    self.stat_bytes = self.stat_bytes - u64::from(seen.size) + u64::from(size);
                }
            }
        }
        let seen = self.interval.entry(key).or_default();
        seen.times += 1.0;
        seen.size = size;
    }

    /// Whether a missed object of `size` bytes may enter: with probability `exp(-size/c)`.
    pub fn admit(&mut self, size: u32) -> bool {
        let probability = (-f64::from(size) / self.c).exp();
        self.state = self
            .state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let roll = (self.state % MODULUS) as f64 / MODULUS as f64;
        roll < probability
    }

    fn reconfigure(&mut self) {
        self.next_reconf -= 1;
        if self.next_reconf > 0 {
            return;
        }
        if self.stat_bytes <= self.cache_bytes * 3 {
            self.next_reconf += POSTPONE;
            return;
        }
        self.next_reconf = self.reconf_interval;
        for seen in self.longterm.values_mut() {
            seen.times *= EWMA_DECAY;
        }
        for (key, seen) in self.interval.drain() {
            match self.longterm.get_mut(&key) {
                None => {
                    self.longterm.insert(key, seen);
                }
                Some(long) => {
                    long.times += (1.0 - EWMA_DECAY) * seen.times;
                    long.size = seen.size;
                }
            }
        }
        let mut forgotten = 0u64;
        self.longterm.retain(|_, seen| {
            let keep = seen.times >= 0.1;
            if !keep {
                forgotten += u64::from(seen.size);
            }
            keep
        });
        self.stat_bytes -= forgotten;
        let objects: Vec<Seen> = self.longterm.values().copied().collect();
        self.c = best_c(&objects, self.cache_bytes as f64, self.max_iteration).unwrap_or(self.c);
    }

    /// Heap bytes of the model's per-object counts.
    pub fn heap_bytes(&self) -> usize {
        self.interval.allocation_size() + self.longterm.allocation_size()
    }
}

/// The `c` with the best modelled hit ratio: a scan of `log2 c` = 2, 6, 10, ... below
/// `log2 cache`, then a golden-section search around the best; `None` if the model
/// produced NaN (libCacheSim keeps the old `c` then).
fn best_c(objects: &[Seen], cache: f64, max_iteration: u64) -> Option<f64> {
    let gss_v = 1.0 - GOLDEN_R;
    let mut x0 = 0.0;
    let mut x1 = cache.log2();
    let mut x3 = x1;
    let mut best = 0.0;
    let mut i = 2.0;
    while i < x3 {
        let hit_ratio = model_hit_ratio(objects, cache, i);
        if hit_ratio > best {
            best = hit_ratio;
            x1 = i;
        }
        i += 4.0;
    }
    let mut h1 = best;
    let (mut x2, mut h2);
    if x3 - x1 > x1 - x0 {
        x2 = x1 + gss_v * (x3 - x1);
        h2 = model_hit_ratio(objects, cache, x2);
    } else {
        x2 = x1;
        h2 = h1;
        x1 = x0 + gss_v * (x1 - x0);
        h1 = model_hit_ratio(objects, cache, x1);
    }
    let mut iteration = 0;
    while iteration < max_iteration && (x3 - x0).abs() > TOLERANCE * (x1.abs() + x2.abs()) {
        iteration += 1;
        if h1.is_nan() || h2.is_nan() {
            break;
        }
        if h2 > h1 {
            x0 = x1;
            x1 = x2;
            x2 = GOLDEN_R * x1 + gss_v * x3;
            h1 = h2;
            h2 = model_hit_ratio(objects, cache, x2);
        } else {
            x3 = x2;
            x2 = x1;
            x1 = GOLDEN_R * x2 + gss_v * x0;
            h2 = h1;
            h1 = model_hit_ratio(objects, cache, x1);
        }
    }
    if h1.is_nan() || h2.is_nan() {
        None
    } else if h1 > h2 {
        Some(x1.exp2())
    } else {
        Some(x2.exp2())
    }
}

/// The model's (request-weighted) hit count with `c = 2^log2c`: the characteristic time
/// `T` of an LRU cache of `cache` bytes found by fixed-point iteration (20 rounds), then
/// each object's hit probability under admission probability `exp(-size/c)`, by the
/// original AdaptSize's rational approximation.
fn model_hit_ratio(objects: &[Seen], cache: f64, log2c: f64) -> f64 {
    let c = log2c.exp2();
    // Each object's admission probability, once per call (the loops below reuse it).
    let admission: Vec<f64> = objects
        .iter()
        .map(|o| (-f64::from(o.size) / c).exp())
        .collect();
    let weighted: f64 = objects
        .iter()
        .zip(&admission)
        .map(|(o, p)| o.times * p * f64::from(o.size))
        .sum();
    if weighted <= 0.0 {
        return 0.0;
    }
    let mut t = cache / weighted;
    for _ in 0..20 {
        if t > 1e70 {
            break;
        }
        let mut occupied = 0.0;
        for (o, p) in objects.iter().zip(&admission) {
            let rate_t = o.times * t;
            if rate_t > 150.0 {
                occupied += f64::from(o.size);
            } else {
                let admitted = p * (rate_t.exp() - 1.0);
                occupied += f64::from(o.size) * admitted / (1.0 + admitted);
            }
        }
        t = cache * t / occupied;
    }
    objects
        .iter()
        .zip(&admission)
        .map(|(o, &p)| {
            let l = o.times;
            let num =
                l * p * t * (840.0 + 60.0 * l * t + 20.0 * l * l * t * t + l * l * l * t * t * t);
            let den = 840.0
                + 120.0 * l * (-3.0 + 7.0 * p) * t
                + 60.0 * l * l * (1.0 + p) * t * t
                + 4.0 * l * l * l * (-1.0 + 5.0 * p) * t * t * t
                + l * l * l * l * p * t * t * t * t;
            let hit = if num != 0.0 && den == 0.0 {
                0.0
            } else {
                (num / den).clamp(0.0, 1.0)
            };
            l * hit
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_small_objects_more_often_than_large_ones() {
        let mut a = AdaptSize::new(15, 30000).unwrap();
        assert_eq!(a.c(), 32768.0);
        let small = (0..10_000).filter(|_| a.admit(100)).count();
        let large = (0..10_000).filter(|_| a.admit(100_000)).count();
        // exp(-100/32768) = 0.997, exp(-100000/32768) = 0.047.
        assert!(small > 9_900, "{small}");
        assert!((300..700).contains(&large), "{large}");
    }

    #[test]
    fn reconfigures_every_interval_once_enough_bytes_were_seen() {
        // A cache of 10 kB; objects of 1 kB (popular) and 50 kB (each seen once).
        let mut a = AdaptSize::new(15, 100).unwrap();
        for i in 0..99u64 {
            a.observe(i % 10, 1000, 10_000);
        }
        assert_eq!(a.c(), INITIAL_C, "not before the interval");
        // 10 kB seen, not more than 3 caches: postponed by 1000 requests.
        a.observe(0, 1000, 10_000);
        assert_eq!((a.c(), a.next_reconf), (INITIAL_C, POSTPONE));
        for i in 0..1000u64 {
            if i % 2 == 0 {
                a.observe(i % 10, 1000, 10_000);
            } else {
                a.observe(1000 + i, 50_000, 10_000);
            }
        }
        assert_ne!(a.c(), INITIAL_C, "reconfigured");
        assert!(
            a.c() < 50_000.0,
            "large one-hit objects are kept out: c = {}",
            a.c()
        );
        assert_eq!(a.next_reconf, 100);
    }

    #[test]
    fn forgets_objects_whose_count_decays_away() {
        let mut a = AdaptSize::new(15, 10).unwrap();
        for i in 0..10u64 {
            a.observe(i, 100, 10);
        }
        // The 10th request reconfigures before it is counted: 9 objects are folded in.
        assert_eq!(a.longterm.len(), 9);
        // Counts decay by 0.3 per interval: 1 -> 0.3 -> 0.09, gone at the third.
        for round in 0..3 {
            for _ in 0..10 {
                a.observe(99, 100, 10);
            }
            assert_eq!(a.longterm.contains_key(&0), round < 1, "round {round}");
        }
        assert_eq!(a.stat_bytes, 100, "only the object still counted");
    }
}
