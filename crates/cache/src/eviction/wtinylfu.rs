//! W-TinyLFU as libCacheSim 0.3.5's `WTinyLFU.c` runs it with its defaults
//! (`main-cache=SLRU,window-size=0.01`):
//!
//! - A window LRU of `floor(c * 0.01)` units that every new object enters, and a main SLRU
//!   of the rest with two segments (`seg-size=1:4`: probation 20%, protected 80%), run as
//!   libCacheSim's `SLRU.c` runs them (a new object takes the lowest segment with room; a
//!   hit in probation promotes, cooling protected's oldest back, and probation over its
//!   limit evicts).
//! - A frequency sketch ([`FrequencySketch`]) counts each insert, each main hit and each
//!   window victim considered; it is halved every `32 * main size` main hits.
//! - To make room the window's oldest object moves to main while main has room; otherwise
//!   it replaces main's victim if its estimated count is strictly higher, and that repeats
//!   with the window's next oldest until a window victim loses (and leaves) or the window is
//!   empty (main evicts). As in libCacheSim, the window is only bounded by what main leaves.
//! - Objects larger than the window, than probation or than main are never cached.
//!
//! One round of that can evict several objects, and a main hit can evict (probation over
//! its limit), neither of which the cache's calls allow: those victims leave the queues at
//! once and wait, still stored, in a "leaving" list that the cache empties first (see
//! [`EvictionPolicy::owes_eviction`]), so the decisions stay libCacheSim's. Until the next
//! insert a lookup of such an object is a hit here where libCacheSim misses; it is then
//! treated as libCacheSim treats the miss (counted, and inserted into the window).

use super::frequency_sketch::FrequencySketch;
use super::{EvictionPolicy, Units, Usage};
use crate::queue::Queue;
use crate::slab::{Node, Slot, NIL};
use crate::Capacity;

/// `meta` of an object in the window.
const WINDOW: u32 = 0;
/// `meta` of an object in main's segment `s` is `MAIN + s`.
const MAIN: u32 = 1;
const SEGMENTS: usize = 2;
/// `meta` of an object evicted but not yet taken out of the cache.
const LEAVING: u32 = MAIN + SEGMENTS as u32;

/// libCacheSim's default `window-size`.
const WINDOW_RATIO: f64 = 0.01;
/// Main's segments, `seg-size=1:4`.
const SEGMENT_SHARES: [f64; SEGMENTS] = [1.0, 4.0];
/// libCacheSim halves the sketch every this many main hits per unit of main's size.
const DECAY_PER_UNIT: u64 = 32;

/// The queue sizes of one capacity.
#[derive(Clone, Copy)]
struct Limits {
    units: Units,
    window: u64,
    main: u64,
    segments: [u64; SEGMENTS],
}

impl Limits {
    fn of(capacity: Capacity) -> Limits {
        let units = Units::of(capacity);
        // Counted in objects (libCacheSim has no such cache), the window and probation get
        // at least one object each, so that a cache of under 100 objects still admits.
        let at_least = |n: u64, total: u64| match capacity.bytes {
            None => n.max(total.min(1)),
            Some(_) => n,
        };
        let window = at_least(units.fraction(WINDOW_RATIO), units.total);
        let main = units.total - window;
        let sum: f64 = SEGMENT_SHARES.iter().sum();
        // `(int64_t)((double)share / sum * cache_size)`, in libCacheSim's order.
        let mut segments = SEGMENT_SHARES.map(|share| (share / sum * main as f64) as u64);
        segments[0] = at_least(segments[0], main);
        Limits {
            units,
            window,
            main,
            segments,
        }
    }
}

pub(crate) struct WTinyLfu {
    limits: Limits,
    window: Queue,
    segments: [Queue; SEGMENTS],
    usage: [Usage; SEGMENTS],
    leaving: Queue,
    sketch: FrequencySketch,
    main_hits: u64,
}

impl WTinyLfu {
    pub fn new(capacity: Capacity) -> WTinyLfu {
        let limits = Limits::of(capacity);
        WTinyLfu {
            limits,
            window: Queue::default(),
            segments: [Queue::default(); SEGMENTS],
            usage: [Usage::default(); SEGMENTS],
            leaving: Queue::default(),
            sketch: FrequencySketch::new(limits.main),
            main_hits: 0,
        }
    }

    fn units_in(&self, segment: usize) -> u64 {
        self.limits.units.of_usage(self.usage[segment])
    }

    fn main_units(&self) -> u64 {
        (0..SEGMENTS).map(|s| self.units_in(s)).sum()
    }

    fn link_main(&mut self, nodes: &mut [Node], slot: Slot, segment: usize) {
        nodes[slot as usize].set_meta(MAIN + segment as u32);
        self.usage[segment].add(nodes[slot as usize].size);
        self.segments[segment].push_head(nodes, slot);
    }

    fn unlink(&mut self, nodes: &mut [Node], slot: Slot) {
        match nodes[slot as usize].meta() {
            WINDOW => self.window.unlink(nodes, slot),
            LEAVING => self.leaving.unlink(nodes, slot),
            meta => {
                let segment = (meta - MAIN) as usize;
                self.usage[segment].sub(nodes[slot as usize].size);
                self.segments[segment].unlink(nodes, slot);
            }
        }
    }

    fn leave(&mut self, nodes: &mut [Node], slot: Slot) {
        nodes[slot as usize].set_meta(LEAVING);
        self.leaving.push_head(nodes, slot);
    }

    fn push_window(&mut self, nodes: &mut [Node], slot: Slot) {
        nodes[slot as usize].set_meta(WINDOW);
        self.window.push_head(nodes, slot);
        self.sketch.add(nodes[slot as usize].key);
    }

    /// Main's victim (`SLRU_to_evict`): the oldest object of the lowest non-empty segment.
    fn main_victim(&self) -> Slot {
        self.segments
            .iter()
            .map(|q| q.tail)
            .find(|&tail| tail != NIL)
            .unwrap_or(NIL)
    }

    /// `SLRU_evict`: main's victim leaves; false when main is empty.
    fn evict_main(&mut self, nodes: &mut [Node]) -> bool {
        let victim = self.main_victim();
        if victim == NIL {
            return false;
        }
        self.unlink(nodes, victim);
        self.leave(nodes, victim);
        true
    }

    /// `SLRU_insert`: the lowest segment with room, else segment 0 once main has room.
    fn insert_main(&mut self, nodes: &mut [Node], slot: Slot) {
        let need = self.limits.units.of_size(nodes[slot as usize].size);
        let segment = (0..SEGMENTS).find(|&s| self.units_in(s) + need <= self.limits.segments[s]);
        let segment = segment.unwrap_or_else(|| {
            while self.main_units() + need > self.limits.main && self.evict_main(nodes) {}
            0
        });
        self.link_main(nodes, slot, segment);
    }

    /// `SLRU_cool`: `segment` is over its limit.
    fn cool(&mut self, nodes: &mut [Node], segment: usize) {
        if segment == 0 {
            self.evict_main(nodes);
            return;
        }
        let slot = self.segments[segment].tail;
        if slot == NIL {
            return;
        }
        self.unlink(nodes, slot);
        self.link_main(nodes, slot, segment - 1);
        while self.units_in(segment - 1) > self.limits.segments[segment - 1] {
            self.cool(nodes, segment - 1);
        }
    }

    /// `SLRU_find` on a hit.
    fn hit_main(&mut self, nodes: &mut [Node], slot: Slot, segment: usize) {
        if segment == SEGMENTS - 1 {
            self.segments[segment].move_to_head(nodes, slot);
            return;
        }
        self.unlink(nodes, slot);
        self.link_main(nodes, slot, segment + 1);
        while self.units_in(segment + 1) > self.limits.segments[segment + 1] {
            self.cool(nodes, segment + 1);
        }
    }

    /// One `WTinyLFU_evict`: every object it evicts joins the leaving list.
    fn evict_round(&mut self, nodes: &mut [Node]) {
        loop {
            let candidate = self.window.tail;
            if candidate == NIL {
                self.evict_main(nodes);
                return;
            }
            let node = nodes[candidate as usize];
            let need = self.limits.units.of_size(node.size);
            let mut decided = false;
            if self.main_units() + need <= self.limits.main {
                self.window.unlink(nodes, candidate);
                self.insert_main(nodes, candidate);
            } else {
                let victim = self.main_victim();
                if victim != NIL
                    && self.sketch.estimate(node.key)
                        > self.sketch.estimate(nodes[victim as usize].key)
                {
                    self.evict_main(nodes);
                    self.window.unlink(nodes, candidate);
                    self.insert_main(nodes, candidate);
                } else {
                    self.window.unlink(nodes, candidate);
                    self.leave(nodes, candidate);
                    decided = true;
                }
            }
            self.sketch.add(node.key);
            if decided {
                return;
            }
        }
    }
}

impl EvictionPolicy for WTinyLfu {
    #[inline]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        match nodes[slot as usize].meta() {
            WINDOW => self.window.move_to_head(nodes, slot),
            LEAVING => {
                // libCacheSim missed this one and inserted it anew.
                self.leaving.unlink(nodes, slot);
                self.push_window(nodes, slot);
            }
            meta => {
                self.hit_main(nodes, slot, (meta - MAIN) as usize);
                self.sketch.add(nodes[slot as usize].key);
                self.main_hits += 1;
                if self.main_hits >= DECAY_PER_UNIT * self.limits.main {
                    self.main_hits = 0;
                    self.sketch.halve();
                }
            }
        }
    }

    fn can_admit(&self, size: u32) -> bool {
        let need = self.limits.units.of_size(size);
        need <= self.limits.window && need <= self.limits.main && need <= self.limits.segments[0]
    }

    fn owes_eviction(&mut self, _nodes: &mut [Node], _key: u64, _size: u32) -> bool {
        !self.leaving.is_empty()
    }

    fn owes_eviction_after_room(&mut self, _key: u64, _size: u32) -> bool {
        !self.leaving.is_empty()
    }

    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        self.push_window(nodes, slot);
    }

    fn on_resize(&mut self, nodes: &mut [Node], slot: Slot, old_size: u32) {
        let meta = nodes[slot as usize].meta();
        if meta != WINDOW && meta != LEAVING {
            self.usage[(meta - MAIN) as usize].resize(old_size, nodes[slot as usize].size);
        }
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        if self.leaving.is_empty() {
            self.evict_round(nodes);
        }
        self.leaving.pop_tail(nodes)
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        self.unlink(nodes, slot);
    }

    /// New queue sizes; the sketch keeps its size and counts (libCacheSim never resizes).
    fn on_capacity(&mut self, capacity: Capacity) {
        self.limits = Limits::of(capacity);
    }

    fn heap_bytes(&self) -> usize {
        self.sketch.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Harness;

    fn wtinylfu(objects: u64) -> Harness<WTinyLfu> {
        let capacity = Capacity::objects(objects);
        Harness::new(WTinyLfu::new(capacity), capacity)
    }

    #[test]
    fn sizes_are_libcachesims() {
        let l = Limits::of(Capacity::bytes(292_272));
        assert_eq!((l.window, l.main), (2922, 289_350));
        assert_eq!(l.segments, [57_870, 231_480]);
        let w = WTinyLfu::new(Capacity::bytes(292_272));
        assert!(w.can_admit(2922));
        assert!(!w.can_admit(2923), "larger than the window");
        // In objects, a cache under 100 objects still has a window and a probation.
        let small = Limits::of(Capacity::objects(50));
        assert_eq!((small.window, small.main, small.segments), (1, 49, [9, 39]));
        let tiny = Limits::of(Capacity::objects(3));
        assert_eq!((tiny.window, tiny.segments), (1, [1, 1]));
        assert_eq!(Limits::of(Capacity::objects(0)).window, 0);
    }

    #[test]
    fn the_window_fills_main_then_frequency_decides() {
        // 200 objects: window 2, main 198 (probation 39, protected 158).
        let mut h = wtinylfu(200);
        for k in 0..200 {
            assert!(!h.access(k, 1));
        }
        assert!(h.evicted.is_empty());
        // The next insert moves window objects into main while it has room, then asks the
        // sketch: 0..198 all have count 2 (insert + move), the window's oldest ties and
        // loses, so it leaves.
        assert!(!h.access(1000, 1));
        assert_eq!(h.evicted.len(), 1);
        assert_eq!(h.meta(1000), WINDOW);
        // A key seen often wins against main's victim, which leaves instead.
        for _ in 0..5 {
            h.policy.sketch.add(2000);
        }
        assert!(!h.access(2000, 1));
        assert!(!h.access(2001, 1));
        assert!(!h.access(2002, 1));
        assert_eq!(
            h.meta(2000),
            MAIN,
            "the frequent key reached main's probation"
        );
    }

    #[test]
    fn a_hit_that_overfills_probation_evicts_at_the_next_insert() {
        // 100 objects: window 1, main 99 (probation 19, protected 79).
        let mut h = wtinylfu(100);
        for k in 0..100 {
            h.access(k, 1);
        }
        // Fill main: one more insert moves 98 objects from the window.
        h.access(100, 1);
        let evicted = h.evicted.len();
        // Hits in probation promote; protected overflows into probation, which then
        // evicts during the hit.
        let mut left = false;
        for k in 0..100 {
            if h.store.find(k).is_some() && h.meta(k) == MAIN {
                h.access(k, 1);
            }
            if !h.policy.leaving.is_empty() {
                left = true;
                break;
            }
        }
        assert!(left, "some hit evicted");
        assert_eq!(h.evicted.len(), evicted, "a hit evicts nothing by itself");
        h.access(5000, 1);
        assert!(
            h.policy.leaving.is_empty(),
            "the next insert takes it out first"
        );
        assert!(h.evicted.len() > evicted);
        assert!(h.store.len() <= 100);
    }
}
