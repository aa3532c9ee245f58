//! A cache with one queue per class ([`crate::classes`]): selective allocation and selective
//! eviction as seed 004 describes them, with allocation caps and soft and hard pinning.
//!
//! It shares the slab and index of [`crate::Cache`] (one [`Slab`] for every class, so a key
//! is found with one probe whatever its class) and runs one instance of the chosen eviction
//! algorithm per class over its own objects. It is a separate type rather than a mode of
//! `Cache` so that the unclassed cache keeps its exact libCacheSim behaviour and speed.
//!
//! Rules, in the order an insertion applies them:
//! 1. a class with allocation 0 is never cached (`bypassed`);
//! 2. a class at its allocation cap makes room among its own objects; a hard-pinned class
//!    refuses instead (`refused`): it never evicts anything of its own;
//! 3. while the cache is full, the victim is the oldest object (in the algorithm's sense) of
//!    the most evictable non-empty class: unpinned classes by descending priority number,
//!    then soft-pinned ones; hard-pinned never. A class may only evict classes at least as
//!    evictable as itself, so a low-priority class is fenced off under pressure (`fenced`).

use crate::classes::{ClassIndex, ClassSet, ClassSpec, Pinning, Probe};
use crate::eviction::{EvictionPolicy, Evictor};
use crate::slab::{Slab, Slot, NIL};
use crate::{Algorithm, Capacity};

/// Counters of one class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Lookups classified into this class that hit / missed.
    pub hits: u64,
    pub misses: u64,
    /// Objects and bytes of this class cached now.
    pub objects: u64,
    pub bytes: u64,
    pub peak_bytes: u64,
    /// Objects of this class evicted (by pressure, `evict` or `set_capacity`).
    pub evictions: u64,
    /// Insertions refused because the class's allocation is 0.
    pub bypassed: u64,
    /// Insertions refused by the selective allocation: the cache was full of more important
    /// classes.
    pub fenced: u64,
    /// Insertions refused because a hard-pinned class was at its cap, or the object could
    /// never fit the class's cap.
    pub refused: u64,
}

struct ClassState {
    policy: Evictor,
    limit: Capacity,
    rank: Option<u16>,
    pinning: Pinning,
    never_cached: bool,
    stats: ClassStats,
}

pub struct ClassedCache {
    algorithm: Algorithm,
    capacity: Capacity,
    set: ClassSet,
    store: Slab,
    classes: Vec<ClassState>,
    /// Class of the object in each slab slot.
    slot_class: Vec<ClassIndex>,
    /// Evictable classes, most evictable first.
    eviction_order: Vec<ClassIndex>,
    evictions: u64,
    reported_miss: Option<u64>,
}

fn class_limit(capacity: Capacity, allocation: f64) -> Capacity {
    let part = |total: u64| {
        if allocation >= 1.0 {
            total
        } else {
            (total as f64 * allocation) as u64
        }
    };
    Capacity {
        bytes: capacity.bytes.map(part),
        objects: capacity.objects.map(part),
    }
}

impl ClassedCache {
    pub fn new(algorithm: Algorithm, capacity: Capacity, set: ClassSet) -> ClassedCache {
        let classes: Vec<ClassState> = set
            .classes()
            .iter()
            .map(|spec| {
                let limit = class_limit(capacity, spec.allocation);
                ClassState {
                    policy: Evictor::new(algorithm, limit),
                    limit,
                    rank: spec.eviction_rank(),
                    pinning: spec.pinning,
                    never_cached: spec.allocation == 0.0,
                    stats: ClassStats::default(),
                }
            })
            .collect();
        let mut eviction_order: Vec<ClassIndex> = (0..classes.len())
            .filter(|&i| classes[i].rank.is_some())
            .map(|i| i as ClassIndex)
            .collect();
        // Most evictable first; among equal ranks the higher id goes first.
        eviction_order.sort_by_key(|&i| std::cmp::Reverse((classes[i as usize].rank, i)));
        ClassedCache {
            algorithm,
            capacity,
            set,
            store: Slab::new(),
            classes,
            slot_class: Vec::new(),
            eviction_order,
            evictions: 0,
            reported_miss: None,
        }
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    pub fn class_set(&self) -> &ClassSet {
        &self.set
    }

    pub fn specs(&self) -> &[ClassSpec] {
        self.set.classes()
    }

    /// The class a request belongs to.
    #[inline]
    pub fn classify(&self, probe: &Probe) -> ClassIndex {
        self.set.classify(probe)
    }

    /// Counters of class `index`.
    pub fn stats(&self, index: ClassIndex) -> ClassStats {
        self.classes[index as usize].stats
    }

    /// The largest objects and bytes class `index` may hold.
    pub fn class_limit(&self, index: ClassIndex) -> Capacity {
        self.classes[index as usize].limit
    }

    /// Class of a cached key.
    pub fn class_of(&self, key: u64) -> Option<ClassIndex> {
        self.store
            .find(key)
            .map(|slot| self.slot_class[slot as usize])
    }

    /// Looks `key` up on behalf of a request of class `class` (which is credited the hit or
    /// miss); a hit promotes the object in its own class's queue. Never inserts.
    #[inline]
    pub fn get(&mut self, key: u64, class: ClassIndex) -> bool {
        match self.store.find(key) {
            Some(slot) => {
                self.reported_miss = None;
                let own = self.slot_class[slot as usize] as usize;
                self.classes[own].policy.on_hit(&mut self.store.nodes, slot);
                self.classes[class as usize].stats.hits += 1;
                true
            }
            None => {
                let c = &mut self.classes[class as usize];
                c.policy.on_miss(key);
                c.stats.misses += 1;
                self.reported_miss = Some(key);
                false
            }
        }
    }

    /// Credits class `class` with a miss of a key the caller knows is not cached (a server
    /// that found no entry for the key), without telling the algorithm: the key has no id yet.
    pub fn count_miss(&mut self, class: ClassIndex) {
        self.classes[class as usize].stats.misses += 1;
    }

    /// Inserts `key` into class `class` (or rewrites it: a new size or class re-inserts it).
    /// Returns whether it is cached afterwards.
    pub fn insert(&mut self, key: u64, size: u32, class: ClassIndex) -> bool {
        self.insert_with(key, size, class, |_, _| {})
    }

    /// [`ClassedCache::insert`], calling `on_evict(key, size)` for every object evicted.
    pub fn insert_with<F: FnMut(u64, u32)>(
        &mut self,
        key: u64,
        size: u32,
        class: ClassIndex,
        mut on_evict: F,
    ) -> bool {
        let known_absent = self.reported_miss.take() == Some(key);
        if !known_absent {
            if let Some(slot) = self.store.find(key) {
                let own = self.slot_class[slot as usize];
                if own == class && self.store.nodes[slot as usize].size == size {
                    self.classes[own as usize]
                        .policy
                        .on_hit(&mut self.store.nodes, slot);
                    return true;
                }
                self.remove_slot(slot);
                return self.insert_new(key, size, class, false, &mut on_evict);
            }
        }
        self.insert_new(key, size, class, !known_absent, &mut on_evict)
    }

    fn insert_new<F: FnMut(u64, u32)>(
        &mut self,
        key: u64,
        size: u32,
        class: ClassIndex,
        report_miss: bool,
        on_evict: &mut F,
    ) -> bool {
        let c = class as usize;
        if report_miss {
            self.classes[c].policy.on_miss(key);
        }
        if self.classes[c].never_cached {
            self.classes[c].stats.bypassed += 1;
            return false;
        }
        let limit = self.classes[c].limit;
        if !self.capacity.can_hold(size)
            || !limit.can_hold(size)
            || !self.classes[c].policy.can_admit(size)
        {
            self.classes[c].stats.refused += 1;
            return false;
        }
        // The class's own cap: make room among its own objects (hard pins refuse instead).
        loop {
            let s = &self.classes[c].stats;
            if !limit.exceeded_by(s.objects + 1, s.bytes + u64::from(size)) {
                break;
            }
            if self.classes[c].pinning == Pinning::Hard || self.evict_from(class, on_evict) == NIL {
                self.classes[c].stats.refused += 1;
                return false;
            }
        }
        // The whole cache: selective eviction, fenced by the incoming class's rank.
        let rank = self.classes[c].rank;
        while self
            .capacity
            .exceeded_by(self.store.len() + 1, self.store.bytes() + u64::from(size))
        {
            match self.victim_class(rank) {
                Some(victim) => {
                    self.evict_from(victim, on_evict);
                }
                None => {
                    self.classes[c].stats.fenced += 1;
                    return false;
                }
            }
        }
        if !self.classes[c].policy.admit_after_evictions(key, size) {
            self.classes[c].stats.refused += 1;
            return false;
        }
        let Some(slot) = self.store.insert(key, size) else {
            return false;
        };
        if self.slot_class.len() <= slot as usize {
            self.slot_class.resize(slot as usize + 1, 0);
        }
        self.slot_class[slot as usize] = class;
        let state = &mut self.classes[c];
        state.policy.on_insert(&mut self.store.nodes, slot);
        state.stats.objects += 1;
        state.stats.bytes += u64::from(size);
        state.stats.peak_bytes = state.stats.peak_bytes.max(state.stats.bytes);
        true
    }

    /// The most evictable non-empty class that a class of rank `incoming` may evict from
    /// (`None` rank: a hard-pinned class, which may evict any evictable class).
    #[inline]
    fn victim_class(&self, incoming: Option<u16>) -> Option<ClassIndex> {
        for &v in &self.eviction_order {
            let state = &self.classes[v as usize];
            if let (Some(need), Some(have)) = (incoming, state.rank) {
                if have < need {
                    return None;
                }
            }
            if state.stats.objects > 0 {
                return Some(v);
            }
        }
        None
    }

    /// Evicts one object of `class`; returns its freed slot or `NIL` if the class is empty.
    fn evict_from<F: FnMut(u64, u32)>(&mut self, class: ClassIndex, on_evict: &mut F) -> Slot {
        let state = &mut self.classes[class as usize];
        debug_assert!(
            state.pinning != Pinning::Hard,
            "hard-pinned objects are never evicted"
        );
        let victim = state.policy.evict(&mut self.store.nodes);
        if victim != NIL {
            let node = self.store.nodes[victim as usize];
            self.store.remove(victim);
            state.stats.objects -= 1;
            state.stats.bytes -= u64::from(node.size);
            state.stats.evictions += 1;
            self.evictions += 1;
            on_evict(node.key, node.size);
        }
        victim
    }

    fn remove_slot(&mut self, slot: Slot) {
        let class = self.slot_class[slot as usize] as usize;
        let size = self.store.nodes[slot as usize].size;
        let state = &mut self.classes[class];
        state.policy.on_remove(&mut self.store.nodes, slot);
        state.stats.objects -= 1;
        state.stats.bytes -= u64::from(size);
        self.store.remove(slot);
    }

    /// Removes `key` if cached (not an eviction; hard pins do not prevent it).
    pub fn remove(&mut self, key: u64) -> bool {
        match self.store.find(key) {
            Some(slot) => {
                self.remove_slot(slot);
                true
            }
            None => false,
        }
    }

    pub fn contains(&self, key: u64) -> bool {
        self.store.find(key).is_some()
    }

    pub fn object_size(&self, key: u64) -> Option<u32> {
        self.store
            .find(key)
            .map(|slot| self.store.nodes[slot as usize].size)
    }

    /// Evicts up to `n` objects in selective-eviction order (hard-pinned never).
    pub fn evict(&mut self, n: u64) -> u64 {
        self.evict_with(n, |_, _| {})
    }

    pub fn evict_with<F: FnMut(u64, u32)>(&mut self, n: u64, mut on_evict: F) -> u64 {
        let mut evicted = 0;
        while evicted < n {
            let Some(victim) = self.victim_class(None) else {
                break;
            };
            self.evict_from(victim, &mut on_evict);
            evicted += 1;
        }
        evicted
    }

    pub fn set_capacity(&mut self, capacity: Capacity) -> u64 {
        self.set_capacity_with(capacity, |_, _| {})
    }

    /// Changes the capacity (and with it every class's cap) and evicts down to them at once.
    /// Hard-pinned objects stay even if they alone exceed the new limits.
    pub fn set_capacity_with<F: FnMut(u64, u32)>(
        &mut self,
        capacity: Capacity,
        mut on_evict: F,
    ) -> u64 {
        self.capacity = capacity;
        let mut evicted = 0;
        for (i, spec) in self.set.classes().iter().enumerate() {
            let limit = class_limit(capacity, spec.allocation);
            let state = &mut self.classes[i];
            state.limit = limit;
            state.policy.on_capacity(limit);
        }
        for i in 0..self.classes.len() {
            if self.classes[i].pinning == Pinning::Hard {
                continue;
            }
            while {
                let s = &self.classes[i].stats;
                self.classes[i].limit.exceeded_by(s.objects, s.bytes)
            } && self.evict_from(i as ClassIndex, &mut on_evict) != NIL
            {
                evicted += 1;
            }
        }
        while capacity.exceeded_by(self.store.len(), self.store.bytes()) {
            let Some(victim) = self.victim_class(None) else {
                break;
            };
            self.evict_from(victim, &mut on_evict);
            evicted += 1;
        }
        evicted
    }

    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    pub fn len(&self) -> u64 {
        self.store.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn bytes(&self) -> u64 {
        self.store.bytes()
    }

    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Every cached `(key, size, class)`, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32, ClassIndex)> + '_ {
        self.store.slots().map(|slot| {
            let node = &self.store.nodes[slot as usize];
            (node.key, node.size, self.slot_class[slot as usize])
        })
    }

    /// Heap bytes of the metadata: slab, index, per-slot class bytes, algorithm state.
    pub fn metadata_bytes(&self) -> usize {
        self.store.heap_bytes()
            + self.slot_class.capacity()
            + self
                .classes
                .iter()
                .map(|c| c.policy.heap_bytes())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classes::RuleOp;

    const HEADER: &str = "IO class id,IO class name,Eviction priority,Allocation\n";

    fn cache(body: &str, capacity: Capacity) -> ClassedCache {
        let set = ClassSet::parse(&format!("{HEADER}{body}"), "test").unwrap();
        ClassedCache::new(Algorithm::Lru, capacity, set)
    }

    fn class_of_size(c: &ClassedCache, size: u32) -> ClassIndex {
        c.classify(&Probe {
            key: b"",
            size,
            offset: 0,
            op: RuleOp::Access,
            hint: None,
        })
    }

    #[test]
    fn highest_priority_number_is_evicted_first() {
        // size 1 -> class 1 (priority 1), size 2 -> class 2 (priority 9), else class 0 (5).
        let mut c = cache(
            "0,unclassified,5,1\n1,size:eq:1,1,1\n2,size:eq:2,9,1\n",
            Capacity::bytes(10),
        );
        let (k1, k2) = (class_of_size(&c, 1), class_of_size(&c, 2));
        assert_eq!((k1, k2), (1, 2));
        for k in 0..4 {
            assert!(c.insert(k, 1, k1));
        }
        for k in 10..13 {
            assert!(c.insert(k, 2, k2));
        }
        assert_eq!(c.bytes(), 10);
        let mut evicted = Vec::new();
        assert!(c.insert_with(20, 1, k1, |k, _| evicted.push(k)));
        assert_eq!(
            evicted,
            vec![10],
            "class 2 (priority 9) goes first, oldest first"
        );
        assert_eq!(c.stats(2).evictions, 1);
        assert_eq!(c.stats(1).objects, 5);
    }

    #[test]
    fn low_priority_classes_are_fenced_off_when_full() {
        let mut c = cache(
            "0,unclassified,200,1\n1,size:eq:1,1,1\n",
            Capacity::objects(3),
        );
        for k in 0..3 {
            assert!(c.insert(k, 1, 1));
        }
        assert!(
            !c.insert(100, 5, 0),
            "unclassified may not evict priority 1"
        );
        assert_eq!(c.stats(0).fenced, 1);
        assert_eq!(c.len(), 3);
        c.remove(0);
        assert!(c.insert(100, 5, 0), "free room is open to every class");
    }

    #[test]
    fn allocation_zero_is_never_cached_and_caps_evict_own_objects() {
        let mut c = cache(
            "0,unclassified,5,0\n1,size:eq:1,5,0.5\n",
            Capacity::objects(10),
        );
        assert!(!c.insert(1, 7, 0));
        assert_eq!(c.stats(0).bypassed, 1);
        for k in 0..8 {
            assert!(c.insert(k, 1, 1));
            assert!(c.stats(1).objects <= 5);
        }
        assert_eq!(c.stats(1).evictions, 3);
        assert!(!c.contains(0) && c.contains(7));
    }

    #[test]
    fn hard_pinned_class_refuses_at_its_cap_and_is_never_evicted() {
        let mut c = cache(
            "0,unclassified,5,1\n1,size:eq:1,,0.3\n",
            Capacity::objects(10),
        );
        for k in 0..5 {
            c.insert(k, 1, 1);
        }
        assert_eq!(c.stats(1).objects, 3);
        assert_eq!(c.stats(1).refused, 2);
        assert!(c.contains(0) && c.contains(1) && c.contains(2));
        for k in 100..200 {
            c.insert(k, 9, 0);
        }
        assert!(c.contains(0) && c.contains(1) && c.contains(2));
        assert_eq!(c.evict(1000), 7);
        assert_eq!(c.len(), 3);
        c.set_capacity(Capacity::objects(1));
        assert_eq!(c.len(), 3, "hard pins survive a capacity cut");
    }

    #[test]
    fn soft_pinned_goes_only_when_nothing_else_is_left() {
        let mut c = cache(
            "0,unclassified,0,1\n1,size:eq:1,soft,1\n",
            Capacity::objects(4),
        );
        c.insert(1, 1, 1);
        c.insert(2, 1, 1);
        c.insert(3, 5, 0);
        c.insert(4, 5, 0);
        let mut evicted = Vec::new();
        c.evict_with(3, |k, _| evicted.push(k));
        assert_eq!(evicted, vec![3, 4, 1]);
        // Unpinned data cannot push soft-pinned data out.
        let mut c = cache(
            "0,unclassified,0,1\n1,size:eq:1,soft,1\n",
            Capacity::objects(2),
        );
        c.insert(1, 1, 1);
        c.insert(2, 1, 1);
        assert!(!c.insert(3, 5, 0));
        assert!(c.insert(4, 1, 1), "soft-pinned data replaces its own");
    }

    #[test]
    fn rewriting_moves_an_object_to_its_new_class() {
        let mut c = cache(
            "0,unclassified,5,1\n1,size:le:10,5,1\n",
            Capacity::bytes(1000),
        );
        c.insert(7, 5, 1);
        assert_eq!(c.class_of(7), Some(1));
        c.insert(7, 50, 0);
        assert_eq!(c.class_of(7), Some(0));
        assert_eq!((c.stats(0).bytes, c.stats(1).bytes), (50, 0));
        assert_eq!(c.evictions(), 0);
        assert!(c.get(7, 0));
        assert!(!c.get(8, 1));
        assert_eq!((c.stats(0).hits, c.stats(1).misses), (1, 1));
    }
}
