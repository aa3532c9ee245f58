//! The whole key space in stored order (slot, then key), a page at a time, for SCAN and KEYS:
//! each page is read from its own iterator and says where the next one starts, so a walk
//! needs no iterator (nor RocksDB snapshot) kept between pages and stays valid across writes.
//! A key stored for the whole walk is met exactly once: pages follow each other in key order
//! and each starts strictly after the key the previous one ended on.

use super::{record, rocks_error, RocksStore, StoreError, SLOT_PREFIX};
use bytes::Bytes;
use rocksdb::ReadOptions;

/// One page of a walk over the key space.
#[derive(Debug, Default)]
pub struct KeyPage {
    /// The keys examined, with their expiry (0: none), expired ones included: the caller
    /// decides what an expired key means.
    pub keys: Vec<(Bytes, u64)>,
    /// Where the next page starts (after this stored position; opaque to the caller), or
    /// `None` once the walk has reached the end.
    pub resume_after: Option<Vec<u8>>,
}

impl RocksStore {
    /// Examines up to `max` stored keys (at least one) after the position `after` (from the
    /// first key with `None`).
    pub fn key_page(&self, after: Option<&[u8]>, max: usize) -> Result<KeyPage, StoreError> {
        let mut read = ReadOptions::default();
        // Across slots: the prefix-hashed memtable iterates one slot unless told otherwise.
        read.set_total_order_seek(true);
        read.fill_cache(false);
        let mut iter = self.db.raw_iterator_opt(read);
        match after {
            Some(position) => {
                iter.seek(position);
                if iter.valid() && iter.key() == Some(position) {
                    iter.next();
                }
            }
            None => iter.seek_to_first(),
        }
        let mut page = KeyPage::default();
        let mut last: Option<Vec<u8>> = None;
        while iter.valid() && page.keys.len() < max.max(1) {
            let (Some(stored), Some(value)) = (iter.key(), iter.value()) else {
                break;
            };
            if stored.len() >= SLOT_PREFIX {
                let key = &stored[SLOT_PREFIX..];
                let (expires_at_ms, _) =
                    record::decode(value).ok_or_else(|| StoreError(super::corrupt(key)))?;
                page.keys.push((Bytes::copy_from_slice(key), expires_at_ms));
            }
            last = Some(stored.to_vec());
            iter.next();
        }
        iter.status().map_err(rocks_error)?;
        if iter.valid() {
            page.resume_after = last;
        }
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::super::OpenOptions;
    use super::*;
    use crate::{Condition, Fsync, Record};

    #[test]
    fn pages_meet_every_key_once_across_writes() {
        let dir = std::env::temp_dir().join(format!("mantle-keypage-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = RocksStore::open(&dir, Fsync::No, OpenOptions::default()).unwrap();
        let record = Record {
            value: Bytes::from_static(b"v"),
            expires_at_ms: 0,
        };
        let original: Vec<String> = (0..100).map(|i| format!("key:{i}")).collect();
        for key in &original {
            store
                .set(key.as_bytes(), &record, Condition::Always, 0, false)
                .unwrap();
        }
        let mut seen = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        let mut pages = 0;
        loop {
            let page = store.key_page(after.as_deref(), 7).unwrap();
            assert!(page.keys.len() <= 7);
            seen.extend(
                page.keys
                    .iter()
                    .map(|(k, _)| String::from_utf8_lossy(k).into_owned()),
            );
            // Writes between pages: new keys, and a delete of one not yet met.
            store
                .set(
                    format!("new:{pages}").as_bytes(),
                    &record,
                    Condition::Always,
                    0,
                    false,
                )
                .unwrap();
            pages += 1;
            match page.resume_after {
                Some(position) => after = Some(position),
                None => break,
            }
        }
        for key in &original {
            assert_eq!(seen.iter().filter(|k| *k == key).count(), 1, "{key}");
        }
        let mut unique = seen.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), seen.len(), "a key was met twice");
        assert!(store.key_page(None, 0).unwrap().keys.len() == 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
