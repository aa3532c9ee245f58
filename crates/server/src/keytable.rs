//! The cached keys and values, held by the server beside the cache's own slab.
//!
//! The cache (`crates/cache`) knows every object by a `u64` key; the server gives it the key's
//! 64-bit table hash (seeded, so clients cannot aim at collisions). The cache's hash index is
//! then the only index: a lookup asks the cache for the slot of the hash and finds the entry
//! in [`KeyTable`], a `Vec` indexed by that slot, and compares the key bytes. Two keys with the
//! same hash cannot both be cached: the newer one replaces the older in the cache (the store
//! keeps both), so a collision costs a miss, never a wrong value.
//!
//! An [`Entry`] is one allocation: a header with a reference count and the lengths, the expiry
//! and the `HINT` class only when the object has them, then the key and the value. The count
//! lets a GET reply carry the value ([`Value`]) out of the cache's lock without copying it or
//! allocating.
//!
//! Metadata per cached object beyond its key and value bytes (docs/cache.md has the table):
//! the cache's slab node and index share ([`cache::overhead`]), the entry's slot here
//! ([`SLOT_BYTES`], with the `Vec`'s growth slack) and the entry's header ([`HEADER_BYTES`],
//! more with an expiry, a class or long lengths). [`metadata_worst`] adds them up; a test pins
//! the sum (44 to 52 bytes).

use bytes::Bytes;
use cache::SlotHint;
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// Bits of the header word that count references; the three above are flags.
const COUNT_MASK: u32 = (1 << 29) - 1;
/// The entry has a `HINT` class (a `u16` after the lengths).
const HAS_CLASS: u32 = 1 << 29;
/// The entry expires (a `u64` of milliseconds since the Unix epoch after the lengths).
const HAS_EXPIRY: u32 = 1 << 30;
/// The lengths take two words (a key over 255 bytes or a value of 16 MiB or more).
const LONG: u32 = 1 << 31;

/// Longest key, and longest value, of the one-word length form.
const SHORT_KEY_MAX: usize = 0xff;
const SHORT_VALUE_MAX: usize = (1 << 24) - 1;

/// Header bytes of an entry with a short key and value, no expiry and no class.
pub const HEADER_BYTES: usize = 8;

/// Bytes of one entry's place in [`KeyTable`] (a nullable pointer).
pub const SLOT_BYTES: usize = std::mem::size_of::<Option<Entry>>();

/// The table grows by an eighth of its length, as the cache's slab does.
const SLOT_SPARE: f64 = 1.0 / 8.0;

/// Server-side metadata per cached object beyond key and value, worst case: the entry's slot
/// with the table's largest spare share, and a short header.
pub fn table_bytes_worst() -> f64 {
    SLOT_BYTES as f64 * (1.0 + SLOT_SPARE) + HEADER_BYTES as f64
}

/// Everything per cached object beyond its key and value bytes, worst case: this table and
/// the cache's node and index (`cache::overhead`, whose 8-byte key is the hash, metadata
/// here).
pub fn metadata_worst() -> f64 {
    table_bytes_worst() + cache::overhead::per_object_worst() + cache::overhead::KEY_BYTES as f64
}

/// The same, best case (full index buckets, no spare slots).
pub fn metadata_best() -> f64 {
    (SLOT_BYTES + HEADER_BYTES) as f64
        + cache::overhead::per_object_best()
        + cache::overhead::KEY_BYTES as f64
}

/// One cached key and its value in one reference-counted allocation (see the module doc).
pub struct Entry {
    ptr: NonNull<AtomicU32>,
}

// SAFETY: the allocation is immutable after `Entry::new` except for the atomic count.
unsafe impl Send for Entry {}
unsafe impl Sync for Entry {}

/// Where the parts of an entry sit in its allocation.
struct Shape {
    key_len: usize,
    value_len: usize,
    /// Offset of the key; the value follows it.
    data: usize,
    expiry: Option<usize>,
    class: Option<usize>,
}

impl Shape {
    fn size(&self) -> usize {
        self.data + self.key_len + self.value_len
    }

    fn layout(&self) -> Layout {
        Layout::from_size_align(self.size(), std::mem::align_of::<AtomicU32>())
            .expect("an entry's size fits a layout: key and value are request-bounded")
    }
}

impl Entry {
    pub fn new(key: &[u8], value: &[u8], expires_at_ms: u64, class: u16) -> Entry {
        let long = key.len() > SHORT_KEY_MAX || value.len() > SHORT_VALUE_MAX;
        let mut flags = 0;
        let mut at = 4;
        at += if long {
            flags |= LONG;
            8
        } else {
            4
        };
        let expiry = (expires_at_ms != 0).then(|| {
            flags |= HAS_EXPIRY;
            at += 8;
            at - 8
        });
        let class_at = (class != 0).then(|| {
            flags |= HAS_CLASS;
            at += 2;
            at - 2
        });
        let shape = Shape {
            key_len: key.len(),
            value_len: value.len(),
            data: at,
            expiry,
            class: class_at,
        };
        let layout = shape.layout();
        // SAFETY: the layout is never zero-sized (the header alone is 8 bytes), and every
        // write below stays within it at the offsets `shape` computed.
        unsafe {
            let base = alloc(layout);
            if base.is_null() {
                handle_alloc_error(layout);
            }
            base.cast::<AtomicU32>().write(AtomicU32::new(flags | 1));
            let lengths = base.add(4);
            if long {
                lengths.cast::<u32>().write_unaligned(key.len() as u32);
                lengths
                    .add(4)
                    .cast::<u32>()
                    .write_unaligned(value.len() as u32);
            } else {
                let word = key.len() as u32 | (value.len() as u32) << 8;
                lengths.cast::<u32>().write_unaligned(word);
            }
            if let Some(at) = shape.expiry {
                base.add(at).cast::<u64>().write_unaligned(expires_at_ms);
            }
            if let Some(at) = shape.class {
                base.add(at).cast::<u16>().write_unaligned(class);
            }
            let data = base.add(shape.data);
            std::ptr::copy_nonoverlapping(key.as_ptr(), data, key.len());
            std::ptr::copy_nonoverlapping(value.as_ptr(), data.add(key.len()), value.len());
            Entry {
                ptr: NonNull::new_unchecked(base.cast()),
            }
        }
    }

    fn base(&self) -> *const u8 {
        self.ptr.as_ptr().cast()
    }

    fn flags(&self) -> u32 {
        // SAFETY: the header word lives as long as any `Entry` of it. Flags never change.
        unsafe { self.ptr.as_ref() }.load(Ordering::Relaxed) & !COUNT_MASK
    }

    fn shape(&self) -> Shape {
        let flags = self.flags();
        // SAFETY: the lengths were written by `new` at these offsets.
        let (key_len, value_len, mut at) = unsafe {
            let lengths = self.base().add(4);
            if flags & LONG != 0 {
                (
                    lengths.cast::<u32>().read_unaligned() as usize,
                    lengths.add(4).cast::<u32>().read_unaligned() as usize,
                    12,
                )
            } else {
                let word = lengths.cast::<u32>().read_unaligned();
                ((word & 0xff) as usize, (word >> 8) as usize, 8)
            }
        };
        let expiry = (flags & HAS_EXPIRY != 0).then(|| {
            at += 8;
            at - 8
        });
        let class = (flags & HAS_CLASS != 0).then(|| {
            at += 2;
            at - 2
        });
        Shape {
            key_len,
            value_len,
            data: at,
            expiry,
            class,
        }
    }

    pub fn key(&self) -> &[u8] {
        let shape = self.shape();
        // SAFETY: `new` copied `key_len` key bytes to `data`.
        unsafe { std::slice::from_raw_parts(self.base().add(shape.data), shape.key_len) }
    }

    /// The value, borrowed from the entry.
    pub fn value_bytes(&self) -> &[u8] {
        let shape = self.shape();
        // SAFETY: `new` copied `value_len` value bytes right after the key.
        unsafe {
            std::slice::from_raw_parts(self.base().add(shape.data + shape.key_len), shape.value_len)
        }
    }

    /// The value, sharing the entry (no copy, no allocation).
    pub fn value(&self) -> Value {
        Value(self.clone())
    }

    pub fn value_len(&self) -> usize {
        self.shape().value_len
    }

    /// Milliseconds since the Unix epoch; 0: never expires.
    pub fn expires_at_ms(&self) -> u64 {
        match self.shape().expiry {
            // SAFETY: written by `new` at this offset.
            Some(at) => unsafe { self.base().add(at).cast::<u64>().read_unaligned() },
            None => 0,
        }
    }

    /// Class named by a `SET ... HINT class`, as an index into the class names (0: none).
    pub fn class(&self) -> u16 {
        match self.shape().class {
            // SAFETY: written by `new` at this offset.
            Some(at) => unsafe { self.base().add(at).cast::<u16>().read_unaligned() },
            None => 0,
        }
    }

    pub fn is_live(&self, now_ms: u64) -> bool {
        let at = self.expires_at_ms();
        at == 0 || at > now_ms
    }

    /// Bytes of the entry's allocation that are neither key nor value.
    pub fn header_bytes(&self) -> usize {
        self.shape().data
    }
}

impl Clone for Entry {
    fn clone(&self) -> Entry {
        // SAFETY: this entry holds a reference, so the header is alive.
        let old = unsafe { self.ptr.as_ref() }.fetch_add(1, Ordering::Relaxed);
        if old & COUNT_MASK == COUNT_MASK {
            // 2^29 replies holding one value at once: as `Arc` does on overflow, stop rather
            // than let the count wrap into the flags and free a value still in use.
            std::process::abort();
        }
        Entry { ptr: self.ptr }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        // SAFETY: this entry holds a reference; the last one out frees the allocation with
        // the layout it was made with (the shape is read before the count is given up, and
        // nobody else can read it after the count reached zero).
        unsafe {
            let layout = self.shape().layout();
            if self.ptr.as_ref().fetch_sub(1, Ordering::Release) & COUNT_MASK != 1 {
                return;
            }
            std::sync::atomic::fence(Ordering::Acquire);
            dealloc(self.ptr.as_ptr().cast(), layout);
        }
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("key", &Bytes::copy_from_slice(self.key()))
            .field("value_len", &self.value_len())
            .field("expires_at_ms", &self.expires_at_ms())
            .field("class", &self.class())
            .finish()
    }
}

/// A cached value on its way to a client: it keeps the entry's allocation alive, so the cache
/// may drop or replace the key meanwhile.
#[derive(Clone)]
pub struct Value(Entry);

impl std::ops::Deref for Value {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0.value_bytes()
    }
}

impl AsRef<[u8]> for Value {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Bytes::copy_from_slice(self).fmt(f)
    }
}

impl From<Value> for Bytes {
    /// For callers that keep a value beyond a reply: wraps the entry, no copy.
    fn from(value: Value) -> Bytes {
        Bytes::from_owner(value)
    }
}

/// The cached entries, by the cache's slot for their key (see the module doc).
#[derive(Default)]
pub struct KeyTable {
    entries: Vec<Option<Entry>>,
    len: usize,
    /// Sum of the entries' header bytes (what `INFO memory` counts beside the slots).
    header_bytes: usize,
}

impl KeyTable {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entry in `hint`'s slot.
    #[inline]
    pub fn get(&self, hint: SlotHint) -> Option<&Entry> {
        self.entries.get(hint.slot()?)?.as_ref()
    }

    /// Puts `entry` in `hint`'s slot (empty: the cache just gave it out), growing the table by
    /// an eighth when the slot is past its end.
    pub fn put(&mut self, hint: SlotHint, entry: Entry) {
        let Some(slot) = hint.slot() else {
            return;
        };
        if slot >= self.entries.len() {
            if slot >= self.entries.capacity() {
                let extra = (slot + 1 - self.entries.len()).max(self.entries.len() / 8);
                self.entries.reserve_exact(extra.max(64));
            }
            self.entries.resize_with(slot + 1, || None);
        }
        self.header_bytes += entry.header_bytes();
        if let Some(old) = self.entries[slot].replace(entry) {
            debug_assert!(false, "slot {slot} was not empty");
            self.header_bytes -= old.header_bytes();
        } else {
            self.len += 1;
        }
    }

    /// Takes the entry out of `hint`'s slot (the cache evicted or removed its object).
    pub fn take(&mut self, hint: SlotHint) -> Option<Entry> {
        let entry = self.entries.get_mut(hint.slot()?)?.take()?;
        self.len -= 1;
        self.header_bytes -= entry.header_bytes();
        Some(entry)
    }

    /// Keys of the entries `pick` chooses: a scan of the whole table, for rare events (slots
    /// that left a cluster node).
    pub fn keys_where(&self, mut pick: impl FnMut(&[u8]) -> bool) -> Vec<Bytes> {
        self.entries
            .iter()
            .flatten()
            .filter(|entry| pick(entry.key()))
            .map(|entry| Bytes::copy_from_slice(entry.key()))
            .collect()
    }

    /// Heap bytes of the slots and the entries' headers (keys and values not included).
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * SLOT_BYTES + self.header_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_keep_key_value_expiry_and_class_in_one_allocation() {
        let entry = Entry::new(b"key", b"value", 7, 2);
        assert_eq!(entry.key(), b"key");
        assert_eq!(entry.value_bytes(), b"value");
        assert_eq!(&*entry.value(), b"value");
        assert_eq!(
            (entry.value_len(), entry.expires_at_ms(), entry.class()),
            (5, 7, 2)
        );
        assert!(entry.is_live(6));
        assert!(!entry.is_live(7));
        assert_eq!(entry.header_bytes(), HEADER_BYTES + 8 + 2);
        let plain = Entry::new(b"k", b"v", 0, 0);
        assert_eq!((plain.expires_at_ms(), plain.class()), (0, 0));
        assert_eq!(plain.header_bytes(), HEADER_BYTES);
        let empty = Entry::new(b"", b"", 0, 0);
        assert_eq!((empty.key(), &*empty.value()), (&b""[..], &b""[..]));
    }

    #[test]
    fn long_keys_and_values_take_the_two_word_form() {
        let key = vec![b'k'; SHORT_KEY_MAX + 1];
        let value = vec![b'v'; 10];
        let entry = Entry::new(&key, &value, 5, 0);
        assert_eq!((entry.key(), entry.value_bytes()), (&key[..], &value[..]));
        assert_eq!(entry.header_bytes(), HEADER_BYTES + 4 + 8);
        let big = vec![b'v'; SHORT_VALUE_MAX + 1];
        let entry = Entry::new(b"k", &big, 0, 9);
        assert_eq!((entry.value_len(), entry.class()), (big.len(), 9));
        assert_eq!(entry.value_bytes(), &big[..]);
        let edge = Entry::new(&key[..SHORT_KEY_MAX], &big[..SHORT_VALUE_MAX], 0, 0);
        assert_eq!(edge.header_bytes(), HEADER_BYTES, "the largest short form");
        assert_eq!(edge.key().len(), SHORT_KEY_MAX);
        assert_eq!(edge.value_len(), SHORT_VALUE_MAX);
    }

    #[test]
    fn a_value_outlives_its_entry_in_the_table() {
        let mut table = KeyTable::default();
        let mut cache = cache::Cache::new(cache::Algorithm::Lru, cache::Capacity::default());
        let hint = cache.insert_hinted(1, 10, |_, _| {}).unwrap();
        table.put(hint, Entry::new(b"a", b"first", 0, 0));
        let value = table.get(hint).unwrap().value();
        let as_bytes = Bytes::from(table.get(hint).unwrap().value());
        drop(table.take(hint));
        assert!(table.get(hint).is_none());
        assert_eq!((&*value, &as_bytes[..]), (&b"first"[..], &b"first"[..]));
        let copies: Vec<Value> = (0..100).map(|_| value.clone()).collect();
        drop(value);
        assert!(copies.iter().all(|v| &**v == b"first"));
    }

    #[test]
    fn the_table_follows_the_caches_slots() {
        let mut cache = cache::Cache::new(cache::Algorithm::Lru, cache::Capacity::objects(100));
        let mut table = KeyTable::default();
        for key in 0..1000u64 {
            let name = key.to_be_bytes();
            let hint = cache
                .insert_slotted(key, 1, (), |_, _, victim| {
                    table.take(victim).expect("every victim had an entry");
                })
                .unwrap();
            table.put(hint, Entry::new(&name, b"v", 0, 0));
        }
        assert_eq!((table.len(), cache.len()), (100, 100));
        for key in 900..1000u64 {
            let hint = cache.slot_hint(key).unwrap();
            assert_eq!(table.get(hint).unwrap().key(), key.to_be_bytes());
        }
        assert!(table.entries.len() <= 100 + 64, "slots are reused");
        cache.set_capacity_slotted(cache::Capacity::objects(10), |_, _, victim| {
            table.take(victim).unwrap();
        });
        assert_eq!(table.len(), 10);
        assert_eq!(
            table.keys_where(|_| true).len(),
            10,
            "only the cached keys are left"
        );
    }

    #[test]
    fn metadata_per_object_is_44_to_52_bytes() {
        // Layout (docs/cache.md): the cache's 24-byte node (the key's hash, size, queue
        // links, index chain and algorithm bits), 4-8 bytes of index buckets, the entry's
        // 8-byte slot here and its 8-byte header.
        assert_eq!(SLOT_BYTES, 8, "a slot is one nullable pointer");
        assert_eq!(HEADER_BYTES, 8);
        assert_eq!(Entry::new(b"k", b"v", 0, 0).header_bytes(), HEADER_BYTES);
        assert_eq!(metadata_best(), 44.0);
        assert_eq!(metadata_worst(), 52.0);
    }
}
