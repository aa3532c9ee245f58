//! What the keyspace and admin commands ask of [`Db`] beyond reads and writes: TOUCH, MEMORY
//! USAGE, walking the store's keys (SCAN, KEYS), FLUSHDB/FLUSHALL and changing the eviction
//! algorithm (`CONFIG SET maxmemory-policy`). The coherence rules of `db.rs` hold here too:
//! FLUSH holds every write stripe while it deletes, so no write interleaves with it, and
//! bumps them all, so no read in flight puts a flushed value back into the cache.

use super::{Db, State, STRIPES};
use crate::keytable::KeyTable;
use bytes::Bytes;
use std::sync::atomic::Ordering;
use store::rocks::KeyPage;
use store::{Storage, StoreError};

impl Db {
    /// TOUCH: an access to each key that exists (a miss reads it into the cache, as a GET
    /// would); returns how many exist.
    pub async fn touch(&self, keys: &[Bytes]) -> Result<u64, StoreError> {
        let mut found = 0;
        for key in keys {
            found += u64::from(self.get(key).await?.is_some());
        }
        Ok(found)
    }

    /// MEMORY USAGE: what the cache charges for `key` — key, value and the per-object
    /// metadata (`object_overhead`) — whether it is cached now or only stored; `None` when
    /// it does not exist. Not an access.
    pub async fn memory_usage(&self, key: &[u8]) -> Result<Option<u64>, StoreError> {
        let hash = self.hash(key);
        let now = super::now_ms();
        let cached = {
            let state = self.state();
            state
                .entry(hash, key)
                .map(|entry| (entry.is_live(now), entry.value_len() as u64))
        };
        let value_len = match cached {
            Some((true, len)) => len,
            Some((false, _)) => return Ok(None),
            None => match self.store_get(key, now).await? {
                Some(record) if record.is_live(now) => record.value.len() as u64,
                _ => return Ok(None),
            },
        };
        Ok(Some(
            key.len() as u64 + value_len + self.shared.object_overhead,
        ))
    }

    /// A page of the store's keys for SCAN and KEYS (see [`KeyPage`]).
    pub fn key_page(&self, after: Option<&[u8]>, max: usize) -> Result<KeyPage, StoreError> {
        self.shared.store.key_page(after, max)
    }

    /// FLUSHDB / FLUSHALL: deletes every key from the store and the cache; returns how many
    /// keys were stored. Acknowledge after [`Db::commit`].
    pub async fn flush_all(&self) -> Result<u64, StoreError> {
        // Every stripe, in index order (as `lock_stripes` takes them): no write can run
        // between the store's delete and the cache's.
        let mut guards = Vec::with_capacity(STRIPES);
        for stripe in self.shared.stripes.iter() {
            guards.push(stripe.lock.lock().await);
        }
        let result = self.shared.store.delete_all();
        {
            let mut state = self.state();
            // The cache holds only stored keys; whatever the store's outcome, start it empty
            // so the next read asks the store.
            state.cache = self.fresh_cache(&state);
            state.hook_failure_noted = false;
            state.table = KeyTable::default();
        }
        for stripe in self.shared.stripes.iter() {
            stripe.generation.fetch_add(1, Ordering::Release);
        }
        // As in Redis, a WATCH of a key the flush deleted aborts its EXEC (one of a key that
        // did not exist does not).
        if let Ok(keys) = &result {
            self.shared.watches.touch_each(keys);
        }
        drop(guards);
        result
            .map(|keys| keys.len() as u64)
            .inspect_err(|_| crate::metrics::Stats::bump(&self.shared.metrics.stats.store_errors))
    }

    /// Runs the cache under `algorithm` from now on. Another algorithm than the current one
    /// starts an empty cache (its order is the old algorithm's and cannot be carried over);
    /// the keys refill from the store as they are read. Returns whether it changed.
    pub fn set_algorithm(&self, algorithm: cache::Algorithm) -> bool {
        let mut state = self.state();
        if state.cache.algorithm() == algorithm {
            return false;
        }
        let State {
            table,
            cache,
            hooks,
            ..
        } = &mut *state;
        // Naming an algorithm ends the hooks' rule.
        *hooks = None;
        *cache = crate::server_cache::new(algorithm, cache.capacity(), self.classes());
        *table = KeyTable::default();
        drop(state);
        for stripe in self.shared.stripes.iter() {
            stripe.generation.fetch_add(1, Ordering::Release);
        }
        true
    }

    fn classes(&self) -> Option<cache::classes::ClassSet> {
        self.shared.classes.clone()
    }
}
