//! libCacheSim's minimal-increment counting Bloom filter (`minimalIncrementCBF.c`), the
//! frequency estimate W-TinyLFU compares a window victim with a main victim by.
//!
//! Sized as libCacheSim sizes it: `entries` (W-TinyLFU passes its main cache's size, in
//! bytes) at a 0.1% error rate gives `ceil(14.38 * entries)` counters (at most `i32::MAX`)
//! and 10 hash functions `(a + i * b) mod counters`, `a` and `b` the low 32 bits of XXH64
//! of the key with libCacheSim's seeds. An add increments all 10 counters (libCacheSim's
//! "minimal increment" only computes the minimum); an estimate is their minimum; a decay
//! halves every counter.
//!
//! Because `entries` is a byte count, the counter array is huge for byte-sized caches
//! (2 billion counters, 8 GiB, for a 200 MB cache) while a trace touches at most 10 counters
//! per distinct key. libCacheSim gets away with `calloc` (untouched pages are never
//! mapped); here arrays above [`DENSE_MAX_COUNTERS`] are kept sparse, in a hash map of the
//! non-zero counters, which holds the same values in memory proportional to the keys seen.

use hashbrown::HashMap;
use xxhash_rust::xxh64::xxh64;

/// libCacheSim's `HASH_SEED0` and `HASH_SEED1`.
const SEEDS: [u64; 2] = [0x1234_5678, 0x1234_4321];
/// W-TinyLFU's error rate (`minimalIncrementCBF_init(.., 0.001)`).
const ERROR: f64 = 0.001;
/// Above this many counters (16 MiB of them) the sketch is sparse.
pub(crate) const DENSE_MAX_COUNTERS: u32 = 1 << 22;

enum Counters {
    Dense(Vec<u32>),
    /// Only the non-zero counters, by index.
    Sparse(HashMap<u32, u32, foldhash::fast::FixedState>),
}

pub(crate) struct FrequencySketch {
    counters: Counters,
    len: u32,
    hashes: u32,
}

impl FrequencySketch {
    /// A sketch for `entries` expected entries, as `minimalIncrementCBF_init(entries, 0.001)`.
    pub fn new(entries: u64) -> FrequencySketch {
        // libCacheSim's ln(2)^2 digit for digit; its ln(2) (0.693147180559945) differs from
        // LN_2 in the 16th digit, which cannot move the ceiling (9.97 -> 10).
        let bits_per_entry = -ERROR.ln() / 0.480453013918201;
        let hashes = (std::f64::consts::LN_2 * bits_per_entry).ceil() as u32;
        let entries = entries.min(i32::MAX as u64) as f64;
        let mut len = (bits_per_entry * entries).ceil().min(i32::MAX as f64) as u32;
        if len < hashes {
            len = hashes * 2;
        }
        let counters = if len <= DENSE_MAX_COUNTERS {
            Counters::Dense(vec![0; len as usize])
        } else {
            Counters::Sparse(HashMap::with_hasher(foldhash::fast::FixedState::with_seed(
                0,
            )))
        };
        FrequencySketch {
            counters,
            len,
            hashes,
        }
    }

    /// The estimated count of `key`: the least of its counters.
    pub fn estimate(&self, key: u64) -> u32 {
        let mut least = u32::MAX;
        for x in indices(key, self.len, self.hashes) {
            let count = match &self.counters {
                Counters::Dense(v) => v[x as usize],
                Counters::Sparse(m) => m.get(&x).copied().unwrap_or(0),
            };
            least = least.min(count);
        }
        least
    }

    /// Counts one occurrence of `key`.
    pub fn add(&mut self, key: u64) {
        for x in indices(key, self.len, self.hashes) {
            let count = match &mut self.counters {
                Counters::Dense(v) => &mut v[x as usize],
                Counters::Sparse(m) => m.entry(x).or_insert(0),
            };
            *count = count.wrapping_add(1);
        }
    }

    /// Halves every counter (libCacheSim's `minimalIncrementCBF_decay`).
    pub fn halve(&mut self) {
        match &mut self.counters {
            Counters::Dense(v) => v.iter_mut().for_each(|c| *c >>= 1),
            Counters::Sparse(m) => m.retain(|_, c| {
                *c >>= 1;
                *c != 0
            }),
        }
    }

    pub fn heap_bytes(&self) -> usize {
        match &self.counters {
            Counters::Dense(v) => v.capacity() * 4,
            Counters::Sparse(m) => m.allocation_size(),
        }
    }
}

/// The counter indices of `key` among `len`: libCacheSim's double hashing in 32-bit
/// arithmetic (an index may repeat; it is then counted twice, as there).
#[inline]
fn indices(key: u64, len: u32, hashes: u32) -> impl Iterator<Item = u32> {
    let bytes = key.to_le_bytes();
    let a = xxh64(&bytes, SEEDS[0]) as u32;
    let b = xxh64(&bytes, SEEDS[1]) as u32;
    (0..hashes).map(move |i| a.wrapping_add(i.wrapping_mul(b)) % len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sized_as_libcachesim_sizes_it() {
        // 14.3775... counters per entry, 10 hashes.
        let s = FrequencySketch::new(1000);
        assert_eq!((s.len, s.hashes), (14378, 10));
        // Too few counters for the hashes: twice the hashes.
        assert_eq!(FrequencySketch::new(0).len, 20);
        // A byte-sized main cache of 200 MB: capped at i32::MAX counters, kept sparse.
        let big = FrequencySketch::new(200_000_000);
        assert_eq!(big.len, i32::MAX as u32);
        assert!(matches!(big.counters, Counters::Sparse(_)));
    }

    #[test]
    fn dense_and_sparse_count_alike() {
        let mut dense = FrequencySketch::new(100);
        let mut sparse = FrequencySketch::new(100);
        sparse.counters = Counters::Sparse(HashMap::with_hasher(
            foldhash::fast::FixedState::with_seed(0),
        ));
        for k in 0..500u64 {
            for _ in 0..(k % 7) {
                dense.add(k);
                sparse.add(k);
            }
        }
        for k in 0..600u64 {
            assert_eq!(dense.estimate(k), sparse.estimate(k), "key {k}");
        }
        assert!(dense.estimate(6) >= 6, "never an underestimate");
        dense.halve();
        sparse.halve();
        for k in 0..600u64 {
            assert_eq!(
                dense.estimate(k),
                sparse.estimate(k),
                "key {k} after halving"
            );
        }
    }

    #[test]
    fn halving_ages_counts() {
        let mut s = FrequencySketch::new(10_000);
        for _ in 0..8 {
            s.add(42);
        }
        assert_eq!(s.estimate(42), 8);
        s.halve();
        assert_eq!(s.estimate(42), 4);
        assert_eq!(s.estimate(43), 0);
    }
}
