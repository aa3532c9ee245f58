//! The atomic keyspace: a [`Transaction`] over a declared set of keys, the one way commands
//! read-modify-write (INCR, APPEND, GETDEL...), MULTI/EXEC runs its queue, and (through the
//! same API) functions run their scripts.
//!
//! How it is atomic and durable:
//! - Opening a transaction locks its keys' stripes (the write-ordering locks of `Db`) in
//!   stripe order, so two transactions never deadlock and no other writer touches the keys
//!   until it ends. Plain GET takes no lock: it sees the cache, which changes only at commit.
//! - Reads see the transaction's own writes (an overlay of the keys' pending states); the
//!   first read of a key comes from the cache, or the store on a miss (not filling the cache).
//! - [`Transaction::commit`] sends every write and delete to the store as ONE batch (one WAL
//!   record: a crash keeps all or none), then updates the cache under one hold of its lock
//!   and bumps the stripes' generations, so no reader sees half a transaction. As for any
//!   write, the reply acknowledging it leaves after `Db::commit` made it durable.
//! - Time stands still inside a transaction ([`Transaction::now_ms`]), as in Redis: a key
//!   does not expire half-way through.
//!
//! It holds no connection state; a caller that drops a transaction without committing
//! discards its writes.

use super::{now_ms, Db, State};
use crate::keytable::Entry;
use crate::metrics::Stats;
use bytes::Bytes;
use cache::classes::RuleOp;
use std::collections::HashMap;
use std::fmt;
use store::{Record, Storage, StoreError};

/// What a locked read of one key found.
pub(super) enum KeyRead {
    Live(Record),
    Absent,
}

/// Why a transaction's operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnError {
    /// The key is not among those the transaction was opened over (a function touching a key
    /// it did not declare, or a command whose declared key positions are wrong).
    Undeclared(Bytes),
    Store(StoreError),
}

impl fmt::Display for TxnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxnError::Undeclared(key) => write!(
                f,
                "key '{}' was not declared by the command or script that touched it",
                String::from_utf8_lossy(&key[..key.len().min(128)])
            ),
            TxnError::Store(e) => write!(f, "store error: {e}"),
        }
    }
}

impl From<StoreError> for TxnError {
    fn from(e: StoreError) -> TxnError {
        TxnError::Store(e)
    }
}

/// One declared key and what the transaction knows of it.
struct KeyState {
    key: Bytes,
    hash: u64,
    /// `None`: not read yet; `Some(None)`: absent (or deleted here); `Some(Some(r))`: live.
    seen: Option<Option<Record>>,
    /// Written or deleted by the transaction: part of the commit's batch.
    dirty: bool,
}

/// A transaction's state at one point (see [`Transaction::savepoint`]).
pub struct Savepoint(Vec<(Option<Option<Record>>, bool)>);

/// Reads and writes over a fixed set of keys, applied all at once by [`Transaction::commit`].
pub struct Transaction<'db> {
    db: &'db Db,
    _locks: Vec<tokio::sync::MutexGuard<'db, ()>>,
    keys: Vec<KeyState>,
    index: HashMap<Bytes, usize>,
    now: u64,
}

impl Db {
    /// Opens a transaction over `keys` (duplicates allowed), waiting for their stripes.
    pub async fn transaction<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k Bytes>,
    ) -> Transaction<'_> {
        let mut index = HashMap::new();
        let mut states = Vec::new();
        for key in keys {
            if index.contains_key(key) {
                continue;
            }
            index.insert(key.clone(), states.len());
            states.push(KeyState {
                key: key.clone(),
                hash: self.hash(key),
                seen: None,
                dirty: false,
            });
        }
        let hashes: Vec<u64> = states.iter().map(|k| k.hash).collect();
        let locks = self.lock_stripes(&hashes).await;
        Transaction {
            db: self,
            _locks: locks,
            keys: states,
            index,
            now: now_ms(),
        }
    }

    /// The live record of `key`, its stripe locked by the caller: the cache is then current
    /// for it, and a miss asks the store (without filling the cache).
    pub(super) async fn read_locked(
        &self,
        hash: u64,
        key: &[u8],
        now: u64,
    ) -> Result<KeyRead, StoreError> {
        let cached = self.state().entry(hash, key).map(|entry| Record {
            value: Bytes::from(entry.value()),
            expires_at_ms: entry.expires_at_ms(),
        });
        let record = match cached {
            Some(record) => Some(record),
            None => self.store_get(key, now).await?,
        };
        Ok(match record {
            Some(record) if record.is_live(now) => KeyRead::Live(record),
            _ => KeyRead::Absent,
        })
    }
}

impl Transaction<'_> {
    /// The transaction's clock (ms since the epoch), fixed when it opened.
    pub fn now_ms(&self) -> u64 {
        self.now
    }

    /// The declared keys, in the order first declared.
    pub fn keys(&self) -> impl Iterator<Item = &Bytes> {
        self.keys.iter().map(|k| &k.key)
    }

    fn position(&self, key: &[u8]) -> Result<usize, TxnError> {
        self.index
            .get(key)
            .copied()
            .ok_or_else(|| TxnError::Undeclared(Bytes::copy_from_slice(key)))
    }

    async fn load(&mut self, key: &[u8]) -> Result<usize, TxnError> {
        let at = self.position(key)?;
        if self.keys[at].seen.is_none() {
            let state = &self.keys[at];
            let db = self.db;
            db.shared.monitor.record(state.hash, key);
            db.shared.series.record(state.hash);
            let read = db.read_locked(state.hash, key, self.now).await?;
            self.keys[at].seen = Some(match read {
                KeyRead::Live(record) => Some(record),
                KeyRead::Absent => None,
            });
        }
        Ok(at)
    }

    /// The live record of `key` (value and expiry), with this transaction's writes applied.
    pub async fn record(&mut self, key: &[u8]) -> Result<Option<Record>, TxnError> {
        let at = self.load(key).await?;
        Ok(self.keys[at].seen.clone().flatten())
    }

    pub async fn get(&mut self, key: &[u8]) -> Result<Option<Bytes>, TxnError> {
        Ok(self.record(key).await?.map(|record| record.value))
    }

    pub async fn exists(&mut self, key: &[u8]) -> Result<bool, TxnError> {
        let at = self.load(key).await?;
        Ok(matches!(self.keys[at].seen, Some(Some(_))))
    }

    /// Milliseconds `key` has left: -2 if it does not exist, -1 if it never expires.
    pub async fn pttl(&mut self, key: &[u8]) -> Result<i64, TxnError> {
        Ok(match self.record(key).await? {
            None => -2,
            Some(record) if record.expires_at_ms == 0 => -1,
            Some(record) => record.expires_at_ms.saturating_sub(self.now) as i64,
        })
    }

    /// Sets `key` to `value`, expiring at `expires_at_ms` (0: never; a time already past
    /// deletes the key, as Redis does).
    pub fn set(&mut self, key: &[u8], value: Bytes, expires_at_ms: u64) -> Result<(), TxnError> {
        let at = self.position(key)?;
        let now = self.now;
        let state = &mut self.keys[at];
        state.dirty = true;
        state.seen = Some(if expires_at_ms != 0 && expires_at_ms <= now {
            None
        } else {
            Some(Record {
                value,
                expires_at_ms,
            })
        });
        Ok(())
    }

    /// Deletes `key`; whether it existed.
    pub async fn delete(&mut self, key: &[u8]) -> Result<bool, TxnError> {
        let at = self.load(key).await?;
        let state = &mut self.keys[at];
        let existed = matches!(state.seen, Some(Some(_)));
        if existed {
            state.seen = Some(None);
            state.dirty = true;
        }
        Ok(existed)
    }

    /// Gives an existing `key` a new expiry (0: none; a time already past deletes it).
    /// Whether the key existed.
    pub async fn set_expiry(&mut self, key: &[u8], expires_at_ms: u64) -> Result<bool, TxnError> {
        match self.record(key).await? {
            Some(record) => {
                self.set(key, record.value, expires_at_ms)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// What the transaction knows and has written so far, to go back to with
    /// [`Transaction::roll_back`] (a function stopped half-way inside EXEC or FCALL).
    pub fn savepoint(&self) -> Savepoint {
        Savepoint(
            self.keys
                .iter()
                .map(|k| (k.seen.clone(), k.dirty))
                .collect(),
        )
    }

    /// Forgets every write made since `savepoint` was taken.
    pub fn roll_back(&mut self, savepoint: Savepoint) {
        for (key, (seen, dirty)) in self.keys.iter_mut().zip(savepoint.0) {
            key.seen = seen;
            key.dirty = dirty;
        }
    }

    /// Applies every write and delete as one store batch, then to the cache. The caller
    /// acknowledges only after `Db::commit` (the handler does, for commands declared writes).
    pub async fn commit(self) -> Result<(), StoreError> {
        let changes: Vec<(Bytes, Option<Record>)> = self
            .keys
            .iter()
            .filter(|k| k.dirty)
            .map(|k| (k.key.clone(), k.seen.clone().flatten()))
            .collect();
        if changes.is_empty() {
            return Ok(());
        }
        let db = self.db;
        let stats = &db.shared.metrics.stats;
        Stats::bump(&stats.store_writes);
        let result = db.shared.store.write_batch(&changes, self.now).await;
        let dirty = || self.keys.iter().filter(|k| k.dirty);
        {
            let mut state: std::sync::MutexGuard<'_, State> = db.state();
            for key in dirty() {
                match (&result, &key.seen) {
                    (Ok(()), Some(Some(record))) => {
                        let entry = Entry::new(&key.key, &record.value, record.expires_at_ms, 0);
                        db.install(&mut state, key.hash, entry, RuleOp::Put);
                    }
                    // Deleted, or the store's state is unknown: the store answers next.
                    _ => db.forget_key(&mut state, key.hash, &key.key),
                }
                db.stripe(key.hash)
                    .generation
                    .fetch_add(1, std::sync::atomic::Ordering::Release);
                if result.is_ok() {
                    db.shared.watches.touch(&key.key);
                }
            }
        }
        for key in dirty() {
            db.shared.monitor.record(key.hash, &key.key);
            db.shared.series.record(key.hash);
            match (&result, &key.seen) {
                (Ok(()), Some(Some(record))) => db.shadow(
                    key.hash,
                    &key.key,
                    record.value.len(),
                    crate::shadow::Served::Put,
                ),
                _ => db.shadow(key.hash, &key.key, 0, crate::shadow::Served::Delete),
            }
        }
        result.inspect_err(|_| Stats::bump(&stats.store_errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::{rocks, Backend, Condition, Fsync, Store};

    async fn db(dir: &std::path::Path) -> Db {
        let backend = Backend::RocksDb {
            data_dir: dir.to_path_buf(),
            fsync: Fsync::EverySec,
        };
        let store = Store::open(
            &backend,
            rocks::OpenOptions::default(),
            store::upstream::UpstreamOptions {
                connect_timeout: std::time::Duration::from_secs(1),
                timeout: std::time::Duration::from_secs(1),
                max_bulk_len: 512 << 20,
            },
        )
        .await
        .unwrap();
        let unlimited = cache::Capacity {
            bytes: None,
            objects: None,
        };
        Db::new(store, cache::Algorithm::Lru, unlimited)
    }

    fn key(text: &'static str) -> Bytes {
        Bytes::from_static(text.as_bytes())
    }

    #[tokio::test]
    async fn reads_see_the_transactions_own_writes_and_commit_applies_them_all() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(dir.path()).await;
        db.set(b"b", &key("old"), 0, Condition::Always, None)
            .await
            .unwrap();
        let mut txn = db.transaction(&[key("a"), key("b"), key("a")]).await;
        txn.set(b"a", key("1"), 0).unwrap();
        assert_eq!(txn.get(b"a").await.unwrap(), Some(key("1")));
        assert!(txn.delete(b"b").await.unwrap());
        assert!(!txn.exists(b"b").await.unwrap());
        assert_eq!(
            txn.get(b"c").await,
            Err(TxnError::Undeclared(key("c"))),
            "a key not declared is refused"
        );
        // Nothing is visible before the commit.
        assert_eq!(db.get(b"a").await.unwrap(), None);
        assert_eq!(db.get(b"b").await.unwrap(), Some(key("old")));
        txn.commit().await.unwrap();
        assert_eq!(db.get(b"a").await.unwrap(), Some(key("1")));
        assert_eq!(db.get(b"b").await.unwrap(), None);
        assert_eq!(db.dbsize().await.unwrap(), 1);
    }

    #[tokio::test]
    async fn an_expiry_already_past_deletes_and_a_dropped_transaction_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = db(dir.path()).await;
        db.set(b"k", &key("v"), 0, Condition::Always, None)
            .await
            .unwrap();
        let mut txn = db.transaction(&[key("k")]).await;
        let now = txn.now_ms();
        assert!(txn.set_expiry(b"k", now - 1).await.unwrap());
        assert_eq!(txn.pttl(b"k").await.unwrap(), -2);
        drop(txn);
        assert_eq!(db.get(b"k").await.unwrap(), Some(key("v")));
        let mut txn = db.transaction(&[key("k")]).await;
        let now = txn.now_ms();
        txn.set_expiry(b"k", now + 50_000).await.unwrap();
        txn.commit().await.unwrap();
        let left = db.pttl(b"k").await.unwrap();
        assert!(left > 49_000 && left <= 50_000, "{left}");
    }
}
