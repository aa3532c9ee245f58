//! The cluster's function libraries in etcd (seed 003, Malacology's interface propagation):
//! one key per library, `/mantle/<cluster>/functions/lib/<name>`, holding every kept version
//! of it (the value is opaque here; the server encodes it). A library is never deleted from
//! etcd, only emptied, so the largest `mod_revision` under the prefix grows with every
//! change: one number that says whether a node's copy of all libraries is current.
//!
//! Changes are compare-and-swap transactions on the one key's `mod_revision` (absent: its
//! `create_revision` is 0), so two nodes loading the same library at once never lose a
//! version: the loser reads again and retries.

use crate::control::{ClusterError, ControlPlane};
use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp};

/// Attempts at a compare-and-swap while other nodes keep changing the same library.
const SWAP_ATTEMPTS: usize = 64;

/// Every library as read at one etcd revision.
#[derive(Debug, Clone, Default)]
pub struct FunctionSnapshot {
    /// `(name, value)` of every library key.
    pub libraries: Vec<(String, Vec<u8>)>,
    /// The largest `mod_revision` among them (0: none was ever written).
    pub revision: i64,
}

#[derive(Clone)]
pub struct FunctionStore {
    plane: ControlPlane,
}

impl FunctionStore {
    pub fn new(plane: ControlPlane) -> FunctionStore {
        FunctionStore { plane }
    }

    fn prefix(&self) -> String {
        self.plane.key("functions/lib/")
    }

    fn key(&self, name: &str) -> String {
        self.plane.key(&format!("functions/lib/{name}"))
    }

    /// The revision of the latest change to any library: one linearizable read of a single
    /// key's metadata (etcd's reads go through its leader), no values.
    pub async fn revision(&self) -> Result<i64, ClusterError> {
        let options = GetOptions::new()
            .with_prefix()
            .with_keys_only()
            .with_sort(SortTarget::Mod, SortOrder::Descend)
            .with_limit(1);
        let resp = self
            .plane
            .bounded(self.plane.client().get(self.prefix(), Some(options)))
            .await?;
        Ok(resp.kvs().first().map_or(0, |kv| kv.mod_revision()))
    }

    /// Every library, read at one revision.
    pub async fn snapshot(&self) -> Result<FunctionSnapshot, ClusterError> {
        let prefix = self.prefix();
        let resp = self
            .plane
            .bounded(
                self.plane
                    .client()
                    .get(prefix.clone(), Some(GetOptions::new().with_prefix())),
            )
            .await?;
        let mut snapshot = FunctionSnapshot::default();
        for kv in resp.kvs() {
            snapshot.revision = snapshot.revision.max(kv.mod_revision());
            let name = String::from_utf8_lossy(&kv.key()[prefix.len()..]).into_owned();
            snapshot.libraries.push((name, kv.value().to_vec()));
        }
        Ok(snapshot)
    }

    /// Changes library `name`: `change` gets its current value (`None`: never written) and
    /// returns the new one, or an error that is passed back unchanged. Returns the new value
    /// and the revision it was written at.
    pub async fn update<E>(
        &self,
        name: &str,
        mut change: impl FnMut(Option<&[u8]>) -> Result<Vec<u8>, E>,
    ) -> Result<Result<(Vec<u8>, i64), E>, ClusterError> {
        let key = self.key(name);
        for _ in 0..SWAP_ATTEMPTS {
            let resp = self
                .plane
                .bounded(self.plane.client().get(key.clone(), None))
                .await?;
            let current = resp.kvs().first();
            let compare = match current {
                Some(kv) => Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision()),
                None => Compare::create_revision(key.clone(), CompareOp::Equal, 0),
            };
            let value = match change(current.map(|kv| kv.value())) {
                Ok(value) => value,
                Err(e) => return Ok(Err(e)),
            };
            let txn =
                Txn::new()
                    .when([compare])
                    .and_then([TxnOp::put(key.clone(), value.clone(), None)]);
            let resp = self.plane.bounded(self.plane.client().txn(txn)).await?;
            if resp.succeeded() {
                let revision = resp.header().map_or(0, |h| h.revision());
                return Ok(Ok((value, revision)));
            }
        }
        Err(ClusterError::Conflict(SWAP_ATTEMPTS))
    }
}
