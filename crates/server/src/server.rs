//! Accepting clients and running each connection: the loop that reads requests, applies
//! commands and writes replies, with the limits that keep one client from hurting the others
//! (`--maxclients`, protocol limits, bounded buffers), and an orderly shutdown that stops
//! accepting, lets connections finish the command they are running, and syncs the store.

use crate::cluster::Redirect;
use crate::cmd::auth::limits_for;
use crate::cmd::Command;
use crate::config::{Backend, Config};
use crate::connection::{Connection, QUERY_BUFFER_LIMIT};
use crate::db::Db;
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::live::space::Space;
use crate::live::LivePolicy;
use crate::stats::Stats;
use crate::store::Store;
use anyhow::Context;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

pub use crate::config::MAX_BULK_LEN_LIMIT;

/// Descriptors kept for everything but clients and RocksDB's table files: listeners, the
/// runtime's poller and wakers, RocksDB's log, manifest and WAL files, a WAL switch, the
/// metrics endpoint, upstream connections, `/proc` reads.
pub const RESERVED_DESCRIPTORS: u64 = 64;
/// Bounds of RocksDB's table-file share of the descriptors: a quarter of the limit.
const STORE_FILES_MIN: u64 = 32;
const STORE_FILES_MAX: u64 = 4096;

/// How the open-file limit is shared out: RocksDB's table files, the server's own files and
/// at most `maxclients` clients, so that no number of clients can starve the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescriptorBudget {
    /// The soft `RLIMIT_NOFILE` after raising it.
    pub limit: u64,
    pub store_files: u64,
    pub maxclients: usize,
}

impl DescriptorBudget {
    /// Shares `limit` descriptors; `None` when too few are left for even one client.
    pub fn share(limit: u64, maxclients: usize, rocks: bool) -> Option<DescriptorBudget> {
        let store_files = if rocks {
            (limit / 4).clamp(STORE_FILES_MIN, STORE_FILES_MAX)
        } else {
            0
        };
        let room = limit.checked_sub(store_files + RESERVED_DESCRIPTORS)?;
        (room > 0).then(|| DescriptorBudget {
            limit,
            store_files,
            maxclients: maxclients.min(usize::try_from(room).unwrap_or(usize::MAX)),
        })
    }
}

/// Raises the soft open-file limit towards what `maxclients` needs (as Redis does) and
/// shares it out; lowers `maxclients` with a warning when the limit cannot cover it.
fn fit_descriptors(config: &mut Config) -> anyhow::Result<DescriptorBudget> {
    let rocks = matches!(config.backend, Backend::RocksDb { .. });
    let wanted = config.maxclients as u64 + RESERVED_DESCRIPTORS + STORE_FILES_MAX;
    let limit = raise_open_file_limit(wanted);
    let budget = DescriptorBudget::share(limit, config.maxclients, rocks).with_context(|| {
        format!(
            "the open-file limit (ulimit -n) is {limit}: too low to serve any client; the store \
             and the server keep {} descriptors, raise it above that",
            RESERVED_DESCRIPTORS + if rocks { STORE_FILES_MIN } else { 0 }
        )
    })?;
    if budget.maxclients < config.maxclients {
        crate::log::log_line!(
            "mantle: warning: --maxclients {} lowered to {}: the open-file limit (ulimit -n) is \
             {limit} and {} descriptors are kept for the store and the server; raise the limit \
             to serve more clients",
            config.maxclients,
            budget.maxclients,
            budget.store_files + RESERVED_DESCRIPTORS
        );
        config.maxclients = budget.maxclients;
    }
    Ok(budget)
}

/// The soft `RLIMIT_NOFILE`, first raised towards `wanted` as far as the hard limit allows.
fn raise_open_file_limit(wanted: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    let target = (wanted as libc::rlim_t).min(limit.rlim_max);
    if target > limit.rlim_cur {
        let raised = libc::rlimit {
            rlim_cur: target,
            rlim_max: limit.rlim_max,
        };
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = target;
        }
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every platform
    let soft = limit.rlim_cur as u64;
    soft
}

/// How long shutdown waits for connections to finish their current command.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// A bound, ready server. [`Server::bind`] then [`Server::run`]; tests bind port 0 and read
/// the chosen port from [`Server::local_addr`].
pub struct Server {
    listener: TcpListener,
    instance: Arc<Instance>,
    metrics: Option<TcpListener>,
    /// Where the warm-up record is kept (none in front of an upstream).
    warmup_space: Option<Space>,
}

impl Server {
    /// Opens the store (or connects to the upstream), builds the cache and binds the address.
    pub async fn bind(mut config: Config) -> anyhow::Result<Server> {
        config.validate().map_err(anyhow::Error::msg)?;
        crate::http::check(&config).map_err(anyhow::Error::msg)?;
        if config.proto_max_bulk_len > MAX_BULK_LEN_LIMIT {
            anyhow::bail!(
                "--proto-max-bulk-len {} is above the largest supported, {MAX_BULK_LEN_LIMIT}",
                config.proto_max_bulk_len
            );
        }
        let budget = fit_descriptors(&mut config)?;
        let options = crate::store::rocks::OpenOptions {
            max_open_files: i32::try_from(budget.store_files).unwrap_or(i32::MAX),
            wal_recovery: config.wal_recovery,
        };
        let store = Store::open(&config.backend, options, config.upstream_options()).await?;
        let db = Db::with_classes(
            store,
            config.eviction,
            config.capacity(),
            config.classes.clone(),
        );
        let warmup_space = crate::warmup::load::open(&db, &config)?;
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let local_addr = listener.local_addr()?;
        let metrics = match config.metrics_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen for HTTP (--http) on {addr}"))?,
            ),
            None => None,
        };
        // A cluster node joins first: its policy registry is the cluster's.
        let cluster = match &config.cluster {
            Some(settings) => Some(
                crate::cluster::ClusterNode::join(settings, local_addr, db.clone())
                    .await
                    .context("joining the cluster")?,
            ),
            None => None,
        };
        if let Some(node) = &cluster {
            let cache_tier = matches!(db.store(), Store::Upstream(_));
            crate::cluster::failover::start(node, cache_tier)
                .await
                .context("setting up failover")?;
        }
        let (shared, policy_watch) = match &cluster {
            Some(node) => {
                let (registry, watch) = crate::cluster::policy::EtcdRegistry::open(node)
                    .await
                    .context("opening the cluster's policy registry")?;
                let registry: Arc<dyn crate::live::registry::Shared> = Arc::new(registry);
                (Some(registry), Some(watch))
            }
            None => (None, None),
        };
        let live = LivePolicy::start_shared(db.clone(), &config, shared)
            .await
            .context("starting the policy engine")?;
        let mut instance = Instance::new(db, live, config, local_addr);
        instance.cluster = cluster;
        let instance = Arc::new(instance);
        if let Some(watch) = policy_watch {
            follow_policy_registry(Arc::downgrade(&instance), watch);
        }
        Ok(Server {
            listener,
            instance,
            metrics,
            warmup_space,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.instance.local_addr
    }

    /// The address of the dashboard and Prometheus endpoint, when `metrics_listen` (`--http`)
    /// was set.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|m| m.local_addr().ok())
    }

    /// The shared state, for embedders and tests that inspect the cache directly.
    pub fn db(&self) -> Db {
        self.instance.db.clone()
    }

    /// Serves until `shutdown` completes, then drains connections and syncs the store.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Server {
            listener,
            instance,
            metrics,
            warmup_space,
        } = self;
        let slots = Arc::new(Semaphore::new(instance.config.maxclients));
        let (stop_tx, stop_rx) = watch::channel(false);
        let exporter = metrics.map(|listener| {
            tokio::spawn(crate::http::serve(
                listener,
                instance.clone(),
                stop_rx.clone(),
            ))
        });
        let (fill, persister) = start_warmup(&instance, warmup_space.clone(), &stop_rx);
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => {
                    let (socket, peer) = match accepted {
                        Ok(pair) => pair,
                        Err(_) => {
                            // Out of file descriptors or similar: back off instead of spinning.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                    };
                    let stats = instance.db.stats();
                    Stats::bump(&stats.connections_received);
                    match slots.clone().try_acquire_owned() {
                        Ok(permit) => {
                            let instance = instance.clone();
                            let stop = stop_rx.clone();
                            connections.spawn(async move {
                                serve_connection(&instance, socket, peer, stop).await;
                                drop(permit);
                            });
                        }
                        Err(_) => {
                            Stats::bump(&stats.rejected_connections);
                            reject(socket);
                        }
                    }
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(listener);
        // Leave first, so other nodes and clients stop sending here while this one drains.
        if let Some(node) = &instance.cluster {
            node.leave().await;
        }
        let _ = stop_tx.send(true);
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            connections.abort_all();
        }
        if let Some(exporter) = exporter {
            let _ = exporter.await;
        }
        instance.live.stop();
        if let Some(fill) = fill {
            fill.abort();
        }
        if let Some(persister) = persister {
            let _ = persister.await;
        }
        if let Some(space) = warmup_space
            .as_ref()
            .filter(|_| instance.config.warmup_track > 0)
        {
            crate::warmup::load::save(&instance.db, space, true)
                .context("persisting the warm-up record at shutdown")?;
        }
        instance
            .db
            .sync()
            .context("syncing the store at shutdown")?;
        Ok(())
    }
}

type Job = tokio::task::JoinHandle<()>;

/// Starts the background bulk fill (with `--warmup`) and the persister of the access record.
fn start_warmup(
    instance: &Instance,
    space: Option<Space>,
    stop: &watch::Receiver<bool>,
) -> (Option<Job>, Option<Job>) {
    let Some(space) = space else {
        return (None, None);
    };
    let db = instance.db.clone();
    let fill = instance
        .config
        .warmup
        .map(|spec| tokio::spawn(crate::warmup::load::fill(db.clone(), spec)));
    let persister = (instance.config.warmup_track > 0).then(|| {
        tokio::spawn(crate::warmup::load::persist_periodically(
            db,
            space,
            instance.config.warmup_persist,
            stop.clone(),
        ))
    });
    (fill, persister)
}

/// Binds and serves until `shutdown` completes.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    Server::bind(config).await?.run(shutdown).await
}

/// Runs a server on its own Tokio runtime until SIGTERM or SIGINT (what `mantle serve` calls).
pub fn serve(config: Config) -> anyhow::Result<()> {
    // Before the runtime: Tokio panics when it cannot start the threads asked for.
    config.validate().map_err(anyhow::Error::msg)?;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if config.threads > 0 {
        builder.worker_threads(config.threads);
    }
    let runtime = builder
        .enable_all()
        .thread_name("mantle-serve")
        .build()
        .context("starting the Tokio runtime")?;
    runtime.block_on(async move {
        let server = Server::bind(config.clone()).await?;
        let store = match &config.backend {
            Backend::RocksDb { data_dir, fsync } => {
                format!(
                    "RocksDB in {} (fsync {})",
                    data_dir.display(),
                    fsync.as_str()
                )
            }
            Backend::Upstream { url } => format!("upstream {url}"),
        };
        crate::log::log_line!(
            "mantle: serving on {} in front of {store}",
            server.local_addr()
        );
        if let Some(addr) = server.metrics_addr() {
            crate::log::log_line!(
                "mantle: dashboard on http://{addr}/ ({}), Prometheus metrics on http://{addr}/metrics",
                if config.http_admin { "admin actions with the password" } else { "read-only" }
            );
        }
        if let Some(spec) = config.warmup {
            crate::log::log_line!(
                "mantle: warming up ({spec}) in the background; progress in INFO warmup"
            );
        }
        server.run(termination()).await?;
        crate::log::log_line!("mantle: shut down cleanly");
        Ok(())
    })
}

/// Completes on SIGTERM or SIGINT.
async fn termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Answers a client over `--maxclients` and closes it at once: a flood of them must not hold
/// descriptors (the reply fits any fresh socket's send buffer, so one try is enough).
fn reject(socket: TcpStream) {
    let _ = socket.try_write(b"-ERR max number of clients reached\r\n");
}

/// Keeps the connected-clients gauge right however the connection ends.
struct ClientGauge<'a>(&'a Stats);

impl Drop for ClientGauge<'_> {
    fn drop(&mut self) {
        self.0.connected_clients.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn serve_connection(
    instance: &Instance,
    socket: TcpStream,
    peer: SocketAddr,
    stop: watch::Receiver<bool>,
) {
    let stats = instance.db.stats();
    Stats::bump(&stats.connected_clients);
    let _gauge = ClientGauge(stats);
    let _ = socket.set_nodelay(true);
    let mut session = Session::new(
        instance.next_client_id(),
        instance.requires_auth(),
        Some(peer),
    );
    let mut connection = Connection::new(socket, limits_for(instance, &session));
    let query_limit = QUERY_BUFFER_LIMIT.max(instance.max_bulk_len().saturating_mul(2));
    // Some queued reply may reveal stored data: it waits for durability (see `send`).
    let mut revealing = false;
    let mut held = Held::default();
    let mut args = Vec::new();
    let mut run = WriteRun::default();
    // One wait for shutdown for the connection's life: a fresh `changed()` per read would
    // register with the channel and deregister again for every request.
    let mut stop_wait = stop.clone();
    let stopped = stop_wait.changed();
    tokio::pin!(stopped);
    loop {
        // Run every complete request buffered, then write all their replies at once.
        loop {
            connection.set_limits(limits_for(instance, &session));
            let outcome = match connection.next_request(&mut args) {
                Ok(true) => {
                    Stats::bump(&stats.commands_processed);
                    match dispatch(instance, &mut session, &args, &mut revealing, &mut run).await {
                        Outcome::Forward(addr) => submit(instance, &session, &args, addr),
                        outcome => outcome,
                    }
                }
                Ok(false) => break,
                Err(error) => {
                    Stats::bump(&stats.protocol_errors);
                    run.write(instance).await;
                    run.queue_written(&mut connection, session.protocol);
                    held.push(Outcome::Reply(Frame::err(&error)), session.protocol);
                    let _ = send(
                        instance,
                        &mut session,
                        &mut connection,
                        &mut held,
                        revealing,
                    )
                    .await;
                    return;
                }
            };
            // The deferred writes that ran before this request answer first. (Never behind
            // held replies: write runs are made outside a cluster, held replies in proxy mode.)
            run.queue_written(&mut connection, session.protocol);
            match outcome {
                Outcome::Reply(reply) if held.is_empty() => {
                    connection.queue(&reply, session.protocol)
                }
                Outcome::Relayed(raw) if held.is_empty() => connection.queue_raw(&raw),
                Outcome::Deferred => {}
                outcome => held.push(outcome, session.protocol),
            }
            if session.closing {
                let _ = send(
                    instance,
                    &mut session,
                    &mut connection,
                    &mut held,
                    revealing,
                )
                .await;
                return;
            }
            if connection.pending_output() >= crate::connection::FLUSH_AT || held.is_full() {
                if !send(
                    instance,
                    &mut session,
                    &mut connection,
                    &mut held,
                    revealing,
                )
                .await
                {
                    return;
                }
                revealing = false;
            }
        }
        run.write(instance).await;
        run.queue_written(&mut connection, session.protocol);
        if !send(
            instance,
            &mut session,
            &mut connection,
            &mut held,
            revealing,
        )
        .await
        {
            return;
        }
        revealing = false;
        if connection.buffered() as u64 > query_limit {
            connection.queue(
                &Frame::err("Protocol error: query buffer limit exceeded"),
                session.protocol,
            );
            let _ = connection.flush().await;
            return;
        }
        if *stop.borrow() {
            return;
        }
        tokio::select! {
            more = connection.read_more() => match more {
                Ok(true) => {}
                Ok(false) | Err(_) => return,
            },
            _ = &mut stopped => return,
        }
    }
}

/// Most plain SETs one connection defers before writing them (and the most value bytes).
const RUN_MAX_WRITES: usize = 1024;
const RUN_MAX_BYTES: usize = 4 << 20;

/// The plain `SET key value` requests of one pipeline, deferred and written to the store as
/// one batch when the connection reaches anything else (another command, the end of what the
/// client sent, the run's size limit): a `-P 16` batch of SETs costs one store write and no
/// task wake-ups instead of sixteen group commits. Each SET still gets its own reply, in
/// order, and the replies still leave only after `send` has committed them (durability is
/// unchanged). A run of one SET takes the ordinary path, group commit with other clients.
#[derive(Default)]
struct WriteRun {
    pairs: Vec<(bytes::Bytes, bytes::Bytes)>,
    bytes: usize,
    /// The reply each SET of the run last written gets, and how many there were.
    written: Option<(Frame, usize)>,
}

impl WriteRun {
    fn is_full(&self) -> bool {
        self.pairs.len() >= RUN_MAX_WRITES || self.bytes >= RUN_MAX_BYTES
    }

    fn push(&mut self, pair: (bytes::Bytes, bytes::Bytes)) {
        self.bytes += pair.0.len() + pair.1.len();
        self.pairs.push(pair);
    }

    /// Writes the deferred SETs (one batch for all, or the ordinary path for one); their
    /// replies wait in `written` for [`WriteRun::queue_written`].
    async fn write(&mut self, instance: &Instance) {
        let n = self.pairs.len();
        if n == 0 {
            return;
        }
        let result = match &self.pairs[..] {
            [(key, value)] => instance
                .db
                .set(key, value, 0, crate::store::Condition::Always, None)
                .await
                .map(|_| ()),
            pairs => instance.db.set_many(pairs).await,
        };
        let reply = match result {
            Ok(()) => Frame::ok(),
            Err(e) => crate::frame::store_error(e),
        };
        self.pairs.clear();
        self.bytes = 0;
        // Never left unqueued: every write is followed by `queue_written` before more requests.
        debug_assert!(self.written.is_none());
        self.written = Some((reply, n));
    }

    fn queue_written(&mut self, connection: &mut Connection, protocol: crate::frame::Protocol) {
        if let Some((reply, n)) = self.written.take() {
            for _ in 0..n {
                connection.queue(&reply, protocol);
            }
        }
    }
}

/// A request's answer: a reply to encode, one relayed as is from the key's owner, none yet
/// (a SET deferred into the connection's [`WriteRun`]), or (proxy mode) the owner to ask,
/// and then the request on its way there.
enum Outcome {
    Reply(Frame),
    Relayed(bytes::Bytes),
    Deferred,
    Forward(std::sync::Arc<str>),
    Sent {
        sent: crate::cluster::proxy::Sent,
        args: Vec<bytes::Bytes>,
    },
}

/// Answers held back, in request order, behind a request of the same pipeline that is still
/// at its owner (proxy mode): the pipeline goes on to the owner as a pipeline and the client
/// still gets its replies in the order it asked. Always empty outside proxy mode.
#[derive(Default)]
struct Held(std::collections::VecDeque<(Outcome, crate::frame::Protocol)>);

impl Held {
    /// Requests one client may have at other nodes at once.
    const MAX: usize = 256;

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn is_full(&self) -> bool {
        self.0.len() >= Self::MAX
    }

    /// `protocol` is the one the reply is encoded in, as it was when the request ran.
    fn push(&mut self, outcome: Outcome, protocol: crate::frame::Protocol) {
        self.0.push_back((outcome, protocol));
    }

    /// Queues every held answer on `connection`, waiting for the owners' replies in order.
    async fn release(
        &mut self,
        instance: &Instance,
        session: &mut Session,
        connection: &mut Connection,
    ) {
        while let Some((outcome, protocol)) = self.0.pop_front() {
            let outcome = match outcome {
                Outcome::Sent { sent, args } => {
                    let node = instance
                        .cluster
                        .as_deref()
                        .expect("forwarding in a cluster");
                    let first = node.proxy.answer(sent).await;
                    relay(instance, session, &args, first).await
                }
                outcome => outcome,
            };
            match outcome {
                Outcome::Reply(reply) => connection.queue(&reply, protocol),
                Outcome::Relayed(raw) => connection.queue_raw(&raw),
                Outcome::Deferred | Outcome::Forward(_) | Outcome::Sent { .. } => {
                    unreachable!("a relayed answer is final")
                }
            }
        }
    }
}

/// Runs one request: here, or (cluster) after its slot's hand-over pause, or not at all (a
/// redirection, or in proxy mode the owner to forward it to), or later (a plain SET joins the
/// connection's write run). Anything but a deferred SET first writes the run, so it sees
/// those writes and its reply follows theirs.
async fn dispatch(
    instance: &Instance,
    session: &mut Session,
    args: &[bytes::Bytes],
    revealing: &mut bool,
    run: &mut WriteRun,
) -> Outcome {
    let parsed = match Command::parse_routed(args, session, instance) {
        Err(Redirect::Wait) => {
            crate::cluster::migrate::settle(|| Command::parse_routed(args, session, instance)).await
        }
        other => other,
    };
    // Only outside a cluster: there a write's slot may be handed over between requests.
    let parsed = match parsed {
        Ok((Command::Set(set), None)) if instance.cluster.is_none() => match set.into_plain() {
            Ok(pair) => {
                if run.is_full() {
                    run.write(instance).await;
                }
                session.uncommitted = true;
                run.push(pair);
                return Outcome::Deferred;
            }
            Err(set) => Ok((Command::Set(set), None)),
        },
        other => other,
    };
    run.write(instance).await;
    match parsed {
        Ok((command, guard)) => {
            *revealing |= reveals_data(&command);
            let reply = command.apply(instance, session).await;
            drop(guard);
            Outcome::Reply(reply)
        }
        Err(Redirect::Reply(reply)) => Outcome::Reply(reply),
        Err(Redirect::Wait) => Outcome::Reply(Frame::Error(
            "TRYAGAIN the slot is being handed over to another node".into(),
        )),
        Err(Redirect::Forward(addr)) => Outcome::Forward(addr),
    }
}

/// Proxy mode: sends the request to the slot's owner; its reply is read when the pipeline's
/// replies are written (see [`Held`]).
fn submit(
    instance: &Instance,
    session: &Session,
    args: &[bytes::Bytes],
    addr: std::sync::Arc<str>,
) -> Outcome {
    let node = instance
        .cluster
        .as_deref()
        .expect("forwarding only in a cluster");
    match node.proxy.submit(&addr, args, session.id) {
        Ok(sent) => Outcome::Sent {
            sent,
            args: args.to_vec(),
        },
        Err(e) => Outcome::Reply(Frame::err(e)),
    }
}

/// Proxy mode: turns the owner's reply into the client's. An owner that answers `-MOVED`
/// (this node's map was behind, e.g. during a migration) is asked again once the map here
/// moved on.
async fn relay(
    instance: &Instance,
    session: &mut Session,
    args: &[bytes::Bytes],
    mut reply: Result<bytes::Bytes, String>,
) -> Outcome {
    let node = instance
        .cluster
        .as_deref()
        .expect("forwarding only in a cluster");
    let mut addr;
    for _ in 0..16 {
        let raw = match reply {
            Ok(raw) => raw,
            Err(e) => return Outcome::Reply(Frame::err(e)),
        };
        let moved = crate::cluster::proxy::moved_to(&raw).map(std::sync::Arc::<str>::from);
        if moved.is_none() && !crate::cluster::proxy::is_tryagain(&raw) {
            return Outcome::Relayed(raw);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        match crate::cluster::migrate::settle(|| Command::parse_routed(args, session, instance))
            .await
        {
            Ok((command, guard)) => {
                let reply = command.apply(instance, session).await;
                drop(guard);
                return Outcome::Reply(reply);
            }
            // The owner's word is fresher than this node's map, unless it names this node.
            Err(Redirect::Forward(next)) => {
                addr = moved.filter(|m| **m != *node.addr).unwrap_or(next)
            }
            Err(Redirect::Reply(reply)) => return Outcome::Reply(reply),
            Err(Redirect::Wait) => return Outcome::Relayed(raw),
        }
        reply = node.proxy.forward(&addr, args, session.id).await;
    }
    Outcome::Reply(Frame::Error(
        "TRYAGAIN the key's owner kept changing; retry".into(),
    ))
}

/// Whether `command`'s reply can reveal stored data (a value, a key's existence or expiry,
/// the key count). Such replies wait until every write they could have seen is durable.
/// INFO is left out on purpose: it is how an operator looks at a failed store.
fn reveals_data(command: &Command) -> bool {
    matches!(
        command,
        Command::Get(_) | Command::MGet(_) | Command::Exists(_) | Command::Ttl(_) | Command::DbSize
    )
}

/// Writes the queued replies, first committing the writes they acknowledge and (when
/// `revealing`) any write of others they could have seen. Returns false when the client is
/// gone. If the store cannot commit, every queued reply is replaced by the store's error: no
/// write that may be lost is acknowledged or shown, and the client keeps one reply per request.
async fn send(
    instance: &Instance,
    session: &mut Session,
    connection: &mut Connection,
    held: &mut Held,
    revealing: bool,
) -> bool {
    held.release(instance, session, connection).await;
    let committed = if session.uncommitted {
        instance.db.commit().await
    } else if revealing {
        instance.db.commit_before_reveal().await
    } else {
        Ok(())
    };
    session.uncommitted = false;
    if let Err(e) = committed {
        let error = Frame::Error(format!("MISCONF store write failed: {e}"));
        for _ in 0..connection.discard_queued() {
            connection.queue(&error, session.protocol);
        }
    }
    connection.flush().await.is_ok()
}

/// Tells the engine's thread to adopt the registry whenever it changes, until the server
/// (the last strong reference to `instance`) is gone.
fn follow_policy_registry(
    instance: std::sync::Weak<Instance>,
    watch: cluster::PolicyWatch,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut changes = watch.subscribe();
        while changes.changed().await.is_ok() {
            let connected = changes.borrow_and_update().connected;
            if !connected {
                continue;
            }
            let Some(instance) = instance.upgrade() else {
                break;
            };
            let _ = instance.live.request(crate::live::Op::Sync).await;
        }
        drop(watch);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_descriptor_budget_always_leaves_the_store_its_share() {
        for limit in [100u64, 256, 1024, 4096, 65_536, 1 << 20] {
            for maxclients in [1usize, 100, 10_000, 1_000_000] {
                let Some(b) = DescriptorBudget::share(limit, maxclients, true) else {
                    assert!(limit <= STORE_FILES_MIN.max(limit / 4) + RESERVED_DESCRIPTORS);
                    continue;
                };
                assert!(b.maxclients >= 1 && b.maxclients <= maxclients);
                assert!(b.store_files >= STORE_FILES_MIN && b.store_files <= STORE_FILES_MAX);
                assert!(b.maxclients as u64 + b.store_files + RESERVED_DESCRIPTORS <= limit);
            }
        }
        let upstream = DescriptorBudget::share(1024, 10_000, false).unwrap();
        assert_eq!(upstream.store_files, 0);
        assert_eq!(upstream.maxclients, 1024 - RESERVED_DESCRIPTORS as usize);
    }
}
