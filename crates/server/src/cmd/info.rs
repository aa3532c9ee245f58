//! INFO [section ...]: the server, clients, stats, memory, keyspace, cache, policy, shadows and warmup sections, in
//! Redis's `name:value` line format so existing dashboards and scripts can read them; and, as
//! in Redis only when named or with `all`/`everything`, `commandstats` and `latencystats`
//! (per-command calls, time and percentiles).

use super::{CommandSpec, Declared, Flags, Keys};
use crate::frame::Frame;
use crate::instance::{Instance, Session};
use crate::metrics::{PolicyGauges, Stats, WarmupProgress};
use crate::parse::{Parse, ParseError};
use bytes::Bytes;
use std::fmt::Write;
use store::Storage;

const SECTIONS: &[&str] = &[
    "server", "clients", "stats", "memory", "keyspace", "cache", "classes", "policy", "shadows",
    "warmup",
];

/// Sections left out of a plain INFO (and of `default`), as in Redis.
const ON_REQUEST: &[&str] = &["commandstats", "latencystats"];

pub struct Info {
    sections: Vec<String>,
}

impl Declared<'_> for Info {
    const SPEC: CommandSpec = CommandSpec {
        name: "info",
        arity: -1,
        flags: Flags::LOADING.with(Flags::STALE),
        keys: Keys::NONE,
        reveals_data: false,
    };

    fn parse(parse: &mut Parse<'_>) -> Result<Info, ParseError> {
        let mut sections = Vec::new();
        for arg in parse.rest() {
            sections.push(String::from_utf8_lossy(arg).to_ascii_lowercase());
        }
        Ok(Info { sections })
    }

    async fn apply(self, instance: &Instance, _: &mut Session) -> Frame {
        let all = self.sections.is_empty()
            || self
                .sections
                .iter()
                .any(|s| matches!(s.as_str(), "all" | "default" | "everything"));
        // INFO never waits on an upstream: it shows the key count last seen there.
        let keys = instance.db.store().key_count_now();
        let everything = self
            .sections
            .iter()
            .any(|s| matches!(s.as_str(), "all" | "everything"));
        let mut text = String::new();
        for &section in SECTIONS.iter().chain(ON_REQUEST) {
            let on_request = ON_REQUEST.contains(&section);
            let shown = if on_request { everything } else { all };
            if shown || self.sections.iter().any(|s| s == section) {
                if !text.is_empty() {
                    text.push_str("\r\n");
                }
                render(section, instance, keys, &mut text);
            }
        }
        Frame::Verbatim(Bytes::from(text))
    }
}

/// Per command that ran: `cmdstat_NAME` (calls and time) or, with `percentiles`,
/// `latency_percentiles_usec_NAME` (p50, p99, p99.9), in Redis 7's format.
fn command_fields(instance: &Instance, percentiles: bool) -> Vec<(String, String)> {
    let latencies = &instance.db.metrics().commands;
    super::COMMANDS
        .iter()
        .enumerate()
        .filter_map(|(row, spec)| {
            let f = latencies.read(row);
            (f.calls > 0).then(|| {
                if percentiles {
                    let p = |q| f.percentile_us(q) as f64;
                    field(
                        &format!("latency_percentiles_usec_{}", spec.name),
                        format!("p50={:.3},p99={:.3},p99.9={:.3}", p(0.5), p(0.99), p(0.999)),
                    )
                } else {
                    field(
                        &format!("cmdstat_{}", spec.name),
                        format!(
                            "calls={},usec={},usec_per_call={:.2},rejected_calls=0,failed_calls=0",
                            f.calls,
                            f.total_us as u64,
                            f.total_us / f.calls as f64
                        ),
                    )
                }
            })
        })
        .collect()
}

/// Whether the store takes writes, and what a damaged log cost at start (see docs/server.md,
/// "Limits and failure behaviour").
fn store_health(instance: &Instance) -> Vec<(String, String)> {
    let store = instance.db.store();
    let mut fields = match store.health() {
        store::rocks::Health::Ok => vec![field("store_status", "ok")],
        store::rocks::Health::Failed { cause, seconds } => vec![
            field("store_status", "failed"),
            field("store_failed_seconds", seconds),
            field("store_last_error", cause.replace(['\r', '\n'], " ")),
        ],
    };
    if let Some(report) = store.wal_report() {
        fields.push(field("store_wal_recovery", report));
    }
    fields
}

fn render(section: &str, instance: &Instance, keys: Option<u64>, out: &mut String) {
    let metrics = instance.db.metrics();
    let stats = &metrics.stats;
    let read = Stats::read;
    let snapshot = instance.db.cache_snapshot();
    let (title, fields): (&str, Vec<(String, String)>) = match section {
        "server" => (
            "Server",
            vec![
                field("redis_version", "7.0.0"),
                field("mantle_version", env!("CARGO_PKG_VERSION")),
                field("redis_mode", "standalone"),
                field("os", std::env::consts::OS),
                field("arch_bits", usize::BITS),
                field("process_id", std::process::id()),
                field("tcp_port", instance.local_addr.port()),
                field("uptime_in_seconds", instance.started.elapsed().as_secs()),
                field("store", instance.db.store().describe()),
            ]
            .into_iter()
            .chain(store_health(instance))
            .collect(),
        ),
        "clients" => (
            "Clients",
            vec![
                field("connected_clients", read(&stats.connected_clients)),
                field("maxclients", instance.config.maxclients),
                field("clients_memory", instance.client_memory.used()),
                field("maxmemory_clients", instance.client_memory.limit()),
            ],
        ),
        "stats" => {
            // A lookup is a keyspace hit when the key exists anywhere (cache or store).
            let misses = read(&stats.keyspace_misses);
            let lookups = read(&stats.cache_hits) + read(&stats.cache_misses);
            (
                "Stats",
                vec![
                    field(
                        "total_connections_received",
                        read(&stats.connections_received),
                    ),
                    field("total_commands_processed", read(&stats.commands_processed)),
                    field("rejected_connections", read(&stats.rejected_connections)),
                    field("protocol_errors", read(&stats.protocol_errors)),
                    field("expired_keys", read(&stats.expired_keys)),
                    field("evicted_keys", snapshot.evictions),
                    field("keyspace_hits", lookups.saturating_sub(misses)),
                    field("keyspace_misses", misses),
                    field(
                        "client_output_limit_rejections",
                        read(&metrics.guards.output_rejections),
                    ),
                    field("auth_failures", read(&metrics.guards.auth_failures)),
                    field("hint_names_dropped", instance.db.hint_names_dropped()),
                    field("client_memory_refusals", instance.client_memory.refusals()),
                ]
                .into_iter()
                .chain(upstream_fields(instance))
                .collect(),
            )
        }
        "memory" => (
            "Memory",
            vec![
                field("used_memory", snapshot.bytes + snapshot.metadata_bytes),
                field("used_memory_cache", snapshot.bytes),
                field("used_memory_cache_metadata", snapshot.metadata_bytes),
                field("used_memory_store", instance.db.store().memory_bytes()),
                field("maxmemory_store_reserve", instance.db.store_reserve()),
                field("used_memory_rss", resident_bytes()),
                field("maxmemory", snapshot.capacity.bytes.unwrap_or(0)),
                field(
                    "maxmemory_policy",
                    super::config::policy_name(snapshot.algorithm),
                ),
            ],
        ),
        "keyspace" => (
            "Keyspace",
            keys.filter(|&k| k > 0)
                .map(|k| field("db0", format!("keys={k},expires=0,avg_ttl=0")))
                .into_iter()
                .collect(),
        ),
        "policy" => {
            let g = &metrics.policy;
            let read = PolicyGauges::read;
            (
                "Policy",
                vec![
                    field("policy_active", g.active()),
                    field("policy_tick_ms", instance.config.tick.as_millis()),
                    field("policy_ticks", read(&g.ticks)),
                    field("policy_actions", read(&g.actions)),
                    field("policy_errors", read(&g.errors)),
                    field("policy_fallbacks", read(&g.fallbacks)),
                ],
            )
        }
        "warmup" => ("Warmup", warmup_fields(instance)),
        "commandstats" => ("Commandstats", command_fields(instance, false)),
        "latencystats" => ("Latencystats", command_fields(instance, true)),
        "shadows" => ("Shadows", shadow_fields(&metrics.shadows.read())),
        "classes" => ("Classes", super::cache::class_lines(instance)),
        _ => (
            "Cache",
            super::cache::stats(instance)
                .into_iter()
                .map(|(name, value)| {
                    let value = match value {
                        Frame::Integer(n) => n.to_string(),
                        Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
                        other => format!("{other:?}"),
                    };
                    (format!("cache_{name}"), value)
                })
                .collect(),
        ),
    };
    let _ = write!(out, "# {title}\r\n");
    for (name, value) in fields {
        let _ = write!(out, "{name}:{value}\r\n");
    }
}

/// The upstream's health, when there is one: `upstream_state` is `failing` while its circuit
/// breaker is open.
fn upstream_fields(instance: &Instance) -> Vec<(String, String)> {
    let Some(upstream) = instance.db.store().upstream() else {
        return Vec::new();
    };
    let counters = upstream.counters();
    vec![
        field("upstream_state", upstream.state()),
        field(
            "upstream_consecutive_failures",
            upstream.consecutive_failures(),
        ),
        field("upstream_failures", Stats::read(&counters.failures)),
        field("upstream_timeouts", Stats::read(&counters.timeouts)),
        field(
            "upstream_fast_failures",
            Stats::read(&counters.fast_failures),
        ),
    ]
}

/// The bulk fill's progress (`warmup_strategy:none` without `--warmup`) and the monitor.
fn warmup_fields(instance: &Instance) -> Vec<(String, String)> {
    let monitor = instance.db.monitor();
    let p = &instance.db.metrics().warmup;
    let read = WarmupProgress::read;
    let spec = instance.config.warmup;
    vec![
        field(
            "warmup_strategy",
            spec.map_or("none", |s| s.strategy.name()),
        ),
        field(
            "warmup_k",
            spec.map_or("0".to_string(), |s| match s.share() {
                Some(share) => format!("{}%", share * 100.0),
                None => s.k.to_string(),
            }),
        ),
        field("warmup_loaded", read(&p.loaded)),
        field("warmup_total", read(&p.total)),
        field("warmup_skipped", read(&p.skipped)),
        field("warmup_errors", read(&p.errors)),
        field("warmup_done", u8::from(spec.is_none() || p.is_done())),
        field("warmup_seconds", format!("{:.3}", p.seconds())),
        field("warmup_tracked_keys", monitor.len()),
        field("warmup_track_limit", monitor.track()),
        field("warmup_monitor_bytes", monitor.heap_bytes()),
        field("warmup_unrecorded", monitor.skipped()),
        field("warmup_untracked_long_keys", monitor.too_long()),
        field("warmup_persists", read(&p.persists)),
        field("warmup_persisted_keys", read(&p.persisted_keys)),
        field("warmup_accesses", monitor.last_seq()),
        field("warmup_persisted_accesses", read(&p.persisted_seq)),
    ]
}

/// `shadow_count`, the switch's figures, then one line per candidate (the real cache's as
/// `active`, each shadow's as `shadow_N`) in the `k=v,...` form of Redis's keyspace lines.
fn shadow_fields(r: &crate::metrics::ShadowReport) -> Vec<(String, String)> {
    let shadows = r.candidates.iter().filter(|c| c.role == "shadow").count();
    let mut fields = vec![
        field("shadow_count", shadows),
        field("shadow_events_dropped", r.dropped),
        field("switch_loaded", u8::from(!r.switch_policy.is_empty())),
        field("switch_calls", r.switch_calls),
        field("switch_errors", r.switch_errors),
        field("switches", r.switches),
        field("last_switch", &r.last_switch),
    ];
    let mut n = 0;
    for c in &r.candidates {
        let w = &c.window;
        let name = if c.role == "active" {
            "active".to_string()
        } else {
            n += 1;
            format!("shadow_{}", n - 1)
        };
        fields.push(field(
            &name,
            format!(
                "name={},policy={},sample={},active={},window_ticks={},hit_ratio={:.6},\
                 misses={:.1},mean_objects={:.1},peak_objects={:.1},mean_bytes={:.1},\
                 peak_bytes={:.1},decisions={},errors={},total_hits={:.1},total_misses={:.1}",
                c.name.replace([',', '\r', '\n'], " "),
                c.policy,
                c.sample,
                u8::from(c.active),
                w.ticks,
                w.hit_ratio,
                w.misses,
                w.mean_objects,
                w.peak_objects,
                w.mean_bytes,
                w.peak_bytes,
                w.decisions,
                w.errors,
                c.total_hits,
                c.total_misses
            ),
        ));
    }
    fields
}

fn field(name: &str, value: impl std::fmt::Display) -> (String, String) {
    (name.to_string(), value.to_string())
}

/// The process's resident set size, from /proc where there is one.
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}
