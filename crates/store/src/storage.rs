//! What the server asks of a store, whichever holds the data: [`Storage`]. Capabilities only
//! some back ends have are accessors that answer `None` where they are missing, so a caller
//! says what it does without one instead of matching on the back end:
//!
//! - [`Storage::slot_data`]: keys this process holds itself, by slot (a migration copies and
//!   deletes them, `CLUSTER COUNTKEYSINSLOT` counts them). An upstream tier holds its keys
//!   elsewhere; a node in front of one is a pure cache tier.
//! - [`Storage::policy_space`]: a durable place for the policy registry and the warm-up
//!   record next to the data.
//! - [`Storage::upstream`]: the health of the tier behind, for INFO and `/metrics`.
//!
//! No RocksDB type appears here. The methods on the request path are statically dispatched
//! (the server holds the concrete [`crate::Store`]) and allocate nothing of their own.

use crate::rocks::{Health, PolicySpace};
use crate::slot_data::SlotData;
use crate::upstream::UpstreamStore;
use crate::{Condition, Record, StoreError};
use bytes::Bytes;
use std::future::Future;

/// The store behind the cache: it holds every key, the cache in front may drop any.
pub trait Storage: Send + Sync {
    /// The record under `key`; it may have expired (the caller then purges it).
    fn get(
        &self,
        key: &[u8],
        now_ms: u64,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send;

    /// Deletes `key` if its record has expired; returns whether it did. A back end that
    /// expires its own keys answers `false`.
    fn purge_expired(&self, key: &[u8], now_ms: u64) -> Result<bool, StoreError>;

    fn exists(
        &self,
        key: &[u8],
        now_ms: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Writes if `condition` holds; returns whether it wrote. `known_live`: the caller knows
    /// the key exists. Acknowledge only after [`Storage::commit`].
    fn set(
        &self,
        key: &[u8],
        record: &Record,
        condition: Condition,
        now_ms: u64,
        known_live: bool,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Writes every pair atomically; `known_live[i]` says the caller knows pair i's key
    /// exists (missing entries: it does not know).
    fn set_many_known(
        &self,
        pairs: &[(Bytes, Record)],
        known_live: &[bool],
        now_ms: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// [`Storage::set_many_known`] knowing nothing about the keys.
    fn set_many(
        &self,
        pairs: &[(Bytes, Record)],
        now_ms: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.set_many_known(pairs, &[], now_ms)
    }

    /// A transaction's changes (a record to put, `None` to delete), all or none: one atomic
    /// batch in RocksDB. An upstream applies one change, or only puts without expiry (one
    /// MSET), or only deletes (one DEL) atomically; any other mix is refused, never split.
    /// Acknowledge only after [`Storage::commit`].
    fn write_batch(
        &self,
        changes: &[(Bytes, Option<Record>)],
        now_ms: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// A page of the key space for SCAN and KEYS (see [`crate::rocks::KeyPage`]); an
    /// upstream's keys are not walked through this tier (an error saying so).
    fn key_page(
        &self,
        after: Option<&[u8]>,
        max: usize,
    ) -> Result<crate::rocks::KeyPage, StoreError>;

    /// FLUSHDB / FLUSHALL: deletes every key; returns them (the caller drops them from the
    /// cache). Refused in front of an upstream.
    fn delete_all(&self) -> Result<Vec<Bytes>, StoreError>;

    /// Deletes the keys; returns how many of them were live.
    fn delete(
        &self,
        keys: &[Bytes],
        now_ms: u64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Makes every earlier write as durable as the store promises (`--fsync`): in the OS at
    /// least, on disk with `always`. A no-op for a tier that acknowledged each write itself.
    fn commit(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Whether a write accepted by the store is not yet as durable as promised (it may still
    /// be lost, or have failed): replies that could reveal it wait for [`Storage::commit`].
    fn has_undurable_writes(&self) -> bool;

    /// Forces everything written so far to stable storage (shutdown).
    fn sync_now(&self) -> Result<(), StoreError>;

    /// Keys stored (DBSIZE); may ask the tier behind.
    fn key_count(&self) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// The key count without waiting on anything (INFO): exact for a local store, the count
    /// last seen for an upstream, `None` when it was never seen.
    fn key_count_now(&self) -> Option<u64>;

    /// What recovering a damaged write-ahead log lost at start, for INFO.
    fn wal_report(&self) -> Option<&str>;

    /// Whether the store accepts writes, for INFO.
    fn health(&self) -> Health;

    /// The back end's name as `/api/state` shows it: `rocksdb` or `upstream`.
    fn kind(&self) -> &'static str;

    /// One line for INFO describing where the data lives.
    fn describe(&self) -> String;

    /// Keys held by this process, by slot; `None` when they live in another tier.
    fn slot_data(&self) -> Option<&dyn SlotData>;

    /// The durable place for the policy registry and the warm-up record; `None` when the
    /// store has none (an upstream tier: the registry then lives in memory).
    fn policy_space(&self) -> Option<PolicySpace>;

    /// The tier behind this one, when the data lives there.
    fn upstream(&self) -> Option<&UpstreamStore>;
}
