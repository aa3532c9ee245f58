//! The live replay's report: the simulated replay's typed report (`sim::ReplayReport`, the
//! same JSON), filled from the server's counters, the samples and the replay's own counts (see
//! docs/replay.md for which is which).

use super::driver::Tally;
use super::footprint::Footprint;
use super::server::{integer, text, Counters};
use super::MAX_IN_FLIGHT;
use hdrhistogram::Histogram;
use redis::Value as Reply;
use serde_json::Value;
use sim::summary::ReplayInput;
use sim::{BackendSummary, ClientFigures, ControllerSummary, LiveRun, ReplayReport};
use std::time::Duration;

/// The policy the server ran, from POLICY STATUS before and after the replay.
pub(super) struct PolicyRun {
    pub(super) active: String,
    pub(super) ticks: u64,
    pub(super) actions: u64,
    pub(super) errors: u64,
    pub(super) fallbacks: u64,
}

impl PolicyRun {
    /// None when no policy was active at either end.
    pub(super) fn between(
        before: Vec<(String, Reply)>,
        after: Vec<(String, Reply)>,
    ) -> Option<PolicyRun> {
        let field = |pairs: &[(String, Reply)], name: &str| {
            pairs
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let count = |name: &str| {
            let at = |pairs: &[(String, Reply)]| {
                field(pairs, name).and_then(|v| integer(&v)).unwrap_or(0)
            };
            at(&after).saturating_sub(at(&before))
        };
        let active = |pairs: &[(String, Reply)]| {
            field(pairs, "active")
                .and_then(|v| text(&v))
                .filter(|s| !s.is_empty())
        };
        let name = active(&after).or_else(|| active(&before))?;
        Some(PolicyRun {
            active: name,
            ticks: count("ticks"),
            actions: count("actions"),
            errors: count("errors"),
            fallbacks: count("fallbacks"),
        })
    }

    /// In replay's form: `name@version` split, a fallback said in words.
    pub(super) fn summary(&self) -> ControllerSummary {
        let (name, version) = match self.active.rsplit_once('@') {
            Some((name, v)) => (name.to_string(), v.parse::<u64>().ok()),
            None => (self.active.clone(), None),
        };
        ControllerSummary {
            name,
            version,
            ticks: self.ticks,
            actions: self.actions,
            errors: self.errors,
            fallback: (self.fallbacks > 0).then(|| {
                format!(
                    "{} automatic rollbacks during the replay; {} active at the end",
                    self.fallbacks, self.active
                )
            }),
        }
    }
}

/// What a live replay measured; `to_json` gives the same keys as the simulated replay.
pub struct Report {
    pub(super) server: String,
    pub(super) speed: f64,
    pub(super) tally: Tally,
    /// Counter growth during the replay (gauges: the final values).
    pub(super) delta: Counters,
    pub(super) after: Counters,
    pub(super) footprint: Footprint,
    pub(super) policy: Option<PolicyRun>,
    pub(super) wall: Duration,
    pub(super) max_lag: Duration,
    /// With `--tick`: one row per tick the replay ran on the server, as replay's.
    pub(super) ticks: Vec<sim::TickRow>,
    /// Against a cluster node: each node's counter growth, by address (`delta` is their sum).
    pub(super) nodes: Vec<(String, Counters)>,
}

impl Report {
    /// Requests that failed, of all sent, and the first failure.
    pub fn failures(&self) -> (u64, u64, Option<&str>) {
        let t = &self.tally;
        (t.errors, t.requests, t.first_error.as_deref())
    }

    /// Each cluster node's figures (empty outside a cluster).
    fn nodes_json(&self) -> Value {
        let nodes = self.nodes.iter().map(|(addr, d)| {
            let lookups = d.hits + d.misses;
            serde_json::json!({
                "server": addr,
                "lookups": lookups,
                "hits": d.hits,
                "misses": d.misses,
                "miss_ratio": if lookups == 0 { 0.0 } else { d.misses as f64 / lookups as f64 },
                "objects": d.objects,
                "store_reads": d.store_reads,
                "store_writes": d.store_writes,
                "evictions": d.evictions,
            })
        });
        Value::Array(nodes.collect())
    }

    /// The ticks run on the server (`--tick` only), in replay's per-tick table form.
    pub fn ticks(&self) -> &[sim::TickRow] {
        &self.ticks
    }

    pub fn lookups(&self) -> u64 {
        self.delta.hits + self.delta.misses
    }

    pub fn miss_ratio(&self) -> f64 {
        match self.lookups() {
            0 => 0.0,
            n => self.delta.misses as f64 / n as f64,
        }
    }

    /// The report in replay's typed form: what the server cannot tell (byte miss ratio,
    /// classes, warm-up, compactions) is null.
    pub fn to_report(&self) -> ReplayReport {
        let t = &self.tally;
        let d = &self.delta;
        let (mean_objects, mean_bytes) = self.footprint.request_mean();
        let (time_objects, time_bytes) = self.footprint.time_mean();
        let wall = self.wall.as_secs_f64();
        let ms = |h: &Histogram<u64>, q: f64| {
            (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1000.0)
        };
        let max_ms = |h: &Histogram<u64>| (!h.is_empty()).then(|| h.max() as f64 / 1000.0);
        let duration = t.first_time.map(|first| t.last_time - first);
        ReplayReport {
            live: Some(LiveRun {
                mode: "live".to_string(),
                server: self.server.clone(),
                speed: self.speed,
                nil_replies: t.nil_replies,
                fills: t.fills,
                errors: t.errors,
                first_error: t.first_error.clone(),
            }),
            requests: t.requests,
            gets: t.gets,
            puts: t.puts,
            deletes: t.deletes,
            accesses: t.accesses,
            hits: d.hits,
            misses: d.misses,
            miss_ratio: self.miss_ratio(),
            byte_miss_ratio: None,
            evictions: d.evictions,
            peak_cache_objects: self.footprint.peak_objects,
            mean_cache_objects: mean_objects,
            time_mean_cache_objects: Some(time_objects),
            peak_cache_bytes: self.footprint.peak_bytes,
            mean_cache_bytes: mean_bytes,
            time_mean_cache_bytes: Some(time_bytes),
            final_cache_objects: self.after.objects,
            final_cache_bytes: self.after.bytes,
            duration_seconds: duration.filter(|&d| d > 0.0),
            backend: BackendSummary {
                model: "live".to_string(),
                reads: d.store_reads,
                writes: d.store_writes,
                fill_writes: Some(t.fills),
                errors: Some(d.store_errors),
                peak_rate: Some(self.footprint.peak_store_ops_per_second() as f64),
                overload_seconds: None,
                compactions: None,
                p50_read_latency_ms: ms(&t.lookup_latency, 0.5),
                p99_read_latency_ms: ms(&t.lookup_latency, 0.99),
                max_read_latency_ms: max_ms(&t.lookup_latency),
            },
            client: Some(ClientFigures {
                in_flight_limit: MAX_IN_FLIGHT as u64,
                max_lag_seconds: self.max_lag.as_secs_f64(),
                p50_write_latency_ms: ms(&t.write_latency, 0.5),
                p99_write_latency_ms: ms(&t.write_latency, 0.99),
                max_write_latency_ms: max_ms(&t.write_latency),
            }),
            policy: self.policy.as_ref().map(PolicyRun::summary),
            wall_seconds: wall,
            requests_per_second: if wall > 0.0 {
                t.requests as f64 / wall
            } else {
                0.0
            },
            // The replay does not pre-read the trace, has no class file and no restart.
            classes: None,
            warmup: None,
            capacity_clamps: None,
            hook_failure: None,
            ticks: self.ticks.clone(),
        }
    }

    /// The run's inputs as replay prints them: the cache as the server has it at the end of
    /// the run (a policy may have resized it), `cache_size` written the way `--cache-size`
    /// takes it.
    pub fn input(&self, trace: &str, format: &str) -> ReplayInput {
        let after = &self.after;
        ReplayInput {
            trace: trace.to_string(),
            format: format.to_string(),
            algorithm: after
                .algorithm
                .map(|a| format!("{a:?}").to_lowercase())
                .unwrap_or_default(),
            cache_size: cache_size(after),
            capacity: cache::Capacity {
                objects: after.capacity_objects,
                bytes: after.capacity_bytes,
            },
            working_set: None,
        }
    }

    /// `replay --server --json`: the same typed object as `replay --json`.
    pub fn to_json(&self, trace: &str, format: &str) -> Value {
        let mut json = sim::summary::to_json(&self.to_report(), &self.input(trace, format));
        if let (false, Value::Object(fields)) = (self.nodes.is_empty(), &mut json) {
            fields.insert("nodes".to_string(), self.nodes_json());
        }
        json
    }
}

/// The server's capacity as `--cache-size` takes it: objects, bytes (`NB`) or `unlimited`.
fn cache_size(c: &Counters) -> String {
    match (c.capacity_objects, c.capacity_bytes) {
        (Some(n), _) => n.to_string(),
        (None, Some(b)) => format!("{b}B"),
        (None, None) => "unlimited".to_string(),
    }
}

/// The human summary; `trace` and `format` name what was replayed.
pub fn print_summary(r: &Report, trace: &str, format: &str) {
    let t = &r.tally;
    let d = &r.delta;
    let (mean_objects, mean_bytes) = r.footprint.request_mean();
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.2}"));
    let h = &t.lookup_latency;
    let q = |q: f64| (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1000.0);
    println!("trace        {trace} ({format})");
    println!("server       {} (speed {})", r.server, r.speed);
    println!(
        "requests     {} ({} gets, {} accesses, {} puts, {} deletes), {} errors",
        t.requests, t.gets, t.accesses, t.puts, t.deletes, t.errors
    );
    println!(
        "miss ratio   {:.6} ({} misses of {} lookups, server counters); {} nil replies filled",
        r.miss_ratio(),
        d.misses,
        r.lookups(),
        t.fills
    );
    println!(
        "footprint    peak {} objects / {} bytes, mean {:.1} objects / {:.0} bytes (sampled)",
        r.footprint.peak_objects, r.footprint.peak_bytes, mean_objects, mean_bytes
    );
    println!(
        "store        {} reads, {} writes ({} fills), peak {} ops/s; GET p50 {} ms, p99 {} ms",
        d.store_reads,
        d.store_writes,
        t.fills,
        r.footprint.peak_store_ops_per_second(),
        opt(q(0.5)),
        opt(q(0.99))
    );
    for (addr, n) in &r.nodes {
        let lookups = n.hits + n.misses;
        println!(
            "  node {addr}: {lookups} lookups, miss ratio {:.6}, {} objects, {} store reads, {} store writes",
            if lookups == 0 { 0.0 } else { n.misses as f64 / lookups as f64 },
            n.objects,
            n.store_reads,
            n.store_writes
        );
    }
    if let Some(p) = &r.policy {
        println!(
            "policy       {}: {} ticks, {} actions, {} errors",
            p.active, p.ticks, p.actions, p.errors
        );
    }
    let wall = r.wall.as_secs_f64();
    println!(
        "speed        {:.0} requests/s ({:.2} s, worst lag {:.3} s)",
        if wall > 0.0 {
            t.requests as f64 / wall
        } else {
            0.0
        },
        wall,
        r.max_lag.as_secs_f64()
    );
    if let Some(e) = &t.first_error {
        eprintln!(
            "mantle: warning: {} requests failed; the first: {e}",
            t.errors
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_size_reads_like_the_flag() {
        let c = |objects, bytes| Counters {
            capacity_objects: objects,
            capacity_bytes: bytes,
            ..Counters::default()
        };
        assert_eq!(cache_size(&c(Some(10), None)), "10");
        assert_eq!(cache_size(&c(None, Some(4096))), "4096B");
        assert_eq!(cache_size(&c(None, None)), "unlimited");
    }

    /// `replay --server --json` keeps the keys it has always printed, and is `replay --json`'s
    /// object (every key of it) with the live-only keys added.
    #[test]
    fn the_live_json_is_the_replay_json_plus_live_fields() {
        use std::collections::BTreeSet;
        let report = Report {
            server: "127.0.0.1:1".to_string(),
            speed: 0.0,
            tally: Tally::new().unwrap(),
            delta: Counters::default(),
            after: Counters::default(),
            footprint: Footprint::default(),
            policy: None,
            wall: Duration::ZERO,
            max_lag: Duration::ZERO,
            ticks: Vec::new(),
            nodes: Vec::new(),
        };
        let live = report.to_json("t.csv", "csv");
        let keys =
            |v: &Value| -> BTreeSet<String> { v.as_object().unwrap().keys().cloned().collect() };
        let set =
            |names: &[&str]| -> BTreeSet<String> { names.iter().map(|s| s.to_string()).collect() };
        assert_eq!(
            keys(&live),
            set(&[
                "mode",
                "server",
                "speed",
                "requests",
                "gets",
                "accesses",
                "puts",
                "deletes",
                "hits",
                "misses",
                "miss_ratio",
                "byte_miss_ratio",
                "nil_replies",
                "fills",
                "errors",
                "first_error",
                "evictions",
                "peak_cache_objects",
                "mean_cache_objects",
                "time_mean_cache_objects",
                "peak_cache_bytes",
                "mean_cache_bytes",
                "time_mean_cache_bytes",
                "final_cache_objects",
                "final_cache_bytes",
                "duration_seconds",
                "backend",
                "client",
                "policy",
                "wall_seconds",
                "requests_per_second",
                "algorithm",
                "cache_size",
                "capacity_objects",
                "capacity_bytes",
                "capacity_clamps",
                "working_set",
                "classes",
                "warmup",
                "trace",
                "format",
            ])
        );
        assert_eq!(
            keys(&live["backend"]),
            set(&[
                "model",
                "reads",
                "writes",
                "fill_writes",
                "errors",
                "peak_rate",
                "overload_seconds",
                "compactions",
                "p50_read_latency_ms",
                "p99_read_latency_ms",
                "max_read_latency_ms",
            ])
        );
        assert_eq!(
            keys(&live["client"]),
            set(&[
                "in_flight_limit",
                "max_lag_seconds",
                "p50_write_latency_ms",
                "p99_write_latency_ms",
                "max_write_latency_ms",
            ])
        );
        assert_eq!(live["mode"], "live");
        assert_eq!(live["cache_size"], "unlimited");
        assert!(live["byte_miss_ratio"].is_null() && live["backend"]["compactions"].is_null());
        assert!(live["algorithm"].is_null(), "the server did not say");

        let input = sim::summary::ReplayInput {
            trace: "t.csv".to_string(),
            format: "csv".to_string(),
            algorithm: "lru".to_string(),
            cache_size: "10".to_string(),
            capacity: cache::Capacity::objects(10),
            working_set: None,
        };
        let simulated = sim::summary::to_json(&ReplayReport::default(), &input);
        assert!(keys(&simulated).is_subset(&keys(&live)));
        assert!(keys(&simulated["backend"]).is_subset(&keys(&live["backend"])));
        for live_only in [
            "mode",
            "server",
            "speed",
            "client",
            "nil_replies",
            "first_error",
        ] {
            assert!(simulated.get(live_only).is_none(), "{live_only}");
        }
    }

    fn data(text: &str) -> Reply {
        Reply::Data(text.as_bytes().to_vec())
    }

    #[test]
    fn policy_figures_are_the_growth_during_the_replay() {
        let status = |active: &str, ticks: i64, fallbacks: i64| {
            vec![
                ("active".to_string(), data(active)),
                ("ticks".to_string(), Reply::Int(ticks)),
                ("actions".to_string(), Reply::Int(ticks / 2)),
                ("errors".to_string(), Reply::Int(0)),
                ("fallbacks".to_string(), Reply::Int(fallbacks)),
            ]
        };
        assert!(PolicyRun::between(status("", 0, 0), status("", 5, 0)).is_none());
        assert!(PolicyRun::between(Vec::new(), Vec::new()).is_none());
        let run = PolicyRun::between(status("cap@2", 10, 0), status("cap@2", 30, 0)).unwrap();
        let v = run.summary();
        assert_eq!(v.name, "cap");
        assert_eq!(v.version, Some(2));
        assert_eq!(v.ticks, 20);
        assert_eq!(v.actions, 10);
        assert!(v.fallback.is_none());
        let rolled = PolicyRun::between(status("cap@2", 0, 0), status("cap@1", 3, 1)).unwrap();
        assert!(rolled.summary().fallback.unwrap().contains("cap@1"));
    }
}
