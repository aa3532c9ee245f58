//! WATCH: which connections watch which keys, so that a write to a watched key marks their
//! transactions (EXEC then answers a null array). Writers pay one atomic load while nobody
//! watches anything.

use super::{Db, KeyRead};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use store::StoreError;

/// The watchers of every watched key.
#[derive(Default)]
pub(super) struct Watches {
    /// Registrations in `keys`: a write skips the map while this is 0.
    active: AtomicUsize,
    keys: Mutex<HashMap<Bytes, Vec<Arc<AtomicBool>>>>,
}

impl Watches {
    fn keys(&self) -> MutexGuard<'_, HashMap<Bytes, Vec<Arc<AtomicBool>>>> {
        self.keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether any key is watched now.
    pub(super) fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire) > 0
    }

    /// Marks the watchers of `key` (called by every write, under the key's stripe lock).
    #[inline]
    pub(super) fn touch(&self, key: &[u8]) {
        if self.active.load(Ordering::Acquire) == 0 {
            return;
        }
        self.touch_slow(key);
    }

    #[cold]
    fn touch_slow(&self, key: &[u8]) {
        if let Some(flags) = self.keys().get(key) {
            for flag in flags {
                flag.store(true, Ordering::Release);
            }
        }
    }

    /// Marks the watchers of every key in `deleted` (a mass delete: FLUSHALL, a migrated
    /// slot range wiped), with their stripes locked by the caller. One map lookup per
    /// deleted key, and nothing while nobody watches.
    pub(super) fn touch_each(&self, deleted: &[Bytes]) {
        if !self.is_active() {
            return;
        }
        let keys = self.keys();
        for key in deleted {
            if let Some(flags) = keys.get(key) {
                for flag in flags {
                    flag.store(true, Ordering::Release);
                }
            }
        }
    }

    fn add(&self, key: &Bytes, flag: &Arc<AtomicBool>) {
        let mut keys = self.keys();
        keys.entry(key.clone()).or_default().push(Arc::clone(flag));
        self.active.fetch_add(1, Ordering::AcqRel);
    }

    fn remove(&self, key: &Bytes, flag: &Arc<AtomicBool>) {
        let mut keys = self.keys();
        if let Some(flags) = keys.get_mut(key) {
            if let Some(at) = flags.iter().position(|f| Arc::ptr_eq(f, flag)) {
                flags.swap_remove(at);
                self.active.fetch_sub(1, Ordering::AcqRel);
            }
            if flags.is_empty() {
                keys.remove(key);
            }
        }
    }
}

/// One connection's watched keys (WATCH until EXEC, DISCARD, UNWATCH or the connection's
/// end, which deregister them by dropping this).
pub struct Watched {
    db: Db,
    changed: Arc<AtomicBool>,
    /// Each key and when it expires as seen at WATCH (`Some(0)`: never; `None`: absent).
    keys: Vec<(Bytes, Option<u64>)>,
}

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl Watched {
    /// The watched keys (EXEC locks them with its own, so none can change under its check).
    pub fn keys(&self) -> impl Iterator<Item = &Bytes> {
        self.keys.iter().map(|(key, _)| key)
    }

    /// Whether a watched key was written since it was watched, or (as in Redis 7) has
    /// expired since: the transaction must not run. Check with the keys' stripes locked.
    pub fn changed(&self, now_ms: u64) -> bool {
        self.changed.load(Ordering::Acquire)
            || self
                .keys
                .iter()
                .any(|(_, expiry)| matches!(expiry, Some(at) if *at != 0 && *at <= now_ms))
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        for (key, _) in &self.keys {
            self.db.shared.watches.remove(key, &self.changed);
        }
    }
}

impl Db {
    /// Adds `key` to `watched` (a new set when `None`): from now on any write to it marks the
    /// set changed. Registered under the key's stripe lock, so no write slips between the
    /// registration and the state recorded with it.
    pub async fn watch(
        &self,
        watched: &mut Option<Watched>,
        key: &Bytes,
    ) -> Result<(), StoreError> {
        let watched = watched.get_or_insert_with(|| Watched {
            db: self.clone(),
            changed: Arc::new(AtomicBool::new(false)),
            keys: Vec::new(),
        });
        if watched.keys.iter().any(|(k, _)| k == key) {
            return Ok(());
        }
        let hash = self.hash(key);
        let _guard = self.stripe(hash).lock.lock().await;
        let now = super::now_ms();
        let expiry = match self.read_locked(hash, key, now).await? {
            KeyRead::Live(record) => Some(record.expires_at_ms),
            KeyRead::Absent => None,
        };
        self.shared.watches.add(key, &watched.changed);
        watched.keys.push((key.clone(), expiry));
        Ok(())
    }
}
