//! The cache operations the replay loop needs, implemented by the plain cache and by the
//! class-aware one, so the loop is compiled once per kind (no per-request dispatch) and the
//! unclassed replay runs exactly the code it ran before classes existed.

use cache::classes::{decimal_key, ClassIndex, ClassSet, Pinning, Probe, RuleOp};
use cache::{Algorithm, Cache, Capacity, ClassedCache};
use trace::{Op, Request};

pub trait ReplayCache {
    /// What a request is classified as before it is served (`()` without classes).
    type Class: Copy;
    /// An empty cache with the same algorithm, capacity and classes.
    fn fresh(&self) -> Self;
    fn classify(&self, req: &Request) -> Self::Class;
    fn get(&mut self, key: u64, class: Self::Class) -> bool;
    fn insert(&mut self, key: u64, size: u32, class: Self::Class) -> bool;
    fn remove(&mut self, key: u64) -> bool;
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn bytes(&self) -> u64;
    fn evictions(&self) -> u64;
    fn capacity(&self) -> Capacity;
    fn evict(&mut self, n: u64) -> u64;
    fn set_capacity(&mut self, capacity: Capacity) -> u64;
    /// Drops every object (a restart); not counted as evictions.
    fn empty(&mut self);
    /// Per-class figures for the report (`None` without classes).
    fn class_reports(&self) -> Option<Vec<ClassReport>>;
}

impl ReplayCache for Cache {
    type Class = ();

    fn fresh(&self) -> Self {
        Cache::new(self.algorithm(), self.capacity())
    }
    #[inline]
    fn classify(&self, _req: &Request) {}
    #[inline]
    fn get(&mut self, key: u64, _: ()) -> bool {
        Cache::get(self, key)
    }
    #[inline]
    fn insert(&mut self, key: u64, size: u32, _: ()) -> bool {
        Cache::insert(self, key, size)
    }
    #[inline]
    fn remove(&mut self, key: u64) -> bool {
        Cache::remove(self, key)
    }
    #[inline]
    fn len(&self) -> u64 {
        Cache::len(self)
    }
    #[inline]
    fn bytes(&self) -> u64 {
        Cache::bytes(self)
    }
    fn evictions(&self) -> u64 {
        Cache::evictions(self)
    }
    fn capacity(&self) -> Capacity {
        Cache::capacity(self)
    }
    fn evict(&mut self, n: u64) -> u64 {
        Cache::evict(self, n)
    }
    fn set_capacity(&mut self, capacity: Capacity) -> u64 {
        Cache::set_capacity(self, capacity)
    }
    fn empty(&mut self) {
        let keys: Vec<u64> = self.iter().map(|(k, _)| k).collect();
        for key in keys {
            Cache::remove(self, key);
        }
    }
    fn class_reports(&self) -> Option<Vec<ClassReport>> {
        None
    }
}

/// A [`ClassedCache`] plus how replay shows requests to its rules.
pub struct ClassedReplayCache {
    pub cache: ClassedCache,
}

impl ClassedReplayCache {
    pub fn new(algorithm: Algorithm, capacity: Capacity, classes: ClassSet) -> Self {
        ClassedReplayCache {
            cache: ClassedCache::new(algorithm, capacity, classes),
        }
    }
}

/// The rule operation of a trace operation.
pub fn rule_op(op: Op) -> RuleOp {
    match op {
        Op::Get => RuleOp::Get,
        Op::Put => RuleOp::Put,
        Op::Delete => RuleOp::Delete,
        Op::Access => RuleOp::Access,
    }
}

impl ReplayCache for ClassedReplayCache {
    type Class = ClassIndex;

    fn fresh(&self) -> Self {
        ClassedReplayCache::new(
            self.cache.algorithm(),
            self.cache.capacity(),
            self.cache.class_set().clone(),
        )
    }

    /// Key rules see the key id in decimal (traces carry 64-bit ids); traces carry no
    /// client hints, so `hint:` rules never match in replay.
    #[inline]
    fn classify(&self, req: &Request) -> ClassIndex {
        let mut buf = [0u8; 20];
        let key: &[u8] = if self.cache.class_set().uses_key() {
            decimal_key(req.key, &mut buf)
        } else {
            b""
        };
        self.cache.classify(&Probe {
            key,
            size: req.size,
            offset: req.offset,
            op: rule_op(req.op),
            hint: None,
        })
    }
    #[inline]
    fn get(&mut self, key: u64, class: ClassIndex) -> bool {
        self.cache.get(key, class)
    }
    #[inline]
    fn insert(&mut self, key: u64, size: u32, class: ClassIndex) -> bool {
        self.cache.insert(key, size, class)
    }
    fn remove(&mut self, key: u64) -> bool {
        self.cache.remove(key)
    }
    #[inline]
    fn len(&self) -> u64 {
        self.cache.len()
    }
    #[inline]
    fn bytes(&self) -> u64 {
        self.cache.bytes()
    }
    fn evictions(&self) -> u64 {
        self.cache.evictions()
    }
    fn capacity(&self) -> Capacity {
        self.cache.capacity()
    }
    fn evict(&mut self, n: u64) -> u64 {
        self.cache.evict(n)
    }
    fn set_capacity(&mut self, capacity: Capacity) -> u64 {
        self.cache.set_capacity(capacity)
    }
    fn empty(&mut self) {
        let keys: Vec<u64> = self.cache.iter().map(|(k, _, _)| k).collect();
        for key in keys {
            self.cache.remove(key);
        }
    }
    fn class_reports(&self) -> Option<Vec<ClassReport>> {
        Some(
            self.cache
                .specs()
                .iter()
                .enumerate()
                .map(|(i, spec)| {
                    let s = self.cache.stats(i as ClassIndex);
                    let limit = self.cache.class_limit(i as ClassIndex);
                    let lookups = s.hits + s.misses;
                    ClassReport {
                        id: spec.id,
                        rule: spec.name.clone(),
                        priority: match spec.pinning {
                            Pinning::Hard => None,
                            _ => Some(spec.priority),
                        },
                        pinning: match spec.pinning {
                            Pinning::None => "none",
                            Pinning::Soft => "soft",
                            Pinning::Hard => "hard",
                        }
                        .to_string(),
                        allocation: spec.allocation,
                        cap_objects: limit.objects,
                        cap_bytes: limit.bytes,
                        hits: s.hits,
                        misses: s.misses,
                        hit_ratio: (lookups > 0).then(|| s.hits as f64 / lookups as f64),
                        objects: s.objects,
                        bytes: s.bytes,
                        peak_bytes: s.peak_bytes,
                        evictions: s.evictions,
                        bypassed: s.bypassed,
                        fenced: s.fenced,
                        refused: s.refused,
                    }
                })
                .collect(),
        )
    }
}

/// One class in `replay --json`'s `classes` array.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ClassReport {
    pub id: u8,
    pub rule: String,
    /// Null for hard-pinned classes.
    pub priority: Option<u8>,
    /// `none`, `soft` or `hard`.
    pub pinning: String,
    pub allocation: f64,
    pub cap_objects: Option<u64>,
    pub cap_bytes: Option<u64>,
    /// Lookups of requests in this class.
    pub hits: u64,
    pub misses: u64,
    pub hit_ratio: Option<f64>,
    /// Cached at the end of the run.
    pub objects: u64,
    pub bytes: u64,
    pub peak_bytes: u64,
    pub evictions: u64,
    /// Insertions refused: allocation 0 / cache full of more important classes / a
    /// hard-pinned class at its cap (or an object larger than the class's cap).
    pub bypassed: u64,
    pub fenced: u64,
    pub refused: u64,
}
