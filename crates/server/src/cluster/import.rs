//! The target's side of a migration (see [`super::migrate`]): `CLUSTER IMPORT BEGIN|PUT|DEL|
//! DONE`, sent only by the source. Imported keys go through the same write path as SET and
//! DEL (store first, then cache), are acknowledged once durable, and stay invisible to
//! clients until the range is this node's: requests for it are still redirected to the
//! source. A migration that ends without the flip (aborted) leaves nothing behind: the
//! partial copy is wiped when the map shows it, or at the next BEGIN.

use super::ClusterNode;
use crate::frame::Frame;
use bytes::Bytes;
use cluster::NodeId;
use slots::{key_slot, SlotRange};
use std::sync::{Arc, Mutex};
use store::{Record, Storage};

/// Ranges being imported now.
#[derive(Default)]
pub struct Imports(Mutex<Vec<Importing>>);

struct Importing {
    range: SlotRange,
    /// The map's epoch when it began: a watched map older than that says nothing about it.
    epoch: u64,
}

impl ClusterNode {
    /// Starts (or restarts) importing `range` from `from`, which the slot map must declare.
    pub async fn import_begin(&self, range: SlotRange, from: &NodeId) -> Result<(), Frame> {
        let map = self
            .plane
            .slot_map()
            .await
            .map_err(Frame::err)?
            .ok_or_else(|| Frame::err("no slot map"))?;
        let declared = map
            .value
            .migrations
            .iter()
            .any(|m| m.range == range && &m.from == from && m.to == self.id);
        if !declared {
            return Err(Frame::err(format!(
                "no migration of slots {range} from {from} to {} is declared",
                self.id
            )));
        }
        {
            let mut imports = super::lock(&self.imports.0);
            imports.retain(|i| i.range != range);
            imports.push(Importing {
                range,
                epoch: map.value.epoch,
            });
        }
        // Whatever an earlier attempt (or an earlier ownership) left here.
        self.wipe(range);
        Ok(())
    }

    fn importing(&self, key: &[u8]) -> Result<(), Frame> {
        let slot = key_slot(key);
        if super::lock(&self.imports.0)
            .iter()
            .any(|i| i.range.contains(slot))
        {
            Ok(())
        } else {
            Err(Frame::err(format!(
                "slot {slot} is not being imported here"
            )))
        }
    }

    pub async fn import_put(
        &self,
        key: &Bytes,
        expires_at_ms: u64,
        value: &Bytes,
    ) -> Result<(), Frame> {
        self.importing(key)?;
        self.db
            .set(key, value, expires_at_ms, store::Condition::Always, None)
            .await
            .map_err(crate::frame::store_error)?;
        Ok(())
    }

    /// Many records in one store write; the cache forgets the keys (it cannot hold them:
    /// the range was wiped at BEGIN and its requests go to the source, but a stale entry
    /// must never outlive the import).
    pub async fn import_puts(&self, records: &[(Bytes, Record)]) -> Result<(), Frame> {
        self.all_importing(records.iter().map(|(k, _)| k))?;
        self.db
            .store()
            .set_many(records, crate::db::now_ms())
            .await
            .map_err(crate::frame::store_error)?;
        let keys: Vec<Bytes> = records.iter().map(|(k, _)| k.clone()).collect();
        self.db.forget_cached(&keys);
        Ok(())
    }

    pub async fn import_dels(&self, keys: &[Bytes]) -> Result<(), Frame> {
        self.all_importing(keys.iter())?;
        self.db
            .delete(keys)
            .await
            .map_err(crate::frame::store_error)?;
        Ok(())
    }

    fn all_importing<'k>(&self, keys: impl Iterator<Item = &'k Bytes>) -> Result<(), Frame> {
        let imports = super::lock(&self.imports.0);
        for key in keys {
            let slot = key_slot(key);
            if !imports.iter().any(|i| i.range.contains(slot)) {
                return Err(Frame::err(format!(
                    "slot {slot} is not being imported here"
                )));
            }
        }
        Ok(())
    }

    pub async fn import_del(&self, key: &Bytes) -> Result<(), Frame> {
        self.importing(key)?;
        self.db
            .delete(std::slice::from_ref(key))
            .await
            .map_err(crate::frame::store_error)?;
        Ok(())
    }

    /// The source says the map gave this node the range: serve it now.
    pub async fn import_done(&self, range: SlotRange) -> Result<(), Frame> {
        let map = self
            .plane
            .slot_map()
            .await
            .map_err(Frame::err)?
            .ok_or_else(|| Frame::err("no slot map"))?;
        if map.value.owner(range.start) != Some(&self.id) {
            return Err(Frame::err(format!(
                "slots {range} are not mine in the slot map"
            )));
        }
        super::lock(&self.imports.0).retain(|i| i.range != range);
        self.adopt(map);
        Ok(())
    }

    /// Drops imports the map no longer declares: kept if the range became this node's,
    /// wiped otherwise (the migration was aborted).
    pub(crate) fn cleanup_imports(self: &Arc<Self>) {
        let Some(map) = self.current_map() else {
            return;
        };
        let mut ended = Vec::new();
        super::lock(&self.imports.0).retain(|i| {
            let declared = map
                .value
                .migrations
                .iter()
                .any(|m| m.range == i.range && m.to == self.id);
            if map.value.epoch < i.epoch || declared {
                return true;
            }
            ended.push(i.range);
            false
        });
        for range in ended {
            if map.value.owner(range.start) != Some(&self.id) {
                store::log_line!(
                    "mantle: cluster: import of slots {range} aborted; dropping the partial copy"
                );
                self.wipe(range);
            }
        }
    }
}
