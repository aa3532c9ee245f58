//! Turns replay results into the report crate's per-policy records, downsampling the
//! per-tick series so a report stays a few hundred kilobytes however long the trace.

use sim::{ReplayReport, TickRow};

/// Most points per chart series.
const MAX_POINTS: usize = 1500;

pub fn policy_run(name: &str, report: &ReplayReport) -> report::PolicyRun {
    let t0 = report.ticks.first().map_or(0.0, |t| t.time);
    let mut cache_size = Vec::new();
    let mut hit_ratio = Vec::new();
    let mut backend_load = Vec::new();
    let group = report.ticks.len().div_ceil(MAX_POINTS).max(1);
    let mut last_end = None;
    for rows in report.ticks.chunks(group) {
        let end = rows.last().expect("chunks are never empty");
        let x = end.time - t0;
        let mean_objects =
            rows.iter().map(|r| r.cache_objects as f64).sum::<f64>() / rows.len() as f64;
        cache_size.push((x, mean_objects));
        let (hits, lookups) = rows
            .iter()
            .fold((0, 0), |(h, l), r: &TickRow| (h + r.hits, l + r.lookups));
        if lookups > 0 {
            hit_ratio.push((x, hits as f64 / lookups as f64));
        }
        let start = last_end.unwrap_or(rows[0].time - interval(report));
        let span = (end.time - start).max(f64::EPSILON);
        let ops: u64 = rows
            .iter()
            .map(|r| r.backend_reads + r.backend_writes)
            .sum();
        backend_load.push((x, ops as f64 / span));
        last_end = Some(end.time);
    }
    report::PolicyRun {
        name: name.to_string(),
        miss_ratio: report.miss_ratio,
        mean_cache_objects: report.mean_cache_objects,
        time_mean_cache_objects: report.time_mean_cache_objects,
        peak_cache_objects: report.peak_cache_objects as f64,
        backend_reads: report.backend.reads,
        backend_writes: report.backend.writes,
        backend_peak_rate: report.backend.peak_rate.unwrap_or(0.0),
        backend_overload_seconds: report.backend.overload_seconds.unwrap_or(0) as f64,
        cache_size,
        hit_ratio,
        backend_load,
    }
}

/// Length of one tick, estimated from the first two rows (1 s when unknown).
fn interval(report: &ReplayReport) -> f64 {
    match report.ticks.as_slice() {
        [a, b, ..] if b.time > a.time => b.time - a.time,
        _ => 1.0,
    }
}
