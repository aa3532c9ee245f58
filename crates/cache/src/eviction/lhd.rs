//! LHD, Least Hit Density (Beckmann et al., NSDI'18), as libCacheSim 0.3.5's `LHD/lhd.cpp`
//! runs it with its defaults (associativity 32, 8 admissions):
//!
//! - Every object has an age: requests (hits and insertions, libCacheSim's `timestamp`)
//!   since its last one, shifted down by a coarsening (initially 10 bits) and capped at
//!   `MAX_AGE - 1`. Objects fall into 16 classes by the sum of their last two hit ages
//!   (roughly its logarithm).
//! - A class's hit density at age `a` is the hits it saw at ages above `a` over the lifetime
//!   still ahead of objects that reached `a`; an object's rank is its class's density at its
//!   age divided by its size. Until the first reconfiguration every class uses
//!   `(class + 1) / (age + 1)`, libCacheSim's GDSF-like start.
//! - A victim is the lowest rank among 8 objects drawn at random (32 after the 51st
//!   reconfiguration) and the last 8 objects admitted with a rank below the recent victims'
//!   moving average. An object at the capped age ranks below everything.
//! - Every 2^20 accesses the per-class hit and eviction counts decay by 0.9 and the
//!   densities are recomputed; at the 6th and the 26th the coarsening is set from the number
//!   of cached objects and the counts are stretched or compressed to it.
//! - One access in 32 (drawn) makes its object an explorer, ranked one higher, while 1% of
//!   the capacity is left for explorers and fewer than 50 reconfigurations have run.
//!
//! The generator is libCacheSim's own ([`NextRand`]) started where a fresh libCacheSim
//! process starts it, the objects are kept in libCacheSim's order (appended on insertion,
//! the last moved into a removed object's place) and all arithmetic is libCacheSim's single
//! precision, so a replay agrees decision for decision with libCacheSim's. libCacheSim
//! keeps 256 classes of which its simulator only ever uses 16 (one application); only those
//! are kept here. A cache limited only in objects counts every object as size 1 ([`Units`]).

use super::next_rand::NextRand;
use super::{EvictionPolicy, Units};
use crate::slab::{Node, Slot, NIL};
use crate::Capacity;

const MAX_AGE: u64 = 20_000;
const HIT_AGE_CLASSES: usize = 16;
/// libCacheSim numbers the classes `app * 16 + hit age class` with `app` 1; the number
/// enters the initial densities.
const FIRST_CLASS: usize = HIT_AGE_CLASSES;
const ACCESSES_PER_RECONFIGURATION: u64 = 1 << 20;
const EWMA_DECAY: f32 = 0.9;
const EXPLORER_BUDGET_FRACTION: f32 = 0.01;
const EXPLORE_INVERSE_PROBABILITY: u64 = 32;
/// Recently admitted objects always considered as victims.
const ADMISSIONS: usize = 8;
const ASSOCIATIVITY: u32 = 32;
/// Candidates drawn until the policy has settled (libCacheSim's warm-up shortcut).
const EARLY_CANDIDATES: u32 = 8;
const SETTLED_AFTER_RECONFIGURATIONS: u32 = 50;
const AGE_COARSENING_ERROR_TOLERANCE: f32 = 0.01;
const INITIAL_AGE_COARSENING_SHIFT: u64 = 10;

/// What LHD knows about one cached object (libCacheSim's `Tag`).
#[derive(Clone, Copy, Debug)]
struct Tag {
    /// The access count at its last access.
    timestamp: u64,
    /// Its size in units, as libCacheSim's `float`.
    size: f32,
    slot: Slot,
    /// Its last two hit ages (below `MAX_AGE`; `MAX_AGE` before the first hit).
    last_hit_age: u16,
    last_last_hit_age: u16,
    /// Its hit age class, kept because it changes only with the hit ages.
    class: u8,
    explorer: bool,
}

/// Per-class statistics, indexed by age.
struct Class {
    hits: Box<[f32]>,
    evictions: Box<[f32]>,
    densities: Box<[f32]>,
}

impl Class {
    fn new(number: usize) -> Class {
        let densities = (0..MAX_AGE)
            .map(|a| ((number + 1) as f64 / (a + 1) as f64) as f32)
            .collect();
        Class {
            hits: vec![0.0; MAX_AGE as usize].into_boxed_slice(),
            evictions: vec![0.0; MAX_AGE as usize].into_boxed_slice(),
            densities,
        }
    }

    /// libCacheSim's `updateClass` (its totals only feed debugging output).
    fn decay(&mut self) {
        for h in self.hits.iter_mut() {
            *h *= EWMA_DECAY;
        }
        for e in self.evictions.iter_mut() {
            *e *= EWMA_DECAY;
        }
    }

    /// libCacheSim's `modelHitDensity`: from the oldest age down, hits still ahead over the
    /// lifetime still ahead, accumulated in one pass.
    fn model_hit_density(&mut self) {
        let last = MAX_AGE as usize - 1;
        let mut total_events = self.hits[last] + self.evictions[last];
        let mut total_hits = self.hits[last];
        let mut lifetime = total_events;
        for a in (0..last).rev() {
            total_hits += self.hits[a];
            total_events += self.hits[a] + self.evictions[a];
            lifetime += total_events;
            self.densities[a] = if f64::from(total_events) > 1e-5 {
                total_hits / lifetime
            } else {
                0.0
            };
        }
    }

    /// Counts kept at coarsening `shift` re-binned for `shift - by` (libCacheSim's stretch).
    fn stretch(&mut self, by: u32) {
        let last = MAX_AGE as usize - 1;
        for counts in [&mut self.hits, &mut self.evictions] {
            for a in (MAX_AGE as usize >> by)..last {
                counts[last] += counts[a];
            }
            for a in (0..last).rev() {
                counts[a] = counts[a >> by] / (1u32 << by) as f32;
            }
        }
    }

    /// Counts kept at coarsening `shift` re-binned for `shift + by` (libCacheSim's compress).
    fn compress(&mut self, by: u32) {
        let last = MAX_AGE as usize - 1;
        let kept = MAX_AGE as usize >> by;
        for counts in [&mut self.hits, &mut self.evictions] {
            for a in 0..kept {
                counts[a] = counts[a << by];
                for i in 1..(1usize << by) {
                    counts[a] += counts[(a << by) + i];
                }
            }
            for c in &mut counts[kept..last] {
                *c = 0.0;
            }
        }
    }
}

/// libCacheSim's `hitAgeClass`: about `log2(MAX_AGE / age)`, 15 for age 0.
fn hit_age_class(age: u64) -> u8 {
    if age == 0 {
        return HIT_AGE_CLASSES as u8 - 1;
    }
    let (mut age, mut log) = (age, 0u8);
    while age < MAX_AGE && usize::from(log) < HIT_AGE_CLASSES - 1 {
        age <<= 1;
        log += 1;
    }
    log
}

/// One of the last admitted objects: its key (libCacheSim keeps ids, so a key evicted and
/// admitted again counts again) and its slot while cached.
#[derive(Clone, Copy, Debug)]
struct Admitted {
    key: u64,
    slot: Slot,
}

pub(crate) struct Lhd {
    units: Units,
    /// The cached objects in libCacheSim's order (what a draw indexes).
    tags: Vec<Tag>,
    /// Position in `tags` of each slot's object.
    position: Vec<u32>,
    classes: Vec<Class>,
    recently_admitted: [Admitted; ADMISSIONS],
    recently_admitted_head: u64,
    /// Accesses so far (hits and insertions).
    timestamp: u64,
    next_reconfiguration: u64,
    reconfigurations: u32,
    age_coarsening_shift: u64,
    ewma_objects: f32,
    ewma_objects_mass: f32,
    ewma_victim_hit_density: f32,
    /// Units explorers may still take (libCacheSim's `int64_t`, updated through `float`).
    explorer_budget: i64,
    rng: NextRand,
}

impl Lhd {
    pub fn new(capacity: Capacity) -> Lhd {
        let units = Units::of(capacity);
        Lhd {
            units,
            tags: Vec::new(),
            position: Vec::new(),
            classes: (0..HIT_AGE_CLASSES)
                .map(|c| Class::new(FIRST_CLASS + c))
                .collect(),
            recently_admitted: [Admitted {
                // libCacheSim's INVALID_CANDIDATE, id -1.
                key: u64::MAX,
                slot: NIL,
            }; ADMISSIONS],
            recently_admitted_head: 0,
            timestamp: 0,
            next_reconfiguration: ACCESSES_PER_RECONFIGURATION,
            reconfigurations: 0,
            age_coarsening_shift: INITIAL_AGE_COARSENING_SHIFT,
            ewma_objects: 0.0,
            ewma_objects_mass: 0.0,
            ewma_victim_hit_density: 0.0,
            explorer_budget: explorer_budget(units),
            rng: NextRand::default(),
        }
    }

    #[inline]
    fn age(&self, tag: &Tag) -> u64 {
        ((self.timestamp - tag.timestamp) >> self.age_coarsening_shift).min(MAX_AGE - 1)
    }

    #[inline]
    fn hit_density(&self, tag: &Tag) -> f32 {
        let age = self.age(tag);
        if age == MAX_AGE - 1 {
            return f32::MIN;
        }
        let density = self.classes[usize::from(tag.class)].densities[age as usize] / tag.size;
        if tag.explorer {
            density + 1.0
        } else {
            density
        }
    }

    /// libCacheSim's `update`, the part after the hit or insertion bookkeeping.
    #[inline]
    fn accessed(&mut self, at: usize, size: f32, inserted: bool, key: u64) {
        let timestamp = self.timestamp;
        let explore = self.rng.next().is_multiple_of(EXPLORE_INVERSE_PROBABILITY);
        let explorer = explore
            && self.explorer_budget > 0
            && self.reconfigurations < SETTLED_AFTER_RECONFIGURATIONS;
        if explorer {
            self.explorer_budget = (self.explorer_budget as f32 - size) as i64;
        }
        let tag = &mut self.tags[at];
        tag.timestamp = timestamp;
        tag.size = size;
        tag.explorer = explorer;
        if inserted && !explore {
            let tag = self.tags[at];
            if self.hit_density(&tag) < self.ewma_victim_hit_density {
                let i = (self.recently_admitted_head % ADMISSIONS as u64) as usize;
                self.recently_admitted[i] = Admitted {
                    key,
                    slot: tag.slot,
                };
                self.recently_admitted_head += 1;
            }
        }
        self.timestamp += 1;
        self.next_reconfiguration -= 1;
        if self.next_reconfiguration == 0 {
            self.reconfigure();
            self.next_reconfiguration = ACCESSES_PER_RECONFIGURATION;
            self.reconfigurations += 1;
        }
    }

    /// libCacheSim's `rank`: the lowest hit density among random draws and recent admissions.
    fn victim(&mut self) -> usize {
        let candidates = if self.reconfigurations > SETTLED_AFTER_RECONFIGURATIONS {
            ASSOCIATIVITY
        } else {
            EARLY_CANDIDATES
        };
        let n = self.tags.len() as u64;
        let mut victim = usize::MAX;
        let mut victim_rank = f32::MAX;
        let mut first = usize::MAX;
        for _ in 0..candidates {
            let at = (self.rng.next() % n) as usize;
            if first == usize::MAX {
                first = at;
            }
            let rank = self.hit_density(&self.tags[at]);
            if rank < victim_rank {
                victim = at;
                victim_rank = rank;
            }
        }
        for admitted in self.recently_admitted {
            if admitted.slot == NIL {
                continue;
            }
            let at = self.position[admitted.slot as usize] as usize;
            let rank = self.hit_density(&self.tags[at]);
            if rank < victim_rank {
                victim = at;
                victim_rank = rank;
            }
        }
        self.ewma_victim_hit_density =
            EWMA_DECAY * self.ewma_victim_hit_density + (1.0 - EWMA_DECAY) * victim_rank;
        if victim == usize::MAX {
            // Nothing ranked below f32::MAX (zero-size objects rank infinite or NaN), where
            // libCacheSim would index out of bounds: take the first draw.
            first
        } else {
            victim
        }
    }

    /// Unlinks the object at `at` (libCacheSim moves the last one into its place).
    fn forget(&mut self, at: usize) -> Slot {
        let slot = self.tags[at].slot;
        self.tags.swap_remove(at);
        if let Some(moved) = self.tags.get(at) {
            self.position[moved.slot as usize] = at as u32;
        }
        for admitted in &mut self.recently_admitted {
            if admitted.slot == slot {
                admitted.slot = NIL;
            }
        }
        slot
    }

    fn reconfigure(&mut self) {
        for class in &mut self.classes {
            class.decay();
        }
        self.adapt_age_coarsening();
        for class in &mut self.classes {
            class.model_hit_density();
        }
    }

    /// libCacheSim's `adaptAgeCoarsening`: a coarsening that spreads the cached objects'
    /// lifetimes over the ages, set at the 6th and the 26th reconfiguration.
    fn adapt_age_coarsening(&mut self) {
        self.ewma_objects *= EWMA_DECAY;
        self.ewma_objects_mass *= EWMA_DECAY;
        self.ewma_objects += self.tags.len() as f32;
        self.ewma_objects_mass = (f64::from(self.ewma_objects_mass) + 1.0) as f32;
        let objects = self.ewma_objects / self.ewma_objects_mass;
        let optimal = (f64::from(objects)
            / f64::from(AGE_COARSENING_ERROR_TOLERANCE * MAX_AGE as f32))
            as f32;
        if self.reconfigurations != 5 && self.reconfigurations != 25 {
            return;
        }
        let mut log2 = 1u32;
        while ((1i64 << log2) as f32) < optimal {
            log2 += 1;
        }
        let delta = i64::from(log2) - self.age_coarsening_shift as i64;
        self.age_coarsening_shift = u64::from(log2);
        self.ewma_objects *= 8.0;
        self.ewma_objects_mass *= 8.0;
        for class in &mut self.classes {
            if delta < 0 {
                class.stretch((-delta) as u32);
            } else if delta > 0 {
                class.compress(delta as u32);
            }
        }
    }
}

/// `cache_size * 0.01` in libCacheSim's single precision.
fn explorer_budget(units: Units) -> i64 {
    (units.total as f32 * EXPLORER_BUDGET_FRACTION) as i64
}

impl EvictionPolicy for Lhd {
    #[inline]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        let at = self.position[slot as usize] as usize;
        let tag = self.tags[at];
        let age = self.age(&tag);
        self.classes[usize::from(tag.class)].hits[age as usize] += 1.0;
        if tag.explorer {
            self.explorer_budget = (self.explorer_budget as f32 + tag.size) as i64;
        }
        let tag = &mut self.tags[at];
        tag.last_last_hit_age = tag.last_hit_age;
        tag.last_hit_age = age as u16;
        tag.class = hit_age_class(u64::from(tag.last_hit_age) + u64::from(tag.last_last_hit_age));
        let node = nodes[slot as usize];
        let size = self.units.of_size(node.size) as f32;
        self.accessed(at, size, false, node.key);
    }

    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        let i = slot as usize;
        if i >= self.position.len() {
            self.position.resize(i + 1, 0);
        }
        self.position[i] = self.tags.len() as u32;
        self.tags.push(Tag {
            timestamp: 0,
            size: 0.0,
            slot,
            last_hit_age: 0,
            last_last_hit_age: MAX_AGE as u16,
            class: hit_age_class(MAX_AGE),
            explorer: false,
        });
        let node = nodes[i];
        for admitted in &mut self.recently_admitted {
            if admitted.key == node.key {
                admitted.slot = slot;
            }
        }
        let size = self.units.of_size(node.size) as f32;
        self.accessed(self.tags.len() - 1, size, true, node.key);
    }

    fn evict(&mut self, _nodes: &mut [Node]) -> Slot {
        if self.tags.is_empty() {
            return NIL;
        }
        let at = self.victim();
        // libCacheSim's `replaced`: the eviction counts for the victim's class and age.
        let tag = self.tags[at];
        let age = self.age(&tag);
        self.classes[usize::from(tag.class)].evictions[age as usize] += 1.0;
        if tag.explorer {
            self.explorer_budget = (self.explorer_budget as f32 + tag.size) as i64;
        }
        self.forget(at)
    }

    fn on_remove(&mut self, _nodes: &mut [Node], slot: Slot) {
        // As libCacheSim's `LHD_remove`: no statistics, an explorer's budget is not returned.
        let at = self.position[slot as usize] as usize;
        self.forget(at);
    }

    fn on_capacity(&mut self, capacity: Capacity) {
        let units = Units::of(capacity);
        // What explorers hold now stays held; the budget moves with the capacity.
        self.explorer_budget += explorer_budget(units) - explorer_budget(self.units);
        self.units = units;
    }

    fn heap_bytes(&self) -> usize {
        self.tags.capacity() * size_of::<Tag>()
            + self.position.capacity() * size_of::<u32>()
            + self.classes.len() * 3 * MAX_AGE as usize * size_of::<f32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Harness;

    #[test]
    fn hit_age_classes_are_log_scaled() {
        assert_eq!(hit_age_class(0), 15);
        assert_eq!(hit_age_class(MAX_AGE), 0);
        assert_eq!(hit_age_class(MAX_AGE - 1), 1);
        assert_eq!(hit_age_class(MAX_AGE / 2), 1);
        assert_eq!(hit_age_class(MAX_AGE / 2 - 1), 2);
        assert_eq!(hit_age_class(1), 15);
    }

    #[test]
    fn initial_densities_favour_small_young_objects() {
        let mut h = Harness::new(Lhd::new(Capacity::bytes(1_000)), Capacity::bytes(1_000));
        // A large object and a small one of the same age class: 8 draws from the two take
        // the large one as the victim (unless all 8 miss it, 1 in 256).
        h.access(1, 900);
        h.access(2, 100);
        h.access(3, 100);
        assert_eq!(h.evicted, vec![1]);
        assert_eq!(h.policy.tags.len(), h.store.len() as usize);
    }

    #[test]
    fn tags_follow_libcachesims_order_and_positions_stay_consistent() {
        let capacity = Capacity::objects(50);
        let mut h = Harness::new(Lhd::new(capacity), capacity);
        for i in 0..5_000u64 {
            h.access((i * 7919) % 173, 1);
            if i % 97 == 0 {
                if let Some(slot) = h.store.find((i * 31) % 173) {
                    h.policy.on_remove(&mut h.store.nodes, slot);
                    h.store.remove(slot);
                }
            }
            assert_eq!(h.policy.tags.len(), h.store.len() as usize);
            for (at, tag) in h.policy.tags.iter().enumerate() {
                assert_eq!(h.policy.position[tag.slot as usize] as usize, at);
                assert!(!h.store.nodes[tag.slot as usize].is_free());
            }
            for admitted in h.policy.recently_admitted {
                if admitted.slot != NIL {
                    assert_eq!(h.store.nodes[admitted.slot as usize].key, admitted.key);
                }
            }
        }
        assert!(h.evicted.len() > 1_000);
    }

    #[test]
    fn a_readmitted_key_is_a_recent_admission_again() {
        let capacity = Capacity::objects(4);
        let mut h = Harness::new(Lhd::new(capacity), capacity);
        h.policy.ewma_victim_hit_density = f32::MAX;
        h.policy.rng = NextRand::default();
        // Whatever the explore draw, keep the test about the bookkeeping: force no explorer.
        h.policy.explorer_budget = 0;
        let before = h.policy.recently_admitted_head;
        h.access(7, 1);
        let recorded = h.policy.recently_admitted_head - before;
        let slot = h.store.find(7).unwrap();
        if recorded == 1 {
            assert_eq!(h.policy.recently_admitted[0].slot, slot);
        }
        h.policy.on_remove(&mut h.store.nodes, slot);
        h.store.remove(slot);
        assert!(h.policy.recently_admitted.iter().all(|a| a.slot == NIL));
        h.access(8, 1);
        h.access(7, 1);
        let slot = h.store.find(7).unwrap();
        if recorded == 1 {
            assert_eq!(h.policy.recently_admitted[0].key, 7);
            assert_eq!(
                h.policy.recently_admitted[0].slot, slot,
                "found again by key"
            );
        }
    }

    #[test]
    fn reconfiguration_learns_densities_and_coarsens_ages() {
        // A cache of 64 objects over 1,000 keys: at the 6th reconfiguration the coarsening
        // is set for 64 objects (shift 1), which stretches the counts.
        let capacity = Capacity::objects(64);
        let mut h = Harness::new(Lhd::new(capacity), capacity);
        let mut x = 1u64;
        let accesses = 7 * ACCESSES_PER_RECONFIGURATION;
        let mut hits = 0u64;
        while h.policy.timestamp < accesses {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = (x >> 33) % (1 + (x >> 13) % 1_000);
            hits += u64::from(h.access(key, 1));
        }
        assert_eq!(h.policy.reconfigurations, 7);
        assert_eq!(h.policy.age_coarsening_shift, 1);
        let learned = &h.policy.classes[usize::from(hit_age_class(MAX_AGE))];
        assert!(learned.densities[0] > 0.0);
        assert_ne!(learned.densities[0], Class::new(FIRST_CLASS).densities[0]);
        assert!(hits > 0);
        assert!(h.policy.explorer_budget >= 0);
    }

    #[test]
    fn stretch_and_compress_rebin_the_counts() {
        let mut class = Class::new(FIRST_CLASS);
        for a in 0..MAX_AGE as usize {
            class.hits[a] = 1.0;
        }
        class.compress(2);
        // Four ages become one; the capped age keeps its own count (as in libCacheSim).
        assert_eq!(class.hits[0], 4.0);
        assert_eq!(class.hits[MAX_AGE as usize / 4 - 1], 4.0);
        assert_eq!(class.hits[MAX_AGE as usize / 4], 0.0);
        assert_eq!(class.hits[MAX_AGE as usize - 1], 1.0);
        let mut class = Class::new(FIRST_CLASS);
        class.hits[10] = 8.0;
        class.stretch(3);
        // Age 10 at the old coarsening spans ages 80..88 at the new one.
        assert_eq!(class.hits[80], 1.0);
        assert_eq!(class.hits[87], 1.0);
        assert_eq!(class.hits[88], 0.0);
    }
}
