//! The interface between the cache and per-request hooks written elsewhere (Lua policies in
//! `crates/policy`): the cache calls an [`ObjectHooks`] at each decision and keeps, per
//! object, what the hooks see ([`HookObject`]). The cache crate knows nothing of Lua; a
//! scripted cache is built with [`crate::Cache::with_hooks`].
//!
//! A hook that fails (a runtime error, a spent budget, a bad result) is reported once as a
//! [`HookFailure`] and the cache falls back to its built-in LRU for good, as the policy
//! engine retires a misbehaving tick policy: the cache never panics on a hook's behalf.

use std::fmt;
use std::sync::Arc;

/// Numbers the host keeps per object for the hooks (`obj[1]` .. `obj[4]` in Lua). A bound,
/// not a default: every cached object carries them (32 bytes).
pub const USER_NUMBERS: usize = 4;

/// Eviction queues a `priority` hook may spread objects over (its second result, 1..=4).
pub const MAX_QUEUES: usize = 4;

/// What a hook sees of one object, and what it may change (`user`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HookObject {
    pub id: u64,
    pub size: u32,
    /// Hits since the object was inserted.
    pub hits: u64,
    /// Virtual time (requests the cache has seen, counting this one) of the last access.
    pub last_access: u64,
    /// Virtual time of the insert.
    pub inserted: u64,
    /// The hooks' own numbers; 0 when an object is offered for admission.
    pub user: [f64; USER_NUMBERS],
}

/// Which hooks a script defines: the cache skips the others without a call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HookSet {
    pub admit: bool,
    pub on_hit: bool,
    pub on_insert: bool,
    pub on_evict: bool,
    pub priority: bool,
    pub evict: bool,
}

impl HookSet {
    pub fn any(self) -> bool {
        self.admit || self.on_hit || self.on_insert || self.on_evict || self.priority || self.evict
    }
}

/// Where a priority hook puts an object: the host evicts the lowest `priority` first (ties:
/// the earliest insert), within the `queue` the `evict` hook picks (or over all queues).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Placement {
    pub priority: f64,
    /// 0-based, below [`MAX_QUEUES`].
    pub queue: u8,
}

/// A failed hook: which one and why (the message names the policy file and line when the
/// script gave one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookFailure {
    pub hook: &'static str,
    pub message: String,
}

impl fmt::Display for HookFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(): {}", self.hook, self.message)
    }
}

/// Per-request hooks. Each is called only when [`ObjectHooks::defined`] says it exists.
/// `Send`: a server keeps its cache behind a lock shared by its threads.
pub trait ObjectHooks: Send {
    fn defined(&self) -> HookSet;
    /// Whether `obj`, about to enter the cache on a miss or a write, may (false: it
    /// bypasses the cache). May set `obj.user`, which the object keeps if it enters.
    fn admit(&mut self, obj: &mut HookObject) -> Result<bool, HookFailure>;
    fn on_hit(&mut self, obj: &mut HookObject) -> Result<(), HookFailure>;
    fn on_insert(&mut self, obj: &mut HookObject) -> Result<(), HookFailure>;
    fn on_evict(&mut self, obj: &mut HookObject) -> Result<(), HookFailure>;
    /// Where the object goes in the eviction order, asked after an insert and after each hit.
    fn priority(&mut self, obj: &mut HookObject) -> Result<Placement, HookFailure>;
    /// Picks the victim among the lowest-priority object of each non-empty queue (at most
    /// [`MAX_QUEUES`]); returns its index in `candidates`.
    fn evict(&mut self, candidates: &[HookObject]) -> Result<usize, HookFailure>;
    /// The cache's capacity, told once at the start and again at every change.
    fn set_capacity(&mut self, _capacity: crate::Capacity) {}
}

/// Builds fresh hooks for a scripted cache: once per replay, and again whenever a server
/// starts its cache afresh (FLUSHALL), so a cache's hook state is its own.
#[derive(Clone)]
pub struct HookSource {
    make: Arc<dyn Fn() -> Box<dyn ObjectHooks> + Send + Sync>,
    /// What the hooks are built from (a digest of the script and its settings): a server
    /// told to run the hooks it runs already keeps its cache.
    identity: u64,
}

impl HookSource {
    pub fn new(
        identity: u64,
        make: impl Fn() -> Box<dyn ObjectHooks> + Send + Sync + 'static,
    ) -> HookSource {
        HookSource {
            make: Arc::new(make),
            identity,
        }
    }

    pub fn make(&self) -> Box<dyn ObjectHooks> {
        (self.make)()
    }

    /// Whether both build the same hooks.
    pub fn same_as(&self, other: &HookSource) -> bool {
        self.identity == other.identity
    }
}
