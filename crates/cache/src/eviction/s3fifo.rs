//! S3-FIFO (Yang et al., SOSP'23) exactly as libCacheSim 0.3.5's `S3FIFO.c` runs it with its
//! defaults `small-size-ratio=0.10, ghost-size-ratio=0.90, move-to-main-threshold=2`:
//!
//! - a small FIFO sized `floor(0.1 * capacity)`, a main FIFO sized `capacity - small`, and a
//!   ghost FIFO of keys (with their sizes) sized `floor(0.9 * capacity)`, all in bytes;
//! - a hit increments the object's counter (saturating here at 3; libCacheSim's counter is
//!   unbounded but only `min(freq, 3)` and `freq >= 2` are ever observed, so the saturation
//!   changes nothing);
//! - a miss that finds the key in the ghost removes it there, and the object then goes to
//!   main; otherwise it goes to small — except before the first eviction ever, when a full
//!   small queue sends new objects to main;
//! - objects must be strictly smaller than the small queue (`size < small`) unless they come
//!   back from the ghost (libCacheSim checks `size <= small` before evicting and refuses
//!   `size >= small` after, so an object of exactly the small size evicts and is dropped);
//! - eviction: if main is over its size or small is empty, main evicts like a 2-bit CLOCK
//!   (an object with counter `f >= 1` is reinserted at main's head with `min(f, 3) - 1`);
//!   otherwise small's oldest objects with counter `>= 2` move to main (counter reset to 0)
//!   until one with a lower counter is evicted into the ghost.
//!
//! libCacheSim sizes everything in bytes. When a [`Capacity`] also (or only) limits objects,
//! the same fractions apply to the object count (small gets at least one object), and a queue
//! is "over" or "full" when either dimension is.

use super::EvictionPolicy;
use crate::queue::Queue;
use crate::slab::{Node, Slab, Slot, NIL};
use crate::Capacity;

const SMALL_SIZE_RATIO: f64 = 0.10;
const GHOST_SIZE_RATIO: f64 = 0.90;
const MOVE_TO_MAIN_THRESHOLD: u32 = 2;

/// `meta` layout: the access counter in the low 2 bits, the queue in bit 2.
const FREQ_MASK: u32 = 0b11;
const IN_MAIN: u32 = 0b100;

/// Limits of one queue; `None` = unlimited in that dimension.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Limits {
    bytes: Option<u64>,
    objects: Option<u64>,
}

/// What one queue holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Usage {
    bytes: u64,
    objects: u64,
}

impl Usage {
    fn add(&mut self, size: u32) {
        self.bytes += u64::from(size);
        self.objects += 1;
    }
    fn sub(&mut self, size: u32) {
        self.bytes -= u64::from(size);
        self.objects -= 1;
    }
}

impl Limits {
    /// Usage strictly above the limit in some dimension.
    fn exceeded_by(&self, u: Usage) -> bool {
        self.bytes.is_some_and(|l| u.bytes > l) || self.objects.is_some_and(|l| u.objects > l)
    }
    /// Usage at or above the limit in some dimension.
    fn reached_by(&self, u: Usage) -> bool {
        self.bytes.is_some_and(|l| u.bytes >= l) || self.objects.is_some_and(|l| u.objects >= l)
    }
}

fn fraction(total: u64, ratio: f64) -> u64 {
    // libCacheSim: `(int64_t)(cache_size * ratio)`, truncating towards zero.
    (total as f64 * ratio) as u64
}

/// Small, main and ghost limits derived from the cache's capacity as libCacheSim does.
fn split(capacity: Capacity) -> (Limits, Limits, Limits) {
    let small_bytes = capacity.bytes.map(|b| fraction(b, SMALL_SIZE_RATIO));
    let small_objects = capacity
        .objects
        .map(|n| fraction(n, SMALL_SIZE_RATIO).max(n.min(1)));
    let small = Limits {
        bytes: small_bytes,
        objects: small_objects,
    };
    let main = Limits {
        bytes: capacity.bytes.zip(small_bytes).map(|(c, s)| c - s),
        objects: capacity.objects.zip(small_objects).map(|(c, s)| c - s),
    };
    let ghost = Limits {
        bytes: capacity.bytes.map(|b| fraction(b, GHOST_SIZE_RATIO)),
        objects: capacity.objects.map(|n| fraction(n, GHOST_SIZE_RATIO)),
    };
    (small, main, ghost)
}

/// Keys recently evicted from the small queue, oldest evicted first once over its limits.
struct Ghost {
    store: Slab,
    fifo: Queue,
    limits: Limits,
}

impl Ghost {
    fn new(limits: Limits) -> Ghost {
        Ghost {
            store: Slab::new(),
            fifo: Queue::default(),
            limits,
        }
    }

    /// libCacheSim creates no ghost when its size is 0; an unlimited cache gets none either
    /// (it never evicts by pressure, and an unbounded ghost would only grow).
    fn enabled(&self) -> bool {
        let l = self.limits;
        (l.bytes.is_some() || l.objects.is_some()) && l.bytes != Some(0) && l.objects != Some(0)
    }

    fn usage(&self) -> Usage {
        Usage {
            bytes: self.store.bytes(),
            objects: self.store.len(),
        }
    }

    fn remove(&mut self, key: u64) -> bool {
        match self.store.find(key) {
            Some(slot) => {
                self.fifo.unlink(&mut self.store.nodes, slot);
                self.store.remove(slot);
                true
            }
            None => false,
        }
    }

    /// libCacheSim's `ghost_fifo->get(obj)`: a FIFO lookup that inserts on miss.
    fn record(&mut self, key: u64, size: u32) {
        if !self.enabled() || self.store.find(key).is_some() {
            return;
        }
        if self.limits.bytes.is_some_and(|l| u64::from(size) > l) {
            return;
        }
        let mut after = self.usage();
        after.add(size);
        while self.limits.exceeded_by(after) {
            let oldest = self.fifo.pop_tail(&mut self.store.nodes);
            if oldest == NIL {
                break;
            }
            let old_size = self.store.nodes[oldest as usize].size;
            self.store.remove(oldest);
            after.sub(old_size);
        }
        if let Some(slot) = self.store.insert(key, size) {
            self.fifo.push_head(&mut self.store.nodes, slot);
        }
    }

    fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
        if !self.enabled() {
            while self.evict_oldest() {}
            return;
        }
        while self.limits.exceeded_by(self.usage()) && self.evict_oldest() {}
    }

    fn evict_oldest(&mut self) -> bool {
        let oldest = self.fifo.pop_tail(&mut self.store.nodes);
        if oldest == NIL {
            return false;
        }
        self.store.remove(oldest);
        true
    }
}

pub(crate) struct S3Fifo {
    small: Queue,
    main: Queue,
    small_usage: Usage,
    main_usage: Usage,
    small_limits: Limits,
    main_limits: Limits,
    ghost: Ghost,
    /// libCacheSim's `has_evicted`: false until the first eviction.
    has_evicted: bool,
    /// The key whose last lookup missed but was found (and removed) in the ghost.
    ghost_hit: Option<u64>,
}

impl S3Fifo {
    pub fn new(capacity: Capacity) -> S3Fifo {
        let (small, main, ghost) = split(capacity);
        S3Fifo {
            small: Queue::default(),
            main: Queue::default(),
            small_usage: Usage::default(),
            main_usage: Usage::default(),
            small_limits: small,
            main_limits: main,
            ghost: Ghost::new(ghost),
            has_evicted: false,
            ghost_hit: None,
        }
    }

    /// Ghost entries now.
    #[cfg(test)]
    fn ghost_len(&self) -> u64 {
        self.ghost.store.len()
    }

    fn push_main(&mut self, nodes: &mut [Node], slot: Slot, freq: u32) {
        let node = &mut nodes[slot as usize];
        node.set_meta(IN_MAIN | freq);
        self.main_usage.add(node.size);
        self.main.push_head(nodes, slot);
    }

    /// Moves small's oldest well-used objects to main until one is evicted to the ghost;
    /// `NIL` if small emptied without evicting.
    fn evict_small(&mut self, nodes: &mut [Node]) -> Slot {
        loop {
            let slot = self.small.pop_tail(nodes);
            if slot == NIL {
                return NIL;
            }
            let Node { key, size, .. } = nodes[slot as usize];
            let meta = nodes[slot as usize].meta();
            self.small_usage.sub(size);
            if meta & FREQ_MASK >= MOVE_TO_MAIN_THRESHOLD {
                self.push_main(nodes, slot, 0);
            } else {
                self.ghost.record(key, size);
                return slot;
            }
        }
    }

    /// Second-chance eviction from main with a 2-bit counter; `NIL` if main is empty.
    fn evict_main(&mut self, nodes: &mut [Node]) -> Slot {
        loop {
            let slot = self.main.tail;
            if slot == NIL {
                return NIL;
            }
            let freq = nodes[slot as usize].meta() & FREQ_MASK;
            if freq >= 1 {
                self.main.move_to_head(nodes, slot);
                nodes[slot as usize].set_meta(IN_MAIN | (freq.min(3) - 1));
            } else {
                self.main.unlink(nodes, slot);
                self.main_usage.sub(nodes[slot as usize].size);
                return slot;
            }
        }
    }

    fn usage_of(&mut self, meta: u32) -> &mut Usage {
        if meta & IN_MAIN != 0 {
            &mut self.main_usage
        } else {
            &mut self.small_usage
        }
    }
}

impl EvictionPolicy for S3Fifo {
    #[inline]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        self.ghost_hit = None;
        let node = &mut nodes[slot as usize];
        let meta = node.meta();
        if meta & FREQ_MASK < FREQ_MASK {
            node.set_meta(meta + 1);
        }
    }

    fn on_miss(&mut self, key: u64) {
        self.ghost_hit = if self.ghost.remove(key) {
            Some(key)
        } else {
            None
        };
    }

    fn can_admit(&self, size: u32) -> bool {
        match self.small_limits.bytes {
            Some(small) => u64::from(size) <= small,
            None => true,
        }
    }

    fn admit_after_evictions(&mut self, key: u64, size: u32) -> bool {
        let below_small = match self.small_limits.bytes {
            Some(small) => u64::from(size) < small,
            None => true,
        };
        self.ghost_hit == Some(key) || below_small
    }

    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        let key = nodes[slot as usize].key;
        let from_ghost = self.ghost_hit.take() == Some(key);
        if from_ghost || (!self.has_evicted && self.small_limits.reached_by(self.small_usage)) {
            self.push_main(nodes, slot, 0);
        } else {
            let node = &mut nodes[slot as usize];
            node.set_meta(0);
            self.small_usage.add(node.size);
            self.small.push_head(nodes, slot);
        }
    }

    fn on_resize(&mut self, nodes: &mut [Node], slot: Slot, old_size: u32) {
        let Node { size, .. } = nodes[slot as usize];
        let usage = self.usage_of(nodes[slot as usize].meta());
        usage.bytes = usage.bytes - u64::from(old_size) + u64::from(size);
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        self.has_evicted = true;
        loop {
            if self.main_limits.exceeded_by(self.main_usage) || self.small.is_empty() {
                let victim = self.evict_main(nodes);
                if victim != NIL || self.small.is_empty() {
                    return victim;
                }
            } else {
                let victim = self.evict_small(nodes);
                if victim != NIL {
                    return victim;
                }
            }
        }
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        let Node { size, .. } = nodes[slot as usize];
        let meta = nodes[slot as usize].meta();
        self.usage_of(meta).sub(size);
        if meta & IN_MAIN != 0 {
            self.main.unlink(nodes, slot);
        } else {
            self.small.unlink(nodes, slot);
        }
    }

    fn on_capacity(&mut self, capacity: Capacity) {
        let (small, main, ghost) = split(capacity);
        self.small_limits = small;
        self.main_limits = main;
        self.ghost.set_limits(ghost);
    }

    /// The ghost's keys: metadata for objects no longer cached.
    fn heap_bytes(&self) -> usize {
        self.ghost.store.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(b: u64) -> Capacity {
        Capacity {
            bytes: Some(b),
            objects: None,
        }
    }

    #[test]
    fn splits_capacity_like_libcachesim() {
        let (small, main, ghost) = split(bytes(292_272));
        assert_eq!(small.bytes, Some(29_227));
        assert_eq!(main.bytes, Some(263_045));
        assert_eq!(ghost.bytes, Some(263_044));
        let (small, main, _) = split(Capacity {
            bytes: None,
            objects: Some(5),
        });
        assert_eq!((small.objects, main.objects), (Some(1), Some(4)));
    }

    #[test]
    fn size_rules_follow_the_small_queue() {
        let s = S3Fifo::new(bytes(1000));
        assert!(s.can_admit(100));
        assert!(!s.can_admit(101));
        let mut s = s;
        assert!(!s.admit_after_evictions(7, 100), "size == small is refused");
        assert!(s.admit_after_evictions(7, 99));
    }

    #[test]
    fn ghost_is_bounded_by_bytes() {
        let mut g = Ghost::new(Limits {
            bytes: Some(100),
            objects: None,
        });
        for k in 0..10 {
            g.record(k, 30);
        }
        assert_eq!(
            g.usage(),
            Usage {
                bytes: 90,
                objects: 3
            }
        );
        assert!(g.remove(9) && g.remove(8) && g.remove(7));
        assert!(!g.remove(6), "older keys were pushed out");
        let mut s = S3Fifo::new(bytes(0));
        assert!(!s.ghost.enabled());
        s.ghost.record(1, 1);
        assert_eq!(s.ghost_len(), 0);
    }
}
