//! `mantle replay --nodes N`: the trace across N simulated cluster nodes, the policy
//! balancing them (see `sim::nodes` for the model).

use super::replay_args::Args;
use anyhow::{bail, Context, Result};
use sim::nodes::{
    replay_nodes, Balancer, ClusterReport, KeyRanges, NodesConfig, Placement, MAX_NODES,
};

pub fn run(args: &Args, nodes: usize) -> Result<()> {
    if !(1..=MAX_NODES).contains(&nodes) {
        bail!("--nodes must be between 1 and {MAX_NODES}, got {nodes}");
    }
    if let Some(server) = &args.live.server {
        return run_live(args, server, nodes);
    }
    if args.max_cache_size.is_some() {
        anyhow::bail!(
            "--max-cache-size is not supported with --nodes (each node's cache is --cache-size)"
        );
    }
    let Some(cache_size) = args.cache_size else {
        bail!("--cache-size is required: each node's cache size");
    };
    let format = args.input.format()?;
    let options = args.input.options()?;
    let open = || trace::open(&args.input.trace, format, &options);
    let (capacity, _) = sim::resolve_capacity(cache_size, open, &args.input.trace)?;
    // Every node's cache is classed by the same rules, as `replay --classes` classes its one.
    let classes = (args
        .classes
        .as_deref()
        .map(cache::classes::ClassSet::from_file)
        .transpose())
    .map_err(|e| anyhow::anyhow!("--classes {e}"))?;
    let reader = open()?;
    let trace_clock = reader.has_timestamps();
    let (tick, notice) = sim::ticks::resolve(
        args.tick,
        reader.has_timestamps(),
        &args.input.trace,
        sim::ticks::CLI_FLAG,
    )?;
    if let (Some(notice), false) = (notice, args.quiet) {
        eprintln!("{notice}");
    }
    // Range placement cuts the key order at the trace's own keys: one pass to read them.
    let key_ranges = match args.cluster.placement {
        Placement::Hash => None,
        Placement::Range => {
            let mut reader = trace::Batched::new(open()?);
            let mut keys = Vec::new();
            let mut compact_at = 1 << 20;
            while let Some(r) = reader.next_request()? {
                keys.push(r.key);
                // Memory in distinct keys, not requests: a long trace repeats its keys.
                if keys.len() >= compact_at {
                    keys.sort_unstable();
                    keys.dedup();
                    compact_at = (keys.len() * 2).max(1 << 20);
                }
            }
            Some(std::sync::Arc::new(KeyRanges::from_keys(keys)))
        }
    };
    let config = NodesConfig {
        nodes,
        placement: args.cluster.placement,
        key_ranges,
        algorithm: args.eviction,
        capacity,
        tick,
        migration_rate: args.cluster.migration_rate,
        record_ticks: args.cluster.loads_out.is_some(),
        backend: args.backend,
        timeseries_limit: args.policy.timeseries,
        classes,
        trace_clock,
    };
    let mut balancer = match &args.policy.policy {
        Some(path) => {
            let params = args.policy.params.iter().cloned().collect();
            let limits = args.policy.limits();
            Some(
                Balancer::from_file(path, nodes, params, limits)
                    .map_err(|e| anyhow::anyhow!("--policy {}: {e}", path.display()))?,
            )
        }
        None => None,
    };
    let mut reader = trace::Batched::new(reader);
    let report = replay_nodes(&config, balancer.as_mut(), || reader.next_request())?;
    output(args, &report)
}

/// `--server ADDR --nodes N --tick T`: the trace against a live cluster in lock step
/// (`loadgen::replay_cluster`), reported as the simulation is.
fn run_live(args: &Args, server: &str, nodes: usize) -> Result<()> {
    let Some(tick) = args.tick else {
        bail!(
            "--server with --nodes replays in lock step with the cluster: give --tick (e.g. \
             --tick 1s) and start the nodes with --tick manual"
        );
    };
    if args.cluster.placement != Placement::Hash {
        bail!(
            "--placement range is for the simulator only: a live cluster hashes keys to slots \
             (drop --placement or --server)"
        );
    }
    if args.live.speed.is_some() || args.live.max_requests.is_some() {
        bail!("--speed and --max-requests do not apply to a lock-step cluster replay (--nodes)");
    }
    let format = args.input.format()?;
    let options = args.input.options()?;
    let reader = trace::open(&args.input.trace, format, &options)?;
    let trace_clock = reader.has_timestamps();
    let (tick, _) = sim::ticks::resolve(
        Some(tick),
        reader.has_timestamps(),
        &args.input.trace,
        sim::ticks::CLI_FLAG,
    )?;
    let config = NodesConfig {
        nodes,
        placement: args.cluster.placement,
        tick,
        record_ticks: args.cluster.loads_out.is_some(),
        trace_clock,
        ..NodesConfig::default()
    };
    let mut reader = trace::Batched::new(reader);
    let report = loadgen::replay_cluster(server, args.live.password.as_deref(), &config, || {
        Ok(reader.next_request()?)
    })?;
    output(args, &report)
}

fn output(args: &Args, report: &ClusterReport) -> Result<()> {
    if let Some(path) = &args.cluster.loads_out {
        let file = std::fs::File::create(path)
            .with_context(|| format!("--loads-out: cannot create {}", path.display()))?;
        sim::nodes::write_loads_csv(std::io::BufWriter::new(file), report)
            .with_context(|| format!("--loads-out: writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print_summary(report);
    }
    Ok(())
}

fn print_summary(r: &ClusterReport) {
    println!(
        "{} requests over {} nodes, {} ticks, miss ratio {:.4}",
        r.requests, r.nodes, r.ticks, r.miss_ratio
    );
    println!(
        "imbalance (max/mean node load): mean {:.3}, peak {:.3}, settled {:.3}, {} ticks over 1.25",
        r.imbalance.mean, r.imbalance.peak, r.imbalance.settled, r.imbalance.ticks_over_1_25
    );
    println!(
        "migrations: {} done ({} slots, {} bytes), {} unfinished, at most {} moves of one slot",
        r.migrations.count,
        r.migrations.slots,
        r.migrations.bytes,
        r.migrations.unfinished,
        r.migrations.max_moves_of_a_slot
    );
    for n in &r.per_node {
        println!(
            "  node {}: {} requests, hit ratio {}, mean load {:.1}/s, peak {:.1}/s, {} slots",
            n.node,
            n.requests,
            n.hit_ratio.map_or("-".into(), |h| format!("{h:.4}")),
            n.mean_load,
            n.peak_load,
            n.final_slots
        );
    }
    if let Some(p) = &r.policy {
        println!(
            "policy {}: {} export decisions, {} errors",
            p.name, p.decisions, p.errors
        );
    }
}
