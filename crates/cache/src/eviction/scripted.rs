//! Eviction and admission decided by per-request hooks ([`crate::hooks::ObjectHooks`], a Lua
//! policy's `admit`/`on_hit`/`on_insert`/`on_evict`/`priority`/`evict`).
//!
//! Victim choice is a priority order the host keeps, not a scan the script makes: each object
//! has a number (`priority`, asked after its insert and after each hit) and a queue (0..4);
//! an indexed min-heap per queue gives the lowest in O(log n), and the script is asked only
//! to pick among the heads of the non-empty queues (`evict`, when it defines one). A script
//! that walked its own list per eviction would cost a Lua loop per eviction, and one offered
//! a random sample could not express LRU or ARC exactly.
//!
//! Orders that only grow (a priority of "last access", as in LRU and ARC) are the common
//! case, and a heap pays a sift to a leaf for each of them: a queue therefore starts as a
//! list linked in priority order, where a placement at or after the tail is O(1), and turns
//! into a heap (a sorted list already is one) the first time a placement lands before the
//! tail. It returns to a list when it empties.
//!
//! An LRU queue is the victim order of a script without `priority`, and the fallback the
//! cache switches to for good the first time a hook fails. With `priority` it is not kept
//! while the hooks decide (it would cost a second linked list's cache misses per request):
//! when a hook fails it is rebuilt once from the objects' last accesses, which the records
//! hold, so the fallback evicts in the same order as an LRU kept all along.

use super::EvictionPolicy;
use crate::hooks::{HookFailure, HookObject, HookSet, ObjectHooks, Placement, MAX_QUEUES};
use crate::queue::Queue;
use crate::slab::{Node, Slot, NIL};
use crate::Capacity;

/// Children per heap node: a 4-ary heap is half as deep as a binary one, and an LRU-like
/// order sinks every hit object to a leaf.
const ARITY: usize = 4;

/// A heap entry carries its ordering key, so a sift reads the heap, not the records.
#[derive(Clone, Copy)]
struct HeapEntry {
    priority: f64,
    /// Ties go to the earliest insert (unique per object).
    inserted: u64,
    slot: Slot,
}

impl HeapEntry {
    #[inline]
    fn before(&self, other: &HeapEntry) -> bool {
        // A total order: the hook side refuses NaN.
        (self.priority, self.inserted) < (other.priority, other.inserted)
    }
}

/// What the cache keeps per object for the hooks, indexed by slot.
#[derive(Clone, Copy, Default)]
struct Record {
    obj: HookObject,
    /// The last priority `priority` gave (the list's order).
    priority: f64,
    queue: u8,
    /// Position in its queue's heap; in a listed queue, the previous object.
    heap_at: u32,
    /// In a listed queue, the next object.
    next: Slot,
    /// The object is cached (what rebuilding the LRU queue walks).
    cached: bool,
}

impl Record {
    #[inline]
    fn key(&self) -> (f64, u64) {
        (self.priority, self.obj.inserted)
    }
}

/// One eviction queue: a list in priority order while placements come in order, a heap once
/// one did not.
struct Order {
    listed: bool,
    head: Slot,
    tail: Slot,
    heap: Vec<HeapEntry>,
}

impl Default for Order {
    fn default() -> Order {
        Order {
            listed: true,
            head: NIL,
            tail: NIL,
            heap: Vec::new(),
        }
    }
}

/// The hooks, reachable only through `&mut`: sharing a `&Scripted` between threads shares
/// nothing of them, so the cache stays `Sync` (hosts such as the Python package need it)
/// although a Lua state is only `Send`.
struct Exclusive(Box<dyn ObjectHooks>);

// SAFETY: `Exclusive` has no method taking `&self` and its field is private, so a shared
// reference gives no access to the hooks; they are only reached through `&mut`, which is
// unique.
unsafe impl Sync for Exclusive {}

impl Exclusive {
    fn get(&mut self) -> &mut dyn ObjectHooks {
        &mut *self.0
    }
}

pub(crate) struct Scripted {
    hooks: Exclusive,
    defined: HookSet,
    records: Vec<Record>,
    orders: [Order; MAX_QUEUES],
    lru: Queue,
    /// Whether `lru` is up to date: always without `priority`, else from a failure on.
    lru_kept: bool,
    /// A hook failed and `lru` is to be rebuilt at the next call that has the nodes.
    lru_stale: bool,
    /// Virtual time: requests seen (hits and misses).
    now: u64,
    /// The user numbers `admit` gave the object about to be inserted.
    admitted: Option<HookObject>,
    failure: Option<HookFailure>,
}

impl Scripted {
    pub(crate) fn new(mut hooks: Box<dyn ObjectHooks>, capacity: Capacity) -> Scripted {
        hooks.set_capacity(capacity);
        let defined = hooks.defined();
        Scripted {
            hooks: Exclusive(hooks),
            defined,
            records: Vec::new(),
            orders: Default::default(),
            lru: Queue::default(),
            lru_kept: !defined.priority,
            lru_stale: false,
            now: 0,
            admitted: None,
            failure: None,
        }
    }

    pub(crate) fn failure(&self) -> Option<&HookFailure> {
        self.failure.as_ref()
    }

    /// Whether the hooks still decide (no hook has failed).
    #[inline]
    fn live(&self) -> bool {
        self.failure.is_none()
    }

    /// Records the first failure and stops asking the hooks: the LRU queue decides from now.
    #[cold]
    fn fail(&mut self, failure: HookFailure) {
        if self.failure.is_none() {
            self.failure = Some(failure);
            self.orders = Default::default();
            self.lru_stale = !self.lru_kept;
        }
    }

    /// Rebuilds the LRU queue after a failure: the cached objects by last access (ties: the
    /// earliest insert), most recent at the head.
    #[inline]
    fn sync_lru(&mut self, nodes: &mut [Node]) {
        if self.lru_stale {
            self.rebuild_lru(nodes);
        }
    }

    #[cold]
    fn rebuild_lru(&mut self, nodes: &mut [Node]) {
        let mut cached: Vec<Slot> = (0..self.records.len() as Slot)
            .filter(|&s| self.records[s as usize].cached)
            .collect();
        cached.sort_unstable_by_key(|&s| {
            let obj = &self.records[s as usize].obj;
            (obj.last_access, obj.inserted)
        });
        self.lru = Queue::default();
        for slot in cached {
            self.lru.push_head(nodes, slot);
        }
        self.lru_stale = false;
        self.lru_kept = true;
    }

    fn record(&mut self, slot: Slot) -> &mut Record {
        let i = slot as usize;
        if i >= self.records.len() {
            self.records.resize(i + 1, Record::default());
        }
        &mut self.records[i]
    }

    /// Asks `priority` where `slot` goes and moves it there (`fresh`: not in a queue yet).
    fn place(&mut self, slot: Slot, fresh: bool) {
        let mut obj = self.records[slot as usize].obj;
        let placed = self.hooks.get().priority(&mut obj);
        self.records[slot as usize].obj.user = obj.user;
        let Placement { priority, queue } = match placed {
            Ok(p) => p,
            Err(e) => return self.fail(e),
        };
        let rec = self.records[slot as usize];
        let q = queue as usize;
        if !fresh && rec.queue == queue && !self.orders[q].listed {
            // Same heap: one sift from where it is instead of a removal and a push.
            let at = rec.heap_at as usize;
            self.records[slot as usize].priority = priority;
            self.orders[q].heap[at].priority = priority;
            let at = self.sift_down(q, at);
            self.sift_up(q, at);
            return;
        }
        if !fresh {
            self.dequeue(slot);
        }
        let rec = &mut self.records[slot as usize];
        rec.queue = queue;
        rec.priority = priority;
        self.enqueue(q, slot);
    }

    /// Adds `slot` (its record's priority and queue set) to queue `q`.
    fn enqueue(&mut self, q: usize, slot: Slot) {
        let key = self.records[slot as usize].key();
        let order = &self.orders[q];
        if order.listed {
            let tail = order.tail;
            if tail == NIL || self.records[tail as usize].key() <= key {
                return self.link_tail(q, slot);
            }
            self.list_to_heap(q);
        }
        let rec = self.records[slot as usize];
        self.heap_push(
            q,
            HeapEntry {
                priority: rec.priority,
                inserted: rec.obj.inserted,
                slot,
            },
        );
    }

    /// Takes `slot` out of its queue.
    fn dequeue(&mut self, slot: Slot) {
        let q = self.records[slot as usize].queue as usize;
        if self.orders[q].listed {
            self.unlink(q, slot);
        } else {
            self.heap_remove(slot);
            if self.orders[q].heap.is_empty() {
                self.orders[q].listed = true;
            }
        }
    }

    /// The lowest entry of queue `q`.
    fn first(&self, q: usize) -> Option<HeapEntry> {
        let order = &self.orders[q];
        if !order.listed {
            return order.heap.first().copied();
        }
        (order.head != NIL).then(|| {
            let rec = &self.records[order.head as usize];
            HeapEntry {
                priority: rec.priority,
                inserted: rec.obj.inserted,
                slot: order.head,
            }
        })
    }

    fn link_tail(&mut self, q: usize, slot: Slot) {
        let tail = self.orders[q].tail;
        let rec = &mut self.records[slot as usize];
        rec.heap_at = tail;
        rec.next = NIL;
        if tail == NIL {
            self.orders[q].head = slot;
        } else {
            self.records[tail as usize].next = slot;
        }
        self.orders[q].tail = slot;
    }

    fn unlink(&mut self, q: usize, slot: Slot) {
        let Record {
            heap_at: prev,
            next,
            ..
        } = self.records[slot as usize];
        if prev == NIL {
            self.orders[q].head = next;
        } else {
            self.records[prev as usize].next = next;
        }
        if next == NIL {
            self.orders[q].tail = prev;
        } else {
            self.records[next as usize].heap_at = prev;
        }
    }

    /// Turns a listed queue into a heap: the list in order is a valid heap as it stands.
    #[cold]
    fn list_to_heap(&mut self, q: usize) {
        let mut heap = std::mem::take(&mut self.orders[q].heap);
        heap.clear();
        let mut at = self.orders[q].head;
        while at != NIL {
            let rec = &mut self.records[at as usize];
            let next = rec.next;
            rec.heap_at = heap.len() as u32;
            heap.push(HeapEntry {
                priority: rec.priority,
                inserted: rec.obj.inserted,
                slot: at,
            });
            at = next;
        }
        self.orders[q] = Order {
            listed: false,
            head: NIL,
            tail: NIL,
            heap,
        };
    }

    fn heap_push(&mut self, q: usize, entry: HeapEntry) {
        self.orders[q].heap.push(entry);
        let at = self.orders[q].heap.len() - 1;
        self.records[entry.slot as usize].heap_at = at as u32;
        self.sift_up(q, at);
    }

    fn heap_remove(&mut self, slot: Slot) {
        let rec = self.records[slot as usize];
        let (q, at) = (rec.queue as usize, rec.heap_at as usize);
        let heap = &mut self.orders[q].heap;
        let last = heap.pop().expect("a placed object is in its heap");
        if at < heap.len() {
            heap[at] = last;
            self.records[last.slot as usize].heap_at = at as u32;
            let at = self.sift_down(q, at);
            self.sift_up(q, at);
        }
    }

    /// Moves the entry at `at` up to its place; returns where it ends.
    fn sift_up(&mut self, q: usize, mut at: usize) -> usize {
        let heap = &mut self.orders[q].heap;
        let entry = heap[at];
        while at > 0 {
            let parent = (at - 1) / ARITY;
            if !entry.before(&heap[parent]) {
                break;
            }
            heap[at] = heap[parent];
            self.records[heap[at].slot as usize].heap_at = at as u32;
            at = parent;
        }
        heap[at] = entry;
        self.records[entry.slot as usize].heap_at = at as u32;
        at
    }

    /// Moves the entry at `at` down to its place; returns where it ends.
    fn sift_down(&mut self, q: usize, mut at: usize) -> usize {
        let heap = &mut self.orders[q].heap;
        let len = heap.len();
        let entry = heap[at];
        loop {
            let first = ARITY * at + 1;
            if first >= len {
                break;
            }
            let mut low = first;
            for child in first + 1..(first + ARITY).min(len) {
                if heap[child].before(&heap[low]) {
                    low = child;
                }
            }
            if !heap[low].before(&entry) {
                break;
            }
            heap[at] = heap[low];
            self.records[heap[at].slot as usize].heap_at = at as u32;
            at = low;
        }
        heap[at] = entry;
        self.records[entry.slot as usize].heap_at = at as u32;
        at
    }

    /// The victim by the hooks' order, `None` to let the LRU queue decide (no `priority`
    /// hook, or a hook failed just now).
    fn choose(&mut self) -> Option<Slot> {
        let mut heads = [NIL; MAX_QUEUES];
        let mut n = 0;
        let mut firsts = [None; MAX_QUEUES];
        for q in 0..MAX_QUEUES {
            if let Some(first) = self.first(q) {
                heads[n] = first.slot;
                firsts[n] = Some(first);
                n += 1;
            }
        }
        if n == 0 {
            return None;
        }
        let pick = if n > 1 && self.defined.evict {
            let mut candidates = [HookObject::default(); MAX_QUEUES];
            for (c, &slot) in candidates.iter_mut().zip(&heads[..n]) {
                *c = self.records[slot as usize].obj;
            }
            match self.hooks.get().evict(&candidates[..n]) {
                Ok(i) if i < n => i,
                Ok(i) => {
                    self.fail(HookFailure {
                        hook: "evict",
                        message: format!("chose candidate {} of {n}", i + 1),
                    });
                    return None;
                }
                Err(e) => {
                    self.fail(e);
                    return None;
                }
            }
        } else {
            (1..n).fold(0, |low, i| {
                if matches!((firsts[i], firsts[low]), (Some(a), Some(b)) if a.before(&b)) {
                    i
                } else {
                    low
                }
            })
        };
        let slot = heads[pick];
        self.dequeue(slot);
        Some(slot)
    }
}

impl EvictionPolicy for Scripted {
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        self.now += 1;
        self.sync_lru(nodes);
        if self.lru_kept {
            self.lru.move_to_head(nodes, slot);
        }
        let now = self.now;
        let rec = &mut self.records[slot as usize];
        rec.obj.hits += 1;
        rec.obj.last_access = now;
        rec.obj.size = nodes[slot as usize].size;
        let mut obj = rec.obj;
        if !self.live() {
            return;
        }
        if self.defined.on_hit {
            let called = self.hooks.get().on_hit(&mut obj);
            self.records[slot as usize].obj.user = obj.user;
            if let Err(e) = called {
                return self.fail(e);
            }
        }
        if self.defined.priority {
            self.place(slot, false);
        }
    }

    fn on_miss(&mut self, _key: u64) {
        self.now += 1;
    }

    fn admit(&mut self, key: u64, size: u32) -> bool {
        self.admitted = None;
        if !self.live() || !self.defined.admit {
            return true;
        }
        let mut obj = HookObject {
            id: key,
            size,
            last_access: self.now,
            inserted: self.now,
            ..HookObject::default()
        };
        match self.hooks.get().admit(&mut obj) {
            Ok(admit) => {
                self.admitted = Some(obj);
                admit
            }
            Err(e) => {
                self.fail(e);
                true
            }
        }
    }

    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        self.sync_lru(nodes);
        if self.lru_kept {
            self.lru.push_head(nodes, slot);
        }
        let node = nodes[slot as usize];
        let user = match self.admitted.take() {
            Some(obj) if obj.id == node.key => obj.user,
            _ => Default::default(),
        };
        let now = self.now;
        let rec = self.record(slot);
        *rec = Record {
            obj: HookObject {
                id: node.key,
                size: node.size,
                hits: 0,
                last_access: now,
                inserted: now,
                user,
            },
            cached: true,
            ..Record::default()
        };
        let mut obj = rec.obj;
        if !self.live() {
            return;
        }
        if self.defined.on_insert {
            let called = self.hooks.get().on_insert(&mut obj);
            self.records[slot as usize].obj.user = obj.user;
            if let Err(e) = called {
                return self.fail(e);
            }
        }
        if self.defined.priority {
            self.place(slot, true);
        }
    }

    fn on_resize(&mut self, nodes: &mut [Node], slot: Slot, _old_size: u32) {
        self.records[slot as usize].obj.size = nodes[slot as usize].size;
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        let chosen = if self.live() && self.defined.priority {
            self.choose()
        } else {
            None
        };
        self.sync_lru(nodes);
        let victim = match chosen {
            Some(slot) => {
                if self.lru_kept {
                    self.lru.unlink(nodes, slot);
                }
                slot
            }
            // No priority hook, or the hooks just failed (their queues are gone).
            None => self.lru.pop_tail(nodes),
        };
        if victim != NIL {
            self.records[victim as usize].cached = false;
        }
        if victim != NIL && self.live() && self.defined.on_evict {
            let mut obj = self.records[victim as usize].obj;
            if let Err(e) = self.hooks.get().on_evict(&mut obj) {
                self.fail(e);
            }
        }
        victim
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        self.sync_lru(nodes);
        if self.lru_kept {
            self.lru.unlink(nodes, slot);
        }
        if self.live() && self.defined.priority {
            self.dequeue(slot);
        }
        self.records[slot as usize].cached = false;
    }

    fn heap_bytes(&self) -> usize {
        self.records.capacity() * std::mem::size_of::<Record>()
            + self
                .orders
                .iter()
                .map(|o| o.heap.capacity() * std::mem::size_of::<HeapEntry>())
                .sum::<usize>()
    }

    fn hook_failure(&self) -> Option<&HookFailure> {
        self.failure()
    }

    fn on_capacity(&mut self, capacity: Capacity) {
        self.hooks.get().set_capacity(capacity);
    }
}
