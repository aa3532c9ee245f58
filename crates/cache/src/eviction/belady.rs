//! Belady's MIN (offline optimal for unit sizes), as libCacheSim 0.3.5's `Belady.c`: the
//! victim is the cached object whose next request is furthest in the future (never = last).
//! It needs each request's next access time, given by [`crate::Cache::access_with_future`]
//! (see [`crate::future`]); without it every object counts as never requested again.
//!
//! libCacheSim keeps the next access times as `double` priorities in its `pqueue.c` max-heap;
//! objects never requested again tie, and which of them leaves first depends on the heap's
//! shape. [`super::heap::Heap`] moves exactly like `pqueue.c`, so the victims are the same.

use super::heap::{Heap, Rank};
use super::EvictionPolicy;
use crate::future::NEVER;
use crate::slab::{Node, Slot};

/// A next access time compared as libCacheSim compares it: as a `double`, with "never"
/// being `INT64_MAX`.
#[derive(Clone, Copy, Debug)]
struct NextAccess(f64);

impl NextAccess {
    fn of(vtime: u64) -> Self {
        NextAccess(if vtime == NEVER {
            i64::MAX as f64
        } else {
            vtime as f64
        })
    }
}

impl Rank for NextAccess {
    fn below(&self, other: &Self) -> bool {
        self.0 < other.0
    }
}

pub(crate) struct Belady {
    heap: Heap<NextAccess>,
    /// The next access of the request being served.
    next: u64,
}

impl Default for Belady {
    fn default() -> Self {
        Belady {
            heap: Heap::new(NextAccess(0.0)),
            next: NEVER,
        }
    }
}

impl EvictionPolicy for Belady {
    fn on_future(&mut self, next_access: u64) {
        self.next = next_access;
    }

    fn on_hit(&mut self, _nodes: &mut [Node], slot: Slot) {
        self.heap.change(slot, NextAccess::of(self.next));
    }

    fn on_insert(&mut self, _nodes: &mut [Node], slot: Slot) {
        self.heap.push(slot, NextAccess::of(self.next));
    }

    fn evict(&mut self, _nodes: &mut [Node]) -> Slot {
        self.heap.pop()
    }

    fn on_remove(&mut self, _nodes: &mut [Node], slot: Slot) {
        self.heap.remove(slot);
    }

    fn heap_bytes(&self) -> usize {
        self.heap.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use crate::future::next_accesses;
    use crate::{Algorithm, Cache, Capacity};

    #[test]
    fn evicts_the_object_needed_furthest_in_the_future() {
        let keys = [1, 2, 3, 1, 4, 2, 1, 3];
        let next = next_accesses(keys.iter().copied());
        let mut c = Cache::new(Algorithm::Belady, Capacity::objects(3));
        let hits: Vec<bool> = keys
            .iter()
            .zip(&next)
            .map(|(&k, &n)| c.access_with_future(k, 1, n))
            .collect();
        // At 4 the cache holds 1 (next at 7), 2 (at 6), 3 (at 8): 3 goes.
        assert_eq!(hits, [false, false, false, true, false, true, true, false]);
    }

    #[test]
    fn beats_lru_on_a_loop_one_larger_than_the_cache() {
        let keys: Vec<u64> = (0..40).map(|i| i % 5).collect();
        let next = next_accesses(keys.iter().copied());
        let mut opt = Cache::new(Algorithm::Belady, Capacity::objects(4));
        let mut lru = Cache::new(Algorithm::Lru, Capacity::objects(4));
        let mut opt_hits = 0;
        let mut lru_hits = 0;
        for (&k, &n) in keys.iter().zip(&next) {
            opt_hits += u32::from(opt.access_with_future(k, 1, n));
            lru_hits += u32::from(lru.access(k, 1));
        }
        assert_eq!(lru_hits, 0, "a loop one larger than LRU always misses");
        assert!(opt_hits >= 25, "{opt_hits}");
    }
}
