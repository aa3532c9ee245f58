//! Uniform sampling of cached objects for the sampling algorithms (Random, Hyperbolic), as
//! libCacheSim's `hashtable_rand_obj` samples its hash table: here a random slot of the slab,
//! drawn again while it is free. The generator has a fixed seed, so a replay is reproducible
//! (libCacheSim's is not: it seeds from the clock).

use crate::slab::{Node, Slot, NIL};

/// SplitMix64: tiny, fast and good enough to pick victims.
pub(crate) struct Sampler(u64);

impl Default for Sampler {
    fn default() -> Self {
        Sampler(0x5eed_6d61_6e74_6c65)
    }
}

/// Draws of a free slot after which the sampler scans for a cached object instead (only a
/// slab left mostly empty by a large shrink gets there).
const MAX_DRAWS: u32 = 64;

impl Sampler {
    #[inline]
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A cached object's slot, uniformly at random; `NIL` if nothing is cached.
    #[inline]
    pub fn cached(&mut self, nodes: &[Node]) -> Slot {
        let n = nodes.len() as u64;
        if n == 0 {
            return NIL;
        }
        for _ in 0..MAX_DRAWS {
            // Multiply-shift maps 64 random bits onto 0..n without a division.
            let slot = ((u128::from(self.next()) * u128::from(n)) >> 64) as usize;
            if !nodes[slot].is_free() {
                return slot as Slot;
            }
        }
        let start = (self.next() % n) as usize;
        (start..nodes.len())
            .chain(0..start)
            .find(|&s| !nodes[s].is_free())
            .map_or(NIL, |s| s as Slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slab::Slab;

    #[test]
    fn samples_only_cached_objects_and_all_of_them() {
        let mut store = Slab::new();
        let mut sampler = Sampler::default();
        assert_eq!(sampler.cached(&store.nodes), NIL);
        for k in 0..100 {
            store.insert(k, 1);
        }
        for k in 0..90 {
            let slot = store.find(k).unwrap();
            store.remove(slot);
        }
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2_000 {
            let slot = sampler.cached(&store.nodes);
            let key = store.nodes[slot as usize].key;
            assert!(key >= 90, "sampled a freed slot");
            seen.insert(key);
        }
        assert_eq!(seen.len(), 10);
    }
}
