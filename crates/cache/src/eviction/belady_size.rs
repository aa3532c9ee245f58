//! BeladySize, libCacheSim 0.3.5's `BeladySize.c` with its default `n-sample=128`: samples
//! 128 cached objects (with replacement) and evicts the one with the largest
//! `size * (next access - now)`, the first sampled on a tie. An object never requested again
//! is not cached at all: it is refused on a miss (after the evictions that made room, as in
//! libCacheSim) and dropped on a hit ([`crate::Cache::access_with_future`] does that).
//!
//! libCacheSim samples through its hash table's random bucket walk and RNG, which cannot be
//! reproduced; this file samples uniformly among the cached objects with its own seeded RNG,
//! so runs are reproducible but only statistically equal to libCacheSim's (docs/cache.md).

use super::EvictionPolicy;
use crate::future::NEVER;
use crate::slab::{Node, Slot, NIL};

const SAMPLES: u32 = 128;

pub(crate) struct BeladySize {
    /// Next access per slot (1-based request index).
    next_of: Vec<u64>,
    /// The next access of the request being served.
    next: u64,
    /// Requests served (libCacheSim's `n_req`, 1-based like the next access times).
    now: u64,
    cached: u64,
    rng: u64,
}

impl Default for BeladySize {
    fn default() -> Self {
        BeladySize {
            next_of: Vec::new(),
            next: NEVER,
            now: 0,
            cached: 0,
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }
}

impl BeladySize {
    /// splitmix64: cheap, and the same sequence on every run.
    fn random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn sample(&mut self, nodes: &[Node]) -> Slot {
        loop {
            let slot = (self.random() % nodes.len() as u64) as usize;
            if !nodes[slot].is_free() {
                return slot as Slot;
            }
        }
    }
}

impl EvictionPolicy for BeladySize {
    fn on_future(&mut self, next_access: u64) {
        self.next = next_access;
        self.now += 1;
    }

    fn on_hit(&mut self, _nodes: &mut [Node], slot: Slot) {
        self.next_of[slot as usize] = self.next;
    }

    fn admit_after_evictions(&mut self, _key: u64, _size: u32) -> bool {
        self.next != NEVER
    }

    fn on_insert(&mut self, _nodes: &mut [Node], slot: Slot) {
        if self.next_of.len() <= slot as usize {
            self.next_of.resize(slot as usize + 1, NEVER);
        }
        self.next_of[slot as usize] = self.next;
        self.cached += 1;
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        if self.cached == 0 {
            return NIL;
        }
        let mut victim = NIL;
        let mut worst = i64::MIN;
        for _ in 0..SAMPLES {
            let slot = self.sample(nodes);
            let size = i64::from(nodes[slot as usize].size);
            let distance =
                self.next_of[slot as usize].min(i64::MAX as u64) as i64 - self.now as i64;
            let score = size.saturating_mul(distance);
            if score > worst {
                victim = slot;
                worst = score;
            }
        }
        self.cached -= 1;
        victim
    }

    fn on_remove(&mut self, _nodes: &mut [Node], _slot: Slot) {
        self.cached -= 1;
    }

    fn heap_bytes(&self) -> usize {
        self.next_of.capacity() * std::mem::size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use crate::future::next_accesses;
    use crate::{Algorithm, Cache, Capacity};

    #[test]
    fn objects_never_requested_again_are_not_kept() {
        let keys = [1, 2, 1, 3];
        let next = next_accesses(keys.iter().copied());
        let mut c = Cache::new(Algorithm::BeladySize, Capacity::bytes(100));
        for (&k, &n) in keys.iter().zip(&next) {
            c.access_with_future(k, 10, n);
        }
        assert!(!c.contains(2) && !c.contains(3), "never requested again");
        assert!(!c.contains(1), "dropped on its last hit");
        assert_eq!((c.len(), c.evictions()), (0, 0));
    }

    #[test]
    fn prefers_to_evict_large_objects_needed_late() {
        // 1 (50 B) is next needed at request 5, 2 (10 B) at request 4; 3 (never again)
        // makes room (1 scores 50 * 2, 2 scores 10 * 1) and is then refused.
        let keys = [1, 2, 3, 2, 1];
        let sizes = [50, 10, 20, 10, 50];
        let next = next_accesses(keys.iter().copied());
        let mut c = Cache::new(Algorithm::BeladySize, Capacity::bytes(70));
        for i in 0..3 {
            c.access_with_future(keys[i], sizes[i], next[i]);
        }
        assert!(c.contains(2) && !c.contains(1) && !c.contains(3));
        assert_eq!(c.evictions(), 1);
    }
}
