//! A node of a Mantle cluster (`mantle serve --cluster etcd://...`): joins the control plane
//! in `crates/cluster`, follows the slot map, and answers for keys it does not own the way
//! Redis Cluster does (`-MOVED slot host:port`), so cluster-aware clients route themselves;
//! with `--cluster-mode proxy` it forwards such requests to the owner instead ([`proxy`]).
//! Slot ranges move between nodes with their data ([`migrate`] on the source, [`import`] on
//! the target). Without `--cluster` none of this exists and a node runs alone.
//!
//! The routing table a request consults is rebuilt whenever the watched view (or this node's
//! own knowledge: a map it just wrote, a range it paused) changes, and swapped in whole, so a
//! request sees one consistent map. A request holds the table it was routed by until it has
//! run; a migration pausing a range waits until no request routed by an older table is left,
//! so no write slips past the pause.
//!
//! Fencing: a cache-tier node (`--upstream`), whose slots others may take over when it is
//! gone, answers for its slots only while it can confirm its membership lease and its view
//! is as new as its latest join (`cluster::lease`); otherwise `-TRYAGAIN`. A node with its
//! own data keeps serving through an etcd outage: nobody else may take its slots.

pub mod balance;
mod current;
pub mod failover;
pub mod import;
pub mod migrate;
pub mod policy;
pub mod proxy;
pub mod suspect;

use crate::db::Db;
use crate::frame::Frame;
use bytes::Bytes;
use cluster::{
    ClusterConfig, ClusterError, ClusterView, ClusterWatch, ControlPlane, LeaseClock, Member,
    Membership, MembershipState, NodeId, SlotMap, Versioned,
};
use slots::{key_slot, SlotRange, SLOTS};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use store::Storage;

pub use crate::config::{ClusterMode, ClusterSettings};

/// Entries the central log keeps (the node's own journal keeps as many). Here, not in
/// `policy`, because the balancer and failover queue events to the same log.
pub const CENTRAL_LOG_CAPACITY: u64 = crate::live::journal::JOURNAL_CAPACITY;

/// Where one slot's requests go.
#[derive(Debug, Clone)]
enum Route {
    Mine,
    /// Another live node owns it: `-MOVED slot addr`, or forwarded there.
    Moved(Arc<str>),
    /// Nobody (alive) owns it.
    Down,
    /// This node owns it but is handing it over: requests wait for the flip.
    Paused,
}

/// Every slot's route, stored as an index into the few distinct routes: 32 KiB that stay in
/// the cache. As 16,384 `Route`s (24 bytes each, 384 KiB) the route of a random key's slot
/// was a cache miss per request, 11% of a proxying node's CPU samples at `-P 16`.
#[derive(Debug)]
struct Routes {
    kinds: Vec<Route>,
    by_slot: Box<[u16]>,
}

impl Routes {
    /// Every slot `Down`.
    fn new() -> Routes {
        Routes {
            kinds: vec![Route::Down],
            by_slot: vec![0; usize::from(SLOTS)].into_boxed_slice(),
        }
    }

    /// The index of `route` among the kinds, added if new (a handful: one per owner).
    fn kind(&mut self, route: Route) -> u16 {
        let same = |k: &Route| match (k, &route) {
            (Route::Moved(a), Route::Moved(b)) => Arc::ptr_eq(a, b) || a == b,
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        };
        match self.kinds.iter().position(same) {
            Some(at) => at as u16,
            None => {
                self.kinds.push(route);
                u16::try_from(self.kinds.len() - 1).expect("fewer than 65,536 owners")
            }
        }
    }

    fn set(&mut self, slot: u16, kind: u16) {
        self.by_slot[usize::from(slot)] = kind;
    }

    fn get(&self, slot: usize) -> Option<&Route> {
        let kind = *self.by_slot.get(slot)?;
        Some(&self.kinds[usize::from(kind)])
    }

    fn iter(&self) -> impl Iterator<Item = &Route> {
        self.by_slot.iter().map(|&k| &self.kinds[usize::from(k)])
    }
}

impl std::ops::Index<usize> for Routes {
    type Output = Route;

    #[inline]
    fn index(&self, slot: usize) -> &Route {
        &self.kinds[usize::from(self.by_slot[slot])]
    }
}

/// The routing table built from one view of the cluster.
#[derive(Debug)]
pub struct Routing {
    routes: Routes,
    pub view: ClusterView,
    /// Members seen going while etcd answered (`cluster::successor::Lapses`): their slots'
    /// sequencers run on a successor until the slots are reassigned.
    lapsed: BTreeSet<NodeId>,
}

/// Who runs the sequencers of a slot whose owner was seen going.
enum StandIn<'r> {
    Me,
    Other(&'r str),
}

impl Routing {
    fn build(
        me: &NodeId,
        view: ClusterView,
        paused: &[SlotRange],
        lapsed: BTreeSet<NodeId>,
    ) -> Routing {
        let mut routes = Routes::new();
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
                let kind = routes.kind(route);
                for range in ranges {
                    for slot in range.slots() {
                        routes.set(slot, kind);
                    }
                }
            }
        }
        for range in paused {
            for slot in range.slots() {
                if matches!(routes[usize::from(slot)], Route::Mine) {
                    let kind = routes.kind(Route::Paused);
                    routes.set(slot, kind);
                }
            }
        }
        Routing {
            routes,
            view,
            lapsed,
        }
    }

    /// The successor running `slot`'s sequencers, if its owner was seen going (and this
    /// view is current: etcd answers).
    fn stand_in(&self, me: &NodeId, slot: u16) -> Option<StandIn<'_>> {
        if !self.view.connected {
            return None;
        }
        let owner = self.view.slot_map.as_ref()?.value.owner(slot)?;
        if !self.lapsed.contains(owner) {
            return None;
        }
        let next = cluster::successor::successor(slot, self.view.members.keys())?;
        Some(if next == me {
            StandIn::Me
        } else {
            StandIn::Other(&self.view.members[next].addr)
        })
    }

    /// Slots whose owner is not a live member.
    pub fn failed_slots(&self) -> usize {
        self.routes
            .iter()
            .filter(|r| matches!(r, Route::Down))
            .count()
    }

    /// Whether this node serves `slot` now.
    pub fn owns(&self, slot: u16) -> bool {
        matches!(
            self.routes.get(usize::from(slot)),
            Some(Route::Mine | Route::Paused)
        )
    }
}

/// Held while a routed request runs (see the module doc).
pub struct RouteGuard(#[allow(dead_code)] Arc<Routing>);

/// Why a request is not run here.
pub enum Redirect {
    /// Reply this instead (`-MOVED`, `-CROSSSLOT`, `-CLUSTERDOWN`).
    Reply(Frame),
    /// The slot is being handed over: ask again in a moment.
    Wait,
    /// Proxy mode: run it at this owner.
    Forward(Arc<str>),
}

/// What this node knows beyond the watched view.
#[derive(Default)]
struct Local {
    /// Ranges whose requests wait (the last moment of a migration away).
    paused: Vec<SlotRange>,
    /// A map newer than the view's, learnt first-hand (this node wrote it, or the source of
    /// a migration said it was written): used until the watch catches up.
    adopted: Option<Versioned<SlotMap>>,
}

pub struct ClusterNode {
    pub id: NodeId,
    pub addr: String,
    pub mode: ClusterMode,
    pub db: Db,
    plane: ControlPlane,
    membership: tokio::sync::Mutex<Option<Membership>>,
    /// Read without a lock by every routed request ([`current`]).
    routing: current::Current<Routing>,
    /// Tables replaced but perhaps still held by running requests.
    retired: Mutex<Vec<Weak<Routing>>>,
    local: Mutex<Local>,
    /// Serialises rebuilding the table.
    rebuilding: Mutex<()>,
    /// Members seen going, from the watched views (see [`Routing::stand_in`]).
    lapses: Mutex<cluster::successor::Lapses>,
    /// Members that could not be reached, checked against their leases ([`suspect`]).
    suspicions: Arc<suspect::Suspicions>,
    watch: ClusterWatch,
    follower: Mutex<Option<tokio::task::JoinHandle<()>>>,
    pub(crate) migrations: migrate::Running,
    pub(crate) imports: import::Imports,
    pub proxy: proxy::Pool,
    /// Requests served per slot since the last tick, for the balancer.
    pub slot_counts: crate::cluster::balance::SlotCounts,
    /// The shared logs' sequencers this node runs: the instance's (which carry the running
    /// policy's lease hook), shared once the instance exists so the balancer can list them
    /// in `sequencers()`.
    pub sequencers: std::sync::OnceLock<Arc<crate::log::sequencer::Sequencers>>,
    /// Sent as AUTH on connections to other nodes (see [`ClusterSettings::password`]).
    pub(crate) password: Option<String>,
    /// The membership lease's TTL (`--cluster-ttl`).
    pub ttl: Duration,
    /// This node's own knowledge of its lease (fencing, see the module doc).
    lease: Arc<LeaseClock>,
    /// A pure cache tier (`--upstream`): its slots are taken over when it is gone, so it
    /// is fenced.
    cache_tier: bool,
}

/// How long a starting node keeps trying to reach etcd before it gives up.
pub const STARTUP_WAIT: Duration = Duration::from_secs(30);

/// Runs one step of joining the cluster (connect, announce, bootstrap, watch), retrying it
/// while etcd is unreachable until `give_up` (a node and its etcd started together, or etcd
/// restarting: a freshly started etcd accepts connections before it has a leader, so a later
/// step can fail where the connection did not), and saying so in the log once.
async fn patiently<T, F, Fut>(
    give_up: std::time::Instant,
    said: &mut bool,
    endpoints: &str,
    mut step: F,
) -> Result<T, ClusterError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClusterError>>,
{
    loop {
        match step().await {
            Ok(done) => return Ok(done),
            Err(e @ ClusterError::Unreachable { .. }) if std::time::Instant::now() < give_up => {
                if !*said {
                    store::log_line!("mantle: cluster: {e}; retrying for up to {STARTUP_WAIT:?}");
                    *said = true;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e @ ClusterError::Unreachable { .. }) => {
                return Err(ClusterError::Unreachable {
                    endpoints: endpoints.to_string(),
                    reason: format!("still unreachable after {STARTUP_WAIT:?} of retries ({e})"),
                })
            }
            Err(e) => return Err(e),
        }
    }
}

impl ClusterNode {
    /// Joins the cluster: connects to etcd, announces this node, gives it every slot if the
    /// cluster has no map yet, and starts following the map (and the migrations it names).
    pub async fn join(
        settings: &ClusterSettings,
        listen: std::net::SocketAddr,
        db: Db,
    ) -> anyhow::Result<Arc<ClusterNode>> {
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
        let give_up = std::time::Instant::now() + STARTUP_WAIT;
        let endpoints = config.endpoints.join(",");
        let mut said = false;
        let plane = patiently(give_up, &mut said, &endpoints, || {
            ControlPlane::connect(config.clone())
        })
        .await?;
        let member = Member {
            id: id.clone(),
            addr: addr.clone(),
            joined_ms: cluster::control::now_ms(),
        };
        let membership = patiently(give_up, &mut said, &endpoints, || {
            plane.join(member.clone(), settings.ttl)
        })
        .await?;
        let lease = membership.lease_clock();
        log_membership(&id, membership.changes());
        patiently(give_up, &mut said, &endpoints, || plane.bootstrap(&id)).await?;
        let watch = patiently(give_up, &mut said, &endpoints, || plane.watch()).await?;
        let routing = Arc::new(Routing::build(&id, watch.view(), &[], BTreeSet::new()));
        // A node that holds no keys itself is a cache tier in front of an upstream.
        let cache_tier = db.store().slot_data().is_none();
        let node = Arc::new(ClusterNode {
            id,
            addr,
            mode: settings.mode,
            db,
            plane,
            membership: tokio::sync::Mutex::new(Some(membership)),
            routing: current::Current::new(routing),
            retired: Mutex::new(Vec::new()),
            local: Mutex::new(Local::default()),
            rebuilding: Mutex::new(()),
            lapses: Mutex::new(Default::default()),
            suspicions: Default::default(),
            watch,
            follower: Mutex::new(None),
            migrations: migrate::Running::default(),
            imports: import::Imports::default(),
            proxy: proxy::Pool::new(settings.password.clone()),
            slot_counts: Default::default(),
            sequencers: Default::default(),
            password: settings.password.clone(),
            ttl: settings.ttl,
            lease,
            cache_tier,
        });
        let follower = {
            let mut rx = node.watch.subscribe();
            let weak = Arc::downgrade(&node);
            tokio::spawn(async move {
                loop {
                    let Some(node) = weak.upgrade() else { return };
                    node.rebuild();
                    node.follow_migrations();
                    drop(node);
                    if rx.changed().await.is_err() {
                        return;
                    }
                    rx.borrow_and_update();
                }
            })
        };
        *lock(&node.follower) = Some(follower);
        Ok(node)
    }

    /// The current routing table.
    pub fn routing(&self) -> Arc<Routing> {
        self.routing.load()
    }

    pub fn plane(&self) -> &ControlPlane {
        &self.plane
    }

    /// The newest slot map this node knows: the watched one, or one it learnt first-hand.
    pub fn current_map(&self) -> Option<Versioned<SlotMap>> {
        let view = self.watch.view();
        newest(view.slot_map, lock(&self.local).adopted.clone())
    }

    /// Rebuilds the routing table from the watched view and this node's own knowledge.
    fn rebuild(&self) {
        let _one = lock(&self.rebuilding);
        let mut view = self.watch.view();
        let lapsed = {
            let mut lapses = lock(&self.lapses);
            lapses.observe(view.connected, view.members.keys());
            lapses.watched().clone()
        };
        let routing = {
            let mut local = lock(&self.local);
            if let Some(adopted) = &local.adopted {
                let watched = view.slot_map.as_ref().map_or(0, |m| m.value.epoch);
                if adopted.value.epoch > watched {
                    view.slot_map = Some(adopted.clone());
                } else {
                    local.adopted = None;
                }
            }
            Arc::new(Routing::build(&self.id, view, &local.paused, lapsed))
        };
        if self.cache_tier {
            self.forget_gained(&self.routing(), &routing);
        }
        let old = self.routing.replace(Arc::clone(&routing));
        let in_flight = {
            let mut retired = lock(&self.retired);
            retired.retain(|w| w.strong_count() > 0);
            retired.push(Arc::downgrade(&old));
            retired.clone()
        };
        if self.db.store().slot_data().is_none() {
            let lost: Vec<bool> = (0..SLOTS)
                .map(|slot| old.owns(slot) && !routing.owns(slot))
                .collect();
            if lost.contains(&true) {
                self.forget_lost(lost, in_flight);
            }
        }
    }

    /// A cache tier's node that is given slots (a takeover, a move to it) may hold entries
    /// of them cached from an earlier time it served them, and writes since went to another
    /// node and the upstream: they are dropped before the new table is in use, so the first
    /// request on a gained slot reads through. Requests routed by the old table cannot be
    /// filling those slots: it did not route them here.
    fn forget_gained(&self, old: &Routing, new: &Routing) {
        let gained: Vec<bool> = (0..SLOTS)
            .map(|slot| !old.owns(slot) && new.owns(slot))
            .collect();
        if !gained.contains(&true) {
            return;
        }
        let n = self
            .db
            .forget_cached_where(|key| gained[usize::from(key_slot(key))]);
        if n > 0 {
            store::log_line!(
                "mantle: cluster: dropped {n} cached keys of slots this node now takes over"
            );
        }
    }

    /// Whether this node must not answer for its own slots now (see the module doc).
    pub fn fenced(&self, routing: &Routing) -> bool {
        self.cache_tier
            && !self
                .lease
                .confirmed(std::time::Instant::now(), routing.view.revision)
    }

    /// A cache tier's node does not see writes to slots it no longer serves (they go to the
    /// new owner and the upstream), so what it cached of them would be stale were they to
    /// come back to it (a move back, or a takeover after it rejoined): dropped, once the
    /// requests routed by older tables are done (one could still be filling the cache).
    fn forget_lost(&self, lost: Vec<bool>, in_flight: Vec<Weak<Routing>>) {
        let db = self.db.clone();
        let forget = move || {
            let n = db.forget_cached_where(|key| lost[usize::from(key_slot(key))]);
            if n > 0 {
                store::log_line!(
                    "mantle: cluster: dropped {n} cached keys of slots this node no longer serves"
                );
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let deadline = std::time::Instant::now() + migrate::PAUSE_WAIT;
                    while in_flight.iter().any(|w| w.strong_count() > 0)
                        && std::time::Instant::now() < deadline
                    {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    forget();
                });
            }
            Err(_) => forget(),
        }
    }

    /// Uses `map` (just written by this node, or reported by a migration's source) until the
    /// watch delivers it or something newer.
    pub fn adopt(&self, map: Versioned<SlotMap>) {
        {
            let mut local = lock(&self.local);
            let known = local.adopted.as_ref().map_or(0, |m| m.value.epoch);
            if map.value.epoch > known {
                local.adopted = Some(map);
            }
        }
        self.rebuild();
    }

    /// Makes requests for `range` wait, and returns once every request routed before is
    /// done (a write that passed the route check has then reached the store). Gives up, and
    /// lets the range go again, if that takes longer than `within`: requests must not wait
    /// on a pause that cannot complete.
    pub async fn pause(&self, range: SlotRange, within: Duration) -> Result<(), String> {
        lock(&self.local).paused.push(range);
        self.rebuild();
        let deadline = std::time::Instant::now() + within;
        loop {
            let busy = lock(&self.retired)
                .iter()
                .filter(|w| w.strong_count() > 0)
                .count();
            if busy == 0 {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                self.resume(range);
                return Err(format!(
                    "{busy} routing tables still held by running requests after {within:?}"
                ));
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }

    /// Lets requests for `range` through again (routed by whatever the map now says).
    pub fn resume(&self, range: SlotRange) {
        lock(&self.local).paused.retain(|r| *r != range);
        self.rebuild();
    }

    /// Starts loading the routes and hit counters of `keys`' slots ahead of their requests'
    /// [`ClusterNode::route`] (see `Db::prefetch`): a batch's slots are scattered over
    /// tables too large to stay cached between a proxying node's units.
    pub fn prefetch_routes(&self, keys: &[&[u8]]) {
        let routing = self.routing();
        for key in keys {
            let slot = key_slot(key);
            if let Some(route) = routing.routes.get(usize::from(slot)) {
                cache::prefetch_read(route);
            }
            self.slot_counts.prefetch(slot);
        }
    }

    /// Checks that this node serves every key of a request. Keys of one request must share a
    /// slot (`-CROSSSLOT`). The guard is held while the request runs. A request another
    /// node forwarded here (`forwarded`) is never forwarded again: if this node does not
    /// serve the slot either, the forwarder gets the redirection and asks again.
    pub fn route<'k>(
        &self,
        mut keys: impl Iterator<Item = &'k Bytes>,
        forwarded: bool,
    ) -> Result<Option<RouteGuard>, Redirect> {
        let Some(first) = keys.next() else {
            return Ok(None);
        };
        let slot = key_slot(first);
        for key in keys {
            if key_slot(key) != slot {
                return Err(Redirect::Reply(Frame::Error(
                    "CROSSSLOT Keys in request don't hash to the same slot".into(),
                )));
            }
        }
        let routing = self.routing();
        let route = &routing.routes[usize::from(slot)];
        if matches!(route, Route::Mine | Route::Paused) && self.fenced(&routing) {
            return Err(Redirect::Reply(Frame::Error(format!(
                "TRYAGAIN slot {slot}: this node cannot confirm it still owns it (its cluster lease is unconfirmed); retry"
            ))));
        }
        match route {
            Route::Mine => {
                self.slot_counts.hit(slot);
                Ok(Some(RouteGuard(routing)))
            }
            Route::Moved(addr) if self.mode == ClusterMode::Proxy && !forwarded => {
                Err(Redirect::Forward(Arc::clone(addr)))
            }
            Route::Moved(addr) => Err(Redirect::Reply(Frame::Error(format!(
                "MOVED {slot} {addr}"
            )))),
            Route::Down => Err(Redirect::Reply(Frame::Error(
                "CLUSTERDOWN Hash slot not served".into(),
            ))),
            Route::Paused => Err(Redirect::Wait),
        }
    }

    /// [`ClusterNode::route`] for a sequencer command on `log` (docs/shared-log.md,
    /// "Sequencer takeover"). Two differences, both because a sequencer is memory a client
    /// rebuilds from sealed storage: the owner hands out positions only while it can confirm
    /// its lease (so it has stopped before anyone may take over), and a slot whose owner was
    /// seen going is served at once by the owner's successor (`-SEQAT slot addr` from the
    /// other nodes; forwarded there in proxy mode) instead of after the failover grace.
    pub fn route_sequencer(
        &self,
        log: &Bytes,
        forwarded: bool,
    ) -> Result<Option<RouteGuard>, Redirect> {
        let slot = key_slot(log);
        let routing = self.routing();
        match &routing.routes[usize::from(slot)] {
            Route::Mine | Route::Paused
                if !self
                    .lease
                    .confirmed(std::time::Instant::now(), routing.view.revision) =>
            {
                return Err(Redirect::Reply(Frame::Error(format!(
                    "TRYAGAIN slot {slot}: this node cannot confirm its cluster lease, so it \
                     hands out no log positions; retry"
                ))));
            }
            Route::Down => match routing.stand_in(&self.id, slot) {
                Some(StandIn::Me) => return Ok(Some(RouteGuard(routing))),
                Some(StandIn::Other(addr)) if self.mode == ClusterMode::Proxy && !forwarded => {
                    return Err(Redirect::Forward(Arc::from(addr)))
                }
                Some(StandIn::Other(addr)) => {
                    return Err(Redirect::Reply(Frame::Error(format!(
                        "SEQAT {slot} {addr}"
                    ))))
                }
                None => {}
            },
            // A sequencer command reaches another node than the slot's owner when a client
            // could not connect to the owner (the zlog client then asks the others): the
            // owner may be dead, and the takeover need not wait for etcd to notice.
            Route::Moved(addr) if self.mode == ClusterMode::Client || forwarded => {
                self.unreachable(addr)
            }
            _ => {}
        }
        self.route(std::iter::once(log), forwarded)
    }

    /// The member at `addr` could not be reached (a client's or a forward's connection
    /// failed): checked in the background, and its lease revoked if it is proven to have run
    /// out ([`suspect`]).
    pub fn unreachable(&self, addr: &str) {
        let routing = self.routing();
        let Some(member) = routing.view.members.values().find(|m| m.addr == addr) else {
            return;
        };
        if member.id != self.id {
            // The lease ends within a TTL of its last renewal; the proof takes a second
            // more; the timeout covers etcd's answers.
            let within = self.ttl * 2 + self.plane.config().timeout;
            self.suspicions
                .suspect(&self.plane, &member.id, addr, within);
        }
    }

    /// Leaves the cluster at once (graceful shutdown): the lease is revoked, so the others
    /// see this node gone without waiting for its TTL.
    pub async fn leave(&self) {
        if let Some(m) = self.membership.lock().await.take() {
            if let Err(e) = m.leave().await {
                store::log_line!("mantle: cluster: leaving the cluster: {e}");
            }
        }
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        if let Some(follower) = lock(&self.follower).take() {
            follower.abort();
        }
    }
}

/// The map with the higher epoch.
fn newest(
    a: Option<Versioned<SlotMap>>,
    b: Option<Versioned<SlotMap>>,
) -> Option<Versioned<SlotMap>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.value.epoch > a.value.epoch { b } else { a }),
        (a, b) => a.or(b),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn check_host_port(text: &str) -> Result<(), String> {
    match text.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Ok(())
        }
        _ => Err(format!("expected HOST:PORT, got {text:?}")),
    }
}

/// Says in the log when this node's membership lapses, comes back, or is lost for good.
fn log_membership(id: &NodeId, mut changes: tokio::sync::watch::Receiver<MembershipState>) {
    let id = id.clone();
    tokio::spawn(async move {
        while changes.changed().await.is_ok() {
            let state = *changes.borrow_and_update();
            match state {
                MembershipState::Live => {
                    store::log_line!("mantle: cluster: {id} is a member again")
                }
                MembershipState::Rejoining => store::log_line!(
                    "mantle: cluster: {id}'s membership lapsed (stopped or cut off past its TTL); joining again"
                ),
                MembershipState::Lost => store::log_line!(
                    "mantle: cluster: another node took the id {id} while this one was away; not a member"
                ),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unreachable() -> ClusterError {
        ClusterError::Unreachable {
            endpoints: "127.0.0.1:1".into(),
            reason: "no leader yet".into(),
        }
    }

    fn run<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    }

    /// A step of joining (not only the connection) that meets an etcd without a leader yet
    /// is retried until it succeeds.
    #[test]
    fn a_join_step_that_fails_while_etcd_starts_is_retried() {
        let mut calls = 0;
        let mut said = false;
        let give_up = std::time::Instant::now() + STARTUP_WAIT;
        let done = run(patiently(give_up, &mut said, "127.0.0.1:1", || {
            calls += 1;
            let attempt = calls;
            async move {
                if attempt < 3 {
                    Err(unreachable())
                } else {
                    Ok(attempt)
                }
            }
        }));
        assert_eq!(done.unwrap(), 3);
        assert!(said, "the retry is logged");
    }

    /// Only an unreachable etcd is waited for; any other error ends the join at once, and
    /// one past the deadline names the wait.
    #[test]
    fn other_errors_and_an_expired_wait_end_the_join() {
        let mut said = false;
        let give_up = std::time::Instant::now() + STARTUP_WAIT;
        let mut calls = 0;
        let err = run(patiently(give_up, &mut said, "e", || {
            calls += 1;
            async { Err::<(), _>(ClusterError::Conflict(1)) }
        }))
        .unwrap_err();
        assert!(matches!(err, ClusterError::Conflict(1)));
        assert_eq!(calls, 1);
        let past = std::time::Instant::now();
        let err = run(patiently(past, &mut said, "e", || async {
            Err::<(), _>(unreachable())
        }))
        .unwrap_err();
        assert!(
            err.to_string().contains("still unreachable after 30s"),
            "{err}"
        );
    }

    fn view(map: SlotMap, members: &[(&str, &str)]) -> ClusterView {
        ClusterView {
            members: members
                .iter()
                .map(|(id, addr)| {
                    let id = NodeId::new(id).unwrap();
                    let member = Member {
                        id: id.clone(),
                        addr: addr.to_string(),
                        joined_ms: 0,
                    };
                    (id, member)
                })
                .collect(),
            slot_map: Some(Versioned {
                value: map,
                revision: 1,
            }),
            revision: 1,
            connected: true,
        }
    }

    #[test]
    fn a_paused_range_waits_only_where_this_node_serves() {
        let (a, b) = (NodeId::new("a").unwrap(), NodeId::new("b").unwrap());
        let map = SlotMap::all_to(&a)
            .assign(SlotRange::new(100, 199).unwrap(), &b)
            .unwrap();
        let paused = [SlotRange::new(50, 150).unwrap()];
        let routing = Routing::build(
            &a,
            view(map, &[("a", "h:1"), ("b", "h:2")]),
            &paused,
            BTreeSet::new(),
        );
        assert!(matches!(routing.routes[49], Route::Mine));
        assert!(matches!(routing.routes[50], Route::Paused));
        assert!(matches!(routing.routes[99], Route::Paused));
        // b's slots are not this node's to pause: still redirected.
        assert!(matches!(&routing.routes[120], Route::Moved(addr) if &**addr == "h:2"));
        assert!(routing.owns(60) && !routing.owns(120));
    }

    #[test]
    fn a_lapsed_owners_sequencers_go_to_one_successor() {
        let [a, b, c] = ["a", "b", "c"].map(|n| NodeId::new(n).unwrap());
        let map = SlotMap::all_to(&a)
            .assign(SlotRange::new(0, 99).unwrap(), &b)
            .unwrap();
        let members = [("a", "h:1"), ("c", "h:3")];
        let lapsed: BTreeSet<NodeId> = [b.clone()].into_iter().collect();
        let at_a = Routing::build(&a, view(map.clone(), &members), &[], lapsed.clone());
        let at_c = Routing::build(&c, view(map.clone(), &members), &[], lapsed.clone());
        let mut served = BTreeSet::new();
        for slot in 0..100 {
            // Exactly one of the two serves it, and the other points there.
            match (at_a.stand_in(&a, slot), at_c.stand_in(&c, slot)) {
                (Some(StandIn::Me), Some(StandIn::Other("h:1"))) => served.insert("a"),
                (Some(StandIn::Other("h:3")), Some(StandIn::Me)) => served.insert("c"),
                _ => panic!("slot {slot}: the two nodes disagree"),
            };
        }
        assert_eq!(served.len(), 2, "the dead node's slots spread over both");
        // A live owner's slot, an owner not seen going, and a disconnected view: nobody.
        assert!(at_c.stand_in(&c, 500).is_none());
        let unseen = Routing::build(&c, view(map.clone(), &members), &[], BTreeSet::new());
        assert!(unseen.stand_in(&c, 5).is_none());
        let mut stale = view(map, &members);
        stale.connected = false;
        let stale = Routing::build(&c, stale, &[], lapsed);
        assert!(stale.stand_in(&c, 5).is_none());
    }

    #[test]
    fn the_newest_map_wins() {
        let a = NodeId::new("a").unwrap();
        let old = Versioned {
            value: SlotMap::all_to(&a),
            revision: 5,
        };
        let mut next = old.clone();
        next.value.epoch = 9;
        assert_eq!(
            newest(Some(old.clone()), Some(next.clone()))
                .unwrap()
                .value
                .epoch,
            9
        );
        assert_eq!(
            newest(Some(next), Some(old.clone())).unwrap().value.epoch,
            9
        );
        assert_eq!(newest(None, Some(old)).unwrap().value.epoch, 1);
    }
}
