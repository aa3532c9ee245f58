//! CLOCK-Pro (Jiang, Chen, Zhang, USENIX ATC'05), the published algorithm, sized in
//! [`Units`] as libCacheSim sizes its queues:
//!
//! - One clock (a ring) holds resident hot objects, resident cold objects and non-resident
//!   cold keys ("ghosts") still in their test period. New entries go to the list head, just
//!   behind HAND_hot, so every hand reaches them last. A hit only sets a reference bit.
//! - HAND_cold makes room: at a resident cold object with its bit clear it evicts it (its
//!   key stays as a ghost if it was in its test period); with the bit set it clears it and
//!   either promotes the object to hot (re-accessed in its test period) or starts a test
//!   period and moves it to the list head.
//! - HAND_hot keeps the hot objects within `m - m_c`: it clears set bits and demotes the
//!   first hot object with a clear bit to cold; on its way it ends the test periods of cold
//!   entries and drops ghosts. HAND_test drops ghosts (ending their test periods) while they
//!   add up to more than the cache.
//! - The cold target `m_c` adapts: up by the object's units when a cold object is
//!   re-accessed in its test period (resident or not), down when a test period ends
//!   without one; it stays within `[m / 100, m]` (at least one unit) and starts at its
//!   lower bound.
//!
//! libCacheSim 0.3.5's `ClockPro.c` is a different implementation (it starts with every
//! object cold, `init-ratio-cold=1`) and its miss ratios are far from this one's; see
//! docs/cache.md.

use super::{EvictionPolicy, Units};
use crate::slab::{Node, Slab, Slot, NIL};
use crate::Capacity;

/// Clock entry `state`: its status in the low 2 bits, [`IN_TEST`] above.
const HOT: u32 = 0;
const COLD: u32 = 1;
const GHOST: u32 = 2;
const STATUS: u32 = 3;
/// A cold entry in its test period (ghosts always are).
const IN_TEST: u32 = 4;
/// Cache node `meta`: the reference bit.
const REFERENCED: u32 = 1;

/// One place on the clock. Only ghosts are keyed: a resident entry is reached through its
/// cache slot (`entry_of`), so it costs no index insertion on arrival and no bucket-chain
/// walk when it leaves, which is what most entries do without ever becoming a ghost.
#[derive(Clone, Copy)]
struct Entry {
    prev: Slot,
    next: Slot,
    size: u32,
    state: u32,
    /// Resident: its cache slot. Ghost: its slot in the ghost index. Free: the next free
    /// entry.
    link: Slot,
}

pub(crate) struct ClockPro {
    units: Units,
    /// The clock's entries (resident objects and ghosts), recycled through `free`.
    entries: Vec<Entry>,
    free: Slot,
    /// Keys of the ghosts; each node's `next` holds the ghost's entry (ghost-index nodes are
    /// in no queue, so the field is otherwise unused).
    ghost_index: Slab,
    /// Clock entry of each cached object (by cache slot).
    entry_of: Vec<Slot>,
    hand_hot: Slot,
    hand_cold: Slot,
    hand_test: Slot,
    hot: u64,
    cold: u64,
    ghosts: u64,
    /// The cold target `m_c`.
    cold_target: u64,
}

impl ClockPro {
    pub fn new(capacity: Capacity) -> ClockPro {
        let units = Units::of(capacity);
        ClockPro {
            units,
            entries: Vec::new(),
            free: NIL,
            ghost_index: Slab::new(),
            entry_of: Vec::new(),
            hand_hot: NIL,
            hand_cold: NIL,
            hand_test: NIL,
            hot: 0,
            cold: 0,
            ghosts: 0,
            cold_target: min_cold(units),
        }
    }

    /// A new entry (in no ring) for the cached object at `slot`.
    fn alloc(&mut self, size: u32, state: u32, slot: Slot) -> Slot {
        let entry = Entry {
            prev: NIL,
            next: NIL,
            size,
            state,
            link: slot,
        };
        if self.free != NIL {
            let e = self.free;
            self.free = self.entries[e as usize].link;
            self.entries[e as usize] = entry;
            return e;
        }
        self.entries.push(entry);
        (self.entries.len() - 1) as Slot
    }

    /// Recycles `e` (already out of the ring and, if it was a ghost, of the index).
    fn release(&mut self, e: Slot) {
        self.entries[e as usize].link = self.free;
        self.free = e;
    }

    fn status(&self, e: Slot) -> u32 {
        self.entries[e as usize].state & STATUS
    }

    fn in_test(&self, e: Slot) -> bool {
        self.entries[e as usize].state & IN_TEST != 0
    }

    fn set(&mut self, e: Slot, status: u32, in_test: bool) {
        let flag = if in_test { IN_TEST } else { 0 };
        self.entries[e as usize].state = status | flag;
    }

    fn entry_units(&self, e: Slot) -> u64 {
        self.units.of_size(self.entries[e as usize].size)
    }

    fn next(&self, e: Slot) -> Slot {
        self.entries[e as usize].next
    }

    /// Links `e` into the ring at the list head: just behind HAND_hot. (This and the other
    /// ring operations are inlined: they run once or twice a request, and as calls their
    /// register saves cost as much as their work.)
    #[inline]
    fn link_at_head(&mut self, e: Slot) {
        let entries = &mut self.entries;
        if self.hand_hot == NIL {
            entries[e as usize].prev = e;
            entries[e as usize].next = e;
            self.hand_hot = e;
            self.hand_cold = e;
            self.hand_test = e;
            return;
        }
        let after = self.hand_hot;
        let before = entries[after as usize].prev;
        entries[e as usize].prev = before;
        entries[e as usize].next = after;
        entries[before as usize].next = e;
        entries[after as usize].prev = e;
    }

    /// Takes `e` out of the ring, moving any hand on it to its successor.
    #[inline]
    fn unlink(&mut self, e: Slot) {
        let Entry { prev, next, .. } = self.entries[e as usize];
        let successor = if next == e { NIL } else { next };
        for hand in [&mut self.hand_hot, &mut self.hand_cold, &mut self.hand_test] {
            if *hand == e {
                *hand = successor;
            }
        }
        if successor != NIL {
            self.entries[prev as usize].next = next;
            self.entries[next as usize].prev = prev;
        }
    }

    /// Forgets the ghost `e` (its test period ended unused): `m_c` shrinks.
    #[inline]
    fn drop_ghost(&mut self, e: Slot) {
        let units = self.entry_units(e);
        self.ghosts -= units;
        self.shrink_cold_target(units);
        self.unlink(e);
        self.ghost_index.remove(self.entries[e as usize].link);
        self.release(e);
    }

    fn grow_cold_target(&mut self, units: u64) {
        self.cold_target = (self.cold_target + units).min(self.units.total);
    }

    fn shrink_cold_target(&mut self, units: u64) {
        self.cold_target = self
            .cold_target
            .saturating_sub(units)
            .max(min_cold(self.units));
    }

    fn hot_limit(&self) -> u64 {
        self.units.total - self.cold_target.min(self.units.total)
    }

    /// Makes `e` (resident) hot at the list head and lets HAND_hot restore the limit.
    fn promote(&mut self, nodes: &mut [Node], e: Slot) {
        let units = self.entry_units(e);
        self.cold -= units;
        self.hot += units;
        self.grow_cold_target(units);
        self.set(e, HOT, false);
        self.unlink(e);
        self.link_at_head(e);
        self.run_hot(nodes);
    }

    /// HAND_hot: while the hot objects exceed `m - m_c`, demote one.
    fn run_hot(&mut self, nodes: &mut [Node]) {
        while self.hot > self.hot_limit() {
            self.step_hot(nodes);
        }
    }

    /// One step of HAND_hot; true if it demoted a hot object.
    fn step_hot(&mut self, nodes: &mut [Node]) -> bool {
        let e = self.hand_hot;
        self.hand_hot = self.next(e);
        match self.status(e) {
            HOT => {
                let slot = self.entries[e as usize].link;
                if nodes[slot as usize].meta() & REFERENCED != 0 {
                    nodes[slot as usize].set_meta(0);
                    return false;
                }
                let units = self.entry_units(e);
                self.hot -= units;
                self.cold += units;
                self.set(e, COLD, false);
                true
            }
            COLD => {
                let slot = self.entries[e as usize].link;
                if self.in_test(e) && nodes[slot as usize].meta() & REFERENCED == 0 {
                    self.shrink_cold_target(self.entry_units(e));
                }
                self.set(e, COLD, false);
                false
            }
            _ => {
                self.drop_ghost(e);
                false
            }
        }
    }

    /// HAND_test: drops ghosts while they add up to more than the cache.
    fn run_test(&mut self) {
        while self.ghosts > self.units.total {
            let e = self.hand_test;
            self.hand_test = self.next(e);
            if self.status(e) == GHOST {
                self.drop_ghost(e);
            }
        }
    }

    /// The next resident cold object HAND_cold evicts (unlinked from the cache's view: the
    /// caller frees its slot); `NIL` if nothing is cached.
    fn run_cold(&mut self, nodes: &mut [Node]) -> Slot {
        if self.hot + self.cold == 0 {
            return NIL;
        }
        loop {
            if self.cold == 0 {
                // Everything resident is hot (the cache shrank below the hot objects): HAND_hot
                // demotes one so that HAND_cold has a candidate.
                while !self.step_hot(nodes) {}
                continue;
            }
            let e = self.hand_cold;
            if self.status(e) != COLD {
                self.hand_cold = self.next(e);
                continue;
            }
            let slot = self.entries[e as usize].link;
            if nodes[slot as usize].meta() & REFERENCED != 0 {
                nodes[slot as usize].set_meta(0);
                self.hand_cold = self.next(e);
                if self.in_test(e) {
                    self.promote(nodes, e);
                } else {
                    self.set(e, COLD, true);
                    self.unlink(e);
                    self.link_at_head(e);
                }
                continue;
            }
            self.hand_cold = self.next(e);
            let units = self.entry_units(e);
            self.cold -= units;
            self.entry_of[slot as usize] = NIL;
            if self.in_test(e) && self.remember(e, nodes[slot as usize].key) {
                self.ghosts += units;
                self.run_test();
            } else {
                self.unlink(e);
                self.release(e);
            }
            return slot;
        }
    }

    /// Turns the evicted entry `e` into the ghost of `key`; false if the index is full.
    #[inline]
    fn remember(&mut self, e: Slot, key: u64) -> bool {
        let entry = &mut self.entries[e as usize];
        let Some(ghost) = self.ghost_index.insert(key, entry.size) else {
            return false;
        };
        self.ghost_index.nodes[ghost as usize].next = e;
        entry.link = ghost;
        entry.state = GHOST | IN_TEST;
        true
    }

    fn map(&mut self, e: Slot, slot: Slot) {
        if self.entry_of.len() <= slot as usize {
            self.grow_entry_of(slot);
        }
        self.entry_of[slot as usize] = e;
    }

    #[cold]
    fn grow_entry_of(&mut self, slot: Slot) {
        self.entry_of.resize(slot as usize + 1, NIL);
    }
}

/// `m_c`'s lower bound: 1% of the cache, at least one unit.
fn min_cold(units: Units) -> u64 {
    (units.total / 100).max(1)
}

impl EvictionPolicy for ClockPro {
    #[inline]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        nodes[slot as usize].set_meta(REFERENCED);
    }

    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        let (key, size) = (nodes[slot as usize].key, nodes[slot as usize].size);
        nodes[slot as usize].set_meta(0);
        let units = self.units.of_size(size);
        if let Some(ghost) = self.ghost_index.find(key) {
            // A ghost re-accessed in its test period: back as hot, and `m_c` grows.
            let e = self.ghost_index.nodes[ghost as usize].next;
            self.ghost_index.remove(ghost);
            self.ghosts -= self.entry_units(e);
            let entry = &mut self.entries[e as usize];
            entry.size = size;
            entry.link = slot;
            self.map(e, slot);
            self.cold += units;
            self.promote(nodes, e);
            return;
        }
        let e = self.alloc(size, COLD | IN_TEST, slot);
        self.map(e, slot);
        self.cold += units;
        self.link_at_head(e);
    }

    fn on_resize(&mut self, nodes: &mut [Node], slot: Slot, old_size: u32) {
        let e = self.entry_of[slot as usize];
        let size = nodes[slot as usize].size;
        let (old, new) = (self.units.of_size(old_size), self.units.of_size(size));
        let total = if self.status(e) == HOT {
            &mut self.hot
        } else {
            &mut self.cold
        };
        *total = *total - old + new;
        self.entries[e as usize].size = size;
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        self.run_cold(nodes)
    }

    fn on_remove(&mut self, _nodes: &mut [Node], slot: Slot) {
        let e = self.entry_of[slot as usize];
        self.entry_of[slot as usize] = NIL;
        let units = self.entry_units(e);
        if self.status(e) == HOT {
            self.hot -= units;
        } else {
            self.cold -= units;
        }
        self.unlink(e);
        self.release(e);
    }

    fn on_capacity(&mut self, capacity: Capacity) {
        self.units = Units::of(capacity);
        self.cold_target = self
            .cold_target
            .clamp(min_cold(self.units), self.units.total.max(1));
        self.run_test();
    }

    fn heap_bytes(&self) -> usize {
        self.entries.capacity() * core::mem::size_of::<Entry>()
            + self.ghost_index.heap_bytes()
            + self.entry_of.capacity() * core::mem::size_of::<Slot>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Harness;

    fn clockpro(objects: u64) -> Harness<ClockPro> {
        let capacity = Capacity::objects(objects);
        Harness::new(ClockPro::new(capacity), capacity)
    }

    /// The clock status of `key`: a ghost through the ghost index, a cached object through
    /// its cache slot.
    fn status_of(h: &Harness<ClockPro>, key: u64) -> u32 {
        let p = &h.policy;
        let e = match p.ghost_index.find(key) {
            Some(ghost) => p.ghost_index.nodes[ghost as usize].next,
            None => p.entry_of[h.store.find(key).expect("key on the clock") as usize],
        };
        p.status(e)
    }

    #[test]
    fn unreferenced_cold_objects_leave_first_and_are_remembered() {
        let mut h = clockpro(4);
        for k in 1..=4 {
            h.access(k, 1);
        }
        assert!(h.access(2, 1), "hit");
        h.access(5, 1);
        // HAND_cold starts at 1 (bit clear): 1 leaves, its key stays as a ghost.
        assert_eq!(h.evicted, vec![1]);
        assert_eq!(status_of(&h, 1), GHOST);
        h.access(6, 1);
        // 2 was referenced in its test period: promoted to hot; 3 leaves.
        assert_eq!(h.evicted, vec![1, 3]);
        assert_eq!(status_of(&h, 2), HOT);
    }

    #[test]
    fn resident_objects_are_not_indexed() {
        let mut h = clockpro(4);
        for k in 1..=4 {
            h.access(k, 1);
        }
        assert_eq!(h.policy.ghost_index.len(), 0);
        h.access(5, 1);
        assert_eq!(h.policy.ghost_index.len(), 1, "only the evicted 1 is keyed");
        assert!(!h.access(1, 1));
        // 1 is resident again and unkeyed; the object it displaced is the one ghost.
        assert_eq!(h.evicted, vec![1, 2]);
        assert_eq!(h.policy.ghost_index.len(), 1);
        assert!(h.policy.ghost_index.find(1).is_none());
        assert_eq!(status_of(&h, 2), GHOST);
        assert_eq!(status_of(&h, 1), HOT);
    }

    #[test]
    fn a_ghost_that_returns_is_hot_and_grows_the_cold_target() {
        let mut h = clockpro(100);
        for k in 0..100 {
            h.access(k, 1);
        }
        h.access(1000, 1);
        assert_eq!(h.evicted, vec![0]);
        let before = h.policy.cold_target;
        assert!(!h.access(0, 1), "a miss: only its key was kept");
        assert_eq!(status_of(&h, 0), HOT);
        assert_eq!(h.policy.cold_target, before + 1);
    }

    #[test]
    fn ghosts_never_exceed_the_cache_and_invariants_hold() {
        let mut h = clockpro(50);
        let mut x = 7u64;
        for _ in 0..20_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let key = (x >> 33) % 400;
            h.access(key, 1);
            let p = &h.policy;
            assert!(p.ghosts <= 50);
            assert_eq!(p.hot + p.cold, h.store.len());
            assert!(h.store.len() <= 50);
            assert!(p.hot <= p.hot_limit() || p.cold == 0);
            // Only ghosts are keyed: the index holds exactly the ghosts' units.
            let ghost_units: u64 = p
                .ghost_index
                .slots()
                .map(|g| p.entry_units(p.ghost_index.nodes[g as usize].next))
                .sum();
            assert_eq!(ghost_units, p.ghosts);
        }
    }
}
