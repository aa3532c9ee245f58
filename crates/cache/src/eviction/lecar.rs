//! LeCaR (Vietri et al., HotStorage'18) as libCacheSim 0.3.5's `LeCaR.c` runs it:
//!
//! - Two experts rank the same objects: LRU (victim: the least recently used) and LFU
//!   (victim: the least frequently used, the oldest among equals).
//! - When both name the same victim it is evicted and remembered by neither. Otherwise one
//!   is chosen at random, LRU with probability `w_lru` (drawn as libCacheSim draws it:
//!   `(next_rand() % 100) / 100 < w_lru`), and the victim's key goes into that expert's
//!   ghost history with the request number of its eviction. Each history keeps at most half
//!   the capacity (oldest entries dropped first).
//! - A miss found in an expert's history is that expert's regret: its weight is multiplied
//!   by `exp(-0.45 * dr^t)` (`t` requests since the eviction, `dr = 0.005^(1/capacity)`),
//!   and both weights are renormalised with libCacheSim's `1e-10` guards.
//!
//! The histories live where libCacheSim keeps them, in the cache's own index: a victim an
//! expert remembers stays there as a ghost node ([`Node::bury`]) linked into that expert's
//! history, so a miss finds it with the lookup it makes anyway ([`EvictionPolicy::on_ghost_hit`])
//! and remembering or forgetting one is a few link writes, not a keyed insert or removal in
//! a slab of its own.
//!
//! The generator is libCacheSim's own, started where libCacheSim's per-thread state starts,
//! so a replay agrees decision for decision with libCacheSim run in a fresh process.
//! A cache limited only in objects counts every object as one unit ([`Units`]).

use super::freq_lists::FreqLists;
use super::next_rand::NextRand;
use super::{EvictionPolicy, Units, Usage};
use crate::queue::Queue;
use crate::slab::{Node, Slab, Slot, NIL};
use crate::Capacity;

/// Ghost histories, by the expert that evicted the object (a ghost's `meta`).
const BY_LRU: usize = 0;
const BY_LFU: usize = 1;
const LEARNING_RATE: f64 = 0.45;

pub(crate) struct LeCaR {
    units: Units,
    lru: Queue,
    lfu: FreqLists,
    /// Each expert's ghosts in the cache's slab, newest at the head.
    history: [Queue; 2],
    usage: [Usage; 2],
    /// Request number of each ghost's eviction, by slot.
    evicted_at: Vec<u64>,
    /// The histories may be over their bound (a capacity cut, or `evict` without the slab at
    /// hand): the next call with the slab trims them before reading them.
    trim_due: bool,
    w_lru: f64,
    w_lfu: f64,
    /// The regret's discount per request.
    discount: f64,
    /// Requests seen (libCacheSim's `n_req`, counted before the request is served).
    requests: u64,
    rng: NextRand,
}

impl LeCaR {
    pub fn new(capacity: Capacity) -> LeCaR {
        let units = Units::of(capacity);
        LeCaR {
            units,
            lru: Queue::default(),
            lfu: FreqLists::default(),
            history: [Queue::default(); 2],
            usage: [Usage::default(); 2],
            evicted_at: Vec::new(),
            trim_due: false,
            w_lru: 0.5,
            w_lfu: 0.5,
            discount: discount(units),
            requests: 0,
            rng: NextRand::default(),
        }
    }

    /// libCacheSim's `update_weight`: `punished` (the expert whose victim came back) loses
    /// weight, then both are renormalised.
    fn regret(&mut self, punished: usize, since_eviction: u64) {
        let (punish, other) = if punished == BY_LRU {
            (self.w_lru, self.w_lfu)
        } else {
            (self.w_lfu, self.w_lru)
        };
        let r = self.discount.powf(since_eviction as f64);
        let punish = punish * (-LEARNING_RATE * r).exp() + 1e-10;
        let sum = punish + other + 2e-10;
        let (punish, other) = (punish / sum, (other + 1e-10) / sum);
        if punished == BY_LRU {
            (self.w_lru, self.w_lfu) = (punish, other);
        } else {
            (self.w_lfu, self.w_lru) = (punish, other);
        }
    }

    /// Which expert (if either) remembers the victim both did not agree on.
    #[inline]
    fn choose(&mut self, nodes: &mut [Node]) -> (Slot, Option<usize>) {
        let by_lru = self.lru.tail;
        if by_lru == NIL {
            return (NIL, None);
        }
        let by_lfu = self.lfu.victim();
        let (victim, expert) = if by_lru == by_lfu {
            (by_lru, None)
        } else if self.rng.percent() < self.w_lru {
            (by_lru, Some(BY_LRU))
        } else {
            (by_lfu, Some(BY_LFU))
        };
        self.lru.unlink(nodes, victim);
        self.lfu.remove(victim);
        (victim, expert)
    }

    /// Makes the victim at `slot` a ghost at the head of `list`'s history, stamped with the
    /// request of its eviction.
    #[inline]
    fn bury(&mut self, nodes: &mut [Node], list: usize, slot: Slot) {
        let node = &mut nodes[slot as usize];
        node.bury();
        node.set_meta(list as u32);
        let size = node.size;
        self.history[list].push_head(nodes, slot);
        self.usage[list].add(size);
        let i = slot as usize;
        if i >= self.evicted_at.len() {
            self.grow_evicted_at(i);
        }
        self.evicted_at[i] = self.requests;
    }

    /// Remembers the victim at `slot` in `list`'s history, first dropping the history's
    /// oldest ghosts while the victim would take it over half the capacity: the same ghosts
    /// libCacheSim's bounded list drops after its insert. A victim over the bound on its own
    /// is not remembered at all (libCacheSim drops it right after adding it; here the cache
    /// must still free its node).
    #[inline]
    fn remember_in(&mut self, store: &mut Slab, list: usize, slot: Slot) {
        let limit = self.units.total / 2;
        let mut with_victim = self.usage[list];
        with_victim.add(store.nodes[slot as usize].size);
        while self.units.of_usage(with_victim) > limit {
            let oldest = self.history[list].pop_tail(&mut store.nodes);
            if oldest == NIL {
                return;
            }
            let size = store.nodes[oldest as usize].size;
            self.usage[list].sub(size);
            with_victim.sub(size);
            store.forget(oldest);
        }
        self.bury(&mut store.nodes, list, slot);
    }

    /// Trims `list`'s history to half the capacity, oldest ghosts first.
    #[inline]
    fn trim(&mut self, store: &mut Slab, list: usize) {
        let limit = self.units.total / 2;
        while self.units.of_usage(self.usage[list]) > limit {
            let slot = self.history[list].pop_tail(&mut store.nodes);
            if slot == NIL {
                break;
            }
            self.usage[list].sub(store.nodes[slot as usize].size);
            store.forget(slot);
        }
    }

    #[inline]
    fn settle(&mut self, store: &mut Slab) {
        if self.trim_due {
            self.trim_due = false;
            self.trim(store, BY_LRU);
            self.trim(store, BY_LFU);
        }
    }

    /// Takes the ghost at `slot` out of its history and the index; returns its history and
    /// eviction time, or `None` when it had already been dropped (a plain miss).
    fn take_ghost(&mut self, store: &mut Slab, slot: Slot) -> Option<(usize, u64)> {
        self.settle(store);
        let node = store.nodes[slot as usize];
        if !node.is_ghost() {
            return None;
        }
        let list = node.meta() as usize;
        self.history[list].unlink(&mut store.nodes, slot);
        self.usage[list].sub(node.size);
        store.forget(slot);
        Some((list, self.evicted_at[slot as usize]))
    }

    #[cold]
    fn grow_evicted_at(&mut self, i: usize) {
        self.evicted_at.resize(i + 1, 0);
    }

    #[cfg(test)]
    fn weights(&self) -> (f64, f64) {
        (self.w_lru, self.w_lfu)
    }

    /// Units each history holds now.
    #[cfg(test)]
    fn history_units(&self, list: usize) -> u64 {
        self.units.of_usage(self.usage[list])
    }
}

/// `pow(0.005, 1.0 / cache_size)`: a regret decays to 0.5% over one cache's worth of requests.
fn discount(units: Units) -> f64 {
    0.005f64.powf(1.0 / units.total as f64)
}

impl EvictionPolicy for LeCaR {
    #[inline]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        self.requests += 1;
        self.lru.move_to_head(nodes, slot);
        self.lfu.hit(slot);
    }

    #[inline]
    fn on_miss(&mut self, _key: u64) {
        self.requests += 1;
    }

    fn on_ghost_hit(&mut self, store: &mut Slab, slot: Slot) {
        if let Some((list, evicted_at)) = self.take_ghost(store, slot) {
            self.regret(list, self.requests - evicted_at);
        }
    }

    fn forget_ghost(&mut self, store: &mut Slab, slot: Slot) {
        self.take_ghost(store, slot);
    }

    #[inline]
    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        self.lru.push_head(nodes, slot);
        self.lfu.insert(slot);
    }

    /// Without the slab a remembered victim cannot push older ghosts out of the index: the
    /// history may exceed its bound until the next call that has the slab trims it (the
    /// cache itself always evicts through [`EvictionPolicy::evict_in`]).
    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        let (victim, expert) = self.choose(nodes);
        if let Some(list) = expert {
            self.bury(nodes, list, victim);
            self.trim_due = true;
        }
        victim
    }

    #[inline]
    fn evict_in(&mut self, store: &mut Slab) -> Slot {
        self.settle(store);
        let (victim, expert) = self.choose(&mut store.nodes);
        if let Some(list) = expert {
            self.remember_in(store, list, victim);
        }
        victim
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        self.lru.unlink(nodes, slot);
        self.lfu.remove(slot);
    }

    fn on_capacity(&mut self, capacity: Capacity) {
        self.units = Units::of(capacity);
        self.discount = discount(self.units);
        // Trimming frees nodes, which needs the slab: the next call with it does it.
        self.trim_due = true;
    }

    fn heap_bytes(&self) -> usize {
        self.lfu.heap_bytes() + self.evicted_at.capacity() * size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Harness;

    /// The history holding `key` as a ghost in the cache's index, if any.
    fn history_of(h: &Harness<LeCaR>, key: u64) -> Option<usize> {
        let slot = h.store.find_hashed(key, h.store.hash(key))?;
        let node = h.store.nodes[slot as usize];
        node.is_ghost().then_some(node.meta() as usize)
    }

    #[test]
    fn agreeing_experts_evict_without_a_ghost_or_a_draw() {
        let mut h = Harness::new(LeCaR::new(Capacity::objects(3)), Capacity::objects(3));
        for k in [1, 2, 3, 4] {
            h.access(k, 1);
        }
        // 1 is both the oldest and (tied at one request) the first to arrive.
        assert_eq!(h.evicted, vec![1]);
        assert_eq!(h.store.ghosts(), 0);
        assert_eq!(
            h.policy.rng.next(),
            NextRand::default().next(),
            "no draw made"
        );
    }

    #[test]
    fn a_returning_victim_lowers_its_experts_weight() {
        let mut h = Harness::new(LeCaR::new(Capacity::objects(2)), Capacity::objects(2));
        // 1 is hit twice (LFU keeps it), 2 is newest (LRU keeps it): the experts disagree.
        for k in [1, 1, 1, 2] {
            h.access(k, 1);
        }
        h.access(3, 1);
        let victim = h.evicted[0];
        assert!(victim == 1 || victim == 2);
        let expert = if victim == 1 { BY_LRU } else { BY_LFU };
        assert_eq!(history_of(&h, victim), Some(expert));
        assert_eq!(h.policy.weights(), (0.5, 0.5));
        assert!(!h.access(victim, 1));
        let (w_lru, w_lfu) = h.policy.weights();
        assert!((w_lru + w_lfu - 1.0).abs() < 1e-9);
        if expert == BY_LRU {
            assert!(w_lru < 0.5, "{w_lru}");
        } else {
            assert!(w_lfu < 0.5, "{w_lfu}");
        }
        assert_eq!(history_of(&h, victim), None, "a ghost is used once");
    }

    #[test]
    fn each_history_keeps_at_most_half_the_capacity() {
        let capacity = Capacity::bytes(100);
        let mut h = Harness::new(LeCaR::new(capacity), capacity);
        let mut most = [0; 2];
        for _ in 0..10 {
            for k in 0..5 {
                h.access(k, 10);
            }
        }
        for k in 0..2_000u64 {
            // Frequent keys reused too late for LRU among one-off keys: LRU's victim is often
            // a frequent key, LFU's a one-off.
            h.access(k % 5, 10);
            for j in 0..4 {
                h.access(1_000 + 4 * k + j, 10);
            }
            for list in [BY_LRU, BY_LFU] {
                let total = h.policy.history_units(list);
                assert!(total <= 50, "history {list} holds {total}");
                most[list] = most[list].max(total);
            }
        }
        assert!(most[BY_LRU] > 0, "LRU's history was used");
        assert_eq!(most[BY_LFU], 50, "LFU's history filled up to its bound");
    }

    /// A victim over half the capacity on its own is not remembered (libCacheSim adds it and
    /// drops it at once): its node is freed like an agreed victim's, and the history keeps
    /// nothing.
    #[test]
    fn a_victim_over_the_history_bound_leaves_no_ghost() {
        let capacity = Capacity::bytes(100);
        let mut h = Harness::new(LeCaR::new(capacity), capacity);
        // 1 (60 B) is hit so LFU keeps it; 2 is newer, so LRU's victim is 1, LFU's 2.
        for (k, size) in [(1, 60), (1, 60), (1, 60), (2, 30)] {
            h.access(k, size);
        }
        for k in 10..40 {
            h.access(k, 30);
            for list in [BY_LRU, BY_LFU] {
                assert!(h.policy.history_units(list) <= 50);
            }
        }
        assert!(h.evicted.contains(&1) || h.evicted.contains(&2));
        assert_eq!(history_of(&h, 1), None, "60 B never fits a 50 B history");
        let ghosts = h.store.ghosts();
        let held: u64 = [BY_LRU, BY_LFU]
            .iter()
            .map(|&l| h.policy.usage[l].objects)
            .sum();
        assert_eq!(
            ghosts, held,
            "every ghost node is in a history, and only those"
        );
    }

    /// A capacity cut trims both histories at the next call with the slab, and the ghosts
    /// it drops leave the index.
    #[test]
    fn a_capacity_cut_trims_the_histories_out_of_the_index() {
        let capacity = Capacity::objects(10);
        let mut h = Harness::new(LeCaR::new(capacity), capacity);
        for _ in 0..10 {
            for k in 0..5 {
                h.access(k, 1);
            }
        }
        // As in `each_history_keeps_at_most_half_the_capacity`: the experts disagree.
        for k in 0..200u64 {
            h.access(k % 5, 1);
            for j in 0..4 {
                h.access(1_000 + 4 * k + j, 1);
            }
        }
        let before = h.store.ghosts();
        assert!(before > 4, "histories in use: {before}");
        h.policy.on_capacity(Capacity::objects(4));
        h.capacity = Capacity::objects(4);
        h.access(99_999, 1);
        for list in [BY_LRU, BY_LFU] {
            assert!(h.policy.history_units(list) <= 2);
        }
        let held: u64 = [BY_LRU, BY_LFU]
            .iter()
            .map(|&l| h.policy.usage[l].objects)
            .sum();
        assert_eq!(h.store.ghosts(), held);
    }
}
