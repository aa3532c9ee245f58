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
//! mapped); here arrays above [`DENSE_MAX_COUNTERS`] are kept sparse ([`SparseCounters`]),
//! which holds the same values in memory proportional to the keys seen.

use xxhash_rust::xxh64::xxh64;

/// libCacheSim's `HASH_SEED0` and `HASH_SEED1`.
const SEEDS: [u64; 2] = [0x1234_5678, 0x1234_4321];
/// W-TinyLFU's error rate (`minimalIncrementCBF_init(.., 0.001)`).
const ERROR: f64 = 0.001;
/// Above this many counters (16 MiB of them) the sketch is sparse.
pub(crate) const DENSE_MAX_COUNTERS: u32 = 1 << 22;

enum Counters {
    Dense(Vec<u32>),
    Sparse(SparseCounters),
}

/// Hash functions per key: `ceil(ln 2 * bits per entry)` at [`ERROR`] (pinned by a test).
const HASHES: usize = 10;

pub(crate) struct FrequencySketch {
    counters: Counters,
    len: u32,
}

/// libCacheSim's bits (counters) per entry at [`ERROR`].
fn bits_per_entry() -> f64 {
    // libCacheSim's ln(2)^2 digit for digit.
    -ERROR.ln() / 0.480453013918201
}

impl FrequencySketch {
    /// A sketch for `entries` expected entries, as `minimalIncrementCBF_init(entries, 0.001)`.
    pub fn new(entries: u64) -> FrequencySketch {
        let entries = entries.min(i32::MAX as u64) as f64;
        let mut len = (bits_per_entry() * entries).ceil().min(i32::MAX as f64) as u32;
        if len < HASHES as u32 {
            len = HASHES as u32 * 2;
        }
        let counters = if len <= DENSE_MAX_COUNTERS {
            Counters::Dense(vec![0; len as usize])
        } else {
            Counters::Sparse(SparseCounters::new())
        };
        FrequencySketch { counters, len }
    }

    /// The estimated count of `key`: the least of its counters.
    pub fn estimate(&self, key: u64) -> u32 {
        let indices = indices(key, self.len);
        match &self.counters {
            Counters::Dense(v) => indices.iter().map(|&x| v[x as usize]).min(),
            Counters::Sparse(m) => {
                m.touch(&indices);
                indices.iter().map(|&x| m.get(x)).min()
            }
        }
        .unwrap_or(0)
    }

    /// Counts one occurrence of `key`.
    pub fn add(&mut self, key: u64) {
        let indices = indices(key, self.len);
        match &mut self.counters {
            Counters::Dense(v) => {
                for x in indices {
                    v[x as usize] = v[x as usize].wrapping_add(1);
                }
            }
            Counters::Sparse(m) => {
                m.reserve(HASHES);
                m.touch(&indices);
                indices.iter().for_each(|&x| m.increment(x));
            }
        }
    }

    /// Halves every counter (libCacheSim's `minimalIncrementCBF_decay`).
    pub fn halve(&mut self) {
        match &mut self.counters {
            Counters::Dense(v) => v.iter_mut().for_each(|c| *c >>= 1),
            Counters::Sparse(m) => m.halve(),
        }
    }

    pub fn heap_bytes(&self) -> usize {
        match &self.counters {
            Counters::Dense(v) => v.capacity() * 4,
            Counters::Sparse(m) => m.heap_bytes(),
        }
    }
}

/// The counter indices of `key` among `len`: libCacheSim's double hashing in 32-bit
/// arithmetic (an index may repeat; it is then counted twice, as there).
#[inline]
fn indices(key: u64, len: u32) -> [u32; HASHES] {
    let bytes = key.to_le_bytes();
    let a = xxh64(&bytes, SEEDS[0]) as u32;
    let b = xxh64(&bytes, SEEDS[1]) as u32;
    core::array::from_fn(|i| a.wrapping_add((i as u32).wrapping_mul(b)) % len)
}

/// A sparse counter's empty slot: no index is `u32::MAX` (there are at most `i32::MAX`).
const EMPTY: u64 = u64::MAX;
/// The table grows (doubling) before it is more than this full, in quarters.
const MAX_LOAD_QUARTERS: usize = 3;
const MIN_SLOTS: usize = 1024;

/// The counters that were ever incremented (and not halved to zero), by index: an
/// open-addressing table with linear probing whose slots pack `index << 32 | count` into one
/// `u64`, so a lookup usually reads one cache line. A general hash map costs two (control
/// bytes, then the entry), and each add or estimate reads 10 counters spread over a table far
/// larger than the processor's caches: that was three quarters of W-TinyLFU's time.
struct SparseCounters {
    slots: Vec<u64>,
    len: usize,
    /// `64 - log2(slots.len())`: a Fibonacci hash of the index keeps its top bits.
    shift: u32,
}

impl SparseCounters {
    fn new() -> SparseCounters {
        SparseCounters::with_slots(MIN_SLOTS)
    }

    fn with_slots(slots: usize) -> SparseCounters {
        debug_assert!(slots.is_power_of_two());
        SparseCounters {
            slots: vec![EMPTY; slots],
            len: 0,
            shift: 64 - slots.trailing_zeros(),
        }
    }

    #[inline]
    fn home(&self, index: u32) -> usize {
        (u64::from(index).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    /// The slot holding `index`, or the empty slot where it belongs.
    #[inline]
    fn position(&self, index: u32) -> usize {
        let mask = self.slots.len() - 1;
        let mut at = self.home(index);
        loop {
            let slot = self.slots[at];
            if slot == EMPTY || (slot >> 32) as u32 == index {
                return at;
            }
            at = (at + 1) & mask;
        }
    }

    #[inline]
    fn get(&self, index: u32) -> u32 {
        let slot = self.slots[self.position(index)];
        if slot == EMPTY {
            0
        } else {
            slot as u32
        }
    }

    /// Reads the first slot of each index so that their cache misses overlap: the probes
    /// that follow branch on what they read, and a mispredicted branch would otherwise make
    /// each miss wait for the one before it.
    #[inline]
    fn touch(&self, indices: &[u32; HASHES]) {
        let seen = indices
            .iter()
            .fold(0, |seen, &x| seen ^ self.slots[self.home(x)]);
        std::hint::black_box(seen);
    }

    /// Room for `more` new counters without growing.
    #[inline]
    fn reserve(&mut self, more: usize) {
        while (self.len + more) * 4 > self.slots.len() * MAX_LOAD_QUARTERS {
            self.grow();
        }
    }

    /// Adds one to the counter at `index`; [`SparseCounters::reserve`] made room for it.
    #[inline]
    fn increment(&mut self, index: u32) {
        debug_assert!((self.len + 1) * 4 <= self.slots.len() * MAX_LOAD_QUARTERS);
        let at = self.position(index);
        let slot = self.slots[at];
        self.slots[at] = if slot == EMPTY {
            self.len += 1;
            u64::from(index) << 32 | 1
        } else {
            slot & !u64::from(u32::MAX) | u64::from((slot as u32).wrapping_add(1))
        };
    }

    /// Rebuilds the table at `slots` slots with each counter mapped by `count` (dropped at 0).
    #[cold]
    fn rebuild(&mut self, slots: usize, count: impl Fn(u32) -> u32) {
        let old = std::mem::replace(self, SparseCounters::with_slots(slots));
        for slot in old.slots.into_iter().filter(|&s| s != EMPTY) {
            let value = count(slot as u32);
            if value != 0 {
                let at = self.position((slot >> 32) as u32);
                self.slots[at] = slot & !u64::from(u32::MAX) | u64::from(value);
                self.len += 1;
            }
        }
    }

    #[cold]
    fn grow(&mut self) {
        self.rebuild(self.slots.len() * 2, |c| c);
    }

    /// Halves every counter; those that reach zero leave (the table keeps its size).
    fn halve(&mut self) {
        self.rebuild(self.slots.len(), |c| c >> 1);
    }

    fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sized_as_libcachesim_sizes_it() {
        // 14.3775... counters per entry, 10 hashes. libCacheSim's ln(2) (0.693147180559945)
        // differs from LN_2 in the 16th digit, which cannot move the ceiling (9.97 -> 10).
        assert_eq!(
            (std::f64::consts::LN_2 * bits_per_entry()).ceil() as usize,
            HASHES
        );
        let s = FrequencySketch::new(1000);
        assert_eq!(s.len, 14378);
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
        sparse.counters = Counters::Sparse(SparseCounters::new());
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
    fn sparse_counters_grow_and_halve_like_an_array() {
        // 20,000 keys over 1.4M counters: the table grows from 1,024 slots many times.
        let mut dense = FrequencySketch::new(100_000);
        let mut sparse = FrequencySketch::new(100_000);
        sparse.counters = Counters::Sparse(SparseCounters::new());
        for k in 0..20_000u64 {
            for _ in 0..=(k % 3) {
                dense.add(k);
                sparse.add(k);
            }
        }
        let Counters::Sparse(table) = &sparse.counters else {
            unreachable!()
        };
        assert!(
            table.slots.len() >= 4 * 150_000 / 3,
            "grew past its load bound"
        );
        for round in 0..3 {
            for k in (0..25_000u64).step_by(7) {
                assert_eq!(
                    dense.estimate(k),
                    sparse.estimate(k),
                    "key {k}, round {round}"
                );
            }
            dense.halve();
            sparse.halve();
        }
        // Every count was at most 3 (plus collisions): three halvings leave almost nothing,
        // and the zeros are gone from the table.
        let Counters::Sparse(table) = &sparse.counters else {
            unreachable!()
        };
        let Counters::Dense(array) = &dense.counters else {
            unreachable!()
        };
        assert_eq!(table.len, array.iter().filter(|&&c| c != 0).count());
        assert_eq!(
            table.len,
            table.slots.iter().filter(|&&s| s != EMPTY).count()
        );
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
