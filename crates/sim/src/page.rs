//! Replay's HTML page (`--report`): the report crate's per-policy records, downsampled so a
//! report stays a few hundred kilobytes however long the trace, and the page with the
//! per-class table and the warm-up chart when classes or a restart were asked for.

use crate::{ReplayReport, TickRow};
use report::ReportError;

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

/// `replay --report FILE.html`: the page of one run over `trace`, labelled `name`; `extra`
/// is a sentence appended to the introduction. Errors name the flag and file.
pub fn write_replay_report(
    out: &std::path::Path,
    trace: &std::path::Path,
    name: &str,
    report: &ReplayReport,
    extra: Option<&str>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let title = format!("mantle replay: {}", trace.display());
    let mut intro = format!(
        "{} requests, miss ratio {:.6}, mean cache {:.1} objects.",
        report.requests, report.miss_ratio, report.mean_cache_objects
    );
    if let Some(extra) = extra {
        intro.push(' ');
        intro.push_str(extra);
    }
    let html = replay_page(&title, &intro, name, report)?;
    std::fs::write(out, html).with_context(|| format!("--report: cannot write {}", out.display()))
}

/// The `--report` page of one replay: `name` labels the run (the policy file, or the cache).
pub fn replay_page(
    title: &str,
    intro: &str,
    name: &str,
    report: &ReplayReport,
) -> Result<String, ReportError> {
    let run = policy_run(name, report);
    if report.classes.is_some() || report.warmup.is_some() {
        hints_report(title, intro, report, run)
    } else {
        report::comparison_report(title, intro, &[run])
    }
}

/// The report page with the per-class table and the warm-up chart.
fn hints_report(
    title: &str,
    intro: &str,
    r: &ReplayReport,
    run: report::PolicyRun,
) -> Result<String, ReportError> {
    let mut doc = report::Document::new(title);
    doc.paragraph(intro);
    if let Some(classes) = &r.classes {
        doc.heading("Classes");
        let rows: Vec<Vec<String>> = classes
            .iter()
            .map(|c| {
                vec![
                    c.id.to_string(),
                    c.rule.clone(),
                    c.priority.map_or("pinned".to_string(), |p| p.to_string()),
                    c.pinning.clone(),
                    format!("{}", c.allocation),
                    c.stats.hits.to_string(),
                    c.stats.misses.to_string(),
                    c.hit_ratio.map_or("-".to_string(), |h| format!("{:.4}", h)),
                    c.stats.objects.to_string(),
                    c.stats.bytes.to_string(),
                    c.stats.evictions.to_string(),
                    format!(
                        "{}/{}/{}",
                        c.stats.bypassed, c.stats.fenced, c.stats.refused
                    ),
                ]
            })
            .collect();
        doc.table(
            &[
                "id",
                "rule",
                "priority",
                "pinning",
                "allocation",
                "hits",
                "misses",
                "hit ratio",
                "objects",
                "bytes",
                "evictions",
                "bypassed/fenced/refused",
            ],
            &rows,
        );
    }
    if let Some(w) = &r.warmup {
        doc.heading("Warm-up after the restart");
        let name = w
            .strategy
            .clone()
            .unwrap_or_else(|| "restarted".to_string());
        let series = |f: &dyn Fn(&crate::warmup::WindowRow) -> f64| {
            w.windows
                .iter()
                .map(|row| (row.requests as f64, f(row)))
                .collect::<Vec<_>>()
        };
        let mut lines = vec![
            report::Series::new("always-warm", series(&|row| row.warm_hit_ratio)),
            report::Series::new("on-demand", series(&|row| row.ondemand_hit_ratio)),
        ];
        if w.strategy.is_some() {
            lines.push(report::Series::new(name, series(&|row| row.hit_ratio)));
        }
        let chart = report::Chart::new(
            "Hit ratio per window after the restart",
            "requests since the restart",
            "hit ratio",
        );
        doc.svg(&report::line_chart(&chart, &lines)?);
        let opt = |v: Option<u64>| v.map_or("never".to_string(), |v| v.to_string());
        doc.table(
            &["figure", "value"],
            &[
                vec!["loaded objects".into(), w.loaded_objects.to_string()],
                vec![
                    "convergence (strict / loose), requests".into(),
                    format!(
                        "{} / {}",
                        opt(w.convergence_requests),
                        opt(w.convergence_requests_loose)
                    ),
                ],
                vec![
                    "on-demand convergence (strict / loose), requests".into(),
                    format!(
                        "{} / {}",
                        opt(w.ondemand_convergence_requests),
                        opt(w.ondemand_convergence_requests_loose)
                    ),
                ],
                vec![
                    "back-end reads during warm-up (this run / on-demand)".into(),
                    format!(
                        "{} / {}",
                        w.backend_reads_during_warmup, w.ondemand_backend_reads_during_warmup
                    ),
                ],
            ],
        );
    }
    doc.heading("Over time");
    for svg in report::policy_charts(&[run])? {
        doc.svg(&svg);
    }
    doc.note("Back-end figures come from the replay's store model, not from a real store.");
    Ok(doc.render())
}

/// Length of one tick, estimated from the first two rows (1 s when unknown).
fn interval(report: &ReplayReport) -> f64 {
    match report.ticks.as_slice() {
        [a, b, ..] if b.time > a.time => b.time - a.time,
        _ => 1.0,
    }
}
