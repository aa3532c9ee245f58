//! Where the policy registry, the policy log and the warm-up record are kept: the RocksDB
//! column family of the server's own store (durable, as Malacology keeps policies in the
//! storage system itself); in front of an upstream tier, the same column family of a small
//! RocksDB in `--state-dir` that holds no keys; without one, memory (lost at exit; the server
//! says so).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use store::rocks::{OpenOptions, Pair, PolicySpace, RocksStore};
use store::{Fsync, Storage, Store, StoreError};

/// A sorted key-value space with atomic multi-key writes.
#[derive(Clone)]
pub enum Space {
    Rocks(PolicySpace),
    Memory(Arc<Mutex<BTreeMap<Vec<u8>, Vec<u8>>>>),
}

/// One change of a batch: a put (`Some`) or a delete (`None`).
pub type Change = (Vec<u8>, Option<Vec<u8>>);

impl Space {
    pub fn memory() -> Space {
        Space::Memory(Arc::default())
    }

    /// The server's space: in its own store, else in `state_dir` (opened here, created if
    /// missing), else memory.
    pub fn for_server(
        store: &Store,
        state_dir: Option<&Path>,
        open: OpenOptions,
    ) -> Result<Space, StoreError> {
        if let Some(space) = store.policy_space() {
            return Ok(Space::Rocks(space));
        }
        Ok(match state_dir {
            Some(dir) => {
                // The store itself is dropped: the space's handle keeps the database open, and
                // its writes flush the log themselves (no `--fsync` syncer is needed).
                let state = RocksStore::open(dir, Fsync::No, open)
                    .map_err(|e| StoreError(format!("--state-dir: {e}")))?;
                Space::Rocks(state.policy_space())
            }
            None => Space::memory(),
        })
    }

    pub fn is_durable(&self) -> bool {
        matches!(self, Space::Rocks(_))
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self {
            Space::Rocks(space) => space.get(key),
            Space::Memory(map) => Ok(lock(map).get(key).cloned()),
        }
    }

    /// Applies `changes` atomically; `sync` also forces them to disk (registry changes), else
    /// they only reach the operating system (which survives the process being killed).
    pub fn write(&self, changes: &[Change], sync: bool) -> Result<(), StoreError> {
        match self {
            Space::Rocks(space) => space.write(changes, sync),
            Space::Memory(map) => {
                let mut map = lock(map);
                for (key, value) in changes {
                    match value {
                        Some(value) => map.insert(key.clone(), value.clone()),
                        None => map.remove(key),
                    };
                }
                Ok(())
            }
        }
    }

    /// Pairs under `prefix`, in key order.
    pub fn scan(&self, prefix: &[u8]) -> Result<Vec<Pair>, StoreError> {
        match self {
            Space::Rocks(space) => space.scan(prefix),
            Space::Memory(map) => Ok(lock(map)
                .range(prefix.to_vec()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
