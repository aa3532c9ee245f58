//! The run-time choice between the cache without classes and with them, made once for every
//! host: [`AnyCache::new`] takes the optional class file. A host that wants the unclassed
//! cache compiled without a single class branch matches on the variants once and runs
//! generic code over [`Cache<L>`] (replay's loop); one that keeps the cache behind a lock for
//! its lifetime (the server) calls the methods here, one predictable branch each.

use crate::classes::{ClassIndex, ClassSet, Probe};
use crate::{Algorithm, Cache, Capacity, ClassFigures, Classes, SlotHint};

pub enum AnyCache {
    Plain(Cache),
    Classed(Cache<Classes>),
}

/// Runs `$e` with `$c` bound to the cache of either variant; `$class` (a [`ClassIndex`]) is
/// rebound to what that variant takes (`()` without classes).
macro_rules! each {
    ($self:expr, $c:ident => $e:expr) => {
        match $self {
            AnyCache::Plain($c) => $e,
            AnyCache::Classed($c) => $e,
        }
    };
    ($self:expr, $c:ident, $class:ident => $e:expr) => {
        match $self {
            AnyCache::Plain($c) => {
                let $class = ();
                $e
            }
            AnyCache::Classed($c) => $e,
        }
    };
}

impl AnyCache {
    /// The cache with the classes of `classes`, or the plain one without a class file.
    pub fn new(algorithm: Algorithm, capacity: Capacity, classes: Option<ClassSet>) -> Self {
        match classes {
            None => AnyCache::Plain(Cache::new(algorithm, capacity)),
            Some(set) => AnyCache::Classed(Cache::with_classes(algorithm, capacity, set)),
        }
    }

    /// See [`Cache::set_packing`].
    pub fn set_packing(&mut self, packing: crate::Packing) {
        each!(self, c => c.set_packing(packing))
    }

    /// See [`Cache::reserve`].
    pub fn reserve(&mut self, nodes: u64) {
        each!(self, c => c.reserve(nodes))
    }

    /// See [`Cache::set_admission`].
    pub fn set_admission(&mut self, admission: Option<crate::Admission>) {
        each!(self, c => c.set_admission(admission))
    }

    /// The plain cache with admission and victims decided by `hooks` ([`Cache::with_hooks`]).
    pub fn scripted(capacity: Capacity, hooks: Box<dyn crate::hooks::ObjectHooks>) -> Self {
        AnyCache::Plain(Cache::with_hooks(capacity, hooks))
    }

    /// See [`Cache::hook_failure`] (never for a classed cache: hooks run without classes).
    pub fn hook_failure(&mut self) -> Option<&crate::hooks::HookFailure> {
        match self {
            AnyCache::Plain(c) => c.hook_failure(),
            AnyCache::Classed(_) => None,
        }
    }

    pub fn is_classed(&self) -> bool {
        matches!(self, AnyCache::Classed(_))
    }

    /// The class of a request (0 without classes, without building the probe).
    #[inline]
    pub fn classify<'a>(&self, request: impl Into<Probe<'a>>) -> ClassIndex {
        match self {
            AnyCache::Plain(_) => 0,
            AnyCache::Classed(c) => c.classify(&request.into()),
        }
    }

    /// See [`Cache::get_hinted_as`].
    #[inline]
    pub fn get_hinted_as(&mut self, key: u64, hint: SlotHint, class: ClassIndex) -> bool {
        each!(self, c, class => c.get_hinted_as(key, hint, class))
    }

    /// See [`Cache::count_miss`].
    #[inline]
    pub fn count_miss(&mut self, class: ClassIndex) {
        each!(self, c, class => c.count_miss(class))
    }

    /// See [`Cache::insert_as`].
    #[inline]
    pub fn insert_as<F: FnMut(u64, u32)>(
        &mut self,
        key: u64,
        size: u32,
        class: ClassIndex,
        on_evict: F,
    ) -> Option<SlotHint> {
        each!(self, c, class => c.insert_as(key, size, class, on_evict))
    }

    /// See [`Cache::insert_slotted`].
    #[inline]
    pub fn insert_slotted<F: FnMut(u64, u32, SlotHint)>(
        &mut self,
        key: u64,
        size: u32,
        class: ClassIndex,
        on_evict: F,
    ) -> Option<SlotHint> {
        each!(self, c, class => c.insert_slotted(key, size, class, on_evict))
    }

    /// See [`Cache::slot_hint`].
    #[inline]
    pub fn slot_hint(&self, key: u64) -> Option<SlotHint> {
        each!(self, c => c.slot_hint(key))
    }

    /// See [`Cache::prefetch`].
    pub fn prefetch(&self, keys: &[u64]) {
        each!(self, c => c.prefetch(keys))
    }

    pub fn remove(&mut self, key: u64) -> bool {
        each!(self, c => c.remove(key))
    }

    pub fn evict_with<F: FnMut(u64, u32)>(&mut self, n: u64, on_evict: F) -> u64 {
        each!(self, c => c.evict_with(n, on_evict))
    }

    /// See [`Cache::evict_slotted`].
    pub fn evict_slotted<F: FnMut(u64, u32, SlotHint)>(&mut self, n: u64, on_evict: F) -> u64 {
        each!(self, c => c.evict_slotted(n, on_evict))
    }

    pub fn set_capacity_with<F: FnMut(u64, u32)>(
        &mut self,
        capacity: Capacity,
        on_evict: F,
    ) -> u64 {
        each!(self, c => c.set_capacity_with(capacity, on_evict))
    }

    /// See [`Cache::set_capacity_slotted`].
    pub fn set_capacity_slotted<F: FnMut(u64, u32, SlotHint)>(
        &mut self,
        capacity: Capacity,
        on_evict: F,
    ) -> u64 {
        each!(self, c => c.set_capacity_slotted(capacity, on_evict))
    }

    /// The most objects the slab has held at once: every [`SlotHint::slot`] is below it.
    pub fn slot_bound(&self) -> usize {
        each!(self, c => c.slot_bound())
    }

    pub fn algorithm(&self) -> Algorithm {
        each!(self, c => c.algorithm())
    }

    pub fn capacity(&self) -> Capacity {
        each!(self, c => c.capacity())
    }

    pub fn len(&self) -> u64 {
        each!(self, c => c.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn bytes(&self) -> u64 {
        each!(self, c => c.bytes())
    }

    pub fn evictions(&self) -> u64 {
        each!(self, c => c.evictions())
    }

    pub fn metadata_bytes(&self) -> usize {
        each!(self, c => c.metadata_bytes())
    }

    /// Per-class figures; empty without classes.
    pub fn class_figures(&self) -> Vec<ClassFigures> {
        each!(self, c => c.class_figures())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classes::RuleOp;

    #[test]
    fn both_variants_run_the_same_calls() {
        let set = ClassSet::parse(
            "IO class id,IO class name,Eviction priority,Allocation\n0,unclassified,5,1\n",
            "t",
        )
        .unwrap();
        for classes in [None, Some(set)] {
            let classed = classes.is_some();
            let mut c = AnyCache::new(Algorithm::Lru, Capacity::objects(2), classes);
            assert_eq!(c.is_classed(), classed);
            let probe = Probe {
                key: b"k",
                size: 1,
                offset: 0,
                op: RuleOp::Put,
                hint: None,
            };
            let class = c.classify(probe);
            assert_eq!(class, 0);
            let mut victims = Vec::new();
            for key in 0..3 {
                assert!(c.insert_as(key, 1, class, |k, _| victims.push(k)).is_some());
            }
            assert_eq!(victims, [0]);
            assert!(c.get_hinted_as(2, SlotHint::NONE, class));
            c.count_miss(class);
            assert_eq!((c.len(), c.bytes(), c.evictions()), (2, 2, 1));
            assert_eq!(c.class_figures().len(), usize::from(classed));
            if classed {
                let s = c.class_figures()[0].stats;
                assert_eq!((s.hits, s.misses, s.evictions), (1, 1, 1));
            }
        }
    }
}
