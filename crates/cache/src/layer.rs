//! Classes as a layer of the one [`crate::Cache`]: the cache's code for lookups, inserts,
//! evictions, removals and capacity changes is written once and asks its layer at each point
//! where classes change a decision (which queue an object is in, whether a class may be
//! cached, which class gives up a victim, what is counted).
//!
//! [`NoClasses`], the default, answers every question with a constant and keeps the one
//! eviction queue the cache has always had, so once inlined the unclassed cache compiles to
//! the code it ran before classes existed (exact libCacheSim behaviour and speed).
//! [`crate::Classes`] keeps one queue per class and the rules of `docs/cache-hints.md`.

use crate::classes::Probe;
use crate::eviction::{EvictionPolicy, Evictor};

use crate::slab::Slot;
use crate::{Algorithm, Capacity, ClassFigures};

/// What a layer decides when an insert finds its key already cached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rewrite {
    /// Keep the node, change its size, count an access (libCacheSim's update).
    InPlace,
    /// Same object as before: count an access only.
    Touch,
    /// Remove the object and insert it anew (a change of class or size moves it to the
    /// queue of its class).
    Reinsert,
}

/// A way of dividing the cache into classes: [`NoClasses`] or [`crate::Classes`] (and
/// [`crate::AnyCache`] picks one at run time). Sealed in effect: the hidden hooks name the
/// crate's eviction queues, which nothing outside the crate can name.
///
/// The hooks are the questions the cache asks its layer, all on the per-request path and
/// `#[inline]`; [`NoClasses`] answers each with a constant or its one queue.
pub trait ClassLayer: Sized {
    /// What a request is classified as (`()` without classes).
    type Class: Copy + PartialEq + Default + std::fmt::Debug;

    /// False for [`NoClasses`]: callers skip building a [`Probe`] at all.
    const CLASSED: bool;

    /// The class of a request.
    fn classify(&self, probe: &Probe) -> Self::Class;

    /// Whether some rule reads the key (otherwise a probe may carry an empty key).
    fn uses_key(&self) -> bool;

    /// Per-class figures; empty without classes.
    fn figures(&self) -> Vec<ClassFigures>;

    /// An empty layer like this one for a cache of `capacity`.
    #[doc(hidden)]
    fn fresh(&self, algorithm: Algorithm, capacity: Capacity) -> Self;
    /// The eviction queue of `class`.
    #[doc(hidden)]
    fn queue(&mut self, class: Self::Class) -> &mut Evictor;
    /// The class of the object in `slot`.
    #[doc(hidden)]
    fn class_at(&self, slot: Slot) -> Self::Class;
    /// A lookup by a request of `class` hit or missed.
    #[doc(hidden)]
    fn count_lookup(&mut self, class: Self::Class, hit: bool);
    /// Whether `class` is never cached (counted as bypassed when true).
    #[doc(hidden)]
    fn bypasses(&mut self, class: Self::Class) -> bool;
    /// Whether an object of `size` can never fit `class`'s own cap.
    #[doc(hidden)]
    fn too_big_for_class(&self, class: Self::Class, size: u32) -> bool;
    /// An insert was refused (cap, size, algorithm, hard pin) / fenced off (selective
    /// allocation).
    #[doc(hidden)]
    fn count_refused(&mut self, class: Self::Class);
    #[doc(hidden)]
    fn count_fenced(&mut self, class: Self::Class);
    /// Whether `class` must first make room among its own objects for `size` more bytes.
    #[doc(hidden)]
    fn over_own_cap(&self, class: Self::Class, size: u32) -> bool;
    /// Whether `class` refuses rather than evicts its own objects (hard pin).
    #[doc(hidden)]
    fn never_evicts(&self, class: Self::Class) -> bool;
    /// The class that gives up the next victim for an insert of `class`; `None` when `class`
    /// is fenced off (nothing it may evict is left).
    #[doc(hidden)]
    fn victim_for(&self, class: Self::Class) -> Option<Self::Class>;
    /// The class that gives up the next victim for an explicit eviction or a capacity cut;
    /// `None` when nothing evictable is left.
    #[doc(hidden)]
    fn any_victim(&self) -> Option<Self::Class>;
    /// What an insert of a cached object (of class `own`, `old` bytes) as `class` does.
    /// Only a layer without per-class byte counts may answer [`Rewrite::InPlace`].
    #[doc(hidden)]
    fn rewrite(&self, own: Self::Class, class: Self::Class, old: u32, new: u32) -> Rewrite;
    /// An object of `size` was stored in `slot` as `class`.
    #[doc(hidden)]
    fn stored(&mut self, slot: Slot, class: Self::Class, size: u32);
    /// An object of `size` left `class`; `evicted` when by eviction.
    #[doc(hidden)]
    fn left(&mut self, class: Self::Class, size: u32, evicted: bool);
    /// The capacity changed: tell the queues their new sizes.
    #[doc(hidden)]
    fn set_capacity(&mut self, capacity: Capacity);
    /// How many classes a capacity cut checks against their own caps.
    #[doc(hidden)]
    fn capped_classes(&self) -> usize;
    /// Class number `i` when it is over its own cap and may evict its own objects.
    #[doc(hidden)]
    fn over_limit(&self, i: usize) -> Option<Self::Class>;
    /// Heap bytes of the queues and per-slot class records.
    #[doc(hidden)]
    fn heap_bytes(&self) -> usize;
}

/// The default layer: one class, one queue, nothing counted. Holds exactly what the cache held
/// before layers existed (its one queue); every hook is a constant.
pub struct NoClasses {
    queue: Evictor,
}

impl NoClasses {
    pub(crate) fn new(algorithm: Algorithm, capacity: Capacity) -> Self {
        NoClasses {
            queue: Evictor::new(algorithm, capacity),
        }
    }

    pub(crate) fn scripted(hooks: Box<dyn crate::hooks::ObjectHooks>, capacity: Capacity) -> Self {
        NoClasses {
            queue: Evictor::scripted(hooks, capacity),
        }
    }
}

impl ClassLayer for NoClasses {
    type Class = ();
    const CLASSED: bool = false;

    #[inline(always)]
    fn classify(&self, _probe: &Probe) {}

    #[inline(always)]
    fn uses_key(&self) -> bool {
        false
    }

    fn figures(&self) -> Vec<ClassFigures> {
        Vec::new()
    }

    fn fresh(&self, algorithm: Algorithm, capacity: Capacity) -> Self {
        NoClasses::new(algorithm, capacity)
    }
    #[inline(always)]
    fn queue(&mut self, _: ()) -> &mut Evictor {
        &mut self.queue
    }
    #[inline(always)]
    fn class_at(&self, _: Slot) {}
    #[inline(always)]
    fn count_lookup(&mut self, _: (), _: bool) {}
    #[inline(always)]
    fn bypasses(&mut self, _: ()) -> bool {
        false
    }
    #[inline(always)]
    fn too_big_for_class(&self, _: (), _: u32) -> bool {
        false
    }
    #[inline(always)]
    fn count_refused(&mut self, _: ()) {}
    #[inline(always)]
    fn count_fenced(&mut self, _: ()) {}
    #[inline(always)]
    fn over_own_cap(&self, _: (), _: u32) -> bool {
        false
    }
    #[inline(always)]
    fn never_evicts(&self, _: ()) -> bool {
        false
    }
    #[inline(always)]
    fn victim_for(&self, _: ()) -> Option<()> {
        Some(())
    }
    #[inline(always)]
    fn any_victim(&self) -> Option<()> {
        Some(())
    }
    #[inline(always)]
    fn rewrite(&self, _: (), _: (), _: u32, _: u32) -> Rewrite {
        Rewrite::InPlace
    }
    #[inline(always)]
    fn stored(&mut self, _: Slot, _: (), _: u32) {}
    #[inline(always)]
    fn left(&mut self, _: (), _: u32, _: bool) {}
    fn set_capacity(&mut self, capacity: Capacity) {
        self.queue.on_capacity(capacity);
    }
    #[inline(always)]
    fn capped_classes(&self) -> usize {
        0
    }
    #[inline(always)]
    fn over_limit(&self, _: usize) -> Option<()> {
        None
    }
    fn heap_bytes(&self) -> usize {
        self.queue.heap_bytes()
    }
}
