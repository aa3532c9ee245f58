//! The cache itself: ties the slab and index ([`crate::slab`]) to the eviction queues of its
//! class layer ([`crate::ClassLayer`]) and keeps the capacity invariant: after every call, the
//! objects and bytes cached are within the capacity.
//!
//! One type serves every host: `Cache` (= `Cache<NoClasses>`) is the unclassed cache with
//! libCacheSim's exact behaviour, `Cache<Classes>` ([`crate::ClassedCache`]) the same code
//! with the class rules of `docs/cache-hints.md` asked at each decision point. The code for
//! lookups, inserts, evictions, removals and capacity changes exists once, here.
//!
//! The order of operations on a miss is libCacheSim's `cache_get_base`: refuse objects that
//! can never fit, evict until the new object fits, then insert. A lookup never changes an
//! object's size (libCacheSim ignores the size carried by a hit); only an insert does.
//!
//! A caller that already keeps a record per key (the server's key table) can keep a
//! [`SlotHint`] in it and look up with [`Cache::get_hinted`], which goes straight to the
//! object's node instead of through the hash index: on a server's cache hit that index walk
//! was a second dependent lookup after the caller's own.

use crate::admission::Admission;
use crate::eviction::EvictionPolicy;
use crate::hooks::{HookFailure, ObjectHooks};
use crate::layer::{ClassLayer, NoClasses, Rewrite};
use crate::slab::{Slab, Slot, NIL};
use crate::{Algorithm, Capacity, ClassFigures};

/// Where a cached object's node sits in the slab, as returned by [`Cache::insert_hinted`] or
/// [`Cache::slot_hint`]. An object keeps its node while it stays cached. A hint only makes a
/// lookup faster, never different: one that no longer names its key's node (the key left the
/// cache, or the hint is [`SlotHint::NONE`]) falls back to the hash index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotHint(Slot);

impl SlotHint {
    /// Names no node; lookups with it use the hash index.
    pub const NONE: SlotHint = SlotHint(NIL);

    /// The node's index in the slab (`None` for [`SlotHint::NONE`]): slots are dense, reused
    /// after an object leaves (or, with ARC or CLOCK-Pro, once its ghost is dropped) and
    /// below the most nodes (objects and ghosts) ever held at once, so a caller can keep its own
    /// per-object record in a `Vec` indexed by it (the server's values).
    #[inline]
    pub fn slot(self) -> Option<usize> {
        (self.0 != NIL).then_some(self.0 as usize)
    }
}

impl Default for SlotHint {
    fn default() -> Self {
        SlotHint::NONE
    }
}

pub struct Cache<L: ClassLayer = NoClasses> {
    algorithm: Algorithm,
    capacity: Capacity,
    store: Slab,
    layer: L,
    evictions: u64,
    /// The key the last lookup missed, so that the insert that usually follows does not
    /// report the same miss to the algorithm twice, and that key's hash, so that it does
    /// not hash it again.
    reported_miss: Option<u64>,
    miss_hash: u64,
    /// The admission policy, if any (boxed: the cache without one stays as small as before).
    admission: Option<Box<Admission>>,
}

impl Cache {
    pub fn new(algorithm: Algorithm, capacity: Capacity) -> Cache {
        Cache::with_layer(algorithm, capacity, NoClasses::new(algorithm, capacity))
    }

    /// A cache whose admission and victims `hooks` decide (see [`crate::hooks`]); LRU when
    /// they define no `priority`, and LRU for good once a hook fails. [`Cache::algorithm`]
    /// names that fallback; [`Cache::fresh`] gives a plain LRU cache (a script's state
    /// cannot be copied).
    pub fn with_hooks(capacity: Capacity, hooks: Box<dyn ObjectHooks>) -> Cache {
        Cache::with_layer(
            Algorithm::Lru,
            capacity,
            NoClasses::scripted(hooks, capacity),
        )
    }

    /// Looks `key` up; a hit updates the algorithm's state. Never inserts.
    #[inline]
    pub fn get(&mut self, key: u64) -> bool {
        self.get_as(key, ())
    }

    /// [`Cache::get`] for a key whose node `hint` probably names: same result and same effect
    /// on the algorithm, without the hash index when the hint is right.
    #[inline]
    pub fn get_hinted(&mut self, key: u64, hint: SlotHint) -> bool {
        self.get_hinted_as(key, hint, ())
    }

    /// One request as libCacheSim replays it: a lookup that inserts on a miss. Returns
    /// whether it hit. A hit keeps the cached size even if `size` differs.
    #[inline]
    pub fn access(&mut self, key: u64, size: u32) -> bool {
        let mut uncounted = crate::RequestCounts::default();
        self.serve(crate::classes::RuleOp::Access, key, size, &mut uncounted) == crate::Served::Hit
    }

    /// Inserts `key` (or updates its size if present), evicting as the algorithm decides until
    /// it fits. Returns false when the object cannot be cached (larger than the capacity).
    pub fn insert(&mut self, key: u64, size: u32) -> bool {
        self.insert_with(key, size, |_, _| {})
    }

    /// [`Cache::insert`], calling `on_evict(key, size)` for every object evicted to make room.
    /// Updating a present object counts as an access to it. Returns whether `key` is cached
    /// afterwards; when it cannot be (too large, or refused by the algorithm) a previous
    /// version is removed, which is not an eviction.
    pub fn insert_with<F: FnMut(u64, u32)>(&mut self, key: u64, size: u32, on_evict: F) -> bool {
        self.insert_as(key, size, (), on_evict).is_some()
    }

    /// [`Cache::insert_with`], returning the hint for `key` when it is cached afterwards.
    pub fn insert_hinted<F: FnMut(u64, u32)>(
        &mut self,
        key: u64,
        size: u32,
        on_evict: F,
    ) -> Option<SlotHint> {
        self.insert_as(key, size, (), on_evict)
    }

    /// [`Cache::access`] for a request whose next access time is known (1-based index of the
    /// next request for `key`, [`crate::future::NEVER`] for none; see [`crate::future`]).
    /// The offline algorithms (Belady, BeladySize) need it; the others ignore it.
    #[inline]
    pub fn access_with_future(&mut self, key: u64, size: u32, next_access: u64) -> bool {
        let mut uncounted = crate::RequestCounts::default();
        let op = crate::classes::RuleOp::Access;
        self.serve_with_future(op, key, size, (), &mut uncounted, next_access) == crate::Served::Hit
    }

    /// Every cached `(key, size)`, in no particular order.    /// Every cached `(key, size)`, in no particular order. Does not count as accesses.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.objects().map(|(key, size, ())| (key, size))
    }
}

impl<L: ClassLayer> Cache<L> {
    pub(crate) fn with_layer(algorithm: Algorithm, capacity: Capacity, layer: L) -> Self {
        Cache {
            algorithm,
            capacity,
            store: Slab::new(),
            layer,
            evictions: 0,
            reported_miss: None,
            miss_hash: 0,
            admission: None,
        }
    }

    /// [`Cache::serve_as`] for a request whose next access time is known (see
    /// [`Cache::access_with_future`]): tells the algorithm first, and drops an object
    /// BeladySize will never need again on its last hit, as libCacheSim does.
    #[inline]
    pub fn serve_with_future(
        &mut self,
        op: crate::classes::RuleOp,
        key: u64,
        size: u32,
        class: L::Class,
        counts: &mut crate::RequestCounts,
        next_access: u64,
    ) -> crate::Served {
        self.layer.queue(class).on_future(next_access);
        let served = self.serve_as(op, key, size, class, counts);
        if served == crate::Served::Hit
            && next_access == crate::future::NEVER
            && self.layer.queue(class).drops_dead_hits()
        {
            self.remove(key);
        }
        served
    }

    /// The failure that made the hooks of a scripted cache stop deciding, if any.
    pub fn hook_failure(&mut self) -> Option<&HookFailure> {
        self.layer.queue(L::Class::default()).hook_failure()
    }

    /// An empty cache with the same algorithm, capacity, classes, admission policy and
    /// packing (its state reset).
    pub fn fresh(&self) -> Self {
        let mut cache = Cache::with_layer(
            self.algorithm,
            self.capacity,
            self.layer.fresh(self.algorithm, self.capacity),
        );
        cache.set_admission(self.admission().map(Admission::fresh));
        cache.set_packing(self.store.packing());
        cache
    }

    /// How the cache's slab packs its index and spare nodes (see [`crate::Packing`]); the
    /// algorithms' own slabs (ghosts) keep the default. Set it on an empty cache: it takes
    /// effect as the slab grows.
    pub fn set_packing(&mut self, packing: crate::Packing) {
        self.store.set_packing(packing);
    }

    pub fn packing(&self) -> crate::Packing {
        self.store.packing()
    }

    /// Sizes the slab and index for `nodes` objects (and ARC's ghosts) up front, for a host
    /// that knows a bound before the first request (a replay of a trace of known length);
    /// see `Slab::reserve` for what that costs. Decisions are the same with or without it.
    pub fn reserve(&mut self, nodes: u64) {
        self.store
            .reserve(usize::try_from(nodes).unwrap_or(usize::MAX));
    }

    /// Puts an admission policy in front of the eviction algorithm (`None` removes it): from
    /// now on every miss that would insert asks it first (see [`crate::admission`]).
    pub fn set_admission(&mut self, admission: Option<Admission>) {
        self.admission = admission.map(Box::new);
    }

    pub fn admission(&self) -> Option<&Admission> {
        self.admission.as_deref()
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The class layer (its rules and counters).
    pub fn layer(&self) -> &L {
        &self.layer
    }

    /// The class of a request (`()` without classes).
    #[inline]
    pub fn classify(&self, probe: &crate::classes::Probe) -> L::Class {
        self.layer.classify(probe)
    }

    /// Per-class figures; empty without classes.
    pub fn class_figures(&self) -> Vec<ClassFigures> {
        self.layer.figures()
    }

    /// Looks `key` up on behalf of a request of class `class` (credited the hit or miss); a
    /// hit promotes the object in its own class's queue. Never inserts. Always inlined into
    /// the caller's loop: it is the one call every request makes.
    #[inline(always)]
    pub fn get_as(&mut self, key: u64, class: L::Class) -> bool {
        match self.probe(key, class) {
            Ok(()) => true,
            Err(hash) => {
                self.reported_miss = Some(key);
                self.miss_hash = hash;
                false
            }
        }
    }

    /// The lookup of [`Cache::get_as`], without noting a miss for an insert to come:
    /// `Err(hash)` (the key's [`Slab::hash`]) on a miss, already told to the algorithm, a
    /// ghost of the key already dealt with.
    #[inline(always)]
    fn probe(&mut self, key: u64, class: L::Class) -> Result<(), u64> {
        let hash = self.store.hash(key);
        let found = self.store.find_hashed(key, hash);
        if let Some(slot) = found {
            if self.store.nodes[slot as usize].holds_object() {
                self.hit(slot, class);
                return Ok(());
            }
        }
        self.layer.queue(class).on_miss(key);
        if let Some(ghost) = found {
            self.ghost_found(ghost, class);
        }
        self.layer.count_lookup(class, false);
        Err(hash)
    }

    /// A lookup that inserts the key on a miss (a replay's `get` and `access`): what
    /// [`Cache::get_as`] then [`Cache::insert_as`] of the same key do, without the round trip
    /// through `reported_miss` (set, taken, compared) or the insert's call through a
    /// closure. Returns whether it hit.
    #[inline(always)]
    pub(crate) fn get_or_insert_as(&mut self, key: u64, size: u32, class: L::Class) -> bool {
        match self.probe(key, class) {
            Ok(()) => true,
            Err(hash) => {
                // As after the insert that follows `get_as`: no miss is pending.
                self.reported_miss = None;
                self.insert_missed(key, hash, size, class);
                false
            }
        }
    }

    /// The insert after [`Cache::probe`] missed `key` (the miss already reported). Out of
    /// line: the loop that inlines the lookup keeps its registers for the hits.
    #[inline(never)]
    fn insert_missed(&mut self, key: u64, hash: u64, size: u32, class: L::Class) {
        self.insert_new(key, hash, size, class, false, &mut |_, _, _| {});
    }

    /// A miss of a request of `class` found a ghost at `slot`: its algorithm learns from it
    /// if it is `class`'s own (ARC's ghost hit), and forgets it either way, so the insert
    /// that follows finds the key without a node.
    #[cold]
    fn ghost_found(&mut self, slot: Slot, class: L::Class) {
        let owner = self.layer.class_at(slot);
        let queue = self.layer.queue(owner);
        if owner == class {
            queue.on_ghost_hit(&mut self.store, slot);
        } else {
            queue.forget_ghost(&mut self.store, slot);
        }
    }

    /// [`Cache::get_as`] for a key whose node `hint` probably names.
    #[inline]
    pub fn get_hinted_as(&mut self, key: u64, hint: SlotHint, class: L::Class) -> bool {
        let slot = hint.0;
        match self.store.nodes.get(slot as usize) {
            Some(node) if node.key == key && node.holds_object() => self.hit(slot, class),
            _ => self.get_as(key, class),
        }
    }

    /// Always inlined into the lookup: most requests of a replay are hits, and as a call
    /// its register saves cost about as much as an algorithm's `on_hit` (CLOCK-Pro's, a bit).
    #[inline(always)]
    fn hit(&mut self, slot: Slot, class: L::Class) -> bool {
        self.reported_miss = None;
        if let Some(admission) = self.admission.as_deref_mut() {
            let node = &self.store.nodes[slot as usize];
            admission.observe(node.key, node.size, admission_bytes(self.capacity));
        }
        let own = self.layer.class_at(slot);
        self.layer.queue(own).on_hit(&mut self.store.nodes, slot);
        self.layer.count_lookup(class, true);
        true
    }

    /// Credits `class` with a miss of a key the caller knows is not cached (a server that
    /// found no entry for the key), without telling the algorithm: the key has no id yet.
    #[inline]
    pub fn count_miss(&mut self, class: L::Class) {
        self.layer.count_lookup(class, false);
    }

    /// The hint for a cached `key` (no access recorded).
    pub fn slot_hint(&self, key: u64) -> Option<SlotHint> {
        self.store.find(key).map(SlotHint)
    }

    /// Starts loading the index chains of `keys` ahead of their lookups (a batch of
    /// requests): see [`crate::prefetch_read`]. Records no access.
    pub fn prefetch(&self, keys: &[u64]) {
        self.store.prefetch(keys)
    }

    /// The most nodes (objects and ghosts) the slab has held at once: every
    /// [`SlotHint::slot`] is below it.
    pub fn slot_bound(&self) -> usize {
        self.store.nodes.len()
    }

    /// Inserts `key` as `class` (or rewrites it), evicting as the algorithm and the classes
    /// decide until it fits, calling `on_evict(key, size)` for every victim. Returns the hint
    /// for `key` when it is cached afterwards. Without classes a rewrite updates the object
    /// in place (an access); with classes a new size or class re-inserts it.
    #[inline]
    pub fn insert_as<F: FnMut(u64, u32)>(
        &mut self,
        key: u64,
        size: u32,
        class: L::Class,
        mut on_evict: F,
    ) -> Option<SlotHint> {
        self.insert_slot(key, size, class, &mut |key, size, _| on_evict(key, size))
            .map(SlotHint)
    }

    /// [`Cache::insert_as`], also telling `on_evict` the slot each victim left, for a caller
    /// that keeps per-object records by slot (see [`SlotHint::slot`]).
    #[inline]
    pub fn insert_slotted<F: FnMut(u64, u32, SlotHint)>(
        &mut self,
        key: u64,
        size: u32,
        class: L::Class,
        mut on_evict: F,
    ) -> Option<SlotHint> {
        self.insert_slot(key, size, class, &mut on_evict)
            .map(SlotHint)
    }

    fn insert_slot<F: FnMut(u64, u32, SlotHint)>(
        &mut self,
        key: u64,
        size: u32,
        class: L::Class,
        on_evict: &mut F,
    ) -> Option<Slot> {
        // Right after a lookup missed this key it is known to be absent: only an insert of
        // the key itself could have added it, and every insert clears `reported_miss`.
        let known_absent = self.reported_miss.take() == Some(key);
        let hash = if known_absent {
            self.miss_hash
        } else {
            self.store.hash(key)
        };
        let mut report_miss = !known_absent;
        if !known_absent {
            if let Some(slot) = self.store.find_hashed(key, hash) {
                if !self.store.nodes[slot as usize].holds_object() {
                    // A ghost (ARC's, CLOCK-Pro's): the key is not cached, a miss reported here.
                    self.layer.queue(class).on_miss(key);
                    self.ghost_found(slot, class);
                    report_miss = false;
                } else {
                    return self.rewrite(key, hash, slot, size, class, on_evict);
                }
            }
        }
        self.insert_new(key, hash, size, class, report_miss, on_evict)
    }

    /// An insert of `key`, cached at `slot`, as `class`: see [`Cache::insert_as`]. Out of
    /// line: a replay's inserts always follow a lookup that missed.
    #[inline(never)]
    fn rewrite<F: FnMut(u64, u32, SlotHint)>(
        &mut self,
        key: u64,
        hash: u64,
        slot: Slot,
        size: u32,
        class: L::Class,
        on_evict: &mut F,
    ) -> Option<Slot> {
        let own = self.layer.class_at(slot);
        let old = self.store.nodes[slot as usize].size;
        match self.layer.rewrite(own, class, old, size) {
            Rewrite::InPlace => self.update(slot, own, size, on_evict),
            Rewrite::Touch => {
                self.layer.queue(own).on_hit(&mut self.store.nodes, slot);
                Some(slot)
            }
            Rewrite::Reinsert => {
                self.remove_slot(slot);
                self.insert_new(key, hash, size, class, false, on_evict)
            }
        }
    }

    /// Inserts absent `key`, whose [`Slab::hash`] is `hash`.
    #[inline(always)]
    fn insert_new<F: FnMut(u64, u32, SlotHint)>(
        &mut self,
        key: u64,
        hash: u64,
        size: u32,
        class: L::Class,
        report_miss: bool,
        on_evict: &mut F,
    ) -> Option<Slot> {
        if report_miss {
            self.layer.queue(class).on_miss(key);
        }
        if self.layer.bypasses(class) {
            return None;
        }
        // libCacheSim asks the admissioner first, even about objects too large to fit.
        if let Some(admission) = self.admission.as_deref_mut() {
            admission.observe(key, size, admission_bytes(self.capacity));
            if !admission.admit(key, size) {
                self.layer.count_refused(class);
                return None;
            }
        }
        if !self.capacity.can_hold(size)
            || self.layer.too_big_for_class(class, size)
            || !self.layer.queue(class).can_admit(size)
            || !self.layer.queue(class).admit(key, size)
        {
            self.layer.count_refused(class);
            return None;
        }
        // Evictions the algorithm decided on before room is made (ARC's REPLACE after a
        // ghost hit, victims SLRU picked during a hit).
        while self
            .layer
            .queue(class)
            .owes_eviction(&mut self.store.nodes, key, size)
        {
            if self.layer.never_evicts(class) || self.evict_from(class, on_evict) == NIL {
                break;
            }
        }
        // The class's own cap: make room among its own objects (hard pins refuse instead).
        while self.layer.over_own_cap(class, size) {
            if self.layer.never_evicts(class) || self.evict_from(class, on_evict) == NIL {
                self.layer.count_refused(class);
                return None;
            }
        }
        // The whole cache: evict (selectively, fenced by the incoming class) until it fits.
        while self
            .capacity
            .exceeded_by(self.store.len() + 1, self.store.bytes() + u64::from(size))
        {
            match self.layer.victim_for(class) {
                Some(victim) => {
                    if self.evict_from(victim, on_evict) == NIL {
                        break;
                    }
                }
                None => {
                    self.layer.count_fenced(class);
                    return None;
                }
            }
        }
        // Evictions the algorithm makes inside its insert (2Q's Am keeping to its own size).
        while self.layer.queue(class).owes_eviction_after_room(key, size) {
            if self.layer.never_evicts(class) || self.evict_from(class, on_evict) == NIL {
                break;
            }
        }
        if !self.layer.queue(class).admit_after_evictions(key, size) {
            self.layer.count_refused(class);
            return None;
        }
        let slot = self.store.insert_hashed(key, size, hash)?;
        self.layer.stored(slot, class, size);
        self.layer
            .queue(class)
            .on_insert(&mut self.store.nodes, slot);
        Some(slot)
    }

    /// libCacheSim's update of a cached object: new size in place, an access, then evictions
    /// until it fits (which may take the object itself).
    fn update<F: FnMut(u64, u32, SlotHint)>(
        &mut self,
        slot: Slot,
        own: L::Class,
        size: u32,
        on_evict: &mut F,
    ) -> Option<Slot> {
        let old_size = self.store.nodes[slot as usize].size;
        if !self.capacity.can_hold(size) || !self.layer.queue(own).can_resize(old_size, size) {
            self.remove_slot(slot);
            return None;
        }
        let queue = self.layer.queue(own);
        if old_size != size {
            self.store.resize(slot, size);
            queue.on_resize(&mut self.store.nodes, slot, old_size);
        }
        queue.on_hit(&mut self.store.nodes, slot);
        let mut cached = true;
        while self
            .capacity
            .exceeded_by(self.store.len(), self.store.bytes())
        {
            match self.evict_next(on_evict) {
                NIL => break,
                victim => cached &= victim != slot,
            }
        }
        cached.then_some(slot)
    }

    /// Evicts the next victim of the whole cache (selective-eviction order with classes);
    /// returns its (now free) slot or `NIL` when nothing evictable is left.
    #[inline]
    fn evict_next<F: FnMut(u64, u32, SlotHint)>(&mut self, on_evict: &mut F) -> Slot {
        match self.layer.any_victim() {
            Some(class) => self.evict_from(class, on_evict),
            None => NIL,
        }
    }

    /// Evicts one object of `class`; returns its freed slot or `NIL` if the class is empty.
    fn evict_from<F: FnMut(u64, u32, SlotHint)>(
        &mut self,
        class: L::Class,
        on_evict: &mut F,
    ) -> Slot {
        let victim = self.layer.queue(class).evict_in(&mut self.store);
        if victim != NIL {
            let node = self.store.nodes[victim as usize];
            self.store.release(victim);
            self.layer.left(class, node.size, true);
            self.evictions += 1;
            on_evict(node.key, node.size, SlotHint(victim));
        }
        victim
    }

    fn remove_slot(&mut self, slot: Slot) {
        let own = self.layer.class_at(slot);
        let size = self.store.nodes[slot as usize].size;
        self.layer.queue(own).on_remove(&mut self.store.nodes, slot);
        self.layer.left(own, size, false);
        self.store.remove(slot);
    }

    /// Removes `key` if cached (not counted as an eviction; hard pins do not prevent it).
    pub fn remove(&mut self, key: u64) -> bool {
        match self.store.find(key) {
            Some(slot) => {
                self.remove_slot(slot);
                true
            }
            None => false,
        }
    }

    /// Drops every object (a restart); not counted as evictions.
    pub fn clear(&mut self) {
        let keys: Vec<u64> = self.objects().map(|(key, _, _)| key).collect();
        for key in keys {
            self.remove(key);
        }
    }

    pub fn contains(&self, key: u64) -> bool {
        self.store.find(key).is_some()
    }

    /// The size of `key` if cached. Does not count as an access.
    pub fn object_size(&self, key: u64) -> Option<u32> {
        self.store
            .find(key)
            .map(|slot| self.store.nodes[slot as usize].size)
    }

    /// The class of a cached key.
    pub fn class_of(&self, key: u64) -> Option<L::Class> {
        self.store.find(key).map(|slot| self.layer.class_at(slot))
    }

    /// Evicts up to `n` objects chosen by the algorithm (in selective-eviction order with
    /// classes; hard-pinned never); returns how many were evicted.
    pub fn evict(&mut self, n: u64) -> u64 {
        self.evict_with(n, |_, _| {})
    }

    /// [`Cache::evict`], calling `on_evict(key, size)` for each object evicted.
    pub fn evict_with<F: FnMut(u64, u32)>(&mut self, n: u64, mut on_evict: F) -> u64 {
        self.evict_slotted(n, |key, size, _| on_evict(key, size))
    }

    /// [`Cache::evict_with`], also telling `on_evict` the slot each victim left.
    pub fn evict_slotted<F: FnMut(u64, u32, SlotHint)>(&mut self, n: u64, mut on_evict: F) -> u64 {
        let mut evicted = 0;
        while evicted < n && self.evict_next(&mut on_evict) != NIL {
            evicted += 1;
        }
        evicted
    }

    /// Changes the target capacity (and with it every class's cap), evicting at once down to
    /// it; returns objects evicted. Hard-pinned objects stay even if they alone exceed it.
    pub fn set_capacity(&mut self, capacity: Capacity) -> u64 {
        self.set_capacity_with(capacity, |_, _| {})
    }

    /// [`Cache::set_capacity`], calling `on_evict(key, size)` for each object evicted.
    pub fn set_capacity_with<F: FnMut(u64, u32)>(
        &mut self,
        capacity: Capacity,
        mut on_evict: F,
    ) -> u64 {
        self.set_capacity_slotted(capacity, |key, size, _| on_evict(key, size))
    }

    /// [`Cache::set_capacity_with`], also telling `on_evict` the slot each victim left.
    pub fn set_capacity_slotted<F: FnMut(u64, u32, SlotHint)>(
        &mut self,
        capacity: Capacity,
        mut on_evict: F,
    ) -> u64 {
        self.capacity = capacity;
        self.layer.set_capacity(capacity);
        let mut evicted = 0;
        for i in 0..self.layer.capped_classes() {
            while let Some(class) = self.layer.over_limit(i) {
                if self.evict_from(class, &mut on_evict) == NIL {
                    break;
                }
                evicted += 1;
            }
        }
        while capacity.exceeded_by(self.store.len(), self.store.bytes())
            && self.evict_next(&mut on_evict) != NIL
        {
            evicted += 1;
        }
        evicted
    }

    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    /// Objects cached now.
    #[inline]
    pub fn len(&self) -> u64 {
        self.store.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes cached now (sum of object sizes).
    #[inline]
    pub fn bytes(&self) -> u64 {
        self.store.bytes()
    }

    /// Objects evicted so far (by capacity pressure, `evict` or `set_capacity`).
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Every cached `(key, size, class)`, in no particular order. Does not count as accesses.
    pub fn objects(&self) -> impl Iterator<Item = (u64, u32, L::Class)> + '_ {
        self.store.slots().map(|slot| {
            let node = &self.store.nodes[slot as usize];
            (node.key, node.size, self.layer.class_at(slot))
        })
    }

    /// Ghost nodes in the index (ARC's B1 and B2).
    #[cfg(test)]
    pub(crate) fn ghosts(&self) -> u64 {
        self.store.ghosts()
    }

    /// Heap bytes of the cache's own metadata now: the slab (including free slots), the
    /// index, per-slot classes and the algorithms' state (S3-FIFO's ghost). Object payloads
    /// are not stored here and not counted.
    pub fn metadata_bytes(&self) -> usize {
        self.store.heap_bytes()
            + self.layer.heap_bytes()
            + self.admission().map_or(0, Admission::heap_bytes)
    }
}

/// The capacity an admission policy's model sizes for: the byte limit; with an object limit
/// only, none (AdaptSize then never finds enough bytes seen to re-tune `c`).
#[inline]
fn admission_bytes(capacity: Capacity) -> u64 {
    capacity.bytes.unwrap_or(u64::MAX / 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lru(bytes: u64) -> Cache {
        Cache::new(Algorithm::Lru, Capacity::bytes(bytes))
    }

    #[test]
    fn get_never_inserts_and_insert_makes_it_hit() {
        let mut c = lru(100);
        assert!(!c.get(1));
        assert!(!c.contains(1));
        assert!(c.insert(1, 10));
        assert!(c.get(1));
        assert_eq!((c.len(), c.bytes()), (1, 10));
    }

    #[test]
    fn too_large_objects_are_refused() {
        let mut c = lru(100);
        assert!(!c.insert(1, 101));
        assert!(c.is_empty());
        assert!(c.insert(2, 100));
        assert!(
            !c.insert(2, 101),
            "growing past the capacity drops the object"
        );
        assert!(!c.contains(2));
        assert_eq!(c.evictions(), 0, "dropping is not an eviction");
    }

    #[test]
    fn update_changes_size_and_evicts_others() {
        let mut c = lru(100);
        c.insert(1, 40);
        c.insert(2, 40);
        let mut evicted = Vec::new();
        assert!(c.insert_with(2, 70, |k, s| evicted.push((k, s))));
        assert_eq!(evicted, vec![(1, 40)]);
        assert_eq!(c.object_size(2), Some(70));
        assert_eq!(c.bytes(), 70);
    }

    #[test]
    fn access_keeps_the_cached_size_on_hit() {
        let mut c = lru(100);
        assert!(!c.access(1, 10));
        assert!(c.access(1, 99));
        assert_eq!(c.object_size(1), Some(10));
    }

    #[test]
    fn remove_is_not_an_eviction() {
        let mut c = lru(100);
        c.insert(1, 10);
        assert!(c.remove(1));
        assert!(!c.remove(1));
        assert_eq!((c.len(), c.evictions()), (0, 0));
    }

    #[test]
    fn set_capacity_shrinks_at_once_in_lru_order() {
        let mut c = lru(100);
        for k in 0..10 {
            c.insert(k, 10);
        }
        c.get(0);
        let mut evicted = Vec::new();
        let n = c.set_capacity_with(Capacity::objects(3), |k, _| evicted.push(k));
        assert_eq!(n, 7);
        assert_eq!(evicted, vec![1, 2, 3, 4, 5, 6, 7]);
        let mut left: Vec<u64> = c.iter().map(|(k, _)| k).collect();
        left.sort_unstable();
        assert_eq!(left, vec![0, 8, 9]);
        assert_eq!(c.evictions(), 7);
    }

    #[test]
    fn evict_n_stops_when_empty() {
        let mut c = Cache::new(Algorithm::Fifo, Capacity::default());
        for k in 0..5 {
            c.insert(k, 1);
        }
        assert_eq!(c.evict(2), 2);
        assert!(!c.contains(0) && !c.contains(1) && c.contains(2));
        assert_eq!(c.evict(10), 3);
        assert!(c.is_empty());
        assert_eq!(c.evictions(), 5);
    }

    #[test]
    fn both_dimensions_are_enforced() {
        let mut c = Cache::new(
            Algorithm::Sieve,
            Capacity {
                bytes: Some(1000),
                objects: Some(3),
            },
        );
        for k in 0..10 {
            c.insert(k, 5);
            assert!(c.len() <= 3);
        }
        c.insert(100, 900);
        c.insert(101, 900);
        assert!(c.bytes() <= 1000 && c.len() <= 3);
    }

    #[test]
    fn hints_name_the_node_until_the_key_leaves() {
        let mut c = lru(100);
        let h1 = c.insert_hinted(1, 10, |_, _| {}).unwrap();
        let h2 = c.insert_hinted(2, 10, |_, _| {}).unwrap();
        assert_ne!(h1, h2);
        assert_eq!(c.slot_hint(1), Some(h1));
        assert_eq!(
            c.insert_hinted(1, 20, |_, _| {}),
            Some(h1),
            "an update keeps the node"
        );
        assert!(c.get_hinted(2, h2));
        // A hint naming another key's node, or none, still finds the key.
        assert!(c.get_hinted(1, h2));
        assert!(c.get_hinted(1, SlotHint::NONE));
        c.remove(1);
        assert_eq!(c.slot_hint(1), None);
        assert!(!c.get_hinted(1, h1), "a freed node is not a hit");
        assert!(c.insert_hinted(3, 101, |_, _| {}).is_none(), "too large");
        assert!(
            c.insert_hinted(2, 101, |_, _| {}).is_none(),
            "dropped on update"
        );
    }

    #[test]
    fn slotted_evictions_name_the_slot_each_victim_held() {
        // A caller keeping records by slot (the server) must learn which slot every victim
        // left, for every algorithm and every way objects leave: inserts, evict, set_capacity.
        for alg in Algorithm::ALL {
            let mut c = Cache::new(alg, Capacity::objects(40));
            let mut owner: Vec<Option<u64>> = Vec::new();
            let mut x = 99u64;
            let release = |owner: &mut Vec<Option<u64>>, key: u64, slot: SlotHint| {
                let slot = slot.slot().expect("a victim had a slot");
                assert_eq!(owner[slot].take(), Some(key), "{alg}: slot {slot}");
            };
            for _ in 0..5_000 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let key = (x >> 33) % 300;
                if c.contains(key) {
                    continue;
                }
                let hint = c.insert_slotted(key, 1, (), |k, _, slot| release(&mut owner, k, slot));
                if let Some(slot) = hint.and_then(SlotHint::slot) {
                    assert!(slot < c.slot_bound());
                    owner.resize(owner.len().max(slot + 1), None);
                    assert_eq!(
                        owner[slot].replace(key),
                        None,
                        "{alg}: slot given out twice"
                    );
                }
            }
            c.evict_slotted(10, |k, _, slot| release(&mut owner, k, slot));
            c.set_capacity_slotted(Capacity::objects(5), |k, _, slot| {
                release(&mut owner, k, slot)
            });
            assert_eq!(owner.iter().flatten().count() as u64, c.len(), "{alg}");
            assert_eq!(SlotHint::NONE.slot(), None);
        }
    }

    #[test]
    fn hinted_lookups_evict_exactly_like_plain_ones() {
        // Same requests to two caches, one with hints (some stale), one without: the victims
        // and hits must be identical for every algorithm (but BeladySize, which caches nothing
        // without next access times; tested with them in its own file).
        for alg in Algorithm::ALL
            .into_iter()
            .filter(|&a| a != Algorithm::BeladySize)
        {
            let mut plain = Cache::new(alg, Capacity::objects(50));
            let mut hinted = Cache::new(alg, Capacity::objects(50));
            let mut hints = vec![SlotHint::NONE; 200];
            let (mut plain_victims, mut hinted_victims) = (Vec::new(), Vec::new());
            let mut x = 12345u64;
            for i in 0..20_000u32 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let key = (x >> 33) % 200;
                let hit = plain.get(key);
                assert_eq!(
                    hinted.get_hinted(key, hints[key as usize]),
                    hit,
                    "{alg} {i}"
                );
                if !hit {
                    plain.insert_with(key, 1, |k, _| plain_victims.push(k));
                    let before = hinted_victims.len();
                    let hint = hinted.insert_hinted(key, 1, |k, _| hinted_victims.push(k));
                    for &victim in &hinted_victims[before..] {
                        hints[victim as usize] = SlotHint::NONE;
                    }
                    hints[key as usize] = hint.unwrap_or(SlotHint::NONE);
                }
                if i % 97 == 0 {
                    plain.remove(key);
                    hinted.remove(key);
                    hints[key as usize] = SlotHint::NONE;
                }
                if i % 1000 == 0 {
                    // A hint stays right for as long as its key stays cached.
                    for (k, &hint) in hints.iter().enumerate() {
                        if hint != SlotHint::NONE {
                            assert_eq!(hinted.slot_hint(k as u64), Some(hint), "{alg} {k}");
                        }
                    }
                }
            }
            assert_eq!(plain_victims, hinted_victims, "{alg}");
            // libCacheSim's ClockPro refuses what does not fit in half the cache instead of
            // evicting (src/eviction/clockpro_libcachesim.rs); the removals above make room.
            let evicts = alg != Algorithm::ClockProLibCacheSim;
            assert_eq!(!plain_victims.is_empty(), evicts, "{alg}");
        }
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        for alg in Algorithm::ALL {
            let mut c = Cache::new(alg, Capacity::objects(0));
            assert!(!c.access(1, 1));
            assert!(!c.access(1, 1), "{alg}");
            assert!(c.is_empty());
        }
    }

    /// Sizing the slab and index up front ([`Cache::reserve`]) changes where nodes live, not
    /// which objects stay: every algorithm makes the same decisions with it as without,
    /// including a bound below the population (growth resumes past it).
    #[test]
    fn a_reserved_cache_decides_like_a_growing_one() {
        for alg in Algorithm::ALL {
            if alg.is_offline() {
                continue;
            }
            for bound in [0u64, 500, 20_000] {
                let mut grown = Cache::new(alg, Capacity::bytes(60_000));
                let mut reserved = Cache::new(alg, Capacity::bytes(60_000));
                reserved.reserve(bound);
                let mut x = 0x9e37_79b9_7f4a_7c15u64;
                for i in 0..20_000u32 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let key = (x % 4_000) * ((x >> 40) % 3 + 1);
                    let size = (x >> 20) as u32 % 200 + 1;
                    assert_eq!(
                        grown.access(key, size),
                        reserved.access(key, size),
                        "{alg:?}, bound {bound}, request {i}"
                    );
                }
                assert_eq!(grown.len(), reserved.len(), "{alg:?}");
                assert_eq!(grown.evictions(), reserved.evictions(), "{alg:?}");
            }
        }
    }
}
