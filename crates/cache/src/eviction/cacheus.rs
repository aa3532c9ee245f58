//! Cacheus (Rodriguez et al., FAST'21) as libCacheSim 0.3.5's `Cacheus.c`, `SR_LRU.c` and
//! `CR_LFU.c` run it:
//!
//! - Two experts over the same objects. SR-LRU keeps a scan-resistant list SR (new objects)
//!   and a reuse list R (objects hit in SR, or returning from its history H), `c/2` each; a
//!   hit in SR moves the object to R, whose oldest objects overflow back to SR; its victim
//!   is SR's oldest (R's when SR is empty). CR-LFU counts requests (an object returning
//!   from H resumes its count + 1) and its victim is the *newest* object of the lowest count.
//! - Each eviction draws `(next_rand() % 100) / 100 < w_lru` (libCacheSim's generator, see
//!   `next_rand.rs`). When the experts agree the object simply leaves; otherwise the chosen
//!   expert's victim leaves and its key enters that expert's ghost list (`c/2` each).
//! - Every evicted or overflowing object enters H (keys, with their CR-LFU count; an LRU
//!   kept below `c`). A miss found in a ghost list multiplies that expert's weight by
//!   `exp(-lr)`; both weights are renormalised on every miss.
//! - The learning rate starts at `0.001 + (next_rand() % 1000) / 1000` and is adapted every
//!   `c` requests from the hit rate, with libCacheSim's integer division (the hit rate it
//!   sees is 0 unless every request of the interval hit).
//! - Inserting into SR can overflow it (R's overflow lands there): SR's oldest objects then
//!   leave the cache into H, without a draw or a ghost.
//!
//! libCacheSim's SR/R resizing never runs: it tests flags on the object it has just created
//! in R, which are always clear; the sizes stay `c/2`, as here.
//! A cache limited only in objects counts every object as one unit ([`Units`]).

use super::freq_lists::FreqLists;
use super::ghost::Ghosts;
use super::next_rand::NextRand;
use super::{EvictionPolicy, Units, Usage};
use crate::queue::Queue;
use crate::slab::{Node, Slot, NIL};
use crate::Capacity;

/// `meta`: the object is in R (else SR).
const IN_R: u32 = 1;
/// Ghost lists, by the expert that evicted the object.
const BY_LRU: usize = 0;
const BY_LFU: usize = 1;
/// H's single list.
const HISTORY: usize = 0;

/// Where an insert stands between the cache's calls.
#[derive(Clone, Copy, PartialEq)]
enum Insert {
    Idle,
    /// Room was made; SR-LRU's own insert is under way: `demote_to` is R's limit when the
    /// object returns from H into R and R's oldest have yet to move to SR to make room for
    /// it; `to_sr` the units the object adds to SR (0 when it goes to R).
    Overflow {
        demote_to: Option<u64>,
        to_sr: u64,
        placed: Placed,
    },
    /// SR-LRU refused the object (larger than the list it would enter).
    Refused,
}

/// Where the object being inserted goes, and its CR-LFU count.
#[derive(Clone, Copy, PartialEq)]
struct Placed {
    to_r: bool,
    freq: u32,
}

pub(crate) struct Cacheus {
    units: Units,
    /// SR's and R's size, and each ghost list's.
    half: u64,
    sr: Queue,
    r: Queue,
    sr_usage: Usage,
    r_usage: Usage,
    lfu: FreqLists,
    history: Ghosts,
    /// CR-LFU count of each history entry, by its slot.
    history_freq: Vec<u32>,
    ghosts: Ghosts,
    w_lru: f64,
    w_lfu: f64,
    lr: f64,
    lr_previous: f64,
    hit_rate_prev: f64,
    unlearn_count: u64,
    hits: u64,
    requests: u64,
    /// The learning rate is due for its update before the next request is served (libCacheSim
    /// updates it at the end of a request, after that request's evictions).
    lr_update_due: bool,
    insert: Insert,
    /// The object about to be linked, once room was made for it.
    placed: Option<Placed>,
    rng: NextRand,
}

impl Cacheus {
    pub fn new(capacity: Capacity) -> Cacheus {
        let units = Units::of(capacity);
        let mut rng = NextRand::default();
        let lr = 0.001 + (rng.next() % 1000) as f64 / 1000.0;
        Cacheus {
            units,
            half: units.total / 2,
            sr: Queue::default(),
            r: Queue::default(),
            sr_usage: Usage::default(),
            r_usage: Usage::default(),
            lfu: FreqLists::default(),
            history: Ghosts::new(units),
            history_freq: Vec::new(),
            ghosts: Ghosts::new(units),
            w_lru: 0.5,
            w_lfu: 0.5,
            lr,
            lr_previous: 0.0,
            hit_rate_prev: 0.0,
            unlearn_count: 0,
            hits: 0,
            requests: 0,
            lr_update_due: false,
            insert: Insert::Idle,
            placed: None,
            rng,
        }
    }

    /// Counts a request, first applying a learning-rate update the previous one made due.
    #[inline]
    fn count_request(&mut self) {
        if self.lr_update_due {
            self.lr_update_due = false;
            self.update_lr();
        }
        self.requests += 1;
        // libCacheSim's `update_interval` is the cache size (in bytes, or objects).
        if self.units.total > 0 && self.requests.is_multiple_of(self.units.total) {
            self.lr_update_due = true;
        }
    }

    /// libCacheSim's `update_lr`.
    fn update_lr(&mut self) {
        if self.units.total == 0 {
            // The capacity dropped to nothing since the update fell due.
            return;
        }
        // `num_hit / update_interval` divides integers in libCacheSim.
        let hit_rate = (self.hits / self.units.total) as f64;
        let delta_hit_rate = hit_rate - self.hit_rate_prev;
        let delta_lr = self.lr - self.lr_previous;
        self.lr_previous = self.lr;
        self.hit_rate_prev = hit_rate;
        if delta_lr != 0.0 {
            let sign = if delta_hit_rate / delta_lr > 0.0 {
                1.0
            } else {
                -1.0
            };
            let step = sign * (self.lr * delta_lr).abs();
            self.lr = if self.lr + step > 0.001 {
                self.lr + step
            } else {
                0.0001
            };
            self.unlearn_count = 0;
        } else if hit_rate == 0.0 || delta_hit_rate <= 0.0 {
            self.unlearn_count += 1;
        } else if self.unlearn_count >= 10 {
            self.unlearn_count = 0;
            self.lr = 0.001 + (self.rng.next() % 1000) as f64 / 1000.0;
        }
        self.hits = 0;
    }

    fn r_units(&self) -> u64 {
        self.units.of_usage(self.r_usage)
    }

    fn sr_units(&self) -> u64 {
        self.units.of_usage(self.sr_usage)
    }

    fn link_sr(&mut self, nodes: &mut [Node], slot: Slot) {
        nodes[slot as usize].set_meta(0);
        self.sr.push_head(nodes, slot);
        self.sr_usage.add(nodes[slot as usize].size);
    }

    fn link_r(&mut self, nodes: &mut [Node], slot: Slot) {
        nodes[slot as usize].set_meta(IN_R);
        self.r.push_head(nodes, slot);
        self.r_usage.add(nodes[slot as usize].size);
    }

    /// Unlinks a cached object from SR-LRU's lists.
    fn unlink(&mut self, nodes: &mut [Node], slot: Slot) {
        let size = nodes[slot as usize].size;
        if nodes[slot as usize].meta() == IN_R {
            self.r.unlink(nodes, slot);
            self.r_usage.sub(size);
        } else {
            self.sr.unlink(nodes, slot);
            self.sr_usage.sub(size);
        }
    }

    /// R's oldest objects move to SR's head while R holds more than `limit` units.
    fn overflow_r(&mut self, nodes: &mut [Node], limit: u64) {
        while self.r_units() > limit {
            let oldest = self.r.tail;
            self.unlink(nodes, oldest);
            self.link_sr(nodes, oldest);
        }
    }

    /// An object leaves the cache: out of both experts, into H with its CR-LFU count.
    fn leave(&mut self, nodes: &mut [Node], slot: Slot) {
        self.unlink(nodes, slot);
        let freq = self.lfu.remove(slot);
        let Node { key, size, .. } = nodes[slot as usize];
        if let Some((_, old)) = self.history.find(key) {
            self.history.remove(old);
        }
        if let Some(entry) = self.history.push(HISTORY, key, size) {
            let i = entry as usize;
            if i >= self.history_freq.len() {
                self.history_freq.resize(i + 1, 0);
            }
            self.history_freq[i] = freq;
        }
        // H is an LRU of the cache's size, trimmed while it is full (`>=`).
        while self.history.total(HISTORY) >= self.units.total && self.history.drop_oldest(HISTORY) {
        }
    }

    /// The victim's key enters `list`'s ghost LRU, as libCacheSim's `get` on it would: an
    /// object larger than the list is not recorded.
    fn remember(&mut self, list: usize, key: u64, size: u32) {
        if self.units.of_size(size) > self.half {
            return;
        }
        if let Some((_, old)) = self.ghosts.find(key) {
            self.ghosts.remove(old);
        }
        self.ghosts.push(list, key, size);
        while self.ghosts.total(list) > self.half && self.ghosts.drop_oldest(list) {}
    }

    #[cfg(test)]
    fn weights(&self) -> (f64, f64) {
        (self.w_lru, self.w_lfu)
    }
}

impl EvictionPolicy for Cacheus {
    #[inline]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        self.count_request();
        self.hits += 1;
        if nodes[slot as usize].meta() == IN_R {
            self.r.move_to_head(nodes, slot);
        } else {
            self.unlink(nodes, slot);
            self.link_r(nodes, slot);
            self.overflow_r(nodes, self.half);
        }
        self.lfu.hit(slot);
    }

    fn on_miss(&mut self, key: u64) {
        self.count_request();
        match self.ghosts.find(key) {
            Some((BY_LRU, slot)) => {
                self.w_lru *= (-self.lr).exp();
                self.ghosts.remove(slot);
            }
            Some((_, slot)) => {
                self.w_lfu *= (-self.lr).exp();
                self.ghosts.remove(slot);
            }
            None => {}
        }
        self.w_lru /= self.w_lru + self.w_lfu;
        self.w_lfu = 1.0 - self.w_lru;
    }

    fn owes_eviction_after_room(&mut self, key: u64, size: u32) -> bool {
        // SR-LRU inserts after room was made: an object returning from H enters R (R's oldest
        // first move to SR to make room), any other SR; SR's overflow then leaves the cache.
        // This has no access to the nodes, so `evict` does the moves.
        let units = self.units.of_size(size);
        if self.insert == Insert::Idle {
            self.placed = None;
            // SR-LRU's `can_insert`, asked only after the room was made.
            if units > self.half {
                self.insert = Insert::Refused;
                return false;
            }
            self.insert = match self.history.find(key) {
                Some((_, entry)) => {
                    let freq = self.history_freq[entry as usize] + 1;
                    self.history.remove(entry);
                    Insert::Overflow {
                        demote_to: Some(self.half - units),
                        to_sr: 0,
                        placed: Placed { to_r: true, freq },
                    }
                }
                None => Insert::Overflow {
                    demote_to: None,
                    to_sr: units,
                    placed: Placed {
                        to_r: false,
                        freq: 1,
                    },
                },
            };
        }
        match self.insert {
            Insert::Overflow {
                demote_to: Some(limit),
                ..
            } => self.r_units() > limit,
            Insert::Overflow { to_sr, .. } => {
                self.sr_units() + to_sr > self.half && !self.sr.is_empty()
            }
            _ => false,
        }
    }

    fn admit_after_evictions(&mut self, _key: u64, _size: u32) -> bool {
        let insert = std::mem::replace(&mut self.insert, Insert::Idle);
        match insert {
            Insert::Refused => false,
            Insert::Overflow { placed, .. } => {
                self.placed = Some(placed);
                true
            }
            Insert::Idle => true,
        }
    }

    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        let placed = self.placed.take().unwrap_or(Placed {
            to_r: false,
            freq: 1,
        });
        if placed.to_r {
            self.link_r(nodes, slot);
        } else {
            self.link_sr(nodes, slot);
        }
        self.lfu.insert_with(slot, placed.freq);
    }

    fn on_resize(&mut self, nodes: &mut [Node], slot: Slot, old_size: u32) {
        let new_size = nodes[slot as usize].size;
        if nodes[slot as usize].meta() == IN_R {
            self.r_usage.resize(old_size, new_size);
        } else {
            self.sr_usage.resize(old_size, new_size);
        }
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        if let Insert::Overflow {
            demote_to, to_sr, ..
        } = &mut self.insert
        {
            let to_sr = *to_sr;
            if let Some(limit) = demote_to.take() {
                self.overflow_r(nodes, limit);
            }
            if self.sr_units() + to_sr <= self.half || self.sr.is_empty() {
                // Demoting made no overflow: nothing leaves.
                return NIL;
            }
            let victim = self.sr.tail;
            self.leave(nodes, victim);
            return victim;
        }
        let by_lru = if self.sr.is_empty() {
            self.r.tail
        } else {
            self.sr.tail
        };
        if by_lru == NIL {
            return NIL;
        }
        let by_lfu = self.lfu.newest_of_lowest();
        let lru_chosen = self.rng.percent() < self.w_lru;
        let (victim, ghost) = if by_lru == by_lfu {
            (by_lru, None)
        } else if lru_chosen {
            (by_lru, Some(BY_LRU))
        } else {
            (by_lfu, Some(BY_LFU))
        };
        self.leave(nodes, victim);
        if let Some(list) = ghost {
            let Node { key, size, .. } = nodes[victim as usize];
            self.remember(list, key, size);
        }
        victim
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        self.leave(nodes, slot);
    }

    fn on_capacity(&mut self, capacity: Capacity) {
        self.units = Units::of(capacity);
        self.half = self.units.total / 2;
        self.history.set_units(self.units);
        self.ghosts.set_units(self.units);
        while self.history.total(HISTORY) >= self.units.total && self.history.drop_oldest(HISTORY) {
        }
        for list in [BY_LRU, BY_LFU] {
            while self.ghosts.total(list) > self.half && self.ghosts.drop_oldest(list) {}
        }
    }

    fn heap_bytes(&self) -> usize {
        self.lfu.heap_bytes()
            + self.history.heap_bytes()
            + self.history_freq.capacity() * size_of::<u32>()
            + self.ghosts.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Harness;

    fn in_r(h: &Harness<Cacheus>, key: u64) -> bool {
        h.meta(key) == IN_R
    }

    #[test]
    fn a_hit_in_sr_moves_to_r_whose_oldest_overflow_back_to_sr() {
        let capacity = Capacity::objects(4);
        let mut h = Harness::new(Cacheus::new(capacity), capacity);
        for k in [1, 2] {
            h.access(k, 1);
        }
        assert!(!in_r(&h, 1) && !in_r(&h, 2));
        // R holds two objects (c/2): a third hit in SR pushes R's oldest back to SR.
        for k in [1, 2] {
            assert!(h.access(k, 1));
        }
        assert!(in_r(&h, 1) && in_r(&h, 2));
        h.access(3, 1);
        assert!(h.access(3, 1));
        assert!(in_r(&h, 3) && in_r(&h, 2));
        assert!(!in_r(&h, 1), "R's oldest went back to SR");
        assert_eq!((h.policy.r_units(), h.policy.sr_units()), (2, 1));
    }

    #[test]
    fn an_object_back_from_history_enters_r_with_its_count() {
        let capacity = Capacity::objects(4);
        let mut h = Harness::new(Cacheus::new(capacity), capacity);
        for k in [1, 1, 1] {
            h.access(k, 1);
        }
        // Objects reused once push 1 from R back to SR, whose overflow then pushes it out.
        for k in 10..100 {
            if h.store.find(1).is_none() {
                break;
            }
            h.access(k, 1);
            h.access(k, 1);
        }
        assert!(h.store.find(1).is_none(), "1 left the cache");
        assert!(h.policy.history.find(1).is_some(), "1 is in H");
        h.access(1, 1);
        assert!(in_r(&h, 1), "a returning object enters R");
        let slot = h.store.find(1).unwrap();
        assert_eq!(h.policy.lfu.freq(slot), 4, "three requests before, one now");
        assert!(h.policy.history.find(1).is_none());
    }

    #[test]
    fn histories_stay_within_their_bounds_and_weights_sum_to_one() {
        let capacity = Capacity::bytes(100);
        let mut h = Harness::new(Cacheus::new(capacity), capacity);
        let mut ghosts_used = false;
        // Five frequent objects fill R; one-off objects then fill SR, and every further
        // one-off makes the experts choose (SR's oldest, or CR-LFU's newest one-off).
        for _ in 0..3 {
            for k in 0..5 {
                h.access(k, 10);
            }
        }
        assert_eq!(h.policy.r_units(), 50);
        for k in 0..3_000u64 {
            h.access(k % 5, 10);
            h.access(1_000 + k, 10);
            // Recently evicted one-offs come back now and then: ghost and history hits.
            if k % 7 == 0 && k >= 10 {
                h.access(1_000 + k - 3, 10);
            }
            assert!(h.policy.history.total(HISTORY) < 100);
            assert!(h.policy.ghosts.total(BY_LRU) <= 50);
            assert!(h.policy.ghosts.total(BY_LFU) <= 50);
            assert!(h.store.bytes() <= 100);
            assert_eq!(
                h.policy.sr_units() + h.policy.r_units(),
                h.store.bytes(),
                "every cached object is in SR or R"
            );
            let (w_lru, w_lfu) = h.policy.weights();
            assert!((w_lru + w_lfu - 1.0).abs() < 1e-12);
            ghosts_used |= h.policy.ghosts.total(BY_LRU) + h.policy.ghosts.total(BY_LFU) > 0;
        }
        assert!(ghosts_used, "the experts disagreed at times");
    }

    #[test]
    fn an_object_larger_than_half_the_cache_is_refused_after_room_was_made() {
        let capacity = Capacity::bytes(100);
        let mut h = Harness::new(Cacheus::new(capacity), capacity);
        // Two objects in R (hit in SR), two in SR: 80 bytes.
        for k in [1, 1, 2, 2, 10, 11] {
            h.access(k, 20);
        }
        assert_eq!(h.store.bytes(), 80);
        h.access(99, 60);
        assert!(h.store.find(99).is_none(), "60 > 50 bytes, SR's size");
        // libCacheSim evicts before it asks SR-LRU: room for 60 bytes was made.
        assert_eq!(h.store.bytes(), 40);
        assert!(h.policy.insert == Insert::Idle);
    }
}
