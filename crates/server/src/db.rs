//! The state every connection shares: the cache (keys, values and the eviction algorithm from
//! `crates/cache`) in front of the store, and the rules that keep the two coherent.
//!
//! Coherence rules:
//! - The store is the source of truth. A write goes to the store first and only then to the
//!   cache; a failed write removes the key from the cache, so a later read asks the store.
//! - Writes to the same key are serialised by one of [`STRIPES`] async locks (picked by the
//!   key's hash), so the order writes reach the store is the order they reach the cache.
//! - A read that misses fills the cache only if no write touched the key's stripe while it
//!   was reading the store, so a slow read can never put an old value over a newer one.
//! - Keys evicted by the algorithm simply leave the cache; the store still has them.
//! - Visibility follows durability: a write is in the cache and the store before it is
//!   durable, so every reply that can reveal data (a value, existence, a count) is sent only
//!   after [`Db::commit_before_reveal`]; if that fails the reply is an error instead.
//!
//! That is all `Db` decides. What it records on the way belongs to other modules: the
//! counters and the store's read latency to [`crate::metrics`], each access to the warm-up
//! monitor ([`crate::access_monitor`]), the policy's series ([`crate::access_series`]) and,
//! once served, to the shadows ([`crate::shadow`]),
//! hint names to [`crate::hints`]. Policy decisions are applied by `live::actions` and the
//! warm-up fill is run by `warmup::load`, through [`Db::evict`], [`Db::set_capacity`] and
//! [`Db::fill_from_store`].

use crate::access_monitor::AccessMonitor;
use crate::hints::HintNames;
use crate::keytable::{Entry, KeyTable, Value};
use crate::metrics::{Metrics, Stats};
use crate::server_cache::{Request, ServerCache};
use bytes::Bytes;
use cache::classes::{ClassSet, RuleOp};
use cache::hooks::HookSource;
use cache::{Capacity, SlotHint};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};
use store::{Condition, Record, Storage, Store, StoreError};

mod admin;
mod keyspace;
mod watch;

pub use crate::hints::MAX_CLASSES;
pub use crate::metrics::CacheSnapshot;
use keyspace::KeyRead;
pub use keyspace::{Savepoint, Transaction, TxnError};
pub use watch::Watched;

/// Most keys one [`Db::prefetch`] reads ahead: enough to overlap a batch's cache misses,
/// few enough that what it loads is still cached when the batch's lookups run.
pub const READ_AHEAD: usize = 16;

/// Number of write-ordering locks; a power of two.
pub const STRIPES: usize = 1024;

/// Milliseconds since the Unix epoch (the clock expiry times are kept in).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[derive(Clone)]
pub struct Db {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    store: Store,
    stripes: Box<[Stripe]>,
    hasher: ahash::RandomState,
    metrics: Arc<Metrics>,
    /// Bytes charged to the cache per object on top of its key and value (see docs/server.md).
    object_overhead: u64,
    /// Bytes of the byte capacity the store's own memory takes (RocksDB's memtables and block
    /// cache): the cache gets the rest, so both stay within `--maxmemory`.
    store_reserve: AtomicU64,
    /// The byte capacity as given (`u64::MAX`: none), before the store's reserve comes off.
    given_bytes: AtomicU64,
    /// What warm-up on restart will rank (see `warmup`).
    monitor: AccessMonitor,
    /// The accesses a live policy reads as `timeseries()`.
    series: crate::access_series::AccessSeries,
    /// What requests hand to the shadows.
    shadows: crate::shadow::ShadowFeed,
    /// The keys connections WATCH (see `watch`).
    watches: watch::Watches,
    /// The `--classes` file's classes, for a cache rebuilt under another algorithm.
    classes: Option<ClassSet>,
}

struct State {
    table: KeyTable,
    cache: ServerCache,
    /// The names `SET ... HINT name` gave (an entry's `class`).
    hints: HintNames,
    /// Per-request hooks of the policy (`--policy` with `admit`, `priority`, ...): the cache
    /// is scripted, and a FLUSHALL starts it afresh with fresh hooks.
    hooks: Option<HookSource>,
    /// Whether the hooks' failure was handed to the journal already.
    hook_failure_noted: bool,
    /// The built-in algorithm the cache ran before the hooks, run again when they end.
    algorithm_under_hooks: cache::Algorithm,
}

impl State {
    /// The cached entry of `key` (whose hash is `hash`), not counted as an access.
    fn entry(&self, hash: u64, key: &[u8]) -> Option<&Entry> {
        let hint = self.cache.slot_hint(hash)?;
        self.table.get(hint).filter(|entry| entry.key() == key)
    }

    fn has(&self, hash: u64, key: &[u8]) -> bool {
        self.entry(hash, key).is_some()
    }
}

/// A value [`Db::get_value`] found: shared with the cache, or read from the store.
pub enum Fetched {
    Cached(Value),
    Stored(Bytes),
}

impl Fetched {
    pub fn len(&self) -> usize {
        match self {
            Fetched::Cached(value) => value.len(),
            Fetched::Stored(value) => value.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Default)]
struct Stripe {
    lock: tokio::sync::Mutex<()>,
    /// Bumped (under the state lock) by every write to a key of this stripe.
    generation: AtomicU64,
}

impl Db {
    pub fn new(store: Store, algorithm: cache::Algorithm, capacity: Capacity) -> Db {
        Db::with_classes(store, algorithm, capacity, None, ahash::RandomState::new())
    }

    /// A Db whose cache has the classes of a `--classes` file (see `server_cache`), and whose
    /// key table, cache and access monitor know keys by `hasher` (seeded: clients cannot aim
    /// keys at one bucket; `mantle serve` keeps the seeds with the warm-up record, see
    /// `warmup::persist::table_hasher`).
    pub fn with_classes(
        store: Store,
        algorithm: cache::Algorithm,
        capacity: Capacity,
        classes: Option<ClassSet>,
        hasher: ahash::RandomState,
    ) -> Db {
        let object_overhead = crate::keytable::metadata_worst().ceil() as u64;
        Db {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    table: KeyTable::default(),
                    hints: HintNames::with_reserved(
                        classes.iter().flat_map(|classes| classes.hint_names()),
                    ),
                    cache: crate::server_cache::new(algorithm, capacity, classes.clone()),
                    hooks: None,
                    hook_failure_noted: false,
                    algorithm_under_hooks: algorithm,
                }),
                store,
                stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
                hasher,
                metrics: Arc::default(),
                object_overhead,
                store_reserve: AtomicU64::new(0),
                given_bytes: AtomicU64::new(capacity.bytes.unwrap_or(u64::MAX)),
                monitor: AccessMonitor::new(
                    crate::access_monitor::DEFAULT_TRACK,
                    crate::access_monitor::DEFAULT_PERIOD.as_secs(),
                ),
                series: crate::access_series::AccessSeries::default(),
                shadows: crate::shadow::ShadowFeed::default(),
                watches: watch::Watches::default(),
                classes,
            }),
        }
    }

    /// The request path's counters (`metrics().stats`).
    pub fn stats(&self) -> &Stats {
        &self.shared.metrics.stats
    }

    /// Every counter of the server (see `metrics`).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    /// The warm-up access monitor every request records into.
    pub fn monitor(&self) -> &AccessMonitor {
        &self.shared.monitor
    }

    /// The hash the cache and the access monitor know `key` by.
    pub fn key_hash(&self, key: &[u8]) -> u64 {
        self.hash(key)
    }

    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// The access series and policy clock (see `access_series`).
    pub fn series(&self) -> &crate::access_series::AccessSeries {
        &self.shared.series
    }

    /// The shadows' hand-off (see `shadow::feed`).
    pub fn shadow_feed(&self) -> &crate::shadow::ShadowFeed {
        &self.shared.shadows
    }

    /// Hands a served request to the shadows when one samples the key: with none, one atomic
    /// load. `value_len` makes the size the cache charges (see [`Db::charge`]). Always inlined
    /// and the hand-off kept out of line: as one function, every request paid the hand-off's
    /// prologue (six register saves and their restores, ~16 instructions) to learn that no
    /// shadow wanted the key.
    #[inline(always)]
    fn shadow(&self, hash: u64, key: &[u8], value_len: usize, op: crate::shadow::Served) {
        if self.shared.shadows.wants(hash) {
            self.hand_to_shadows(hash, key, value_len, op);
        }
    }

    #[inline(never)]
    fn hand_to_shadows(&self, hash: u64, key: &[u8], value_len: usize, op: crate::shadow::Served) {
        let shared = &self.shared;
        let size = key.len() as u64 + value_len as u64 + shared.object_overhead;
        shared.shadows.push(crate::shadow::Access {
            time: shared.series.clock.now(),
            key: hash,
            size: size.min(u64::from(u32::MAX)) as u32,
            op,
        });
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.shared.hasher.hash_one(key)
    }

    fn stripe(&self, hash: u64) -> &Stripe {
        // The high bits: the table uses the low ones to pick buckets.
        &self.shared.stripes[(hash >> 54) as usize % STRIPES]
    }

    /// The value of `key`, from the cache or, on a miss, from the store (filling the cache).
    pub async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        Ok(self.get_value(key).await?.map(|value| match value {
            Fetched::Cached(value) => Bytes::from(value),
            Fetched::Stored(value) => value,
        }))
    }

    /// [`Db::get`] for a reply: a cached value comes out sharing the cache's entry (no copy,
    /// no allocation on a hit).
    pub async fn get_value(&self, key: &[u8]) -> Result<Option<Fetched>, StoreError> {
        let hash = self.hash(key);
        self.shared.monitor.record(hash, key);
        self.shared.series.record(hash);
        use crate::shadow::Served;
        if let Some(value) = self.lookup_cached(hash, key) {
            self.shadow(hash, key, value.len(), Served::Get);
            return Ok(Some(Fetched::Cached(value)));
        }
        let result = self.read_through(hash, key).await;
        match &result {
            Ok(Some(value)) => self.shadow(hash, key, value.len(), Served::Get),
            _ => self.shadow(hash, key, 0, Served::Absent),
        }
        Ok(result?.map(Fetched::Stored))
    }

    /// Starts loading what the lookups of `keys` (the next requests of a batch, at most
    /// [`READ_AHEAD`]) will read: the access monitor's slots, the cache index chains, the
    /// key table's slots and the entries. Each lookup walks a chain of dependent loads that are cold when a batch
    /// arrives (between a proxying node's units the other processes run); started for the
    /// whole batch first, the misses of different keys overlap instead of adding up. Only a
    /// hint: it records no access and changes nothing.
    pub fn prefetch(&self, keys: &[&[u8]]) {
        let keys = &keys[..keys.len().min(READ_AHEAD)];
        let mut hashes = [0u64; READ_AHEAD];
        for (hash, key) in hashes.iter_mut().zip(keys) {
            *hash = self.hash(key);
        }
        let hashes = &hashes[..keys.len()];
        self.shared.monitor.prefetch(hashes);
        let state = self.state();
        state.cache.prefetch(hashes);
        let mut hints = [SlotHint::default(); READ_AHEAD];
        for (hint, &hash) in hints.iter_mut().zip(hashes) {
            *hint = state.cache.slot_hint(hash).unwrap_or_default();
            state.table.prefetch_slot(*hint);
        }
        for &hint in &hints[..keys.len()] {
            state.table.prefetch_entry(hint);
        }
    }

    fn lookup_cached(&self, hash: u64, key: &[u8]) -> Option<Value> {
        let mut state = self.state();
        let State {
            table,
            cache,
            hints,
            ..
        } = &mut *state;
        let hint = cache.slot_hint(hash)?;
        let entry = table.get(hint).filter(|entry| entry.key() == key)?;
        if !entry.is_live_now(now_ms) {
            self.forget(&mut state, hash);
            return None;
        }
        let value = entry.value();
        let class = cache.classify(&Request {
            key,
            size: entry.value_len(),
            op: RuleOp::Get,
            hint: hints.name(entry.class()).map(str::as_bytes),
        });
        cache.get_hinted_as(hash, hint, class);
        Stats::bump(&self.shared.metrics.stats.cache_hits);
        Some(value)
    }

    async fn read_through(&self, hash: u64, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        let stats = &self.shared.metrics.stats;
        Stats::bump(&stats.cache_misses);
        let stripe = self.stripe(hash);
        let generation = stripe.generation.load(Ordering::Acquire);
        let now = now_ms();
        match self.store_get(key, now).await? {
            None => {
                self.class_miss(key, 0);
                Stats::bump(&stats.keyspace_misses);
                Ok(None)
            }
            Some(record) if !record.is_live(now) => {
                self.class_miss(key, 0);
                self.purge_expired(hash, key).await?;
                Stats::bump(&stats.keyspace_misses);
                Ok(None)
            }
            Some(record) => {
                let mut state = self.state();
                if state.cache.is_classed() {
                    let class = state.cache.classify(&Request {
                        key,
                        size: record.value.len(),
                        op: RuleOp::Get,
                        hint: None,
                    });
                    state.cache.count_miss(class);
                }
                if stripe.generation.load(Ordering::Acquire) == generation && !state.has(hash, key)
                {
                    let entry = Entry::new(key, &record.value, record.expires_at_ms, 0);
                    if self.install(&mut state, hash, entry, RuleOp::Get) {
                        Stats::bump(&stats.cache_fills);
                    }
                }
                Ok(Some(record.value))
            }
        }
    }

    /// With classes: credits a GET of `key` that found nothing (of `size` bytes) to its class.
    fn class_miss(&self, key: &[u8], size: usize) {
        let mut state = self.state();
        if state.cache.is_classed() {
            let class = state.cache.classify(&Request {
                key,
                size,
                op: RuleOp::Get,
                hint: None,
            });
            state.cache.count_miss(class);
        }
    }

    async fn store_get(&self, key: &[u8], now: u64) -> Result<Option<Record>, StoreError> {
        Stats::bump(&self.shared.metrics.stats.store_reads);
        let started = std::time::Instant::now();
        let result = self.shared.store.get(key, now).await;
        self.shared.metrics.store_read.observe(started.elapsed());
        result.inspect_err(|_| Stats::bump(&self.shared.metrics.stats.store_errors))
    }

    async fn purge_expired(&self, hash: u64, key: &[u8]) -> Result<(), StoreError> {
        let stripe = self.stripe(hash);
        let _guard = stripe.lock.lock().await;
        if self.shared.store.purge_expired(key, now_ms())? {
            Stats::bump(&self.shared.metrics.stats.expired_keys);
        }
        let mut state = self.state();
        self.forget_key(&mut state, hash, key);
        stripe.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Writes `key` through to the store, then caches it. Returns false when `condition`
    /// (NX/XX) stopped the write. The write may be acknowledged only after [`Db::commit`].
    pub async fn set(
        &self,
        key: &[u8],
        value: &Bytes,
        expires_at_ms: u64,
        condition: Condition,
        class: Option<&[u8]>,
    ) -> Result<bool, StoreError> {
        let class = match class {
            Some(name) => self.state().hints.intern(name),
            None => 0,
        };
        let hash = self.hash(key);
        self.shared.monitor.record(hash, key);
        self.shared.series.record(hash);
        let stripe = self.stripe(hash);
        let now = now_ms();
        let record = Record {
            value: value.clone(),
            expires_at_ms,
        };
        let written = {
            let _guard = stripe.lock.lock().await;
            Stats::bump(&self.shared.metrics.stats.store_writes);
            // A cached key is in the store (the cache only holds what the store accepted).
            let known_live = self
                .cached_expiry(hash, key)
                .is_some_and(|at| at == 0 || at > now);
            let result = self
                .shared
                .store
                .set(key, &record, condition, now, known_live)
                .await;
            if matches!(result, Ok(true)) {
                self.shared.watches.touch(key);
            }
            let mut state = self.state();
            match &result {
                Ok(true) if record.is_live(now) => {
                    self.install(
                        &mut state,
                        hash,
                        Entry::new(key, value, expires_at_ms, class),
                        RuleOp::Put,
                    );
                }
                Ok(false) => {}
                // Expired on arrival, or the store's state is unknown: the store answers next.
                _ => self.forget_key(&mut state, hash, key),
            }
            stripe.generation.fetch_add(1, Ordering::Release);
            drop(state);
            match &result {
                Ok(true) if record.is_live(now) => {
                    self.shadow(hash, key, value.len(), crate::shadow::Served::Put)
                }
                Ok(false) => {}
                _ => self.shadow(hash, key, 0, crate::shadow::Served::Delete),
            }
            result.inspect_err(|_| Stats::bump(&self.shared.metrics.stats.store_errors))?
        };
        Ok(written)
    }

    /// Makes all writes so far durable per `--fsync`; connections call it before sending the
    /// replies that acknowledge writes (once per batch of pipelined requests).
    pub async fn commit(&self) -> Result<(), StoreError> {
        self.shared
            .store
            .commit()
            .await
            .inspect_err(|_| Stats::bump(&self.shared.metrics.stats.store_errors))
    }

    /// Before replies that may reveal stored data (values, existence, counts): makes every
    /// write the store accepted so far durable per `--fsync`, so no client ever sees a write
    /// that a crash could still lose or that failed. A no-op when nothing is pending.
    pub async fn commit_before_reveal(&self) -> Result<(), StoreError> {
        if self.shared.store.has_undurable_writes() {
            self.commit().await
        } else {
            Ok(())
        }
    }

    /// The expiry of `key` if it is cached (0: none).
    fn cached_expiry(&self, hash: u64, key: &[u8]) -> Option<u64> {
        self.state().entry(hash, key).map(Entry::expires_at_ms)
    }

    /// MSET: all pairs reach the store in one batch, then the cache. Acknowledge after
    /// [`Db::commit`].
    pub async fn set_many(&self, pairs: &[(Bytes, Bytes)]) -> Result<(), StoreError> {
        let hashes: Vec<u64> = pairs.iter().map(|(k, _)| self.hash(k)).collect();
        for ((key, _), &hash) in pairs.iter().zip(&hashes) {
            self.shared.monitor.record(hash, key);
            self.shared.series.record(hash);
        }
        let now = now_ms();
        let records: Vec<(Bytes, Record)> = pairs
            .iter()
            .map(|(key, value)| {
                let record = Record {
                    value: value.clone(),
                    expires_at_ms: 0,
                };
                (key.clone(), record)
            })
            .collect();
        {
            let guards = self.lock_stripes(&hashes).await;
            Stats::bump(&self.shared.metrics.stats.store_writes);
            // Cached keys are in the store: the store need not read them to count new keys.
            let known_live: Vec<bool> = {
                let state = self.state();
                pairs
                    .iter()
                    .zip(&hashes)
                    .map(|((key, _), &hash)| {
                        state
                            .entry(hash, key)
                            .is_some_and(|entry| entry.is_live(now))
                    })
                    .collect()
            };
            let result = self
                .shared
                .store
                .set_many_known(&records, &known_live, now)
                .await;
            if result.is_ok() {
                for (key, _) in pairs {
                    self.shared.watches.touch(key);
                }
            }
            let mut state = self.state();
            for ((key, value), &hash) in pairs.iter().zip(&hashes) {
                if result.is_ok() {
                    self.install(&mut state, hash, Entry::new(key, value, 0, 0), RuleOp::Put);
                } else {
                    self.forget_key(&mut state, hash, key);
                }
            }
            self.bump_generations(&hashes);
            drop(state);
            drop(guards);
            for ((key, value), &hash) in pairs.iter().zip(&hashes) {
                match result {
                    Ok(()) => self.shadow(hash, key, value.len(), crate::shadow::Served::Put),
                    Err(_) => self.shadow(hash, key, 0, crate::shadow::Served::Delete),
                }
            }
            result.inspect_err(|_| Stats::bump(&self.shared.metrics.stats.store_errors))
        }
    }

    /// DEL: removes the keys from the store and the cache; returns how many existed.
    /// Acknowledge after [`Db::commit`].
    pub async fn delete(&self, keys: &[Bytes]) -> Result<u64, StoreError> {
        let hashes: Vec<u64> = keys.iter().map(|k| self.hash(k)).collect();
        let removed = {
            let guards = self.lock_stripes(&hashes).await;
            Stats::bump(&self.shared.metrics.stats.store_writes);
            let now = now_ms();
            // Which keys exist, read under their locks only while someone watches a key: a
            // DEL that removes nothing from a watched key must not abort its transaction.
            let mut live = Vec::new();
            if self.shared.watches.is_active() && keys.len() > 1 {
                for (key, &hash) in keys.iter().zip(&hashes) {
                    live.push(matches!(
                        self.read_locked(hash, key, now).await?,
                        KeyRead::Live(_)
                    ));
                }
            }
            let result = self.shared.store.delete(keys, now).await;
            if matches!(result, Ok(n) if n > 0) {
                for (i, key) in keys.iter().enumerate() {
                    if live.get(i).copied().unwrap_or(true) {
                        self.shared.watches.touch(key);
                    }
                }
            }
            let mut state = self.state();
            for (key, &hash) in keys.iter().zip(&hashes) {
                self.forget_key(&mut state, hash, key);
            }
            self.bump_generations(&hashes);
            drop(state);
            drop(guards);
            for (key, &hash) in keys.iter().zip(&hashes) {
                self.shadow(hash, key, 0, crate::shadow::Served::Delete);
            }
            result.inspect_err(|_| Stats::bump(&self.shared.metrics.stats.store_errors))?
        };
        Ok(removed)
    }

    /// EXISTS: counts the keys that exist (a key named twice counts twice, as in Redis).
    /// Does not count as an access for the eviction algorithm.
    pub async fn exists(&self, keys: &[Bytes]) -> Result<u64, StoreError> {
        let now = now_ms();
        let mut found = 0;
        for key in keys {
            let hash = self.hash(key);
            let cached = {
                let state = self.state();
                state.entry(hash, key).map(|e| e.is_live(now))
            };
            let exists = match cached {
                Some(live) => live,
                None => {
                    Stats::bump(&self.shared.metrics.stats.store_reads);
                    self.shared.store.exists(key, now).await?
                }
            };
            found += u64::from(exists);
        }
        Ok(found)
    }

    /// Milliseconds `key` has left: -2 if it does not exist, -1 if it never expires.
    pub async fn pttl(&self, key: &[u8]) -> Result<i64, StoreError> {
        let hash = self.hash(key);
        let now = now_ms();
        let cached = {
            let state = self.state();
            state.entry(hash, key).map(Entry::expires_at_ms)
        };
        let expires_at_ms = match cached {
            Some(at) => at,
            None => match self.store_get(key, now).await? {
                Some(record) => record.expires_at_ms,
                None => return Ok(-2),
            },
        };
        Ok(match expires_at_ms {
            0 => -1,
            at if at <= now => {
                self.purge_expired(hash, key).await?;
                -2
            }
            at => (at - now) as i64,
        })
    }

    /// DBSIZE: keys in the store (not just the cached ones).
    pub async fn dbsize(&self) -> Result<u64, StoreError> {
        self.shared.store.key_count().await
    }

    /// Takes `bytes` of the byte capacity (now and after every [`Db::set_capacity`]) for the
    /// store's own memory, but never more than half of it; the capacity the server reports
    /// stays the one it was given.
    pub fn reserve_for_store(&self, bytes: u64) {
        let capacity = self.cache_snapshot().capacity;
        self.shared.store_reserve.store(bytes, Ordering::Relaxed);
        self.set_capacity(capacity);
    }

    /// The bytes the store's memory takes out of the byte capacity.
    pub fn store_reserve(&self) -> u64 {
        self.shared.store_reserve.load(Ordering::Relaxed)
    }

    /// Changes the capacity (the store's reserve comes off its bytes), evicting down to it at
    /// once; returns objects evicted.
    pub fn set_capacity(&self, capacity: Capacity) -> u64 {
        let reserve = self.store_reserve();
        let given = capacity.bytes.unwrap_or(u64::MAX);
        let capacity = Capacity {
            bytes: capacity.bytes.map(|b| b - reserve.min(b / 2)),
            objects: capacity.objects,
        };
        let mut state = self.state();
        self.shared.given_bytes.store(given, Ordering::Relaxed);
        let State { table, cache, .. } = &mut *state;
        cache.set_capacity_slotted(capacity, |_, _, victim| {
            table.take(victim);
        })
    }

    /// Per-class figures (`--classes`); empty without classes.
    pub fn class_figures(&self) -> Vec<crate::server_cache::ClassFigures> {
        self.state().cache.class_figures()
    }

    /// Runs the cache with the per-request hooks `hooks` build from now on (an empty cache,
    /// refilled from the store as keys are read, as after a change of algorithm). Returns
    /// false when the same hooks run already: the cache and its order are kept.
    ///
    /// Atomic for requests: the cache is swapped under the state lock every request takes,
    /// so a request sees the old hooks' cache or the new one, never a mix, and the bumped
    /// stripe generations keep a read in flight from putting an old value into the new one.
    pub fn set_hooks(&self, hooks: HookSource) -> Result<bool, String> {
        if self.shared.classes.is_some() {
            return Err("per-request hooks run without classes (--classes)".into());
        }
        let mut state = self.state();
        if state.hooks.as_ref().is_some_and(|h| h.same_as(&hooks)) {
            return Ok(false);
        }
        let State { table, cache, .. } = &mut *state;
        let algorithm = cache.algorithm();
        *cache = crate::server_cache::scripted(cache.capacity(), hooks.make());
        *table = KeyTable::default();
        if state.hooks.is_none() {
            state.algorithm_under_hooks = algorithm;
        }
        state.hooks = Some(hooks);
        state.hook_failure_noted = false;
        drop(state);
        self.bump_all_generations();
        Ok(true)
    }

    /// Ends the per-request hooks' rule: the cache runs the built-in algorithm it ran before
    /// them (empty, refilled from the store), atomically as [`Db::set_hooks`]. Returns
    /// whether hooks were running.
    pub fn end_hooks(&self) -> bool {
        let mut state = self.state();
        if state.hooks.is_none() {
            return false;
        }
        let algorithm = state.algorithm_under_hooks;
        let State { table, cache, .. } = &mut *state;
        *cache = crate::server_cache::new(algorithm, cache.capacity(), self.shared.classes.clone());
        *table = KeyTable::default();
        state.hooks = None;
        state.hook_failure_noted = false;
        drop(state);
        self.bump_all_generations();
        true
    }

    /// Tells every read in flight that the cache changed under it (see the coherence rules).
    fn bump_all_generations(&self) {
        for stripe in self.shared.stripes.iter() {
            stripe.generation.fetch_add(1, Ordering::Release);
        }
    }

    /// Whether the cache runs per-request hooks, and why they stopped if they failed.
    pub fn hooks_status(&self) -> Option<Result<(), String>> {
        let mut state = self.state();
        state.hooks.as_ref()?;
        Some(match state.cache.hook_failure() {
            Some(f) => Err(f.to_string()),
            None => Ok(()),
        })
    }

    /// The hooks' failure the first time it is asked after it happened (for the journal).
    pub fn take_hook_failure(&self) -> Option<String> {
        let mut state = self.state();
        if state.hook_failure_noted {
            return None;
        }
        let failure = state.cache.hook_failure()?.to_string();
        state.hook_failure_noted = true;
        Some(failure)
    }

    /// An empty cache like the current one (same algorithm, capacity, classes or hooks).
    fn fresh_cache(&self, state: &State) -> ServerCache {
        let capacity = state.cache.capacity();
        match &state.hooks {
            Some(hooks) => crate::server_cache::scripted(capacity, hooks.make()),
            None => crate::server_cache::new(
                state.cache.algorithm(),
                capacity,
                self.shared.classes.clone(),
            ),
        }
    }

    pub fn cache_snapshot(&self) -> CacheSnapshot {
        let state = self.state();
        CacheSnapshot {
            algorithm: state.cache.algorithm(),
            objects: state.cache.len(),
            bytes: state.cache.bytes(),
            capacity: Capacity {
                bytes: Some(self.shared.given_bytes.load(Ordering::Relaxed))
                    .filter(|&b| b != u64::MAX),
                ..state.cache.capacity()
            },
            evictions: state.cache.evictions(),
            metadata_bytes: (state.table.heap_bytes() + state.cache.metadata_bytes()) as u64,
            object_overhead: self.shared.object_overhead,
        }
    }

    /// Forces everything written to disk (shutdown).
    pub fn sync(&self) -> Result<(), StoreError> {
        self.shared.store.sync_now()
    }

    /// The bytes the cache charges for an object: key, value and bookkeeping.
    fn charge(&self, entry: &Entry) -> u32 {
        let total =
            entry.key().len() as u64 + entry.value_len() as u64 + self.shared.object_overhead;
        total.min(u64::from(u32::MAX)) as u32
    }

    /// Puts `entry` in the cache (replacing the key's previous value), letting the algorithm
    /// evict to make room. Returns whether the key is cached afterwards.
    fn install(&self, state: &mut State, hash: u64, entry: Entry, op: RuleOp) -> bool {
        let size = self.charge(&entry);
        let State {
            table,
            cache,
            hints,
            ..
        } = state;
        let class = cache.classify(&Request {
            key: entry.key(),
            size: entry.value_len(),
            op,
            hint: hints.name(entry.class()).map(str::as_bytes),
        });
        // The entry in the hash's slot leaves the table now: the key's old value (the cache
        // rewrites its object, keeping or moving its slot), or another key with the same hash,
        // which the new one replaces in the cache.
        let old = match cache.slot_hint(hash) {
            Some(hint) => {
                let old = table.take(hint);
                if old.as_ref().is_some_and(|old| old.key() != entry.key()) {
                    cache.remove(hash);
                }
                old
            }
            None => None,
        };
        let hint = cache.insert_slotted(hash, size, class, |_, _, victim| {
            table.take(victim);
        });
        if let Some(hint) = hint {
            table.put(hint, entry);
        }
        drop(old);
        hint.is_some()
    }

    fn forget(&self, state: &mut State, hash: u64) {
        if let Some(hint) = state.cache.slot_hint(hash) {
            state.cache.remove(hash);
            state.table.take(hint);
        }
    }

    /// Drops `key` from the cache. By hash: a colliding key that holds the hash's place is
    /// dropped too, which is only a miss later.
    fn forget_key(&self, state: &mut State, hash: u64, _key: &[u8]) {
        self.forget(state, hash);
    }

    /// `SET ... HINT` names stored as no hint because the name table was full.
    pub fn hint_names_dropped(&self) -> u64 {
        self.state().hints.dropped()
    }

    /// The class a cached key was hinted with, if any (for tests and introspection).
    pub fn cached_class(&self, key: &[u8]) -> Option<String> {
        let hash = self.hash(key);
        let state = self.state();
        let class = state.entry(hash, key)?.class();
        state.hints.name(class).map(str::to_string)
    }

    /// Drops `keys` from the cache, not the store (a slot range that left this node, or is
    /// about to be imported): a read in flight cannot put them back (their stripes' writes
    /// are bumped).
    pub fn forget_cached(&self, keys: &[Bytes]) {
        for chunk in keys.chunks(EVICT_BATCH as usize) {
            let mut state = self.state();
            for key in chunk {
                let hash = self.hash(key);
                self.forget_key(&mut state, hash, key);
                self.stripe(hash).generation.fetch_add(1, Ordering::Release);
            }
        }
    }

    /// Drops from the cache keys the store no longer holds (a slot range wiped after its
    /// migration) and aborts the transactions that WATCH them.
    pub fn forget_deleted(&self, keys: &[Bytes]) {
        self.forget_cached(keys);
        self.shared.watches.touch_each(keys);
    }

    /// Drops from the cache every key `pick` chooses (see [`Db::forget_cached`]); returns
    /// how many. Scans the whole cache.
    pub fn forget_cached_where(&self, pick: impl FnMut(&[u8]) -> bool) -> usize {
        let keys = self.state().table.keys_where(pick);
        self.forget_cached(&keys);
        keys.len()
    }

    /// Whether `key` is in the cache now (no access recorded).
    pub fn is_cached(&self, key: &[u8]) -> bool {
        let hash = self.hash(key);
        self.state().has(hash, key)
    }

    async fn lock_stripes(&self, hashes: &[u64]) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        let mut indexes: Vec<usize> = hashes
            .iter()
            .map(|&h| (h >> 54) as usize % STRIPES)
            .collect();
        // A fixed order, so two multi-key writes cannot deadlock.
        indexes.sort_unstable();
        indexes.dedup();
        let mut guards = Vec::with_capacity(indexes.len());
        for i in indexes {
            guards.push(self.shared.stripes[i].lock.lock().await);
        }
        guards
    }

    fn bump_generations(&self, hashes: &[u64]) {
        for &hash in hashes {
            self.stripe(hash).generation.fetch_add(1, Ordering::Release);
        }
    }
}

/// Objects evicted per hold of the state lock when a policy evicts: clients wait for at most
/// one batch, not for the whole action.
pub const EVICT_BATCH: u64 = 256;

// Batched eviction, for a live policy's actions (see `live::actions`).
impl Db {
    /// Evicts up to `n` objects from the algorithm's cold end; returns how many left.
    pub fn evict(&self, n: u64) -> u64 {
        let mut evicted = 0;
        while evicted < n {
            let batch = (n - evicted).min(EVICT_BATCH);
            let done = {
                let mut state = self.state();
                let State { table, cache, .. } = &mut *state;
                cache.evict_slotted(batch, |_, _, victim| {
                    table.take(victim);
                })
            };
            evicted += done;
            if done < batch {
                break;
            }
        }
        evicted
    }
}

/// What one key of a bulk fill came to (see [`Db::fill_from_store`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filled {
    Loaded,
    /// Already cached, touched by a client meanwhile, or not in the store.
    Skipped,
    /// The key does not fit the room the caller allows: a warm-up fill stops there rather
    /// than evict or skip ahead to lower-ranked keys.
    Full,
}

/// The cache's occupancy when a bulk fill asks whether one more object fits.
#[derive(Clone, Copy, Debug)]
pub struct Room {
    pub objects: u64,
    pub bytes: u64,
    pub capacity: Capacity,
    /// What the candidate would be charged.
    pub size: u64,
}

// A bulk fill (warm-up's, see `warmup::load`): coherence says clients always win.
impl Db {
    /// Reads `key` from the store and caches it if `fits` says the room allows, but only if no
    /// client cached or wrote the key meanwhile. Not an access.
    pub async fn fill_from_store(
        &self,
        key: &[u8],
        fits: impl FnOnce(Room) -> bool,
    ) -> Result<Filled, StoreError> {
        let hash = self.hash(key);
        if self.is_cached(key) {
            return Ok(Filled::Skipped);
        }
        let stripe = self.stripe(hash);
        let generation = stripe.generation.load(Ordering::Acquire);
        let now = now_ms();
        let record = match self.store_get(key, now).await? {
            Some(record) if record.is_live(now) => record,
            _ => return Ok(Filled::Skipped),
        };
        let mut state = self.state();
        if stripe.generation.load(Ordering::Acquire) != generation || state.has(hash, key) {
            return Ok(Filled::Skipped);
        }
        let entry = Entry::new(key, &record.value, record.expires_at_ms, 0);
        let room = Room {
            objects: state.cache.len(),
            bytes: state.cache.bytes(),
            capacity: state.cache.capacity(),
            size: u64::from(self.charge(&entry)),
        };
        if !fits(room) {
            return Ok(Filled::Full);
        }
        Ok(if self.install(&mut state, hash, entry, RuleOp::Get) {
            Filled::Loaded
        } else {
            Filled::Skipped
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::rocks::{OpenOptions, RocksStore};

    fn db(dir: &std::path::Path, capacity: Capacity) -> Db {
        let rocks = RocksStore::open(dir, crate::Fsync::No, OpenOptions::default()).unwrap();
        Db::new(Store::from(rocks), cache::Algorithm::Lru, capacity)
    }

    #[test]
    fn the_stores_reserve_comes_off_the_cache_but_not_off_the_reported_limit() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(dir.path(), Capacity::bytes(256 << 20));
        db.reserve_for_store(16 << 20);
        assert_eq!(db.cache_snapshot().capacity.bytes, Some(256 << 20));
        assert_eq!(db.state().cache.capacity().bytes, Some(240 << 20));
        // Never more than half of a small limit.
        db.set_capacity(Capacity::bytes(64 << 10));
        assert_eq!(db.cache_snapshot().capacity.bytes, Some(64 << 10));
        assert_eq!(db.state().cache.capacity().bytes, Some(32 << 10));
        db.set_capacity(Capacity::objects(10));
        assert_eq!(db.cache_snapshot().capacity, Capacity::objects(10));
    }

    /// Reading keys ahead is only a hint: no hit counted, no access recorded (the LRU order
    /// stays), missing keys and more keys than `READ_AHEAD` are fine.
    #[test]
    fn prefetch_records_no_access_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(dir.path(), Capacity::objects(3));
        let keys: [&[u8]; 3] = [b"a", b"b", b"c"];
        let mut state = db.state();
        for key in keys {
            assert!(db.install(
                &mut state,
                db.hash(key),
                Entry::new(key, b"v", 0, 0),
                RuleOp::Put
            ));
        }
        drop(state);
        let mut many: Vec<&[u8]> = vec![b"a", b"missing", b"a", b"b"];
        many.resize(READ_AHEAD + 5, b"a");
        db.monitor().set_track(1000);
        db.monitor().record(db.hash(b"b"), b"b");
        let (tracked, last_seq) = (db.monitor().len(), db.monitor().last_seq());
        db.prefetch(&many);
        db.prefetch(&[]);
        assert_eq!(db.stats().cache_hits.load(Ordering::Relaxed), 0);
        assert_eq!(
            (db.monitor().len(), db.monitor().last_seq()),
            (tracked, last_seq)
        );
        let mut state = db.state();
        assert!(db.install(
            &mut state,
            db.hash(b"d"),
            Entry::new(b"d", b"v", 0, 0),
            RuleOp::Put
        ));
        assert!(
            !state.has(db.hash(b"a"), b"a"),
            "a, the oldest, was evicted"
        );
        for key in [&b"b"[..], b"c", b"d"] {
            assert!(state.has(db.hash(key), key));
        }
    }

    #[test]
    fn a_key_with_another_keys_hash_replaces_it_and_never_reads_its_value() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(dir.path(), Capacity::objects(100));
        let mut state = db.state();
        let hash = 42;
        assert!(db.install(&mut state, hash, Entry::new(b"a", b"1", 0, 0), RuleOp::Put));
        assert!(state.has(hash, b"a"));
        assert!(!state.has(hash, b"b"), "same hash, other bytes: not a hit");
        assert!(db.install(&mut state, hash, Entry::new(b"b", b"2", 0, 0), RuleOp::Put));
        assert!(!state.has(hash, b"a"));
        assert_eq!(state.entry(hash, b"b").unwrap().value_bytes(), b"2");
        assert_eq!((state.cache.len(), state.table.len()), (1, 1));
        // Rewriting a key keeps one entry and shows the new value.
        assert!(db.install(&mut state, hash, Entry::new(b"b", b"3", 0, 0), RuleOp::Put));
        assert_eq!(state.entry(hash, b"b").unwrap().value_bytes(), b"3");
        assert_eq!((state.cache.len(), state.table.len()), (1, 1));
        db.forget_key(&mut state, hash, b"b");
        assert_eq!((state.cache.len(), state.table.len()), (0, 0));
    }
}
