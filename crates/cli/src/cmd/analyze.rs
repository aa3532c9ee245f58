//! `mantle analyze`: key-space activity, fans, regimes and miss-ratio curves (LRU always,
//! any algorithm with --mrc) of a trace, as a summary, JSON or an HTML report.

use std::path::PathBuf;

use super::trace_args::TraceArgs;
use analyze::curves::{self, CurveOptions, Method, Unit};
use analyze::{Analysis, AnalyzeOptions, Analyzer};
use anyhow::{Context, Result};
use cache::Algorithm;
use units::CacheSize;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub input: TraceArgs,
    /// Sliding window for distinct keys: seconds (60, 60s), minutes (5m) or milliseconds (500ms).
    #[arg(long, default_value = "60s", value_parser = parse_seconds, value_name = "DURATION")]
    pub window: f64,
    /// Regimes for the k-means regime detection.
    #[arg(long, default_value_t = 4, value_name = "K")]
    pub regimes: usize,
    /// Keys the miss-ratio curve tracks exactly; beyond, it samples keys (SHARDS).
    #[arg(long, default_value_t = 1 << 22, value_name = "N")]
    pub mrc_max_keys: usize,
    /// Miss-ratio curves of these eviction algorithms (comma-separated, or all), by
    /// simulation: exact, or sampled with --mrc-method sampled.
    #[arg(long, value_name = "ALG[,ALG...]|all", value_parser = parse_algorithms)]
    pub mrc: Option<Algorithms>,
    /// Sizes of the --mrc curves, comma-separated: objects (1000) or bytes (64MiB) as
    /// --mrc-unit says, or percentages of the working set (10%). Default: --mrc-points sizes.
    #[arg(
        long,
        value_name = "SIZE[,SIZE...]",
        value_delimiter = ',',
        requires = "mrc"
    )]
    pub mrc_sizes: Vec<CacheSize>,
    /// Without --mrc-sizes: this many sizes, log-spaced from 0.1% to 100% of the working set.
    #[arg(long, value_name = "N", default_value_t = curves::DEFAULT_POINTS, requires = "mrc")]
    pub mrc_points: usize,
    /// What the --mrc sizes count.
    #[arg(
        long,
        value_name = "objects|bytes",
        default_value = "objects",
        requires = "mrc"
    )]
    pub mrc_unit: Unit,
    /// exact: a full cache per size; sampled: keys sampled at --mrc-sample-rate (SHARDS for
    /// LRU in objects, miniature caches otherwise).
    #[arg(long, value_name = "exact|sampled", default_value = "exact", value_parser = ["exact", "sampled"], requires = "mrc")]
    pub mrc_method: String,
    /// Share of the keys a sampled curve serves, in (0, 1].
    #[arg(long, value_name = "R", default_value_t = curves::DEFAULT_SAMPLE_RATE, requires = "mrc")]
    pub mrc_sample_rate: f64,
    /// Threads for the --mrc caches (default: the number of cores); each reads the trace.
    #[arg(long, value_name = "N", requires = "mrc")]
    pub jobs: Option<usize>,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    pub json: bool,
    /// Write a self-contained HTML report with charts to this file.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
}

/// A duration flag (`60`, `60s`, `5m`, `500ms`) in seconds, for the analyses that count time
/// as a float.
pub fn parse_seconds(text: &str) -> Result<f64, String> {
    units::parse_duration(text).map(|d| d.as_secs_f64())
}

/// The algorithms of `--mrc` (one value, so clap does not take it for a repeated flag).
#[derive(Clone, Debug)]
pub struct Algorithms(pub Vec<Algorithm>);

/// `lru,s3fifo` or `all`.
fn parse_algorithms(text: &str) -> Result<Algorithms, String> {
    if text == "all" {
        // The online ones: a curve is not drawn for the offline algorithms.
        return Ok(Algorithms(
            Algorithm::ALL
                .into_iter()
                .filter(|a| !a.is_offline())
                .collect(),
        ));
    }
    text.split(',')
        .map(|name| name.trim().parse::<Algorithm>())
        .collect::<Result<_, _>>()
        .map(Algorithms)
}

pub fn run(args: Args) -> Result<()> {
    let (path, format, options) = (
        &args.input.trace,
        args.input.format()?,
        args.input.options()?,
    );
    let mut reader = trace::open(path, format, &options)?;
    let mut analyzer = Analyzer::new(AnalyzeOptions {
        window_s: args.window,
        regimes: args.regimes,
        mrc_max_keys: args.mrc_max_keys,
        ..AnalyzeOptions::default()
    });
    while let Some(request) = reader.next_request()? {
        analyzer.feed(&request);
    }
    let mut analysis = analyzer.finish();
    if let Some(Algorithms(algorithms)) = &args.mrc {
        let curve_options = CurveOptions {
            algorithms: algorithms.clone(),
            sizes: args.mrc_sizes.clone(),
            points: args.mrc_points,
            unit: args.mrc_unit,
            method: match args.mrc_method.as_str() {
                "sampled" => Method::Sampled(args.mrc_sample_rate),
                _ => Method::Exact,
            },
            jobs: args
                .jobs
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        };
        let open = || trace::open(path, format, &options);
        let computed = curves::miss_ratio_curves(&open, &curve_options).map_err(|e| {
            anyhow::anyhow!(
                "{}",
                e.replacen("sizes:", "--mrc-sizes:", 1).replacen(
                    "sample rate:",
                    "--mrc-sample-rate:",
                    1
                )
            )
        })?;
        analysis.curves = Some(computed);
    }
    if let Some(path) = &args.report {
        let html = analyze::html::render(&analysis, &args.input.trace.display().to_string())?;
        std::fs::write(path, html).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&analysis)?);
    } else {
        print_summary(&analysis);
        if let Some(path) = &args.report {
            println!("report: {}", path.display());
        }
    }
    Ok(())
}

fn print_summary(a: &Analysis) {
    println!("requests          {}", a.requests);
    println!(
        "ops               {} gets, {} puts, {} deletes, {} accesses",
        a.gets, a.puts, a.deletes, a.accesses
    );
    if let Some(r) = a.reads_per_write {
        println!("reads per write   {r:.1}");
    }
    println!("unique keys       {}", a.unique_keys);
    println!("duration          {:.0} s", a.duration_s);
    println!(
        "read rate         peak {:.0}/s (1 s), final {:.1}/s (last tenth)",
        a.peak_read_rate, a.final_read_rate
    );
    println!(
        "keys per {:.0} s     mean {:.1}, max {} (tumbling windows)",
        a.window_s, a.mean_unique_keys_per_window, a.max_unique_keys_per_window
    );
    let p = &a.popularity;
    println!(
        "popularity        top 1% keys {:.1}% of reads, top 10% {:.1}%, Zipf alpha {}",
        100.0 * p.top1pct_share,
        100.0 * p.top10pct_share,
        p.zipf_alpha.map_or("-".to_string(), |z| format!("{z:.2}"))
    );
    let mrc = &a.mrc;
    let sizes: Vec<String> = mrc
        .points
        .iter()
        .filter(|pt| pt.cache_size.is_power_of_two() && pt.cache_size >= 16)
        .map(|pt| format!("{}:{:.4}", pt.cache_size, pt.miss_ratio))
        .collect();
    println!(
        "LRU MRC ({}, rate {})  {}",
        mrc.method,
        mrc.sample_rate,
        sizes.join(" ")
    );
    if let Some(size) = mrc.no_miss_size {
        println!("LRU without reuse misses  {size} objects ({})", mrc.method);
    }
    for s in &mrc.sizing {
        println!(
            "LRU for reuse misses <= {}  {} objects (miss ratio {:.4}%)",
            analyze::mrc::percent(s.reuse_miss_ratio),
            s.cache_size,
            100.0 * s.miss_ratio
        );
    }
    if let Some(c) = &a.curves {
        for curve in &c.curves {
            let points: Vec<String> = curve
                .points
                .iter()
                .map(|p| format!("{}:{:.4}", p.cache_size, p.miss_ratio))
                .collect();
            let how = if c.sample_rate < 1.0 {
                format!("{} at rate {:.4}", curve.method, c.sample_rate)
            } else {
                curve.method.clone()
            };
            println!(
                "MRC {} ({how}, {})  {}",
                curve.algorithm,
                c.unit,
                points.join(" ")
            );
        }
    }
    println!(
        "fans              {} (raw {}), keys mean {:.0} median {} max {}, mean {:.0} s",
        a.fans.count,
        a.fans.raw_count,
        a.fans.mean_keys,
        a.fans.median_keys,
        a.fans.max_keys,
        a.fans.mean_duration_s
    );
    let u = &a.reuse;
    println!(
        "reuse age         p50 {:.1} s, p99 {:.0} s, p99.9 {:.0} s, p99.99 {:.0} s, max {:.0} s",
        u.p50_s, u.p99_s, u.p999_s, u.p9999_s, u.max_s
    );
    println!(
        "returns           {} reads older than {:.0} s (mean fan), {:.1}/h",
        u.returns, u.return_after_s, u.returns_per_hour
    );
    println!(
        "new keys          {:.2}/s overall, {:.2}/s while a fan is open",
        u.new_keys_per_s, u.new_keys_per_fan_s
    );
    for (i, r) in a.regimes.regimes.iter().enumerate() {
        println!(
            "regime {}          {:.0}..{:.0} s, {:.1} reads/s, key space {} at start",
            i + 1,
            r.start,
            r.end,
            r.mean_read_rate,
            r.keyspace_at_start
        );
    }
    if let (Some(t), Some(size)) = (a.regimes.switch_time, a.regimes.suggested_cache_size) {
        println!("suggested switch  at {t:.0} s to a cache of {size} objects");
    }
}
