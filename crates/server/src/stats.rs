//! Server-wide counters for INFO and CACHE STATS. Plain relaxed atomics: they are statistics,
//! read while traffic runs, and need no ordering with the data they describe.

use std::sync::atomic::{AtomicU64, Ordering};

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
