//! A RocksDB write batch encoded on the Rust side and handed to RocksDB once, when it is
//! written. Building a `rocksdb::WriteBatch` put by put costs a C call and a `std::string`
//! append per write (about 600 instructions of a SET's ~12,000 in the profile, plus the
//! slot-prefixed key and the record encoded into scratch buffers first); here a put is a few
//! appends to one vector, and the batch crosses into RocksDB as one copy.
//!
//! The layout is RocksDB's own `WriteBatch` representation (`db/write_batch.cc`): a 12-byte
//! header (sequence number, filled in by RocksDB, and the record count, little-endian), then
//! per put into the default column family the type byte `kTypeValue` and the key and the
//! value, each preceded by its length as a varint32. A unit test checks the bytes against
//! the ones `rocksdb::WriteBatch::put` produces.

use super::super::record::Record;
use super::{StoreError, SLOT_PREFIX};
use rocksdb::WriteBatch;

const HEADER: usize = 12;
/// `kTypeValue`: a put into the default column family.
const TYPE_VALUE: u8 = 0x1;

pub(crate) struct Batch {
    rep: Vec<u8>,
    count: u32,
}

impl Default for Batch {
    fn default() -> Batch {
        Batch {
            rep: vec![0; HEADER],
            count: 0,
        }
    }
}

impl Batch {
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.count as usize
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether `key` and `record` fit a batch entry (RocksDB's lengths are 32-bit); a put
    /// that does not fit must be refused before [`Batch::put_record`].
    pub(crate) fn fits(key: &[u8], record: &Record) -> Result<(), StoreError> {
        if SLOT_PREFIX + key.len() > u32::MAX as usize || record.encoded_len() > u32::MAX as usize {
            return Err(StoreError(
                "key or value too large for the store (4 GiB at most)".into(),
            ));
        }
        Ok(())
    }

    /// Adds a put of `value` under the stored key `key` as given.
    #[cfg(test)]
    pub(crate) fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        let (key, value) = (key.as_ref(), value.as_ref());
        self.rep.push(TYPE_VALUE);
        put_varint32(&mut self.rep, key.len() as u32);
        self.rep.extend_from_slice(key);
        put_varint32(&mut self.rep, value.len() as u32);
        self.rep.extend_from_slice(value);
        self.count += 1;
    }

    /// Adds a put of `record` under `key`'s stored form (slot prefix, then the key: see
    /// `stored_key`), encoding both straight into the batch. Call [`Batch::fits`] first.
    pub(crate) fn put_record(&mut self, key: &[u8], record: &Record) {
        let slot = ::slots::key_slot(key).to_be_bytes();
        self.rep
            .reserve(1 + 5 + SLOT_PREFIX + key.len() + 5 + record.encoded_len());
        self.rep.push(TYPE_VALUE);
        put_varint32(&mut self.rep, (SLOT_PREFIX + key.len()) as u32);
        self.rep.extend_from_slice(&slot);
        self.rep.extend_from_slice(key);
        put_varint32(&mut self.rep, record.encoded_len() as u32);
        record.append_to(&mut self.rep);
        self.count += 1;
    }

    /// The batch as RocksDB's, for `DB::write`.
    pub(crate) fn into_write_batch(mut self) -> WriteBatch {
        self.rep[8..HEADER].copy_from_slice(&self.count.to_le_bytes());
        WriteBatch::from_data(&self.rep)
    }
}

fn put_varint32(out: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    /// The same puts through RocksDB's own `WriteBatch` give the same bytes, for lengths on
    /// both sides of every varint width that matters (1, 2 and 3 bytes).
    #[test]
    fn batches_match_rocksdbs_encoding() {
        let mut ours = Batch::default();
        let mut theirs = WriteBatch::default();
        for (klen, vlen) in [(0, 0), (1, 64), (127, 128), (128, 16_383), (300, 16_384)] {
            let key = vec![b'k'; klen];
            let value = vec![b'v'; vlen];
            ours.put(&key, &value);
            theirs.put(&key, &value);
        }
        for expires_at_ms in [0, 1_700_000_000_123] {
            let record = Record {
                value: Bytes::from(vec![7u8; 200]),
                expires_at_ms,
            };
            let key = b"user:1000";
            Batch::fits(key, &record).unwrap();
            ours.put_record(key, &record);
            let mut stored = ::slots::key_slot(key).to_be_bytes().to_vec();
            stored.extend_from_slice(key);
            theirs.put(&stored, record.encode());
        }
        assert_eq!(ours.len(), theirs.len());
        let ours = ours.into_write_batch();
        assert_eq!(ours.len(), theirs.len());
        assert_eq!(ours.data(), theirs.data());
    }

    #[test]
    fn an_empty_batch_is_empty() {
        let batch = Batch::default();
        assert!(batch.is_empty());
        assert_eq!(batch.into_write_batch().len(), 0);
    }
}
