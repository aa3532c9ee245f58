//! The store behind the cache, which holds every key: embedded RocksDB or an upstream tier.
//! The cache in front may drop anything at any time; the store never does.
//!
//! The server sees [`Storage`] (implemented by [`Store`]) and the types named here; no RocksDB
//! type crosses this crate's boundary (the server does not depend on `rocksdb`), so the
//! engine can change behind it.

#![deny(clippy::print_stderr)]

mod backend;
pub mod log;
pub mod record;
pub mod rocks;
mod slot_data;
mod storage;
pub mod upstream;
pub mod wal_scan;

pub use backend::{Backend, Fsync, WalRecovery};
use bytes::Bytes;
pub use record::Record;
pub use slot_data::{RangeBatch, SlotData};
use std::fmt;
pub use storage::Storage;

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

/// The store the server runs on: embedded RocksDB or an upstream tier, chosen at start by
/// [`Backend`]. It implements [`Storage`] by dispatching on the back end, so the request path
/// calls it statically and nothing outside this crate can tell the back ends apart except
/// through [`Storage`]'s capability accessors.
pub struct Store {
    engine: Engine,
}

enum Engine {
    Rocks(rocks::RocksStore),
    Upstream(upstream::UpstreamStore),
}

impl Store {
    /// Opens RocksDB with `options` or connects to the upstream with `upstream`.
    pub async fn open(
        backend: &Backend,
        options: rocks::OpenOptions,
        upstream: upstream::UpstreamOptions,
    ) -> Result<Store, StoreError> {
        let engine = match backend {
            Backend::RocksDb { data_dir, fsync } => {
                Engine::Rocks(rocks::RocksStore::open(data_dir, *fsync, options)?)
            }
            Backend::Upstream { url } => {
                Engine::Upstream(upstream::UpstreamStore::connect(url, upstream).await?)
            }
        };
        Ok(Store { engine })
    }
}

impl Storage for Store {
    async fn get(&self, key: &[u8], now_ms: u64) -> Result<Option<Record>, StoreError> {
        match &self.engine {
            Engine::Rocks(store) => store.get(key),
            Engine::Upstream(store) => store.get(key, now_ms).await,
        }
    }

    fn purge_expired(&self, key: &[u8], now_ms: u64) -> Result<bool, StoreError> {
        match &self.engine {
            Engine::Rocks(store) => store.purge_expired(key, now_ms),
            // An upstream expires its own keys.
            Engine::Upstream(_) => Ok(false),
        }
    }

    async fn exists(&self, key: &[u8], now_ms: u64) -> Result<bool, StoreError> {
        match &self.engine {
            Engine::Rocks(store) => store.exists(key, now_ms),
            Engine::Upstream(store) => store.exists(key).await,
        }
    }

    async fn set(
        &self,
        key: &[u8],
        record: &Record,
        condition: Condition,
        now_ms: u64,
        known_live: bool,
    ) -> Result<bool, StoreError> {
        match &self.engine {
            Engine::Rocks(store) => {
                store
                    .set_grouped(key, record, condition, now_ms, known_live)
                    .await
            }
            Engine::Upstream(store) => store.set(key, record, condition, now_ms).await,
        }
    }

    async fn set_many_known(
        &self,
        pairs: &[(Bytes, Record)],
        known_live: &[bool],
        now_ms: u64,
    ) -> Result<(), StoreError> {
        match &self.engine {
            Engine::Rocks(store) => store.set_many(pairs, known_live),
            Engine::Upstream(store) => store.set_many(pairs, now_ms).await,
        }
    }

    async fn delete(&self, keys: &[Bytes], now_ms: u64) -> Result<u64, StoreError> {
        match &self.engine {
            Engine::Rocks(store) => store.delete(keys, now_ms),
            Engine::Upstream(store) => store.delete(keys).await,
        }
    }

    async fn commit(&self) -> Result<(), StoreError> {
        match &self.engine {
            Engine::Rocks(store) => {
                store.flush_wal()?;
                store.durable().await
            }
            // An upstream has acknowledged each write itself.
            Engine::Upstream(_) => Ok(()),
        }
    }

    fn has_undurable_writes(&self) -> bool {
        match &self.engine {
            Engine::Rocks(store) => store.has_undurable_writes(),
            Engine::Upstream(_) => false,
        }
    }

    fn sync_now(&self) -> Result<(), StoreError> {
        match &self.engine {
            Engine::Rocks(store) => store.sync_now(),
            Engine::Upstream(_) => Ok(()),
        }
    }

    async fn key_count(&self) -> Result<u64, StoreError> {
        match &self.engine {
            Engine::Rocks(store) => Ok(store.key_count()),
            Engine::Upstream(store) => store.key_count().await,
        }
    }

    fn key_count_now(&self) -> Option<u64> {
        match &self.engine {
            Engine::Rocks(store) => Some(store.key_count()),
            Engine::Upstream(store) => store.key_count_without_waiting(),
        }
    }

    fn wal_report(&self) -> Option<&str> {
        match &self.engine {
            Engine::Rocks(store) => store.wal_report(),
            Engine::Upstream(_) => None,
        }
    }

    fn health(&self) -> rocks::Health {
        match &self.engine {
            Engine::Rocks(store) => store.health(),
            Engine::Upstream(_) => rocks::Health::Ok,
        }
    }

    fn kind(&self) -> &'static str {
        match &self.engine {
            Engine::Rocks(_) => "rocksdb",
            Engine::Upstream(_) => "upstream",
        }
    }

    fn describe(&self) -> String {
        match &self.engine {
            Engine::Rocks(store) => format!("rocksdb fsync={}", store.fsync().as_str()),
            Engine::Upstream(store) => format!("upstream {}", store.url()),
        }
    }

    fn slot_data(&self) -> Option<&dyn SlotData> {
        match &self.engine {
            Engine::Rocks(store) => Some(store),
            Engine::Upstream(_) => None,
        }
    }

    fn policy_space(&self) -> Option<rocks::PolicySpace> {
        match &self.engine {
            Engine::Rocks(store) => Some(store.policy_space()),
            Engine::Upstream(_) => None,
        }
    }

    fn upstream(&self) -> Option<&upstream::UpstreamStore> {
        match &self.engine {
            Engine::Rocks(_) => None,
            Engine::Upstream(store) => Some(store),
        }
    }
}
