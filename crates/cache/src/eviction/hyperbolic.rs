//! Hyperbolic caching (Blankstein et al., ATC'17) as libCacheSim 0.3.5's `Hyperbolic.c` runs
//! it with its default of 64 samples: an object's priority is its request count divided by
//! the requests since it was inserted; eviction draws 64 cached objects at random (with
//! replacement) and evicts the one of lowest priority (the first drawn among equals).
//! libCacheSim draws with its own clock-seeded generator, so the miss ratio agrees only
//! statistically (see docs/cache.md).

use super::sample::Members;
use super::EvictionPolicy;
use crate::slab::{Node, Slot, NIL};

const N_SAMPLE: usize = 64;

#[derive(Default)]
pub(crate) struct Hyperbolic {
    members: Members,
    /// Requests seen (libCacheSim's `n_req`).
    now: u64,
    /// Request count and insertion time of the object in each slot.
    freq: Vec<u32>,
    since: Vec<u64>,
}

impl Hyperbolic {
    fn priority(&self, slot: Slot) -> f64 {
        let age = (self.now - self.since[slot as usize]) as f64;
        1.0e8 * f64::from(self.freq[slot as usize]) / age
    }
}

impl EvictionPolicy for Hyperbolic {
    #[inline]
    fn on_hit(&mut self, _nodes: &mut [Node], slot: Slot) {
        self.now += 1;
        let freq = &mut self.freq[slot as usize];
        *freq = freq.saturating_add(1);
    }

    #[inline]
    fn on_miss(&mut self, _key: u64) {
        self.now += 1;
    }

    fn on_insert(&mut self, _nodes: &mut [Node], slot: Slot) {
        let i = slot as usize;
        if i >= self.freq.len() {
            self.freq.resize(i + 1, 0);
            self.since.resize(i + 1, 0);
        }
        self.freq[i] = 1;
        self.since[i] = self.now;
        self.members.add(slot);
    }

    fn evict(&mut self, _nodes: &mut [Node]) -> Slot {
        let mut best = NIL;
        // libCacheSim starts from 1e16 and keeps a strictly lower score.
        let mut best_priority = 1.0e16;
        for _ in 0..N_SAMPLE {
            let slot = self.members.draw();
            if slot == NIL {
                return NIL;
            }
            let priority = self.priority(slot);
            if priority < best_priority {
                best = slot;
                best_priority = priority;
            }
        }
        if best == NIL {
            // Every draw was inserted this very request (infinite priority).
            best = self.members.draw();
        }
        self.members.remove(best);
        best
    }

    fn on_remove(&mut self, _nodes: &mut [Node], slot: Slot) {
        self.members.remove(slot);
    }

    fn heap_bytes(&self) -> usize {
        self.freq.capacity() * size_of::<u32>()
            + self.since.capacity() * size_of::<u64>()
            + self.members.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Harness;
    use crate::Capacity;

    #[test]
    fn the_victim_has_the_lowest_sampled_rate() {
        // Two objects: 64 draws see both; 1 was requested 5 times, 2 once over the same age.
        let mut h = Harness::new(Hyperbolic::default(), Capacity::objects(2));
        h.access(1, 1);
        h.access(2, 1);
        for _ in 0..4 {
            assert!(h.access(1, 1));
        }
        h.access(3, 1);
        assert_eq!(h.evicted, vec![2]);
        // Now 3 (1 request, age 1) against 1 (5 requests, age 7): 1e8/1 > 5e8/7, so 1 goes.
        h.access(4, 1);
        h.access(4, 1);
        assert_eq!(h.evicted, vec![2, 1]);
    }
}
