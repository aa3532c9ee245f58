//! What `replay` prints: the JSON object of `--json` (the report with the run's inputs merged
//! in, keys as DESIGN.md §6 lists them) and the human summary. `replay --server` prints the
//! same typed object ([`ReplayReport`] with its live fields set).

use crate::{ReplayReport, WorkingSet};
use serde::Serialize;
use serde_json::Value;

/// What the run was asked to do, printed beside the report.
#[derive(Clone, Debug)]
pub struct ReplayInput {
    pub trace: String,
    pub format: String,
    /// Empty when unknown (a server that did not say): null in the JSON.
    pub algorithm: String,
    pub cache_size: String,
    pub capacity: cache::Capacity,
    pub working_set: Option<WorkingSet>,
}

/// The `--json` object of both `replay` and `replay --server`: the report's fields and the
/// input's, in one typed object.
#[derive(Serialize)]
struct ReplayJson<'a> {
    #[serde(flatten)]
    report: &'a ReplayReport,
    trace: &'a str,
    format: &'a str,
    algorithm: Option<&'a str>,
    cache_size: &'a str,
    capacity_objects: Option<u64>,
    capacity_bytes: Option<u64>,
    working_set: Option<&'a WorkingSet>,
}

/// `replay --json` and `replay --server --json`: the report's fields and the input's.
pub fn to_json(report: &ReplayReport, input: &ReplayInput) -> Value {
    serde_json::to_value(ReplayJson {
        report,
        trace: &input.trace,
        format: &input.format,
        algorithm: (!input.algorithm.is_empty()).then_some(input.algorithm.as_str()),
        cache_size: &input.cache_size,
        capacity_objects: input.capacity.objects,
        capacity_bytes: input.capacity.bytes,
        working_set: input.working_set.as_ref(),
    })
    .expect("report serialises")
}

/// The human summary, one line per topic.
pub fn print_summary(r: &ReplayReport, input: &ReplayInput) {
    let lookups = r.gets + r.accesses;
    println!("trace        {} ({})", input.trace, input.format);
    println!("cache        {} {}", input.algorithm, input.cache_size);
    println!(
        "requests     {} ({} gets, {} accesses, {} puts, {} deletes)",
        r.requests, r.gets, r.accesses, r.puts, r.deletes
    );
    println!(
        "miss ratio   {:.6} ({} misses of {} lookups), byte miss ratio {:.6}",
        r.miss_ratio,
        r.misses,
        lookups,
        r.byte_miss_ratio.unwrap_or(0.0)
    );
    println!(
        "footprint    peak {} objects / {} bytes, mean {:.1} objects / {:.0} bytes",
        r.peak_cache_objects, r.peak_cache_bytes, r.mean_cache_objects, r.mean_cache_bytes
    );
    let b = &r.backend;
    println!(
        "back-end     {} reads, {} writes, peak {} ops/s, {} s overloaded, p99 read {} ms (model {})",
        b.reads,
        b.writes,
        opt(b.peak_rate),
        opt(b.overload_seconds.map(|s| s as f64)),
        opt(b.p99_read_latency_ms),
        b.model
    );
    if let Some(classes) = &r.classes {
        for c in classes {
            println!(
                "class {:<3}    {} ({}, priority {}): {} hits, {} misses, {} objects, {} bytes, {} evictions",
                c.id,
                c.rule,
                c.pinning,
                c.priority.map_or("-".to_string(), |p| p.to_string()),
                c.stats.hits,
                c.stats.misses,
                c.stats.objects,
                c.stats.bytes,
                c.stats.evictions
            );
        }
    }
    if let Some(w) = &r.warmup {
        let opt = |v: Option<u64>| v.map_or("never".to_string(), |v| v.to_string());
        println!(
            "warm-up      {} after request {}: loaded {} objects; converged after {} requests (loose {}), on-demand {}; back-end reads {} vs on-demand {}",
            w.strategy.as_deref().unwrap_or("on-demand"),
            w.restart_at_request,
            w.loaded_objects,
            opt(w.convergence_requests),
            opt(w.convergence_requests_loose),
            opt(w.ondemand_convergence_requests),
            w.backend_reads_during_warmup,
            w.ondemand_backend_reads_during_warmup
        );
    }
    if let Some(p) = &r.policy {
        println!(
            "policy       {}: {} ticks, {} actions, {} errors",
            p.name, p.ticks, p.actions, p.errors
        );
    }
    if let Some(clamps) = r.capacity_clamps {
        println!("ceiling      {clamps} policy capacity requests cut to --max-cache-size");
    }
    println!(
        "speed        {:.2} M requests/s ({:.2} s)",
        r.requests_per_second / 1e6,
        r.wall_seconds
    );
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |x| format!("{x:.1}"))
}
