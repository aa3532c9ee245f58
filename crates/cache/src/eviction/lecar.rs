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
//! The generator is libCacheSim's own, started where libCacheSim's per-thread state starts,
//! so a replay agrees decision for decision with libCacheSim run in a fresh process.
//! A cache limited only in objects counts every object as one unit ([`Units`]).

use super::freq_lists::FreqLists;
use super::ghost::Ghosts;
use super::next_rand::NextRand;
use super::{EvictionPolicy, Units};
use crate::queue::Queue;
use crate::slab::{Node, Slot, NIL};
use crate::Capacity;

/// Ghost histories, by the expert that evicted the object.
const BY_LRU: usize = 0;
const BY_LFU: usize = 1;
const LEARNING_RATE: f64 = 0.45;

pub(crate) struct LeCaR {
    units: Units,
    lru: Queue,
    lfu: FreqLists,
    ghosts: Ghosts,
    /// Request number of each ghost's eviction, by ghost slot.
    evicted_at: Vec<u64>,
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
            ghosts: Ghosts::new(units),
            evicted_at: Vec::new(),
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

    #[inline]
    fn remember(&mut self, list: usize, key: u64, size: u32) {
        if let Some(slot) = self.ghosts.push(list, key, size) {
            let i = slot as usize;
            if i >= self.evicted_at.len() {
                self.grow_evicted_at(i);
            }
            self.evicted_at[i] = self.requests;
        }
        let limit = self.units.total / 2;
        while self.ghosts.total(list) > limit && self.ghosts.drop_oldest(list) {}
    }

    #[cold]
    fn grow_evicted_at(&mut self, i: usize) {
        self.evicted_at.resize(i + 1, 0);
    }

    #[cfg(test)]
    fn weights(&self) -> (f64, f64) {
        (self.w_lru, self.w_lfu)
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

    fn on_miss(&mut self, key: u64) {
        self.requests += 1;
        if let Some((list, slot)) = self.ghosts.find(key) {
            let since = self.requests - self.evicted_at[slot as usize];
            self.regret(list, since);
            self.ghosts.remove(slot);
        }
    }

    #[inline]
    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        self.lru.push_head(nodes, slot);
        self.lfu.insert(slot);
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        let by_lru = self.lru.tail;
        if by_lru == NIL {
            return NIL;
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
        if let Some(list) = expert {
            let node = nodes[victim as usize];
            self.remember(list, node.key, node.size);
        }
        victim
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        self.lru.unlink(nodes, slot);
        self.lfu.remove(slot);
    }

    fn on_capacity(&mut self, capacity: Capacity) {
        self.units = Units::of(capacity);
        self.ghosts.set_units(self.units);
        self.discount = discount(self.units);
        let limit = self.units.total / 2;
        for list in [BY_LRU, BY_LFU] {
            while self.ghosts.total(list) > limit && self.ghosts.drop_oldest(list) {}
        }
    }

    fn heap_bytes(&self) -> usize {
        self.lfu.heap_bytes()
            + self.ghosts.heap_bytes()
            + self.evicted_at.capacity() * size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Harness;

    #[test]
    fn agreeing_experts_evict_without_a_ghost_or_a_draw() {
        let mut h = Harness::new(LeCaR::new(Capacity::objects(3)), Capacity::objects(3));
        for k in [1, 2, 3, 4] {
            h.access(k, 1);
        }
        // 1 is both the oldest and (tied at one request) the first to arrive.
        assert_eq!(h.evicted, vec![1]);
        assert_eq!(h.policy.ghosts.len(), 0);
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
        assert_eq!(h.policy.ghosts.find(victim).map(|g| g.0), Some(expert));
        assert_eq!(h.policy.weights(), (0.5, 0.5));
        assert!(!h.access(victim, 1));
        let (w_lru, w_lfu) = h.policy.weights();
        assert!((w_lru + w_lfu - 1.0).abs() < 1e-9);
        if expert == BY_LRU {
            assert!(w_lru < 0.5, "{w_lru}");
        } else {
            assert!(w_lfu < 0.5, "{w_lfu}");
        }
        assert!(
            h.policy.ghosts.find(victim).is_none(),
            "a ghost is used once"
        );
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
                let total = h.policy.ghosts.total(list);
                assert!(total <= 50, "history {list} holds {total}");
                most[list] = most[list].max(total);
            }
        }
        assert!(most[BY_LRU] > 0, "LRU's history was used");
        assert_eq!(most[BY_LFU], 50, "LFU's history filled up to its bound");
    }
}
