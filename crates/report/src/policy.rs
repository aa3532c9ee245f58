//! Policy comparison: what `mantle replay --report` and `mantle compare` show (seed 000
//! Fig. 7, 8b, 8c): cache size over time per policy, hit ratio and back-end load over time,
//! and memory against performance across policies.

use crate::charts::{bar_chart, line_chart, scatter_chart, Chart};
use crate::document::Document;
use crate::{ReportError, Series};

/// The outcome of replaying one policy, as plain numbers and time series.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyRun {
    /// Label in legends and tables (e.g. `"lru 10000"`, `"dscache.lua"`).
    pub name: String,
    pub miss_ratio: f64,
    /// Request-weighted mean cache size (objects).
    pub mean_cache_objects: f64,
    /// Time-weighted mean cache size; `None` without timestamps.
    pub time_mean_cache_objects: Option<f64>,
    pub peak_cache_objects: f64,
    pub backend_reads: u64,
    pub backend_writes: u64,
    pub backend_peak_rate: f64,
    pub backend_overload_seconds: f64,
    /// (time s, objects) samples.
    pub cache_size: Vec<(f64, f64)>,
    /// (time s, hit ratio over the sample interval).
    pub hit_ratio: Vec<(f64, f64)>,
    /// (time s, back-end requests per second).
    pub backend_load: Vec<(f64, f64)>,
}

fn series_of(runs: &[PolicyRun], pick: impl Fn(&PolicyRun) -> &Vec<(f64, f64)>) -> Vec<Series> {
    runs.iter()
        .map(|r| Series::new(r.name.clone(), pick(r).clone()))
        .collect()
}

/// Mean cache size (x) against miss ratio (y), one labelled point per policy, plus bars of
/// memory: the trade-off of seed 000 Fig. 7 and 8c.
pub fn memory_vs_performance_chart(runs: &[PolicyRun]) -> Result<Vec<String>, ReportError> {
    let points: Vec<Series> = runs
        .iter()
        .map(|r| Series::new(r.name.clone(), vec![(r.mean_cache_objects, r.miss_ratio)]))
        .collect();
    // Sizes of a sweep span orders of magnitude (0.1% to 100% of the working set): on a
    // linear axis every point but the largest would sit on the y axis.
    let mut trade_off = Chart::new(
        "Memory vs performance (lower left is better)",
        "mean cache size (objects, request-weighted, log scale)",
        "miss ratio",
    )
    .log_x();
    trade_off.height = 420;
    let mut svg = scatter_chart(&trade_off, &points)?;
    // Scatter dots are tiny; enlarge policy points so each stands out.
    svg = svg.replace(" r=\"1\"", " r=\"6\"");
    let bars: Vec<(String, f64)> = runs
        .iter()
        .map(|r| (r.name.clone(), r.mean_cache_objects))
        .collect();
    let memory = bar_chart(
        &Chart::new("Mean cache size per policy", "policy", "objects"),
        &bars,
    )?;
    let hits: Vec<(String, f64)> = runs
        .iter()
        .map(|r| (r.name.clone(), 100.0 * (1.0 - r.miss_ratio)))
        .collect();
    let performance = bar_chart(
        &Chart::new("Hit ratio per policy", "policy", "hit ratio (%)"),
        &hits,
    )?;
    Ok(vec![svg, memory, performance])
}

/// Cache size, hit ratio and back-end load over time, one line per policy.
pub fn policy_charts(runs: &[PolicyRun]) -> Result<Vec<String>, ReportError> {
    Ok(vec![
        line_chart(
            &Chart::new("Cache size over time", "time (s)", "objects"),
            &series_of(runs, |r| &r.cache_size),
        )?,
        line_chart(
            &Chart::new("Hit ratio over time", "time (s)", "hit ratio"),
            &series_of(runs, |r| &r.hit_ratio),
        )?,
        line_chart(
            &Chart::new("Back-end load over time (model)", "time (s)", "requests/s"),
            &series_of(runs, |r| &r.backend_load),
        )?,
    ])
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"))
}

/// A whole comparison page: summary table, trade-off charts and time series.
pub fn comparison_report(
    title: &str,
    intro: &str,
    runs: &[PolicyRun],
) -> Result<String, ReportError> {
    let mut doc = Document::new(title);
    doc.paragraph(intro);
    doc.heading("Summary");
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                format!("{:.4}%", 100.0 * r.miss_ratio),
                format!("{:.1}", r.mean_cache_objects),
                fmt_opt(r.time_mean_cache_objects),
                format!("{:.0}", r.peak_cache_objects),
                r.backend_reads.to_string(),
                r.backend_writes.to_string(),
                format!("{:.1}", r.backend_peak_rate),
                format!("{:.0}", r.backend_overload_seconds),
            ]
        })
        .collect();
    doc.table(
        &[
            "policy",
            "miss ratio",
            "mean objects",
            "time-mean objects",
            "peak objects",
            "back-end reads",
            "back-end writes",
            "back-end peak/s",
            "overload s",
        ],
        &rows,
    );
    doc.note("Back-end figures come from the replay's store model, not from a real store.");
    doc.heading("Memory vs performance");
    for svg in memory_vs_performance_chart(runs)? {
        doc.svg(&svg);
    }
    doc.heading("Over time");
    for svg in policy_charts(runs)? {
        doc.svg(&svg);
    }
    Ok(doc.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, size: f64, miss: f64) -> PolicyRun {
        PolicyRun {
            name: name.to_string(),
            miss_ratio: miss,
            mean_cache_objects: size,
            time_mean_cache_objects: Some(size * 0.9),
            peak_cache_objects: size * 2.0,
            cache_size: (0..100)
                .map(|t| (f64::from(t), size * f64::from(t) / 100.0))
                .collect(),
            hit_ratio: (0..100).map(|t| (f64::from(t), 1.0 - miss)).collect(),
            backend_load: (0..100).map(|t| (f64::from(t), 5.0)).collect(),
            ..PolicyRun::default()
        }
    }

    #[test]
    fn comparison_page_has_every_policy_and_chart() {
        let runs = [
            run("unlimited", 50_000.0, 0.0),
            run("lru 1000", 1000.0, 0.03),
            run("dscache", 9000.0, 0.0005),
        ];
        let html = comparison_report("ParSplice", "demo <trace>", &runs).unwrap();
        assert!(html.contains("demo &lt;trace&gt;"));
        assert_eq!(html.matches("<svg").count(), 6);
        for r in &runs {
            assert!(html.contains(&r.name));
        }
        assert!(html.contains("0.0500%"));
        assert!(!html.contains("<script"));
    }
}
