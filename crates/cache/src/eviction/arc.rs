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

use super::ghost::Ghosts;
use super::{EvictionPolicy, Units, Usage};
use crate::queue::Queue;
use crate::slab::{Node, Slot, NIL};
use crate::Capacity;

/// `meta`: the object is in T2 (else T1).
const IN_T2: u32 = 1;
/// Ghost lists.
const B1: usize = 0;
const B2: usize = 1;

pub(crate) struct Arc {
    units: Units,
    t1: Queue,
    t2: Queue,
    t1_usage: Usage,
    t2_usage: Usage,
    ghosts: Ghosts,
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
        let units = Units::of(capacity);
        Arc {
            units,
            t1: Queue::default(),
            t2: Queue::default(),
            t1_usage: Usage::default(),
            t2_usage: Usage::default(),
            ghosts: Ghosts::new(units),
            p: 0.0,
            ghost_list: None,
            ghost_hit: None,
            incoming: 0,
        }
    }

    fn c(&self) -> u64 {
        self.units.total
    }

    fn t1_units(&self) -> u64 {
        self.units.of_usage(self.t1_usage)
    }

    fn all_units(&self) -> u64 {
        self.units.of_usage(self.t1_usage)
            + self.units.of_usage(self.t2_usage)
            + self.ghosts.total(B1)
            + self.ghosts.total(B2)
    }

    /// The paper's REPLACE: demotes one cached object to its ghost list and returns its slot.
    fn replace(&mut self, nodes: &mut [Node]) -> Slot {
        let t1 = self.t1_units() as f64;
        let from_t1 = (t1 > 0.0 && (t1 > self.p || (t1 == self.p && self.ghost_list == Some(B2))))
            || self.t2.is_empty();
        // libCacheSim would dereference an empty T1 here; take T2 instead.
        let from_t1 = from_t1 && !self.t1.is_empty();
        let (queue, total, ghost) = if from_t1 {
            (&mut self.t1, &mut self.t1_usage, B1)
        } else {
            (&mut self.t2, &mut self.t2_usage, B2)
        };
        let slot = queue.pop_tail(nodes);
        if slot != NIL {
            let Node { key, size, .. } = nodes[slot as usize];
            total.sub(size);
            self.ghosts.push(ghost, key, size);
        }
        slot
    }

    fn evict_t1_outright(&mut self, nodes: &mut [Node]) -> Slot {
        let slot = self.t1.pop_tail(nodes);
        if slot != NIL {
            self.t1_usage.sub(nodes[slot as usize].size);
        }
        slot
    }

    /// Drops ghosts the lists no longer have room for after the capacity shrank.
    fn trim_ghosts(&mut self) {
        let c = self.c();
        while self.t1_units() + self.ghosts.total(B1) > c && self.ghosts.drop_oldest(B1) {}
        while self.all_units() > 2 * c && self.ghosts.drop_oldest(B2) {}
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
            self.t1_usage.sub(size);
            nodes[slot as usize].set_meta(IN_T2);
            self.t2.push_head(nodes, slot);
            self.t2_usage.add(size);
        }
    }

    fn on_miss(&mut self, key: u64) {
        self.ghost_hit = None;
        let Some((list, slot)) = self.ghosts.find(key) else {
            return;
        };
        let (b1, b2) = (self.ghosts.total(B1) as f64, self.ghosts.total(B2) as f64);
        if list == B1 {
            let delta = (b2 / b1).max(1.0);
            self.p = (self.p + delta).min(self.c() as f64);
        } else {
            let delta = (b1 / b2).max(1.0);
            self.p = (self.p - delta).max(0.0);
        }
        self.ghosts.remove(slot);
        self.ghost_list = Some(list);
        self.ghost_hit = Some(key);
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
            self.t2_usage.add(size);
        } else {
            nodes[slot as usize].set_meta(0);
            self.t1.push_head(nodes, slot);
            self.t1_usage.add(size);
        }
        self.incoming = 0;
    }

    fn on_resize(&mut self, nodes: &mut [Node], slot: Slot, old_size: u32) {
        let usage = if nodes[slot as usize].meta() & IN_T2 != 0 {
            &mut self.t2_usage
        } else {
            &mut self.t1_usage
        };
        usage.resize(old_size, nodes[slot as usize].size);
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        if self.ghost_hit.is_some() {
            return self.replace(nodes);
        }
        let c = self.c();
        if self.t1_units() + self.ghosts.total(B1) + self.incoming > c {
            if self.ghosts.drop_oldest(B1) {
                self.replace(nodes)
            } else {
                self.evict_t1_outright(nodes)
            }
        } else {
            if self.all_units() >= 2 * c {
                self.ghosts.drop_oldest(B2);
            }
            self.replace(nodes)
        }
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        let size = nodes[slot as usize].size;
        if nodes[slot as usize].meta() & IN_T2 != 0 {
            self.t2.unlink(nodes, slot);
            self.t2_usage.sub(size);
        } else {
            self.t1.unlink(nodes, slot);
            self.t1_usage.sub(size);
        }
    }

    fn on_capacity(&mut self, capacity: Capacity) {
        self.units = Units::of(capacity);
        self.ghosts.set_units(self.units);
        self.p = self.p.min(self.c() as f64);
        self.trim_ghosts();
    }

    fn heap_bytes(&self) -> usize {
        self.ghosts.heap_bytes()
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
            assert!(arc.t1_units() + arc.ghosts.total(B1) <= 10);
            assert!((0.0..=10.0).contains(&arc.p));
        }
        assert!(h.policy.ghosts.len() > 0);
        assert_eq!(h.store.len(), 10);
    }
}
