//! The cached keys and values, held by the server, and the mapping from byte-string keys to the
//! dense `u64` ids the eviction algorithm in `crates/cache` works on. A key gets an id when it
//! enters the cache and gives it back when it leaves, so ids stay dense (they index a `Vec`),
//! and there is never a hash collision between keys: the index compares the key bytes.
//!
//! Memory per cached key: one [`Entry`] (48 bytes), one allocation holding key and value
//! together, and a 4-byte id plus a control byte in the index.

use bytes::Bytes;
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

/// Keys to ids to entries. The caller supplies each key's hash (it also uses it to pick the
/// key's write stripe), computed with one seeded hasher for the whole server.
#[derive(Default)]
pub struct KeyTable {
    index: HashTable<u32>,
    entries: Vec<Option<Entry>>,
    free: Vec<u32>,
}

impl KeyTable {
    pub fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn find(&self, hash: u64, key: &[u8]) -> Option<u64> {
        let entries = &self.entries;
        self.index
            .find(hash, |&id| {
                entries[id as usize]
                    .as_ref()
                    .is_some_and(|e| e.key() == key)
            })
            .map(|&id| u64::from(id))
    }

    pub fn get(&self, id: u64) -> Option<&Entry> {
        self.entries.get(id as usize).and_then(Option::as_ref)
    }

    /// Adds `entry` (whose key must not be present) and returns its new id.
    pub fn insert(&mut self, hash: u64, entry: Entry, rehash: impl Fn(&[u8]) -> u64) -> u64 {
        let id = match self.free.pop() {
            Some(id) => {
                self.entries[id as usize] = Some(entry);
                id
            }
            None => {
                self.entries.push(Some(entry));
                (self.entries.len() - 1) as u32
            }
        };
        let entries = &self.entries;
        self.index.insert_unique(hash, id, |&other| {
            entries[other as usize]
                .as_ref()
                .map_or(0, |e| rehash(e.key()))
        });
        u64::from(id)
    }

    /// Replaces the entry under an existing id (same key, new value).
    pub fn replace(&mut self, id: u64, entry: Entry) {
        if let Some(slot) = self.entries.get_mut(id as usize) {
            debug_assert!(slot.as_ref().is_some_and(|e| e.key() == entry.key()));
            *slot = Some(entry);
        }
    }

    /// Removes the entry with this id, if any; `hash` is its key's hash.
    pub fn remove(&mut self, id: u64, hash: impl Fn(&[u8]) -> u64) -> Option<Entry> {
        let entry = self.entries.get_mut(id as usize)?.take()?;
        let id = id as u32;
        if let Ok(found) = self
            .index
            .find_entry(hash(entry.key()), |&other| other == id)
        {
            found.remove();
        }
        self.free.push(id);
        Some(entry)
    }

    /// Heap bytes of the index and entry slab (values not included).
    pub fn heap_bytes(&self) -> usize {
        self.index.capacity() * (std::mem::size_of::<u32>() + 1)
            + self.entries.capacity() * std::mem::size_of::<Option<Entry>>()
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
        let a = table.insert(h(b"a"), Entry::new(b"a", b"1", 0, 0), h);
        let b = table.insert(h(b"b"), Entry::new(b"b", b"2", 0, 0), h);
        assert_eq!((a, b), (0, 1));
        assert_eq!(table.find(h(b"b"), b"b"), Some(1));
        // Same hash, different bytes: no false match.
        assert_eq!(table.find(h(b"b"), b"c"), None);
        assert_eq!(table.remove(a, h).unwrap().value(), "1");
        assert_eq!(table.find(h(b"a"), b"a"), None);
        let c = table.insert(h(b"c"), Entry::new(b"c", b"3", 0, 0), h);
        assert_eq!(c, 0, "the freed id is reused");
        assert_eq!(table.len(), 2);
        assert!(table.remove(a + 10, h).is_none());
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
    }

    #[test]
    fn many_keys_survive_index_growth() {
        let hasher = ahash::RandomState::new();
        let h = |k: &[u8]| hasher.hash_one(k);
        let mut table = KeyTable::default();
        for i in 0..10_000u32 {
            let key = i.to_be_bytes();
            table.insert(h(&key), Entry::new(&key, b"v", 0, 0), h);
        }
        for i in (0..10_000u32).step_by(2) {
            let key = i.to_be_bytes();
            let id = table.find(h(&key), &key).unwrap();
            table.remove(id, h);
        }
        assert_eq!(table.len(), 5_000);
        for i in 0..10_000u32 {
            let key = i.to_be_bytes();
            assert_eq!(table.find(h(&key), &key).is_some(), i % 2 == 1, "{i}");
        }
    }
}
