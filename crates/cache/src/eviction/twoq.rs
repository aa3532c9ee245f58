//! 2Q (Johnson and Shasha, VLDB'94) as libCacheSim 0.3.5's `TwoQ.c` runs it with its defaults
//! `Ain-size-ratio=0.25, Aout-size-ratio=0.5`, sizes in bytes:
//!
//! - A1in is a FIFO of objects seen once (target `floor(0.25 c)`), Am an LRU of objects seen
//!   again after leaving A1in (`c - A1in`), A1out a FIFO of keys evicted from A1in
//!   (`floor(0.5 c)`; an entry larger than that is not kept).
//! - A hit in A1in changes nothing; a hit in Am moves the object to Am's head.
//! - A miss found in A1out drops the entry and the object enters Am, which first evicts its own
//!   oldest until the object fits Am's size; any other miss enters A1in (which may exceed its
//!   target until evictions bring it back).
//! - Making room: while A1in is over its target its oldest goes to A1out and leaves; otherwise
//!   Am's oldest leaves.
//! - Objects larger than A1in's target are never cached.

use super::ghost::Ghosts;
use super::{EvictionPolicy, Units, Usage};
use crate::queue::Queue;
use crate::slab::{Node, Slot, NIL};
use crate::Capacity;

const A_IN_SIZE_RATIO: f64 = 0.25;
const A_OUT_SIZE_RATIO: f64 = 0.5;

/// `meta`: the object is in Am (else A1in).
const IN_AM: u32 = 1;
/// The one ghost list.
const A_OUT: usize = 0;

/// Targets of the three queues, in units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sizes {
    a_in: u64,
    a_out: u64,
    am: u64,
}

impl Sizes {
    fn of(units: Units) -> Sizes {
        let a_in = units.fraction(A_IN_SIZE_RATIO);
        Sizes {
            a_in,
            a_out: units.fraction(A_OUT_SIZE_RATIO),
            am: units.total - a_in,
        }
    }
}

pub(crate) struct TwoQ {
    units: Units,
    sizes: Sizes,
    a_in: Queue,
    am: Queue,
    a_in_usage: Usage,
    am_usage: Usage,
    a_out: Ghosts,
    /// The key of the current miss was found in A1out.
    ghost_hit: Option<u64>,
    /// An `evict` now is Am making room for itself.
    evicting_am: bool,
}

impl TwoQ {
    pub fn new(capacity: Capacity) -> TwoQ {
        let units = Units::of(capacity);
        TwoQ {
            units,
            sizes: Sizes::of(units),
            a_in: Queue::default(),
            am: Queue::default(),
            a_in_usage: Usage::default(),
            am_usage: Usage::default(),
            a_out: Ghosts::new(units),
            ghost_hit: None,
            evicting_am: false,
        }
    }

    /// libCacheSim's `Aout->get`: a FIFO of its own size that keeps no entry larger than it.
    fn remember(&mut self, key: u64, size: u32) {
        let need = self.units.of_size(size);
        if need > self.sizes.a_out {
            return;
        }
        while self.a_out.total(A_OUT) + need > self.sizes.a_out && self.a_out.drop_oldest(A_OUT) {}
        self.a_out.push(A_OUT, key, size);
    }

    fn pop_am(&mut self, nodes: &mut [Node]) -> Slot {
        let slot = self.am.pop_tail(nodes);
        if slot != NIL {
            self.am_usage.sub(nodes[slot as usize].size);
        }
        slot
    }

    fn pop_a_in(&mut self, nodes: &mut [Node]) -> Slot {
        let slot = self.a_in.pop_tail(nodes);
        if slot != NIL {
            let Node { key, size, .. } = nodes[slot as usize];
            self.a_in_usage.sub(size);
            self.remember(key, size);
        }
        slot
    }
}

impl EvictionPolicy for TwoQ {
    #[inline]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        self.ghost_hit = None;
        if nodes[slot as usize].meta() & IN_AM != 0 {
            self.am.move_to_head(nodes, slot);
        }
    }

    fn on_miss(&mut self, key: u64) {
        self.ghost_hit = None;
        if let Some((_, slot)) = self.a_out.find(key) {
            self.a_out.remove(slot);
            self.ghost_hit = Some(key);
        }
    }

    fn can_admit(&self, size: u32) -> bool {
        self.units.of_size(size) <= self.sizes.a_in
    }

    fn owes_eviction_after_room(&mut self, key: u64, size: u32) -> bool {
        self.evicting_am = self.ghost_hit == Some(key)
            && !self.am.is_empty()
            && self.units.of_usage(self.am_usage) + self.units.of_size(size) > self.sizes.am;
        self.evicting_am
    }

    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        let key = nodes[slot as usize].key;
        let size = nodes[slot as usize].size;
        if self.ghost_hit.take() == Some(key) {
            nodes[slot as usize].set_meta(IN_AM);
            self.am.push_head(nodes, slot);
            self.am_usage.add(size);
        } else {
            nodes[slot as usize].set_meta(0);
            self.a_in.push_head(nodes, slot);
            self.a_in_usage.add(size);
        }
        self.evicting_am = false;
    }

    fn on_resize(&mut self, nodes: &mut [Node], slot: Slot, old_size: u32) {
        let usage = if nodes[slot as usize].meta() & IN_AM != 0 {
            &mut self.am_usage
        } else {
            &mut self.a_in_usage
        };
        usage.resize(old_size, nodes[slot as usize].size);
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        if std::mem::take(&mut self.evicting_am) {
            return self.pop_am(nodes);
        }
        if self.units.of_usage(self.a_in_usage) > self.sizes.a_in || self.am.is_empty() {
            self.pop_a_in(nodes)
        } else {
            self.pop_am(nodes)
        }
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        let size = nodes[slot as usize].size;
        if nodes[slot as usize].meta() & IN_AM != 0 {
            self.am.unlink(nodes, slot);
            self.am_usage.sub(size);
        } else {
            self.a_in.unlink(nodes, slot);
            self.a_in_usage.sub(size);
        }
    }

    fn on_capacity(&mut self, capacity: Capacity) {
        self.units = Units::of(capacity);
        self.sizes = Sizes::of(self.units);
        self.a_out.set_units(self.units);
        while self.a_out.total(A_OUT) > self.sizes.a_out && self.a_out.drop_oldest(A_OUT) {}
    }

    fn heap_bytes(&self) -> usize {
        self.a_out.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Cache};

    #[test]
    fn splits_like_libcachesim() {
        let s = Sizes::of(Units::of(Capacity::bytes(292_272)));
        assert_eq!((s.a_in, s.a_out, s.am), (73_068, 146_136, 219_204));
    }

    #[test]
    fn a_key_seen_again_after_a1in_enters_am_and_survives_a_scan() {
        // 8 objects: A1in targets 2, Am 6, A1out 4.
        let mut cache = Cache::new(Algorithm::TwoQ, Capacity::objects(8));
        for k in 0..9 {
            assert!(!cache.access(k, 1));
        }
        // 0 was evicted from A1in into A1out; asking again admits it to Am.
        assert!(!cache.contains(0));
        assert!(!cache.access(0, 1));
        // A scan of new keys passes through A1in and leaves Am alone.
        for k in 100..120 {
            cache.access(k, 1);
        }
        assert!(cache.contains(0));
        assert!(cache.access(0, 1));
    }

    #[test]
    fn objects_larger_than_a1in_are_refused() {
        let mut cache = Cache::new(Algorithm::TwoQ, Capacity::bytes(100));
        assert!(!cache.insert(1, 26));
        assert!(cache.insert(2, 25));
    }
}
