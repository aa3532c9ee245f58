//! The keys a store holds in this process, seen by slot ([`SlotData`]): what a slot
//! migration copies and deletes and `CLUSTER COUNTKEYSINSLOT` counts. A capability of the
//! embedded store only (see [`crate::Storage::slot_data`]).

use crate::{Record, StoreError};
use ::slots::SlotRange;
use bytes::Bytes;

/// Records of a slot range in key order, a batch at a time (see [`SlotData::stream_range`]).
pub type RangeBatch = Vec<(Bytes, Record)>;

/// Keys this process stores, seen as slots: every key is kept behind its slot, so a slot
/// range is one contiguous run to count, copy or delete.
pub trait SlotData: Send + Sync {
    /// The stored record, expired or not, without waiting on anything.
    fn stored(&self, key: &[u8]) -> Result<Option<Record>, StoreError>;

    /// Keys stored in `slot` (expired ones not yet purged included, as DBSIZE counts).
    fn count_in_slot(&self, slot: u16) -> Result<u64, StoreError>;

    /// Up to `max` keys stored in `slot`, in key order.
    fn keys_in_slot(&self, slot: u16, max: usize) -> Result<Vec<Bytes>, StoreError>;

    /// Starts noting writes to `range` (ranges tracked at once never overlap: the slot map
    /// refuses overlapping migrations); starting again forgets what was noted.
    fn track(&self, range: SlotRange);

    /// The keys of `range` noted since the last call.
    fn take_dirty(&self, range: SlotRange) -> Vec<Bytes>;

    fn untrack(&self, range: SlotRange);

    /// Streams every record of `range` as it is at the moment of the call, in batches of
    /// about `batch_bytes`. Returns once that point in time is fixed.
    fn stream_range(
        &self,
        range: SlotRange,
        batch_bytes: usize,
    ) -> tokio::sync::mpsc::Receiver<Result<RangeBatch, StoreError>>;

    /// Deletes every key of `range`; returns the keys it removed (the caller drops them from
    /// the cache).
    fn delete_range(&self, range: SlotRange) -> Result<Vec<Bytes>, StoreError>;
}
