//! Ghost lists: keys (with their sizes) of objects no longer cached, in recency order, as 2Q's
//! A1out keeps them. Each entry is in exactly one of up to two lists; each list
//! knows its total in [`Units`]. Entries live in a slab of their own, so a ghost costs one node
//! and never touches the cache's index.

use super::{Units, Usage};
use crate::queue::Queue;
use crate::slab::{Slab, Slot, NIL};

pub(crate) struct Ghosts {
    store: Slab,
    lists: [Queue; 2],
    usage: [Usage; 2],
    units: Units,
}

impl Ghosts {
    pub fn new(units: Units) -> Ghosts {
        Ghosts {
            store: Slab::new(),
            lists: [Queue::default(); 2],
            usage: [Usage::default(); 2],
            units,
        }
    }

    pub fn set_units(&mut self, units: Units) {
        self.units = units;
    }

    /// Which list holds `key`, if any.
    #[inline]
    pub fn find(&self, key: u64) -> Option<(usize, Slot)> {
        self.store
            .find(key)
            .map(|slot| (self.store.nodes[slot as usize].meta() as usize, slot))
    }

    /// Forgets the entry at `slot` (from [`Ghosts::find`]).
    #[inline]
    pub fn remove(&mut self, slot: Slot) {
        let node = self.store.nodes[slot as usize];
        let list = node.meta() as usize;
        self.usage[list].sub(node.size);
        self.lists[list].unlink(&mut self.store.nodes, slot);
        self.store.remove(slot);
    }

    /// Adds `key` (absent from every list) at the head of `list`; returns the entry's slot,
    /// which stays its own until it is removed (for callers that keep more per entry).
    #[inline]
    pub fn push(&mut self, list: usize, key: u64, size: u32) -> Option<Slot> {
        let slot = self.store.insert(key, size)?;
        self.store.nodes[slot as usize].set_meta(list as u32);
        self.lists[list].push_head(&mut self.store.nodes, slot);
        self.usage[list].add(size);
        Some(slot)
    }

    /// Forgets the oldest entry of `list`; false if it is empty.
    #[inline]
    pub fn drop_oldest(&mut self, list: usize) -> bool {
        let slot = self.lists[list].tail;
        if slot == NIL {
            return false;
        }
        self.remove(slot);
        true
    }

    /// Units the entries of `list` add up to.
    #[inline]
    pub fn total(&self, list: usize) -> u64 {
        self.units.of_usage(self.usage[list])
    }

    #[cfg(test)]
    pub fn len(&self) -> u64 {
        self.store.len()
    }

    pub fn heap_bytes(&self) -> usize {
        self.store.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Capacity;

    #[test]
    fn lists_keep_order_and_totals() {
        let mut g = Ghosts::new(Units::of(Capacity::bytes(100)));
        g.push(0, 1, 10);
        g.push(0, 2, 20);
        g.push(1, 3, 30);
        assert_eq!((g.total(0), g.total(1), g.len()), (30, 30, 3));
        assert_eq!(g.find(3).map(|(l, _)| l), Some(1));
        assert!(g.drop_oldest(0));
        assert!(g.find(1).is_none(), "the oldest of list 0 went first");
        let (_, slot) = g.find(2).unwrap();
        g.remove(slot);
        assert_eq!((g.total(0), g.len()), (0, 1));
        assert!(!g.drop_oldest(0));
        g.set_units(Units::of(Capacity::objects(5)));
        assert_eq!(g.total(1), 1, "counted in objects now");
    }
}
