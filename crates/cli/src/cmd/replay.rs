//! `mantle replay`: replays a trace through a cache (optionally managed by a policy) and
//! prints the report.

use super::progress::{ReplayProgress, Show};
use super::ticks;
use super::trace_args::TraceArgs;
use anyhow::{bail, Result};
use cache::Algorithm;
use sim::summary::ReplayInput;
use sim::{BackendSpec, CacheSize, ReplayConfig, Tick, WarmupConfig};
use std::path::PathBuf;

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
    pub live: Box<super::replay_flags::LiveArgs>,
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
    /// --policy and the flags that go with it.
    #[command(flatten)]
    pub policy: super::replay_flags::PolicyArgs,
    /// --shadow, --switch and the flags that go with them.
    #[command(flatten)]
    pub shadow: super::replay_flags::ShadowArgs,
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
    /// --restart-at and the warm-up flags that go with it.
    #[command(flatten)]
    pub warmup: super::replay_flags::WarmupArgs,
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
    let config = ReplayConfig {
        algorithm: args.eviction,
        capacity,
        backend: args.backend,
        tick,
        record_ticks,
        timeseries_limit: args.policy.timeseries,
        classes,
        warmup,
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
        algorithm: format!("{:?}", args.eviction).to_lowercase(),
        cache_size: cache_size.to_string(),
        capacity,
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
