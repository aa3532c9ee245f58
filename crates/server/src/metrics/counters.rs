//! The server's counters and gauges, by who bumps them. Plain relaxed atomics: they are
//! statistics, read while traffic runs, and need no ordering with the data they describe.

use cache::warmup::WarmupSpec;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The request path's counters (connections, commands, cache and store).
#[derive(Default)]
pub struct Stats {
    pub connections_received: AtomicU64,
    pub connected_clients: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub commands_processed: AtomicU64,
    pub protocol_errors: AtomicU64,
    /// Lookups answered from the cache.
    pub cache_hits: AtomicU64,
    /// Lookups that went to the store (found there or not).
    pub cache_misses: AtomicU64,
    /// Lookups of keys that exist nowhere (Redis's `keyspace_misses`).
    pub keyspace_misses: AtomicU64,
    /// Store reads that put a value into the cache.
    pub cache_fills: AtomicU64,
    pub store_reads: AtomicU64,
    pub store_writes: AtomicU64,
    pub store_errors: AtomicU64,
    pub expired_keys: AtomicU64,
}

impl Stats {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn read(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// CONFIG RESETSTAT: zero the counters that accumulate (not the gauges).
    pub fn reset(&self) {
        for counter in [
            &self.connections_received,
            &self.rejected_connections,
            &self.commands_processed,
            &self.protocol_errors,
            &self.cache_hits,
            &self.cache_misses,
            &self.keyspace_misses,
            &self.cache_fills,
            &self.store_reads,
            &self.store_writes,
            &self.store_errors,
            &self.expired_keys,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

/// Counters of the per-client bounds.
#[derive(Default)]
pub struct Guards {
    /// Replies refused for being larger than `--client-output-limit`.
    pub output_rejections: AtomicU64,
    /// AUTH and HELLO ... AUTH attempts with a wrong password.
    pub auth_failures: AtomicU64,
    /// Connections closed for too many failed AUTH attempts.
    pub auth_disconnects: AtomicU64,
}

/// The live policy's figures, stored by the engine's thread after each tick or command so
/// readers need no round trip to it.
#[derive(Default)]
pub struct PolicyGauges {
    pub ticks: AtomicU64,
    pub actions: AtomicU64,
    pub errors: AtomicU64,
    pub fallbacks: AtomicU64,
    /// Registry version of the active policy, 0 when none.
    pub active_version: AtomicU64,
    /// `name@N` of the active policy, empty when none.
    pub active: Mutex<String>,
}

impl PolicyGauges {
    pub fn read(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    pub fn active(&self) -> String {
        self.active.lock().map(|a| a.clone()).unwrap_or_default()
    }
}

/// The warm-up bulk fill's progress and the persister's counts (see `warmup`).
#[derive(Default)]
pub struct WarmupProgress {
    spec: Mutex<Option<WarmupSpec>>,
    started: Mutex<Option<Instant>>,
    /// Keys chosen to load.
    pub total: AtomicU64,
    /// Keys put into the cache by the fill.
    pub loaded: AtomicU64,
    /// Chosen keys not loaded: already cached, written meanwhile, gone from the store.
    pub skipped: AtomicU64,
    /// Store reads that failed.
    pub errors: AtomicU64,
    /// Milliseconds the fill took, once done.
    pub elapsed_ms: AtomicU64,
    pub done: AtomicBool,
    /// Persists written, and keys in the last one.
    pub persists: AtomicU64,
    pub persisted_keys: AtomicU64,
    /// The monitor's access number when the last persist began: every access up to it is in
    /// the store.
    pub persisted_seq: AtomicU64,
}

impl WarmupProgress {
    pub fn read(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    pub fn spec(&self) -> Option<WarmupSpec> {
        *self.spec.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Seconds since the fill started (frozen once it is done).
    pub fn seconds(&self) -> f64 {
        if self.is_done() {
            return Self::read(&self.elapsed_ms) as f64 / 1000.0;
        }
        let started = *self.started.lock().unwrap_or_else(|p| p.into_inner());
        started.map_or(0.0, |t| t.elapsed().as_secs_f64())
    }

    pub fn begin(&self, spec: WarmupSpec, total: u64) {
        *self.spec.lock().unwrap_or_else(|p| p.into_inner()) = Some(spec);
        *self.started.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.total.store(total, Ordering::Relaxed);
    }

    pub fn finish(&self) {
        let started = *self.started.lock().unwrap_or_else(|p| p.into_inner());
        let ms = started.map_or(0, |t| t.elapsed().as_millis() as u64);
        self.elapsed_ms.store(ms, Ordering::Relaxed);
        self.done.store(true, Ordering::Release);
    }
}
