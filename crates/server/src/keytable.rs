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
//! the cache's slab node and index share ([`cache::overhead`], with the cache packed densely:
//! [`PACKING`]), the entry's slot here ([`SLOT_BYTES`], with the `Vec`'s growth slack) and the
//! entry's header ([`HEADER_BYTES`], more with an expiry, a class or long lengths).
//! [`metadata_worst`] adds them up; a test pins the sum (37 to 40 bytes).

use bytes::Bytes;
use cache::SlotHint;
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

/// Bits of the header's first half that count references; the three above are flags.
const COUNT_MASK: u16 = (1 << 13) - 1;
/// The entry has a `HINT` class (a `u16` after the lengths).
const HAS_CLASS: u16 = 1 << 13;
/// The entry expires (a `u64` of milliseconds since the Unix epoch after the lengths).
const HAS_EXPIRY: u16 = 1 << 14;
/// The lengths take two words after the header (a key over 31 bytes or a value over 2,047).
const LONG: u16 = 1 << 15;

/// The short form packs both lengths in the header's second half: 5 bits of key length, 11 of
/// value length (16-byte keys with 64-byte or 1 KiB values fit).
const SHORT_KEY_BITS: u32 = 5;
const SHORT_KEY_MAX: usize = (1 << SHORT_KEY_BITS) - 1;
const SHORT_VALUE_MAX: usize = (1 << (16 - SHORT_KEY_BITS)) - 1;

/// Header bytes of an entry with a short key and value, no expiry and no class: the count and
/// flags (2) and both lengths (2).
pub const HEADER_BYTES: usize = 4;

/// Header bytes of the long form: the short header's 4, then the key's and the value's length
/// as `u32`s.
const LONG_HEADER_BYTES: usize = 12;

/// Bytes of one entry's place in [`KeyTable`] (a nullable pointer).
pub const SLOT_BYTES: usize = std::mem::size_of::<Option<Entry>>();

/// How the server's cache packs its slab: densely, so that its node and index share (19.5 B
/// at worst) and this table's slot and header (12.5) stay within 40 bytes per object. The
/// price is 2 to 4 objects per index bucket instead of 1 to 2: a lookup reads one more node
/// on average.
pub const PACKING: cache::Packing = cache::Packing::Dense;

/// The table grows by `len >> SLOT_GROWTH_SHIFT`, as the cache's slab does.
const SLOT_GROWTH_SHIFT: u32 = PACKING.growth_shift();

/// The most spare slots, as a fraction of the slots in use.
const SLOT_SPARE: f64 = 1.0 / (1u32 << SLOT_GROWTH_SHIFT) as f64;

/// Server-side metadata per cached object beyond key and value, worst case: the entry's slot
/// with the table's largest spare share, and a short header.
pub fn table_bytes_worst() -> f64 {
    SLOT_BYTES as f64 * (1.0 + SLOT_SPARE) + HEADER_BYTES as f64
}

/// Everything per cached object beyond its key and value bytes, worst case: this table and
/// the cache's node and index (`cache::overhead`, whose 8-byte key is the hash, metadata
/// here).
pub fn metadata_worst() -> f64 {
    table_bytes_worst()
        + cache::overhead::per_object_worst_packed(PACKING)
        + cache::overhead::KEY_BYTES as f64
}

/// The same, best case (full index buckets, no spare slots).
pub fn metadata_best() -> f64 {
    (SLOT_BYTES + HEADER_BYTES) as f64
        + cache::overhead::per_object_best_packed(PACKING)
        + cache::overhead::KEY_BYTES as f64
}

/// One cached key and its value in one reference-counted allocation (see the module doc).
pub struct Entry {
    ptr: NonNull<AtomicU16>,
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
        Layout::from_size_align(self.size(), std::mem::align_of::<AtomicU16>())
            .expect("an entry's size fits a layout: key and value are request-bounded")
    }
}

impl Entry {
    pub fn new(key: &[u8], value: &[u8], expires_at_ms: u64, class: u16) -> Entry {
        let long = key.len() > SHORT_KEY_MAX || value.len() > SHORT_VALUE_MAX;
        let mut flags = 0;
        let mut at = if long {
            flags |= LONG;
            LONG_HEADER_BYTES
        } else {
            HEADER_BYTES
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
        // SAFETY: the layout is never zero-sized (the header alone is 4 bytes), and every
        // write below stays within it at the offsets `shape` computed.
        unsafe {
            let base = alloc(layout);
            if base.is_null() {
                handle_alloc_error(layout);
            }
            base.cast::<AtomicU16>().write(AtomicU16::new(flags | 1));
            if long {
                base.add(2).cast::<u16>().write_unaligned(0);
                base.add(4).cast::<u32>().write_unaligned(key.len() as u32);
                base.add(8)
                    .cast::<u32>()
                    .write_unaligned(value.len() as u32);
            } else {
                let word = key.len() as u16 | (value.len() as u16) << SHORT_KEY_BITS;
                base.add(2).cast::<u16>().write_unaligned(word);
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

    fn count(&self) -> &AtomicU16 {
        // SAFETY: the header lives as long as any `Entry` of it.
        unsafe { self.ptr.as_ref() }
    }

    fn flags(&self) -> u16 {
        // Flags never change; the count beside them never carries into them (`try_share`).
        self.count().load(Ordering::Relaxed) & !COUNT_MASK
    }

    fn shape(&self) -> Shape {
        let flags = self.flags();
        // SAFETY: the lengths were written by `new` at these offsets.
        let (key_len, value_len, mut at) = unsafe {
            if flags & LONG != 0 {
                (
                    self.base().add(4).cast::<u32>().read_unaligned() as usize,
                    self.base().add(8).cast::<u32>().read_unaligned() as usize,
                    LONG_HEADER_BYTES,
                )
            } else {
                let word = self.base().add(2).cast::<u16>().read_unaligned();
                (
                    usize::from(word & SHORT_KEY_MAX as u16),
                    usize::from(word >> SHORT_KEY_BITS),
                    HEADER_BYTES,
                )
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

    /// The value, sharing the entry (no copy, no allocation) unless [`COUNT_MASK`] references
    /// to it are out already; then a copy.
    pub fn value(&self) -> Value {
        match self.try_share() {
            Some(entry) => Value(Held::Shared(entry)),
            None => Value(Held::Copied(Bytes::copy_from_slice(self.value_bytes()))),
        }
    }

    /// Another reference to this entry, or `None` when the 13-bit count is full: the count
    /// must never carry into the flags, which readers outside the cache's lock rely on.
    fn try_share(&self) -> Option<Entry> {
        let count = self.count();
        let mut word = count.load(Ordering::Relaxed);
        loop {
            if word & COUNT_MASK == COUNT_MASK {
                return None;
            }
            // Relaxed as `Arc::clone`: a new reference is made from an existing one.
            match count.compare_exchange_weak(word, word + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(Entry { ptr: self.ptr }),
                Err(now) => word = now,
            }
        }
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

    /// [`Entry::is_live`] reading the clock only for an entry that has an expiry: a hit on
    /// an entry without one (most of them) makes no clock call.
    #[inline]
    pub fn is_live_now(&self, now_ms: impl FnOnce() -> u64) -> bool {
        let at = self.expires_at_ms();
        at == 0 || at > now_ms()
    }

    /// Bytes of the entry's allocation that are neither key nor value.
    pub fn header_bytes(&self) -> usize {
        self.shape().data
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        // SAFETY: this entry holds a reference; the last one out frees the allocation with
        // the layout it was made with (the shape is read before the count is given up, and
        // nobody else can read it after the count reached zero). The count is at least 1 here,
        // so the decrement never borrows from the flags.
        unsafe {
            let layout = self.shape().layout();
            if self.count().fetch_sub(1, Ordering::Release) & COUNT_MASK != 1 {
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
pub struct Value(Held);

enum Held {
    Shared(Entry),
    /// The entry's count was full (thousands of replies of one value in flight).
    Copied(Bytes),
}

impl Value {
    /// Whether this value holds a reference to its entry rather than a copy.
    #[cfg(test)]
    fn is_shared(&self) -> bool {
        matches!(self.0, Held::Shared(_))
    }
}

impl Clone for Value {
    fn clone(&self) -> Value {
        match &self.0 {
            Held::Shared(entry) => entry.value(),
            Held::Copied(bytes) => Value(Held::Copied(bytes.clone())),
        }
    }
}

impl std::ops::Deref for Value {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Held::Shared(entry) => entry.value_bytes(),
            Held::Copied(bytes) => bytes,
        }
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
        match value.0 {
            Held::Copied(bytes) => bytes,
            shared => Bytes::from_owner(Value(shared)),
        }
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

    /// Starts loading `hint`'s slot of the table, for [`KeyTable::prefetch_entry`] (see
    /// [`cache::prefetch_read`]).
    #[inline]
    pub fn prefetch_slot(&self, hint: SlotHint) {
        if let Some(slot) = hint.slot() {
            cache::prefetch_read(self.entries.as_ptr().wrapping_add(slot));
        }
    }

    /// Starts loading the entry in `hint`'s slot: its header and key, and a short value whole.
    #[inline]
    pub fn prefetch_entry(&self, hint: SlotHint) {
        if let Some(entry) = self.get(hint) {
            let start = entry.ptr.as_ptr().cast::<u8>().cast_const();
            cache::prefetch_read(start);
            cache::prefetch_read(start.wrapping_add(64));
        }
    }

    /// Puts `entry` in `hint`'s slot (empty: the cache just gave it out), growing the table by
    /// a sixteenth when the slot is past its end.
    pub fn put(&mut self, hint: SlotHint, entry: Entry) {
        let Some(slot) = hint.slot() else {
            return;
        };
        if slot >= self.entries.len() {
            if slot >= self.entries.capacity() {
                let extra =
                    (slot + 1 - self.entries.len()).max(self.entries.len() >> SLOT_GROWTH_SHIFT);
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
        assert!(entry.is_live_now(|| 6));
        assert!(!entry.is_live_now(|| 7));
        assert_eq!(entry.header_bytes(), HEADER_BYTES + 8 + 2);
        let plain = Entry::new(b"k", b"v", 0, 0);
        assert_eq!((plain.expires_at_ms(), plain.class()), (0, 0));
        assert_eq!(plain.header_bytes(), HEADER_BYTES);
        assert!(plain.is_live_now(|| unreachable!("no expiry, so no clock read")));
        let empty = Entry::new(b"", b"", 0, 0);
        assert_eq!((empty.key(), &*empty.value()), (&b""[..], &b""[..]));
    }

    #[test]
    fn long_keys_and_values_take_the_two_word_form() {
        let key = vec![b'k'; SHORT_KEY_MAX + 1];
        let value = vec![b'v'; 10];
        let entry = Entry::new(&key, &value, 5, 0);
        assert_eq!((entry.key(), entry.value_bytes()), (&key[..], &value[..]));
        assert_eq!(entry.header_bytes(), LONG_HEADER_BYTES + 8);
        assert_eq!(LONG_HEADER_BYTES, HEADER_BYTES + 8);
        let big = vec![b'v'; SHORT_VALUE_MAX + 1];
        let entry = Entry::new(b"k", &big, 0, 9);
        assert_eq!((entry.value_len(), entry.class()), (big.len(), 9));
        assert_eq!(entry.value_bytes(), &big[..]);
        let edge = Entry::new(&key[..SHORT_KEY_MAX], &big[..SHORT_VALUE_MAX], 0, 0);
        assert_eq!(edge.header_bytes(), HEADER_BYTES, "the largest short form");
        assert_eq!(edge.key().len(), SHORT_KEY_MAX);
        assert_eq!(edge.value_len(), SHORT_VALUE_MAX);
        assert_eq!((SHORT_KEY_MAX, SHORT_VALUE_MAX), (31, 2047));
        for (key_len, value_len) in [(SHORT_KEY_MAX + 1, 1), (1, SHORT_VALUE_MAX + 1)] {
            let entry = Entry::new(&key[..key_len], &big[..value_len], 3, 4);
            assert_eq!(entry.header_bytes(), LONG_HEADER_BYTES + 8 + 2);
            assert_eq!((entry.key().len(), entry.value_len()), (key_len, value_len));
            assert_eq!((entry.expires_at_ms(), entry.class()), (3, 4));
        }
        let typical = Entry::new(b"key:000000000000", &[b'x'; 1024], 0, 0);
        assert_eq!(
            typical.header_bytes(),
            HEADER_BYTES,
            "16-byte key, 1 KiB value"
        );
    }

    #[test]
    fn a_full_count_copies_the_value_and_never_touches_the_flags() {
        let entry = Entry::new(b"hot", b"value", 99, 3);
        // The entry holds one reference; the rest of the 13-bit count is for replies.
        let shared: Vec<Value> = (1..COUNT_MASK).map(|_| entry.value()).collect();
        assert!(shared.iter().all(Value::is_shared));
        let copy = entry.value();
        assert!(!copy.is_shared(), "the count is full: a copy");
        assert_eq!(&*copy, b"value");
        assert!(!copy.clone().is_shared());
        assert!(
            !shared[0].clone().is_shared(),
            "clones of shared values copy too"
        );
        assert_eq!(Bytes::from(copy), Bytes::from_static(b"value"));
        assert_eq!((entry.expires_at_ms(), entry.class()), (99, 3));
        assert_eq!((entry.key(), entry.value_len()), (&b"hot"[..], 5));
        drop(shared);
        assert!(
            entry.value().is_shared(),
            "references given back are shared again"
        );
        assert_eq!(entry.count().load(Ordering::Relaxed) & COUNT_MASK, 1);
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
    fn metadata_per_object_is_37_to_40_bytes() {
        // Layout (docs/cache.md): the cache's 24-byte node (the key's hash, size, queue
        // links, index chain and algorithm bits) with up to 1/16 of a node spare, 1-2 bytes
        // of index buckets (2 to 4 objects per bucket), the entry's 8-byte slot here with up
        // to 1/16 of a slot spare, and its 4-byte header.
        assert_eq!(SLOT_BYTES, 8, "a slot is one nullable pointer");
        assert_eq!(HEADER_BYTES, 4);
        assert_eq!(SLOT_SPARE, 1.0 / 16.0);
        assert_eq!(Entry::new(b"k", b"v", 0, 0).header_bytes(), HEADER_BYTES);
        assert_eq!(metadata_best(), 37.0);
        assert_eq!(metadata_worst(), 40.0);
    }

    #[test]
    fn measured_metadata_under_churn_stays_within_40_bytes() {
        // The slab, index, slots and headers as allocated (what `INFO memory` reports), in a
        // cache of the server's packing that grew, evicted and refilled.
        for n in [1_000u64, 4_097, 65_537, 200_000] {
            let mut cache =
                crate::server_cache::new(cache::Algorithm::Lru, cache::Capacity::objects(n), None);
            let mut table = KeyTable::default();
            for key in 0..n * 2 {
                let name = key.to_le_bytes();
                let hint = cache
                    .insert_slotted(
                        key.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                        1,
                        0,
                        |_, _, victim| {
                            table.take(victim).expect("every victim had an entry");
                        },
                    )
                    .unwrap();
                table.put(hint, Entry::new(&name, b"v", 0, 0));
            }
            assert_eq!(table.len() as u64, n);
            let per_object = (cache.metadata_bytes() + table.heap_bytes()) as f64 / n as f64;
            assert!(
                per_object <= metadata_worst(),
                "{n} objects: {per_object:.2} bytes each"
            );
        }
    }
}
