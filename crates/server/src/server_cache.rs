//! The server's cache: `crates/cache`'s plain [`Cache`], or with `--classes FILE` its
//! [`ClassedCache`] with the same class file and rules as `mantle replay --classes`.
//!
//! Requests are shown to the rules as replay shows them: key rules see the client's key bytes,
//! `size:` the value's length, `op:` `get` for GET and `put` for SET, and `hint:` the class a
//! `SET ... HINT name` gave the object (a GET of that object carries the same hint). Lookups are
//! credited to the class of the request, as replay credits them. Without a class file the plain
//! cache runs exactly as before (its slot hints included): one predictable branch per call.

use cache::classes::{ClassIndex, ClassSet, Pinning, Probe, RuleOp};
use cache::{Algorithm, Cache, Capacity, ClassStats, ClassedCache, SlotHint};

pub enum ServerCache {
    Plain(Cache),
    Classed(ClassedCache),
}

/// What a request looks like to the class rules.
pub struct Request<'a> {
    pub key: &'a [u8],
    pub size: usize,
    pub op: RuleOp,
    pub hint: Option<&'a [u8]>,
}

/// One class's figures, for INFO and CACHE STATS.
pub struct ClassFigures {
    pub id: u8,
    pub rule: String,
    pub priority: Option<u8>,
    pub pinning: &'static str,
    pub allocation: f64,
    pub limit: Capacity,
    pub stats: ClassStats,
}

impl ServerCache {
    pub fn new(algorithm: Algorithm, capacity: Capacity, classes: Option<ClassSet>) -> Self {
        match classes {
            None => ServerCache::Plain(Cache::new(algorithm, capacity)),
            Some(set) => ServerCache::Classed(ClassedCache::new(algorithm, capacity, set)),
        }
    }

    pub fn is_classed(&self) -> bool {
        matches!(self, ServerCache::Classed(_))
    }

    /// The class of request `r` (0 without classes, at no cost).
    #[inline]
    pub fn class_of(&self, r: &Request<'_>) -> ClassIndex {
        match self {
            ServerCache::Plain(_) => 0,
            ServerCache::Classed(cache) => cache.classify(&Probe {
                key: r.key,
                size: r.size.min(u32::MAX as usize) as u32,
                offset: 0,
                op: r.op,
                hint: r.hint,
            }),
        }
    }

    /// A hit on cached object `id` (whose slot hint is `hint`) by a request of `class`.
    #[inline]
    pub fn hit(&mut self, id: u64, hint: SlotHint, class: ClassIndex) {
        match self {
            ServerCache::Plain(cache) => {
                cache.get_hinted(id, hint);
            }
            ServerCache::Classed(cache) => {
                cache.get(id, class);
            }
        }
    }

    /// A lookup of a key with no cached entry, credited to `class`.
    pub fn miss(&mut self, class: ClassIndex) {
        if let ServerCache::Classed(cache) = self {
            cache.count_miss(class);
        }
    }

    /// Caches object `id` of `size` bytes (as charged) in `class`; `on_evict` hears of every
    /// victim. Returns where the plain cache keeps the object (NONE with classes), `None` when
    /// the object is not cached afterwards.
    #[inline]
    pub fn insert<F: FnMut(u64, u32)>(
        &mut self,
        id: u64,
        size: u32,
        class: ClassIndex,
        on_evict: F,
    ) -> Option<SlotHint> {
        match self {
            ServerCache::Plain(cache) => cache.insert_hinted(id, size, on_evict),
            ServerCache::Classed(cache) => cache
                .insert_with(id, size, class, on_evict)
                .then_some(SlotHint::NONE),
        }
    }

    pub fn remove(&mut self, id: u64) -> bool {
        match self {
            ServerCache::Plain(c) => c.remove(id),
            ServerCache::Classed(c) => c.remove(id),
        }
    }

    pub fn evict_with<F: FnMut(u64, u32)>(&mut self, n: u64, on_evict: F) -> u64 {
        match self {
            ServerCache::Plain(c) => c.evict_with(n, on_evict),
            ServerCache::Classed(c) => c.evict_with(n, on_evict),
        }
    }

    pub fn set_capacity_with<F: FnMut(u64, u32)>(
        &mut self,
        capacity: Capacity,
        on_evict: F,
    ) -> u64 {
        match self {
            ServerCache::Plain(c) => c.set_capacity_with(capacity, on_evict),
            ServerCache::Classed(c) => c.set_capacity_with(capacity, on_evict),
        }
    }

    pub fn algorithm(&self) -> Algorithm {
        match self {
            ServerCache::Plain(c) => c.algorithm(),
            ServerCache::Classed(c) => c.algorithm(),
        }
    }

    pub fn capacity(&self) -> Capacity {
        match self {
            ServerCache::Plain(c) => c.capacity(),
            ServerCache::Classed(c) => c.capacity(),
        }
    }

    pub fn len(&self) -> u64 {
        match self {
            ServerCache::Plain(c) => c.len(),
            ServerCache::Classed(c) => c.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn bytes(&self) -> u64 {
        match self {
            ServerCache::Plain(c) => c.bytes(),
            ServerCache::Classed(c) => c.bytes(),
        }
    }

    pub fn evictions(&self) -> u64 {
        match self {
            ServerCache::Plain(c) => c.evictions(),
            ServerCache::Classed(c) => c.evictions(),
        }
    }

    pub fn metadata_bytes(&self) -> usize {
        match self {
            ServerCache::Plain(c) => c.metadata_bytes(),
            ServerCache::Classed(c) => c.metadata_bytes(),
        }
    }

    /// Per-class figures; empty without classes.
    pub fn classes(&self) -> Vec<ClassFigures> {
        let ServerCache::Classed(cache) = self else {
            return Vec::new();
        };
        cache
            .specs()
            .iter()
            .enumerate()
            .map(|(i, spec)| ClassFigures {
                id: spec.id,
                rule: spec.name.clone(),
                priority: (spec.pinning != Pinning::Hard).then_some(spec.priority),
                pinning: match spec.pinning {
                    Pinning::None => "none",
                    Pinning::Soft => "soft",
                    Pinning::Hard => "hard",
                },
                allocation: spec.allocation,
                limit: cache.class_limit(i as ClassIndex),
                stats: cache.stats(i as ClassIndex),
            })
            .collect()
    }
}
