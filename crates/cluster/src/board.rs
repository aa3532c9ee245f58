//! The metrics board: each node's per-tick metrics under `/mantle/<cluster>/load/<node>`,
//! so every node's policy sees `servers[i]` for every node (DESIGN §8). A record lives under
//! its node's own lease, kept alive in the background: a node that dies drops off the board
//! within the TTL instead of showing its last load for ever.
//!
//! The records are opaque bytes here (the server stores the policy crate's `Metrics` as
//! JSON); this crate only places and reads them. A node reads the whole board at each tick
//! rather than following a watch: one small range read per tick, and a tick then sees every
//! record published before it, which manual ticks (tests, `replay --server`) rely on.

use crate::control::{ClusterError, ControlPlane};
use crate::node::NodeId;
use etcd_client::{GetOptions, PutOptions};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// This node's place on the board.
pub struct Board {
    plane: ControlPlane,
    node: NodeId,
    ttl_secs: i64,
    /// 0 until the first publish grants one.
    lease: Arc<AtomicI64>,
    keeper: JoinHandle<()>,
}

impl Board {
    /// Opens the board of `plane`'s cluster for `node`; records outlive a silent node by
    /// about `ttl`. Must run on a tokio runtime (it starts the lease keeper).
    pub fn open(plane: ControlPlane, node: NodeId, ttl: Duration) -> Board {
        let ttl_secs = ttl.as_secs().max(1) as i64;
        let lease = Arc::new(AtomicI64::new(0));
        let keeper = tokio::spawn(keep_alive(plane.clone(), Arc::clone(&lease), ttl_secs));
        Board {
            plane,
            node,
            ttl_secs,
            lease,
            keeper,
        }
    }

    fn prefix(&self) -> String {
        self.plane.key("load/")
    }

    /// Replaces this node's record.
    pub async fn publish(&self, record: Vec<u8>) -> Result<(), ClusterError> {
        let key = format!("{}{}", self.prefix(), self.node);
        for _ in 0..2 {
            let mut lease = self.lease.load(Ordering::Relaxed);
            if lease == 0 {
                lease = self
                    .plane
                    .bounded(self.plane.client().lease_grant(self.ttl_secs, None))
                    .await?
                    .id();
                self.lease.store(lease, Ordering::Relaxed);
            }
            let mut client = self.plane.client();
            let put = client.put(
                key.clone(),
                record.clone(),
                Some(PutOptions::new().with_lease(lease)),
            );
            match self.plane.bounded(put).await {
                Ok(_) => return Ok(()),
                // The lease expired (etcd was away longer than the TTL): take a new one.
                Err(ClusterError::Unreachable { reason, .. })
                    if reason.contains("lease not found") =>
                {
                    self.lease.store(0, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        Err(ClusterError::Corrupt(
            "the board's lease keeps expiring".to_string(),
        ))
    }

    /// Every node's record, by node.
    pub async fn read(&self) -> Result<BTreeMap<NodeId, Vec<u8>>, ClusterError> {
        let prefix = self.prefix();
        let mut client = self.plane.client();
        let get = client.get(prefix.clone(), Some(GetOptions::new().with_prefix()));
        let resp = self.plane.bounded(get).await?;
        let mut board = BTreeMap::new();
        for kv in resp.kvs() {
            let key = String::from_utf8_lossy(kv.key());
            if let Some(id) = key.strip_prefix(&prefix).and_then(|k| NodeId::new(k).ok()) {
                board.insert(id, kv.value().to_vec());
            }
        }
        Ok(board)
    }
}

impl Drop for Board {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

/// Keeps the board's lease alive; a lapsed one is replaced by the next publish.
async fn keep_alive(plane: ControlPlane, lease: Arc<AtomicI64>, ttl_secs: i64) {
    let period = Duration::from_millis((ttl_secs as u64 * 1000 / 3).max(200));
    loop {
        tokio::time::sleep(period).await;
        let id = lease.load(Ordering::Relaxed);
        if id == 0 {
            continue;
        }
        let alive = async {
            let mut client = plane.client();
            let (mut keeper, mut stream) = client.lease_keep_alive(id).await?;
            keeper.keep_alive().await?;
            Ok::<bool, etcd_client::Error>(stream.message().await?.is_some_and(|r| r.ttl() > 0))
        };
        if let Ok(Ok(false)) = tokio::time::timeout(plane.config().timeout, alive).await {
            let _ = lease.compare_exchange(id, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}
