//! `mantle compare`: replays one trace under several cache-management setups (no management,
//! fixed sizes of any algorithm, Lua policies) in parallel across cores and writes one
//! comparison report.

use super::ticks;
use super::trace_args::TraceArgs;
use anyhow::{bail, Context, Result};
use cache::Algorithm;
use serde_json::json;
use sim::compare;
use sim::page::policy_run;
use sim::{BackendSpec, CacheSize, ReplayConfig, Tick};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub input: TraceArgs,
    /// A policy to compare; parameters may follow the file name: policies/fixed.lua:n=1000,k=2.
    /// Policies run on an unlimited cache that they size themselves. Repeatable.
    #[arg(long = "policy", value_name = "FILE.lua[:K=V,...]")]
    pub policies: Vec<String>,
    /// A fixed-size cache of the --eviction algorithm, without a policy: objects (1000),
    /// bytes (64MiB) or a percentage of the working set (10%). Repeatable.
    #[arg(long = "fixed", value_name = "SIZE")]
    pub fixed: Vec<CacheSize>,
    /// A setup of its own: any algorithm at any size (objects, bytes, % of the working set),
    /// optionally under a ceiling (max=SIZE) and managed by a policy (policy=FILE.lua, its
    /// parameters after it). Repeatable.
    #[arg(
        long = "setup",
        value_name = "ALG:SIZE[:max=SIZE][:policy=FILE.lua[:K=V,...]]"
    )]
    pub setups: Vec<String>,
    /// A ceiling on every setup's cache but the baseline (see mantle replay
    /// --max-cache-size); a setup's own max= wins.
    #[arg(long, value_name = "SIZE")]
    pub max_cache_size: Option<CacheSize>,
    /// Leave out the unmanaged (unlimited) cache that is otherwise the first run.
    #[arg(long)]
    pub no_baseline: bool,
    /// Eviction algorithm of the baseline, --fixed and --policy caches (--setup names its own;
    /// the offline ones read the trace once more first).
    #[arg(long, default_value = "lru")]
    pub eviction: Algorithm,
    /// Admission policy of every cache (see mantle replay).
    #[arg(long, value_name = "NAME[:param=value,...]")]
    pub admission: Option<cache::Admission>,
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
    /// A candidate of the adaptive run (see docs/adaptive.md): replayed alone like --policy,
    /// and in shadow beside the real cache in the adaptive run. Repeatable, in preference order.
    #[arg(long = "shadow", value_name = "FILE.lua[:K=V,...]")]
    pub shadows: Vec<String>,
    /// Switch policy of the adaptive run (one more setup: the candidates in shadow, the one
    /// the switch picks managing the cache).
    #[arg(long, value_name = "FILE.lua", requires = "shadows")]
    pub switch: Option<PathBuf>,
    /// Switch policy parameter, visible as params.K; repeatable.
    #[arg(long = "switch-param", value_name = "K=V", value_parser = policy::parse_param, requires = "switch")]
    pub switch_params: Vec<(String, policy::Scalar)>,
    /// Ticks in the sliding window of the figures the switch sees.
    #[arg(long, value_name = "TICKS", default_value_t = 10, requires = "switch")]
    pub window: usize,
}

pub fn run(args: Args) -> Result<()> {
    let alone: Vec<String> = args.policies.iter().chain(&args.shadows).cloned().collect();
    let (path, format, options) = (
        &args.input.trace,
        args.input.format()?,
        args.input.options()?,
    );
    let open = || trace::open(path, format, &options);
    let plan = compare::Plan {
        baseline: !args.no_baseline,
        fixed: &args.fixed,
        setups: &args.setups,
        policies: &alone,
        eviction: args.eviction,
        max_cache_size: args.max_cache_size,
    };
    let setups = compare::plan(&plan, || {
        let mut reader = open()?;
        let ws = sim::WorkingSet::scan(|| reader.next_request())?;
        if ws.objects == 0 {
            bail!(
                "{} has no requests, so a percentage of its working set means nothing",
                path.display()
            );
        }
        Ok(ws)
    })?;
    let mut adaptive = adaptive_run(&args)?;
    if setups.is_empty() {
        bail!("nothing to compare: give --setup, --fixed or --policy (or drop --no-baseline)");
    }
    // Fail on an unreadable trace once, before starting every run.
    let (tick, notice) = sim::ticks::resolve(
        args.tick,
        open()?.has_timestamps(),
        path,
        sim::ticks::CLI_FLAG,
    )?;
    let charts = args.report.is_some() || args.charts.is_some();
    let ticks_matter = setups.iter().any(|r| r.policy.is_some()) || charts;
    if let (Some(notice), true) = (notice, ticks_matter) {
        eprintln!("{notice}");
    }
    compare::check_policies(&setups)?;
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let future = match args.eviction.is_offline() {
        true => Some(super::replay::next_accesses(path, open)?),
        false => None,
    };
    let config = ReplayConfig {
        algorithm: args.eviction,
        backend: args.backend,
        tick,
        record_ticks: charts,
        admission: args.admission.clone(),
        future,
        ..ReplayConfig::default()
    };
    let mut reports = compare::replay_all(&setups, jobs, &config, path, open, |setup, outcome| {
        if !args.json {
            match outcome {
                Ok(r) => eprintln!(
                    "compare: {} done ({:.2} s, miss ratio {:.6})",
                    setup.label, r.wall_seconds, r.miss_ratio
                ),
                Err(e) => eprintln!("compare: {} failed: {e:#}", setup.label),
            }
        }
        if let Some(warning) = outcome
            .as_ref()
            .ok()
            .and_then(|r| ticks::never_ran(r, tick))
        {
            eprintln!("{warning}");
        }
    })?;
    let mut timeline = None;
    if let Some((label, a)) = adaptive.as_mut() {
        let mut reader = trace::Batched::new(open()?);
        let report = sim::replay(&config, Some(a as &mut dyn sim::Controller), || {
            reader.next_request()
        })
        .map_err(|e| ticks::replay_error(e, path))?;
        if !args.json {
            eprintln!(
                "compare: {label} done ({:.2} s, miss ratio {:.6})",
                report.wall_seconds, report.miss_ratio
            );
        }
        timeline = Some((reports.len(), a.report()));
        reports.push((label.clone(), report));
    }
    let policy_runs: Vec<_> = reports.iter().map(|(l, r)| policy_run(l, r)).collect();
    if let Some(dir) = &args.charts {
        compare::write_charts(dir, &policy_runs)?;
    }
    if let Some(out) = &args.report {
        let html = report::comparison_report(
            &format!("mantle compare: {}", path.display()),
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
        std::fs::write(out, html)
            .with_context(|| format!("--report: cannot write {}", out.display()))?;
    }
    if args.json {
        let runs: Vec<_> = reports
            .iter()
            .enumerate()
            .map(|(i, (label, r))| match &timeline {
                Some((at, a)) if *at == i => json!({"label": label, "result": r, "adaptive": a}),
                _ => json!({"label": label, "result": r}),
            })
            .collect();
        let value = json!({"trace": path.display().to_string(), "runs": runs});
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        compare::print_table(&reports);
        if let Some((_, a)) = &timeline {
            a.print();
        }
        if let Some(out) = &args.report {
            println!("report: {}", out.display());
        }
    }
    Ok(())
}

/// The adaptive setup `--switch` asks for, labelled `adaptive (SWITCH)`; loaded before any
/// replay runs so a broken candidate or switch policy is reported first.
fn adaptive_run(args: &Args) -> Result<Option<(String, adapt::Adaptive)>> {
    let Some(switch_path) = &args.switch else {
        return Ok(None);
    };
    let specs = args
        .shadows
        .iter()
        .map(|s| adapt::ShadowSpec::parse(s).map_err(|e| anyhow::anyhow!("--shadow {s}: {e}")))
        .collect::<Result<Vec<_>>>()?;
    let params = args.switch_params.iter().cloned().collect();
    let switch =
        policy::switch::SwitchPolicy::load_file(switch_path, &params, policy::Limits::default())
            .map_err(|e| anyhow::anyhow!("--switch {}: {e}", switch_path.display()))?;
    let label = format!("adaptive ({})", switch.id().name);
    let limits = adapt::shadow::ShadowLimits {
        algorithm: args.eviction,
        window: args.window,
        ..adapt::shadow::ShadowLimits::default()
    };
    let a = adapt::Adaptive::new(specs, Some(switch), None, limits, false)
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(Some((label, a)))
}
