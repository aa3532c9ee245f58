//! The balancer on a live cluster node (issue 13, DESIGN §8): the policy's `where()` moves
//! slots between nodes, as `mantle replay --nodes` simulates it.
//!
//! At each tick this node
//! 1. measures each of its slots' request rate since the last tick ([`SlotCounts`], bumped by
//!    the request router);
//! 2. reads every node's last published metrics from the board (`cluster::board`) and hands
//!    the policy `servers[i]` for all live members, ordered by node id, with `whoami` = its
//!    own place;
//! 3. after the policy ran, publishes its own metrics, `load` being what the policy's
//!    `load()` returned;
//! 4. turns `where()`'s targets (or a Ceph chunk's) into migrations with the simulator's rule
//!    (`cluster::exports`: hottest slots first, a chunk within 80–120% of each amount), one
//!    export from a node at a time. The migrations are declared in the slot map by one
//!    compare-and-swap transaction, which fails if another node's decision took a slot first,
//!    so no slot is ever given twice; the migration path (`cluster::migrate`) then moves them.
//!
//! Every decision that asks to send load, and every migration it starts or sees finish, goes
//! to the central log with its reason.

use crate::cluster::ClusterNode;
use cluster::board::Board;
use cluster::{exports, CentralLog, LogEntry, LogQueue, NodeId, SlotMap, SlotRange, SLOTS};
use policy::{Decision, Metrics};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// How long a silent node's metrics stay on the board.
const BOARD_TTL: Duration = Duration::from_secs(10);
/// Entries the balancer's central-log queue keeps (the registry's queue is separate).
const LOG_CAPACITY: u64 = crate::cluster::policy::CENTRAL_LOG_CAPACITY;

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

/// What the balancer remembers between ticks.
#[derive(Default)]
struct State {
    /// Nodes in `servers[]` order at the last tick.
    order: Vec<NodeId>,
    whoami: usize,
    last_now: Option<f64>,
    /// Requests per second per slot over the last tick.
    slot_rates: Vec<f64>,
    /// Metrics last read from the board, used while etcd does not answer.
    board: BTreeMap<NodeId, Metrics>,
    /// Migrations this node's decisions declared and not yet seen finished.
    started: Vec<(SlotRange, NodeId)>,
    warned: bool,
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

    fn log(&self, level: &str, kind: &str, policy: &str, message: String) {
        self.queue
            .push(LogEntry::new(level, kind, policy, &message));
    }

    /// Every live node's metrics (this node's are `own`, measured now) and this node's index
    /// among them, for the tick about to run at `now`.
    pub fn env(&self, own: &Metrics, now: f64) -> Option<(Vec<Metrics>, usize)> {
        let node = self.node.upgrade()?;
        let counts = node.slot_counts.take();
        let map = node.current_map();
        let board = self.block(self.board.read());
        let mut state = self.state();
        let seconds = match state.last_now {
            Some(before) if now > before => now - before,
            _ => 1.0,
        };
        state.last_now = Some(now);
        state.slot_rates = counts.iter().map(|&c| f64::from(c) / seconds).collect();
        if let Some(map) = &map {
            self.note_finished(&mut state, &map.value);
        }
        match board {
            Ok(records) => {
                state.board = records
                    .into_iter()
                    .filter_map(|(id, raw)| Some((id, serde_json::from_slice(&raw).ok()?)))
                    .collect();
            }
            Err(e) if !state.warned => {
                state.warned = true;
                crate::log::log_line!(
                    "mantle: cluster: reading the other nodes' metrics: {e}; using the last seen"
                );
            }
            Err(_) => {}
        }
        let mut order: Vec<NodeId> = node.routing().view.members.keys().cloned().collect();
        if !order.contains(&node.id) {
            order.push(node.id.clone());
            order.sort();
        }
        let whoami = order.iter().position(|id| *id == node.id)?;
        let servers = order
            .iter()
            .map(|id| {
                if *id == node.id {
                    own.clone()
                } else {
                    // A node that has not published yet shows as idle.
                    state.board.get(id).cloned().unwrap_or_default()
                }
            })
            .collect();
        state.order = order;
        state.whoami = whoami;
        Some((servers, whoami))
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
        let mut published = own.clone();
        if !failed {
            published.load = decision.load;
        }
        let record = serde_json::to_vec(&published).unwrap_or_default();
        if let Err(e) = self.block(self.board.publish(record)) {
            crate::log::log_line!("mantle: cluster: publishing this node's metrics: {e}");
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
            self.log(
                "warn",
                "balance",
                policy,
                format!("{head}; no slot map yet"),
            );
            return;
        };
        if let Some(m) = map.value.migrations.iter().find(|m| m.from == node.id) {
            self.log(
                "info",
                "balance",
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
        let mut taken: Vec<u16> = Vec::new();
        let mut outcome = String::new();
        for (target, amount) in targets {
            let to = order[target].clone();
            let available: Vec<(u16, f64)> = mine
                .iter()
                .copied()
                .filter(|(s, _)| !taken.contains(s))
                .collect();
            let chosen = exports::choose(&available, amount);
            if chosen.is_empty() {
                let _ = write!(
                    outcome,
                    "{}no slots fill {amount:.1} for {to}",
                    sep(&outcome)
                );
                continue;
            }
            let ranges = exports::ranges(&chosen);
            let load: f64 = chosen
                .iter()
                .map(|&s| rates.get(usize::from(s)).copied().unwrap_or(0.0))
                .sum();
            let text = ranges
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(",");
            match self.block(declare(&node, &ranges, &to)) {
                Ok(map) => {
                    taken.extend(&chosen);
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
        self.log("info", "balance", policy, format!("{head}; {outcome}"));
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
