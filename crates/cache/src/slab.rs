//! Object storage shared by every eviction algorithm: a slab of fixed-size nodes addressed by
//! `u32` slots, with an intrusive chained hash index from key to slot.
//!
//! Keeping all per-object state in one flat `Vec<Node>` (instead of one heap box per object)
//! bounds the metadata per object, keeps the hot path free of allocation once the slab has
//! grown to the cache's peak population (freed slots are reused through a free list), and
//! lets the algorithms link nodes into queues with 4-byte indices rather than 8-byte pointers.
//!
//! The index is chained, like libCacheSim's own hash table: a power-of-two array of 4-byte
//! bucket heads, and a 4-byte "next in bucket" link inside each node. Deleting unlinks the
//! node, so a cache that evicts and inserts forever never accumulates tombstones; the bucket
//! array grows (doubling) only when the population exceeds it, which keeps the index at 4 to
//! 8 bytes per object. An open-addressing table (hashbrown) needs a 5-byte bucket per
//! object at a load factor that, under constant churn, settles between 7/32 and 7/16, i.e. up
//! to 23 bytes per object: too much for the 32-byte budget (see `docs/cache.md`).
//!
//! A node may also be a *ghost*: the key and size of an object its algorithm evicted but still
//! remembers (ARC's B1/B2, CLOCK-Pro's non-resident cold keys), kept in the same index as
//! the cached objects so that a miss finds it with the lookup it makes anyway, as in
//! libCacheSim's one hash table. A ghost is not cached: lookups report it as absent to every caller but the cache's miss path, and `len`
//! and `bytes` leave it out.

use core::hash::BuildHasher;
use foldhash::fast::FixedState;

/// Index of a node in the slab.
pub(crate) type Slot = u32;

/// "No node": end of a queue, empty hand, empty free list.
pub(crate) const NIL: Slot = Slot::MAX;

/// `prev` of a node on the free list: never a slot (slots stay below `MAX_OBJECTS`) and never
/// `NIL`, so a node can tell whether it is in use without consulting the index.
const FREED: Slot = NIL - 1;

/// Bits of `Node::chain` that hold the next slot in the bucket; the bit above marks a node
/// that holds no cached object ([`VACANT`]), the 3 bits above that hold the eviction
/// algorithm's per-object state.
const CHAIN_BITS: u32 = 28;
const CHAIN_MASK: u32 = (1 << CHAIN_BITS) - 1;
/// End of a bucket chain (the largest 28-bit value).
const CHAIN_END: u32 = CHAIN_MASK;
/// Set on ghost and free nodes: one test tells a lookup whether a node holds an object.
const VACANT: u32 = 1 << CHAIN_BITS;
/// Where the algorithm's `meta` bits start.
const META_SHIFT: u32 = CHAIN_BITS + 1;

/// Objects the slab can hold at once: every slot must fit in 28 bits and differ from the
/// chain end marker.
pub(crate) const MAX_OBJECTS: usize = CHAIN_END as usize;

/// Largest value an algorithm can keep in a node's `meta` bits.
pub(crate) const META_MAX: u32 = (1 << (32 - META_SHIFT)) - 1;

/// Everything the cache keeps about one object. `prev`/`next` link the node into the queue of
/// its algorithm (`prev` points towards the head, i.e. newer objects, as in libCacheSim);
/// `chain` links it into its index bucket, marks a ghost or free node and carries 3 bits of
/// algorithm state (`meta`). A free node keeps the free list in `next`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Node {
    pub key: u64,
    pub size: u32,
    pub prev: Slot,
    pub next: Slot,
    chain: u32,
}

impl Node {
    /// A node in no queue and no bucket (for tests of the queue code).
    #[cfg(test)]
    pub fn detached(key: u64, size: u32) -> Node {
        Node {
            key,
            size,
            prev: NIL,
            next: NIL,
            chain: CHAIN_END,
        }
    }

    /// The eviction algorithm's per-object state (0..=`META_MAX`).
    #[inline]
    pub fn meta(&self) -> u32 {
        self.chain >> META_SHIFT
    }

    /// Sets the algorithm's state; bits above `META_MAX` are shifted out, so they can never
    /// turn a node into a ghost.
    #[inline]
    pub fn set_meta(&mut self, meta: u32) {
        debug_assert!(meta <= META_MAX);
        self.chain = (self.chain & (CHAIN_MASK | VACANT)) | (meta << META_SHIFT);
    }

    /// Whether this node is on the free list (holds no object).
    #[inline]
    pub fn is_free(&self) -> bool {
        self.prev == FREED
    }

    /// Whether this node holds a cached object (neither a ghost nor free).
    #[inline]
    pub fn holds_object(&self) -> bool {
        self.chain & VACANT == 0
    }

    /// Whether this node is a ghost (see [`Node::bury`]).
    #[inline]
    pub fn is_ghost(&self) -> bool {
        !self.holds_object() && !self.is_free()
    }

    /// Turns the victim an algorithm is about to return from `evict` into a ghost: the node
    /// keeps its key, size, links and `meta` and stays in the index; [`Slab::release`] then
    /// keeps it instead of freeing it. The algorithm owns it until it calls
    /// [`Slab::forget`].
    #[inline]
    pub fn bury(&mut self) {
        self.chain |= VACANT;
    }

    #[inline]
    fn chain_next(&self) -> u32 {
        self.chain & CHAIN_MASK
    }

    #[inline]
    fn set_chain_next(&mut self, next: u32) {
        self.chain = (self.chain & !CHAIN_MASK) | next;
    }
}

/// Fixed seed: results must not depend on the run (replays are reproducible bit for bit).
const HASH_SEED: u64 = 0x6d61_6e74_6c65_6361;

/// Most nodes [`Slab::reserve`] sizes the index for: 2^17 (a 512 KiB bucket array with the
/// fast packing, within a core's L2).
pub(crate) const PRESIZED_INDEX_MAX: usize = 1 << 17;

/// Smallest bucket array.
const MIN_BUCKETS: usize = 16;

/// How tightly a slab packs its index and its spare nodes: a trade of bytes per object
/// against nodes read per lookup (`docs/cache.md`, "Memory").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Packing {
    /// 1 to 2 objects per bucket (4 to 8 index bytes per object, 1 to 1.5 nodes read by a
    /// hit), nodes grown by an eighth: the replay cache's speed.
    #[default]
    Fast,
    /// 2 to 4 objects per bucket (1 to 2 index bytes per object, 2 to 3 nodes read by a hit),
    /// nodes grown by a sixteenth: for a host whose own per-object bytes (the server's entry
    /// pointer and header) leave the cache less room.
    Dense,
}

impl Packing {
    /// Objects per bucket at which the index doubles, as a power of two.
    pub const fn load_shift(self) -> u32 {
        match self {
            Packing::Fast => 0,
            Packing::Dense => 2,
        }
    }

    /// The node array grows by `len >> growth_shift`.
    pub const fn growth_shift(self) -> u32 {
        match self {
            Packing::Fast => 3,
            Packing::Dense => 4,
        }
    }
}

/// Keyed slab of nodes with byte and object counters.
pub(crate) struct Slab {
    pub nodes: Vec<Node>,
    free_head: Slot,
    buckets: Vec<u32>,
    /// `64 - log2(buckets.len())`: a hash shifted right by it is a bucket (kept, not
    /// recomputed from the length on every lookup).
    bucket_shift: u32,
    hasher: FixedState,
    len: u64,
    bytes: u64,
    /// Ghost nodes (in the index, not counted in `len` or `bytes`).
    ghosts: u64,
    packing: Packing,
    /// Objects at which the index doubles: the buckets shifted by the packing's load (kept
    /// here so an insertion compares one field, as with a fixed load).
    grow_at: usize,
}

impl Slab {
    pub fn new() -> Slab {
        Slab {
            nodes: Vec::new(),
            free_head: NIL,
            buckets: vec![CHAIN_END; MIN_BUCKETS],
            bucket_shift: 64 - MIN_BUCKETS.trailing_zeros(),
            hasher: FixedState::with_seed(HASH_SEED),
            len: 0,
            bytes: 0,
            ghosts: 0,
            packing: Packing::Fast,
            grow_at: MIN_BUCKETS << Packing::Fast.load_shift(),
        }
    }

    /// Packs the index and spare nodes as `packing` says from the next growth on.
    pub fn set_packing(&mut self, packing: Packing) {
        self.packing = packing;
        self.grow_at = self.buckets.len() << packing.load_shift();
    }

    pub fn packing(&self) -> Packing {
        self.packing
    }

    /// The hash of `key`, for the `_hashed` calls: a lookup that misses hands its hash to
    /// the insertion that follows, so a miss hashes its key once.
    #[inline]
    pub fn hash(&self, key: u64) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn bucket_of(&self, key: u64) -> usize {
        self.bucket_of_hash(self.hash(key))
    }

    #[inline]
    fn bucket_of_hash(&self, hash: u64) -> usize {
        // The bucket count is a power of two; the high bits of the hash are the best mixed.
        (hash >> self.bucket_shift) as usize
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

    /// Ghost nodes in the index.
    #[cfg(test)]
    pub fn ghosts(&self) -> u64 {
        self.ghosts
    }

    /// The node of cached `key` (never a ghost).
    #[inline]
    pub fn find(&self, key: u64) -> Option<Slot> {
        self.find_hashed(key, self.hash(key))
            .filter(|&slot| self.nodes[slot as usize].holds_object())
    }

    /// The node of `key`, cached or a ghost (a key has at most one node), with `hash` =
    /// [`Slab::hash`]`(key)`: the cache's lookup, which tells the two apart itself.
    #[inline]
    pub fn find_hashed(&self, key: u64, hash: u64) -> Option<Slot> {
        let mut slot = self.buckets[self.bucket_of_hash(hash)];
        while slot != CHAIN_END {
            let node = &self.nodes[slot as usize];
            if node.key == key {
                return Some(slot);
            }
            slot = node.chain_next();
        }
        None
    }

    /// Starts loading the index buckets of `keys`, then the first node of each chain, so
    /// that the lookups of all of them that follow find their chains in the cache: the
    /// loads of different keys overlap instead of one miss after another (see
    /// [`crate::prefetch_read`]). Reads nothing else and changes nothing.
    pub fn prefetch(&self, keys: &[u64]) {
        for &key in keys {
            crate::prefetch_read(&self.buckets[self.bucket_of(key)]);
        }
        for &key in keys {
            let slot = self.buckets[self.bucket_of(key)];
            if let Some(node) = self.nodes.get(slot as usize) {
                crate::prefetch_read(node);
            }
        }
    }

    /// Adds `key`, which must have no node (cached or ghost). Returns `None` only when
    /// `MAX_OBJECTS` nodes (objects and ghosts) are in use.
    #[inline]
    pub fn insert(&mut self, key: u64, size: u32) -> Option<Slot> {
        self.insert_hashed(key, size, self.hash(key))
    }

    /// [`Slab::insert`] with `hash` = [`Slab::hash`]`(key)`.
    #[inline]
    pub fn insert_hashed(&mut self, key: u64, size: u32, hash: u64) -> Option<Slot> {
        let indexed = (self.len + self.ghosts) as usize;
        if indexed >= MAX_OBJECTS {
            return None;
        }
        if indexed >= self.grow_at {
            self.grow_index();
        }
        let bucket = self.bucket_of_hash(hash);
        let node = Node {
            key,
            size,
            prev: NIL,
            next: NIL,
            chain: self.buckets[bucket],
        };
        let slot = if self.free_head != NIL {
            let slot = self.free_head;
            self.free_head = self.nodes[slot as usize].next;
            self.nodes[slot as usize] = node;
            slot
        } else {
            if self.nodes.len() == self.nodes.capacity() {
                // Grow by an eighth or a sixteenth (not by doubling) to bound the spare
                // nodes; large reallocations are remapped rather than copied, so this stays
                // cheap.
                let extra = (self.nodes.len() >> self.packing.growth_shift()).max(64);
                self.nodes.reserve_exact(extra);
            }
            self.nodes.push(node);
            (self.nodes.len() - 1) as Slot
        };
        self.buckets[bucket] = slot;
        self.len += 1;
        self.bytes += u64::from(size);
        Some(slot)
    }

    /// Drops the object at `slot` (already unlinked from its queue) and recycles the slot.
    pub fn remove(&mut self, slot: Slot) {
        let size = self.nodes[slot as usize].size;
        if self.unindex(slot) {
            self.len -= 1;
            self.bytes -= u64::from(size);
        }
    }

    /// Frees the node of an evicted object: recycles the slot, or keeps the node as a ghost
    /// when the algorithm buried it ([`Node::bury`]) while choosing it.
    #[inline]
    pub fn release(&mut self, slot: Slot) {
        let node = &self.nodes[slot as usize];
        if node.holds_object() {
            self.remove(slot);
        } else {
            self.len -= 1;
            self.bytes -= u64::from(node.size);
            self.ghosts += 1;
        }
    }

    /// Drops the ghost at `slot` (already unlinked from its algorithm's lists) from the index
    /// and recycles the slot.
    pub fn forget(&mut self, slot: Slot) {
        debug_assert!(self.nodes[slot as usize].is_ghost());
        if self.unindex(slot) {
            self.ghosts -= 1;
        }
    }

    /// Takes the ghost at `slot` out of the index and leaves its node (key, size, links,
    /// `meta`) to its algorithm, still counted as a ghost: lookups no longer find it, so the
    /// key can be inserted afresh while the algorithm still holds the ghost's place in its
    /// lists (CLOCK-Pro's returning ghost, whose clock position matters until the insert).
    /// The algorithm later puts it back ([`Slab::reattach`]) or frees it
    /// ([`Slab::free_detached`]).
    pub fn detach(&mut self, slot: Slot) {
        debug_assert!(self.nodes[slot as usize].is_ghost());
        if self.unchain(slot) {
            self.nodes[slot as usize].set_chain_next(CHAIN_END);
        }
    }

    /// Puts a [`Slab::detach`]ed ghost back into the index (its key must have no node).
    pub fn reattach(&mut self, slot: Slot) {
        let bucket = self.bucket_of(self.nodes[slot as usize].key);
        let head = self.buckets[bucket];
        self.nodes[slot as usize].set_chain_next(head);
        self.buckets[bucket] = slot;
    }

    /// Recycles a [`Slab::detach`]ed ghost's slot.
    pub fn free_detached(&mut self, slot: Slot) {
        debug_assert!(self.nodes[slot as usize].is_ghost());
        self.ghosts -= 1;
        self.push_free(slot);
    }

    /// Unlinks the node at `slot` from its bucket and puts it on the free list; false (and
    /// nothing changed) if the index does not have it.
    #[inline(always)]
    fn unindex(&mut self, slot: Slot) -> bool {
        if !self.unchain(slot) {
            return false;
        }
        self.push_free(slot);
        true
    }

    /// Unlinks the node at `slot` from its bucket; false if the index does not have it.
    #[inline(always)]
    fn unchain(&mut self, slot: Slot) -> bool {
        let node = self.nodes[slot as usize];
        let bucket = self.bucket_of(node.key);
        let head = self.buckets[bucket];
        if head == slot {
            self.buckets[bucket] = node.chain_next();
        } else {
            let mut prev = head;
            while prev != CHAIN_END && self.nodes[prev as usize].chain_next() != slot {
                prev = self.nodes[prev as usize].chain_next();
            }
            if prev == CHAIN_END {
                debug_assert!(false, "slot {slot} missing from the index");
                return false;
            }
            self.nodes[prev as usize].set_chain_next(node.chain_next());
        }
        true
    }

    #[inline(always)]
    fn push_free(&mut self, slot: Slot) {
        let freed = &mut self.nodes[slot as usize];
        freed.next = self.free_head;
        freed.prev = FREED;
        freed.chain = CHAIN_END | VACANT;
        self.free_head = slot;
    }

    /// Doubles the bucket array and relinks every stored node.
    #[cold]
    fn grow_index(&mut self) {
        let doubled = vec![CHAIN_END; self.buckets.len() * 2];
        let old = std::mem::replace(&mut self.buckets, doubled);
        self.bucket_shift -= 1;
        self.grow_at = self.buckets.len() << self.packing.load_shift();
        for head in old {
            let mut slot = head;
            while slot != CHAIN_END {
                let next = self.nodes[slot as usize].chain_next();
                let bucket = self.bucket_of(self.nodes[slot as usize].key);
                let first = self.buckets[bucket];
                self.nodes[slot as usize].set_chain_next(first);
                self.buckets[bucket] = slot;
                slot = next;
            }
        }
    }

    /// Makes room for `nodes` nodes (objects and ghosts) up front, for a host that knows a
    /// bound on them before the first insert (a replay of a trace of known length): growing
    /// by eighths to a population copies the node array about eight times over and rehashes
    /// the index at every doubling, a fixed cost that weighs on a short replay.
    ///
    /// The node array only reserves address space (a page is touched when a node on it is
    /// first used, so a bound far above the population costs no memory; a failed
    /// reservation is ignored and growth goes on as before). The index is sized for at most
    /// [`PRESIZED_INDEX_MAX`] nodes: a bound can be far above the population, and an index
    /// sparser than its objects spreads every lookup over more cache lines; growth past that
    /// is paid for by at least as many inserts.
    pub fn reserve(&mut self, nodes: usize) {
        let nodes = nodes.min(MAX_OBJECTS);
        let _ = self
            .nodes
            .try_reserve_exact(nodes.saturating_sub(self.nodes.len()));
        while self.grow_at < nodes.min(PRESIZED_INDEX_MAX) {
            self.grow_index();
        }
    }

    /// Changes the recorded size of a stored object.
    pub fn resize(&mut self, slot: Slot, size: u32) {
        let node = &mut self.nodes[slot as usize];
        self.bytes = self.bytes - u64::from(node.size) + u64::from(size);
        node.size = size;
    }

    /// Slots of every stored object (not of ghosts), in no particular order.
    pub fn slots(&self) -> impl Iterator<Item = Slot> + '_ {
        self.index_slots()
            .filter(|&slot| self.nodes[slot as usize].holds_object())
    }

    /// Slots of every node in the index, objects and ghosts.
    fn index_slots(&self) -> impl Iterator<Item = Slot> + '_ {
        self.buckets.iter().flat_map(move |&head| {
            let mut slot = head;
            core::iter::from_fn(move || {
                if slot == CHAIN_END {
                    return None;
                }
                let current = slot;
                slot = self.nodes[slot as usize].chain_next();
                Some(current)
            })
        })
    }

    /// Heap bytes held by the slab and the index (what the metadata really costs).
    pub fn heap_bytes(&self) -> usize {
        self.nodes.capacity() * core::mem::size_of::<Node>()
            + self.buckets.capacity() * core::mem::size_of::<u32>()
    }

    /// Index buckets now (for the overhead accounting).
    #[cfg(test)]
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_find_remove_recycles_slots() {
        let mut store = Slab::new();
        let a = store.insert(10, 100).unwrap();
        let b = store.insert(20, 50).unwrap();
        assert_eq!(store.find(10), Some(a));
        assert_eq!(store.find(20), Some(b));
        assert_eq!(store.find(30), None);
        assert_eq!((store.len(), store.bytes()), (2, 150));
        store.remove(a);
        assert!(store.nodes[a as usize].is_free());
        assert!(!store.nodes[b as usize].is_free());
        assert_eq!(store.find(10), None);
        assert_eq!((store.len(), store.bytes()), (1, 50));
        let c = store.insert(30, 7).unwrap();
        assert_eq!(c, a, "freed slot is reused before the slab grows");
        assert!(!store.nodes[c as usize].is_free());
        assert_eq!(store.nodes.len(), 2);
        store.resize(c, 9);
        assert_eq!(store.bytes(), 59);
        let mut keys: Vec<u64> = store.slots().map(|s| store.nodes[s as usize].key).collect();
        keys.sort_unstable();
        assert_eq!(keys, vec![20, 30]);
    }

    #[test]
    fn many_keys_stay_findable_across_index_growth() {
        let mut store = Slab::new();
        for k in 0..10_000u64 {
            store.insert(k * 7919, 1).unwrap();
        }
        assert!(store.bucket_count() >= 10_000);
        for k in (0..10_000u64).step_by(2) {
            let slot = store.find(k * 7919).unwrap();
            store.remove(slot);
        }
        for k in 0..10_000u64 {
            assert_eq!(store.find(k * 7919).is_some(), k % 2 == 1, "key {k}");
        }
        assert_eq!(store.len(), 5_000);
        assert_eq!(store.slots().count(), 5_000);
    }

    #[test]
    fn a_dense_slab_keeps_2_to_4_objects_per_bucket_and_grows_by_a_sixteenth() {
        let mut store = Slab::new();
        store.set_packing(Packing::Dense);
        for k in 0..100_000u64 {
            store.insert(k * 7919, 1).unwrap();
            let per_bucket = store.len() as f64 / store.bucket_count() as f64;
            assert!(per_bucket <= 4.0, "{k}: {per_bucket} objects per bucket");
            if store.len() > 1_000 {
                assert!(per_bucket >= 2.0, "{k}: {per_bucket} objects per bucket");
                let spare = store.nodes.capacity() - store.nodes.len();
                assert!(spare <= store.nodes.len() / 16, "{k}: {spare} spare nodes");
            }
        }
        for k in (0..100_000u64).step_by(3) {
            let slot = store.find(k * 7919).unwrap();
            store.remove(slot);
        }
        for k in 0..100_000u64 {
            assert_eq!(store.find(k * 7919).is_some(), k % 3 != 0, "key {k}");
        }
    }

    #[test]
    fn churn_does_not_grow_the_index() {
        let mut store = Slab::new();
        let mut slots = std::collections::VecDeque::new();
        for k in 0..1_000u64 {
            slots.push_back(store.insert(k, 1).unwrap());
        }
        let buckets = store.bucket_count();
        for k in 1_000..200_000u64 {
            store.remove(slots.pop_front().unwrap());
            slots.push_back(store.insert(k, 1).unwrap());
        }
        assert_eq!(store.bucket_count(), buckets);
        assert_eq!(store.nodes.len(), 1_000);
    }

    #[test]
    fn ghosts_stay_indexed_but_are_not_objects() {
        let mut store = Slab::new();
        let mut slots = Vec::new();
        for k in 0..40u64 {
            slots.push(store.insert(k, 10).unwrap());
        }
        // Bury every other node, as an algorithm does with the victim it returns.
        for &slot in slots.iter().step_by(2) {
            store.nodes[slot as usize].bury();
            store.release(slot);
        }
        assert_eq!((store.len(), store.bytes(), store.ghosts()), (20, 200, 20));
        for k in 0..40u64 {
            let any = store.find_hashed(k, store.hash(k));
            assert_eq!(any, Some(slots[k as usize]), "key {k} keeps its node");
            let node = &store.nodes[slots[k as usize] as usize];
            assert_eq!(node.is_ghost(), k % 2 == 0);
            assert_eq!(node.holds_object(), k % 2 == 1);
            assert_eq!(
                store.find(k).is_some(),
                k % 2 == 1,
                "find sees objects only"
            );
        }
        assert_eq!(store.slots().count(), 20);
        // Ghosts count towards the index's population: 40 nodes in 16 buckets would not fit.
        assert!(store.bucket_count() >= 40);
        store.forget(slots[0]);
        assert!(store.nodes[slots[0] as usize].is_free());
        assert!(!store.nodes[slots[0] as usize].holds_object());
        assert_eq!(store.find_hashed(0, store.hash(0)), None);
        assert_eq!((store.len(), store.ghosts()), (20, 19));
        assert_eq!(
            store.insert(1000, 5),
            Some(slots[0]),
            "a forgotten ghost's slot is reused"
        );
        assert!(store.nodes[slots[0] as usize].holds_object());
    }

    #[test]
    fn meta_never_reaches_the_ghost_mark() {
        let mut node = Node::detached(1, 1);
        node.set_meta(META_MAX);
        assert!(node.holds_object());
        assert_eq!(node.meta(), META_MAX);
        node.bury();
        node.set_meta(0);
        assert!(node.is_ghost(), "set_meta keeps a ghost a ghost");
        assert_eq!(node.chain_next(), CHAIN_END);
    }

    #[test]
    fn meta_bits_do_not_disturb_the_chain() {
        let mut store = Slab::new();
        for k in 0..100u64 {
            let slot = store.insert(k, 1).unwrap();
            store.nodes[slot as usize].set_meta((k as u32) & META_MAX);
        }
        for k in 0..100u64 {
            let slot = store.find(k).unwrap();
            assert_eq!(store.nodes[slot as usize].meta(), (k as u32) & META_MAX);
        }
    }

    #[test]
    fn a_reserved_slab_neither_moves_nor_rehashes_up_to_its_bound() {
        let mut store = Slab::new();
        store.reserve(50_000);
        let (capacity, buckets) = (store.nodes.capacity(), store.bucket_count());
        assert!(capacity >= 50_000);
        assert_eq!(
            buckets,
            1 << 16,
            "the fast packing's 1 to 2 buckets per node"
        );
        let first = store.nodes.as_ptr();
        for key in 0..50_000u64 {
            store.insert(key * 7, 1).unwrap();
        }
        assert_eq!(store.nodes.as_ptr(), first, "no reallocation");
        assert_eq!(store.bucket_count(), buckets, "no index growth");
        assert!((0..50_000u64).all(|key| store.find(key * 7).is_some()));
        // Past the bound it grows as an unreserved slab does.
        store.insert(1, 1).unwrap();
        assert!(store.nodes.capacity() > capacity);
    }

    #[test]
    fn a_bound_far_above_the_population_sizes_the_index_for_at_most_2_to_the_17() {
        let mut store = Slab::new();
        store.reserve(1 << 20);
        assert_eq!(store.bucket_count(), PRESIZED_INDEX_MAX);
        let mut grown = Slab::new();
        grown.reserve(10);
        assert_eq!(grown.bucket_count(), MIN_BUCKETS);
    }
}
