//! The store behind the cache, which holds every key: embedded RocksDB or an upstream tier.
//! The cache in front may drop anything at any time; the store never does.
//!
//! The server sees [`Store`] and the types named here; no RocksDB type crosses this crate's
//! boundary (the server does not depend on `rocksdb`), so the engine can change behind it.

mod backend;
mod log;
pub mod record;
pub mod rocks;
pub mod upstream;
pub mod wal_scan;

pub use backend::{Backend, Fsync, WalRecovery};
use bytes::Bytes;
pub use record::Record;
use std::fmt;

/// A failed store operation; the client gets an `-ERR` reply naming the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError(pub String);

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

/// SET's NX / XX.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    Always,
    IfAbsent,
    IfPresent,
}

pub enum Store {
    Rocks(rocks::RocksStore),
    Upstream(upstream::UpstreamStore),
}

impl Store {
    /// Bytes the store holds in memory now: RocksDB's memtables and block cache (none for an
    /// upstream).
    pub fn memory_bytes(&self) -> u64 {
        match self {
            Store::Rocks(rocks) => rocks.memory_bytes(),
            Store::Upstream(_) => 0,
        }
    }

    /// Opens RocksDB with `options` or connects to the upstream with `upstream`.
    pub async fn open(
        backend: &Backend,
        options: rocks::OpenOptions,
        upstream: upstream::UpstreamOptions,
    ) -> Result<Store, StoreError> {
        match backend {
            Backend::RocksDb { data_dir, fsync } => Ok(Store::Rocks(rocks::RocksStore::open(
                data_dir, *fsync, options,
            )?)),
            Backend::Upstream { url } => Ok(Store::Upstream(
                upstream::UpstreamStore::connect(url, upstream).await?,
            )),
        }
    }

    /// The record under `key`; it may have expired (the caller then purges it).
    pub async fn get(&self, key: &[u8], now_ms: u64) -> Result<Option<Record>, StoreError> {
        match self {
            Store::Rocks(store) => store.get(key),
            Store::Upstream(store) => store.get(key, now_ms).await,
        }
    }

    /// Deletes `key` if its record has expired (an upstream expires its own keys).
    pub fn purge_expired(&self, key: &[u8], now_ms: u64) -> Result<bool, StoreError> {
        match self {
            Store::Rocks(store) => store.purge_expired(key, now_ms),
            Store::Upstream(_) => Ok(false),
        }
    }

    pub async fn exists(&self, key: &[u8], now_ms: u64) -> Result<bool, StoreError> {
        match self {
            Store::Rocks(store) => store.exists(key, now_ms),
            Store::Upstream(store) => store.exists(key).await,
        }
    }

    /// Writes if `condition` holds; returns whether it wrote. `known_live`: the caller knows
    /// the key exists. Acknowledge only after [`Store::commit`].
    pub async fn set(
        &self,
        key: &[u8],
        record: &Record,
        condition: Condition,
        now_ms: u64,
        known_live: bool,
    ) -> Result<bool, StoreError> {
        match self {
            Store::Rocks(store) => {
                store
                    .set_grouped(key, record, condition, now_ms, known_live)
                    .await
            }
            Store::Upstream(store) => store.set(key, record, condition, now_ms).await,
        }
    }

    pub async fn set_many(&self, pairs: &[(Bytes, Record)], now_ms: u64) -> Result<(), StoreError> {
        self.set_many_known(pairs, &[], now_ms).await
    }

    /// [`Store::set_many`] where `known_live[i]` says the caller knows pair i's key exists.
    pub async fn set_many_known(
        &self,
        pairs: &[(Bytes, Record)],
        known_live: &[bool],
        now_ms: u64,
    ) -> Result<(), StoreError> {
        match self {
            Store::Rocks(store) => store.set_many(pairs, known_live),
            Store::Upstream(store) => store.set_many(pairs, now_ms).await,
        }
    }

    pub async fn delete(&self, keys: &[Bytes], now_ms: u64) -> Result<u64, StoreError> {
        match self {
            Store::Rocks(store) => store.delete(keys, now_ms),
            Store::Upstream(store) => store.delete(keys).await,
        }
    }

    /// Makes every earlier write as durable as `--fsync` promises: in the OS at least (it
    /// survives the process being killed), on disk with `always`. A no-op for an upstream,
    /// which has acknowledged each write itself.
    pub async fn commit(&self) -> Result<(), StoreError> {
        match self {
            Store::Rocks(store) => {
                store.flush_wal()?;
                store.durable().await
            }
            Store::Upstream(_) => Ok(()),
        }
    }

    /// Whether a write accepted by the store is not yet as durable as `--fsync` promises
    /// (it may still be lost, or have failed): replies that could reveal it wait for
    /// [`Store::commit`]. An upstream acknowledges each write itself.
    pub fn has_undurable_writes(&self) -> bool {
        match self {
            Store::Rocks(store) => store.has_undurable_writes(),
            Store::Upstream(_) => false,
        }
    }

    /// What recovering a damaged write-ahead log lost at start, for INFO.
    pub fn wal_report(&self) -> Option<&str> {
        match self {
            Store::Rocks(store) => store.wal_report(),
            Store::Upstream(_) => None,
        }
    }

    /// Whether the store accepts writes, for INFO.
    pub fn health(&self) -> rocks::Health {
        match self {
            Store::Rocks(store) => store.health(),
            Store::Upstream(_) => rocks::Health::Ok,
        }
    }

    pub async fn key_count(&self) -> Result<u64, StoreError> {
        match self {
            Store::Rocks(store) => Ok(store.key_count()),
            Store::Upstream(store) => store.key_count().await,
        }
    }

    /// Forces everything written so far to disk (shutdown).
    pub fn sync_now(&self) -> Result<(), StoreError> {
        match self {
            Store::Rocks(store) => store.sync_now(),
            Store::Upstream(_) => Ok(()),
        }
    }

    /// One line for INFO describing where the data lives.
    pub fn describe(&self) -> String {
        match self {
            Store::Rocks(store) => format!("rocksdb fsync={}", store.fsync().as_str()),
            Store::Upstream(store) => format!("upstream {}", store.url()),
        }
    }
}
