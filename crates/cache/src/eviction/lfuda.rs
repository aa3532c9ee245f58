//! LFU with dynamic aging as libCacheSim 0.3.5's `LFUDA.c` runs it. The cache age `L` is the
//! priority of the last victim (libCacheSim's `min_freq`, 0 before the first eviction):
//!
//! - an inserted object gets priority `L + 1`;
//! - a hit adds `L` to the object's priority (so before the first eviction a hit only moves
//!   the object to the newest end of its priority's FIFO);
//! - the victim is the oldest object of priority `L` (of priority 1 while `L` is 0 or 1);
//!   `L` becomes its priority, and when that priority has no object left, the lowest
//!   non-empty priority in `(L, P]` where `P` is the highest priority a hit ever produced.
//!
//! libCacheSim moves `L` forward, on a hit that empties priority `L`, before the hit object
//! joins its new priority, and never past `P` (insertions do not raise `P`); both are kept,
//! since they decide victims. Where libCacheSim would then find no object at priority `L`
//! (it would dereference a null victim), the lowest non-empty priority is taken.
//!
//! Priorities grow without bound, so the FIFOs are kept by priority in a hash map, and the
//! non-empty priorities in an ordered set: finding the next priority is a range query, not
//! libCacheSim's scan of every integer between `L` and `P` (which on twitter_cluster52 at 1%
//! runs for hours). The ordered set changes only when a priority gets its first object or
//! loses its last; a request that moves an object between existing FIFOs costs two hash
//! lookups (none for the one it leaves when the object sits inside a FIFO, not at an end),
//! where one ordered map cost three to four tree searches a request.

use std::collections::BTreeSet;

use foldhash::fast::FixedState;
use hashbrown::hash_map::Entry;
use hashbrown::HashMap;

use super::EvictionPolicy;
use crate::queue::Queue;
use crate::slab::{Node, Slot, NIL};

/// Fixed seed: victims must not depend on the run (the map is never iterated, but a fixed
/// layout keeps replays identical instruction for instruction).
const HASH_SEED: u64 = 0x6c66_7564_6131_3233;

pub(crate) struct Lfuda {
    /// Priority of the object in each slot.
    priority: Vec<u64>,
    /// Non-empty FIFOs by priority, oldest arrival at the tail.
    lists: HashMap<u64, Queue, FixedState>,
    /// The keys of `lists`, in order.
    order: BTreeSet<u64>,
    /// `L`.
    min_freq: u64,
    /// `P`.
    max_freq: u64,
}

impl Default for Lfuda {
    fn default() -> Self {
        Lfuda {
            priority: Vec::new(),
            lists: HashMap::with_hasher(FixedState::with_seed(HASH_SEED)),
            order: BTreeSet::new(),
            min_freq: 0,
            max_freq: 0,
        }
    }
}

impl Lfuda {
    #[inline]
    fn push(&mut self, nodes: &mut [Node], slot: Slot, priority: u64) {
        self.priority[slot as usize] = priority;
        match self.lists.entry(priority) {
            Entry::Occupied(mut list) => list.get_mut().push_head(nodes, slot),
            Entry::Vacant(vacant) => {
                vacant.insert(Queue::default()).push_head(nodes, slot);
                self.order.insert(priority);
            }
        }
    }

    /// Unlinks `slot`; returns whether its priority has no object left.
    fn unlink(&mut self, nodes: &mut [Node], slot: Slot) -> bool {
        let Node { prev, next, .. } = nodes[slot as usize];
        if prev != NIL && next != NIL {
            // Inside its FIFO: neither end of the queue changes.
            nodes[prev as usize].next = next;
            nodes[next as usize].prev = prev;
            let node = &mut nodes[slot as usize];
            node.prev = NIL;
            node.next = NIL;
            return false;
        }
        let priority = self.priority[slot as usize];
        let Some(list) = self.lists.get_mut(&priority) else {
            return true;
        };
        list.unlink(nodes, slot);
        if list.is_empty() {
            self.forget(priority);
            return true;
        }
        false
    }

    #[cold]
    fn grow(&mut self, i: usize) {
        self.priority.resize(i + 1, 0);
    }

    /// Drops the emptied FIFO of `priority`.
    fn forget(&mut self, priority: u64) {
        self.lists.remove(&priority);
        self.order.remove(&priority);
    }

    /// libCacheSim's `update_min_freq`: the lowest non-empty priority in `(L, P]`, if any.
    fn update_min_freq(&mut self) {
        if self.min_freq >= self.max_freq {
            return;
        }
        if let Some(&p) = self.order.range(self.min_freq + 1..=self.max_freq).next() {
            self.min_freq = p;
        }
    }
}

impl EvictionPolicy for Lfuda {
    #[inline]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        let old = self.priority[slot as usize];
        let new = old.saturating_add(self.min_freq);
        self.max_freq = self.max_freq.max(new);
        if self.unlink(nodes, slot) && self.min_freq == old {
            self.update_min_freq();
        }
        self.push(nodes, slot, new);
    }

    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        let i = slot as usize;
        if i >= self.priority.len() {
            self.grow(i);
        }
        let priority = self.min_freq + 1;
        self.push(nodes, slot, priority);
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        let wanted = self.min_freq.max(1);
        let (priority, list) = match self.lists.get_mut(&wanted) {
            Some(list) => (wanted, list),
            None => {
                let Some(&lowest) = self.order.first() else {
                    return NIL;
                };
                let list = self
                    .lists
                    .get_mut(&lowest)
                    .expect("ordered priorities are keyed");
                (lowest, list)
            }
        };
        self.min_freq = priority;
        let victim = list.pop_tail(nodes);
        if list.is_empty() {
            self.forget(priority);
            self.update_min_freq();
        }
        victim
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        let priority = self.priority[slot as usize];
        if self.unlink(nodes, slot) && priority == self.min_freq {
            self.update_min_freq();
        }
    }

    fn heap_bytes(&self) -> usize {
        // A hash bucket holds 8 + 8 bytes and a control byte; a B-tree node up to 11 keys
        // of 8 bytes and a few words.
        self.priority.capacity() * size_of::<u64>()
            + self.lists.capacity() * (size_of::<(u64, Queue)>() + 1)
            + self.order.len() * 12
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Harness;
    use crate::Capacity;

    #[test]
    fn before_the_first_eviction_a_hit_only_refreshes() {
        let mut h = Harness::new(Lfuda::default(), Capacity::objects(3));
        for k in [1, 2, 3, 1] {
            h.access(k, 1);
        }
        // All at priority 1; 1 was refreshed, so 2 is the oldest there.
        h.access(4, 1);
        assert_eq!(h.evicted, vec![2]);
        assert_eq!(h.policy.min_freq, 1);
    }

    #[test]
    fn hits_add_the_age_and_new_objects_start_above_it() {
        let mut h = Harness::new(Lfuda::default(), Capacity::objects(3));
        for k in [1, 2, 3, 4] {
            h.access(k, 1);
        }
        // 1 left and L = 1, so 4 entered at L + 1 = 2. A hit on 2 lifts it to 1 + L = 2,
        // behind 4.
        assert_eq!(h.policy.priority[h.store.find(4).unwrap() as usize], 2);
        assert!(h.access(2, 1));
        assert_eq!(h.policy.priority[h.store.find(2).unwrap() as usize], 2);
        // 3, the last at priority 1, leaves; L moves to 2 and 5 enters at 3.
        h.access(5, 1);
        assert_eq!(h.evicted, vec![1, 3]);
        assert_eq!(h.policy.priority[h.store.find(5).unwrap() as usize], 3);
        // At priority 2, 4 is older than 2.
        h.access(6, 1);
        h.access(7, 1);
        assert_eq!(h.evicted, vec![1, 3, 4, 2]);
    }

    /// The same rules over a plain list of (key, priority, arrival), every lookup a scan:
    /// the keyed FIFOs and the ordered set of priorities (one appearing, one emptying, the
    /// victim's fallback to the lowest) must choose the same victims.
    #[test]
    fn victims_match_a_scan_of_every_object() {
        #[derive(Default)]
        struct Model {
            objects: Vec<(u64, u64, u64)>,
            arrivals: u64,
            min: u64,
            max: u64,
            evicted: Vec<u64>,
        }
        impl Model {
            fn holds(&self, p: u64) -> bool {
                self.objects.iter().any(|o| o.1 == p)
            }
            fn update(&mut self) {
                if self.min >= self.max {
                    return;
                }
                let (lo, hi) = (self.min, self.max);
                let next = self
                    .objects
                    .iter()
                    .map(|o| o.1)
                    .filter(|&p| p > lo && p <= hi);
                if let Some(p) = next.min() {
                    self.min = p;
                }
            }
            fn push(&mut self, key: u64, p: u64) {
                self.arrivals += 1;
                self.objects.push((key, p, self.arrivals));
            }
            fn access(&mut self, key: u64, capacity: usize) {
                if let Some(i) = self.objects.iter().position(|o| o.0 == key) {
                    let old = self.objects.remove(i).1;
                    let new = old.saturating_add(self.min);
                    self.max = self.max.max(new);
                    if !self.holds(old) && self.min == old {
                        self.update();
                    }
                    self.push(key, new);
                    return;
                }
                if self.objects.len() == capacity {
                    let wanted = self.min.max(1);
                    let p = if self.holds(wanted) {
                        wanted
                    } else {
                        self.objects.iter().map(|o| o.1).min().unwrap()
                    };
                    self.min = p;
                    let (i, _) = self
                        .objects
                        .iter()
                        .enumerate()
                        .filter(|(_, o)| o.1 == p)
                        .min_by_key(|(_, o)| o.2)
                        .unwrap();
                    self.evicted.push(self.objects.remove(i).0);
                    if !self.holds(p) {
                        self.update();
                    }
                }
                self.push(key, self.min + 1);
            }
        }

        let capacity = 40;
        let mut h = Harness::new(Lfuda::default(), Capacity::objects(capacity as u64));
        let mut model = Model::default();
        let mut x = 11u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Skewed: a few keys come back often, most rarely.
            let r = (x >> 33) % 1000;
            let key = if r < 600 { r % 30 } else { r };
            h.access(key, 1);
            model.access(key, capacity);
        }
        assert!(model.evicted.len() > 1_000);
        assert_eq!(h.evicted, model.evicted);
    }
}
