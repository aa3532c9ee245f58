//! What a multi-node replay reports (`mantle replay --nodes N --json`), and the per-tick rows
//! behind its charts.

use super::{NodesConfig, Placement};
use crate::backend::BackendSummary;
use crate::replay_cache::ClassReport;
use serde::Serialize;
use slots::SlotRange;

/// One export: slots sent from one node to another.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MigrationRecord {
    pub from: usize,
    pub to: usize,
    pub ranges: Vec<SlotRange>,
    pub slots: u64,
    /// Stored bytes copied.
    pub bytes: u64,
    /// The slots' load (requests per second) when they were chosen.
    pub load: f64,
    /// The load the policy asked to send.
    pub amount: f64,
    pub start_tick: u64,
    pub start_time: f64,
    /// Trace seconds the copy takes at the configured rate.
    pub copy_seconds: f64,
    /// The tick at which ownership flipped; `None` if the trace ended first.
    pub done_tick: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeReport {
    pub node: usize,
    pub requests: u64,
    pub hits: u64,
    pub misses: u64,
    /// Hits over lookups; null for a node that served none.
    pub hit_ratio: Option<f64>,
    /// Mean load over ticks (requests per second).
    pub mean_load: f64,
    pub peak_load: f64,
    /// Slots it owns at the end.
    pub final_slots: u64,
    pub cached_objects: u64,
    pub exported_slots: u64,
    pub imported_slots: u64,
    /// Per-class figures of the node's cache with `--classes` (as `replay --json`'s
    /// `classes`); absent without.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classes: Option<Vec<ClassReport>>,
}

/// How uneven the load was: max over mean node load, per tick.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Imbalance {
    /// Mean over ticks with any load.
    pub mean: f64,
    pub peak: f64,
    /// Mean over the second half of those ticks, after a balancer has had time to act.
    pub settled: f64,
    /// Ticks whose max/mean exceeded 1.25.
    pub ticks_over_1_25: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MigrationSummary {
    /// Exports completed.
    pub count: u64,
    pub slots: u64,
    pub bytes: u64,
    pub copy_seconds: f64,
    /// Exports still copying when the trace ended.
    pub unfinished: u64,
    /// Completed exports per minute of trace time (null without timestamps).
    pub per_minute: Option<f64>,
    /// The most times any one slot moved.
    pub max_moves_of_a_slot: u64,
    pub list: Vec<MigrationRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BalancerSummary {
    pub name: String,
    /// Node-ticks whose policy asked to send load elsewhere.
    pub decisions: u64,
    /// Node-ticks whose policy changed its own cache (`{capacity=N}`, evictions), as
    /// `replay` counts them; null live.
    pub actions: Option<u64>,
    pub errors: u64,
}

/// The balancer's figures for [`build`].
pub struct PolicyParts {
    pub name: String,
    pub decisions: u64,
    pub actions: Option<u64>,
    pub errors: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterReport {
    pub nodes: usize,
    pub placement: Placement,
    pub requests: u64,
    pub hits: u64,
    pub misses: u64,
    pub miss_ratio: f64,
    pub duration_seconds: Option<f64>,
    pub ticks: u64,
    pub imbalance: Imbalance,
    pub per_node: Vec<NodeReport>,
    pub migrations: MigrationSummary,
    pub policy: Option<BalancerSummary>,
    /// The store every node shares, modelled as `replay` models it (null live).
    pub backend: Option<BackendSummary>,
    pub wall_seconds: f64,
    pub requests_per_second: f64,
    #[serde(skip)]
    pub rows: Vec<NodesTickRow>,
}

/// One tick of a multi-node replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodesTickRow {
    pub tick: u64,
    pub time: f64,
    /// Load of each node over the tick (requests per second).
    pub loads: Vec<f64>,
    pub max_over_mean: f64,
    pub migrations_in_flight: u64,
}

/// One node's figures for [`build`].
pub struct NodeParts {
    pub requests: u64,
    pub lookups: u64,
    pub hits: u64,
    pub misses: u64,
    pub load_sum: f64,
    pub load_peak: f64,
    pub cached_objects: u64,
    pub exported_slots: u64,
    pub imported_slots: u64,
    pub classes: Option<Vec<ClassReport>>,
}

/// Everything [`build`] sums up; a live replay (`replay --server --nodes`) fills it too.
pub struct Parts<'a> {
    pub config: &'a NodesConfig,
    pub nodes: &'a [NodeParts],
    pub owner: &'a [u16],
    pub imbalances: &'a [f64],
    pub ticks: u64,
    pub migrations: Vec<MigrationRecord>,
    pub unfinished: Vec<MigrationRecord>,
    pub rows: Vec<NodesTickRow>,
    pub policy: Option<PolicyParts>,
    /// The shared store's model (null live).
    pub backend: Option<BackendSummary>,
    pub duration: Option<f64>,
    pub wall_seconds: f64,
    pub requests: u64,
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        1.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// The report of a multi-node replay, simulated or live.
pub fn build(p: Parts<'_>) -> ClusterReport {
    let per_node: Vec<NodeReport> = p
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| NodeReport {
            node: i,
            requests: n.requests,
            hits: n.hits,
            misses: n.misses,
            hit_ratio: (n.lookups > 0).then(|| n.hits as f64 / n.lookups as f64),
            mean_load: if p.ticks > 0 {
                n.load_sum / p.ticks as f64
            } else {
                0.0
            },
            peak_load: n.load_peak,
            final_slots: p.owner.iter().filter(|&&o| usize::from(o) == i).count() as u64,
            cached_objects: n.cached_objects,
            exported_slots: n.exported_slots,
            imported_slots: n.imported_slots,
            classes: n.classes.clone(),
        })
        .collect();
    let hits: u64 = p.nodes.iter().map(|n| n.hits).sum();
    let misses: u64 = p.nodes.iter().map(|n| n.misses).sum();
    let lookups: u64 = p.nodes.iter().map(|n| n.lookups).sum();
    let half = p.imbalances.len() / 2;
    let mut moves = vec![0u64; p.owner.len()];
    for m in &p.migrations {
        for r in &m.ranges {
            for s in r.slots() {
                moves[usize::from(s)] += 1;
            }
        }
    }
    let count = p.migrations.len() as u64;
    let migrations = MigrationSummary {
        count,
        slots: p.migrations.iter().map(|m| m.slots).sum(),
        bytes: p.migrations.iter().map(|m| m.bytes).sum(),
        copy_seconds: p.migrations.iter().map(|m| m.copy_seconds).sum(),
        unfinished: p.unfinished.len() as u64,
        per_minute: p
            .duration
            .filter(|&d| d > 0.0 && matches!(p.config.tick, crate::tick_schedule::Tick::Seconds(_)))
            .map(|d| count as f64 / (d / 60.0)),
        max_moves_of_a_slot: moves.into_iter().max().unwrap_or(0),
        list: p.migrations.into_iter().chain(p.unfinished).collect(),
    };
    ClusterReport {
        nodes: p.config.nodes,
        placement: p.config.placement,
        requests: p.requests,
        hits,
        misses,
        miss_ratio: if lookups > 0 {
            misses as f64 / lookups as f64
        } else {
            0.0
        },
        duration_seconds: p.duration,
        ticks: p.ticks,
        imbalance: Imbalance {
            mean: mean(p.imbalances),
            peak: p.imbalances.iter().copied().fold(1.0, f64::max),
            settled: mean(&p.imbalances[half..]),
            ticks_over_1_25: p.imbalances.iter().filter(|&&x| x > 1.25).count() as u64,
        },
        per_node,
        migrations,
        policy: p.policy.map(|b| BalancerSummary {
            name: b.name,
            decisions: b.decisions,
            actions: b.actions,
            errors: b.errors,
        }),
        backend: p.backend,
        wall_seconds: p.wall_seconds,
        requests_per_second: if p.wall_seconds > 0.0 {
            p.requests as f64 / p.wall_seconds
        } else {
            0.0
        },
        rows: p.rows,
    }
}

/// Writes one CSV row per tick: the time, each node's load, max/mean and migrations in
/// flight (`--loads-out`).
pub fn write_loads_csv<W: std::io::Write>(out: W, report: &ClusterReport) -> csv::Result<()> {
    let mut out = csv::Writer::from_writer(out);
    let mut header = vec!["tick".to_string(), "time".to_string()];
    header.extend((0..report.nodes).map(|i| format!("load{i}")));
    header.extend(["max_over_mean".into(), "migrations_in_flight".into()]);
    out.write_record(&header)?;
    for row in &report.rows {
        let mut record = vec![row.tick.to_string(), row.time.to_string()];
        record.extend(row.loads.iter().map(|l| format!("{l:.3}")));
        record.push(format!("{:.4}", row.max_over_mean));
        record.push(row.migrations_in_flight.to_string());
        out.write_record(&record)?;
    }
    out.flush()?;
    Ok(())
}
