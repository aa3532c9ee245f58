//! "Bloom filter" admission as libCacheSim 0.3.5's `bloomfilter.c` runs it: an object is
//! refused on its first miss and admitted on every later one. libCacheSim remembers the
//! objects it has seen in an exact hash table that is never cleared (no false positives, no
//! window), so this does too: the set holds every distinct key that ever missed, 8 bytes
//! each plus the table's slack, and grows (amortised) with the trace's footprint.

use foldhash::fast::FixedState;
use hashbrown::HashSet;

#[derive(Clone, Debug)]
pub struct BloomFilter {
    seen: HashSet<u64, FixedState>,
}

impl Default for BloomFilter {
    fn default() -> Self {
        BloomFilter {
            seen: HashSet::with_hasher(FixedState::with_seed(0x626c_6f6f_6d00)),
        }
    }
}

impl BloomFilter {
    #[inline]
    pub fn admit(&mut self, key: u64) -> bool {
        !self.seen.insert(key)
    }

    pub fn heap_bytes(&self) -> usize {
        self.seen.allocation_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_from_the_second_miss_on() {
        let mut a = BloomFilter::default();
        assert!(!a.admit(1));
        assert!(!a.admit(2));
        assert!(a.admit(1));
        assert!(a.admit(1));
        assert!(a.heap_bytes() > 0);
    }
}
