//! Replay across several simulated nodes (`mantle replay --nodes N`): the cluster's key space
//! of 16,384 slots (the same CRC16 slot of the same key text the live cluster uses), one
//! cache per node, per-node load over trace time, and the balancing policy ticking on every
//! node with every node's metrics, so a balancer is tried offline before it runs live.
//!
//! Model, stated so the figures can be read for what they are:
//! - A request goes to the node owning its key's slot; that node's cache serves it (a miss
//!   reads the store, which every node shares).
//! - A node's load is its request rate over the last tick (what `servers[i].load` shows);
//!   a slot's load likewise.
//! - At each tick every node's policy runs with `whoami` = its index. When it asks to send
//!   load (`where()`, or a Ceph chunk's targets), the node exports slots whose measured load
//!   fills each amount: hottest first, stopping once 80% of the amount is reached, never
//!   above 120% (Ceph's `find_exports` rule). A node runs one export at a time.
//! - An export moves the slots' stored bytes (every distinct key seen in them, at its last
//!   size) at `--migration-rate` bytes per second of trace time; the source serves the
//!   slots until the copy is done, then ownership flips, the source drops its cached copies
//!   and the target starts cold for them.
//! - Ticks fall where `replay`'s do (`TickSchedule`: a time tick runs up to 1,000 empty
//!   ticks of an idle gap one by one; a request-count tick at the time of its last request).
//!   On a trace without timestamps a request-count tick `k` is at time `k` and counts as one
//!   second (there is no other clock, and a balancer needs loads).
//! - Each node serves a request as `replay` does (`Cache::serve_as`; with `--classes` every
//!   node's cache is classed by the same rules and reports its per-class counters), the store
//!   behind them
//!   is `replay`'s back-end model (one store every node shares), a node's policy sees
//!   `replay`'s metrics of its cache and its own `timeseries()`, and its cache decision
//!   (`{capacity=N}`, evictions) applies to its cache: one node replays as `replay` does.
//! - Keys map to slots by hash (the live cluster's rule) or, with [`Placement::Range`], by
//!   their place in the trace's key order ([`KeyRanges`]): each node then owns contiguous
//!   ranges of the key space and every unit a balancer moves is one.

mod clock;
mod report;

pub use clock::{DueTick, NodeClock};

pub use report::{
    build as build_report, write_loads_csv, ClusterReport, MigrationRecord, NodeParts, NodeReport,
    NodesTickRow, Parts, PolicyParts,
};

use crate::backend::{Backend, BackendSpec};
use crate::cache_metrics::{cache_metrics, CacheSample};
use crate::replay::ReplayError;
use crate::replay_cache::{class_reports, classify, rule_op};
use crate::tick_schedule::Tick;
use cache::classes::ClassSet;
use cache::{AccessLog, Algorithm, Cache, Capacity, ClassLayer, RequestCounts, Served};
use cluster::{exports, NodeId, SlotMap};
use policy::{Action, Limits, LoadError, Metrics, Params, PolicyEngine, SlotLoad, TickInput};
use slots::{key_slot, SLOTS};
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;
use trace::{Op, Request};

/// Most nodes a simulation takes (each has its own cache and policy state).
pub const MAX_NODES: usize = 256;

/// How keys map to slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// CRC16 of the key's decimal text, as the live cluster hashes what `replay --server`
    /// sends.
    Hash,
    /// The trace's distinct keys in numeric order, cut into 16,384 slots of equal key
    /// counts ([`KeyRanges`], given in [`NodesConfig::key_ranges`]): a slot range is a
    /// contiguous range of keys. Simulator only: a live cluster hashes.
    Range,
}

/// Range placement's key order: the trace's distinct keys, sorted. The key of rank `r` (of
/// `n`) is in slot `r * 16384 / n`, so slots hold equal numbers of keys (to within one) and
/// keep key order; with fewer keys than slots, each key has a slot of its own, spread over
/// the whole slot space so an even spread of slots is an even spread of keys. Cutting at key
/// counts, not at values, is how range-partitioned stores split (by size), and it keeps
/// traces whose keys cluster (small integers beside a few huge ones) from putting every key
/// in one slot.
#[derive(Debug, Clone, Default)]
pub struct KeyRanges {
    keys: Vec<u64>,
}

impl KeyRanges {
    /// From every key of the trace (repeats are fine).
    pub fn from_keys(mut keys: Vec<u64>) -> KeyRanges {
        keys.sort_unstable();
        keys.dedup();
        keys.shrink_to_fit();
        KeyRanges { keys }
    }

    /// Distinct keys known.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The slot of `key`: by its rank among the known keys (a key not among them takes the
    /// rank it would have, so order is kept for every key).
    pub fn slot(&self, key: u64) -> u16 {
        let n = self.keys.len().max(1) as u64;
        let rank = self.keys.partition_point(|&k| k < key) as u64;
        (rank.min(n - 1) * u64::from(SLOTS) / n) as u16
    }
}

/// How this replay maps keys to slots.
enum Slotter {
    Hash(itoa::Buffer),
    Range(std::sync::Arc<KeyRanges>),
}

impl Slotter {
    fn of(config: &NodesConfig) -> Slotter {
        match (config.placement, &config.key_ranges) {
            (Placement::Hash, _) => Slotter::Hash(itoa::Buffer::new()),
            (Placement::Range, Some(ranges)) => Slotter::Range(ranges.clone()),
            (Placement::Range, None) => Slotter::Range(Default::default()),
        }
    }

    fn slot(&mut self, key: u64) -> u16 {
        match self {
            Slotter::Hash(digits) => key_slot(digits.format(key).as_bytes()),
            Slotter::Range(ranges) => ranges.slot(key),
        }
    }
}

/// Everything a multi-node replay needs besides the requests and the policy.
#[derive(Debug, Clone)]
pub struct NodesConfig {
    pub nodes: usize,
    pub placement: Placement,
    /// With [`Placement::Range`]: the trace's keys (the caller reads them first; without
    /// them every key is in slot 0).
    pub key_ranges: Option<std::sync::Arc<KeyRanges>>,
    pub algorithm: Algorithm,
    /// Capacity of each node's cache.
    pub capacity: Capacity,
    pub tick: Tick,
    /// Bytes per second of trace time a migration copies.
    pub migration_rate: f64,
    /// Keep one row per tick (for CSV output and reports).
    pub record_ticks: bool,
    /// The store every node shares (`--backend`), modelled as `replay` models it.
    pub backend: BackendSpec,
    /// Bound of each node's access log (`timeseries()`, `--timeseries`).
    pub timeseries_limit: usize,
    /// `--classes`: every node's cache is classed by these rules.
    pub classes: Option<ClassSet>,
    /// The trace has timestamps: request-count ticks fall at their last request's time, as
    /// in `replay`. Without, tick `k` is at time `k` and counts as one second.
    pub trace_clock: bool,
}

impl Default for NodesConfig {
    fn default() -> NodesConfig {
        NodesConfig {
            nodes: 3,
            placement: Placement::Hash,
            key_ranges: None,
            algorithm: Algorithm::Lru,
            capacity: Capacity::default(),
            tick: Tick::Seconds(1.0),
            migration_rate: 100.0 * 1024.0 * 1024.0,
            record_ticks: false,
            backend: BackendSpec::default(),
            timeseries_limit: 1_000_000,
            classes: None,
            trace_clock: true,
        }
    }
}

/// The balancing policy every node runs, one engine per node (as on a live cluster).
pub struct Balancer {
    engines: Vec<PolicyEngine>,
    params: Params,
    name: String,
    /// The policy reads `timeseries()`: each node then keeps its access log.
    uses_timeseries: bool,
}

impl Balancer {
    /// Loads `path` once per node.
    pub fn from_file(
        path: &Path,
        nodes: usize,
        params: Params,
        limits: Limits,
    ) -> Result<Balancer, LoadError> {
        let mut engines = Vec::with_capacity(nodes);
        let mut name = String::new();
        for _ in 0..nodes {
            let mut engine = PolicyEngine::new(limits);
            name = engine.load_file(path)?.to_string();
            engines.push(engine);
        }
        // The same test replay's policy driver makes (a source it cannot read keeps the log).
        let uses_timeseries = std::fs::read_to_string(path)
            .map(|s| s.contains("timeseries"))
            .unwrap_or(true);
        Ok(Balancer {
            engines,
            params,
            name,
            uses_timeseries,
        })
    }
}

struct Node<L: ClassLayer> {
    cache: Cache<L>,
    c: RequestCounts,
    at_tick: RequestCounts,
    /// What the node's policy sees as `timeseries()`: its lookups and writes.
    log: AccessLog,
    /// Load at the last tick (requests per second).
    load: f64,
    load_sum: f64,
    load_peak: f64,
    /// An export of this node is in flight.
    exporting: bool,
    exported_slots: u64,
    imported_slots: u64,
}

/// A migration under way.
struct InFlight {
    record: MigrationRecord,
    slots: Vec<u16>,
    done_at: f64,
}

/// The state of a multi-node replay between requests.
struct Cluster<'b, L: ClassLayer> {
    config: &'b NodesConfig,
    balancer: Option<&'b mut Balancer>,
    nodes: Vec<Node<L>>,
    owner: Vec<u16>,
    /// The store every node shares (a miss reads it, a put or delete writes it).
    backend: Backend,
    slot_requests: Vec<u32>,
    slot_bytes: Vec<u64>,
    key_sizes: HashMap<u64, u32>,
    in_flight: Vec<InFlight>,
    migrations: Vec<MigrationRecord>,
    rows: Vec<NodesTickRow>,
    imbalances: Vec<f64>,
    slotter: Slotter,
    policy_errors: u64,
    policy_decisions: u64,
    policy_actions: u64,
}

/// Replays every request `next` yields across `config.nodes` nodes. Ticks fall where
/// `replay`'s do ([`crate::tick_schedule::TickSchedule`]), and each node serves its requests, counts them and shows
/// them to its policy as `replay` does, so one node replays exactly as `replay` (for the
/// policy's time ticks; a request-count tick `k` is at time `k` and counts as one second).
pub fn replay_nodes<E>(
    config: &NodesConfig,
    balancer: Option<&mut Balancer>,
    next: impl FnMut() -> Result<Option<Request>, E>,
) -> Result<ClusterReport, ReplayError<E>> {
    let (algorithm, capacity) = (config.algorithm, config.capacity);
    // The loop is compiled for each class layer, as replay's is: no class code without.
    match &config.classes {
        None => run(config, balancer, next, || Cache::new(algorithm, capacity)),
        Some(set) => run(config, balancer, next, || {
            Cache::with_classes(algorithm, capacity, set.clone())
        }),
    }
}

fn run<E, L: ClassLayer>(
    config: &NodesConfig,
    balancer: Option<&mut Balancer>,
    mut next: impl FnMut() -> Result<Option<Request>, E>,
    new_cache: impl Fn() -> Cache<L>,
) -> Result<ClusterReport, ReplayError<E>> {
    assert!(
        (1..=MAX_NODES).contains(&config.nodes),
        "node count checked by the caller"
    );
    let started = Instant::now();
    let ids: Vec<NodeId> = (0..config.nodes)
        .map(|i| NodeId::new(&format!("node{i}")).expect("a valid id"))
        .collect();
    let map = SlotMap::default()
        .rebalance(&ids)
        .expect("at least one node");
    let table = map.owner_table();
    let owner: Vec<u16> = (0..SLOTS)
        .map(|s| {
            let id = table.owner_of(s).expect("every slot owned");
            ids.iter().position(|x| x == id).expect("a known node") as u16
        })
        .collect();
    // A policy that ignores the time series still gets an (empty) one to hand out.
    let record_log = balancer.as_ref().is_some_and(|b| b.uses_timeseries);
    let log_limit = if record_log {
        config.timeseries_limit
    } else {
        1
    };
    let nodes: Vec<Node<L>> = (0..config.nodes)
        .map(|_| Node {
            cache: new_cache(),
            c: RequestCounts::default(),
            at_tick: RequestCounts::default(),
            log: AccessLog::new(log_limit),
            load: 0.0,
            load_sum: 0.0,
            load_peak: 0.0,
            exporting: false,
            exported_slots: 0,
            imported_slots: 0,
        })
        .collect();
    let mut sim = Cluster {
        config,
        balancer,
        nodes,
        owner,
        backend: Backend::new(config.backend),
        slot_requests: vec![0u32; usize::from(SLOTS)],
        slot_bytes: vec![0u64; usize::from(SLOTS)],
        key_sizes: HashMap::new(),
        in_flight: Vec::new(),
        migrations: Vec::new(),
        rows: Vec::new(),
        imbalances: Vec::new(),
        slotter: Slotter::of(config),
        policy_errors: 0,
        policy_decisions: 0,
        policy_actions: 0,
    };

    let mut clock = NodeClock::new(config.tick, config.trace_clock);
    let mut first_time: Option<f64> = None;
    let mut last_time: f64 = 0.0;
    let mut requests: u64 = 0;
    while let Some(r) = next().map_err(ReplayError::Source)? {
        let due = clock.before(r.time).map_err(|reason| ReplayError::Clock {
            request: requests + 1,
            time: r.time,
            reason,
        })?;
        for &t in due {
            sim.tick(t);
        }
        first_time.get_or_insert(r.time);
        last_time = r.time;
        requests += 1;
        sim.serve(&r, record_log);
        if let Some(t) = clock.after() {
            sim.tick(t);
        }
    }

    let wall = started.elapsed().as_secs_f64();
    let nodes = &sim.nodes;
    Ok(report::build(report::Parts {
        config,
        nodes: &nodes
            .iter()
            .map(|n| report::NodeParts {
                requests: n.c.requests,
                lookups: n.c.lookups(),
                hits: n.c.hits,
                misses: n.c.misses,
                load_sum: n.load_sum,
                load_peak: n.load_peak,
                cached_objects: n.cache.len(),
                exported_slots: n.exported_slots,
                imported_slots: n.imported_slots,
                classes: class_reports(&n.cache),
            })
            .collect::<Vec<_>>(),
        owner: &sim.owner,
        imbalances: &sim.imbalances,
        ticks: clock.ticks(),
        migrations: sim.migrations,
        unfinished: sim.in_flight.into_iter().map(|m| m.record).collect(),
        rows: sim.rows,
        policy: sim.balancer.map(|b| PolicyParts {
            name: b.name.clone(),
            decisions: sim.policy_decisions,
            actions: Some(sim.policy_actions),
            errors: sim.policy_errors,
        }),
        backend: Some(
            sim.backend
                .summary(first_time.is_some_and(|t| last_time > t)),
        ),
        duration: first_time.map(|t| last_time - t),
        wall_seconds: wall,
        requests,
    }))
}

impl<L: ClassLayer> Cluster<'_, L> {
    /// One request, on the node owning its key's slot, through the one request path.
    fn serve(&mut self, r: &Request, record_log: bool) {
        let slot = self.slotter.slot(r.key);
        let s = usize::from(slot);
        self.slot_requests[s] += 1;
        if r.op == Op::Delete {
            if let Some(old) = self.key_sizes.remove(&r.key) {
                self.slot_bytes[s] -= u64::from(old);
            }
        } else {
            let old = self.key_sizes.insert(r.key, r.size).unwrap_or(0);
            self.slot_bytes[s] += u64::from(r.size);
            self.slot_bytes[s] -= u64::from(old);
        }
        let node = &mut self.nodes[usize::from(self.owner[s])];
        let class = classify(&node.cache, r);
        let served = node
            .cache
            .serve_as(rule_op(r.op), r.key, r.size, class, &mut node.c);
        match served {
            Served::Miss => self.backend.read(r.time),
            Served::Written | Served::Deleted => self.backend.write(r.time),
            Served::Hit => {}
        }
        if record_log && served != Served::Deleted {
            node.log.record(r.time, r.key);
        }
    }

    /// One tick at `now`, ending an interval of `seconds`: migrations done flip, every
    /// node's policy runs, its cache decision applies and its exports start.
    fn tick(&mut self, due: DueTick) {
        let DueTick {
            tick: tick_no,
            now,
            seconds,
        } = due;
        let config = self.config;
        // Migrations whose copy is done flip now.
        finish_migrations(
            &mut self.in_flight,
            now,
            tick_no,
            &mut self.owner,
            &mut self.nodes,
            &mut self.migrations,
            &mut self.slotter,
        );

        let queue = self.backend.queue_len(now);
        let metrics: Vec<Metrics> = self
            .nodes
            .iter_mut()
            .map(|n| node_metrics(n, seconds, queue))
            .collect();
        let loads: Vec<f64> = metrics.iter().map(|m| m.load).collect();
        let mean = loads.iter().sum::<f64>() / loads.len() as f64;
        let max = loads.iter().copied().fold(0.0, f64::max);
        let imbalance = if mean > 0.0 { max / mean } else { 1.0 };
        if mean > 0.0 {
            self.imbalances.push(imbalance);
        }

        let mut started_now = Vec::new();
        if let Some(b) = self.balancer.as_deref_mut() {
            // Each node's slots that may move (owned, not migrating) with their loads:
            // what `slots()` shows and what exports are chosen from.
            let mut moving = vec![false; usize::from(SLOTS)];
            for m in &self.in_flight {
                for &s in &m.slots {
                    moving[usize::from(s)] = true;
                }
            }
            let mut available: Vec<Vec<(u16, f64)>> = vec![Vec::new(); config.nodes];
            for s in 0..SLOTS {
                if !moving[usize::from(s)] {
                    let load = due.per_second(u64::from(self.slot_requests[usize::from(s)]));
                    available[usize::from(self.owner[usize::from(s)])].push((s, load));
                }
            }
            for (i, engine) in b.engines.iter_mut().enumerate() {
                engine.set_slots(SlotLoad::hottest(available[i].iter().copied()));
                let node = &mut self.nodes[i];
                let outcome = engine.tick(&TickInput {
                    now,
                    tick: tick_no,
                    whoami: i,
                    servers: &metrics,
                    params: &b.params,
                    timeseries: &node.log,
                });
                let _ = engine.drain_logs();
                if outcome.error.is_some() {
                    self.policy_errors += 1;
                    continue;
                }
                // The node's own cache decision, as `replay` applies it.
                match outcome.decision.action {
                    Action::None => {}
                    Action::Evict(n) => {
                        self.policy_actions += 1;
                        node.cache.evict(n);
                    }
                    Action::SetCapacity(n) => {
                        self.policy_actions += 1;
                        let mut cap = node.cache.capacity();
                        cap.objects = Some(n);
                        node.cache.set_capacity(cap);
                    }
                }
                let targets: Vec<(usize, f64)> = outcome
                    .decision
                    .targets
                    .iter()
                    .copied()
                    .filter(|&(t, amount)| t != i && t < config.nodes && amount > 0.0)
                    .collect();
                if targets.is_empty() {
                    continue;
                }
                self.policy_decisions += 1;
                if node.exporting {
                    continue;
                }
                let plan = exports::plan(&targets, &available[i], &outcome.decision.units);
                for export in plan {
                    let (target, amount, load) = (export.target, export.amount, export.load);
                    let chosen = export.slots;
                    if chosen.is_empty() {
                        continue;
                    }
                    let bytes: u64 = chosen
                        .iter()
                        .map(|&s| self.slot_bytes[usize::from(s)])
                        .sum();
                    let copy_seconds = bytes as f64 / config.migration_rate;
                    let record = MigrationRecord {
                        from: i,
                        to: target,
                        ranges: exports::ranges(&chosen),
                        slots: chosen.len() as u64,
                        bytes,
                        load,
                        amount,
                        start_tick: tick_no,
                        start_time: now,
                        copy_seconds,
                        done_tick: None,
                    };
                    started_now.push(InFlight {
                        record,
                        slots: chosen,
                        done_at: now + copy_seconds,
                    });
                    self.nodes[i].exporting = true;
                }
            }
        }
        self.in_flight.extend(started_now);
        // A move that copies nothing (`--migration-rate unlimited`) is done at once, as
        // a live replay in lock step waits for its migrations before going on.
        finish_migrations(
            &mut self.in_flight,
            now,
            tick_no,
            &mut self.owner,
            &mut self.nodes,
            &mut self.migrations,
            &mut self.slotter,
        );

        if config.record_ticks {
            self.rows.push(NodesTickRow {
                tick: tick_no,
                time: now,
                loads,
                max_over_mean: imbalance,
                migrations_in_flight: self.in_flight.len() as u64,
            });
        }
        self.slot_requests.iter_mut().for_each(|c| *c = 0);
    }
}

/// Flips the migrations whose copy is done by `now`: the target owns their slots, the source
/// drops its cached copies of their keys.
fn finish_migrations<L: ClassLayer>(
    in_flight: &mut Vec<InFlight>,
    now: f64,
    tick_no: u64,
    owner: &mut [u16],
    nodes: &mut [Node<L>],
    migrations: &mut Vec<MigrationRecord>,
    slotter: &mut Slotter,
) {
    in_flight.retain_mut(|m| {
        if m.done_at > now {
            return true;
        }
        let moved: std::collections::HashSet<u16> = m.slots.iter().copied().collect();
        for &s in &m.slots {
            owner[usize::from(s)] = m.record.to as u16;
        }
        let source = &mut nodes[m.record.from];
        let stale: Vec<u64> = source
            .cache
            .objects()
            .map(|(k, _, _)| k)
            .filter(|&k| moved.contains(&slotter.slot(k)))
            .collect();
        for k in stale {
            source.cache.remove(k);
        }
        source.exporting = false;
        source.exported_slots += m.slots.len() as u64;
        nodes[m.record.to].imported_slots += m.slots.len() as u64;
        m.record.done_tick = Some(tick_no);
        migrations.push(m.record.clone());
        false
    });
}

/// One node's metrics for the tick that just ended (replay's definitions, with the shared
/// store's queue), and its counters moved on.
fn node_metrics<L: ClassLayer>(node: &mut Node<L>, seconds: f64, backend_queue: f64) -> Metrics {
    let (c, p) = (node.c, node.at_tick);
    node.at_tick = c;
    let metrics = cache_metrics(&CacheSample {
        cache: &node.cache,
        now: &c,
        then: &p,
        backend_ops: (
            c.backend_reads() + c.backend_writes(),
            p.backend_reads() + p.backend_writes(),
        ),
        backend_queue,
        seconds,
    });
    node.load = metrics.load;
    node.load_sum += metrics.load;
    node.load_peak = node.load_peak.max(metrics.load);
    metrics
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests for 40 keys of distinct slots over 3 s, key k asked 40 - k times a second, all on node 0's
    /// slots (node 0 owns 0..=5461).
    fn requests() -> Vec<Request> {
        let mut seen = std::collections::HashSet::new();
        let keys: Vec<u64> = (0u64..)
            .filter(|k| {
                let slot = key_slot(k.to_string().as_bytes());
                slot <= 5461 && seen.insert(slot)
            })
            .take(40)
            .collect();
        let mut out = Vec::new();
        for second in 0..3 {
            for (rank, &key) in keys.iter().enumerate() {
                for i in 0..(40 - rank) {
                    out.push(Request {
                        time: f64::from(second) + i as f64 / 100.0,
                        key,
                        size: 10,
                        op: Op::Get,
                        offset: 0,
                    });
                }
            }
        }
        out.sort_by(|a, b| a.time.total_cmp(&b.time));
        out
    }

    fn run(source: &str) -> ClusterReport {
        let dir = std::env::temp_dir().join(format!("mantle-nodes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("p{}.lua", source.len()));
        std::fs::write(&path, source).unwrap();
        let config = NodesConfig {
            migration_rate: f64::INFINITY,
            ..NodesConfig::default()
        };
        let mut b = Balancer::from_file(&path, 3, Params::new(), Limits::default()).unwrap();
        let mut it = requests().into_iter();
        let report = replay_nodes(&config, Some(&mut b), || Ok::<_, ()>(it.next())).unwrap();
        let _ = std::fs::remove_file(&path);
        report
    }

    #[test]
    fn slots_show_the_hottest_and_named_units_are_what_moves() {
        // Node 0 checks what slots() shows, then names its second-hottest slot; a generous
        // amount would take many slots by the default rule, but only the named unit goes.
        let report = run(r#"
function when()
  if whoami ~= 0 or tick ~= 1 then return false end
  local s = slots()
  assert(#s == 40, "every loaded slot of node 0: " .. #s)
  assert(s[1].load == 40 and s[2].load == 39 and s[1].first == s[1].last)
  WANT = s[2].first
  return true
end
function howmuch() return {WANT} end
function where() return {[2] = 1e9} end
"#);
        assert_eq!(report.policy.as_ref().unwrap().errors, 0);
        let list = &report.migrations.list;
        assert_eq!(list.len(), 1, "{list:?}");
        assert_eq!((list[0].from, list[0].to, list[0].slots), (0, 2, 1));
        // Done within its tick (unlimited rate), so the rest of the trace goes to node 2.
        assert_eq!(list[0].done_tick, Some(1));
        assert_eq!(list[0].start_tick, 1);
        assert!((list[0].load - 39.0).abs() < 1e-9, "{}", list[0].load);
    }
}
