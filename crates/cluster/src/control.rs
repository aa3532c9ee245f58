//! The control plane on etcd (seed 003's lesson: reuse hardened consensus). Under one prefix
//! per cluster, `/mantle/<cluster>/`, it keeps:
//!
//! - `members/<id>`: each live node's [`Member`] record, put under a lease the node keeps
//!   alive, so a node that dies disappears within the lease's TTL;
//! - `slotmap`: the [`SlotMap`], changed only by transactions that compare the revision the
//!   change was computed from, so concurrent changes can never both apply.
//!
//! Every call is bounded by the configured timeout: when etcd is unreachable a caller gets
//! [`ClusterError::Unreachable`] quickly instead of hanging, and a node keeps serving with
//! the last map its [`ClusterWatch`] saw.

use crate::lease::LeaseClock;
use crate::node::{Member, NodeId};
use crate::slotmap::{MapError, SlotMap};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often a read-modify-write of the slot map is retried when another writer got there
/// first, before the conflict is reported.
const CAS_ATTEMPTS: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("etcd at {endpoints} is unreachable: {reason}")]
    Unreachable { endpoints: String, reason: String },
    #[error("bad cluster address {0:?}: expected etcd://HOST:PORT[,HOST:PORT...]")]
    BadAddress(String),
    #[error("bad cluster name {0:?}: expected 1 to 64 letters, digits, '-' or '_'")]
    BadName(String),
    #[error("node {0} is not a live member of the cluster")]
    NotAMember(NodeId),
    #[error("node {0} is already a live member of the cluster")]
    MemberExists(NodeId),
    #[error("the slot map changed {0} times while this change was being made; try again")]
    Conflict(usize),
    /// An operator command could not finish what it was asked (the message says why and
    /// what state the cluster is left in).
    #[error("{0}")]
    Incomplete(String),
    #[error("the slot map in etcd is unreadable: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Map(#[from] MapError),
}

/// Where the cluster's etcd is and how long to wait for it.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// `http://host:port` endpoints.
    pub endpoints: Vec<String>,
    pub name: String,
    /// Bound on every etcd call (connection included).
    pub timeout: Duration,
}

impl ClusterConfig {
    /// Parses `etcd://HOST:PORT[,HOST:PORT...]` and checks the cluster name.
    pub fn new(address: &str, name: &str) -> Result<ClusterConfig, ClusterError> {
        let rest = address
            .strip_prefix("etcd://")
            .ok_or_else(|| ClusterError::BadAddress(address.to_string()))?;
        let endpoints: Vec<String> = rest
            .split(',')
            .map(|hp| {
                let ok = hp
                    .rsplit_once(':')
                    .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
                ok.then(|| format!("http://{hp}"))
                    .ok_or_else(|| ClusterError::BadAddress(address.to_string()))
            })
            .collect::<Result<_, _>>()?;
        if NodeId::new(name).is_err() {
            return Err(ClusterError::BadName(name.to_string()));
        }
        Ok(ClusterConfig {
            endpoints,
            name: name.to_string(),
            timeout: Duration::from_secs(2),
        })
    }
}

/// A value read from etcd with the revision of its last change (what a compare-and-swap
/// compares).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    pub value: T,
    pub revision: i64,
}

/// What a node knows of the cluster: the live members and the slot map, as of `revision`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterView {
    pub members: BTreeMap<NodeId, Member>,
    pub slot_map: Option<Versioned<SlotMap>>,
    /// The etcd revision the view reflects.
    pub revision: i64,
    /// False while etcd cannot be reached: the view is the last one seen.
    pub connected: bool,
}

#[derive(Clone)]
pub struct ControlPlane {
    client: Client,
    config: ClusterConfig,
    prefix: String,
}

impl ControlPlane {
    /// Connects to etcd and checks it answers.
    pub async fn connect(config: ClusterConfig) -> Result<ControlPlane, ClusterError> {
        let options = ConnectOptions::new()
            .with_connect_timeout(config.timeout)
            .with_timeout(config.timeout)
            .with_keep_alive(Duration::from_secs(2), config.timeout);
        let unreachable = |reason: String| ClusterError::Unreachable {
            endpoints: config.endpoints.join(","),
            reason,
        };
        let client = match tokio::time::timeout(
            config.timeout,
            Client::connect(&config.endpoints, Some(options)),
        )
        .await
        {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Err(_) => return Err(unreachable(format!("no answer in {:?}", config.timeout))),
        };
        let prefix = format!("/mantle/{}/", config.name);
        let plane = ControlPlane {
            client,
            config,
            prefix,
        };
        plane.bounded(plane.client.clone().status()).await?;
        Ok(plane)
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// A handle on the etcd client, for the other stores under this cluster's prefix.
    pub(crate) fn client(&self) -> Client {
        self.client.clone()
    }

    /// The etcd key of `rest` under this cluster's prefix.
    pub(crate) fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    fn member_key(&self, id: &NodeId) -> String {
        format!("{}members/{id}", self.prefix)
    }

    fn members_prefix(&self) -> String {
        format!("{}members/", self.prefix)
    }

    fn slot_map_key(&self) -> String {
        format!("{}slotmap", self.prefix)
    }

    /// Runs one etcd call under the timeout.
    pub(crate) async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, ClusterError> {
        let unreachable = |reason: String| ClusterError::Unreachable {
            endpoints: self.config.endpoints.join(","),
            reason,
        };
        match tokio::time::timeout(self.config.timeout, call).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(unreachable(e.to_string())),
            Err(_) => Err(unreachable(format!(
                "no answer in {:?}",
                self.config.timeout
            ))),
        }
    }

    /// The live members.
    pub async fn members(&self) -> Result<BTreeMap<NodeId, Member>, ClusterError> {
        let mut client = self.client.clone();
        let resp = self
            .bounded(client.get(self.members_prefix(), Some(GetOptions::new().with_prefix())))
            .await?;
        let mut members = BTreeMap::new();
        for kv in resp.kvs() {
            let member = decode_member(kv.value())?;
            members.insert(member.id.clone(), member);
        }
        Ok(members)
    }

    /// Announces `member` under a lease of `ttl`, kept alive in the background until the
    /// returned [`Membership`] is left or dropped. A member of the same id that is still
    /// live (a previous run killed less than a TTL ago) is waited out for up to `ttl` plus
    /// the timeout, then reported.
    pub async fn join(&self, member: Member, ttl: Duration) -> Result<Membership, ClusterError> {
        let ttl_secs = ttl.as_secs().max(1) as i64;
        let key = self.member_key(&member.id);
        let value = serde_json::to_vec(&member).expect("a member serialises");
        let give_up = tokio::time::Instant::now() + ttl + self.config.timeout;
        let clock = Arc::new(LeaseClock::default());
        let lease = loop {
            let sent = Instant::now();
            let lease = self
                .bounded(self.client.clone().lease_grant(ttl_secs, None))
                .await?
                .id();
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    value.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let resp = self.bounded(self.client.clone().txn(txn)).await?;
            if resp.succeeded() {
                clock.confirm(sent, Duration::from_secs(ttl_secs as u64));
                clock.rejoined(resp.header().map_or(0, |h| h.revision()));
                break lease;
            }
            let _ = self.client.clone().lease_revoke(lease).await;
            if tokio::time::Instant::now() >= give_up {
                return Err(ClusterError::MemberExists(member.id));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let (state_tx, state_rx) = watch::channel(MembershipState::Live);
        let lease = Arc::new(AtomicI64::new(lease));
        let keeper = tokio::spawn(keep_alive(
            self.clone(),
            key,
            value,
            Arc::clone(&lease),
            ttl_secs,
            state_tx,
            Arc::clone(&clock),
        ));
        Ok(Membership {
            plane: self.clone(),
            lease,
            clock,
            keeper,
            state: state_rx,
            id: member.id,
        })
    }

    /// The slot map and its revision, `None` in a cluster that has none yet.
    pub async fn slot_map(&self) -> Result<Option<Versioned<SlotMap>>, ClusterError> {
        let resp = self
            .bounded(self.client.clone().get(self.slot_map_key(), None))
            .await?;
        resp.kvs()
            .first()
            .map(|kv| {
                Ok(Versioned {
                    value: decode_map(kv.value())?,
                    revision: kv.mod_revision(),
                })
            })
            .transpose()
    }

    /// The first node of an empty cluster takes every slot; in a cluster that has a map
    /// already, this returns that map unchanged.
    pub async fn bootstrap(&self, node: &NodeId) -> Result<Versioned<SlotMap>, ClusterError> {
        let map = SlotMap::all_to(node);
        match self.compare_and_swap(0, &map).await? {
            Ok(revision) => Ok(Versioned {
                value: map,
                revision,
            }),
            Err(current) => Ok(current),
        }
    }

    /// Writes `next` if the map's revision is still `expected` (0: no map yet). On a
    /// conflict returns the map as it is now.
    pub async fn compare_and_swap(
        &self,
        expected: i64,
        next: &SlotMap,
    ) -> Result<Result<i64, Versioned<SlotMap>>, ClusterError> {
        next.validate()?;
        let key = self.slot_map_key();
        let value = serde_json::to_vec(next).expect("a slot map serialises");
        let compare = if expected == 0 {
            Compare::create_revision(key.clone(), CompareOp::Equal, 0)
        } else {
            Compare::mod_revision(key.clone(), CompareOp::Equal, expected)
        };
        let txn = Txn::new()
            .when([compare])
            .and_then([TxnOp::put(key.clone(), value, None)])
            .or_else([TxnOp::get(key, None)]);
        let resp = self.bounded(self.client.clone().txn(txn)).await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        if resp.succeeded() {
            return Ok(Ok(revision));
        }
        for op in resp.op_responses() {
            if let TxnOpResponse::Get(get) = op {
                if let Some(kv) = get.kvs().first() {
                    return Ok(Err(Versioned {
                        value: decode_map(kv.value())?,
                        revision: kv.mod_revision(),
                    }));
                }
            }
        }
        // The map was deleted under us: report it as an empty one at revision 0.
        Ok(Err(Versioned {
            value: SlotMap::default(),
            revision: 0,
        }))
    }

    /// Applies `change` to the current map and writes the result, reading again and
    /// retrying if another writer changed the map in between. `change` sees the map as
    /// stored (an empty one if none is).
    pub async fn update(
        &self,
        mut change: impl FnMut(&SlotMap) -> Result<SlotMap, MapError>,
    ) -> Result<Versioned<SlotMap>, ClusterError> {
        let mut current = self.slot_map().await?.unwrap_or(Versioned {
            value: SlotMap::default(),
            revision: 0,
        });
        for _ in 0..CAS_ATTEMPTS {
            let next = change(&current.value)?;
            match self.compare_and_swap(current.revision, &next).await? {
                Ok(revision) => {
                    return Ok(Versioned {
                        value: next,
                        revision,
                    })
                }
                Err(now) => current = now,
            }
        }
        Err(ClusterError::Conflict(CAS_ATTEMPTS))
    }

    /// Starts following members and the slot map. The view is complete from the first
    /// update on; after etcd comes back from an outage the watch resumes by reading the
    /// whole state again, so no change is missed.
    pub async fn watch(&self) -> Result<ClusterWatch, ClusterError> {
        let first = self.read_view().await?;
        let (tx, rx) = watch::channel(first);
        let task = tokio::spawn(follow(self.clone(), tx));
        Ok(ClusterWatch { view: rx, task })
    }

    async fn read_view(&self) -> Result<ClusterView, ClusterError> {
        let resp = self
            .bounded(
                self.client
                    .clone()
                    .get(self.prefix.clone(), Some(GetOptions::new().with_prefix())),
            )
            .await?;
        let mut view = ClusterView {
            revision: resp.header().map_or(0, |h| h.revision()),
            connected: true,
            ..ClusterView::default()
        };
        for kv in resp.kvs() {
            self.apply(
                &mut view,
                EventType::Put,
                kv.key(),
                kv.value(),
                kv.mod_revision(),
            )?;
        }
        Ok(view)
    }

    fn apply(
        &self,
        view: &mut ClusterView,
        kind: EventType,
        key: &[u8],
        value: &[u8],
        revision: i64,
    ) -> Result<bool, ClusterError> {
        let Some(rest) = key.strip_prefix(self.prefix.as_bytes()) else {
            return Ok(false);
        };
        if rest == b"slotmap" {
            view.slot_map = match kind {
                EventType::Put => Some(Versioned {
                    value: decode_map(value)?,
                    revision,
                }),
                EventType::Delete => None,
            };
        } else if let Some(id) = rest.strip_prefix(b"members/") {
            let id = std::str::from_utf8(id)
                .ok()
                .and_then(|s| NodeId::new(s).ok());
            match (kind, id) {
                (EventType::Put, _) => {
                    let member = decode_member(value)?;
                    view.members.insert(member.id.clone(), member);
                }
                (EventType::Delete, Some(id)) => {
                    view.members.remove(&id);
                }
                (EventType::Delete, None) => {}
            }
        } else {
            // The policy registry and the central log share the prefix; their writes do
            // not change the view.
            return Ok(false);
        }
        Ok(true)
    }
}

/// Why a member's keep-alive stream ended.
enum Lapse {
    /// etcd says the lease is gone.
    Expired,
    /// A renewal was answered after the lease could have run out ([`LeaseClock::renewed`]).
    RenewedLate,
}

/// Keeps a member's lease alive; if the lease is lost (etcd was unreachable for longer
/// than the TTL), joins again with a new one. `clock` learns of every renewal (fencing,
/// [`crate::lease`]).
async fn keep_alive(
    plane: ControlPlane,
    key: String,
    value: Vec<u8>,
    lease_id: Arc<AtomicI64>,
    ttl_secs: i64,
    state: watch::Sender<MembershipState>,
    clock: Arc<LeaseClock>,
) {
    let period = Duration::from_millis((ttl_secs as u64 * 1000 / 3).max(200));
    loop {
        let lease = lease_id.load(Ordering::Relaxed);
        let alive = async {
            let mut client = plane.client.clone();
            let (mut keeper, mut stream) = client.lease_keep_alive(lease).await?;
            loop {
                let sent = Instant::now();
                keeper.keep_alive().await?;
                match stream.message().await? {
                    Some(resp) if resp.ttl() > 0 => {
                        let ttl = Duration::from_secs(resp.ttl() as u64);
                        if !clock.renewed(sent, Instant::now(), ttl) {
                            return Ok(Lapse::RenewedLate);
                        }
                    }
                    _ => return Ok::<Lapse, etcd_client::Error>(Lapse::Expired),
                }
                tokio::time::sleep(period).await;
            }
        };
        let expired = match tokio::time::timeout(plane.config.timeout + period * 2, alive).await {
            Ok(Ok(Lapse::Expired)) => true,
            // Other nodes may have proven this lease gone (`crate::lease`): it is given up
            // (which deletes the record, as its running out would have) and replaced. Until
            // the revocation succeeds the clock stays lapsed and the node fenced.
            Ok(Ok(Lapse::RenewedLate)) => plane
                .bounded(plane.client.clone().lease_revoke(lease))
                .await
                .is_ok(),
            // The keep-alive failed or stalled (the process was stopped longer than the
            // TTL, the connection broke, etcd restarted): whatever it said, the record is
            // what counts. Seen under load: a node stopped past its TTL kept failing here
            // and never joined again.
            _ => matches!(
                plane.bounded(plane.client.clone().get(key.clone(), None)).await,
                Ok(found) if found.kvs().is_empty()
            ),
        };
        if expired {
            clock.revoke();
            let _ = state.send(MembershipState::Rejoining);
            // Only re-create the record if nobody else took the id meanwhile.
            let rejoined = async {
                let mut client = plane.client.clone();
                let sent = Instant::now();
                let new_lease = client.lease_grant(ttl_secs, None).await?.id();
                let txn = Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(
                        key.clone(),
                        value.clone(),
                        Some(PutOptions::new().with_lease(new_lease)),
                    )]);
                let resp = client.txn(txn).await?;
                if !resp.succeeded() {
                    let _ = client.lease_revoke(new_lease).await;
                    return Ok::<_, etcd_client::Error>(None);
                }
                let revision = resp.header().map_or(0, |h| h.revision());
                Ok(Some((new_lease, sent, revision)))
            };
            match tokio::time::timeout(plane.config.timeout, rejoined).await {
                Ok(Ok(Some((new_lease, sent, revision)))) => {
                    // The view must catch up with the rejoin before this node serves again.
                    clock.rejoined(revision);
                    clock.confirm(sent, Duration::from_secs(ttl_secs as u64));
                    lease_id.store(new_lease, Ordering::Relaxed);
                    let _ = state.send(MembershipState::Live);
                }
                Ok(Ok(None)) => {
                    let _ = state.send(MembershipState::Lost);
                    return;
                }
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Keeps `tx` up to date with the cluster's state, through outages.
async fn follow(plane: ControlPlane, tx: watch::Sender<ClusterView>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let view = match plane.read_view().await {
            Ok(view) => view,
            Err(_) => {
                tx.send_modify(|v| v.connected = false);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        backoff = Duration::from_millis(100);
        let start = view.revision + 1;
        tx.send_replace(view);
        let mut client = plane.client.clone();
        let stream = plane
            .bounded(client.watch(
                plane.prefix.clone(),
                Some(WatchOptions::new().with_prefix().with_start_revision(start)),
            ))
            .await;
        let Ok(mut stream) = stream else {
            tx.send_modify(|v| v.connected = false);
            continue;
        };
        loop {
            // A quiet cluster sends nothing, so the stream itself has no timeout; the
            // client's keep-alive notices a dead connection.
            let message = match stream.message().await {
                Ok(Some(message)) => message,
                Ok(None) | Err(_) => break,
            };
            if message.canceled() {
                break;
            }
            let revision = message.header().map_or(0, |h| h.revision());
            let mut view = tx.borrow().clone();
            let mut bad = false;
            let mut changed = !view.connected;
            for event in message.events() {
                if let Some(kv) = event.kv() {
                    match plane.apply(
                        &mut view,
                        event.event_type(),
                        kv.key(),
                        kv.value(),
                        kv.mod_revision(),
                    ) {
                        Ok(relevant) => changed |= relevant,
                        Err(_) => bad = true,
                    }
                }
            }
            if bad {
                break;
            }
            if !changed {
                // A policy push or a log line: followers of the view (every node's
                // routing table) need not wake up.
                continue;
            }
            view.revision = view.revision.max(revision);
            view.connected = true;
            tx.send_replace(view);
        }
        tx.send_modify(|v| v.connected = false);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembershipState {
    Live,
    /// The lease lapsed during an outage; joining again.
    Rejoining,
    /// Another node took this id while this one was away.
    Lost,
}

/// A node's presence in the cluster. Dropping it stops the keep-alive, so the record
/// disappears when the lease runs out; [`Membership::leave`] removes it at once.
pub struct Membership {
    plane: ControlPlane,
    lease: Arc<AtomicI64>,
    clock: Arc<LeaseClock>,
    keeper: JoinHandle<()>,
    state: watch::Receiver<MembershipState>,
    id: NodeId,
}

impl Membership {
    pub fn id(&self) -> &NodeId {
        &self.id
    }

    pub fn state(&self) -> MembershipState {
        *self.state.borrow()
    }

    /// How long this node's lease is known to be alive (fencing, [`crate::lease`]).
    pub fn lease_clock(&self) -> Arc<LeaseClock> {
        Arc::clone(&self.clock)
    }

    /// Follows the state as it changes.
    pub fn changes(&self) -> watch::Receiver<MembershipState> {
        self.state.clone()
    }

    /// Leaves the cluster now (the record is deleted with the lease).
    pub async fn leave(self) -> Result<(), ClusterError> {
        self.keeper.abort();
        self.clock.revoke();
        let lease = self.lease.load(Ordering::Relaxed);
        self.plane
            .bounded(self.plane.client.clone().lease_revoke(lease))
            .await
            .map(|_| ())
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

/// A live view of the cluster, kept current by a background task.
pub struct ClusterWatch {
    view: watch::Receiver<ClusterView>,
    task: JoinHandle<()>,
}

impl ClusterWatch {
    /// The latest view.
    pub fn view(&self) -> ClusterView {
        self.view.borrow().clone()
    }

    /// A receiver to await changes on.
    pub fn subscribe(&self) -> watch::Receiver<ClusterView> {
        self.view.clone()
    }

    /// Waits until `ready` holds for the view, or `within` passes.
    pub async fn wait_for(
        &self,
        within: Duration,
        ready: impl FnMut(&ClusterView) -> bool,
    ) -> Option<ClusterView> {
        let mut rx = self.view.clone();
        tokio::time::timeout(within, rx.wait_for(ready))
            .await
            .ok()
            .and_then(Result::ok)
            .map(|v| v.clone())
    }
}

impl Drop for ClusterWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn decode_map(bytes: &[u8]) -> Result<SlotMap, ClusterError> {
    let map: SlotMap =
        serde_json::from_slice(bytes).map_err(|e| ClusterError::Corrupt(e.to_string()))?;
    map.validate()
        .map_err(|e| ClusterError::Corrupt(e.to_string()))?;
    Ok(map)
}

fn decode_member(bytes: &[u8]) -> Result<Member, ClusterError> {
    serde_json::from_slice(bytes).map_err(|e| ClusterError::Corrupt(format!("member record: {e}")))
}

/// Milliseconds since the Unix epoch, for [`Member::joined_ms`].
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_checked() {
        let c = ClusterConfig::new("etcd://127.0.0.1:2379,localhost:2380", "c1").unwrap();
        assert_eq!(
            c.endpoints,
            vec!["http://127.0.0.1:2379", "http://localhost:2380"]
        );
        for bad in [
            "127.0.0.1:2379",
            "etcd://",
            "etcd://host",
            "etcd://host:99999",
            "etcd://:1",
            "etcd://a:1,",
        ] {
            assert!(
                matches!(
                    ClusterConfig::new(bad, "c"),
                    Err(ClusterError::BadAddress(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            ClusterConfig::new("etcd://a:1", "bad/name"),
            Err(ClusterError::BadName(_))
        ));
    }
}
