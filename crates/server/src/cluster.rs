//! A node of a Mantle cluster (`mantle serve --cluster etcd://...`): joins the control plane
//! in `crates/cluster`, follows the slot map, and answers for keys it does not own the way
//! Redis Cluster does (`-MOVED slot host:port`), so cluster-aware clients route themselves.
//! Without `--cluster` none of this exists and a node runs alone.
//!
//! The routing table a request consults is rebuilt whenever the watched view changes and
//! swapped in whole, so a request sees one consistent map: one read lock and one array
//! index per keyed request.

use crate::frame::Frame;
use bytes::Bytes;
use cluster::{
    key_slot, ClusterConfig, ClusterView, ClusterWatch, ControlPlane, Member, Membership, NodeId,
    SLOTS,
};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// What `--cluster` and its companion flags say.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// `etcd://HOST:PORT[,HOST:PORT...]`.
    pub etcd: String,
    pub name: String,
    pub node_id: String,
    /// `host:port` clients are sent to (`-MOVED`), default the listen address.
    pub advertise: Option<String>,
    /// Lease TTL: how long after a crash the node disappears from the cluster.
    pub ttl: Duration,
}

/// Where one slot's requests go.
#[derive(Debug, Clone)]
enum Route {
    Mine,
    /// Another live node owns it: `-MOVED slot addr`.
    Moved(Arc<str>),
    /// Nobody (alive) owns it.
    Down,
}

/// The routing table built from one view of the cluster.
#[derive(Debug)]
pub struct Routing {
    routes: Vec<Route>,
    pub view: ClusterView,
}

impl Routing {
    fn build(me: &NodeId, view: ClusterView) -> Routing {
        let mut routes = vec![Route::Down; usize::from(SLOTS)];
        if let Some(map) = &view.slot_map {
            let addrs: BTreeMap<&NodeId, Arc<str>> = view
                .members
                .values()
                .map(|m| (&m.id, Arc::from(m.addr.as_str())))
                .collect();
            for (node, ranges) in &map.value.owners {
                let route = if node == me {
                    Route::Mine
                } else {
                    match addrs.get(node) {
                        Some(addr) => Route::Moved(Arc::clone(addr)),
                        None => Route::Down,
                    }
                };
                for range in ranges {
                    for slot in range.slots() {
                        routes[usize::from(slot)] = route.clone();
                    }
                }
            }
        }
        Routing { routes, view }
    }

    /// Slots whose owner is not a live member.
    pub fn failed_slots(&self) -> usize {
        self.routes
            .iter()
            .filter(|r| matches!(r, Route::Down))
            .count()
    }
}

pub struct ClusterNode {
    pub id: NodeId,
    pub addr: String,
    plane: ControlPlane,
    membership: tokio::sync::Mutex<Option<Membership>>,
    routing: Arc<RwLock<Arc<Routing>>>,
    _watch: ClusterWatch,
    follower: tokio::task::JoinHandle<()>,
}

impl ClusterNode {
    /// Joins the cluster: connects to etcd, announces this node, gives it every slot if the
    /// cluster has no map yet, and starts following the map.
    pub async fn join(
        settings: &ClusterSettings,
        listen: std::net::SocketAddr,
    ) -> anyhow::Result<ClusterNode> {
        let id = NodeId::new(&settings.node_id).map_err(|e| anyhow::anyhow!("--node-id: {e}"))?;
        let addr = match &settings.advertise {
            Some(a) => {
                check_host_port(a).map_err(|e| anyhow::anyhow!("--advertise: {e}"))?;
                a.clone()
            }
            None if listen.ip().is_unspecified() => anyhow::bail!(
                "--advertise HOST:PORT is required when listening on {listen} (clients must be told a reachable address)"
            ),
            None => listen.to_string(),
        };
        let config = ClusterConfig::new(&settings.etcd, &settings.name)
            .map_err(|e| anyhow::anyhow!("--cluster: {e}"))?;
        let plane = ControlPlane::connect(config).await?;
        let member = Member {
            id: id.clone(),
            addr: addr.clone(),
            joined_ms: cluster::control::now_ms(),
        };
        let membership = plane.join(member, settings.ttl).await?;
        plane.bootstrap(&id).await?;
        let watch = plane.watch().await?;
        let routing = Arc::new(RwLock::new(Arc::new(Routing::build(&id, watch.view()))));
        let follower = {
            let mut rx = watch.subscribe();
            let routing = Arc::clone(&routing);
            let id = id.clone();
            tokio::spawn(async move {
                while rx.changed().await.is_ok() {
                    let view = rx.borrow_and_update().clone();
                    let next = Arc::new(Routing::build(&id, view));
                    *routing.write().unwrap_or_else(|e| e.into_inner()) = next;
                }
            })
        };
        Ok(ClusterNode {
            id,
            addr,
            plane,
            membership: tokio::sync::Mutex::new(Some(membership)),
            routing,
            _watch: watch,
            follower,
        })
    }

    /// The current routing table.
    pub fn routing(&self) -> Arc<Routing> {
        Arc::clone(&self.routing.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn plane(&self) -> &ControlPlane {
        &self.plane
    }

    /// Checks that this node serves every key of a request: `Err` is the redirection or
    /// error to reply instead. Keys of one request must share a slot (`-CROSSSLOT`).
    pub fn route<'k>(&self, mut keys: impl Iterator<Item = &'k Bytes>) -> Result<(), Frame> {
        let Some(first) = keys.next() else {
            return Ok(());
        };
        let slot = key_slot(first);
        for key in keys {
            if key_slot(key) != slot {
                return Err(Frame::Error(
                    "CROSSSLOT Keys in request don't hash to the same slot".into(),
                ));
            }
        }
        let routing = self.routing.read().unwrap_or_else(|e| e.into_inner());
        match &routing.routes[usize::from(slot)] {
            Route::Mine => Ok(()),
            Route::Moved(addr) => Err(Frame::Error(format!("MOVED {slot} {addr}"))),
            Route::Down => Err(Frame::Error("CLUSTERDOWN Hash slot not served".into())),
        }
    }

    /// Leaves the cluster at once (graceful shutdown): the lease is revoked, so the others
    /// see this node gone without waiting for its TTL.
    pub async fn leave(&self) {
        if let Some(m) = self.membership.lock().await.take() {
            if let Err(e) = m.leave().await {
                crate::log::log_line!("mantle: cluster: leaving the cluster: {e}");
            }
        }
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        self.follower.abort();
    }
}

fn check_host_port(text: &str) -> Result<(), String> {
    match text.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Ok(())
        }
        _ => Err(format!("expected HOST:PORT, got {text:?}")),
    }
}
