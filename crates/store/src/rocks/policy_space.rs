//! The policy registry's column family: sorted keys, written in atomic batches through the
//! same WAL guard as the data.

use super::guard::WalGuard;
use super::{rocks_error, POLICY_FAMILY};
use crate::StoreError;
use rocksdb::{WriteBatch, DB};
use std::sync::Arc;

/// A key and its value, owned.
pub type Pair = (Vec<u8>, Vec<u8>);

/// The registry's view of RocksDB: sorted keys in [`POLICY_FAMILY`], written in atomic
/// batches that reach the operating system (and, with `sync`, the disk) before returning.
#[derive(Clone)]
pub struct PolicySpace {
    pub(super) db: Arc<DB>,
    pub(super) guard: Arc<WalGuard>,
}

impl PolicySpace {
    fn family(&self) -> Result<&rocksdb::ColumnFamily, StoreError> {
        self.db
            .cf_handle(POLICY_FAMILY)
            .ok_or_else(|| StoreError(format!("RocksDB: column family {POLICY_FAMILY} missing")))
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.db.get_cf(self.family()?, key).map_err(rocks_error)
    }

    /// Applies the puts (`Some`) and deletes (`None`) atomically.
    pub fn write(
        &self,
        changes: &[(Vec<u8>, Option<Vec<u8>>)],
        sync: bool,
    ) -> Result<(), StoreError> {
        let family = self.family()?;
        let mut batch = WriteBatch::default();
        for (key, value) in changes {
            match value {
                Some(value) => batch.put_cf(family, key, value),
                None => batch.delete_cf(family, key),
            }
        }
        self.guard.write(&self.db, |db| db.write(batch))?;
        // The WAL is flushed by hand (see `open`): without this a SIGKILL could lose the batch.
        self.guard.flush(&self.db, sync)
    }

    /// Every pair whose key starts with `prefix`, in key order.
    pub fn scan(&self, prefix: &[u8]) -> Result<Vec<Pair>, StoreError> {
        let mut iter = self.db.raw_iterator_cf(self.family()?);
        iter.seek(prefix);
        let mut out = Vec::new();
        while iter.valid() {
            let (Some(key), Some(value)) = (iter.key(), iter.value()) else {
                break;
            };
            if !key.starts_with(prefix) {
                break;
            }
            out.push((key.to_vec(), value.to_vec()));
            iter.next();
        }
        iter.status().map_err(rocks_error)?;
        Ok(out)
    }
}
