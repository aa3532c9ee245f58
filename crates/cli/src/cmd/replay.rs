//! `mantle replay`: replays a trace through a cache (optionally managed by a policy) and
//! prints the report.

use super::progress::{ReplayProgress, Show};
use super::replay_args::Args;
use super::ticks;
use anyhow::{bail, Result};
use sim::summary::ReplayInput;
use sim::{ReplayConfig, WarmupConfig};

pub fn run(args: Args) -> Result<()> {
    if !args.shadow.shadows.is_empty()
        && (args.live.server.is_some() || args.cluster.nodes.is_some())
    {
        bail!("--shadow runs in a simulated replay only (not with --server or --nodes)");
    }
    if let Some(nodes) = args.cluster.nodes {
        return super::nodes::run(&args, nodes);
    }
    if args.live.server.is_some() {
        return args.live.run(
            &args.input,
            args.json,
            args.quiet,
            args.tick,
            args.metrics_out.as_deref(),
        );
    }
    args.live.reject_without_server()?;
    if args.eviction.is_offline() && (args.classes.is_some() || args.warmup.restart_at.is_some()) {
        bail!(
            "--eviction {} is offline (it needs each request's next access) and runs without --classes or --restart-at/--warmup",
            args.eviction
        );
    }
    let Some(cache_size) = args.cache_size else {
        bail!("--cache-size is required (or --server ADDR to replay against a running server)");
    };
    let (path, format, options) = (
        &args.input.trace,
        args.input.format()?,
        args.input.options()?,
    );
    let open = || trace::open(path, format, &options);
    let (capacity, working_set) = sim::resolve_capacity(cache_size, open, path)?;
    let max_capacity =
        match args.max_cache_size {
            Some(max) => sim::resolve_capacity(max, open, path)
                .map_err(|e| {
                    anyhow::anyhow!(format!("{e:#}").replace("--cache-size", "--max-cache-size"))
                })?
                .0,
            None => cache::Capacity::default(),
        };
    let classes = (args
        .classes
        .as_deref()
        .map(cache::classes::ClassSet::from_file)
        .transpose())
    .map_err(|e| anyhow::anyhow!("--classes {e}"))?;
    let warmup_flags = args.warmup.flags();
    let block_size = args.input.block_size;
    let warmup = WarmupConfig::for_trace(&warmup_flags, path, format, block_size, open)?;
    let mut controller = match args.shadow.shadows.is_empty() {
        true => args.policy.controller()?,
        false => None,
    };
    let mut reader = open()?;
    let (tick, notice) = sim::ticks::resolve(
        args.tick,
        reader.has_timestamps(),
        path,
        sim::ticks::CLI_FLAG,
    )?;
    let record_ticks = args.metrics_out.is_some() || args.report.is_some();
    let managed = controller.is_some() || !args.shadow.shadows.is_empty();
    if let (Some(notice), true, false) = (notice, managed || record_ticks, args.quiet) {
        eprintln!("{notice}");
    }
    let future = match args.eviction.is_offline() {
        true => Some(next_accesses(path, open)?),
        false => None,
    };
    let hooks = args.policy.hooks()?;
    if hooks.is_some() && classes.is_some() {
        anyhow::bail!(
            "--policy {}: per-request hooks run without classes; drop --classes",
            args.policy
                .policy
                .as_deref()
                .unwrap_or(std::path::Path::new(""))
                .display()
        );
    }
    let config = ReplayConfig {
        algorithm: args.eviction,
        capacity,
        backend: args.backend,
        tick,
        record_ticks,
        timeseries_limit: args.policy.timeseries,
        classes,
        warmup,
        max_capacity,
        admission: args.admission.clone(),
        future,
        hooks,
        objects_bound: reader.requests_bound(),
    };
    let label = format!("replay {}", super::progress::file_label(path));
    let show = Show::from_flags(args.quiet, args.progress);
    let mut progress = ReplayProgress::new(show, &label, reader.progress());
    let mut adaptive = args.shadow.controller(&args.policy, &config, !args.quiet)?;
    let controller = match adaptive.as_mut() {
        Some(a) => Some(a as &mut dyn sim::Controller),
        None => controller.as_mut().map(|c| c as &mut dyn sim::Controller),
    };
    let report = sim::replay_batches(&config, controller, |batch| {
        let filled = reader.next_batch(batch, sim::BATCH);
        progress.requests(batch.len() as u64, || reader.progress());
        filled
    })
    .map_err(|e| ticks::replay_error(e, path))?;
    progress.finish(reader.progress());
    let adaptive = adaptive
        .as_mut()
        .map(|a| args.shadow.finish(a))
        .transpose()?;
    if let (Some(failure), false) = (&report.hook_failure, args.quiet) {
        eprintln!("policy hooks: {failure}; the cache fell back to LRU at that request");
    }
    if let (Some(warning), false) = (ticks::never_ran(&report, tick), args.quiet) {
        eprintln!("{warning}");
    }
    if let Some(out) = &args.metrics_out {
        sim::metrics_csv::write_file(out, &report.ticks)?;
    }
    if let Some(out) = &args.report {
        let name = match args.policy.policy.as_ref().and_then(|p| p.file_name()) {
            Some(file) => file.to_string_lossy().into_owned(),
            None => format!("{} {}", args.eviction, cache_size),
        };
        let extra = adaptive.as_ref().map(|a| a.describe());
        sim::page::write_replay_report(out, path, &name, &report, extra.as_deref())?;
        if !args.json {
            eprintln!("report written to {}", out.display());
        }
    }
    let input = ReplayInput {
        trace: path.display().to_string(),
        format: args.input.format_name(),
        algorithm: args.eviction.name().to_string(),
        cache_size: cache_size.to_string(),
        capacity: sim::ceiling::clamp(capacity, max_capacity).0,
        working_set,
    };
    if args.json {
        let mut value = sim::summary::to_json(&report, &input);
        if let (Some(a), serde_json::Value::Object(map)) = (&adaptive, &mut value) {
            map.insert("adaptive".into(), serde_json::to_value(a)?);
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        sim::summary::print_summary(&report, &input);
        if let Some(a) = &adaptive {
            a.print();
        }
    }
    Ok(())
}

/// The pre-pass of an offline algorithm: each request's next access time, from one read of
/// the whole trace (16 bytes per request while it runs, 8 kept; `cache::future`).
pub(super) fn next_accesses(
    path: &std::path::Path,
    open: impl Fn() -> Result<Box<dyn trace::TraceReader>, trace::TraceError>,
) -> Result<std::sync::Arc<[u64]>> {
    let mut reader = open().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut keys = Vec::new();
    while let Some(req) = reader
        .next_request()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
    {
        keys.push(req.key);
    }
    Ok(cache::future::next_accesses(keys).into())
}
