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

/// Why the whole-key-space commands are refused in front of an upstream.
const UPSTREAM_WALK: &str = "SCAN, KEYS and FLUSHDB/FLUSHALL walk the embedded store; with      --upstream send them to the upstream itself";

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

impl From<rocks::RocksStore> for Store {
    /// An embedded store opened by the caller (tests and tools that open RocksDB themselves).
    fn from(store: rocks::RocksStore) -> Store {
        Store {
            engine: Engine::Rocks(store),
        }
    }
}

impl Store {
    /// Bytes the store holds in memory now: RocksDB's memtables and block cache (none for an
    /// upstream).
    pub fn memory_bytes(&self) -> u64 {
        match &self.engine {
            Engine::Rocks(rocks) => rocks.memory_bytes(),
            Engine::Upstream(_) => 0,
        }
    }

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

    async fn write_batch(
        &self,
        changes: &[(Bytes, Option<Record>)],
        now_ms: u64,
    ) -> Result<(), StoreError> {
        match &self.engine {
            Engine::Rocks(store) => store.write_batch(changes),
            Engine::Upstream(store) => store.write_batch(changes, now_ms).await,
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

    fn key_page(&self, after: Option<&[u8]>, max: usize) -> Result<rocks::KeyPage, StoreError> {
        match &self.engine {
            Engine::Rocks(store) => store.key_page(after, max),
            Engine::Upstream(_) => Err(StoreError(UPSTREAM_WALK.into())),
        }
    }

    fn delete_all(&self) -> Result<Vec<Bytes>, StoreError> {
        match &self.engine {
            Engine::Rocks(store) => store.delete_range(slots::SlotRange::all()),
            Engine::Upstream(_) => Err(StoreError(UPSTREAM_WALK.into())),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn upstream_options() -> upstream::UpstreamOptions {
        upstream::UpstreamOptions {
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(5),
            max_bulk_len: 1 << 20,
        }
    }

    /// An upstream that answers the start-up PING and nothing else.
    async fn pong_server() -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 256];
                    while socket.read(&mut buf).await.is_ok_and(|n| n > 0) {
                        if socket.write_all(b"+PONG\r\n").await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    /// What only one back end has is asked for, never matched: the embedded store offers
    /// slot data and a policy space, an upstream tier neither, and only it has health to show.
    #[tokio::test]
    async fn each_back_end_offers_exactly_its_capabilities() {
        let dir = std::env::temp_dir().join(format!("mantle-store-caps-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let rocks = Store::open(
            &Backend::RocksDb {
                data_dir: dir.clone(),
                fsync: Fsync::No,
            },
            rocks::OpenOptions::default(),
            upstream_options(),
        )
        .await
        .unwrap();
        assert_eq!(rocks.kind(), "rocksdb");
        assert!(rocks.slot_data().is_some());
        assert!(rocks.policy_space().is_some());
        assert!(rocks.upstream().is_none());
        assert_eq!(rocks.key_count_now(), Some(0));
        let record = Record {
            value: Bytes::from_static(b"v"),
            expires_at_ms: 0,
        };
        assert!(rocks
            .set(b"k", &record, Condition::Always, 0, false)
            .await
            .unwrap());
        rocks.commit().await.unwrap();
        let slots = rocks.slot_data().unwrap();
        assert_eq!(slots.stored(b"k").unwrap(), Some(record));
        assert_eq!(slots.count_in_slot(::slots::key_slot(b"k")).unwrap(), 1);
        drop(rocks);
        let _ = std::fs::remove_dir_all(&dir);

        let url = format!("redis://{}", pong_server().await);
        let tier = Store::open(
            &Backend::Upstream { url: url.clone() },
            rocks::OpenOptions::default(),
            upstream_options(),
        )
        .await
        .unwrap();
        assert_eq!(tier.kind(), "upstream");
        assert!(tier.slot_data().is_none(), "its keys live upstream");
        assert!(tier.policy_space().is_none());
        assert_eq!(tier.upstream().map(|u| u.url()), Some(url.as_str()));
        assert_eq!(tier.key_count_now(), None, "never seen yet");
        assert!(!tier.has_undurable_writes());
        assert!(!tier.purge_expired(b"k", u64::MAX).unwrap());
        assert!(tier.wal_report().is_none());
    }
}
