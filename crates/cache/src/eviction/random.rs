//! Random eviction, libCacheSim's `Random.c`: the victim is a cached object drawn uniformly at
//! random; hits change nothing. libCacheSim draws the newest object of a random non-empty
//! bucket of its hash table, so its draws depend on its hash function and table size as well
//! as its generator: the miss ratio agrees only statistically (see docs/cache.md).

use super::slot_set::SlotSet;
use super::EvictionPolicy;
use crate::slab::{Node, Slot, NIL};

#[derive(Default)]
pub(crate) struct Random {
    members: SlotSet,
}

impl EvictionPolicy for Random {
    #[inline]
    fn on_hit(&mut self, _nodes: &mut [Node], _slot: Slot) {}

    #[inline]
    fn on_insert(&mut self, _nodes: &mut [Node], slot: Slot) {
        self.members.insert(slot);
    }

    fn evict(&mut self, _nodes: &mut [Node]) -> Slot {
        let victim = self.members.draw();
        if victim != NIL {
            self.members.remove(victim);
        }
        victim
    }

    fn on_remove(&mut self, _nodes: &mut [Node], slot: Slot) {
        self.members.remove(slot);
    }

    fn heap_bytes(&self) -> usize {
        self.members.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Harness;
    use crate::Capacity;

    #[test]
    fn victims_are_spread_over_the_cached_objects() {
        let mut h = Harness::new(Random::default(), Capacity::objects(10));
        for k in 0..10 {
            h.access(k, 1);
        }
        // Hits protect nothing: over many misses every original object is a victim once.
        for k in 100..1_100 {
            h.access(0, 1);
            h.access(k, 1);
        }
        for k in 0..10 {
            assert!(h.evicted.contains(&k), "{k} never chosen");
        }
        assert_eq!(h.store.len(), 10);
    }
}
