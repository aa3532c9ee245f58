//! LFU as libCacheSim 0.3.5's `LFU.c` runs it: every object counts its requests (1 when
//! inserted, +1 per hit); the victim is the least frequently used object, and among those the
//! one that reached that count first (each count keeps a FIFO of its objects).
//!
//! The counts live in an array indexed by slot and the per-count FIFOs in an array indexed by
//! count (grown, amortised, to the highest count seen), so a hit is two unlinks and a link.

use super::EvictionPolicy;
use crate::queue::Queue;
use crate::slab::{Node, Slot, NIL};

#[derive(Default)]
pub(crate) struct Lfu {
    /// Request count of the object in each slot.
    freq: Vec<u64>,
    /// Objects by count, oldest arrival at the tail; index 0 unused.
    lists: Vec<Queue>,
    /// Lowest count with an object (0: to be searched).
    min_freq: u64,
}

impl Lfu {
    fn list(&mut self, freq: u64) -> &mut Queue {
        let i = freq as usize;
        if i >= self.lists.len() {
            self.lists.resize(i + 1, Queue::default());
        }
        &mut self.lists[i]
    }

    /// The lowest count above `self.min_freq` with an object (libCacheSim's `update_min_freq`;
    /// unchanged when there is none).
    fn update_min_freq(&mut self) {
        let from = self.min_freq as usize + 1;
        if let Some(i) = self.lists[from.min(self.lists.len())..]
            .iter()
            .position(|q| !q.is_empty())
        {
            self.min_freq = (from + i) as u64;
        }
    }
}

impl EvictionPolicy for Lfu {
    #[inline]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        let old = self.freq[slot as usize];
        let new = old + 1;
        self.freq[slot as usize] = new;
        self.lists[old as usize].unlink(nodes, slot);
        self.list(new).push_head(nodes, slot);
        if self.min_freq == old && self.lists[old as usize].is_empty() {
            self.update_min_freq();
        }
    }

    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        let i = slot as usize;
        if i >= self.freq.len() {
            self.freq.resize(i + 1, 0);
        }
        self.freq[i] = 1;
        self.list(1).push_head(nodes, slot);
        self.min_freq = 1;
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        if self.min_freq == 0 || self.lists[self.min_freq as usize].is_empty() {
            self.min_freq = 0;
            self.update_min_freq();
        }
        let Some(list) = self.lists.get_mut(self.min_freq as usize) else {
            return NIL;
        };
        let victim = list.pop_tail(nodes);
        if list.is_empty() {
            // libCacheSim searches again at the next eviction.
            self.min_freq = 0;
        }
        victim
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        let freq = self.freq[slot as usize];
        self.lists[freq as usize].unlink(nodes, slot);
        if freq == self.min_freq && self.lists[freq as usize].is_empty() {
            self.update_min_freq();
        }
    }

    fn heap_bytes(&self) -> usize {
        self.freq.capacity() * size_of::<u64>() + self.lists.capacity() * size_of::<Queue>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Harness;
    use crate::Capacity;

    #[test]
    fn evicts_the_least_used_and_among_equals_the_first_to_get_there() {
        let capacity = Capacity::objects(3);
        let mut h = Harness::new(Lfu::default(), capacity);
        for k in [1, 2, 3, 1, 1, 3, 2] {
            h.access(k, 1);
        }
        // Counts: 1 -> 3, 3 -> 2 (reached 2 before 2 did), 2 -> 2.
        h.access(4, 1);
        assert_eq!(h.evicted, vec![3]);
        // 4 has count 1: it is next.
        h.access(5, 1);
        assert_eq!(h.evicted, vec![3, 4]);
        assert!(h.access(1, 1) && h.access(2, 1));
    }

    #[test]
    fn a_removed_last_object_at_the_minimum_moves_the_minimum_up() {
        let capacity = Capacity::objects(3);
        let mut h = Harness::new(Lfu::default(), capacity);
        for k in [1, 2, 2, 3, 3, 3] {
            h.access(k, 1);
        }
        let slot = h.store.find(1).unwrap();
        h.policy.on_remove(&mut h.store.nodes, slot);
        h.store.remove(slot);
        assert_eq!(h.policy.min_freq, 2);
        h.access(4, 1);
        h.access(5, 1);
        // 4 (count 1) goes first, then 5 is in and 2 (count 2) was not touched.
        assert_eq!(h.evicted, vec![4]);
    }
}
