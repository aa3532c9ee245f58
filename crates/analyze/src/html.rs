//! The `mantle analyze --report` page: the analysis as tables and charts.

use report::{line_chart, scatter_chart, Chart, Document, ReportError, Series};

use crate::Analysis;

fn zip(time: &[f64], values: impl Iterator<Item = f64>) -> Vec<(f64, f64)> {
    time.iter().copied().zip(values).collect()
}

/// Renders an analysis as a self-contained HTML page; `source` names the trace.
pub fn render(analysis: &Analysis, source: &str) -> Result<String, ReportError> {
    let a = analysis;
    let s = &a.series;
    let mut doc = Document::new(format!("Workload analysis: {source}"));
    sizing(&mut doc, a);
    doc.heading("Summary");
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let rows = vec![
        vec!["requests".into(), a.requests.to_string()],
        vec![
            "gets / puts / deletes / accesses".into(),
            format!("{} / {} / {} / {}", a.gets, a.puts, a.deletes, a.accesses),
        ],
        vec!["reads per write".into(), opt(a.reads_per_write)],
        vec!["unique keys".into(), a.unique_keys.to_string()],
        vec!["duration (s)".into(), format!("{:.0}", a.duration_s)],
        vec![
            "peak reads/s (1 s)".into(),
            format!("{:.0}", a.peak_read_rate),
        ],
        vec![
            "final reads/s (last tenth)".into(),
            format!("{:.1}", a.final_read_rate),
        ],
        vec![
            format!("unique keys per {} s window: mean / max", a.window_s),
            format!(
                "{:.1} / {}",
                a.mean_unique_keys_per_window, a.max_unique_keys_per_window
            ),
        ],
        vec![
            "top 1% / 10% keys' share of reads".into(),
            format!(
                "{:.1}% / {:.1}%",
                100.0 * a.popularity.top1pct_share,
                100.0 * a.popularity.top10pct_share
            ),
        ],
        vec![
            "Zipf alpha (fit)".into(),
            a.popularity
                .zipf_alpha
                .map_or("-".into(), |z| format!("{z:.2}")),
        ],
    ];
    doc.table(&["metric", "value"], &rows);

    doc.heading("Key activity");
    let points: Vec<(f64, f64)> = a
        .scatter
        .iter()
        .map(|&(t, id)| (t, f64::from(id)))
        .collect();
    doc.svg(&scatter_chart(
        &Chart::new(
            "Key id vs time (sampled accesses)",
            "time (s)",
            "key id (order of first access)",
        ),
        &[Series::new("", points)],
    )?);
    doc.note("Key ids are dense, in order of first appearance; fans are the triangles.");
    doc.svg(&line_chart(
        &Chart::new("Reads per second", "time (s)", "reads/s"),
        &[
            Series::new("reads/s", zip(&s.time, s.read_rate.iter().copied())),
            Series::new("writes/s", zip(&s.time, s.write_rate.iter().copied())),
        ],
    )?);
    doc.svg(&line_chart(
        &Chart::new(
            &format!("Distinct keys in a sliding {} s window", a.window_s),
            "time (s)",
            "keys",
        ),
        &[Series::new(
            "keys in window",
            zip(&s.time, s.window_keys.iter().map(|&k| k as f64)),
        )],
    )?);
    doc.svg(&line_chart(
        &Chart::new("Key space (distinct keys so far)", "time (s)", "keys"),
        &[Series::new(
            "key space",
            zip(&s.time, s.keyspace.iter().map(|&k| k as f64)),
        )],
    )?);

    doc.heading("LRU miss-ratio curve");
    doc.paragraph(&format!(
        "Method: {} (sampling rate {}).",
        a.mrc.method, a.mrc.sample_rate
    ));
    let curve: Vec<(f64, f64)> = a
        .mrc
        .points
        .iter()
        .map(|p| (p.cache_size as f64, p.miss_ratio))
        .collect();
    // Log on both axes: the sizing decision is made where the miss ratio is under 1%, which
    // a linear axis squeezes into its bottom pixels. Reuse misses (above the cold floor) reach
    // zero at the no-miss size; a log axis cannot show zero, so that point is left out.
    let floor = a.mrc.points.last().map_or(0.0, |p| p.miss_ratio);
    let reuse: Vec<(f64, f64)> = a
        .mrc
        .points
        .iter()
        .map(|p| (p.cache_size as f64, p.miss_ratio - floor))
        .filter(|&(_, r)| r > 0.0)
        .collect();
    doc.svg(&line_chart(
        &Chart::new(
            "Miss ratio vs LRU cache size (log-log)",
            "cache size (objects)",
            "miss ratio",
        )
        .log_x()
        .log_y(),
        &[
            Series::new("all misses", curve),
            Series::new("reuse misses only", reuse),
        ],
    )?);

    if let Some(curves) = &a.curves {
        curves_section(&mut doc, curves)?;
    }

    doc.heading("Fans");
    doc.paragraph(&format!(
        "{} fans ({} before merging fans under {} accesses; method: {}{}). Keys per fan: mean {:.0}, median {}, max {}; mean duration {:.0} s.",
        a.fans.count,
        a.fans.raw_count,
        a.fans.min_accesses,
        a.fans.method,
        if a.fans.coarsened { ", coarsened to stay in memory bounds" } else { "" },
        a.fans.mean_keys,
        a.fans.median_keys,
        a.fans.max_keys,
        a.fans.mean_duration_s
    ));
    let fan_rows: Vec<Vec<String>> = a
        .fans
        .fans
        .iter()
        .take(200)
        .map(|f| {
            vec![
                format!("{:.0}", f.start),
                format!("{:.0}", f.end),
                f.bottom.to_string(),
                f.top.to_string(),
                f.keys.to_string(),
                f.accesses.to_string(),
            ]
        })
        .collect();
    doc.table(
        &[
            "start (s)",
            "end (s)",
            "bottom id",
            "top id",
            "keys",
            "accesses",
        ],
        &fan_rows,
    );

    doc.heading("Regimes (k-means over time and read rate)");
    let mut by_regime: Vec<Vec<(f64, f64)>> = vec![Vec::new(); a.regimes.regimes.len()];
    for (i, &label) in a.regimes.labels.iter().enumerate() {
        if let Some(points) = by_regime.get_mut(label) {
            points.push((s.time[i], s.read_rate[i]));
        }
    }
    let regime_series: Vec<Series> = by_regime
        .into_iter()
        .enumerate()
        .map(|(i, p)| Series::new(format!("regime {}", i + 1), p))
        .collect();
    doc.svg(&scatter_chart(
        &Chart::new("Read rate coloured by regime", "time (s)", "reads/s"),
        &regime_series,
    )?);
    let regime_rows: Vec<Vec<String>> = a
        .regimes
        .regimes
        .iter()
        .enumerate()
        .map(|(i, r)| {
            vec![
                (i + 1).to_string(),
                format!("{:.0}", r.start),
                format!("{:.0}", r.end),
                format!("{:.1}", r.mean_read_rate),
                r.keyspace_at_start.to_string(),
            ]
        })
        .collect();
    doc.table(
        &[
            "regime",
            "start (s)",
            "end (s)",
            "mean reads/s",
            "key space at start",
        ],
        &regime_rows,
    );
    Ok(doc.render())
}

/// The page's lead: what size of cache the workload needs. The smallest LRU cache that misses
/// only on first accesses, the sizes that keep reuse misses within 0.01%, 0.1% and 1% of
/// lookups, how old reuses get (what a cache must remember), and only then the regime switch,
/// which answers a different question (when to change policy).
fn sizing(doc: &mut Document, a: &Analysis) {
    doc.heading("Sizing recommendation");
    let mrc = &a.mrc;
    let method = if mrc.method == "exact" {
        "exact".to_string()
    } else {
        format!(
            "estimated by {} sampling at rate {}",
            mrc.method, mrc.sample_rate
        )
    };
    match mrc.no_miss_size {
        Some(size) => doc.paragraph(&format!(
            "Smallest LRU cache with no reuse misses: {size} objects ({method}). A cache of \
             this size misses only on first accesses."
        )),
        None => doc.paragraph("No key is read twice: no cache size avoids a miss."),
    };
    let rows: Vec<Vec<String>> = mrc
        .sizing
        .iter()
        .map(|s| {
            vec![
                crate::mrc::percent(s.reuse_miss_ratio),
                s.cache_size.to_string(),
                format!("{:.4}%", 100.0 * s.miss_ratio),
            ]
        })
        .collect();
    doc.table(
        &[
            "reuse misses at most (of lookups)",
            "LRU cache size (objects)",
            "miss ratio there, first accesses included",
        ],
        &rows,
    );
    let u = &a.reuse;
    doc.table(
        &["reuse age", "p50", "p99", "p99.9", "p99.99", "max"],
        &[vec![
            "seconds since the key's previous access".into(),
            format!("{:.1}", u.p50_s),
            format!("{:.0}", u.p99_s),
            format!("{:.0}", u.p999_s),
            format!("{:.0}", u.p9999_s),
            format!("{:.0}", u.max_s),
        ]],
    );
    if let (Some(t), Some(size)) = (a.regimes.switch_time, a.regimes.suggested_cache_size) {
        doc.paragraph(&format!(
            "Regime switch: at {t:.0} s (start of regime {}), a policy could switch to a cache \
             of {size} objects (the key space by then), as seed 002 §6 does; see Regimes below.",
            a.regimes.switch_regime.map_or(0, |r| r + 1)
        ));
    }
}

/// `--mrc`: one line per algorithm on a log size axis (where sizing decisions are read: a
/// cache of 0.1% and one of 100% of the working set on one chart), and the points as a table.
fn curves_section(doc: &mut Document, curves: &crate::Curves) -> Result<(), ReportError> {
    doc.heading("Miss-ratio curves");
    let method = if curves.sample_rate < 1.0 {
        format!(
            "sampled at rate {:.4} (SHARDS for LRU in objects, miniature caches otherwise)",
            curves.sample_rate
        )
    } else {
        "exact (one simulated cache per size)".to_string()
    };
    doc.paragraph(&format!(
        "{} curves in {}, {method}, computed in {:.2} s.",
        curves.curves.len(),
        curves.unit,
        curves.wall_seconds
    ));
    let series: Vec<Series> = curves
        .curves
        .iter()
        .map(|c| {
            Series::new(
                c.algorithm.clone(),
                c.points
                    .iter()
                    .map(|p| (p.cache_size as f64, p.miss_ratio))
                    .collect(),
            )
        })
        .collect();
    doc.svg(&line_chart(
        &Chart::new(
            "Miss ratio vs cache size",
            &format!("cache size ({}, log scale)", curves.unit),
            "miss ratio",
        )
        .log_x(),
        &series,
    )?);
    let mut header = vec![format!("cache size ({})", curves.unit)];
    header.extend(curves.curves.iter().map(|c| c.algorithm.clone()));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let sizes = curves.curves.first().map_or(&[][..], |c| &c.points[..]);
    let rows: Vec<Vec<String>> = sizes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut row = vec![p.cache_size.to_string()];
            row.extend(
                curves
                    .curves
                    .iter()
                    .map(|c| format!("{:.4}", c.points[i].miss_ratio)),
            );
            row
        })
        .collect();
    doc.table(&header, &rows);
    Ok(())
}
