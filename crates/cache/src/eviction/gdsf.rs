//! GDSF, Greedy-Dual-Size-Frequency (Cherkasova, 1998), as libCacheSim 0.3.5's `GDSF.cpp`:
//! an object's priority is `L + freq * 1e6 / size`, where `L` is the priority of the last
//! object evicted and `freq` counts its requests since it was inserted (1 on insertion). The
//! victim is the lowest priority; among equal priorities, the one whose priority was set
//! longest ago (libCacheSim orders its `std::set` by `(priority, request time)`).
//!
//! A resize keeps the priority (libCacheSim: "this does not consider object size change").

use super::heap::{Heap, Rank};
use super::EvictionPolicy;
use crate::slab::{Node, Slot, NIL};

/// libCacheSim's scale, so that priorities of byte-sized objects are not tiny.
const SCALE: f64 = 1.0e6;

#[derive(Clone, Copy, Debug)]
struct Priority {
    value: f64,
    /// When `value` was set: breaks ties first-set-first-out.
    stamp: u64,
}

impl Rank for Priority {
    /// The heap keeps the highest on top; GDSF wants the lowest, so "below" is reversed.
    fn below(&self, other: &Self) -> bool {
        (self.value, self.stamp) > (other.value, other.stamp)
    }
}

pub(crate) struct Gdsf {
    heap: Heap<Priority>,
    /// Requests per slot since insertion.
    freq: Vec<u64>,
    /// Priority of the last victim (GDSF's inflation value `L`).
    last_evicted: f64,
    stamp: u64,
}

impl Default for Gdsf {
    fn default() -> Self {
        Gdsf {
            heap: Heap::new(Priority {
                value: 0.0,
                stamp: 0,
            }),
            freq: Vec::new(),
            last_evicted: 0.0,
            stamp: 0,
        }
    }
}

impl Gdsf {
    fn priority(&mut self, freq: u64, size: u32) -> Priority {
        self.stamp += 1;
        Priority {
            value: self.last_evicted + freq as f64 * SCALE / f64::from(size),
            stamp: self.stamp,
        }
    }
}

impl EvictionPolicy for Gdsf {
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        let freq = &mut self.freq[slot as usize];
        *freq += 1;
        let freq = *freq;
        let rank = self.priority(freq, nodes[slot as usize].size);
        self.heap.change(slot, rank);
    }

    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        if self.freq.len() <= slot as usize {
            self.freq.resize(slot as usize + 1, 0);
        }
        self.freq[slot as usize] = 1;
        let rank = self.priority(1, nodes[slot as usize].size);
        self.heap.push(slot, rank);
    }

    fn evict(&mut self, _nodes: &mut [Node]) -> Slot {
        let victim = self.heap.peek();
        if victim != NIL {
            self.last_evicted = self.heap.rank_of(victim).value;
            self.heap.pop();
        }
        victim
    }

    fn on_remove(&mut self, _nodes: &mut [Node], slot: Slot) {
        self.heap.remove(slot);
    }

    fn heap_bytes(&self) -> usize {
        self.heap.heap_bytes() + self.freq.capacity() * std::mem::size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use crate::{Algorithm, Cache, Capacity};

    #[test]
    fn small_frequent_objects_outlive_large_rare_ones() {
        let mut c = Cache::new(Algorithm::Gdsf, Capacity::bytes(100));
        c.access(1, 50); // priority 1e6/50 = 20000
        c.access(2, 10); // 100000
        c.access(2, 10); // 200000
        c.access(3, 40); // 25000: full (100 bytes)
        let mut victims = Vec::new();
        c.insert_with(4, 30, |k, _| victims.push(k));
        assert_eq!(victims, [1], "lowest priority: the large object seen once");
        // L is now 20000: the newcomer ranks 20000 + 1e6/30 above object 3 (25000).
        victims.clear();
        c.insert_with(5, 30, |k, _| victims.push(k));
        assert_eq!(victims, [3]);
    }

    #[test]
    fn equal_priorities_leave_oldest_first() {
        let mut c = Cache::new(Algorithm::Gdsf, Capacity::objects(3));
        for k in 1..=3 {
            c.access(k, 10);
        }
        let mut victims = Vec::new();
        c.insert_with(4, 10, |k, _| victims.push(k));
        c.remove(3);
        c.insert_with(5, 10, |k, _| victims.push(k));
        c.insert_with(6, 10, |k, _| victims.push(k));
        assert_eq!(victims, [1, 2]);
    }
}
