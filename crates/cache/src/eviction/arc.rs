//! ARC (Megiddo and Modha, FAST'03) as libCacheSim 0.3.5's `ARC.c` runs it, sizes in bytes:
//!
//! - T1 holds objects seen once recently, T2 objects seen at least twice; B1 and B2 are their
//!   ghosts (keys and sizes of objects evicted from T1 and T2). `p`, T1's target size, is a
//!   float as in libCacheSim (which follows the reference Python implementation there).
//! - A hit in T1 moves the object to T2's head; a hit in T2 moves it to T2's head.
//! - A miss found in B1 raises `p` by `max(|B2| / |B1|, 1)` (capped at the capacity); one
//!   found in B2 lowers it by `max(|B1| / |B2|, 1)` (floored at 0). Either way the ghost entry
//!   is dropped, room is made by REPLACE alone, and the object enters T2. Any other miss
//!   enters T1.
//! - REPLACE demotes T1's oldest to B1 when T1 is non-empty and larger than `p` (or equal to
//!   `p` while the last ghost hit was in B2), or when T2 is empty; otherwise T2's oldest to B2.
//! - Room for any other miss: when `|T1| + |B1| + incoming > c`, B1's oldest is dropped and
//!   REPLACE runs if B1 is non-empty, else T1's oldest is evicted without a ghost; otherwise
//!   B2's oldest is dropped when the four lists reach `2c`, and REPLACE runs.
//!
//! A cache limited only in objects counts every object as one unit ([`Units`]).
//!
//! The ghosts are the victims' own nodes, left in the cache's index ([`Node::bury`]) and
//! linked into B1/B2 by the links they had in T1/T2, as libCacheSim flags its objects in its
//! one hash table: a miss finds a ghost with the lookup it makes anyway, a demotion moves no
//! key, and a dropped ghost leaves the index the way an evicted object does.

use super::{EvictionPolicy, Units};
use crate::queue::Queue;
use crate::slab::{Node, Slab, Slot, NIL};
use crate::Capacity;

/// `meta`: the object is in T2 (else T1). A ghost keeps it: in B2 if set, else in B1.
const IN_T2: u32 = 1;
/// The four lists, as indices of [`Totals`]: a node's `IN_T2` bit is its T list's index,
/// and `B1 + bit` its ghost list's.
const T1: usize = 0;
const T2: usize = 1;
const B1: usize = 2;
const B2: usize = 3;

/// What each list holds, in both measures (a change of [`Units`] needs no recount):
/// `[bytes, objects][list]`, so that the sums `choose` makes are plain loads of one row.
#[derive(Clone, Copy, Default)]
struct Totals([[u64; 4]; 2]);

impl Totals {
    #[inline]
    fn add(&mut self, list: usize, size: u32) {
        self.0[0][list] += u64::from(size);
        self.0[1][list] += 1;
    }
    #[inline]
    fn sub(&mut self, list: usize, size: u32) {
        self.0[0][list] -= u64::from(size);
        self.0[1][list] -= 1;
    }
    #[inline]
    fn shift(&mut self, from: usize, to: usize, size: u32) {
        self.sub(from, size);
        self.add(to, size);
    }
}

pub(crate) struct Arc {
    units: Units,
    t1: Queue,
    t2: Queue,
    /// B1 and B2: buried victims, threaded through the cache's nodes.
    b: [Queue; 2],
    totals: Totals,
    /// The row of `totals` in `units`' measure.
    measure: usize,
    /// Ghosts no longer in B1/B2 that the index still holds, because they were dropped
    /// without the slab at hand ([`EvictionPolicy::evict`] alone); freed by `settle`.
    dropped: Queue,
    /// The capacity shrank: the ghost lists are trimmed to it by the next `settle`, before
    /// anything reads their sizes.
    trim_due: bool,
    p: f64,
    /// The ghost list of the last ghost hit, until the object is inserted or a lookup finds
    /// a cached object (libCacheSim's `curr_obj_in_L*_ghost`, which a plain miss keeps).
    ghost_list: Option<usize>,
    /// The key of the current miss was found in a ghost (libCacheSim's
    /// `vtime_last_req_in_ghost == n_req`): room for it is made by REPLACE only.
    ghost_hit: Option<u64>,
    /// Units of the object being inserted (0 outside an insert).
    incoming: u64,
}

impl Arc {
    pub fn new(capacity: Capacity) -> Arc {
        Arc {
            units: Units::of(capacity),
            t1: Queue::default(),
            t2: Queue::default(),
            b: [Queue::default(); 2],
            totals: Totals::default(),
            measure: Self::measure_of(Units::of(capacity)),
            dropped: Queue::default(),
            trim_due: false,
            p: 0.0,
            ghost_list: None,
            ghost_hit: None,
            incoming: 0,
        }
    }

    fn measure_of(units: Units) -> usize {
        usize::from(!units.by_bytes)
    }

    #[inline]
    fn c(&self) -> u64 {
        self.units.total
    }

    /// The units of each list: T1, T2, B1, B2.
    #[inline]
    fn in_units(&self) -> &[u64; 4] {
        &self.totals.0[self.measure]
    }

    #[inline]
    fn t1_units(&self) -> u64 {
        self.in_units()[T1]
    }

    #[inline]
    fn ghost_units(&self, list: usize) -> u64 {
        self.in_units()[list]
    }

    /// T1 + T2 + B1 + B2.
    fn all_units(&self) -> u64 {
        self.in_units().iter().sum()
    }

    /// The paper's REPLACE: demotes one cached object to its ghost list (burying its node)
    /// and returns its slot.
    fn replace(&mut self, nodes: &mut [Node]) -> Slot {
        let t1 = self.t1_units() as f64;
        let from_t1 = (t1 > 0.0 && (t1 > self.p || (t1 == self.p && self.ghost_list == Some(B2))))
            || self.t2.is_empty();
        // libCacheSim would dereference an empty T1 here; take T2 instead.
        let from_t1 = from_t1 && !self.t1.is_empty();
        let (queue, list) = if from_t1 {
            (&mut self.t1, T1)
        } else {
            (&mut self.t2, T2)
        };
        let slot = queue.pop_tail(nodes);
        if slot != NIL {
            let size = nodes[slot as usize].size;
            self.totals.shift(list, B1 + list, size);
            // The node's `meta` (IN_T2 or not) already names the list it joins.
            self.b[list].push_head(nodes, slot);
            nodes[slot as usize].bury();
        }
        slot
    }

    fn evict_t1_outright(&mut self, nodes: &mut [Node]) -> Slot {
        let slot = self.t1.pop_tail(nodes);
        if slot != NIL {
            self.totals.sub(T1, nodes[slot as usize].size);
        }
        slot
    }

    /// Unlinks the oldest ghost of `list` (still indexed; the caller frees it); `NIL` when
    /// the list is empty.
    fn unlink_oldest_ghost(&mut self, nodes: &mut [Node], list: usize) -> Slot {
        let slot = self.b[list - B1].pop_tail(nodes);
        if slot != NIL {
            self.totals.sub(list, nodes[slot as usize].size);
        }
        slot
    }

    /// libCacheSim's `ARC_evict`: the victim, and the ghost dropped to make room (unlinked
    /// from its list, still indexed) or `NIL`.
    fn choose(&mut self, nodes: &mut [Node]) -> (Slot, Slot) {
        if self.ghost_hit.is_some() {
            return (self.replace(nodes), NIL);
        }
        let c = self.c();
        let [t1, t2, b1, b2] = *self.in_units();
        if t1 + b1 + self.incoming > c {
            let dropped = self.unlink_oldest_ghost(nodes, B1);
            if dropped != NIL {
                (self.replace(nodes), dropped)
            } else {
                (self.evict_t1_outright(nodes), NIL)
            }
        } else {
            let dropped = if t1 + t2 + b1 + b2 >= 2 * c {
                self.unlink_oldest_ghost(nodes, B2)
            } else {
                NIL
            };
            (self.replace(nodes), dropped)
        }
    }

    /// Frees the ghosts dropped without the slab at hand and trims the ghost lists after a
    /// capacity cut. Runs before anything that reads the lists' sizes with the slab at hand.
    #[inline]
    fn settle(&mut self, store: &mut Slab) {
        if self.dropped.tail != NIL || self.trim_due {
            self.settle_slow(store);
        }
    }

    #[cold]
    fn settle_slow(&mut self, store: &mut Slab) {
        loop {
            let slot = self.dropped.pop_tail(&mut store.nodes);
            if slot == NIL {
                break;
            }
            store.forget(slot);
        }
        if std::mem::take(&mut self.trim_due) {
            let c = self.c();
            while self.t1_units() + self.ghost_units(B1) > c {
                let slot = self.unlink_oldest_ghost(&mut store.nodes, B1);
                if slot == NIL {
                    break;
                }
                store.forget(slot);
            }
            while self.all_units() > 2 * c {
                let slot = self.unlink_oldest_ghost(&mut store.nodes, B2);
                if slot == NIL {
                    break;
                }
                store.forget(slot);
            }
        }
    }

    /// Takes the ghost at `slot` out of its list and the index; returns its list, or `None`
    /// when it had already been dropped (the lookup is then a plain miss).
    fn take_ghost(&mut self, store: &mut Slab, slot: Slot) -> Option<usize> {
        self.settle(store);
        let node = store.nodes[slot as usize];
        if !node.is_ghost() {
            return None;
        }
        let list = B1 + (node.meta() & IN_T2) as usize;
        self.b[list - B1].unlink(&mut store.nodes, slot);
        self.totals.sub(list, node.size);
        store.forget(slot);
        Some(list)
    }
}

impl EvictionPolicy for Arc {
    #[inline]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        self.ghost_list = None;
        self.ghost_hit = None;
        self.incoming = 0;
        if nodes[slot as usize].meta() & IN_T2 != 0 {
            self.t2.move_to_head(nodes, slot);
        } else {
            let size = nodes[slot as usize].size;
            self.t1.unlink(nodes, slot);
            self.totals.shift(T1, T2, size);
            nodes[slot as usize].set_meta(IN_T2);
            self.t2.push_head(nodes, slot);
        }
    }

    #[inline]
    fn on_miss(&mut self, _key: u64) {
        self.ghost_hit = None;
    }

    fn on_ghost_hit(&mut self, store: &mut Slab, slot: Slot) {
        let key = store.nodes[slot as usize].key;
        // B1 and B2's sizes before the ghost leaves, as libCacheSim reads them.
        self.settle(store);
        let (b1, b2) = (self.ghost_units(B1) as f64, self.ghost_units(B2) as f64);
        let Some(list) = self.take_ghost(store, slot) else {
            return;
        };
        if list == B1 {
            let delta = (b2 / b1).max(1.0);
            self.p = (self.p + delta).min(self.c() as f64);
        } else {
            let delta = (b1 / b2).max(1.0);
            self.p = (self.p - delta).max(0.0);
        }
        self.ghost_list = Some(list);
        self.ghost_hit = Some(key);
    }

    fn forget_ghost(&mut self, store: &mut Slab, slot: Slot) {
        self.take_ghost(store, slot);
    }

    fn owes_eviction(&mut self, _nodes: &mut [Node], _key: u64, size: u32) -> bool {
        // Not an eviction: the size of the incoming object, which `evict` compares.
        self.incoming = self.units.of_size(size);
        false
    }

    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        let Node { key, size, .. } = nodes[slot as usize];
        if self.ghost_hit.take() == Some(key) {
            self.ghost_list = None;
            nodes[slot as usize].set_meta(IN_T2);
            self.t2.push_head(nodes, slot);
            self.totals.add(T2, size);
        } else {
            nodes[slot as usize].set_meta(0);
            self.t1.push_head(nodes, slot);
            self.totals.add(T1, size);
        }
        self.incoming = 0;
    }

    fn on_resize(&mut self, nodes: &mut [Node], slot: Slot, old_size: u32) {
        let list = T1 + (nodes[slot as usize].meta() & IN_T2) as usize;
        let bytes = &mut self.totals.0[0][list];
        *bytes = *bytes - u64::from(old_size) + u64::from(nodes[slot as usize].size);
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        let (victim, dropped) = self.choose(nodes);
        if dropped != NIL {
            self.dropped.push_head(nodes, dropped);
        }
        victim
    }

    #[inline]
    fn evict_in(&mut self, store: &mut Slab) -> Slot {
        self.settle(store);
        let (victim, dropped) = self.choose(&mut store.nodes);
        if dropped != NIL {
            store.forget(dropped);
        }
        victim
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        let size = nodes[slot as usize].size;
        if nodes[slot as usize].meta() & IN_T2 != 0 {
            self.t2.unlink(nodes, slot);
            self.totals.sub(T2, size);
        } else {
            self.t1.unlink(nodes, slot);
            self.totals.sub(T1, size);
        }
    }

    fn on_capacity(&mut self, capacity: Capacity) {
        self.units = Units::of(capacity);
        self.measure = Self::measure_of(self.units);
        self.p = self.p.min(self.c() as f64);
        // Trimming frees nodes, which needs the slab: the next `settle` does it.
        self.trim_due = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Harness;
    use crate::{Algorithm, Cache};

    fn run(cache: &mut Cache, keys: &[u64]) -> Vec<bool> {
        keys.iter().map(|&k| cache.access(k, 1)).collect()
    }

    #[test]
    fn a_second_hit_protects_an_object_from_a_scan() {
        let mut cache = Cache::new(Algorithm::Arc, Capacity::objects(4));
        // 1 and 2 are used twice (T2); then a scan of new keys churns T1 only.
        run(&mut cache, &[1, 2, 1, 2]);
        run(&mut cache, &[10, 11, 12, 13, 14, 15]);
        assert!(cache.contains(1) && cache.contains(2));
    }

    #[test]
    fn a_ghost_hit_in_b1_grows_p_and_enters_t2() {
        let mut cache = Cache::new(Algorithm::Arc, Capacity::objects(2));
        // 1, 2 fill T1; 3 demotes 1 to B1 (|T1| = 2 > p = 0).
        assert_eq!(run(&mut cache, &[1, 2, 3]), vec![false, false, false]);
        assert!(!cache.contains(1));
        // 1 again: found in B1, p becomes 1, REPLACE demotes 2 (T1's oldest, |T1| = 2 > 1),
        // and 1 enters T2: the cache holds 3 and 1.
        assert!(!cache.access(1, 1));
        let mut keys: Vec<u64> = cache.iter().map(|(k, _)| k).collect();
        keys.sort_unstable();
        assert_eq!(keys, vec![1, 3]);
        assert!(cache.access(1, 1) && cache.access(3, 1));
    }

    #[test]
    fn lists_and_ghosts_stay_within_twice_the_capacity() {
        let capacity = Capacity::objects(10);
        let mut h = Harness::new(Arc::new(capacity), capacity);
        let mut x = 7u64;
        for _ in 0..20_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            h.access((x >> 33) % 100, 1);
            let arc = &h.policy;
            assert!(arc.all_units() <= 20, "{}", arc.all_units());
            assert!(arc.t1_units() + arc.ghost_units(B1) <= 10);
            assert!((0.0..=10.0).contains(&arc.p));
            let ghosts = arc.totals.0[1][B1] + arc.totals.0[1][B2];
            assert_eq!(
                h.store.ghosts(),
                ghosts,
                "every ghost in the index is in B1 or B2"
            );
        }
        assert!(h.store.ghosts() > 0);
        assert_eq!(h.store.len(), 10);
    }

    /// Requests of a seeded stream over `keys` keys, all of size 1.
    fn churn(h: &mut Harness<Arc>, requests: u32, keys: u64, seed: u64) {
        let mut x = seed;
        for _ in 0..requests {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            h.access((x >> 33) % keys, 1);
        }
    }

    fn ghosts_listed(arc: &Arc) -> u64 {
        arc.totals.0[1][B1] + arc.totals.0[1][B2]
    }

    #[test]
    fn ghosts_are_never_reported_as_cached() {
        let mut cache = Cache::new(Algorithm::Arc, Capacity::objects(4));
        let mut hints = std::collections::HashMap::new();
        for key in 0..12u64 {
            cache.access(key, 1);
            hints.insert(key, cache.slot_hint(key).unwrap());
        }
        // Keys 0..8 left; with four cached, B1 holds the latest of them as buried nodes.
        assert_eq!(cache.len(), 4);
        for key in 0..8u64 {
            assert!(!cache.contains(key), "{key}");
            assert_eq!(cache.object_size(key), None);
            assert_eq!(cache.slot_hint(key), None);
            assert!(
                !cache.remove(key),
                "a ghost is not removable: it is not cached"
            );
        }
        assert_eq!(cache.iter().count(), 4);
        // Key 7's node is a ghost now, still holding key 7: its old hint must not hit. The
        // lookup is a ghost hit instead, so 7 enters T2 and survives a scan of new keys.
        assert!(!cache.get_hinted(7, hints[&7]));
        assert!(cache.insert(7, 1));
        for key in 100..103u64 {
            cache.access(key, 1);
        }
        assert!(cache.contains(7), "7 came back from B1 into T2");
    }

    #[test]
    fn a_capacity_cut_trims_the_ghosts_before_they_are_read() {
        let capacity = Capacity::objects(20);
        let mut h = Harness::new(Arc::new(capacity), capacity);
        churn(&mut h, 5_000, 60, 3);
        assert!(h.store.ghosts() > 10);
        let small = Capacity::objects(5);
        h.capacity = small;
        h.policy.on_capacity(small);
        // The cut itself cannot free nodes (no slab at hand); the next eviction trims first.
        while h.store.len() > 5 {
            assert!(h.evict_one());
        }
        let arc = &h.policy;
        assert!(arc.all_units() <= 10, "{}", arc.all_units());
        assert!(arc.t1_units() + arc.ghost_units(B1) <= 5);
        assert_eq!(h.store.ghosts(), ghosts_listed(arc));
        churn(&mut h, 2_000, 60, 4);
        assert_eq!(h.store.ghosts(), ghosts_listed(&h.policy));
        assert!(h.policy.all_units() <= 10);
    }

    #[test]
    fn ghosts_dropped_without_the_slab_leave_the_index_later() {
        let capacity = Capacity::objects(8);
        let mut h = Harness::new(Arc::new(capacity), capacity);
        churn(&mut h, 2_000, 30, 5);
        // A plain `evict` cannot free the ghost it drops; it must still stop counting it.
        let victim = h.policy.evict(&mut h.store.nodes);
        assert_ne!(victim, NIL);
        h.store.release(victim);
        let listed = ghosts_listed(&h.policy);
        assert!(
            h.policy.dropped.tail != NIL,
            "this stream drops a ghost at every miss"
        );
        assert_eq!(h.store.ghosts(), listed + 1);
        // The first new key takes the room `evict` made; the second evicts, freeing it.
        h.access(1_000, 1);
        h.access(1_001, 1);
        assert_eq!(h.policy.dropped.tail, NIL);
        assert_eq!(h.store.ghosts(), ghosts_listed(&h.policy));
    }

    #[test]
    fn a_ghost_found_by_another_class_is_forgotten_not_duplicated() {
        use crate::classes::ClassSet;
        let header = "IO class id,IO class name,Eviction priority,Allocation\n";
        let set = ClassSet::parse(
            &format!("{header}0,unclassified,5,1\n1,size:le:10,5,1\n"),
            "t",
        )
        .unwrap();
        let mut c = Cache::with_classes(Algorithm::Arc, Capacity::objects(4), set);
        for key in 0..8u64 {
            assert!(!c.get(key, 0));
            c.insert(key, 50, 0);
        }
        // Key 1 is a ghost of class 0; a request of class 1 misses it and caches it there.
        assert!(!c.get(1, 1));
        assert!(c.insert(1, 5, 1));
        assert_eq!(c.class_of(1), Some(1));
        for key in 20..40u64 {
            assert!(!c.get(key, 0));
            c.insert(key, 50, 0);
        }
        let ones = c.objects().filter(|&(k, _, _)| k == 1).count();
        assert!(ones <= 1);
        assert!(c.len() <= 4);
        // Evicting everything then re-inserting key 1 must find no stale node of it.
        c.evict(10);
        assert!(!c.get(1, 0));
        assert!(c.insert(1, 50, 0));
        assert_eq!(c.objects().filter(|&(k, _, _)| k == 1).count(), 1);
    }
}
