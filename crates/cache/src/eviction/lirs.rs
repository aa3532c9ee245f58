//! LIRS (Jiang and Zhang, SIGMETRICS'02) as libCacheSim 0.3.5's `LIRS.c` runs it, sizes in
//! bytes, with its default HIR share of 1%:
//!
//! - Resident objects are LIR (low inter-reference recency) or HIR. The LIR set is limited to
//!   `c - h` bytes, the resident HIR set (queue Q, an LRU) to `h = max(1, floor(0.01 c))`.
//! - Stack S is an LRU of recent keys: every LIR object, and HIR objects resident or not
//!   (non-resident ones are also on the LRU list NH). S's bottom is always kept LIR
//!   ("pruning" drops HIR entries from the bottom).
//! - A hit moves the object to the top of S (and of Q if there). A hit on a LIR object prunes.
//!   A hit on a resident HIR object in S makes it LIR (leaving Q), after demoting LIR objects
//!   from S's bottom into Q until it fits; a hit on a resident HIR object not in S demotes the
//!   same way (libCacheSim's quirk: the object itself stays HIR) and pushes it on S.
//! - A miss on a key still in S (non-resident HIR): LIR objects are demoted until the object
//!   fits the LIR set, and it becomes LIR. Any other miss: objects larger than `h` or than the
//!   LIR set are refused; the object becomes LIR while the LIR set has room, else resident HIR
//!   (on S and Q).
//! - Demoting a LIR object into Q first evicts Q's oldest objects until it fits `h`; evicting
//!   from Q leaves the key on S as non-resident (and on NH).
//! - After every request, while S holds more than `2c` bytes of keys, NH's oldest key leaves S.
//!
//! As with SLRU, libCacheSim evicts during hits (a demotion that overfills Q); such victims wait
//! on a "leaving" list for the next insert, which evicts them first.

use super::{EvictionPolicy, Units};
use crate::queue::Queue;
use crate::slab::{Node, Slab, Slot, NIL};
use crate::Capacity;

const HIRS_RATIO: f64 = 0.01;

/// `meta` of a cached object: LIR, resident HIR (in Q), or evicted and waiting to leave.
const LIR: u32 = 1;
const IN_Q: u32 = 2;
const LEAVING: u32 = 4;

/// `meta` of an S entry.
const S_LIR: u32 = 1;
const S_RESIDENT: u32 = 2;

pub(crate) struct Lirs {
    units: Units,
    hirs_limit: u64,
    lirs_limit: u64,
    hirs_count: u64,
    lirs_count: u64,
    /// Stack S: its own entries (key, size, `S_*` meta), newest at the head.
    stack: Slab,
    s: Queue,
    /// The cache slot of each resident S entry's object, by entry slot.
    object_of: Vec<Slot>,
    /// Units of every entry on S (libCacheSim's `LRU_s->occupied_byte`).
    s_units: u64,
    /// NH: non-resident keys on S, newest at the head.
    nh_store: Slab,
    nh: Queue,
    /// Q: resident HIR objects (cache nodes), most recently used at the head.
    q: Queue,
    /// Objects libCacheSim evicted during a hit or a demotion, evicted at the next `evict`.
    leaving: Queue,
    /// The key of the current miss and whether it has a (non-resident) entry on S.
    missing: Option<(u64, bool)>,
    /// Units of the object being inserted, and whether `LIRS_can_insert`'s evictions ran.
    incoming: u64,
    prepared: bool,
}

impl Lirs {
    pub fn new(capacity: Capacity) -> Lirs {
        let units = Units::of(capacity);
        let (hirs_limit, lirs_limit) = limits(units);
        Lirs {
            units,
            hirs_limit,
            lirs_limit,
            hirs_count: 0,
            lirs_count: 0,
            stack: Slab::new(),
            s: Queue::default(),
            object_of: Vec::new(),
            s_units: 0,
            nh_store: Slab::new(),
            nh: Queue::default(),
            q: Queue::default(),
            leaving: Queue::default(),
            missing: None,
            incoming: 0,
            prepared: false,
        }
    }

    // S entries.

    fn s_push(&mut self, key: u64, size: u32, meta: u32, object: Slot) {
        if let Some(e) = self.stack.insert(key, size) {
            self.stack.nodes[e as usize].set_meta(meta);
            self.s.push_head(&mut self.stack.nodes, e);
            self.s_units += self.units.of_size(size);
            let i = e as usize;
            if i >= self.object_of.len() {
                self.object_of.resize(i + 1, NIL);
            }
            self.object_of[i] = object;
        }
    }

    fn s_remove(&mut self, e: Slot) {
        let size = self.stack.nodes[e as usize].size;
        self.s.unlink(&mut self.stack.nodes, e);
        self.stack.remove(e);
        self.s_units -= self.units.of_size(size);
    }

    fn nh_remove(&mut self, key: u64) {
        if let Some(e) = self.nh_store.find(key) {
            self.nh.unlink(&mut self.nh_store.nodes, e);
            self.nh_store.remove(e);
        }
    }

    /// libCacheSim's `LIRS_prune`: HIR entries leave S's bottom until a LIR one (or the top).
    fn prune(&mut self) {
        loop {
            let e = self.s.tail;
            if e == NIL || e == self.s.head {
                return;
            }
            let key = self.stack.nodes[e as usize].key;
            let meta = self.stack.nodes[e as usize].meta();
            if meta & S_LIR != 0 {
                return;
            }
            if meta & S_RESIDENT == 0 {
                self.nh_remove(key);
            }
            self.s_remove(e);
        }
    }

    /// libCacheSim's `limitStack`: non-resident keys leave S while it holds over `2c`.
    fn limit_stack(&mut self) {
        while self.s_units > 2 * self.units.total {
            let e = self.nh.pop_tail(&mut self.nh_store.nodes);
            if e == NIL {
                return;
            }
            let key = self.nh_store.nodes[e as usize].key;
            self.nh_store.remove(e);
            if let Some(s) = self.stack.find(key) {
                self.s_remove(s);
            }
        }
    }

    // Resident objects.

    fn leave(&mut self, nodes: &mut [Node], slot: Slot) {
        nodes[slot as usize].set_meta(LEAVING);
        self.leaving.push_head(nodes, slot);
    }

    /// libCacheSim's `evictHIR`: Q's oldest leaves the cache (its S entry, if any, stays as a
    /// non-resident key, also on NH). False if Q is empty.
    fn evict_hir(&mut self, nodes: &mut [Node]) -> bool {
        let slot = self.q.pop_tail(nodes);
        if slot == NIL {
            return false;
        }
        let Node { key, size, .. } = nodes[slot as usize];
        self.hirs_count = self.hirs_count.saturating_sub(self.units.of_size(size));
        if let Some(e) = self.stack.find(key) {
            let meta = self.stack.nodes[e as usize].meta();
            self.stack.nodes[e as usize].set_meta(meta & !S_RESIDENT);
            self.object_of[e as usize] = NIL;
            if self.nh_store.find(key).is_none() {
                if let Some(n) = self.nh_store.insert(key, size) {
                    self.nh.push_head(&mut self.nh_store.nodes, n);
                }
            }
        }
        self.leave(nodes, slot);
        true
    }

    /// libCacheSim's `evictLIR`: S's bottom (a LIR object) is demoted into Q (making room
    /// there first), then S is pruned. False if S's bottom is not a LIR object.
    fn evict_lir(&mut self, nodes: &mut [Node]) -> bool {
        let e = self.s.tail;
        if e == NIL || self.stack.nodes[e as usize].meta() & S_LIR == 0 {
            return false;
        }
        let slot = self.object_of[e as usize];
        self.s_remove(e);
        if slot != NIL {
            let need = self.units.of_size(nodes[slot as usize].size);
            self.lirs_count = self.lirs_count.saturating_sub(need);
            if need <= self.hirs_limit {
                while self.hirs_count + need > self.hirs_limit && self.evict_hir(nodes) {}
                nodes[slot as usize].set_meta(IN_Q);
                self.q.push_head(nodes, slot);
                self.hirs_count += need;
            } else {
                self.leave(nodes, slot);
            }
        }
        self.prune();
        true
    }

    /// Demotes LIR objects until `need` more units fit the LIR set.
    fn make_lir_room(&mut self, nodes: &mut [Node], need: u64) {
        while self.lirs_count + need > self.lirs_limit && self.evict_lir(nodes) {}
    }

    /// libCacheSim's `LIRS_insert` for a key LIRS does not know.
    fn insert_new(&mut self, nodes: &mut [Node], slot: Slot) {
        let Node { key, size, .. } = nodes[slot as usize];
        let need = self.units.of_size(size);
        if self.lirs_count + need <= self.lirs_limit {
            nodes[slot as usize].set_meta(LIR);
            self.s_push(key, size, S_LIR | S_RESIDENT, slot);
            self.lirs_count += need;
        } else {
            nodes[slot as usize].set_meta(IN_Q);
            self.s_push(key, size, S_RESIDENT, slot);
            self.q.push_head(nodes, slot);
            self.hirs_count += need;
        }
    }

    /// Both sets are too full for `need` more units.
    fn both_full(&self, need: u64) -> bool {
        self.lirs_count + need > self.lirs_limit && self.hirs_count + need > self.hirs_limit
    }
}

fn limits(units: Units) -> (u64, u64) {
    let hirs = units.fraction(HIRS_RATIO).max(1);
    (hirs, units.total.saturating_sub(hirs))
}

impl EvictionPolicy for Lirs {
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        self.missing = None;
        self.prepared = false;
        let Node { key, size, .. } = nodes[slot as usize];
        let meta = nodes[slot as usize].meta();
        if meta & LEAVING != 0 {
            // libCacheSim evicted it already; a hit here, treated as a new object (its key's
            // non-resident traces go first, so that S never holds a key twice).
            self.leaving.unlink(nodes, slot);
            if let Some(e) = self.stack.find(key) {
                self.s_remove(e);
            }
            self.nh_remove(key);
            self.insert_new(nodes, slot);
            self.limit_stack();
            return;
        }
        let need = self.units.of_size(size);
        let in_s = self.stack.find(key);
        if let Some(e) = in_s {
            self.s.move_to_head(&mut self.stack.nodes, e);
        }
        if meta & IN_Q != 0 {
            self.q.move_to_head(nodes, slot);
        }
        match in_s {
            Some(_) if meta & LIR != 0 => self.prune(),
            Some(e) => {
                // libCacheSim's `hit_RD_HIRinS`.
                if meta & IN_Q != 0 {
                    self.hirs_count = self.hirs_count.saturating_sub(need);
                    self.q.unlink(nodes, slot);
                    nodes[slot as usize].set_meta(0);
                }
                self.make_lir_room(nodes, need);
                if let Some(e) = self.stack.find(key).filter(|&f| f == e) {
                    self.stack.nodes[e as usize].set_meta(S_LIR | S_RESIDENT);
                }
                nodes[slot as usize].set_meta(LIR);
                self.lirs_count += need;
            }
            None => {
                // libCacheSim's `hit_RD_HIRinQ`. Demoting may evict this very object from Q
                // (libCacheSim then keeps a resident entry for an object it no longer has);
                // its entry goes on S as non-resident instead, so S never names a freed slot.
                self.make_lir_room(nodes, need);
                if nodes[slot as usize].meta() & LEAVING != 0 {
                    self.s_push(key, size, 0, NIL);
                    if self.nh_store.find(key).is_none() {
                        if let Some(n) = self.nh_store.insert(key, size) {
                            self.nh.push_head(&mut self.nh_store.nodes, n);
                        }
                    }
                } else {
                    self.s_push(key, size, S_RESIDENT, slot);
                }
            }
        }
        self.limit_stack();
    }

    fn on_miss(&mut self, key: u64) {
        self.prepared = false;
        let in_s = self.stack.find(key);
        if let Some(e) = in_s {
            self.s.move_to_head(&mut self.stack.nodes, e);
        }
        self.missing = Some((key, in_s.is_some()));
    }

    fn can_admit(&self, size: u32) -> bool {
        let need = self.units.of_size(size);
        match self.missing {
            Some((_, true)) => true,
            _ => need <= self.lirs_limit && need <= self.hirs_limit,
        }
    }

    fn owes_eviction(&mut self, nodes: &mut [Node], key: u64, size: u32) -> bool {
        let need = self.units.of_size(size);
        self.incoming = need;
        if !std::mem::replace(&mut self.prepared, true) {
            // libCacheSim's `LIRS_can_insert`, once per insert.
            match self.missing {
                Some((k, true)) if k == key => {
                    self.make_lir_room(nodes, need);
                    self.nh_remove(key);
                }
                Some((k, false)) if k == key && self.both_full(need) => {
                    while self.hirs_count + need > self.hirs_limit && self.evict_hir(nodes) {}
                }
                _ => {}
            }
        }
        !self.leaving.is_empty()
    }

    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        let Node { key, size, .. } = nodes[slot as usize];
        let on_stack = match self.missing {
            Some((k, true)) if k == key => self.stack.find(key),
            _ => None,
        };
        match on_stack {
            Some(e) => {
                self.stack.nodes[e as usize].set_meta(S_LIR | S_RESIDENT);
                self.object_of[e as usize] = slot;
                nodes[slot as usize].set_meta(LIR);
                self.lirs_count += self.units.of_size(size);
            }
            None => self.insert_new(nodes, slot),
        }
        self.missing = None;
        self.prepared = false;
        self.limit_stack();
    }

    fn on_resize(&mut self, nodes: &mut [Node], slot: Slot, old_size: u32) {
        let Node { key, size, .. } = nodes[slot as usize];
        let (old, new) = (self.units.of_size(old_size), self.units.of_size(size));
        let meta = nodes[slot as usize].meta();
        if meta & LIR != 0 {
            self.lirs_count = (self.lirs_count + new).saturating_sub(old);
        } else if meta & IN_Q != 0 {
            self.hirs_count = (self.hirs_count + new).saturating_sub(old);
        }
        if let Some(e) = self.stack.find(key) {
            self.s_units = (self.s_units + new).saturating_sub(old);
            self.stack.resize(e, size);
        }
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        // libCacheSim's `LIRS_evict` for the current miss, repeated while it only demotes.
        for _ in 0..4 {
            let victim = self.leaving.pop_tail(nodes);
            if victim != NIL {
                return victim;
            }
            let need = self.incoming;
            let progressed = match self.missing {
                Some((_, true)) if self.prepared => {
                    while self.hirs_count >= self.hirs_limit && self.evict_hir(nodes) {}
                    self.evict_lir(nodes)
                }
                Some((_, false)) if self.prepared && self.both_full(need) => self.evict_hir(nodes),
                _ => false,
            };
            if !progressed {
                break;
            }
        }
        // Anything else (libCacheSim would not get here): Q's oldest, else demote LIR.
        loop {
            let victim = self.leaving.pop_tail(nodes);
            if victim != NIL {
                return victim;
            }
            if !self.evict_hir(nodes) && !self.evict_lir(nodes) {
                return NIL;
            }
        }
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        let Node { key, size, .. } = nodes[slot as usize];
        let meta = nodes[slot as usize].meta();
        if meta & LEAVING != 0 {
            self.leaving.unlink(nodes, slot);
            return;
        }
        let need = self.units.of_size(size);
        if meta & IN_Q != 0 {
            self.q.unlink(nodes, slot);
            self.hirs_count = self.hirs_count.saturating_sub(need);
        }
        if meta & LIR != 0 {
            self.lirs_count = self.lirs_count.saturating_sub(need);
        }
        if let Some(e) = self.stack.find(key) {
            self.s_remove(e);
            if meta & LIR != 0 {
                self.prune();
            }
        }
    }

    fn on_capacity(&mut self, capacity: Capacity) {
        self.units = Units::of(capacity);
        (self.hirs_limit, self.lirs_limit) = limits(self.units);
    }

    fn heap_bytes(&self) -> usize {
        self.stack.heap_bytes()
            + self.nh_store.heap_bytes()
            + self.object_of.capacity() * size_of::<Slot>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Harness;

    #[test]
    fn a_reused_non_resident_key_becomes_lir_and_demotes_the_stack_bottom() {
        // 1000 bytes: the HIR set holds 10, the LIR set 990.
        let capacity = Capacity::bytes(1000);
        let mut h = Harness::new(Lirs::new(capacity), capacity);
        assert_eq!((h.policy.hirs_limit, h.policy.lirs_limit), (10, 990));
        for k in 0..99 {
            h.access(k, 10);
        }
        assert!((0..99).all(|k| h.meta(k) == LIR));
        // The LIR set is full: 100 is a resident HIR object; 101 pushes it out of Q, and its
        // key stays on S as non-resident.
        h.access(100, 10);
        assert_eq!(h.meta(100), IN_Q);
        h.access(101, 10);
        assert_eq!(h.evicted, vec![100]);
        assert!(h.policy.stack.find(100).is_some());
        // 100 again, within S's reach: it becomes LIR; S's bottom (0) is demoted into Q,
        // which first evicts 101.
        assert!(!h.access(100, 10));
        assert_eq!(h.evicted, vec![100, 101]);
        assert_eq!((h.meta(100), h.meta(0)), (LIR, IN_Q));
        assert_eq!((h.policy.lirs_count, h.policy.hirs_count), (990, 10));
    }

    /// Every resident S entry names a live node of its key, every cached object is in exactly
    /// one of LIR, Q or leaving, and the LIR and HIR totals match what is there.
    fn check(h: &Harness<Lirs>, step: usize) {
        let l = &h.policy;
        let (mut lir, mut hir) = (0, 0);
        for slot in h.store.slots() {
            let node = h.store.nodes[slot as usize];
            match node.meta() {
                LIR => lir += 1,
                IN_Q => hir += 1,
                LEAVING => {}
                other => panic!("step {step}: key {} has meta {other}", node.key),
            }
            if node.meta() == LIR {
                assert!(l.stack.find(node.key).is_some(), "step {step}: LIR off S");
            }
        }
        assert_eq!((l.lirs_count, l.hirs_count), (lir, hir), "step {step}");
        for e in l.stack.slots() {
            let entry = l.stack.nodes[e as usize];
            if entry.meta() & S_RESIDENT != 0 {
                let slot = l.object_of[e as usize];
                let node = h.store.nodes[slot as usize];
                assert!(!node.is_free() && node.key == entry.key, "step {step}");
            }
        }
    }

    #[test]
    fn bookkeeping_stays_consistent_under_a_random_stream() {
        // Below 200 objects Q holds one object, so a hit on an object in Q only demotes a LIR
        // object into Q, which evicts the very object being hit.
        let capacity = Capacity::objects(150);
        let mut h = Harness::new(Lirs::new(capacity), capacity);
        let mut x = 12_345u64;
        for step in 0..50_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // A hot set and a long tail, so that keys return while still on S.
            let key = if (x >> 60) < 12 {
                (x >> 33) % 150
            } else {
                (x >> 33) % 2_000
            };
            h.access(key, 1);
            check(&h, step);
            assert!(h.store.len() <= 150);
        }
    }

    #[test]
    fn objects_larger_than_the_hir_set_are_refused() {
        let mut l = Lirs::new(Capacity::bytes(1000));
        l.on_miss(7);
        assert!(l.can_admit(10));
        assert!(!l.can_admit(11));
    }
}
