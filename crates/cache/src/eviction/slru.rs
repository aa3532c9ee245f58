//! Segmented LRU as libCacheSim 0.3.5's `SLRU.c` runs it with its default of four segments,
//! each `floor(c / 4)` in bytes:
//!
//! - A new object enters the lowest segment it fits in (below its limit with the object
//!   added), or segment 0 when none has room.
//! - A hit in the top segment moves the object to its head; a hit elsewhere promotes it to
//!   the head of the next segment, which, while over its limit, demotes its oldest object to
//!   the head of the segment below ("cooling", cascading down); segment 0 over its limit
//!   evicts.
//! - The victim is the oldest object of the lowest non-empty segment.
//! - Objects larger than one segment are never cached.
//!
//! A hit can therefore evict, which the cache's lookup (it reports victims only from inserts,
//! evictions and capacity changes) cannot do: such a victim leaves SLRU's segments at once
//! and waits, still stored, in a "leaving" list that the next insert evicts first, so SLRU's
//! decisions stay exactly libCacheSim's. Until then a lookup of it is a hit here where
//! libCacheSim misses; the object is then treated as newly inserted.

use super::{EvictionPolicy, Units, Usage};
use crate::queue::Queue;
use crate::slab::{Node, Slot, NIL};
use crate::Capacity;

const SEGMENTS: usize = 4;
/// `meta` of an object evicted by a hit and not yet taken out of the cache.
const LEAVING: u32 = SEGMENTS as u32;

pub(crate) struct Slru {
    units: Units,
    /// Each segment's limit in units.
    limit: u64,
    segments: [Queue; SEGMENTS],
    usage: [Usage; SEGMENTS],
    leaving: Queue,
}

impl Slru {
    pub fn new(capacity: Capacity) -> Slru {
        let units = Units::of(capacity);
        Slru {
            units,
            limit: units.total / SEGMENTS as u64,
            segments: [Queue::default(); SEGMENTS],
            usage: [Usage::default(); SEGMENTS],
            leaving: Queue::default(),
        }
    }

    fn units_in(&self, segment: usize) -> u64 {
        self.units.of_usage(self.usage[segment])
    }

    fn link(&mut self, nodes: &mut [Node], slot: Slot, segment: usize) {
        nodes[slot as usize].set_meta(segment as u32);
        self.usage[segment].add(nodes[slot as usize].size);
        self.segments[segment].push_head(nodes, slot);
    }

    fn unlink(&mut self, nodes: &mut [Node], slot: Slot) {
        let meta = nodes[slot as usize].meta();
        if meta == LEAVING {
            self.leaving.unlink(nodes, slot);
        } else {
            self.usage[meta as usize].sub(nodes[slot as usize].size);
            self.segments[meta as usize].unlink(nodes, slot);
        }
    }

    /// The oldest object of the lowest non-empty segment, unlinked; `NIL` if all are empty.
    fn pop_victim(&mut self, nodes: &mut [Node]) -> Slot {
        for segment in 0..SEGMENTS {
            let slot = self.segments[segment].pop_tail(nodes);
            if slot != NIL {
                self.usage[segment].sub(nodes[slot as usize].size);
                return slot;
            }
        }
        NIL
    }

    /// libCacheSim's `SLRU_cool`: `segment` is over its limit.
    fn cool(&mut self, nodes: &mut [Node], segment: usize) {
        if segment == 0 {
            let victim = self.pop_victim(nodes);
            if victim != NIL {
                nodes[victim as usize].set_meta(LEAVING);
                self.leaving.push_head(nodes, victim);
            }
            return;
        }
        let slot = self.segments[segment].pop_tail(nodes);
        if slot == NIL {
            return;
        }
        self.usage[segment].sub(nodes[slot as usize].size);
        self.link(nodes, slot, segment - 1);
        while self.units_in(segment - 1) > self.limit {
            self.cool(nodes, segment - 1);
        }
    }

    fn insert(&mut self, nodes: &mut [Node], slot: Slot) {
        let need = self.units.of_size(nodes[slot as usize].size);
        let segment = (0..SEGMENTS)
            .find(|&s| self.units_in(s) + need <= self.limit)
            .unwrap_or(0);
        self.link(nodes, slot, segment);
    }
}

impl EvictionPolicy for Slru {
    #[inline]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        let meta = nodes[slot as usize].meta();
        if meta == LEAVING {
            self.leaving.unlink(nodes, slot);
            self.insert(nodes, slot);
            return;
        }
        let segment = meta as usize;
        if segment == SEGMENTS - 1 {
            self.segments[segment].move_to_head(nodes, slot);
            return;
        }
        self.unlink(nodes, slot);
        self.link(nodes, slot, segment + 1);
        while self.units_in(segment + 1) > self.limit {
            self.cool(nodes, segment + 1);
        }
    }

    fn can_admit(&self, size: u32) -> bool {
        self.units.of_size(size) <= self.limit
    }

    fn owes_eviction(&mut self, _nodes: &mut [Node], _key: u64, _size: u32) -> bool {
        !self.leaving.is_empty()
    }

    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        self.insert(nodes, slot);
    }

    fn on_resize(&mut self, nodes: &mut [Node], slot: Slot, old_size: u32) {
        let meta = nodes[slot as usize].meta();
        if meta != LEAVING {
            self.usage[meta as usize].resize(old_size, nodes[slot as usize].size);
        }
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        let leaving = self.leaving.pop_tail(nodes);
        if leaving != NIL {
            return leaving;
        }
        self.pop_victim(nodes)
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        self.unlink(nodes, slot);
    }

    fn on_capacity(&mut self, capacity: Capacity) {
        self.units = Units::of(capacity);
        self.limit = self.units.total / SEGMENTS as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Harness;

    fn slru(objects: u64) -> Harness<Slru> {
        Harness::new(
            Slru::new(Capacity::objects(objects)),
            Capacity::objects(objects),
        )
    }

    fn segments(h: &Harness<Slru>, keys: &[u64]) -> Vec<u32> {
        keys.iter().map(|&k| h.meta(k)).collect()
    }

    #[test]
    fn new_objects_fill_the_lowest_segment_with_room_and_hits_promote() {
        // 8 objects: 2 per segment.
        let mut h = slru(8);
        for k in 0..5 {
            h.access(k, 1);
        }
        assert_eq!(segments(&h, &[0, 1, 2, 3, 4]), vec![0, 0, 1, 1, 2]);
        // A hit on 0 promotes it to segment 1, which is then over its limit: its oldest (2)
        // cools down to the head of segment 0.
        assert!(h.access(0, 1));
        assert_eq!(segments(&h, &[0, 1, 2, 3]), vec![1, 0, 0, 1]);
        // The victim is segment 0's oldest: 1.
        for k in 10..14 {
            h.access(k, 1);
        }
        assert_eq!(h.evicted.first(), Some(&1));
    }

    #[test]
    fn a_hit_that_overfills_segment_0_evicts_at_the_next_insert() {
        // 400 bytes: 100 per segment.
        let capacity = Capacity::bytes(400);
        let mut h = Harness::new(Slru::new(capacity), capacity);
        // Segment 0 = {1 (10 B), 2 (90 B)}, segment 1 = {3 (60 B), 4 (40 B)}.
        for (k, size) in [(1, 10), (2, 90), (3, 60), (4, 40)] {
            h.access(k, size);
        }
        assert_eq!(segments(&h, &[1, 2, 3, 4]), vec![0, 0, 1, 1]);
        // A hit on 1 moves it up; segment 1 (110 B) cools 3 into segment 0, which at 150 B
        // evicts its oldest, 2: libCacheSim evicts here, during the hit.
        assert!(h.access(1, 10));
        assert_eq!(h.meta(2), LEAVING);
        assert!(h.evicted.is_empty(), "a hit evicts nothing by itself");
        assert!(!h.access(100, 10));
        assert_eq!(h.evicted, vec![2], "the next insert takes it out first");
        assert_eq!(segments(&h, &[1, 3, 4, 100]), vec![1, 0, 1, 0]);
    }

    #[test]
    fn objects_larger_than_a_segment_are_refused() {
        let s = Slru::new(Capacity::bytes(100));
        assert!(!s.can_admit(26));
        assert!(s.can_admit(25));
    }
}
