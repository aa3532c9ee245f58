//! The balancer on a live cluster node (issue 13, DESIGN §8): the policy's `where()` moves
//! slots between nodes, as `mantle replay --nodes` simulates it.
//!
//! At each tick this node
//! 1. measures each of its slots' request rate since the last tick ([`SlotCounts`], bumped by
//!    the request router for the keyed requests it serves); its own `load` and `reqrate` are
//!    their sum, so redirections and commands without a key (POLICY, CACHE, CLUSTER) do not
//!    count, as in the simulator; `slots()` shows the hottest of them, and `sequencers()`
//!    the shared logs' sequencers in them with their `ZLOG.NEXT` and position rates
//!    (the sequencer's own counters, differenced between ticks);
//! 2. reads every node's last published metrics from the board (`cluster::board`) and hands
//!    the policy `servers[i]` for all live members, ordered by node id, with `whoami` = its
//!    own place;
//! 3. after the policy ran, publishes its own metrics, `load` being what the policy's
//!    `load()` returned;
//! 4. turns `where()`'s targets (or a Ceph chunk's) into migrations with the simulator's rule
//!    (`cluster::exports`: hottest slots first, a chunk within 80–120% of each amount, or the
//!    slot ranges `howmuch()` named, each whole), one export from a node at a time.
//!
//! With `--tick manual` (lock step, as `replay --server` drives a cluster) a tick is two
//! phases instead, the simulator's view: the node publishes its measurement first, waits
//! until every member has published one for the same `now` (at most [`LOCKSTEP_WAIT`]), and
//! only then reads the board and decides; nothing is republished after the policy ran, so
//! every node decides on the same figures whatever the order the ticks arrive in. The migrations are declared in the slot map by one
//!    compare-and-swap transaction, which fails if another node's decision took a slot first,
//!    so no slot is ever given twice; the migration path (`cluster::migrate`) then moves them.
//!
//! Every decision that asks to send load, and every migration it starts or sees finish, goes
//! to the central log with its reason.

use crate::cluster::ClusterNode;
use bytes::Bytes;
use cluster::board::Board;
use cluster::{exports, CentralLog, Level, LogEntry, LogKind, LogQueue, NodeId, SlotMap};
use policy::{Decision, Metrics, SequencerLoad, SlotLoad};
use slots::{key_slot, SlotRange, SLOTS};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// How long a silent node's metrics stay on the board.
const BOARD_TTL: Duration = Duration::from_secs(10);
/// How long a manual tick waits for the other members' measurements of the same `now`.
const LOCKSTEP_WAIT: Duration = Duration::from_secs(3);
/// How long a manual tick waits for the migrations it started.
const MIGRATION_WAIT: Duration = Duration::from_secs(60);
/// Entries the balancer's central-log queue keeps (the registry's queue is separate).
const LOG_CAPACITY: u64 = crate::cluster::CENTRAL_LOG_CAPACITY;

/// Requests this node served per slot since the last tick. Bumped on every routed request,
/// so one relaxed atomic add and nothing else.
pub struct SlotCounts(Box<[AtomicU32]>);

impl Default for SlotCounts {
    fn default() -> SlotCounts {
        SlotCounts((0..SLOTS).map(|_| AtomicU32::new(0)).collect())
    }
}

impl SlotCounts {
    #[inline]
    /// Starts loading `slot`'s counter for the [`SlotCounts::hit`] that follows.
    pub fn prefetch(&self, slot: u16) {
        if let Some(c) = self.0.get(usize::from(slot)) {
            cache::prefetch_read(c);
        }
    }

    pub fn hit(&self, slot: u16) {
        if let Some(c) = self.0.get(usize::from(slot)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counts, set back to zero.
    fn take(&self) -> Vec<u32> {
        self.0
            .iter()
            .map(|c| c.swap(0, Ordering::Relaxed))
            .collect()
    }
}

/// A node's record on the board: its metrics and the policy time they were measured at.
#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    now: f64,
    metrics: Metrics,
}

/// What the balancer remembers between ticks.
#[derive(Default)]
struct State {
    /// Nodes in `servers[]` order at the last tick.
    order: Vec<NodeId>,
    whoami: usize,
    last_now: Option<f64>,
    /// Requests per second per slot over the last tick.
    slot_rates: Vec<f64>,
    /// What `slots()` shows this tick.
    hottest: Vec<SlotLoad>,
    /// Each sequencer's epoch, requests and positions at the last tick: what this tick's
    /// rates are differenced from.
    sequencer_counts: HashMap<Bytes, (u64, u64, u64)>,
    /// What `sequencers()` shows this tick.
    sequencers: Vec<SequencerLoad>,
    /// This tick is a lock-step one (manual clock): its record is already published.
    lockstep: bool,
    /// Metrics last read from the board (and when they were measured), used while etcd
    /// does not answer.
    board: BTreeMap<NodeId, (f64, Metrics)>,
    /// Migrations this node's decisions declared and not yet seen finished.
    started: Vec<(SlotRange, NodeId)>,
    warned: bool,
    warned_lockstep: bool,
}

pub struct Balance {
    node: Weak<ClusterNode>,
    board: Board,
    queue: LogQueue,
    runtime: tokio::runtime::Handle,
    state: Mutex<State>,
}

impl Balance {
    /// The balancer of `node`; must run on the server's runtime.
    pub fn open(node: &Arc<ClusterNode>) -> Balance {
        let plane = node.plane().clone();
        let log = CentralLog::new(plane.clone(), node.id.clone(), LOG_CAPACITY);
        Balance {
            node: Arc::downgrade(node),
            board: Board::open(plane, node.id.clone(), BOARD_TTL),
            queue: log.queue(),
            runtime: tokio::runtime::Handle::current(),
            state: Mutex::new(State::default()),
        }
    }

    /// Runs `call` to completion from the engine's thread.
    fn block<T>(&self, call: impl Future<Output = T>) -> T {
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::task::block_in_place(|| self.runtime.block_on(call))
        } else {
            self.runtime.block_on(call)
        }
    }

    /// Waits until the balancer's queued log entries are in etcd, for at most `within`.
    pub async fn flush(&self, within: Duration) -> bool {
        self.queue.flush(within).await
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn log(&self, level: Level, policy: &str, message: String) {
        self.queue
            .push(LogEntry::new(level, LogKind::Balance, policy, &message));
    }

    /// Every live node's metrics (this node's are `own`, measured now, with its load from
    /// the slot counts) and this node's index among them, for the tick about to run at `now`.
    pub fn env(&self, own: &Metrics, now: f64) -> Option<(Vec<Metrics>, usize)> {
        let node = self.node.upgrade()?;
        let counts = node.slot_counts.take();
        let map = node.current_map();
        let lockstep = node.db.series().clock.is_manual();
        let seconds = {
            let mut state = self.state();
            let seconds = match state.last_now {
                Some(before) if now > before => now - before,
                _ => 1.0,
            };
            state.last_now = Some(now);
            state.lockstep = lockstep;
            seconds
        };
        let rates: Vec<f64> = counts.iter().map(|&c| f64::from(c) / seconds).collect();
        let mut mine = own.clone();
        mine.load = rates.iter().sum();
        mine.reqrate = mine.load;
        let mut order: Vec<NodeId> = node.routing().view.members.keys().cloned().collect();
        if !order.contains(&node.id) {
            order.push(node.id.clone());
            order.sort();
        }
        if lockstep {
            self.publish(now, &mine);
        }
        let deadline = std::time::Instant::now() + LOCKSTEP_WAIT;
        let board = loop {
            let records = match self.block(self.board.read()) {
                Ok(records) => records,
                Err(e) => break Err(e),
            };
            let records: BTreeMap<NodeId, (f64, Metrics)> = records
                .into_iter()
                .filter_map(|(id, raw)| {
                    let r: Record = serde_json::from_slice(&raw).ok()?;
                    Some((id, (r.now, r.metrics)))
                })
                .collect();
            let behind = order
                .iter()
                .filter(|id| **id != node.id)
                .find(|id| records.get(*id).is_none_or(|(at, _)| *at < now));
            match behind {
                Some(_) if lockstep && std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Some(id) if lockstep => {
                    let mut state = self.state();
                    if !state.warned_lockstep {
                        state.warned_lockstep = true;
                        store::log_line!(
                            "mantle: cluster: manual tick at {now}: {id} published nothing for \
                             it within {LOCKSTEP_WAIT:?}; deciding on its last figures (tick \
                             every node at once for the simulator's view)"
                        );
                    }
                    break Ok(records);
                }
                _ => break Ok(records),
            }
        };
        let mut state = self.state();
        state.slot_rates = rates;
        if let Some(map) = &map {
            self.note_finished(&mut state, &map.value);
            let table = map.value.owner_table();
            let rates = &state.slot_rates;
            let available = (0..SLOTS)
                .filter(|&s| table.owner_of(s) == Some(&node.id))
                .filter(|&s| map.value.migration_of(s).is_none())
                .map(|s| (s, rates[usize::from(s)]));
            state.hottest = SlotLoad::hottest(available);
            let movable = |slot: u16| {
                table.owner_of(slot) == Some(&node.id) && map.value.migration_of(slot).is_none()
            };
            state.sequencers = sequencer_loads(&node, &mut state, seconds, movable);
        } else {
            state.hottest.clear();
            state.sequencers.clear();
        }
        match board {
            Ok(records) => state.board = records,
            Err(e) if !state.warned => {
                state.warned = true;
                store::log_line!(
                    "mantle: cluster: reading the other nodes' metrics: {e}; using the last seen"
                );
            }
            Err(_) => {}
        }
        let whoami = order.iter().position(|id| *id == node.id)?;
        let servers = order
            .iter()
            .map(|id| {
                if *id == node.id {
                    mine.clone()
                } else {
                    // A node that has not published yet shows as idle.
                    state
                        .board
                        .get(id)
                        .map(|(_, m)| m.clone())
                        .unwrap_or_default()
                }
            })
            .collect();
        state.order = order;
        state.whoami = whoami;
        Some((servers, whoami))
    }

    /// What `slots()` shows at the tick [`Balance::env`] prepared: this node's hottest slots
    /// that may move, with their request rates.
    pub fn slots(&self) -> Vec<SlotLoad> {
        self.state().hottest.clone()
    }

    /// What `sequencers()` shows at the tick [`Balance::env`] prepared: the sequencers in
    /// this node's slots that may move, with their rates.
    pub fn sequencers(&self) -> Vec<SequencerLoad> {
        self.state().sequencers.clone()
    }

    fn publish(&self, now: f64, metrics: &Metrics) {
        let record = serde_json::to_vec(&Record {
            now,
            metrics: metrics.clone(),
        })
        .unwrap_or_default();
        if let Err(e) = self.block(self.board.publish(record)) {
            store::log_line!("mantle: cluster: publishing this node's metrics: {e}");
        }
    }

    /// After the tick: publishes this node's metrics (with the policy's load) and acts on
    /// the decision's targets. `policy` names the version that decided.
    pub fn after_tick(
        &self,
        tick: u64,
        own: &Metrics,
        decision: &Decision,
        policy: &str,
        failed: bool,
    ) {
        let (lockstep, now) = {
            let state = self.state();
            (state.lockstep, state.last_now.unwrap_or(0.0))
        };
        if !lockstep {
            let mut published = own.clone();
            if !failed {
                published.load = decision.load;
            }
            self.publish(now, &published);
        }
        if !failed {
            self.decide(tick, decision, policy);
        }
    }

    fn decide(&self, tick: u64, decision: &Decision, policy: &str) {
        let Some(node) = self.node.upgrade() else {
            return;
        };
        let (order, whoami, rates) = {
            let state = self.state();
            (state.order.clone(), state.whoami, state.slot_rates.clone())
        };
        let targets: Vec<(usize, f64)> = decision
            .targets
            .iter()
            .copied()
            .filter(|&(t, amount)| t != whoami && t < order.len() && amount > 0.0)
            .collect();
        if targets.is_empty() {
            return;
        }
        let mut asked = String::new();
        for (t, amount) in &targets {
            let _ = write!(asked, "{}{}={amount:.1}", sep(&asked), order[*t]);
        }
        let head = format!(
            "tick {tick}: load {:.1}; the policy sends {asked}",
            decision.load
        );
        let Some(map) = node.current_map() else {
            self.log(Level::Warn, policy, format!("{head}; no slot map yet"));
            return;
        };
        if let Some(m) = map.value.migrations.iter().find(|m| m.from == node.id) {
            self.log(
                Level::Info,
                policy,
                format!(
                    "{head}; not acted on: slots {} are still moving to {}",
                    m.range, m.to
                ),
            );
            return;
        }
        let table = map.value.owner_table();
        let mine: Vec<(u16, f64)> = (0..SLOTS)
            .filter(|&s| table.owner_of(s) == Some(&node.id))
            .filter(|&s| map.value.migration_of(s).is_none())
            .map(|s| (s, rates.get(usize::from(s)).copied().unwrap_or(0.0)))
            .collect();
        let mut outcome = String::new();
        for export in exports::plan(&targets, &mine, &decision.units) {
            let (amount, load, chosen) = (export.amount, export.load, export.slots);
            let to = order[export.target].clone();
            if chosen.is_empty() {
                let what = if decision.units.is_empty() {
                    "no slots fill"
                } else {
                    "none of the slot ranges howmuch() named fill"
                };
                let _ = write!(outcome, "{}{what} {amount:.1} for {to}", sep(&outcome));
                continue;
            }
            let ranges = exports::ranges(&chosen);
            let text = ranges
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(",");
            match self.block(declare(&node, &ranges, &to)) {
                Ok(map) => {
                    node.adopt(map);
                    // Start driving them now rather than when the watch catches up; the
                    // drivers are tasks of the server's runtime, not of this thread.
                    let _runtime = self.runtime.enter();
                    node.follow_migrations();
                    let mut entry = LogEntry::migration_begun(&text, &node.id, &to);
                    entry.policy = policy.to_string();
                    let _ = write!(
                        entry.message,
                        ": tick {tick}, {load:.1} req/s of the {amount:.1} asked"
                    );
                    self.queue.push(entry);
                    self.state()
                        .started
                        .extend(ranges.iter().map(|r| (*r, to.clone())));
                    let _ = write!(
                        outcome,
                        "{}slots {text} ({load:.1} req/s) to {to}",
                        sep(&outcome)
                    );
                }
                Err(e) => {
                    let _ = write!(
                        outcome,
                        "{}slots {text} to {to} refused: {e}",
                        sep(&outcome)
                    );
                }
            }
        }
        self.log(Level::Info, policy, format!("{head}; {outcome}"));
        if self.state().lockstep {
            // Lock step: the tick is done when its moves are (the simulator's view with
            // `--migration-rate unlimited`), so the next requests go to the new owners.
            let deadline = std::time::Instant::now() + MIGRATION_WAIT;
            while node
                .current_map()
                .is_some_and(|m| m.value.migrations.iter().any(|m| m.from == node.id))
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }

    /// Logs the migrations this node started that the map no longer lists.
    fn note_finished(&self, state: &mut State, map: &SlotMap) {
        let Some(node) = self.node.upgrade() else {
            return;
        };
        state.started.retain(|(range, to)| {
            if map.migrations.iter().any(|m| m.range == *range) {
                return true;
            }
            // Moved if it left this node (it may have moved on from the target since).
            let moved = map.owner(range.start) != Some(&node.id);
            let detail = if moved {
                ""
            } else {
                "aborted; the slots stay here"
            };
            self.queue.push(LogEntry::migration_done(
                &range.to_string(),
                &node.id,
                to,
                moved,
                detail,
            ));
            false
        });
    }
}

/// This tick's `sequencers()`: every sequencer of `node` whose slot may move (`movable`),
/// its rates since the last tick over `seconds`. A sequencer new since then (installed, or
/// re-installed at a newer epoch) counts from its start. One left behind in a slot that
/// moved away is not listed: its slot is no longer this node's to move.
fn sequencer_loads(
    node: &ClusterNode,
    state: &mut State,
    seconds: f64,
    movable: impl Fn(u16) -> bool,
) -> Vec<SequencerLoad> {
    let counts = node
        .sequencers
        .get()
        .map(|s| s.counts())
        .unwrap_or_default();
    let mut seen = HashMap::with_capacity(counts.len());
    let mut loads = Vec::new();
    for c in counts {
        let (requests, positions) = match state.sequencer_counts.get(&c.log) {
            Some(&(epoch, r, p)) if epoch == c.epoch => {
                (c.requests.saturating_sub(r), c.positions.saturating_sub(p))
            }
            _ => (c.requests, c.positions),
        };
        let slot = key_slot(&c.log);
        if movable(slot) {
            loads.push(SequencerLoad {
                log: String::from_utf8_lossy(&c.log).into_owned(),
                slot,
                rate: requests as f64 / seconds,
                positions: positions as f64 / seconds,
                load: state
                    .slot_rates
                    .get(usize::from(slot))
                    .copied()
                    .unwrap_or(0.0),
            });
        }
        seen.insert(c.log, (c.epoch, c.requests, c.positions));
    }
    state.sequencer_counts = seen;
    SequencerLoad::busiest(loads)
}

fn sep(text: &str) -> &'static str {
    if text.is_empty() {
        ""
    } else {
        ", "
    }
}

/// Declares the migrations of `ranges` from this node to `to` in one transaction on the slot
/// map: refused (nothing declared) if any of them is no longer this node's or already moving.
async fn declare(
    node: &ClusterNode,
    ranges: &[SlotRange],
    to: &NodeId,
) -> Result<cluster::Versioned<SlotMap>, cluster::ClusterError> {
    node.plane()
        .update(|map| {
            let mut next = map.clone();
            for range in ranges {
                next = next.begin_migration(*range, &node.id, to)?;
            }
            Ok(next)
        })
        .await
}
