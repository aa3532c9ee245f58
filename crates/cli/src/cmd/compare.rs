//! `mantle compare`: replays one trace under several cache-management setups (no management,
//! fixed LRU sizes, Lua policies) in parallel across cores and writes one comparison report.

use super::runs::policy_run;
use super::ticks;
use super::trace_args::TraceArgs;
use anyhow::{anyhow, bail, Context, Result};
use cache::{Algorithm, Capacity};
use serde_json::json;
use sim::policy_driver::PolicyController;
use sim::{BackendSpec, ReplayConfig, ReplayReport, Tick};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub input: TraceArgs,
    /// A policy to compare; parameters may follow the file name: policies/fixed.lua:n=1000,k=2.
    /// Policies run on an unlimited cache that they size themselves. Repeatable.
    #[arg(long = "policy", value_name = "FILE.lua[:K=V,...]")]
    pub policies: Vec<String>,
    /// A fixed-size LRU cache of this many objects, without a policy. Repeatable.
    #[arg(long = "fixed", value_name = "OBJECTS")]
    pub fixed: Vec<u64>,
    /// Leave out the unmanaged (unlimited) cache that is otherwise the first run.
    #[arg(long)]
    pub no_baseline: bool,
    /// Eviction algorithm of every cache.
    #[arg(long, default_value = "lru")]
    pub eviction: Algorithm,
    /// Back-end model (see mantle replay).
    #[arg(long, default_value = "lsm")]
    pub backend: BackendSpec,
    /// Decision tick for the policies and the metrics series. Default: 1s, or 1000ops on a
    /// trace without timestamps (where a time tick would never fire).
    #[arg(long, value_name = "1s|Nops")]
    pub tick: Option<Tick>,
    /// Replays run at once (default: the number of cores).
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Where to write the HTML comparison report.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Also write each chart of the report as an SVG file into this directory.
    #[arg(long, value_name = "DIR")]
    pub charts: Option<PathBuf>,
    /// Print the results as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// One setup to replay.
struct Run {
    label: String,
    capacity: Capacity,
    policy: Option<(PathBuf, policy::Params)>,
}

pub fn run(args: Args) -> Result<()> {
    let runs = plan(&args)?;
    if runs.is_empty() {
        bail!("nothing to compare: give --policy or --fixed (or drop --no-baseline)");
    }
    let format = args.input.format()?;
    let options = args.input.options()?;
    // Fail on an unreadable trace once, before starting every run.
    let timed = trace::open(&args.input.trace, format, &options)?.has_timestamps();
    let (tick, notice) = ticks::resolve(args.tick, timed, &args.input.trace)?;
    let ticks_matter =
        runs.iter().any(|r| r.policy.is_some()) || args.report.is_some() || args.charts.is_some();
    if let (Some(notice), true) = (notice, ticks_matter) {
        eprintln!("{notice}");
    }
    // Load every policy once up front so a broken one is reported before any replay runs.
    for run in &runs {
        if let Some((path, params)) = &run.policy {
            PolicyController::from_file(path, params.clone(), policy::Limits::default(), false)
                .map_err(|e| anyhow!("--policy {}: {e}", path.display()))?;
        }
    }

    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, runs.len());
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<ReplayReport>>>> =
        Mutex::new((0..runs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(run) = runs.get(i) else { break };
                let outcome = replay_one(&args, tick, format, &options, run);
                if !args.json {
                    match &outcome {
                        Ok(r) => eprintln!(
                            "compare: {} done ({:.2} s, miss ratio {:.6})",
                            run.label, r.wall_seconds, r.miss_ratio
                        ),
                        Err(e) => eprintln!("compare: {} failed: {e:#}", run.label),
                    }
                }
                if let Some(warning) = outcome
                    .as_ref()
                    .ok()
                    .and_then(|r| ticks::never_ran(r, tick))
                {
                    eprintln!("{warning}");
                }
                results.lock().expect("no replay thread panics")[i] = Some(outcome);
            });
        }
    });
    let mut reports = Vec::new();
    for (run, result) in runs
        .iter()
        .zip(results.into_inner().expect("threads joined"))
    {
        let report = result
            .expect("every run was taken by a thread")
            .with_context(|| format!("replaying {}", run.label))?;
        reports.push((run.label.clone(), report));
    }

    let policy_runs: Vec<_> = reports.iter().map(|(l, r)| policy_run(l, r)).collect();
    if let Some(dir) = &args.charts {
        write_charts(dir, &policy_runs)?;
    }
    if let Some(path) = &args.report {
        let html = report::comparison_report(
            &format!("mantle compare: {}", args.input.trace.display()),
            &format!(
                "{} requests replayed under {} setups ({} eviction, back-end model {}, tick {}).",
                reports[0].1.requests,
                reports.len(),
                args.eviction,
                args.backend,
                ticks::show(tick)
            ),
            &policy_runs,
        )?;
        std::fs::write(path, html)
            .with_context(|| format!("--report: cannot write {}", path.display()))?;
    }

    if args.json {
        let runs: Vec<_> = reports
            .iter()
            .map(|(label, r)| json!({"label": label, "result": r}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "trace": args.input.trace.display().to_string(),
                "runs": runs,
            }))?
        );
    } else {
        print_table(&reports);
        if let Some(path) = &args.report {
            println!("report: {}", path.display());
        }
    }
    Ok(())
}

/// The report's charts as separate SVG files (for docs and slides).
fn write_charts(dir: &std::path::Path, runs: &[report::PolicyRun]) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--charts: cannot create {}", dir.display()))?;
    let trade_off = report::memory_vs_performance_chart(runs)?;
    let over_time = report::policy_charts(runs)?;
    let names = [
        "memory_vs_miss_ratio",
        "mean_cache_size",
        "hit_ratio_per_policy",
        "cache_size_over_time",
        "hit_ratio_over_time",
        "backend_load_over_time",
    ];
    for (name, svg) in names.iter().zip(trade_off.iter().chain(over_time.iter())) {
        let path = dir.join(format!("{name}.svg"));
        std::fs::write(&path, svg)
            .with_context(|| format!("--charts: cannot write {}", path.display()))?;
    }
    Ok(())
}

fn plan(args: &Args) -> Result<Vec<Run>> {
    let mut runs = Vec::new();
    if !args.no_baseline {
        runs.push(Run {
            label: "no management".to_string(),
            capacity: Capacity::default(),
            policy: None,
        });
    }
    for &n in &args.fixed {
        if n == 0 {
            bail!("--fixed must be > 0");
        }
        runs.push(Run {
            label: format!("{} {n}", args.eviction),
            capacity: Capacity::objects(n),
            policy: None,
        });
    }
    for spec in &args.policies {
        let (path, params) =
            parse_policy_spec(spec).map_err(|e| anyhow!("--policy {spec}: {e}"))?;
        let stem = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| spec.clone());
        let label = if params.is_empty() {
            stem
        } else {
            let kv: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("{stem} {}", kv.join(","))
        };
        runs.push(Run {
            label,
            capacity: Capacity::default(),
            policy: Some((path, params)),
        });
    }
    Ok(runs)
}

/// `FILE.lua` or `FILE.lua:k=v,k2=v2`.
fn parse_policy_spec(spec: &str) -> Result<(PathBuf, policy::Params), String> {
    let (path, params) = match spec.find(".lua:") {
        Some(i) => (&spec[..i + 4], Some(&spec[i + 5..])),
        None => (spec, None),
    };
    let mut out = policy::Params::new();
    for pair in params
        .into_iter()
        .flat_map(|p| p.split(','))
        .filter(|p| !p.is_empty())
    {
        let (k, v) = policy::parse_param(pair)?;
        out.insert(k, v);
    }
    Ok((PathBuf::from(path), out))
}

fn replay_one(
    args: &Args,
    tick: Tick,
    format: Option<trace::Format>,
    options: &trace::ReadOptions,
    run: &Run,
) -> Result<ReplayReport> {
    let config = ReplayConfig {
        algorithm: args.eviction,
        capacity: run.capacity,
        backend: args.backend,
        tick,
        record_ticks: args.report.is_some() || args.charts.is_some(),
        ..ReplayConfig::default()
    };
    let mut controller = match &run.policy {
        Some((path, params)) => Some(
            PolicyController::from_file(path, params.clone(), policy::Limits::default(), false)
                .map_err(|e| anyhow!("{}: {e}", path.display()))?,
        ),
        None => None,
    };
    let mut reader = trace::Batched::new(trace::open(&args.input.trace, format, options)?);
    sim::replay(
        &config,
        controller.as_mut().map(|c| c as &mut dyn sim::Controller),
        || reader.next_request(),
    )
    .map_err(|e| ticks::replay_error(e, &args.input.trace))
}

fn print_table(reports: &[(String, ReplayReport)]) {
    println!(
        "{:<36} {:>11} {:>13} {:>13} {:>10} {:>10} {:>9}",
        "setup", "miss ratio", "mean objects", "time-mean", "peak", "be reads", "overload"
    );
    for (label, r) in reports {
        println!(
            "{:<36} {:>10.4}% {:>13.1} {:>13} {:>10} {:>10} {:>8}s",
            label,
            100.0 * r.miss_ratio,
            r.mean_cache_objects,
            r.time_mean_cache_objects
                .map_or("-".to_string(), |v| format!("{v:.1}")),
            r.peak_cache_objects,
            r.backend.reads,
            r.backend
                .overload_seconds
                .map_or("-".to_string(), |v| v.to_string()),
        );
    }
}
