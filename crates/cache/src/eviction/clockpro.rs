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
//! The clock is threaded through the cache's own nodes (their `prev`/`next` links), and a
//! ghost is the evicted object's own node left in the cache's index ([`Node::bury`]), as
//! libCacheSim flags objects in its one hash table: a miss finds a ghost with the lookup it
//! makes anyway, an eviction into the test period moves no key, and a dropped ghost leaves
//! the index the way an evicted object does.
//!
//! libCacheSim 0.3.5's `ClockPro.c` is a different implementation (it starts with every
//! object cold, `init-ratio-cold=1`) and its miss ratios are far from this one's; see
//! docs/cache.md.

use super::{EvictionPolicy, Units};
use crate::slab::{Node, Slab, Slot, NIL};
use crate::Capacity;

/// Node `meta` bits. A ghost is a buried node ([`Node::holds_object`] false) on the clock,
/// always in its test period; a resident node is hot or cold.
const REFERENCED: u32 = 1;
const HOT: u32 = 2;
/// A cold object in its test period.
const IN_TEST: u32 = 4;

pub(crate) struct ClockPro {
    units: Units,
    hand_hot: Slot,
    hand_cold: Slot,
    hand_test: Slot,
    hot: u64,
    cold: u64,
    ghosts: u64,
    /// The cold target `m_c`.
    cold_target: u64,
    /// `m_c`'s lower bound ([`min_cold`]), kept so that a shrink of `m_c`, once per ghost
    /// dropped, needs no division.
    cold_floor: u64,
    /// Ghosts taken off the clock but still in the index (a hand dropped them without the
    /// slab at hand), chained through their `next`; freed by `settle`.
    dropped: Slot,
    /// The ghost a miss just found: out of the index (so that its key can be inserted) but
    /// still on the clock, where hands may pass or drop it until its key's insert revives it
    /// ([`Slab::detach`]).
    returning: Slot,
    /// A detached ghost off the clock (revived or dropped), freed by `settle`.
    detached: Slot,
    /// The capacity shrank: HAND_test drops the ghosts beyond it before the next clock move.
    trim_due: bool,
}

impl ClockPro {
    pub fn new(capacity: Capacity) -> ClockPro {
        let units = Units::of(capacity);
        ClockPro {
            units,
            hand_hot: NIL,
            hand_cold: NIL,
            hand_test: NIL,
            hot: 0,
            cold: 0,
            ghosts: 0,
            cold_target: min_cold(units),
            cold_floor: min_cold(units),
            dropped: NIL,
            returning: NIL,
            detached: NIL,
            trim_due: false,
        }
    }

    #[inline]
    fn units_of(&self, nodes: &[Node], e: Slot) -> u64 {
        self.units.of_size(nodes[e as usize].size)
    }

    /// Links `e` into the clock at the list head: just behind HAND_hot. (This and the other
    /// clock operations are inlined: they run once or twice a request, and as calls their
    /// register saves cost as much as their work.)
    #[inline]
    fn link_at_head(&mut self, nodes: &mut [Node], e: Slot) {
        if self.hand_hot == NIL {
            nodes[e as usize].prev = e;
            nodes[e as usize].next = e;
            self.hand_hot = e;
            self.hand_cold = e;
            self.hand_test = e;
            return;
        }
        let after = self.hand_hot;
        let before = nodes[after as usize].prev;
        nodes[e as usize].prev = before;
        nodes[e as usize].next = after;
        nodes[before as usize].next = e;
        nodes[after as usize].prev = e;
    }

    /// Takes `e` off the clock, moving any hand on it to its successor.
    #[inline]
    fn unlink(&mut self, nodes: &mut [Node], e: Slot) {
        let Node { prev, next, .. } = nodes[e as usize];
        let successor = if next == e { NIL } else { next };
        for hand in [&mut self.hand_hot, &mut self.hand_cold, &mut self.hand_test] {
            if *hand == e {
                *hand = successor;
            }
        }
        if successor != NIL {
            nodes[prev as usize].next = next;
            nodes[next as usize].prev = prev;
        }
    }

    /// Forgets the ghost `e` (its test period ended unused): `m_c` shrinks. Its node leaves
    /// the index now if the slab is at hand, else at the next `settle`; so does `victim`,
    /// the object being evicted, which the cache has not released yet.
    #[inline(always)]
    fn drop_ghost<H: AtHand + ?Sized>(&mut self, at: &mut H, e: Slot, victim: Slot) {
        let nodes = at.nodes();
        let units = self.units_of(nodes, e);
        self.ghosts -= units;
        self.shrink_cold_target(units);
        self.unlink(nodes, e);
        if e == victim || e == self.returning || !at.forget(e) {
            self.discard(at.nodes(), e);
        }
    }

    /// Queues the ghost `e`, off the clock, for `settle` to free.
    #[inline]
    fn discard(&mut self, nodes: &mut [Node], e: Slot) {
        if e == self.returning {
            debug_assert_eq!(self.detached, NIL);
            self.returning = NIL;
            self.detached = e;
        } else {
            nodes[e as usize].next = self.dropped;
            self.dropped = e;
        }
    }

    /// Frees the ghosts dropped without the slab at hand and trims the ghosts after a
    /// capacity cut. Runs before anything that moves a hand or reads a ghost with the slab
    /// at hand.
    #[inline]
    fn settle(&mut self, store: &mut Slab) {
        // One test on the usual path, where nothing waits: `NIL` is all ones, so both lists
        // are empty exactly when the AND of their heads is `NIL`.
        if self.trim_due || self.dropped & self.detached != NIL {
            self.settle_pending(store);
        }
    }

    #[inline(never)]
    fn settle_pending(&mut self, store: &mut Slab) {
        if self.trim_due {
            self.trim_due = false;
            self.run_test(store, NIL);
        }
        while self.dropped != NIL {
            let e = self.dropped;
            self.dropped = store.nodes[e as usize].next;
            store.forget(e);
        }
        if self.detached != NIL {
            store.free_detached(self.detached);
            self.detached = NIL;
        }
    }

    #[inline]
    fn grow_cold_target(&mut self, units: u64) {
        self.cold_target = (self.cold_target + units).min(self.units.total);
    }

    #[inline]
    fn shrink_cold_target(&mut self, units: u64) {
        self.cold_target = self.cold_target.saturating_sub(units).max(self.cold_floor);
    }

    #[inline]
    fn hot_limit(&self) -> u64 {
        self.units.total - self.cold_target.min(self.units.total)
    }

    /// Makes the cold object `e` hot at the list head and lets HAND_hot restore the limit.
    fn promote<H: AtHand + ?Sized>(&mut self, at: &mut H, e: Slot) {
        let nodes = at.nodes();
        let units = self.units_of(nodes, e);
        self.cold -= units;
        self.hot += units;
        self.grow_cold_target(units);
        nodes[e as usize].set_meta(HOT);
        self.unlink(nodes, e);
        self.link_at_head(nodes, e);
        self.run_hot(at);
    }

    /// HAND_hot: while the hot objects exceed `m - m_c`, demote one.
    fn run_hot<H: AtHand + ?Sized>(&mut self, at: &mut H) {
        while self.hot > self.hot_limit() {
            self.step_hot(at);
        }
        look_ahead(at.nodes(), self.hand_hot);
    }

    /// One step of HAND_hot; true if it demoted a hot object.
    #[inline(always)]
    fn step_hot<H: AtHand + ?Sized>(&mut self, at: &mut H) -> bool {
        let e = self.hand_hot;
        let node = at.nodes()[e as usize];
        self.hand_hot = node.next;
        if !node.holds_object() {
            // No victim is buried yet when HAND_hot moves.
            self.drop_ghost(at, e, NIL);
            return false;
        }
        let nodes = at.nodes();
        let meta = node.meta();
        if meta & HOT != 0 {
            if meta & REFERENCED != 0 {
                nodes[e as usize].set_meta(HOT);
                return false;
            }
            let units = self.units.of_size(node.size);
            self.hot -= units;
            self.cold += units;
            nodes[e as usize].set_meta(0);
            return true;
        }
        // A cold object: its test period ends here.
        if meta & (IN_TEST | REFERENCED) == IN_TEST {
            self.shrink_cold_target(self.units.of_size(node.size));
        }
        nodes[e as usize].set_meta(meta & REFERENCED);
        false
    }

    /// HAND_test: drops ghosts while they add up to more than the cache (`victim`: the
    /// object just buried, not yet released by the cache).
    fn run_test<H: AtHand + ?Sized>(&mut self, at: &mut H, victim: Slot) {
        while self.ghosts > self.units.total {
            let e = self.hand_test;
            let node = at.nodes()[e as usize];
            self.hand_test = node.next;
            if !node.holds_object() {
                self.drop_ghost(at, e, victim);
            }
        }
        look_ahead(at.nodes(), self.hand_test);
    }

    /// The next resident cold object HAND_cold evicts, unlinked from the cache's view (the
    /// cache frees its slot, or keeps it as a ghost when it is buried here); `NIL` if
    /// nothing is cached.
    fn run_cold<H: AtHand + ?Sized>(&mut self, at: &mut H) -> Slot {
        if self.hot + self.cold == 0 {
            return NIL;
        }
        loop {
            if self.cold == 0 {
                // Everything resident is hot (the cache shrank below the hot objects): HAND_hot
                // demotes one so that HAND_cold has a candidate.
                while !self.step_hot(at) {}
                continue;
            }
            let nodes = at.nodes();
            // Past ghosts and hot objects to the next resident cold object (there is one:
            // `cold > 0`), the hand kept in a register.
            let mut e = self.hand_cold;
            let node = loop {
                let node = nodes[e as usize];
                if node.holds_object() && node.meta() & HOT == 0 {
                    break node;
                }
                e = node.next;
            };
            self.hand_cold = node.next;
            let meta = node.meta();
            if meta & REFERENCED != 0 {
                if meta & IN_TEST != 0 {
                    self.promote(at, e);
                } else {
                    nodes[e as usize].set_meta(IN_TEST);
                    self.unlink(nodes, e);
                    self.link_at_head(nodes, e);
                }
                continue;
            }
            let units = self.units.of_size(node.size);
            self.cold -= units;
            if meta & IN_TEST != 0 {
                // Evicted in its test period: its node stays on the clock and in the index as
                // a ghost. (If HAND_test drops it right away, it is freed at the next
                // `settle`, after the cache has released it.)
                nodes[e as usize].bury();
                self.ghosts += units;
                self.run_test(at, e);
            } else {
                self.unlink(nodes, e);
            }
            look_ahead(at.nodes(), self.hand_cold);
            return e;
        }
    }

    /// The last ghost hit's key was never inserted here (refused, or inserted in another
    /// class): its ghost goes back into the index, where later misses find it again, unless
    /// the key is cached after all (then it is dropped without learning from it).
    #[cold]
    fn restore_returning(&mut self, store: &mut Slab) {
        let ghost = std::mem::replace(&mut self.returning, NIL);
        let key = store.nodes[ghost as usize].key;
        if store.find_hashed(key, store.hash(key)).is_none() {
            store.reattach(ghost);
        } else {
            self.ghosts -= self.units_of(&store.nodes, ghost);
            self.unlink(&mut store.nodes, ghost);
            store.free_detached(ghost);
        }
    }

    /// Takes the ghost at `slot` (still in the index) off the clock without learning from
    /// it.
    fn take_ghost(&mut self, store: &mut Slab, slot: Slot) {
        self.ghosts -= self.units_of(&store.nodes, slot);
        self.unlink(&mut store.nodes, slot);
        store.forget(slot);
    }
}

/// What a clock move has at hand: only the nodes (a ghost a hand drops then waits in
/// `dropped` for `settle`), or the whole slab (it leaves the index at once, saving the queue
/// round trip on the eviction path, where HAND_test drops most ghosts).
trait AtHand {
    fn nodes(&mut self) -> &mut [Node];
    /// Frees the released ghost `e`, already off the clock; false if it must wait.
    fn forget(&mut self, e: Slot) -> bool;
}

impl AtHand for [Node] {
    #[inline(always)]
    fn nodes(&mut self) -> &mut [Node] {
        self
    }

    #[inline(always)]
    fn forget(&mut self, _: Slot) -> bool {
        false
    }
}

impl AtHand for Slab {
    #[inline(always)]
    fn nodes(&mut self) -> &mut [Node] {
        &mut self.nodes
    }

    #[inline(always)]
    fn forget(&mut self, e: Slot) -> bool {
        Slab::forget(self, e);
        true
    }
}

/// Starts loading the clock links of the node at `hand` and of its successor, the two a
/// hand visits first when it next moves. Each hand chases `next` links through nodes
/// scattered over the slab, and those loads, each waiting for the last, are most of a clock
/// move's time; the next move comes a few requests later, by when both are in the cache.
/// (Its successor's address needs `hand`'s node, a load the processor finishes while the
/// request goes on.)
#[inline(always)]
fn look_ahead(nodes: &[Node], hand: Slot) {
    if let Some(node) = nodes.get(hand as usize) {
        prefetch_links(nodes, node.next);
    }
}

/// Hints the processor to bring `nodes[e]`'s `next` and `meta` bits into the cache (one
/// line: they are 8 aligned bytes).
#[inline(always)]
fn prefetch_links(nodes: &[Node], e: Slot) {
    // Address arithmetic only: a prefetch of any address (even past the slab, for `NIL`) is
    // harmless and reads nothing.
    let links = nodes
        .as_ptr()
        .wrapping_add(e as usize)
        .cast::<u8>()
        .wrapping_add(core::mem::offset_of!(Node, next));
    crate::prefetch_read(links);
}

/// `m_c`'s lower bound: 1% of the cache, at least one unit.
fn min_cold(units: Units) -> u64 {
    (units.total / 100).max(1)
}

impl EvictionPolicy for ClockPro {
    #[inline]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        let node = &mut nodes[slot as usize];
        node.set_meta(node.meta() | REFERENCED);
    }

    fn on_ghost_hit(&mut self, store: &mut Slab, slot: Slot) {
        self.settle(store);
        if !store.nodes[slot as usize].is_ghost() {
            // Dropped since the lookup read it: a plain miss.
            return;
        }
        if self.returning != NIL {
            self.restore_returning(store);
        }
        store.detach(slot);
        self.returning = slot;
    }

    fn forget_ghost(&mut self, store: &mut Slab, slot: Slot) {
        self.settle(store);
        if store.nodes[slot as usize].is_ghost() {
            self.take_ghost(store, slot);
        }
    }

    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        if self.trim_due {
            self.trim_due = false;
            self.run_test(nodes, NIL);
        }
        let Node { key, size, .. } = nodes[slot as usize];
        let units = self.units.of_size(size);
        let ghost = self.returning;
        if ghost != NIL && nodes[ghost as usize].key == key {
            // A ghost re-accessed in its test period: back as hot in its place on the clock
            // (moved to the list head), and `m_c` grows.
            self.ghosts -= self.units_of(nodes, ghost);
            self.hot += units;
            self.grow_cold_target(units);
            nodes[slot as usize].set_meta(HOT);
            self.unlink(nodes, ghost);
            self.discard(nodes, ghost);
            self.link_at_head(nodes, slot);
            self.run_hot(nodes);
            return;
        }
        nodes[slot as usize].set_meta(IN_TEST);
        self.cold += units;
        self.link_at_head(nodes, slot);
    }

    fn on_resize(&mut self, nodes: &mut [Node], slot: Slot, old_size: u32) {
        let node = nodes[slot as usize];
        let (old, new) = (self.units.of_size(old_size), self.units.of_size(node.size));
        let total = if node.meta() & HOT != 0 {
            &mut self.hot
        } else {
            &mut self.cold
        };
        *total = *total - old + new;
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        if self.trim_due {
            self.trim_due = false;
            self.run_test(nodes, NIL);
        }
        self.run_cold(nodes)
    }

    #[inline]
    fn evict_in(&mut self, store: &mut Slab) -> Slot {
        self.settle(store);
        self.run_cold(store)
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        let units = self.units_of(nodes, slot);
        if nodes[slot as usize].meta() & HOT != 0 {
            self.hot -= units;
        } else {
            self.cold -= units;
        }
        self.unlink(nodes, slot);
    }

    fn on_capacity(&mut self, capacity: Capacity) {
        self.units = Units::of(capacity);
        self.cold_floor = min_cold(self.units);
        self.cold_target = self
            .cold_target
            .clamp(self.cold_floor, self.units.total.max(1));
        // HAND_test needs the nodes: the next clock move runs it first.
        self.trim_due = self.ghosts > self.units.total;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Harness;
    use crate::{Algorithm, Cache};

    const GHOST: u32 = 8;

    fn clockpro(objects: u64) -> Harness<ClockPro> {
        let capacity = Capacity::objects(objects);
        Harness::new(ClockPro::new(capacity), capacity)
    }

    /// The clock status of `key`: `GHOST`, `HOT`, or 0 (cold), with `IN_TEST`.
    fn status_of(h: &Harness<ClockPro>, key: u64) -> u32 {
        let slot = h
            .store
            .find_hashed(key, h.store.hash(key))
            .expect("key on the clock");
        let node = h.store.nodes[slot as usize];
        if node.holds_object() {
            node.meta() & !REFERENCED
        } else {
            GHOST
        }
    }

    /// Walks the clock from HAND_hot: (resident units, ghost units, ghost nodes), checking
    /// the links both ways.
    fn walk(h: &Harness<ClockPro>) -> (u64, u64, u64) {
        let p = &h.policy;
        let nodes = &h.store.nodes;
        let (mut resident, mut ghost_units, mut ghosts) = (0, 0, 0);
        if p.hand_hot == NIL {
            return (0, 0, 0);
        }
        let mut e = p.hand_hot;
        loop {
            let node = nodes[e as usize];
            assert_eq!(nodes[node.next as usize].prev, e, "clock links");
            if node.holds_object() {
                resident += p.units.of_size(node.size);
            } else {
                ghost_units += p.units.of_size(node.size);
                ghosts += 1;
            }
            e = node.next;
            if e == p.hand_hot {
                break;
            }
        }
        (resident, ghost_units, ghosts)
    }

    /// Ghost nodes waiting in `dropped` or `detached` for `settle`.
    fn pending(h: &Harness<ClockPro>) -> u64 {
        let p = &h.policy;
        let mut n = u64::from(p.detached != NIL);
        let mut e = p.dropped;
        while e != NIL {
            n += 1;
            e = h.store.nodes[e as usize].next;
        }
        n
    }

    fn check(h: &Harness<ClockPro>, objects: u64) {
        let p = &h.policy;
        let (resident, ghost_units, ghost_nodes) = walk(h);
        assert!(p.ghosts <= objects);
        assert_eq!(p.hot + p.cold, h.store.len());
        assert_eq!(resident, h.store.len());
        assert!(h.store.len() <= objects);
        assert!(p.hot <= p.hot_limit() || p.cold == 0);
        assert_eq!(
            ghost_units, p.ghosts,
            "the clock holds exactly the ghosts counted"
        );
        assert_eq!(
            h.store.ghosts(),
            ghost_nodes + pending(h),
            "every ghost node is on the clock or waiting to be freed"
        );
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
    fn a_ghost_is_the_evicted_objects_own_node() {
        let mut h = clockpro(4);
        for k in 1..=4 {
            h.access(k, 1);
        }
        let slot = h.store.find(1).unwrap();
        assert_eq!(h.store.ghosts(), 0);
        h.access(5, 1);
        assert_eq!(h.store.ghosts(), 1, "only the evicted 1 is a ghost");
        assert_eq!(h.store.find(1), None, "a ghost is not cached");
        assert_eq!(h.store.find_hashed(1, h.store.hash(1)), Some(slot));
        assert!(!h.access(1, 1));
        // 1 is resident again (hot); the object it displaced is the one ghost.
        assert_eq!(h.evicted, vec![1, 2]);
        assert_eq!(status_of(&h, 1), HOT);
        assert_eq!(status_of(&h, 2), GHOST);
        check(&h, 4);
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
        check(&h, 100);
    }

    #[test]
    fn ghosts_never_exceed_the_cache_and_invariants_hold() {
        let mut h = clockpro(50);
        let mut x = 7u64;
        for _ in 0..20_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let key = (x >> 33) % 400;
            h.access(key, 1);
            check(&h, 50);
        }
        assert!(h.store.ghosts() > 0);
    }

    #[test]
    fn sized_objects_keep_the_invariants() {
        let capacity = Capacity::bytes(5_000);
        let mut h = Harness::new(ClockPro::new(capacity), capacity);
        let mut x = 11u64;
        for _ in 0..20_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let key = (x >> 33) % 300;
            h.access(key, 1 + (key * 37 % 400) as u32);
            let (resident, ghost_units, _) = walk(&h);
            assert_eq!(resident, h.store.bytes());
            assert_eq!(ghost_units, h.policy.ghosts);
            assert!(h.policy.ghosts <= 5_000);
        }
    }

    /// HAND_test frees the ghosts it drops while evicting at once, except the victim it
    /// has just buried (the cache has not released it yet): that one waits for `settle`.
    /// The slab's ghost count stays equal to the clock's ghosts plus those waiting.
    #[test]
    fn a_victim_dropped_as_it_is_buried_waits_for_its_release() {
        let capacity = Capacity::bytes(2_000);
        let mut h = Harness::new(ClockPro::new(capacity), capacity);
        let mut x = 5u64;
        let mut victims_waiting = 0;
        for _ in 0..20_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let key = (x >> 33) % 200;
            let before = h.evicted.len();
            h.access(key, 1 + (key * 53 % 700) as u32);
            let d = h.policy.dropped;
            if d != NIL && h.evicted[before..].contains(&h.store.nodes[d as usize].key) {
                victims_waiting += 1;
            }
            let (resident, ghost_units, ghost_nodes) = walk(&h);
            assert_eq!(resident, h.store.bytes());
            assert_eq!(ghost_units, h.policy.ghosts);
            assert_eq!(h.store.ghosts(), ghost_nodes + pending(&h));
        }
        assert!(victims_waiting > 0, "the workload never crossed the case");
    }

    /// A ghost whose key misses but is not inserted (too large for the cache now) is
    /// detached from the index for that insert; the next ghost hit puts it back, so a later
    /// miss of its key still finds it.
    #[test]
    fn a_ghost_hit_without_its_insert_stays_a_ghost() {
        let capacity = Capacity::bytes(10);
        let mut h = Harness::new(ClockPro::new(capacity), capacity);
        for k in 0..10 {
            h.access(k, 1);
        }
        h.access(10, 1);
        h.access(11, 1);
        assert_eq!(h.evicted, vec![0, 1]);
        // Key 0 comes back too large: its ghost is found, the insert refused.
        assert!(!h.access(0, 11));
        assert_eq!(h.store.find_hashed(0, h.store.hash(0)), None, "detached");
        let returning = h.policy.returning;
        assert_ne!(returning, NIL);
        assert_eq!(h.store.nodes[returning as usize].key, 0);
        // Key 1's ghost hit puts 0's back; 1 is revived.
        assert!(!h.access(1, 1));
        assert_eq!(status_of(&h, 1), HOT);
        assert_eq!(status_of(&h, 0), GHOST);
        check(&h, 10);
        // And 0 still returns hot, as a ghost hit.
        let before = h.policy.cold_target;
        assert!(!h.access(0, 1));
        assert_eq!(status_of(&h, 0), HOT);
        assert!(h.policy.cold_target > before);
        check(&h, 10);
    }

    /// A cut of the capacity leaves more ghosts than the cache: HAND_test drops them before
    /// the next clock move, and a lookup of a dropped ghost is a plain miss.
    #[test]
    fn a_capacity_cut_drops_ghosts_before_they_are_read() {
        let mut h = clockpro(40);
        let mut x = 3u64;
        for _ in 0..5_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            h.access((x >> 33) % 200, 1);
        }
        assert!(h.policy.ghosts > 10, "{}", h.policy.ghosts);
        let small = Capacity::objects(10);
        h.capacity = small;
        h.policy.on_capacity(small);
        assert!(h.policy.trim_due);
        while h.store.len() > 10 {
            assert!(h.evict_one());
        }
        assert!(h.policy.ghosts <= 10);
        for _ in 0..2_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            h.access((x >> 33) % 200, 1);
            check(&h, 10);
        }
    }

    /// The hands' prefetching is a hint: an empty hand (`NIL`), a slot past the slab or a
    /// stale successor link must neither panic nor change anything.
    #[test]
    fn looking_ahead_of_any_hand_is_harmless() {
        let mut nodes = vec![Node::detached(1, 1), Node::detached(2, 1)];
        nodes[0].next = 1;
        nodes[1].next = 1_000;
        let before = nodes.clone();
        for hand in [NIL, 0, 1, 2, 1_000, NIL - 1] {
            look_ahead(&nodes, hand);
            prefetch_links(&nodes, hand);
        }
        assert_eq!(nodes, before);
    }

    #[test]
    fn ghosts_are_never_reported_as_cached() {
        let mut cache = Cache::new(Algorithm::ClockPro, Capacity::objects(4));
        for key in 0..12u64 {
            cache.access(key, 1);
        }
        assert_eq!(cache.len(), 4);
        assert!(cache.ghosts() > 0);
        for key in 0..8u64 {
            assert!(!cache.contains(key), "{key}");
            assert_eq!(cache.object_size(key), None);
            assert!(!cache.remove(key), "a ghost is not removable");
        }
        assert_eq!(cache.iter().count(), 4);
    }
}
