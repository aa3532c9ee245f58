//! The cached keys and values, held by the server, and the mapping from byte-string keys to the
//! dense `u64` ids the eviction algorithm in `crates/cache` works on. A key gets an id when it
//! enters the cache and gives it back when it leaves, so ids stay dense (they index a `Vec`),
//! and there is never a hash collision between keys: the index compares the key bytes.
//!
//! Memory per cached key: one index slot (the [`Entry`], 48 bytes, its id and the cache's
//! slot hint) plus a control byte, the key's hash by id (8 bytes), and one allocation holding
//! key and value together.
//!
//! The slot hint is where the eviction algorithm keeps the key's node: with it, a cache hit
//! updates the algorithm without a second hash lookup by id.

use bytes::Bytes;
use cache::SlotHint;
use hashbrown::HashTable;

/// One cached key: key and value share one allocation (`data` is the key then the value).
#[derive(Clone, Debug)]
pub struct Entry {
    data: Bytes,
    key_len: u32,
    /// Class named by a `SET ... HINT class`, as an index into the class names (0: none).
    pub class: u16,
    /// Milliseconds since the Unix epoch; 0: never expires.
    pub expires_at_ms: u64,
}

impl Entry {
    pub fn new(key: &[u8], value: &[u8], expires_at_ms: u64, class: u16) -> Entry {
        let mut data = Vec::with_capacity(key.len() + value.len());
        data.extend_from_slice(key);
        data.extend_from_slice(value);
        Entry {
            data: Bytes::from(data),
            key_len: key.len() as u32,
            class,
            expires_at_ms,
        }
    }

    pub fn key(&self) -> &[u8] {
        &self.data[..self.key_len as usize]
    }

    /// The value, sharing the entry's allocation (no copy).
    pub fn value(&self) -> Bytes {
        self.data.slice(self.key_len as usize..)
    }

    pub fn value_len(&self) -> usize {
        self.data.len() - self.key_len as usize
    }

    pub fn is_live(&self, now_ms: u64) -> bool {
        self.expires_at_ms == 0 || self.expires_at_ms > now_ms
    }
}

/// An entry as the index stores it, with its id and the cache's hint for that id (both fit
/// in the padding after the entry).
struct Slot {
    entry: Entry,
    id: u32,
    hint: SlotHint,
}

/// Bytes of one index slot (the entry lives in the index itself: a lookup touches the index
/// and the key's allocation, nothing else).
pub const SLOT_BYTES: usize = std::mem::size_of::<Slot>() + 1;

/// Bookkeeping bytes per key: its slot at hashbrown's highest load factor (7/8), plus the hash
/// kept per id.
pub fn bytes_per_key() -> f64 {
    SLOT_BYTES as f64 / 0.875 + std::mem::size_of::<u64>() as f64
}

/// Keys to ids to entries. The caller supplies each key's hash (it also uses it to pick the
/// key's write stripe), computed with one seeded hasher for the whole server.
#[derive(Default)]
pub struct KeyTable {
    index: HashTable<Slot>,
    /// The hash of each id's key, so an id (all the eviction algorithm knows) finds its slot.
    hashes: Vec<u64>,
    free: Vec<u32>,
}

impl KeyTable {
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn find(&self, hash: u64, key: &[u8]) -> Option<u64> {
        self.lookup(hash, key).map(|(id, _)| id)
    }

    /// The id and entry of `key`.
    pub fn lookup(&self, hash: u64, key: &[u8]) -> Option<(u64, &Entry)> {
        self.index
            .find(hash, |slot| slot.entry.key() == key)
            .map(|slot| (u64::from(slot.id), &slot.entry))
    }

    /// [`KeyTable::lookup`] plus the cache's slot hint recorded for the key.
    #[inline]
    pub fn lookup_hinted(&self, hash: u64, key: &[u8]) -> Option<(u64, SlotHint, &Entry)> {
        self.index
            .find(hash, |slot| slot.entry.key() == key)
            .map(|slot| (u64::from(slot.id), slot.hint, &slot.entry))
    }

    /// Records where the cache keeps `id`'s node (see [`KeyTable::lookup_hinted`]).
    pub fn set_hint(&mut self, id: u64, hint: SlotHint) {
        let Some(&hash) = self.hashes.get(id as usize) else {
            return;
        };
        let id = id as u32;
        if let Some(slot) = self.index.find_mut(hash, |slot| slot.id == id) {
            slot.hint = hint;
        }
    }

    pub fn get(&self, id: u64) -> Option<&Entry> {
        let hash = *self.hashes.get(id as usize)?;
        let id = id as u32;
        self.index
            .find(hash, |slot| slot.id == id)
            .map(|slot| &slot.entry)
    }

    /// Adds `entry` (whose key must not be present, with no slot hint yet) and returns its new
    /// id.
    pub fn insert(&mut self, hash: u64, entry: Entry) -> u64 {
        let id = match self.free.pop() {
            Some(id) => {
                self.hashes[id as usize] = hash;
                id
            }
            None => {
                self.hashes.push(hash);
                (self.hashes.len() - 1) as u32
            }
        };
        let hashes = &self.hashes;
        self.index.insert_unique(
            hash,
            Slot {
                entry,
                id,
                hint: SlotHint::NONE,
            },
            |slot| hashes[slot.id as usize],
        );
        u64::from(id)
    }

    /// Replaces the entry under an existing id (same key, new value).
    pub fn replace(&mut self, id: u64, entry: Entry) {
        let Some(&hash) = self.hashes.get(id as usize) else {
            return;
        };
        let id = id as u32;
        if let Some(slot) = self.index.find_mut(hash, |slot| slot.id == id) {
            debug_assert!(slot.entry.key() == entry.key());
            slot.entry = entry;
        }
    }

    /// Removes the entry with this id, if any.
    pub fn remove(&mut self, id: u64) -> Option<Entry> {
        let hash = *self.hashes.get(id as usize)?;
        let id = id as u32;
        let (slot, _) = self
            .index
            .find_entry(hash, |slot| slot.id == id)
            .ok()?
            .remove();
        self.free.push(id);
        Some(slot.entry)
    }

    /// Keys of the entries `pick` chooses: a scan of the whole table, for rare events (slots
    /// that left a cluster node).
    pub fn keys_where(&self, mut pick: impl FnMut(&[u8]) -> bool) -> Vec<Bytes> {
        self.index
            .iter()
            .filter(|slot| pick(slot.entry.key()))
            .map(|slot| Bytes::copy_from_slice(slot.entry.key()))
            .collect()
    }

    /// Heap bytes of the index and the per-id hashes (keys and values not included).
    pub fn heap_bytes(&self) -> usize {
        self.index.capacity() * SLOT_BYTES
            + self.hashes.capacity() * std::mem::size_of::<u64>()
            + self.free.capacity() * std::mem::size_of::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_dense_and_reused_and_keys_compare_by_bytes() {
        let hasher = ahash::RandomState::new();
        let h = |k: &[u8]| hasher.hash_one(k);
        let mut table = KeyTable::default();
        let a = table.insert(h(b"a"), Entry::new(b"a", b"1", 0, 0));
        let b = table.insert(h(b"b"), Entry::new(b"b", b"2", 0, 0));
        assert_eq!((a, b), (0, 1));
        assert_eq!(table.find(h(b"b"), b"b"), Some(1));
        // Same hash, different bytes: no false match.
        assert_eq!(table.find(h(b"b"), b"c"), None);
        assert_eq!(table.remove(a).unwrap().value(), "1");
        assert_eq!(table.find(h(b"a"), b"a"), None);
        let c = table.insert(h(b"c"), Entry::new(b"c", b"3", 0, 0));
        assert_eq!(c, 0, "the freed id is reused");
        assert_eq!(table.len(), 2);
        assert!(table.remove(a + 10).is_none());
        assert_eq!(table.get(c).unwrap().value(), "3");
        assert!(table.get(a + 10).is_none());
    }

    #[test]
    fn hints_are_kept_per_key_and_start_empty() {
        let hasher = ahash::RandomState::new();
        let h = |k: &[u8]| hasher.hash_one(k);
        let mut cache = cache::Cache::new(cache::Algorithm::Lru, cache::Capacity::default());
        let mut table = KeyTable::default();
        let a = table.insert(h(b"a"), Entry::new(b"a", b"1", 0, 0));
        let b = table.insert(h(b"b"), Entry::new(b"b", b"2", 0, 0));
        assert_eq!(
            table.lookup_hinted(h(b"a"), b"a").unwrap().1,
            SlotHint::NONE
        );
        let hint_a = cache.insert_hinted(a, 1, |_, _| {}).unwrap();
        let hint_b = cache.insert_hinted(b, 1, |_, _| {}).unwrap();
        table.set_hint(a, hint_a);
        table.set_hint(b, hint_b);
        table.set_hint(b + 10, hint_a);
        let (id, hint, entry) = table.lookup_hinted(h(b"b"), b"b").unwrap();
        assert_eq!(
            (id, hint, entry.value()),
            (b, hint_b, Bytes::from_static(b"2"))
        );
        assert_eq!(table.lookup_hinted(h(b"a"), b"a").unwrap().1, hint_a);
        table.replace(a, Entry::new(b"a", b"3", 0, 0));
        assert_eq!(
            table.lookup_hinted(h(b"a"), b"a").unwrap().1,
            hint_a,
            "same key, same node"
        );
        table.remove(a);
        let c = table.insert(h(b"c"), Entry::new(b"c", b"4", 0, 0));
        assert_eq!(c, a);
        assert_eq!(
            table.lookup_hinted(h(b"c"), b"c").unwrap().1,
            SlotHint::NONE
        );
    }

    #[test]
    fn entries_split_key_and_value_from_one_allocation() {
        let entry = Entry::new(b"key", b"value", 7, 2);
        assert_eq!(entry.key(), b"key");
        assert_eq!(entry.value(), "value");
        assert_eq!(entry.value_len(), 5);
        assert!(entry.is_live(6));
        assert!(!entry.is_live(7));
        assert_eq!(Entry::new(b"", b"", 0, 0).value(), "");
        assert_eq!(std::mem::size_of::<Option<Entry>>(), 48);
        assert_eq!(
            std::mem::size_of::<Slot>(),
            56,
            "id and hint fit in the entry's padding"
        );
    }

    #[test]
    fn many_keys_survive_index_growth() {
        let hasher = ahash::RandomState::new();
        let h = |k: &[u8]| hasher.hash_one(k);
        let mut table = KeyTable::default();
        for i in 0..10_000u32 {
            let key = i.to_be_bytes();
            table.insert(h(&key), Entry::new(&key, b"v", 0, 0));
        }
        for i in (0..10_000u32).step_by(2) {
            let key = i.to_be_bytes();
            let id = table.find(h(&key), &key).unwrap();
            table.remove(id);
        }
        assert_eq!(table.len(), 5_000);
        for i in 0..10_000u32 {
            let key = i.to_be_bytes();
            assert_eq!(table.find(h(&key), &key).is_some(), i % 2 == 1, "{i}");
        }
    }
}
