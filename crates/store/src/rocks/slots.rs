//! The store seen as slots (DESIGN §8): every key is stored behind its 2-byte slot, so a slot
//! range is one contiguous key range. This is what slot migration reads (a bounded iterator
//! over a consistent point in time), deletes (`delete_range`) and what `CLUSTER
//! COUNTKEYSINSLOT|GETKEYSINSLOT` count; and the [`Tracker`] that records which keys of a
//! range being migrated are written meanwhile, so they are copied again.

use super::{record, rocks_error, RocksStore, StoreError, SLOT_PREFIX};
use crate::slot_data::{RangeBatch, SlotData};
use crate::Record;
use ::slots::SlotRange;
use bytes::Bytes;
use rocksdb::{ReadOptions, WriteBatch, DB};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Keys written to the slot ranges being migrated, per range, since tracking began. Every store write calls
/// [`Tracker::note`] *after* it reached RocksDB, and tracking is switched on *before* the
/// migration's iterator is created, so a write is either in the iterator's view or noted
/// (or both). Costs a write one atomic load while nothing is tracked.
#[derive(Default)]
pub struct Tracker {
    active: AtomicBool,
    state: Mutex<Vec<Tracking>>,
}

struct Tracking {
    range: SlotRange,
    dirty: HashSet<Bytes>,
}

impl Tracker {
    #[inline]
    pub(super) fn note(&self, key: &[u8]) {
        if self.active.load(Ordering::SeqCst) {
            self.note_tracked(key);
        }
    }

    #[cold]
    fn note_tracked(&self, key: &[u8]) {
        let slot = ::slots::key_slot(key);
        let mut state = self.lock();
        if let Some(tracking) = state.iter_mut().find(|t| t.range.contains(slot)) {
            if !tracking.dirty.contains(key) {
                tracking.dirty.insert(Bytes::copy_from_slice(key));
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Tracking>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Reads options for iterating one slot at a time within its memtable bucket.
fn slot_read_options() -> ReadOptions {
    let mut read = ReadOptions::default();
    read.set_prefix_same_as_start(true);
    read.fill_cache(false);
    read
}

/// Calls `each` with every stored key (without its slot prefix) and raw value in `range`,
/// slot by slot, from one iterator (one point in time); stops early when `each` says false.
fn scan(
    db: &DB,
    range: SlotRange,
    mut each: impl FnMut(&[u8], &[u8]) -> bool,
) -> Result<(), StoreError> {
    let mut iter = db.raw_iterator_opt(slot_read_options());
    for slot in range.slots() {
        let prefix = slot.to_be_bytes();
        iter.seek(prefix);
        while iter.valid() {
            let (Some(key), Some(value)) = (iter.key(), iter.value()) else {
                break;
            };
            if key.len() < SLOT_PREFIX || key[..SLOT_PREFIX] != prefix {
                break;
            }
            if !each(&key[SLOT_PREFIX..], value) {
                return iter.status().map_err(rocks_error);
            }
            iter.next();
        }
        iter.status().map_err(rocks_error)?;
    }
    Ok(())
}

impl SlotData for RocksStore {
    fn stored(&self, key: &[u8]) -> Result<Option<Record>, StoreError> {
        self.get(key)
    }

    /// Keys stored in `slot` (expired ones not yet purged included, as DBSIZE counts).
    fn count_in_slot(&self, slot: u16) -> Result<u64, StoreError> {
        let mut n = 0;
        scan(
            &self.db,
            SlotRange {
                start: slot,
                end: slot,
            },
            |_, _| {
                n += 1;
                true
            },
        )?;
        Ok(n)
    }

    /// Up to `max` keys stored in `slot`, in key order.
    fn keys_in_slot(&self, slot: u16, max: usize) -> Result<Vec<Bytes>, StoreError> {
        let mut keys = Vec::new();
        if max == 0 {
            return Ok(keys);
        }
        scan(
            &self.db,
            SlotRange {
                start: slot,
                end: slot,
            },
            |key, _| {
                keys.push(Bytes::copy_from_slice(key));
                keys.len() < max
            },
        )?;
        Ok(keys)
    }

    /// Starts noting writes to `range` (ranges tracked at once never overlap: the slot map
    /// refuses overlapping migrations); starting again forgets what was noted.
    fn track(&self, range: SlotRange) {
        let mut state = self.tracker.lock();
        state.retain(|t| t.range != range);
        state.push(Tracking {
            range,
            dirty: HashSet::new(),
        });
        self.tracker.active.store(true, Ordering::SeqCst);
    }

    /// The keys of `range` noted since the last call.
    fn take_dirty(&self, range: SlotRange) -> Vec<Bytes> {
        match self.tracker.lock().iter_mut().find(|t| t.range == range) {
            Some(tracking) => tracking.dirty.drain().collect(),
            None => Vec::new(),
        }
    }

    fn untrack(&self, range: SlotRange) {
        let mut state = self.tracker.lock();
        state.retain(|t| t.range != range);
        self.tracker
            .active
            .store(!state.is_empty(), Ordering::SeqCst);
    }

    /// Streams every record of `range` as it is at the moment of the call, in batches of
    /// about `batch_bytes`, from a thread of its own (the iterator pins one point in time and
    /// stays on that thread). Returns once the point in time is fixed.
    fn stream_range(
        &self,
        range: SlotRange,
        batch_bytes: usize,
    ) -> tokio::sync::mpsc::Receiver<Result<RangeBatch, StoreError>> {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let db = self.db.clone();
        let spawned = std::thread::Builder::new()
            .name("mantle-migrate".into())
            .spawn(move || {
                let mut iter = db.raw_iterator_opt(slot_read_options());
                // Creating the iterator fixed its point in time.
                let _ = ready_tx.send(());
                let mut batch = Vec::new();
                let mut size = 0;
                for slot in range.slots() {
                    let prefix = slot.to_be_bytes();
                    iter.seek(prefix);
                    while iter.valid() {
                        let (Some(key), Some(value)) = (iter.key(), iter.value()) else {
                            break;
                        };
                        if key.len() < SLOT_PREFIX || key[..SLOT_PREFIX] != prefix {
                            break;
                        }
                        let user_key = &key[SLOT_PREFIX..];
                        let Some((expires_at_ms, value)) = record::decode(value) else {
                            let _ = tx.blocking_send(Err(StoreError(super::corrupt(user_key))));
                            return;
                        };
                        size += user_key.len() + value.len() + 16;
                        batch.push((
                            Bytes::copy_from_slice(user_key),
                            Record {
                                value: Bytes::copy_from_slice(value),
                                expires_at_ms,
                            },
                        ));
                        if size >= batch_bytes {
                            size = 0;
                            if tx.blocking_send(Ok(std::mem::take(&mut batch))).is_err() {
                                return;
                            }
                        }
                        iter.next();
                    }
                    if let Err(e) = iter.status() {
                        let _ = tx.blocking_send(Err(rocks_error(e)));
                        return;
                    }
                }
                if !batch.is_empty() {
                    let _ = tx.blocking_send(Ok(batch));
                }
            });
        if spawned.is_ok() {
            let _ = ready_rx.recv();
        }
        rx
    }

    /// Deletes every key of `range` with one range deletion; returns the keys it removed
    /// (the caller drops them from the cache).
    fn delete_range(&self, range: SlotRange) -> Result<Vec<Bytes>, StoreError> {
        let mut keys = Vec::new();
        scan(&self.db, range, |key, _| {
            keys.push(Bytes::copy_from_slice(key));
            true
        })?;
        // Point deletions, not one range tombstone: with in-place memtable updates a later
        // put of the same key (the range coming back) would keep its old sequence number
        // and stay hidden under the tombstone, losing the imported value.
        let mut batch = WriteBatch::default();
        for key in &keys {
            super::stored_key(key, |k| batch.delete(k));
        }
        self.guard.write(&self.db, |db| db.write(batch))?;
        self.flush_wal()?;
        let n = keys.len() as u64;
        let _ = self
            .keys
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| {
                Some(k.saturating_sub(n))
            });
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{OpenOptions, LAYOUT_KEY, POLICY_FAMILY};
    use super::*;
    use crate::Condition;
    use crate::Fsync;
    use crate::SlotData;

    fn record(value: &str) -> Record {
        Record {
            value: Bytes::from(value.to_string()),
            expires_at_ms: 0,
        }
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("mantle-slots-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// Keys whose slots are known: `{N}` tags pin them.
    fn keys_of(tag: &str, n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("{{{tag}}}:{i}").into_bytes())
            .collect()
    }

    #[test]
    fn slots_are_counted_listed_streamed_and_deleted_as_ranges() {
        let dir = temp_dir("ranges");
        let store = RocksStore::open(&dir, Fsync::No, OpenOptions::default()).unwrap();
        let a = keys_of("a", 30); // slot 15495
        let x = keys_of("x", 20); // slot 16287
        let d = keys_of("d", 10); // slot 11298
        for key in a.iter().chain(&x).chain(&d) {
            store
                .set(key, &record("v"), Condition::Always, 0, false)
                .unwrap();
        }
        assert_eq!(store.count_in_slot(15495).unwrap(), 30);
        assert_eq!(store.count_in_slot(16287).unwrap(), 20);
        assert_eq!(store.count_in_slot(0).unwrap(), 0);
        let listed = store.keys_in_slot(11298, 4).unwrap();
        assert_eq!(listed.len(), 4);
        assert!(listed.iter().all(|k| k.starts_with(b"{d}")));

        // A stream sees the range as it was when it started, whatever is written after.
        let range = SlotRange::new(15000, 16383).unwrap();
        let mut rx = store.stream_range(range, 64);
        store
            .set(b"{a}:late", &record("v"), Condition::Always, 0, false)
            .unwrap();
        let mut streamed = 0;
        while let Some(batch) = rx.blocking_recv() {
            streamed += batch.unwrap().len();
        }
        assert_eq!(streamed, 50);

        let removed = store.delete_range(range).unwrap();
        assert_eq!(removed.len(), 51);
        assert_eq!(store.count_in_slot(15495).unwrap(), 0);
        assert!(store.get(b"{a}:0").unwrap().is_none());
        assert_eq!(store.get(b"{d}:3").unwrap().unwrap().value, "v");
        assert_eq!(store.key_count(), 10);
        drop(store);
        let store = RocksStore::open(&dir, Fsync::No, OpenOptions::default()).unwrap();
        assert_eq!(store.key_count(), 10, "the deletion survives a restart");
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn tracking_notes_writes_to_the_range_only() {
        let dir = temp_dir("track");
        let store = RocksStore::open(&dir, Fsync::No, OpenOptions::default()).unwrap();
        store
            .set(b"{a}:before", &record("v"), Condition::Always, 0, false)
            .unwrap();
        let range = SlotRange::new(15495, 15495).unwrap();
        let other = SlotRange::new(16287, 16287).unwrap();
        store.track(range);
        store.track(other);
        store
            .set(b"{a}:1", &record("v"), Condition::Always, 0, false)
            .unwrap();
        store
            .set(b"{x}:1", &record("v"), Condition::Always, 0, false)
            .unwrap();
        store
            .delete(&[Bytes::from_static(b"{a}:before")], 0)
            .unwrap();
        let mut dirty = store.take_dirty(range);
        dirty.sort();
        assert_eq!(
            dirty,
            vec![
                Bytes::from_static(b"{a}:1"),
                Bytes::from_static(b"{a}:before")
            ]
        );
        assert!(store.take_dirty(range).is_empty());
        assert_eq!(store.take_dirty(other), vec![Bytes::from_static(b"{x}:1")]);
        store.untrack(other);
        store
            .set(b"{a}:2", &record("v"), Condition::Always, 0, false)
            .unwrap();
        assert_eq!(store.take_dirty(range), vec![Bytes::from_static(b"{a}:2")]);
        store.untrack(range);
        store
            .set(b"{a}:3", &record("v"), Condition::Always, 0, false)
            .unwrap();
        assert!(store.take_dirty(range).is_empty());
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_store_with_bare_keys_is_refused() {
        let dir = temp_dir("layout");
        {
            let store = RocksStore::open(&dir, Fsync::No, OpenOptions::default()).unwrap();
            store
                .set(b"k", &record("v"), Condition::Always, 0, false)
                .unwrap();
            // What an earlier Mantle left: keys, and no layout mark.
            let family = store.db.cf_handle(POLICY_FAMILY).unwrap();
            store.db.delete_cf(family, LAYOUT_KEY).unwrap();
        }
        let err = RocksStore::open(&dir, Fsync::No, OpenOptions::default())
            .err()
            .expect("refused");
        assert!(err.0.contains("earlier Mantle"), "{err}");
        assert!(err.0.contains(&dir.display().to_string()), "{err}");
        // An empty store without the mark is simply marked.
        let empty = temp_dir("layout-empty");
        drop(RocksStore::open(&empty, Fsync::No, OpenOptions::default()).unwrap());
        drop(RocksStore::open(&empty, Fsync::No, OpenOptions::default()).unwrap());
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&empty);
    }
}
