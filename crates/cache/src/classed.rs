//! The class layer of the cache ([`crate::classes`]): selective allocation and selective
//! eviction as seed 004 describes them, with allocation caps and soft and hard pinning.
//! `Cache<Classes>` ([`ClassedCache`]) is the one [`crate::Cache`] with this layer: the same
//! slab and index (a key is found with one probe whatever its class), one instance of the
//! chosen eviction algorithm per class over its own objects.
//!
//! Rules, in the order an insertion applies them:
//! 1. a class with allocation 0 is never cached (`bypassed`);
//! 2. a class at its allocation cap makes room among its own objects; a hard-pinned class
//!    refuses instead (`refused`): it never evicts anything of its own;
//! 3. while the cache is full, the victim is the oldest object (in the algorithm's sense) of
//!    the most evictable non-empty class: unpinned classes by descending priority number,
//!    then soft-pinned ones; hard-pinned never. A class may only evict classes at least as
//!    evictable as itself, so a low-priority class is fenced off under pressure (`fenced`).
//!
//! Rewriting a cached object with the same size and class is an access; a new size or class
//! re-inserts it into the queue of its (new) class.

use crate::classes::{ClassIndex, ClassSet, ClassSpec, Pinning, Probe};
use crate::eviction::{EvictionPolicy, Evictor};
use crate::layer::{ClassLayer, Rewrite};
use crate::slab::Slot;
use crate::{Algorithm, Cache, Capacity};

/// The cache with classes.
pub type ClassedCache = Cache<Classes>;

/// Counters of one class (in replay's JSON, beside the class's settings).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
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

/// One class's rule, settings, cap and counters, as both hosts report them (replay's
/// `classes` array, the server's `INFO` and `CACHE STATS`).
#[derive(Clone, Debug, PartialEq)]
pub struct ClassFigures {
    pub id: u8,
    /// The rule column as written (`unclassified` for class 0).
    pub rule: String,
    /// `None` for hard-pinned classes.
    pub priority: Option<u8>,
    /// `none`, `soft` or `hard`.
    pub pinning: &'static str,
    pub allocation: f64,
    /// The largest objects and bytes the class may hold now.
    pub limit: Capacity,
    pub stats: ClassStats,
}

struct ClassState {
    queue: Evictor,
    limit: Capacity,
    rank: Option<u16>,
    pinning: Pinning,
    never_cached: bool,
    stats: ClassStats,
}

/// The class layer: the class file's rules, one queue and set of counters per class.
pub struct Classes {
    set: ClassSet,
    classes: Vec<ClassState>,
    /// Class of the object in each slab slot.
    slot_class: Vec<ClassIndex>,
    /// Evictable classes, most evictable first.
    eviction_order: Vec<ClassIndex>,
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

impl Classes {
    fn new(algorithm: Algorithm, capacity: Capacity, set: ClassSet) -> Classes {
        let classes: Vec<ClassState> = set
            .classes()
            .iter()
            .map(|spec| {
                let limit = class_limit(capacity, spec.allocation);
                ClassState {
                    queue: Evictor::new(algorithm, limit),
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
        Classes {
            set,
            classes,
            slot_class: Vec::new(),
            eviction_order,
        }
    }

    pub fn class_set(&self) -> &ClassSet {
        &self.set
    }

    /// The most evictable non-empty class that a class of rank `incoming` may evict from
    /// (`None` rank: a hard-pinned class or an explicit eviction, which may evict any
    /// evictable class).
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
}

impl Cache<Classes> {
    /// A cache whose objects are divided by the classes of `set`.
    pub fn with_classes(algorithm: Algorithm, capacity: Capacity, set: ClassSet) -> Self {
        Cache::with_layer(algorithm, capacity, Classes::new(algorithm, capacity, set))
    }

    pub fn class_set(&self) -> &ClassSet {
        &self.layer().set
    }

    pub fn specs(&self) -> &[ClassSpec] {
        self.layer().set.classes()
    }

    /// Counters of class `index`.
    pub fn stats(&self, index: ClassIndex) -> ClassStats {
        self.layer().classes[index as usize].stats
    }

    /// The largest objects and bytes class `index` may hold.
    pub fn class_limit(&self, index: ClassIndex) -> Capacity {
        self.layer().classes[index as usize].limit
    }

    /// Looks `key` up on behalf of a request of class `class`; see [`Cache::get_as`].
    #[inline]
    pub fn get(&mut self, key: u64, class: ClassIndex) -> bool {
        self.get_as(key, class)
    }

    /// Inserts `key` into class `class` (or rewrites it: a new size or class re-inserts it).
    /// Returns whether it is cached afterwards.
    pub fn insert(&mut self, key: u64, size: u32, class: ClassIndex) -> bool {
        self.insert_as(key, size, class, |_, _| {}).is_some()
    }

    /// [`ClassedCache::insert`], calling `on_evict(key, size)` for every object evicted.
    pub fn insert_with<F: FnMut(u64, u32)>(
        &mut self,
        key: u64,
        size: u32,
        class: ClassIndex,
        on_evict: F,
    ) -> bool {
        self.insert_as(key, size, class, on_evict).is_some()
    }

    /// Every cached `(key, size, class)`, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32, ClassIndex)> + '_ {
        self.objects()
    }
}

impl ClassLayer for Classes {
    type Class = ClassIndex;
    const CLASSED: bool = true;

    #[inline]
    fn classify(&self, probe: &Probe) -> ClassIndex {
        self.set.classify(probe)
    }

    #[inline]
    fn uses_key(&self) -> bool {
        self.set.uses_key()
    }

    fn figures(&self) -> Vec<ClassFigures> {
        self.set
            .classes()
            .iter()
            .zip(&self.classes)
            .map(|(spec, state)| ClassFigures {
                id: spec.id,
                rule: spec.name.clone(),
                priority: (spec.pinning != Pinning::Hard).then_some(spec.priority),
                pinning: match spec.pinning {
                    Pinning::None => "none",
                    Pinning::Soft => "soft",
                    Pinning::Hard => "hard",
                },
                allocation: spec.allocation,
                limit: state.limit,
                stats: state.stats,
            })
            .collect()
    }

    fn fresh(&self, algorithm: Algorithm, capacity: Capacity) -> Self {
        Classes::new(algorithm, capacity, self.set.clone())
    }

    #[inline]
    fn queue(&mut self, class: ClassIndex) -> &mut Evictor {
        &mut self.classes[class as usize].queue
    }

    #[inline]
    fn class_at(&self, slot: Slot) -> ClassIndex {
        self.slot_class[slot as usize]
    }

    #[inline]
    fn count_lookup(&mut self, class: ClassIndex, hit: bool) {
        let stats = &mut self.classes[class as usize].stats;
        if hit {
            stats.hits += 1;
        } else {
            stats.misses += 1;
        }
    }

    #[inline]
    fn bypasses(&mut self, class: ClassIndex) -> bool {
        let state = &mut self.classes[class as usize];
        if state.never_cached {
            state.stats.bypassed += 1;
        }
        state.never_cached
    }

    #[inline]
    fn too_big_for_class(&self, class: ClassIndex, size: u32) -> bool {
        !self.classes[class as usize].limit.can_hold(size)
    }

    fn count_refused(&mut self, class: ClassIndex) {
        self.classes[class as usize].stats.refused += 1;
    }

    fn count_fenced(&mut self, class: ClassIndex) {
        self.classes[class as usize].stats.fenced += 1;
    }

    #[inline]
    fn over_own_cap(&self, class: ClassIndex, size: u32) -> bool {
        let state = &self.classes[class as usize];
        let s = &state.stats;
        state
            .limit
            .exceeded_by(s.objects + 1, s.bytes + u64::from(size))
    }

    #[inline]
    fn never_evicts(&self, class: ClassIndex) -> bool {
        self.classes[class as usize].pinning == Pinning::Hard
    }

    #[inline]
    fn victim_for(&self, class: ClassIndex) -> Option<ClassIndex> {
        self.victim_class(self.classes[class as usize].rank)
    }

    #[inline]
    fn any_victim(&self) -> Option<ClassIndex> {
        self.victim_class(None)
    }

    #[inline]
    fn rewrite(&self, own: ClassIndex, class: ClassIndex, old: u32, new: u32) -> Rewrite {
        if own == class && old == new {
            Rewrite::Touch
        } else {
            Rewrite::Reinsert
        }
    }

    #[inline]
    fn stored(&mut self, slot: Slot, class: ClassIndex, size: u32) {
        if self.slot_class.len() <= slot as usize {
            self.slot_class.resize(slot as usize + 1, 0);
        }
        self.slot_class[slot as usize] = class;
        let stats = &mut self.classes[class as usize].stats;
        stats.objects += 1;
        stats.bytes += u64::from(size);
        stats.peak_bytes = stats.peak_bytes.max(stats.bytes);
    }

    #[inline]
    fn left(&mut self, class: ClassIndex, size: u32, evicted: bool) {
        let state = &mut self.classes[class as usize];
        debug_assert!(
            !(evicted && state.pinning == Pinning::Hard),
            "hard-pinned objects are never evicted"
        );
        state.stats.objects -= 1;
        state.stats.bytes -= u64::from(size);
        if evicted {
            state.stats.evictions += 1;
        }
    }

    fn set_capacity(&mut self, capacity: Capacity) {
        for (spec, state) in self.set.classes().iter().zip(&mut self.classes) {
            state.limit = class_limit(capacity, spec.allocation);
            state.queue.on_capacity(state.limit);
        }
    }

    fn capped_classes(&self) -> usize {
        self.classes.len()
    }

    fn over_limit(&self, i: usize) -> Option<ClassIndex> {
        let state = &self.classes[i];
        let s = &state.stats;
        (state.pinning != Pinning::Hard && state.limit.exceeded_by(s.objects, s.bytes))
            .then_some(i as ClassIndex)
    }

    fn heap_bytes(&self) -> usize {
        self.slot_class.capacity()
            + self
                .classes
                .iter()
                .map(|c| c.queue.heap_bytes())
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
        ClassedCache::with_classes(Algorithm::Lru, capacity, set)
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

    /// With one unpinned class of allocation 1 the class layer must make every decision the
    /// plain cache makes: both run the same code, asking different layers. S3-FIFO is left
    /// out: its victims under a class file differ from the plain cache's (from step 37 of this
    /// stream), exactly as they did with the separate `ClassedCache` before the two shared
    /// code, and that behaviour is kept.
    #[test]
    fn one_class_decides_exactly_like_the_plain_cache() {
        // BeladySize caches nothing without next access times (tested with them elsewhere).
        for alg in Algorithm::ALL
            .into_iter()
            .filter(|&a| a != Algorithm::S3Fifo && a != Algorithm::BeladySize)
        {
            let capacity = Capacity {
                bytes: Some(300),
                objects: Some(50),
            };
            let set = ClassSet::parse(&format!("{HEADER}0,unclassified,5,1\n"), "t").unwrap();
            let mut classed = Cache::with_classes(alg, capacity, set);
            let mut plain = Cache::new(alg, capacity);
            let (mut plain_victims, mut classed_victims) = (Vec::new(), Vec::new());
            // xorshift64: a fixed stream of keys.
            let mut x = 99u64;
            for i in 0..20_000u32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = x % 200;
                let size = 1 + (key % 7) as u32;
                let hit = plain.get(key);
                assert_eq!(classed.get(key, 0), hit, "{alg} {i}");
                if !hit {
                    assert_eq!(
                        plain.insert_with(key, size, |k, _| plain_victims.push(k)),
                        classed.insert_with(key, size, 0, |k, _| classed_victims.push(k)),
                        "{alg} {i}"
                    );
                }
                if i % 97 == 0 {
                    assert_eq!(plain.remove(key), classed.remove(key));
                }
                if i % 1000 == 0 {
                    plain.evict_with(3, |k, _| plain_victims.push(k));
                    classed.evict_with(3, |k, _| classed_victims.push(k));
                }
                if i % 2500 == 0 {
                    let cut = Capacity {
                        objects: Some(if i % 5000 == 0 { 30 } else { 50 }),
                        ..capacity
                    };
                    plain.set_capacity_with(cut, |k, _| plain_victims.push(k));
                    classed.set_capacity_with(cut, |k, _| classed_victims.push(k));
                }
            }
            assert_eq!(plain_victims, classed_victims, "{alg}");
            let s = classed.stats(0);
            assert_eq!(
                (s.evictions, s.objects, s.bytes),
                (plain.evictions(), plain.len(), plain.bytes())
            );
            assert!(!plain_victims.is_empty());
        }
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
