//! libCacheSim 0.3.5's `ClockPro.c` as its Python package runs it (`libcachesim.ClockPro`
//! with its defaults, `init_ref=0`, `init_ratio_cold=0.5`), kept exact so that results can
//! be compared with libCacheSim's; the published algorithm is [`super::clockpro`].
//!
//! What that code decides, followed through libCacheSim's request flow (`cache_get_base`):
//!
//! - Every inserted object starts cold, and `can_insert` refuses an object unless the cold
//!   objects plus it fit in `mem_cold_max = (int64_t)(cache_size * init_ratio_cold)`, half
//!   the cache.
//! - An object becomes hot only in `promote`, which only HAND_cold (`run_cold`) and the
//!   insertion of a key with a TEST entry reach; TEST entries are made only by `run_cold`;
//!   `run_cold` runs only from `evict`, which `cache_get_base` calls only while the occupied
//!   size plus the new object exceeds the cache.
//! - The occupied size is then the cold objects' size, at most `mem_cold_max`, and an object
//!   that passed `can_insert` fits beside them (`mem_cold + size <= mem_cold_max <=
//!   cache_size`): `evict` is never called, nothing becomes hot, no TEST entry exists.
//!
//! So the cache takes objects in order of their first miss while they fit in half of it and
//! then refuses every other object for ever: none is evicted and hits change nothing that
//! is ever read (the reference bit only matters to the hands, which never move). This is
//! what libCacheSim 0.3.5 computes (its miss counts are reproduced exactly on the shared
//! traces, `tests/libcachesim_agreement.rs`), not the CLOCK-Pro of the paper.
//!
//! libCacheSim's cache never shrinks; Mantle's may (`set_capacity`, a policy's cut): then
//! the target follows the new size and the oldest admitted objects go first, in the order
//! HAND_cold would have met them (it starts at the first object inserted).

use super::{EvictionPolicy, Units, Usage};
use crate::queue::Queue;
use crate::slab::{Node, Slot, NIL};
use crate::Capacity;

/// libCacheSim's Python default `init_ratio_cold`: the cold objects' share of the cache.
const INIT_RATIO_COLD: f64 = 0.5;

pub(crate) struct ClockProLibCacheSim {
    units: Units,
    /// The admitted objects, newest at the head.
    queue: Queue,
    /// libCacheSim's `mem_cold` in both measures.
    cold: Usage,
    /// libCacheSim's `mem_cold_max`, in units.
    cold_max: u64,
}

impl ClockProLibCacheSim {
    pub fn new(capacity: Capacity) -> ClockProLibCacheSim {
        let units = Units::of(capacity);
        ClockProLibCacheSim {
            units,
            queue: Queue::default(),
            cold: Usage::default(),
            cold_max: units.fraction(INIT_RATIO_COLD),
        }
    }
}

impl EvictionPolicy for ClockProLibCacheSim {
    #[inline]
    fn on_hit(&mut self, _nodes: &mut [Node], _slot: Slot) {}

    #[inline]
    fn can_admit(&self, size: u32) -> bool {
        self.units.of_usage(self.cold) + self.units.of_size(size) <= self.cold_max
    }

    /// A rewrite of a cached object (a hit to libCacheSim, which keeps it) counts it once.
    fn can_resize(&self, old: u32, new: u32) -> bool {
        self.units.of_usage(self.cold) - self.units.of_size(old) + self.units.of_size(new)
            <= self.cold_max
    }

    #[inline]
    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        self.cold.add(nodes[slot as usize].size);
        self.queue.push_head(nodes, slot);
    }

    fn on_resize(&mut self, nodes: &mut [Node], slot: Slot, old_size: u32) {
        self.cold.resize(old_size, nodes[slot as usize].size);
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        let victim = self.queue.pop_tail(nodes);
        if victim != NIL {
            self.cold.sub(nodes[victim as usize].size);
        }
        victim
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        self.cold.sub(nodes[slot as usize].size);
        self.queue.unlink(nodes, slot);
    }

    fn on_capacity(&mut self, capacity: Capacity) {
        self.units = Units::of(capacity);
        self.cold_max = self.units.fraction(INIT_RATIO_COLD);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Harness;

    fn harness(capacity: Capacity) -> Harness<ClockProLibCacheSim> {
        Harness::new(ClockProLibCacheSim::new(capacity), capacity)
    }

    /// The sequences libCacheSim 0.3.5's `ClockPro(3)` was run on (objects of size 1): it
    /// holds `floor(3 * 0.5) = 1` object, the first, and refuses the rest.
    #[test]
    fn keeps_the_first_half_cache_as_libcachesim() {
        for (keys, expected) in [
            (
                &[1, 2, 3, 1, 4, 5, 6, 1, 2, 3, 7, 8, 1][..],
                "mmmHmmmHmmmmH",
            ),
            (
                &[1, 1, 2, 3, 4, 5, 1, 1, 1, 6, 7, 1, 1][..],
                "mHmmmmHHHmmHH",
            ),
        ] {
            let mut h = harness(Capacity::objects(3));
            let got: String = keys
                .iter()
                .map(|&k| if h.access(k, 1) { 'H' } else { 'm' })
                .collect();
            assert_eq!(got, expected);
            assert_eq!(h.store.len(), 1);
            assert!(h.evicted.is_empty());
        }
    }

    #[test]
    fn bytes_fill_half_skipping_what_does_not_fit() {
        let mut h = harness(Capacity::bytes(101));
        // Half of 101 is 50: 30 fits, 25 does not beside it, 20 does.
        assert!(!h.access(1, 30));
        assert!(!h.access(2, 25));
        assert!(!h.access(3, 20));
        assert!(!h.access(4, 1));
        assert!(h.access(1, 30));
        assert!(!h.access(2, 25));
        assert!(h.access(3, 20));
        assert_eq!(h.store.bytes(), 50);
        assert!(h.evicted.is_empty());
    }

    #[test]
    fn a_rewrite_counts_the_object_once() {
        let mut h = harness(Capacity::bytes(100));
        assert!(!h.access(1, 30));
        assert!(!h.access(2, 20));
        // Cold is full (50 of 50): nothing new enters, but the cached objects may be
        // rewritten at a size that still fits.
        assert!(!h.policy.can_admit(1));
        assert!(h.policy.can_resize(30, 30));
        assert!(h.policy.can_resize(30, 25));
        assert!(!h.policy.can_resize(30, 31));
    }

    #[test]
    fn a_cut_evicts_the_oldest_and_lowers_the_target() {
        let mut h = harness(Capacity::objects(8));
        for k in 0..6 {
            h.access(k, 1);
        }
        assert_eq!(h.store.len(), 4);
        h.policy.on_capacity(Capacity::objects(4));
        h.capacity = Capacity::objects(4);
        let first = h.policy.evict(&mut h.store.nodes);
        assert_eq!(h.store.nodes[first as usize].key, 0);
        h.store.release(first);
        let second = h.policy.evict(&mut h.store.nodes);
        assert_eq!(h.store.nodes[second as usize].key, 1);
        h.store.release(second);
        // Two cold objects fill half of 4: a new key is refused until one leaves.
        assert!(!h.access(9, 1));
        assert!(!h.access(9, 1));
        let slot = h.store.find(2).unwrap();
        h.policy.on_remove(&mut h.store.nodes, slot);
        h.store.release(slot);
        assert!(!h.access(9, 1));
        assert!(h.access(9, 1));
    }
}
