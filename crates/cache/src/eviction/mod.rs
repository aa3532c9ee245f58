//! The eviction algorithms, one file each behind one trait, as libCacheSim organises them.
//!
//! An algorithm owns only its queues and per-object `meta` bits; the slab, the index and the
//! capacity checks belong to [`crate::Cache`]. [`Evictor`] dispatches statically over the
//! built-in algorithms so the per-request path has no virtual calls.

mod arc;
mod belady;
mod belady_size;
mod cacheus;
mod clock;
mod clockpro;
mod clockpro_libcachesim;
mod fifo;
mod freq_lists;
mod frequency_sketch;
mod gdsf;
mod ghost;
mod heap;
mod hyperbolic;
mod lecar;
mod lfu;
mod lfuda;
mod lhd;
mod lirs;
mod lru;
mod next_rand;
mod random;
mod s3fifo;
mod sample;
mod scripted;
mod sieve;
mod slot_set;
mod slru;
mod twoq;
mod wtinylfu;

use crate::hooks::{HookFailure, ObjectHooks};
use crate::slab::{Node, Slab, Slot};
use crate::{Algorithm, Capacity};

/// What an eviction algorithm decides. The cache calls these in libCacheSim's order: a lookup
/// either hits (`on_hit`) or misses (`on_miss`); an insertion first asks `can_admit`, then
/// evicts (`evict`) until the object fits, then asks `admit_after_evictions`, then links the
/// new node (`on_insert`).
pub(crate) trait EvictionPolicy {
    /// A lookup found the object at `slot`.
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot);

    /// The next request's next access time (1-based request index, [`crate::future::NEVER`]
    /// for none), told before it is served; only offline algorithms use it.
    fn on_future(&mut self, _next_access: u64) {}

    /// A lookup did not find `key`.
    fn on_miss(&mut self, _key: u64) {}

    /// Whether an object of `size` bytes may enter at all, before anything is evicted.
    fn can_admit(&self, _size: u32) -> bool {
        true
    }

    /// Whether a cached object rewritten from `old` to `new` bytes may stay (by default:
    /// whether one of `new` bytes could enter).
    fn can_resize(&self, _old: u32, new: u32) -> bool {
        self.can_admit(new)
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

    /// Asked (repeatedly) before the cache makes room for `key` of `size` bytes: whether the
    /// algorithm must evict one object now even if `key` would fit (ARC's REPLACE after a
    /// ghost hit). Each `true` is followed by one `evict` call.
    fn owes_eviction(&mut self, _nodes: &mut [Node], _key: u64, _size: u32) -> bool {
        false
    }

    /// Asked (repeatedly) once the cache has made room for `key`: whether the algorithm
    /// evicts one more object of its own before linking it (2Q keeping Am within its size).
    /// Each `true` is followed by one `evict` call.
    fn owes_eviction_after_room(&mut self, _key: u64, _size: u32) -> bool {
        false
    }

    /// Links a freshly stored node.
    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot);

    /// The cached object at `slot` changed size from `old_size` (its node holds the new one).
    fn on_resize(&mut self, _nodes: &mut [Node], _slot: Slot, _old_size: u32) {}

    /// Chooses a victim, unlinks it and returns its slot (the cache frees it, or keeps it as
    /// a ghost when the algorithm buried it, [`Node::bury`]); `NIL` when nothing is cached.
    fn evict(&mut self, nodes: &mut [Node]) -> Slot;

    /// [`EvictionPolicy::evict`] with the cache's slab at hand, which is what the cache
    /// calls: an algorithm keeping ghosts in the cache's index (ARC) also frees the ghosts it
    /// stopped remembering here ([`Slab::forget`]).
    #[inline]
    fn evict_in(&mut self, store: &mut Slab) -> Slot {
        self.evict(&mut store.nodes)
    }

    /// A lookup of this algorithm's class found its ghost at `slot`: the request is a miss
    /// the algorithm learns from; it drops the ghost from its lists and the index
    /// ([`Slab::forget`]). Called after `on_miss` for the same key. Only algorithms that
    /// bury victims have ghosts; the default just forgets the node.
    fn on_ghost_hit(&mut self, store: &mut Slab, slot: Slot) {
        store.forget(slot);
    }

    /// Drops this algorithm's ghost at `slot` without learning from it (a lookup of another
    /// class found it; the key is about to be inserted there).
    fn forget_ghost(&mut self, store: &mut Slab, slot: Slot) {
        store.forget(slot);
    }

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
    Belady(Box<belady::Belady>),
    BeladySize(Box<belady_size::BeladySize>),
    Lru(lru::Lru),
    Fifo(fifo::Fifo),
    Gdsf(Box<gdsf::Gdsf>),
    Clock(clock::Clock),
    Sieve(sieve::Sieve),
    S3Fifo(Box<s3fifo::S3Fifo>),
    Arc(Box<arc::Arc>),
    TwoQ(Box<twoq::TwoQ>),
    Slru(Box<slru::Slru>),
    Lfu(Box<lfu::Lfu>),
    Lfuda(Box<lfuda::Lfuda>),
    Random(Box<random::Random>),
    Hyperbolic(Box<hyperbolic::Hyperbolic>),
    Lirs(Box<lirs::Lirs>),
    LeCaR(Box<lecar::LeCaR>),
    Cacheus(Box<cacheus::Cacheus>),
    WTinyLfu(Box<wtinylfu::WTinyLfu>),
    ClockPro(Box<clockpro::ClockPro>),
    ClockProLibCacheSim(Box<clockpro_libcachesim::ClockProLibCacheSim>),
    Lhd(Box<lhd::Lhd>),
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
            Kind::Belady($p) => $e,
            Kind::BeladySize($p) => $e,
            Kind::Lru($p) => $e,
            Kind::Fifo($p) => $e,
            Kind::Gdsf($p) => $e,
            Kind::Clock($p) => $e,
            Kind::Sieve($p) => $e,
            Kind::S3Fifo($p) => $e,
            Kind::Arc($p) => $e,
            Kind::TwoQ($p) => $e,
            Kind::Slru($p) => $e,
            Kind::Lfu($p) => $e,
            Kind::Lfuda($p) => $e,
            Kind::Random($p) => $e,
            Kind::Hyperbolic($p) => $e,
            Kind::Lirs($p) => $e,
            Kind::LeCaR($p) => $e,
            Kind::Cacheus($p) => $e,
            Kind::WTinyLfu($p) => $e,
            Kind::ClockPro($p) => $e,
            Kind::ClockProLibCacheSim($p) => $e,
            Kind::Lhd($p) => $e,
            Kind::Scripted($p) => $e,
        }
    };
}

impl Evictor {
    pub(crate) fn new(algorithm: Algorithm, capacity: Capacity) -> Evictor {
        Evictor(match algorithm {
            Algorithm::Belady => Kind::Belady(Box::default()),
            Algorithm::BeladySize => Kind::BeladySize(Box::default()),
            Algorithm::Lru => Kind::Lru(lru::Lru::default()),
            Algorithm::Fifo => Kind::Fifo(fifo::Fifo::default()),
            Algorithm::Gdsf => Kind::Gdsf(Box::default()),
            Algorithm::Clock => Kind::Clock(clock::Clock::default()),
            Algorithm::Sieve => Kind::Sieve(sieve::Sieve::default()),
            Algorithm::S3Fifo => Kind::S3Fifo(Box::new(s3fifo::S3Fifo::new(capacity))),
            Algorithm::Arc => Kind::Arc(Box::new(arc::Arc::new(capacity))),
            Algorithm::TwoQ => Kind::TwoQ(Box::new(twoq::TwoQ::new(capacity))),
            Algorithm::Slru => Kind::Slru(Box::new(slru::Slru::new(capacity))),
            Algorithm::Lfu => Kind::Lfu(Box::default()),
            Algorithm::Lfuda => Kind::Lfuda(Box::default()),
            Algorithm::Random => Kind::Random(Box::default()),
            Algorithm::Hyperbolic => Kind::Hyperbolic(Box::default()),
            Algorithm::Lirs => Kind::Lirs(Box::new(lirs::Lirs::new(capacity))),
            Algorithm::LeCaR => Kind::LeCaR(Box::new(lecar::LeCaR::new(capacity))),
            Algorithm::Cacheus => Kind::Cacheus(Box::new(cacheus::Cacheus::new(capacity))),
            Algorithm::WTinyLfu => Kind::WTinyLfu(Box::new(wtinylfu::WTinyLfu::new(capacity))),
            Algorithm::ClockPro => Kind::ClockPro(Box::new(clockpro::ClockPro::new(capacity))),
            Algorithm::ClockProLibCacheSim => Kind::ClockProLibCacheSim(Box::new(
                clockpro_libcachesim::ClockProLibCacheSim::new(capacity),
            )),
            Algorithm::Lhd => Kind::Lhd(Box::new(lhd::Lhd::new(capacity))),
        })
    }

    /// The queue of a scripted cache: `hooks` decide admission and victims.
    pub(crate) fn scripted(hooks: Box<dyn ObjectHooks>, capacity: Capacity) -> Evictor {
        Evictor(Kind::Scripted(Box::new(scripted::Scripted::new(
            hooks, capacity,
        ))))
    }
}

impl Evictor {
    /// Whether a hit on an object never requested again drops it (BeladySize).
    pub(crate) fn drops_dead_hits(&self) -> bool {
        matches!(self.0, Kind::BeladySize(_))
    }
}

impl EvictionPolicy for Evictor {
    // Always inlined: a hit is most requests, and as a call of its own the dispatch cost a
    // third of an LRU hit.
    #[inline(always)]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        dispatch!(self, p => p.on_hit(nodes, slot))
    }
    fn on_future(&mut self, next_access: u64) {
        dispatch!(self, p => p.on_future(next_access))
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
    fn can_resize(&self, old: u32, new: u32) -> bool {
        dispatch!(&self, p => p.can_resize(old, new))
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
    fn owes_eviction(&mut self, nodes: &mut [Node], key: u64, size: u32) -> bool {
        dispatch!(self, p => p.owes_eviction(nodes, key, size))
    }
    #[inline]
    fn owes_eviction_after_room(&mut self, key: u64, size: u32) -> bool {
        dispatch!(self, p => p.owes_eviction_after_room(key, size))
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
    fn evict_in(&mut self, store: &mut Slab) -> Slot {
        dispatch!(self, p => p.evict_in(store))
    }
    fn on_ghost_hit(&mut self, store: &mut Slab, slot: Slot) {
        dispatch!(self, p => p.on_ghost_hit(store, slot))
    }
    fn forget_ghost(&mut self, store: &mut Slab, slot: Slot) {
        dispatch!(self, p => p.forget_ghost(store, slot))
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

/// How the newer algorithms measure their queues: libCacheSim sizes every queue in bytes; a
/// cache limited only in objects counts each object as one unit instead, so the same
/// fractions and comparisons apply to object counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Units {
    by_bytes: bool,
    /// The capacity in units (`u64::MAX / 4` when unlimited, so sums never overflow).
    pub total: u64,
}

impl Units {
    pub fn of(capacity: Capacity) -> Units {
        match (capacity.bytes, capacity.objects) {
            (Some(bytes), _) => Units {
                by_bytes: true,
                total: bytes,
            },
            (None, Some(objects)) => Units {
                by_bytes: false,
                total: objects,
            },
            (None, None) => Units {
                by_bytes: true,
                total: u64::MAX / 4,
            },
        }
    }

    /// Units one object of `size` bytes takes.
    #[inline]
    pub fn of_size(self, size: u32) -> u64 {
        if self.by_bytes {
            u64::from(size)
        } else {
            1
        }
    }

    /// The units `usage` takes.
    #[inline]
    pub fn of_usage(self, usage: Usage) -> u64 {
        if self.by_bytes {
            usage.bytes
        } else {
            usage.objects
        }
    }

    /// `floor(total * ratio)`, libCacheSim's `(int64_t)(cache_size * ratio)`.
    pub fn fraction(self, ratio: f64) -> u64 {
        (self.total as f64 * ratio) as u64
    }
}

/// What one queue holds, in both measures, so that a change of [`Units`] needs no recount.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub bytes: u64,
    pub objects: u64,
}

impl Usage {
    #[inline]
    pub fn add(&mut self, size: u32) {
        self.bytes += u64::from(size);
        self.objects += 1;
    }
    #[inline]
    pub fn sub(&mut self, size: u32) {
        self.bytes -= u64::from(size);
        self.objects -= 1;
    }
    /// The same object changed size from `old` to `new` bytes.
    #[inline]
    pub fn resize(&mut self, old: u32, new: u32) {
        self.bytes = self.bytes - u64::from(old) + u64::from(new);
    }
}

/// Drives one algorithm over a slab in the cache's order of calls, for unit tests that look
/// at the algorithm's own state.
#[cfg(test)]
pub(crate) struct Harness<P: EvictionPolicy> {
    pub policy: P,
    pub store: crate::slab::Slab,
    pub capacity: Capacity,
    pub evicted: Vec<u64>,
}

#[cfg(test)]
impl<P: EvictionPolicy> Harness<P> {
    pub fn new(policy: P, capacity: Capacity) -> Self {
        Harness {
            policy,
            store: crate::slab::Slab::new(),
            capacity,
            evicted: Vec::new(),
        }
    }

    fn evict_one(&mut self) -> bool {
        let victim = self.policy.evict_in(&mut self.store);
        if victim == crate::slab::NIL {
            return false;
        }
        self.evicted.push(self.store.nodes[victim as usize].key);
        self.store.release(victim);
        true
    }

    /// One libCacheSim request: returns whether it hit.
    pub fn access(&mut self, key: u64, size: u32) -> bool {
        let found = self.store.find_hashed(key, self.store.hash(key));
        if let Some(slot) = found {
            if self.store.nodes[slot as usize].holds_object() {
                self.policy.on_hit(&mut self.store.nodes, slot);
                return true;
            }
        }
        self.policy.on_miss(key);
        if let Some(ghost) = found {
            self.policy.on_ghost_hit(&mut self.store, ghost);
        }
        if !self.capacity.can_hold(size) || !self.policy.can_admit(size) {
            return false;
        }
        while self.policy.owes_eviction(&mut self.store.nodes, key, size) && self.evict_one() {}
        while self
            .capacity
            .exceeded_by(self.store.len() + 1, self.store.bytes() + u64::from(size))
            && self.evict_one()
        {}
        while self.policy.owes_eviction_after_room(key, size) && self.evict_one() {}
        if self.policy.admit_after_evictions(key, size) {
            let slot = self.store.insert(key, size).unwrap();
            self.policy.on_insert(&mut self.store.nodes, slot);
        }
        false
    }

    pub fn meta(&self, key: u64) -> u32 {
        self.store.nodes[self.store.find(key).expect("cached") as usize].meta()
    }
}
