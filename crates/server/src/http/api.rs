//! `GET /api/state`: everything the dashboard shows, as one JSON object (see
//! docs/dashboard.md for the keys). Built from the server's own accessors: the counters and
//! cache snapshot, the sampler's history, the policy engine's `POLICY STATUS` and `POLICY LOG`
//! replies, and the cluster node's routing view.

use super::sampler::{History, PolicyView, Sample};
use crate::frame::Frame;
use crate::instance::Instance;
use serde::Serialize;
use serde_json::{json, Map, Value};

/// One event of the policy log.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct LogEntry {
    pub seq: u64,
    pub at_ms: u64,
    pub level: String,
    /// `loaded`, `activated`, `rolled_back`, `capacity`, `param`, ... (see live::journal).
    pub event: String,
    /// `name@N`, empty when no version is concerned.
    pub policy: String,
    pub message: String,
}

/// A reply frame as JSON: maps become objects, errors `{"error": text}`.
pub fn frame_to_json(frame: &Frame) -> Value {
    let text = |b: &[u8]| Value::String(String::from_utf8_lossy(b).into_owned());
    match frame {
        Frame::Simple(b) | Frame::Bulk(b) | Frame::Verbatim(b) => text(b),
        Frame::Error(e) => json!({ "error": e }),
        Frame::Integer(n) => json!(n),
        Frame::Null => Value::Null,
        Frame::Array(items) => Value::Array(items.iter().map(frame_to_json).collect()),
        Frame::Map(pairs) => Value::Object(
            pairs
                .iter()
                .map(|(k, v)| {
                    let key = match frame_to_json(k) {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    (key, frame_to_json(v))
                })
                .collect(),
        ),
    }
}

/// The events of a `POLICY LOG` reply (lines as `live::journal::Event::line` writes them).
pub fn log_entries(frame: &Frame) -> Result<Vec<LogEntry>, String> {
    match frame {
        Frame::Array(lines) => lines
            .iter()
            .map(|line| match line {
                Frame::Bulk(b) => parse_log_line(&String::from_utf8_lossy(b)),
                other => Err(format!("unexpected log line {other:?}")),
            })
            .collect(),
        Frame::Error(e) => Err(e.clone()),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// Parses `seq=N at_ms=N level=L event=E policy=P msg="..."` (the message is a Rust string
/// literal, the only field that may hold spaces).
pub fn parse_log_line(line: &str) -> Result<LogEntry, String> {
    let bad = || format!("unreadable policy log line {line:?}");
    let (head, msg) = line.split_once(" msg=").ok_or_else(bad)?;
    let mut entry = LogEntry {
        seq: 0,
        at_ms: 0,
        level: String::new(),
        event: String::new(),
        policy: String::new(),
        message: unquote(msg),
    };
    for field in head.split(' ') {
        let (key, value) = field.split_once('=').ok_or_else(bad)?;
        match key {
            "seq" => entry.seq = value.parse().map_err(|_| bad())?,
            "at_ms" => entry.at_ms = value.parse().map_err(|_| bad())?,
            "level" => entry.level = value.into(),
            "event" => entry.event = value.into(),
            "policy" if value != "-" => entry.policy = value.into(),
            _ => {}
        }
    }
    Ok(entry)
}

/// Undoes `{:?}` on a string: the quotes and the common escapes.
fn unquote(text: &str) -> String {
    let Some(inner) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) else {
        return text.to_string();
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('u') => {
                // \u{XXXX}
                let code: String = chars.by_ref().take_while(|&c| c != '}').collect();
                let code = code.trim_start_matches('{');
                if let Some(c) = u32::from_str_radix(code, 16).ok().and_then(char::from_u32) {
                    out.push(c);
                }
            }
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

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

/// Splits `k=v k2=v2` (`POLICY STATUS`'s `params`) into an object.
fn params(status: &Map<String, Value>) -> Map<String, Value> {
    let Some(Value::String(text)) = status.get("params") else {
        return Map::new();
    };
    text.split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect()
}

/// The whole `/api/state` answer; `after` is the last sample the page has.
pub fn state(instance: &Instance, history: &History, after: u64, admin: bool) -> Value {
    let snapshot = instance.db.cache_snapshot();
    let samples: Vec<Sample> = history.after(after);
    let PolicyView { status, log, error } = history.policy();
    let backend = match instance.db.store() {
        crate::store::Store::Rocks(_) => "rocksdb",
        crate::store::Store::Upstream(_) => "upstream",
    };
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
            "active": status.get("active").cloned().unwrap_or(Value::Null),
            "params": params(&status),
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
    fn log_lines_round_trip_through_the_journal_format() {
        let event = crate::live::journal::Event {
            seq: 7,
            at_ms: 1_700_000_000_000,
            level: "info".into(),
            kind: "loaded".into(),
            policy: "shrink@2".into(),
            message: "stored by \"ops\" msg=x\nnext \u{1}".into(),
            node: String::new(),
        };
        let entry = parse_log_line(&event.line()).unwrap();
        assert_eq!(
            entry,
            LogEntry {
                seq: 7,
                at_ms: 1_700_000_000_000,
                level: "info".into(),
                event: "loaded".into(),
                policy: "shrink@2".into(),
                message: event.message.clone(),
            }
        );
        let none = crate::live::journal::Event {
            policy: String::new(),
            kind: "param".into(),
            message: "k=1".into(),
            ..event
        };
        assert_eq!(parse_log_line(&none.line()).unwrap().policy, "");
        assert!(parse_log_line("garbage").is_err());
    }

    #[test]
    fn frames_become_json() {
        let frame = Frame::Map(vec![
            (Frame::bulk_str("active"), Frame::bulk_str("p@1")),
            (Frame::bulk_str("ticks"), Frame::Integer(3)),
            (Frame::bulk_str("list"), Frame::Array(vec![Frame::Null])),
        ]);
        assert_eq!(
            frame_to_json(&frame),
            json!({"active": "p@1", "ticks": 3, "list": [null]})
        );
        assert_eq!(
            frame_to_json(&Frame::err("boom")),
            json!({"error": "ERR boom"})
        );
    }

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
        use cluster::{Member, NodeId, SlotMap, SlotRange, Versioned};
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
