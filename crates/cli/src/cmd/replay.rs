//! `mantle replay`: replays a trace through a cache (optionally managed by a policy) and
//! prints the report.

use super::progress::{ReplayProgress, Show};
use super::ticks;
use super::trace_args::TraceArgs;
use anyhow::{bail, Context, Result};
use cache::{Algorithm, Capacity};
use serde_json::{json, Value};
use sim::policy_driver::PolicyController;
use sim::{
    BackendSpec, CacheSize, Granularity, ReplayConfig, ReplayReport, RestartAt, Tick, WarmupConfig,
    WarmupSpec, WorkingSet,
};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub input: TraceArgs,
    /// Cache size: objects (1000), bytes with a unit (64MiB, 1GB), a percentage of the
    /// trace's working set (10%: in bytes when the trace has sizes, else objects), or unlimited.
    #[arg(long, value_name = "SIZE", required_unless_present = "server")]
    pub cache_size: Option<CacheSize>,
    /// --server and the flags that go with it (boxed: they are rarely given).
    #[command(flatten)]
    pub live: Box<LiveArgs>,
    /// --nodes and the flags of a simulated cluster.
    #[command(flatten)]
    pub cluster: Box<super::nodes::NodesArgs>,
    /// Eviction algorithm.
    #[arg(
        long,
        default_value = "lru",
        value_name = "lru|fifo|clock|sieve|s3fifo"
    )]
    pub eviction: Algorithm,
    /// Model of the store behind the cache: lsm (default), lsm:rate=N,compact_every=N,stall=S, or none.
    #[arg(long, default_value = "lsm", value_name = "MODEL|none")]
    pub backend: BackendSpec,
    /// Decision tick: trace time (1s, 500ms) or requests (1000ops). Default: 1s, or 1000ops
    /// on a trace without timestamps (where a time tick would never fire).
    #[arg(long, value_name = "1s|Nops")]
    pub tick: Option<Tick>,
    /// Lua policy that manages the cache at every tick (see docs/policy-language.md).
    #[arg(long, value_name = "FILE.lua")]
    pub policy: Option<PathBuf>,
    /// Policy parameter, visible as params.K (numbers are converted); repeatable.
    #[arg(long = "param", value_name = "K=V", value_parser = policy::parse_param, requires = "policy")]
    pub params: Vec<(String, policy::Scalar)>,
    /// Instruction budget of one policy callback.
    #[arg(long, value_name = "N", default_value_t = policy::Limits::default().instructions, requires = "policy")]
    pub policy_instructions: u64,
    /// Memory limit of the policy's Lua state (bytes, or with a unit: 64MiB).
    #[arg(long, value_name = "BYTES", default_value = "64MiB", value_parser = sim::parse_bytes, requires = "policy")]
    pub policy_memory: u64,
    /// Most access events kept for the policy's timeseries().
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1_000_000,
        requires = "policy"
    )]
    pub timeseries: usize,
    /// Write the per-tick metrics time series to this CSV file.
    #[arg(long, value_name = "FILE.csv")]
    pub metrics_out: Option<PathBuf>,
    /// Write an HTML report (cache size, hit ratio and back-end load over time).
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Class file (Open CAS layout, see docs/cache-hints.md): one queue per class, with
    /// priorities, allocation caps and pinning.
    #[arg(long, value_name = "FILE")]
    pub classes: Option<PathBuf>,
    /// Empty the cache after N requests (or P% of the trace) and measure its warm-up against
    /// an always-warm cache (see docs/warmup.md).
    #[arg(long, value_name = "N|P%")]
    pub restart_at: Option<RestartAt>,
    /// At the restart, bulk-load the set this strategy picks; K is a count or a share of the
    /// cache (lastk:100%); firstk also takes :PERIOD.
    #[arg(
        long,
        value_name = "lastk:K|firstk:K|topk:K|randomk:K (K: N or P%)",
        requires = "restart_at"
    )]
    pub warmup: Option<WarmupSpec>,
    /// What the warm-up monitor records: regions of this size (block traces; default 1MiB),
    /// or `keys`. Default: regions for block formats, keys otherwise.
    #[arg(long, value_name = "1MiB|keys", requires = "restart_at")]
    pub region: Option<String>,
    /// Lookups per point of the warm-up chart, and how many lookups must follow a
    /// convergence point for it to count (default: about 1/200 of the lookups after the
    /// restart, at least 100).
    #[arg(long, value_name = "N", requires = "restart_at")]
    pub warmup_window: Option<u64>,
    /// Most units (keys or regions) the warm-up monitor keeps.
    #[arg(long, value_name = "N", default_value_t = 1 << 20, requires = "restart_at")]
    pub monitor_limit: usize,
    /// Seed of randomk.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "warmup")]
    pub warmup_seed: u64,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    pub json: bool,
    /// Print nothing on stderr but errors: no progress bar, notices or warnings.
    #[arg(long, conflicts_with = "progress")]
    pub quiet: bool,
    /// Show the progress bar even when stderr is not a terminal (one line per update).
    #[arg(long)]
    pub progress: bool,
}

/// The flags of a replay against a running server (see docs/replay.md).
#[derive(clap::Args)]
pub struct LiveArgs {
    /// Replay against a running `mantle serve` at HOST:PORT (or redis://HOST:PORT) instead of
    /// simulating: real time scaled by --speed, figures from the server's counters.
    #[arg(
        long,
        value_name = "ADDR",
        conflicts_with_all = [
            "cache_size", "eviction", "backend", "policy", "params",
            "policy_instructions", "policy_memory", "timeseries", "report",
            "classes", "restart_at", "warmup", "region", "warmup_window", "monitor_limit",
            "warmup_seed",
        ]
    )]
    pub server: Option<String>,
    /// With --server: how many times faster than the trace's clock to replay; default 1 (real
    /// time), 0 as fast as possible (traces without timestamps always are).
    #[arg(long, value_name = "X")]
    pub speed: Option<f64>,
    /// With --server: the password the server wants (its --requirepass).
    #[arg(long, value_name = "PASSWORD")]
    pub password: Option<String>,
    /// With --server: stop after N requests of the trace.
    #[arg(long, value_name = "N")]
    pub max_requests: Option<u64>,
}

pub fn run(args: Args) -> Result<()> {
    if let Some(server) = &args.live.server {
        let options = loadgen::LiveOptions {
            server: server.clone(),
            password: args.live.password.clone(),
            speed: args.live.speed.unwrap_or(1.0),
            max_requests: args.live.max_requests,
            progress: !args.quiet,
            ticks: args.tick,
        };
        return run_live(
            &options,
            &args.input,
            args.json,
            args.metrics_out.as_deref(),
        );
    }
    if let Some(nodes) = args.cluster.nodes {
        return super::nodes::run(&args, nodes);
    }
    // Checked here rather than with clap's `requires`, which gives way to --server's conflicts.
    for (given, flag) in [
        (args.live.speed.is_some(), "--speed"),
        (args.live.password.is_some(), "--password"),
        (args.live.max_requests.is_some(), "--max-requests"),
    ] {
        if given {
            bail!("{flag} goes with --server ADDR (a replay against a running server)");
        }
    }
    let Some(cache_size) = args.cache_size else {
        bail!("--cache-size is required (or --server ADDR to replay against a running server)");
    };
    let format = args.input.format()?;
    let options = args.input.options()?;
    let open = || trace::open(&args.input.trace, format, &options);

    let (capacity, working_set) = resolve_capacity(cache_size, open, &args.input.trace)?;

    let classes = args
        .classes
        .as_deref()
        .map(cache::classes::ClassSet::from_file)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--classes {e}"))?;
    let warmup = match args.restart_at {
        Some(at) => Some(warmup_config(&args, at, format, open)?),
        None => None,
    };
    let config = ReplayConfig {
        algorithm: args.eviction,
        capacity,
        backend: args.backend,
        tick: Tick::Seconds(1.0),
        record_ticks: args.metrics_out.is_some() || args.report.is_some(),
        timeseries_limit: args.timeseries,
        classes,
        warmup,
    };
    let mut controller = match &args.policy {
        Some(path) => {
            let params = args.params.iter().cloned().collect();
            Some(
                PolicyController::from_file(path, params, policy_limits(&args), true)
                    .map_err(|e| anyhow::anyhow!("--policy {}: {e}", path.display()))?,
            )
        }
        None => None,
    };
    let mut reader = trace::Batched::new(open()?);
    let (tick, notice) = ticks::resolve(args.tick, reader.has_timestamps(), &args.input.trace)?;
    let ticks_matter = controller.is_some() || config.record_ticks;
    if let (Some(notice), true, false) = (notice, ticks_matter, args.quiet) {
        eprintln!("{notice}");
    }
    let config = ReplayConfig { tick, ..config };
    let label = format!("replay {}", file_label(&args.input.trace));
    let mut progress = ReplayProgress::new(
        Show::from_flags(args.quiet, args.progress),
        &label,
        reader.progress(),
    );
    let report = sim::replay(
        &config,
        controller.as_mut().map(|c| c as &mut dyn sim::Controller),
        || {
            let next = reader.next_request();
            if let Ok(Some(_)) = next {
                progress.request(|| reader.progress());
            }
            next
        },
    )
    .map_err(|e| ticks::replay_error(e, &args.input.trace))?;
    progress.finish(reader.progress());
    if let (Some(warning), false) = (ticks::never_ran(&report, tick), args.quiet) {
        eprintln!("{warning}");
    }

    if let Some(path) = &args.metrics_out {
        let file = std::fs::File::create(path)
            .with_context(|| format!("--metrics-out: cannot create {}", path.display()))?;
        sim::metrics_csv::write_ticks(std::io::BufWriter::new(file), &report.ticks)
            .with_context(|| format!("--metrics-out: writing {}", path.display()))?;
    }

    if let Some(path) = &args.report {
        let name = args
            .policy
            .as_ref()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| format!("{} {}", args.eviction, cache_size));
        let run = super::runs::policy_run(&name, &report);
        let title = format!("mantle replay: {}", args.input.trace.display());
        let intro = format!(
            "{} requests, miss ratio {:.6}, mean cache {:.1} objects.",
            report.requests, report.miss_ratio, report.mean_cache_objects
        );
        let html = if report.classes.is_some() || report.warmup.is_some() {
            hints_report(&title, &intro, &report, run)?
        } else {
            report::comparison_report(&title, &intro, &[run])?
        };
        std::fs::write(path, html)
            .with_context(|| format!("--report: cannot write {}", path.display()))?;
        if !args.json {
            eprintln!("report written to {}", path.display());
        }
    }

    let input = json!({
        "trace": args.input.trace.display().to_string(),
        "format": args.input.format_name(),
        "algorithm": format!("{:?}", args.eviction).to_lowercase(),
        "cache_size": cache_size.to_string(),
        "capacity_objects": capacity.objects,
        "capacity_bytes": capacity.bytes,
        "working_set": working_set,
    });
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&report, input))?
        );
    } else {
        print_summary(&report, &input);
    }
    Ok(())
}

/// Resolves the restart point and window against the trace (one counting pass) and picks the
/// monitor's granularity.
fn warmup_config(
    args: &Args,
    at: RestartAt,
    format: Option<trace::Format>,
    open: impl Fn() -> Result<Box<dyn trace::TraceReader>, trace::TraceError>,
) -> Result<WarmupConfig> {
    let (mut requests, mut lookups) = (0u64, Vec::new());
    let mut reader = open()?;
    while let Some(r) = reader.next_request()? {
        requests += 1;
        if matches!(r.op, trace::Op::Get | trace::Op::Access) {
            lookups.push(requests);
        }
    }
    let restart_at = at.resolve(requests);
    if restart_at >= requests {
        bail!("--restart-at: the trace has {requests} requests, so a restart after {restart_at} leaves nothing to measure");
    }
    let lookups_after = lookups.iter().filter(|&&i| i > restart_at).count() as u64;
    let window_lookups = match args.warmup_window {
        Some(0) => bail!("--warmup-window must be > 0"),
        Some(n) => n,
        None => (lookups_after / 200).max(100),
    };
    let format = match format {
        Some(f) => Some(f),
        None => trace::detect(&args.input.trace).ok(),
    };
    let granularity = granularity(args.region.as_deref(), format, args.input.block_size)?;
    Ok(WarmupConfig {
        restart_at,
        spec: args.warmup,
        granularity,
        monitor_limit: args.monitor_limit,
        window_lookups,
        seed: args.warmup_seed,
        ..WarmupConfig::default()
    })
}

/// `--region`: an explicit size or `keys`; by default 1 MiB regions for block formats.
fn granularity(
    region: Option<&str>,
    format: Option<trace::Format>,
    block_size: u32,
) -> Result<Granularity> {
    use trace::Format as F;
    let regions = |bytes: u64| Granularity::Regions {
        region_bytes: bytes,
        block_size: u64::from(block_size),
    };
    match region {
        Some(r) if r.eq_ignore_ascii_case("keys") => Ok(Granularity::Keys),
        Some(r) => {
            let bytes = sim::parse_bytes(r).map_err(|e| anyhow::anyhow!("--region: {e}"))?;
            if bytes == 0 {
                bail!("--region must be > 0 bytes (or `keys`)");
            }
            Ok(regions(bytes))
        }
        None => Ok(match format {
            Some(F::Vscsi | F::Msr | F::Arc | F::Systor | F::TencentCbs | F::Lirs) => {
                regions(1 << 20)
            }
            _ => Granularity::Keys,
        }),
    }
}

/// Resolves `--cache-size P%` against the working set: bytes when the trace carries object
/// sizes, objects otherwise.
/// The capacity `--cache-size` asks for, and the working set when a percentage needed one
/// (a pass over the trace).
pub(super) fn resolve_capacity(
    size: CacheSize,
    open: impl Fn() -> Result<Box<dyn trace::TraceReader>, trace::TraceError>,
    trace: &Path,
) -> Result<(Capacity, Option<WorkingSet>)> {
    Ok(match size {
        CacheSize::Objects(n) => (
            Capacity {
                objects: Some(n),
                bytes: None,
            },
            None,
        ),
        CacheSize::Bytes(n) => (
            Capacity {
                objects: None,
                bytes: Some(n),
            },
            None,
        ),
        CacheSize::Unlimited => (Capacity::default(), None),
        CacheSize::Percent(p) => {
            let mut reader = open()?;
            let ws = WorkingSet::scan(|| reader.next_request())?;
            (capacity_from_percent(ws, p, trace)?, Some(ws))
        }
    })
}

/// `--policy-instructions` and `--policy-memory` as the engine's limits.
pub(super) fn policy_limits(args: &Args) -> policy::Limits {
    policy::Limits {
        instructions: args.policy_instructions,
        memory_bytes: usize::try_from(args.policy_memory).unwrap_or(usize::MAX),
        ..policy::Limits::default()
    }
}

fn capacity_from_percent(ws: WorkingSet, percent: f64, trace: &Path) -> Result<Capacity> {
    if ws.objects == 0 {
        bail!(
            "--cache-size {percent}%: {} has no requests, so it has no working set",
            trace.display()
        );
    }
    let of = |total: u64| ((total as f64 * percent / 100.0) as u64).max(1);
    Ok(if ws.has_sizes {
        Capacity {
            objects: None,
            bytes: Some(of(ws.bytes)),
        }
    } else {
        Capacity {
            objects: Some(of(ws.objects)),
            bytes: None,
        }
    })
}

/// The report page with the per-class table and the warm-up chart.
fn hints_report(
    title: &str,
    intro: &str,
    r: &ReplayReport,
    run: report::PolicyRun,
) -> Result<String> {
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
                    c.hits.to_string(),
                    c.misses.to_string(),
                    c.hit_ratio.map_or("-".to_string(), |h| format!("{:.4}", h)),
                    c.objects.to_string(),
                    c.bytes.to_string(),
                    c.evictions.to_string(),
                    format!("{}/{}/{}", c.bypassed, c.fenced, c.refused),
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
        let series = |f: &dyn Fn(&sim::warmup::WindowRow) -> f64| {
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

fn to_json(report: &ReplayReport, input: Value) -> Value {
    let mut value = serde_json::to_value(report).expect("report serialises");
    if let (Value::Object(map), Value::Object(extra)) = (&mut value, input) {
        for (k, v) in extra {
            map.insert(k, v);
        }
    }
    value
}

fn print_summary(r: &ReplayReport, input: &Value) {
    let lookups = r.gets + r.accesses;
    println!(
        "trace        {} ({})",
        input["trace"].as_str().unwrap_or(""),
        input["format"].as_str().unwrap_or("")
    );
    println!(
        "cache        {} {}",
        input["algorithm"].as_str().unwrap_or(""),
        input["cache_size"].as_str().unwrap_or("")
    );
    println!(
        "requests     {} ({} gets, {} accesses, {} puts, {} deletes)",
        r.requests, r.gets, r.accesses, r.puts, r.deletes
    );
    println!(
        "miss ratio   {:.6} ({} misses of {} lookups), byte miss ratio {:.6}",
        r.miss_ratio, r.misses, lookups, r.byte_miss_ratio
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
                c.hits,
                c.misses,
                c.objects,
                c.bytes,
                c.evictions
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
    println!(
        "speed        {:.2} M requests/s ({:.2} s)",
        r.requests_per_second / 1e6,
        r.wall_seconds
    );
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |x| format!("{x:.1}"))
}

/// The trace's file name, for the progress bar.
fn file_label(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// `--server`: replays against a running `mantle serve` and prints its report.
/// With --tick, in lock step with a `--tick manual` server; --metrics-out then writes its ticks.
fn run_live(
    options: &loadgen::LiveOptions,
    input: &TraceArgs,
    json: bool,
    metrics_out: Option<&Path>,
) -> Result<()> {
    if metrics_out.is_some() && options.ticks.is_none() {
        bail!("--metrics-out goes with --server only together with --tick (a lock-step replay)");
    }
    let reader = trace::open(&input.trace, input.format()?, &input.options()?)?;
    let report = loadgen::replay(options, reader)?;
    if let Some(path) = metrics_out {
        let file = std::fs::File::create(path)
            .with_context(|| format!("--metrics-out: cannot create {}", path.display()))?;
        sim::metrics_csv::write_ticks(std::io::BufWriter::new(file), report.ticks())
            .with_context(|| format!("--metrics-out: writing {}", path.display()))?;
    }
    let trace = input.trace.display().to_string();
    let format = input.format_name();
    if json {
        let mut value = report.to_json();
        if let Value::Object(map) = &mut value {
            map.insert("trace".into(), json!(trace));
            map.insert("format".into(), json!(format));
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        loadgen::print_summary(&report, &trace, &format);
    }
    Ok(())
}
