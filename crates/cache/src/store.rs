//! Object storage shared by every eviction algorithm: a slab of fixed-size nodes addressed by
//! `u32` slots, and a hash index from key to slot.
//!
//! Keeping all per-object state in one flat `Vec<Node>` (instead of one heap box per object)
//! bounds the metadata per object, keeps the hot path free of allocation once the slab has
//! grown to the cache's peak population (freed slots are reused through a free list), and
//! lets the algorithms link nodes into queues with 4-byte indices rather than 8-byte pointers.
//! The index stores only the slot; the key lives once, in the node.

use core::hash::BuildHasher;
use foldhash::fast::FixedState;
use hashbrown::HashTable;

/// Index of a node in the slab.
pub(crate) type Slot = u32;

/// "No node": end of a queue, empty hand, empty free list.
pub(crate) const NIL: Slot = Slot::MAX;

/// Everything the cache keeps about one object. `prev`/`next` link the node into the queue of
/// its algorithm (`prev` points towards the head, i.e. newer objects, as in libCacheSim);
/// `meta` is the algorithm's per-object state (frequency bits, visited bit, queue tag).
/// A free node keeps the free list in `next`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Node {
    pub key: u64,
    pub size: u32,
    pub prev: Slot,
    pub next: Slot,
    pub meta: u32,
}

/// Fixed seed: results must not depend on the run (replays are reproducible bit for bit).
const HASH_SEED: u64 = 0x6d61_6e74_6c65_6361;

/// Keyed slab of nodes with byte and object counters.
pub(crate) struct Store {
    pub nodes: Vec<Node>,
    free_head: Slot,
    index: HashTable<Slot>,
    hasher: FixedState,
    len: u64,
    bytes: u64,
}

impl Store {
    pub fn new() -> Store {
        Store {
            nodes: Vec::new(),
            free_head: NIL,
            index: HashTable::new(),
            hasher: FixedState::with_seed(HASH_SEED),
            len: 0,
            bytes: 0,
        }
    }

    #[inline]
    fn hash(&self, key: u64) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Objects stored.
    #[inline]
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Sum of the sizes of the objects stored.
    #[inline]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    #[inline]
    pub fn find(&self, key: u64) -> Option<Slot> {
        let nodes = &self.nodes;
        self.index
            .find(self.hash(key), |&slot| nodes[slot as usize].key == key)
            .copied()
    }

    /// Adds `key`, which must be absent. Returns `None` only when every one of the 2^32 - 1
    /// slots is taken.
    pub fn insert(&mut self, key: u64, size: u32) -> Option<Slot> {
        let node = Node {
            key,
            size,
            prev: NIL,
            next: NIL,
            meta: 0,
        };
        let slot = if self.free_head != NIL {
            let slot = self.free_head;
            self.free_head = self.nodes[slot as usize].next;
            self.nodes[slot as usize] = node;
            slot
        } else {
            if self.nodes.len() >= NIL as usize {
                return None;
            }
            if self.nodes.len() == self.nodes.capacity() {
                // Grow by an eighth (not by doubling) to bound the spare nodes; large
                // reallocations are remapped rather than copied, so this stays cheap.
                let extra = (self.nodes.len() / 8).max(64);
                self.nodes.reserve_exact(extra);
            }
            self.nodes.push(node);
            (self.nodes.len() - 1) as Slot
        };
        let hash = self.hash(key);
        let (nodes, hasher) = (&self.nodes, &self.hasher);
        self.index
            .insert_unique(hash, slot, |&s| hasher.hash_one(nodes[s as usize].key));
        self.len += 1;
        self.bytes += u64::from(size);
        Some(slot)
    }

    /// Drops the node at `slot` (already unlinked from its queue) and recycles the slot.
    pub fn remove(&mut self, slot: Slot) {
        let key = self.nodes[slot as usize].key;
        let hash = self.hash(key);
        if let Ok(entry) = self.index.find_entry(hash, |&s| s == slot) {
            entry.remove();
        } else {
            debug_assert!(false, "slot {slot} missing from the index");
            return;
        }
        let node = &mut self.nodes[slot as usize];
        self.len -= 1;
        self.bytes -= u64::from(node.size);
        node.next = self.free_head;
        node.prev = NIL;
        self.free_head = slot;
    }

    /// Changes the recorded size of a stored object.
    pub fn resize(&mut self, slot: Slot, size: u32) {
        let node = &mut self.nodes[slot as usize];
        self.bytes = self.bytes - u64::from(node.size) + u64::from(size);
        node.size = size;
    }

    /// Slots of every stored object, in no particular order.
    pub fn slots(&self) -> impl Iterator<Item = Slot> + '_ {
        self.index.iter().copied()
    }

    /// Heap bytes held by the slab and the index (what the metadata really costs).
    pub fn heap_bytes(&self) -> usize {
        self.nodes.capacity() * core::mem::size_of::<Node>() + self.index.allocation_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_find_remove_recycles_slots() {
        let mut store = Store::new();
        let a = store.insert(10, 100).unwrap();
        let b = store.insert(20, 50).unwrap();
        assert_eq!(store.find(10), Some(a));
        assert_eq!(store.find(20), Some(b));
        assert_eq!(store.find(30), None);
        assert_eq!((store.len(), store.bytes()), (2, 150));
        store.remove(a);
        assert_eq!(store.find(10), None);
        assert_eq!((store.len(), store.bytes()), (1, 50));
        let c = store.insert(30, 7).unwrap();
        assert_eq!(c, a, "freed slot is reused before the slab grows");
        assert_eq!(store.nodes.len(), 2);
        store.resize(c, 9);
        assert_eq!(store.bytes(), 59);
        let mut keys: Vec<u64> = store.slots().map(|s| store.nodes[s as usize].key).collect();
        keys.sort_unstable();
        assert_eq!(keys, vec![20, 30]);
    }

    #[test]
    fn many_keys_stay_findable() {
        let mut store = Store::new();
        for k in 0..10_000u64 {
            store.insert(k * 7919, 1).unwrap();
        }
        for k in (0..10_000u64).step_by(2) {
            let slot = store.find(k * 7919).unwrap();
            store.remove(slot);
        }
        for k in 0..10_000u64 {
            assert_eq!(store.find(k * 7919).is_some(), k % 2 == 1, "key {k}");
        }
        assert_eq!(store.len(), 5_000);
    }
}
