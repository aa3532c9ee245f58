//! `GET /api/state`: everything the dashboard shows, as one JSON object (see
//! docs/dashboard.md for the keys). Built from the server's own accessors: the counters and
//! cache snapshot, the sampler's history, the policy's typed `POLICY STATUS` and `POLICY LOG`
//! replies (serialized as they are: the same values `POLICY` turns into RESP), and the cluster
//! node's routing view.

use super::sampler::{History, PolicyView, Sample};
use crate::instance::Instance;
use serde::Serialize;
use serde_json::{json, Value};
use store::Storage;

/// Per-class figures, one row per class when the cache has classes.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ClassRow {
    pub name: String,
    pub objects: u64,
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
    /// `null` before the first lookup.
    pub hit_ratio: Option<f64>,
    pub evictions: u64,
    pub bypassed: u64,
    pub fenced: u64,
    pub refused: u64,
}

impl ClassRow {
    pub fn new(name: &str, stats: &cache::ClassStats) -> ClassRow {
        let lookups = stats.hits + stats.misses;
        ClassRow {
            name: name.to_string(),
            objects: stats.objects,
            bytes: stats.bytes,
            hits: stats.hits,
            misses: stats.misses,
            hit_ratio: (lookups > 0).then(|| stats.hits as f64 / lookups as f64),
            evictions: stats.evictions,
            bypassed: stats.bypassed,
            fenced: stats.fenced,
            refused: stats.refused,
        }
    }
}

/// The rows of the cache's classes (`--classes`), in the class file's order; empty without
/// classes, and the page shows the table as soon as a row is present.
pub fn class_rows(instance: &Instance) -> Vec<ClassRow> {
    instance
        .db
        .class_figures()
        .iter()
        .map(|class| ClassRow::new(&class.rule, &class.stats))
        .collect()
}

/// The cluster as this node sees it; `null` for a node on its own.
pub fn cluster(instance: &Instance) -> Value {
    let (Some(node), Some(settings)) = (&instance.cluster, &instance.config.cluster) else {
        return Value::Null;
    };
    let routing = node.routing();
    let mut value = cluster_view(&node.id, &routing.view);
    value["name"] = json!(settings.name);
    value["failed_slots"] = json!(routing.failed_slots());
    value
}

/// The members with their slots, and the migrations in flight, of one view.
pub fn cluster_view(me: &cluster::NodeId, view: &cluster::ClusterView) -> Value {
    let map = view.slot_map.as_ref().map(|m| &m.value);
    let mut ids: Vec<&cluster::NodeId> = view.members.keys().collect();
    if let Some(map) = map {
        // Owners that are not live members still own slots: show them, as down.
        ids.extend(
            map.owners
                .keys()
                .filter(|id| !view.members.contains_key(*id)),
        );
    }
    ids.sort();
    ids.dedup();
    let nodes: Vec<Value> = ids
        .into_iter()
        .map(|id| {
            let member = view.members.get(id);
            let ranges: Vec<String> = map
                .and_then(|m| m.owners.get(id))
                .map(|r| r.iter().map(ToString::to_string).collect())
                .unwrap_or_default();
            json!({
                "id": id.to_string(),
                "addr": member.map(|m| m.addr.clone()),
                "joined_ms": member.map(|m| m.joined_ms),
                "alive": member.is_some(),
                "me": id == me,
                "slots": map.map_or(0, |m| m.slot_count(id)),
                "ranges": ranges,
            })
        })
        .collect();
    let migrations: Vec<Value> = map
        .map(|m| {
            m.migrations
                .iter()
                .map(|mig| {
                    json!({
                        "range": mig.range.to_string(),
                        "slots": mig.range.len(),
                        "from": mig.from.to_string(),
                        "to": mig.to.to_string(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "node": me.to_string(),
        "connected": view.connected,
        "revision": view.revision,
        "epoch": map.map(|m| m.epoch),
        "nodes": nodes,
        "migrations": migrations,
        "unassigned": map.map(|m| m.unassigned().iter().map(ToString::to_string).collect::<Vec<_>>()),
    })
}

/// `/api/commands`: each command that ran, with its calls and latency percentiles (µs), the
/// most called first; what the page's command latency panel shows.
pub fn commands(instance: &Instance) -> Value {
    let latencies = &instance.db.metrics().commands;
    let mut rows: Vec<(u64, Value)> = crate::cmd::COMMANDS
        .iter()
        .enumerate()
        .filter_map(|(row, spec)| {
            let f = latencies.read(row);
            (f.calls > 0).then(|| {
                let row = json!({
                    "name": spec.name,
                    "calls": f.calls,
                    "usec_per_call": f.total_us / f.calls as f64,
                    "p50_us": f.percentile_us(0.5),
                    "p99_us": f.percentile_us(0.99),
                    "p999_us": f.percentile_us(0.999),
                    "max_us": f.max_us,
                });
                (f.calls, row)
            })
        })
        .collect();
    rows.sort_by_key(|row| std::cmp::Reverse(row.0));
    json!({ "commands": rows.into_iter().map(|(_, row)| row).collect::<Vec<_>>() })
}

/// The whole `/api/state` answer; `after` is the last sample the page has.
pub fn state(instance: &Instance, history: &History, after: u64, admin: bool) -> Value {
    let snapshot = instance.db.cache_snapshot();
    let samples: Vec<Sample> = history.after(after);
    let PolicyView { status, log, error } = history.policy();
    let backend = instance.db.store().kind();
    json!({
        "server": {
            "version": env!("CARGO_PKG_VERSION"),
            "addr": instance.local_addr.to_string(),
            "uptime_s": instance.started.elapsed().as_secs(),
            "backend": backend,
            "algorithm": snapshot.algorithm.name(),
            "admin": admin,
            "sample_period_ms": super::sampler::PERIOD.as_millis() as u64,
        },
        "cache": {
            "objects": snapshot.objects,
            "bytes": snapshot.bytes,
            "capacity_objects": snapshot.capacity.objects,
            "capacity_bytes": snapshot.capacity.bytes,
            "evictions": snapshot.evictions,
        },
        "samples": samples,
        "policy": {
            "active": status.as_ref().map(|s| s.active.as_str()),
            "params": status.as_ref().map(|s| &s.params),
            "status": status,
            "log": log,
            "error": error,
        },
        "classes": class_rows(instance),
        "cluster": cluster(instance),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_rows_carry_the_class_counters() {
        let stats = cache::ClassStats {
            hits: 3,
            misses: 1,
            objects: 2,
            bytes: 20,
            ..Default::default()
        };
        let row = ClassRow::new("hot", &stats);
        assert_eq!(row.hit_ratio, Some(0.75));
        let v = serde_json::to_value(&row).unwrap();
        assert_eq!(v["name"], "hot");
        assert_eq!(v["objects"], 2);
        assert!(ClassRow::new("cold", &cache::ClassStats::default())
            .hit_ratio
            .is_none());
    }

    #[test]
    fn cluster_view_lists_members_slots_and_migrations() {
        use cluster::{Member, NodeId, SlotMap, Versioned};
        use slots::SlotRange;
        let a = NodeId::new("a").unwrap();
        let b = NodeId::new("b").unwrap();
        let gone = NodeId::new("gone").unwrap();
        let mut map = SlotMap::all_to(&a);
        map.owners
            .insert(a.clone(), vec![SlotRange::new(0, 8191).unwrap()]);
        map.owners
            .insert(b.clone(), vec![SlotRange::new(8192, 16000).unwrap()]);
        map.owners
            .insert(gone.clone(), vec![SlotRange::new(16001, 16383).unwrap()]);
        map.migrations.push(cluster::Migration {
            range: SlotRange::new(0, 99).unwrap(),
            from: a.clone(),
            to: b.clone(),
        });
        let member = |id: &NodeId, addr: &str| Member {
            id: id.clone(),
            addr: addr.into(),
            joined_ms: 1,
        };
        let view = cluster::ClusterView {
            members: [
                (a.clone(), member(&a, "127.0.0.1:1")),
                (b.clone(), member(&b, "127.0.0.1:2")),
            ]
            .into_iter()
            .collect(),
            slot_map: Some(Versioned {
                value: map,
                revision: 5,
            }),
            revision: 9,
            connected: true,
        };
        let v = cluster_view(&b, &view);
        let nodes = v["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0]["id"], "a");
        assert_eq!(nodes[0]["slots"], 8192);
        assert_eq!(nodes[0]["ranges"], json!(["0-8191"]));
        assert_eq!(nodes[1]["me"], true);
        assert_eq!(nodes[2]["alive"], false);
        assert_eq!(
            v["migrations"],
            json!([{"range": "0-99", "slots": 100, "from": "a", "to": "b"}])
        );
        assert_eq!(v["unassigned"], json!([]));
    }
}
