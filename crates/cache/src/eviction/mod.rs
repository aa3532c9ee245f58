//! The eviction algorithms, one file each behind one trait, as libCacheSim organises them.
//!
//! An algorithm owns only its queues and per-object `meta` bits; the slab, the index and the
//! capacity checks belong to [`crate::Cache`]. [`Evictor`] dispatches statically over the
//! built-in algorithms so the per-request path has no virtual calls.

mod clock;
mod fifo;
mod lru;
mod s3fifo;
mod scripted;
mod sieve;

use crate::hooks::{HookFailure, ObjectHooks};
use crate::slab::{Node, Slot};
use crate::{Algorithm, Capacity};

/// What an eviction algorithm decides. The cache calls these in libCacheSim's order: a lookup
/// either hits (`on_hit`) or misses (`on_miss`); an insertion first asks `can_admit`, then
/// evicts (`evict`) until the object fits, then asks `admit_after_evictions`, then links the
/// new node (`on_insert`).
pub(crate) trait EvictionPolicy {
    /// A lookup found the object at `slot`.
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot);

    /// A lookup did not find `key`.
    fn on_miss(&mut self, _key: u64) {}

    /// Whether an object of `size` bytes may enter at all, before anything is evicted.
    fn can_admit(&self, _size: u32) -> bool {
        true
    }

    /// Whether the object `key` of `size` bytes, absent and about to enter, may (a script's
    /// `admit` hook); asked before anything is evicted for it.
    fn admit(&mut self, _key: u64, _size: u32) -> bool {
        true
    }

    /// Whether the object is still taken once room was made (S3-FIFO refuses some here).
    fn admit_after_evictions(&mut self, _key: u64, _size: u32) -> bool {
        true
    }

    /// Links a freshly stored node.
    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot);

    /// The cached object at `slot` changed size from `old_size` (its node holds the new one).
    fn on_resize(&mut self, _nodes: &mut [Node], _slot: Slot, _old_size: u32) {}

    /// Chooses a victim, unlinks it and returns its slot (the cache frees it); `NIL` when
    /// nothing is cached.
    fn evict(&mut self, nodes: &mut [Node]) -> Slot;

    /// Unlinks `slot` because the user removed it (not an eviction).
    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot);

    /// The capacity changed (the cache evicts down to it afterwards).
    fn on_capacity(&mut self, _capacity: Capacity) {}

    /// Heap bytes the algorithm holds beyond the slab (S3-FIFO's ghost).
    fn heap_bytes(&self) -> usize {
        0
    }

    /// The hook failure that made a scripted algorithm fall back to LRU.
    fn hook_failure(&self) -> Option<&HookFailure> {
        None
    }
}

/// Static dispatch over the built-in algorithms. Opaque (`pub` only so that the class layers'
/// sealed hooks, [`crate::ClassLayer`], may name it): nothing outside the crate can build or
/// call one.
pub struct Evictor(Kind);

enum Kind {
    Lru(lru::Lru),
    Fifo(fifo::Fifo),
    Clock(clock::Clock),
    Sieve(sieve::Sieve),
    S3Fifo(Box<s3fifo::S3Fifo>),
    Scripted(Box<scripted::Scripted>),
}

macro_rules! dispatch {
    ($self:ident, $p:ident => $e:expr) => {
        dispatch!(@kind &mut $self.0, $p => $e)
    };
    (& $self:ident, $p:ident => $e:expr) => {
        dispatch!(@kind &$self.0, $p => $e)
    };
    (@kind $kind:expr, $p:ident => $e:expr) => {
        match $kind {
            Kind::Lru($p) => $e,
            Kind::Fifo($p) => $e,
            Kind::Clock($p) => $e,
            Kind::Sieve($p) => $e,
            Kind::S3Fifo($p) => $e,
            Kind::Scripted($p) => $e,
        }
    };
}

impl Evictor {
    pub(crate) fn new(algorithm: Algorithm, capacity: Capacity) -> Evictor {
        Evictor(match algorithm {
            Algorithm::Lru => Kind::Lru(lru::Lru::default()),
            Algorithm::Fifo => Kind::Fifo(fifo::Fifo::default()),
            Algorithm::Clock => Kind::Clock(clock::Clock::default()),
            Algorithm::Sieve => Kind::Sieve(sieve::Sieve::default()),
            Algorithm::S3Fifo => Kind::S3Fifo(Box::new(s3fifo::S3Fifo::new(capacity))),
        })
    }

    /// The queue of a scripted cache: `hooks` decide admission and victims.
    pub(crate) fn scripted(hooks: Box<dyn ObjectHooks>, capacity: Capacity) -> Evictor {
        Evictor(Kind::Scripted(Box::new(scripted::Scripted::new(
            hooks, capacity,
        ))))
    }
}

impl EvictionPolicy for Evictor {
    // Always inlined: a hit is most requests, and as a call of its own the dispatch cost a
    // third of an LRU hit.
    #[inline(always)]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        dispatch!(self, p => p.on_hit(nodes, slot))
    }
    #[inline]
    fn on_miss(&mut self, key: u64) {
        dispatch!(self, p => p.on_miss(key))
    }
    #[inline]
    fn can_admit(&self, size: u32) -> bool {
        dispatch!(&self, p => p.can_admit(size))
    }
    #[inline]
    fn admit(&mut self, key: u64, size: u32) -> bool {
        dispatch!(self, p => p.admit(key, size))
    }
    #[inline]
    fn admit_after_evictions(&mut self, key: u64, size: u32) -> bool {
        dispatch!(self, p => p.admit_after_evictions(key, size))
    }
    #[inline]
    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        dispatch!(self, p => p.on_insert(nodes, slot))
    }
    #[inline]
    fn on_resize(&mut self, nodes: &mut [Node], slot: Slot, old_size: u32) {
        dispatch!(self, p => p.on_resize(nodes, slot, old_size))
    }
    #[inline]
    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        dispatch!(self, p => p.evict(nodes))
    }
    #[inline]
    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        dispatch!(self, p => p.on_remove(nodes, slot))
    }
    fn on_capacity(&mut self, capacity: Capacity) {
        dispatch!(self, p => p.on_capacity(capacity))
    }
    fn heap_bytes(&self) -> usize {
        dispatch!(&self, p => p.heap_bytes())
    }
    fn hook_failure(&self) -> Option<&HookFailure> {
        dispatch!(&self, p => p.hook_failure())
    }
}
