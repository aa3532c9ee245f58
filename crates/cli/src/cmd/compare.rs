//! `mantle compare`: replays one trace under several cache-management setups (no management,
//! fixed LRU sizes, Lua policies) in parallel across cores and writes one comparison report.

use super::ticks;
use super::trace_args::TraceArgs;
use anyhow::{bail, Context, Result};
use cache::Algorithm;
use serde_json::json;
use sim::compare;
use sim::page::policy_run;
use sim::{BackendSpec, ReplayConfig, Tick};
use std::path::PathBuf;

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

pub fn run(args: Args) -> Result<()> {
    let setups = compare::plan(
        !args.no_baseline,
        &args.fixed,
        &args.policies,
        args.eviction,
    )?;
    if setups.is_empty() {
        bail!("nothing to compare: give --policy or --fixed (or drop --no-baseline)");
    }
    let (path, format, options) = (
        &args.input.trace,
        args.input.format()?,
        args.input.options()?,
    );
    let open = || trace::open(path, format, &options);
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
    let config = ReplayConfig {
        algorithm: args.eviction,
        backend: args.backend,
        tick,
        record_ticks: charts,
        ..ReplayConfig::default()
    };
    let reports = compare::replay_all(&setups, jobs, &config, path, open, |setup, outcome| {
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
            .map(|(label, r)| json!({"label": label, "result": r}))
            .collect();
        let value = json!({"trace": path.display().to_string(), "runs": runs});
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        compare::print_table(&reports);
        if let Some(out) = &args.report {
            println!("report: {}", out.display());
        }
    }
    Ok(())
}
