//! Listening, accepting clients (up to `--maxclients`, within the open-file limit) and an
//! orderly shutdown that stops accepting, lets connections finish the command they are
//! running, and syncs the store. Each accepted connection is served by `crate::handler`.

use crate::config::{Backend, Config};
use crate::connection_groups::ConnectionGroups;
use crate::db::Db;
use crate::instance::Instance;
use crate::live::space::Space;
use crate::live::LivePolicy;
use crate::metrics::Stats;
use anyhow::Context;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use store::{Storage, Store};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

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
        store::log_line!(
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
    /// Where the warm-up record is kept (none in front of an upstream without `--state-dir`).
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
        let options = store::rocks::OpenOptions {
            max_open_files: i32::try_from(budget.store_files).unwrap_or(i32::MAX),
            wal_recovery: config.wal_recovery,
            memory: config.store_memory(),
            flush_idle_memtables: true,
        };
        let store = Store::open(&config.backend, options, config.upstream_options()).await?;
        // Opened before the Db: the key hash's seeds are kept there (with the warm-up record
        // that was tagged with them).
        let space = Space::for_server(&store, config.state_dir.as_deref(), options)?;
        let db = Db::with_classes(
            store,
            config.eviction,
            config.capacity(),
            config.classes.clone(),
            crate::warmup::persist::table_hasher(&space),
        );
        if let (Some(path), false) = (&config.policy, config.no_policy) {
            // Per-request hooks run in the cache itself, from the first request on.
            let hooks = policy::hook_source(path, policy::Params::new(), config.policy_limits)
                .map_err(|e| anyhow::anyhow!("--policy {}: {e}", path.display()))?;
            if let Some(hooks) = hooks {
                db.set_hooks(hooks)
                    .map(drop)
                    .map_err(|e| anyhow::anyhow!("--policy {}: {e}", path.display()))?;
            }
        }
        if matches!(config.backend, crate::config::Backend::RocksDb { .. }) {
            db.reserve_for_store(options.memory.total());
        }
        let warmup_space = crate::warmup::load::open(&db, &config, space.clone())?;
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
            // A log node's entries live on other nodes too (the clients replicate them), so
            // its slots may be taken over like a cache tier's.
            let reassignable = db.store().slot_data().is_none() || config.log_node;
            crate::cluster::failover::start(node, reassignable)
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
        let functions_space = space.clone();
        let live = LivePolicy::start_shared(db.clone(), &config, space, shared)
            .await
            .context("starting the policy engine")?;
        let mut instance = Instance::new(db, live, config, local_addr);
        if let Some(node) = &cluster {
            let _ = node.sequencers.set(Arc::clone(&instance.sequencers));
        }
        instance.cluster = cluster;
        let instance = Arc::new(instance);
        start_functions(&instance, functions_space)
            .await
            .context("starting the functions engine")?;
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

    /// The shared state, for the crate's tests that run commands without a client.
    #[cfg(test)]
    pub(crate) fn instance(&self) -> &Arc<Instance> {
        &self.instance
    }

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
        let mut connections = ConnectionGroups::for_runtime(instance.config.connection_groups);
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
                            connections.serve(Box::pin(async move {
                                crate::handler::serve(&instance, socket, peer, stop).await;
                                drop(permit);
                            }));
                        }
                        Err(_) => {
                            Stats::bump(&stats.rejected_connections);
                            reject(socket);
                        }
                    }
                }
                _ = connections.reap(), if connections.has_tasks() => {}
            }
        }
        drop(listener);
        // Leave first, so other nodes and clients stop sending here while this one drains.
        if let Some(node) = &instance.cluster {
            node.leave().await;
        }
        let _ = stop_tx.send(true);
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, connections.drain()).await;
        if drained.is_err() {
            connections.abort();
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

/// Starts the functions thread, with the libraries of the node's registry (`space`: its
/// store or `--state-dir`; etcd in a cluster) installed.
async fn start_functions(instance: &Arc<Instance>, space: Space) -> anyhow::Result<()> {
    let registry = match &instance.cluster {
        Some(node) => crate::functions::registry::Registry::Cluster(Box::new(
            ::cluster::FunctionStore::new(node.plane().clone()),
        )),
        None => crate::functions::registry::Registry::local(space),
    };
    instance
        .functions
        .start(registry, instance.config.function_limits)
        .await
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
        // Start-up is over: the code only it ran need not stay mapped (start_up_pages).
        if let Err(err) = crate::start_up_pages::release() {
            store::log_line!("mantle: start-up code stays resident: cannot read /proc/self/smaps: {err}");
        }
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
        store::log_line!(
            "mantle: serving on {} in front of {store}",
            server.local_addr()
        );
        if let Some(addr) = server.metrics_addr() {
            store::log_line!(
                "mantle: dashboard on http://{addr}/ ({}), Prometheus metrics on http://{addr}/metrics",
                if config.http_admin { "admin actions with the password" } else { "read-only" }
            );
        }
        if let Some(spec) = config.warmup {
            store::log_line!(
                "mantle: warming up ({spec}) in the background; progress in INFO warmup"
            );
        }
        server.run(termination()).await?;
        store::log_line!("mantle: shut down cleanly");
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
