//! CACHE STATS / CACHE RESIZE n: the cache's own numbers, and changing its capacity at run
//! time (`n` objects, or a byte size with a unit such as `64MiB`). RESIZE evicts at once down
//! to the new capacity and replies with the number of objects evicted.

use super::{CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::metrics::Stats;
use crate::parse::{Parse, ParseError};
use cache::Capacity;

pub enum CacheCmd {
    Stats,
    Resize(Capacity),
}

impl Declared<'_> for CacheCmd {
    const SPEC: CommandSpec = CommandSpec {
        name: "cache",
        arity: -2,
        flags: Flags::ADMIN,
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<CacheCmd, ParseError> {
        let sub = parse.next_bytes()?;
        let cmd = match sub.to_ascii_lowercase().as_slice() {
            b"stats" => CacheCmd::Stats,
            b"resize" => {
                let text = parse.next_string()?;
                CacheCmd::Resize(parse_capacity(&text).map_err(ParseError::Other)?)
            }
            _ => {
                return Err(ParseError::Other(format!(
                    "unknown subcommand '{}'. Try CACHE STATS or CACHE RESIZE n.",
                    super::printable(&sub, 64)
                )))
            }
        };
        parse.finish()?;
        Ok(cmd)
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        match self {
            CacheCmd::Stats => Frame::Map(
                stats(instance)
                    .into_iter()
                    .map(|(name, value)| (Frame::static_bulk(name), value))
                    .chain(
                        class_stats(instance)
                            .into_iter()
                            .map(|(name, value)| (Frame::bulk_str(&name), value)),
                    )
                    .collect(),
            ),
            CacheCmd::Resize(capacity) => Frame::Integer(instance.db.set_capacity(capacity) as i64),
        }
    }
}

/// A plain number is objects; a number with a unit is bytes. Zero means unlimited; above
/// `cache::capacity::MAX_LIMIT` is an error (a report could not show it).
fn parse_capacity(text: &str) -> Result<Capacity, String> {
    if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() {
        let objects: u64 = text
            .parse()
            .map_err(|_| format!("invalid capacity '{text}'"))?;
        return Ok(Capacity {
            bytes: None,
            objects: cache::capacity::limit(objects, "capacity")?,
        });
    }
    Ok(Capacity {
        bytes: cache::capacity::limit(units::parse_bytes(text)?, "capacity")?,
        objects: None,
    })
}

/// The numbers CACHE STATS and INFO's cache section report.
pub fn stats(instance: &Instance) -> Vec<(&'static str, Frame)> {
    let snapshot = instance.db.cache_snapshot();
    let stats = instance.db.stats();
    let hits = Stats::read(&stats.cache_hits);
    let misses = Stats::read(&stats.cache_misses);
    let ratio = if hits + misses == 0 {
        0.0
    } else {
        hits as f64 / (hits + misses) as f64
    };
    let int = |n: u64| Frame::Integer(n as i64);
    let mut out = vec![
        ("algorithm", Frame::static_bulk(snapshot.algorithm.name())),
        ("objects", int(snapshot.objects)),
        ("bytes", int(snapshot.bytes)),
        (
            "capacity_objects",
            int(snapshot.capacity.objects.unwrap_or(0)),
        ),
        ("capacity_bytes", int(snapshot.capacity.bytes.unwrap_or(0))),
        ("hits", int(hits)),
        ("misses", int(misses)),
        ("hit_ratio", Frame::bulk_str(&format!("{ratio:.4}"))),
        ("evictions", int(snapshot.evictions)),
        ("fills", int(Stats::read(&stats.cache_fills))),
        ("store_reads", int(Stats::read(&stats.store_reads))),
        ("store_writes", int(Stats::read(&stats.store_writes))),
        ("store_errors", int(Stats::read(&stats.store_errors))),
        ("metadata_bytes", int(snapshot.metadata_bytes)),
        ("object_overhead_bytes", int(snapshot.object_overhead)),
    ];
    // Only a scripted cache (a policy with per-request hooks) has the field.
    if let Some(status) = instance.db.hooks_status() {
        let text = match status {
            Ok(()) => "running".to_string(),
            Err(failure) => format!("failed, LRU decides: {failure}"),
        };
        out.push(("hooks", Frame::bulk_str(&text)));
    }
    out
}

/// With `--classes`: each class's counters as `class_<id>_<counter>` (CACHE STATS).
pub fn class_stats(instance: &Instance) -> Vec<(String, Frame)> {
    let int = |n: u64| Frame::Integer(n as i64);
    let mut out = Vec::new();
    for c in instance.db.class_figures() {
        let s = c.stats;
        for (name, value) in [
            ("hits", s.hits),
            ("misses", s.misses),
            ("objects", s.objects),
            ("bytes", s.bytes),
            ("peak_bytes", s.peak_bytes),
            ("evictions", s.evictions),
            ("bypassed", s.bypassed),
            ("fenced", s.fenced),
            ("refused", s.refused),
        ] {
            out.push((format!("class_{}_{name}", c.id), int(value)));
        }
    }
    out
}

/// With `--classes`: one INFO line per class, `class_<id>:rule=...,priority=...,objects=...`.
pub fn class_lines(instance: &Instance) -> Vec<(String, String)> {
    instance
        .db
        .class_figures()
        .into_iter()
        .map(|c| {
            let s = c.stats;
            let optional = |v: Option<u64>| v.map_or("none".to_string(), |n| n.to_string());
            (
                format!("class_{}", c.id),
                format!(
                    "rule={},priority={},pinning={},allocation={},cap_objects={},cap_bytes={},\
                     hits={},misses={},objects={},bytes={},evictions={},bypassed={},fenced={},\
                     refused={}",
                    c.rule.replace([',', '\r', '\n'], " "),
                    c.priority.map_or("none".to_string(), |p| p.to_string()),
                    c.pinning,
                    c.allocation,
                    optional(c.limit.objects),
                    optional(c.limit.bytes),
                    s.hits,
                    s.misses,
                    s.objects,
                    s.bytes,
                    s.evictions,
                    s.bypassed,
                    s.fenced,
                    s.refused
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities_are_objects_or_bytes() {
        assert_eq!(parse_capacity("100").unwrap(), Capacity::objects(100));
        assert_eq!(parse_capacity("1KiB").unwrap(), Capacity::bytes(1024));
        assert_eq!(parse_capacity("0").unwrap(), Capacity::default());
        assert!(parse_capacity("lots").is_err());
    }
}
