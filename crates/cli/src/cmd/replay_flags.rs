//! The flags of `replay` that come in groups: a replay against a running server, a simulated
//! cluster, and the restart with its warm-up. Flattened into `replay_args::Args`; turned into the library's types here.

use super::trace_args::TraceArgs;
use anyhow::Result;
use sim::nodes::Placement;
use sim::policy_driver::PolicyController;
use sim::{RestartAt, WarmupFlags, WarmupSpec};
use std::path::PathBuf;

/// The flags of a replay against a running server (see docs/replay.md).
#[derive(clap::Args)]
pub struct LiveArgs {
    /// Replay against a running `mantle serve` at HOST:PORT (or redis://HOST:PORT) instead of
    /// simulating: real time scaled by --speed, figures from the server's counters.
    #[arg(
        long,
        value_name = "ADDR",
        conflicts_with_all = [
            "cache_size", "max_cache_size", "eviction", "backend", "policy", "params",
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
    /// With --server: the run fails (exit 1, one line naming the count and the first error)
    /// when more than this percentage of its requests failed; default 1.
    #[arg(long, value_name = "PERCENT")]
    pub max_errors: Option<f64>,
}

/// The restart and warm-up flags (see docs/warmup.md).
#[derive(clap::Args)]
pub struct WarmupArgs {
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
    #[arg(long, value_name = "N", default_value_t = cache::warmup::DEFAULT_SEED, requires = "warmup")]
    pub warmup_seed: u64,
}

impl WarmupArgs {
    pub fn flags(&self) -> WarmupFlags {
        WarmupFlags {
            restart_at: self.restart_at,
            spec: self.warmup,
            region: self.region.clone(),
            window: self.warmup_window,
            monitor_limit: self.monitor_limit,
            seed: self.warmup_seed,
        }
    }
}

impl LiveArgs {
    /// The --server flags given without --server: checked by hand rather than with clap's
    /// `requires`, which gives way to --server's conflicts.
    pub fn reject_without_server(&self) -> Result<()> {
        for (given, flag) in [
            (self.speed.is_some(), "--speed"),
            (self.password.is_some(), "--password"),
            (self.max_requests.is_some(), "--max-requests"),
            (self.max_errors.is_some(), "--max-errors"),
        ] {
            if given {
                anyhow::bail!("{flag} goes with --server ADDR (a replay against a running server)");
            }
        }
        Ok(())
    }

    /// `--server`: replays against a running `mantle serve` and prints its report.
    /// With --tick, in lock step with a `--tick manual` server; --metrics-out then writes its
    /// ticks.
    pub fn run(
        &self,
        input: &TraceArgs,
        json: bool,
        quiet: bool,
        ticks: Option<sim::Tick>,
        metrics_out: Option<&std::path::Path>,
    ) -> Result<()> {
        if metrics_out.is_some() && ticks.is_none() {
            anyhow::bail!(
                "--metrics-out goes with --server only together with --tick (a lock-step replay)"
            );
        }
        let options = loadgen::LiveOptions {
            server: self.server.clone().unwrap_or_default(),
            password: self.password.clone(),
            speed: self.speed.unwrap_or(1.0),
            max_requests: self.max_requests,
            progress: !quiet,
            ticks,
        };
        let max_errors = self.max_errors.unwrap_or(1.0);
        if !(0.0..=100.0).contains(&max_errors) {
            anyhow::bail!("--max-errors takes a percentage from 0 to 100, not {max_errors}");
        }
        let reader = trace::open(&input.trace, input.format()?, &input.options()?)?;
        let report = loadgen::replay(&options, reader)?;
        let (errors, requests, first) = report.failures();
        if errors as f64 > requests as f64 * max_errors / 100.0 {
            anyhow::bail!(
                "replay --server: {errors} of {requests} requests failed ({:.1}%, above --max-errors {max_errors}%); the first: {}",
                100.0 * errors as f64 / requests.max(1) as f64,
                first.unwrap_or("-")
            );
        }
        if let Some(path) = metrics_out {
            sim::metrics_csv::write_file(path, report.ticks())?;
        }
        let trace = input.trace.display().to_string();
        let format = input.format_name();
        if json {
            let value = report.to_json(&trace, &format);
            println!("{}", serde_json::to_string_pretty(&value)?);
        } else {
            loadgen::print_summary(&report, &trace, &format);
        }
        Ok(())
    }
}

/// The policy flags of a replay (see docs/policy-language.md).
#[derive(clap::Args)]
pub struct PolicyArgs {
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
    #[arg(long, value_name = "BYTES", default_value = "64MiB", value_parser = units::parse_bytes, requires = "policy")]
    pub policy_memory: u64,
    /// Most access events kept for the policy's timeseries().
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1_000_000,
        requires = "policy"
    )]
    pub timeseries: usize,
}

impl PolicyArgs {
    /// `--policy-instructions` and `--policy-memory` as the engine's limits.
    pub fn limits(&self) -> policy::Limits {
        policy::Limits {
            instructions: self.policy_instructions,
            memory_bytes: usize::try_from(self.policy_memory).unwrap_or(usize::MAX),
            ..policy::Limits::default()
        }
    }

    /// The policy's per-request hooks, if `--policy` was given and defines any.
    pub fn hooks(&self) -> Result<Option<sim::HookSource>> {
        let Some(path) = &self.policy else {
            return Ok(None);
        };
        let params = self.params.iter().cloned().collect();
        sim::policy_driver::hook_source(path, params, self.limits())
            .map_err(|e| anyhow::anyhow!("--policy {}: {e}", path.display()))
    }

    /// The policy's controller, if `--policy` was given.
    pub fn controller(&self) -> Result<Option<PolicyController>> {
        let Some(path) = &self.policy else {
            return Ok(None);
        };
        let params = self.params.iter().cloned().collect();
        PolicyController::from_file(path, params, self.limits(), true)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("--policy {}: {e}", path.display()))
    }
}

/// Shadows of candidate policies and the switch policy (see docs/adaptive.md).
#[derive(clap::Args)]
pub struct ShadowArgs {
    /// A candidate policy run in shadow on a metadata-only cache fed the same requests;
    /// parameters may follow (sample=R samples that share of the key space, label=NAME
    /// names the candidate). Repeatable; the order is the switch's preference order.
    #[arg(long = "shadow", value_name = "FILE.lua[:K=V,...]")]
    pub shadows: Vec<String>,
    /// Switch policy: at every tick picks the candidate that manages the real cache (the
    /// first --shadow at the start).
    #[arg(
        long,
        value_name = "FILE.lua",
        requires = "shadows",
        conflicts_with = "policy"
    )]
    pub switch: Option<PathBuf>,
    /// Switch policy parameter, visible as params.K; repeatable.
    #[arg(long = "switch-param", value_name = "K=V", value_parser = policy::parse_param, requires = "switch")]
    pub switch_params: Vec<(String, policy::Scalar)>,
    /// Ticks in the sliding window of the figures the switch sees.
    #[arg(long, value_name = "TICKS", default_value_t = 10, requires = "shadows")]
    pub window: usize,
    /// Most entries one shadow's cache may hold (its memory cap).
    #[arg(long, value_name = "N", default_value_t = 4 << 20, requires = "shadows")]
    pub shadow_max_objects: u64,
    /// Write every candidate's window figures at every tick to this CSV file.
    #[arg(long, value_name = "FILE.csv", requires = "shadows")]
    pub shadow_out: Option<PathBuf>,
}

impl ShadowArgs {
    /// The controller hosting the shadows (and the switch, or `--policy`), if any was asked.
    pub fn controller(
        &self,
        policy: &PolicyArgs,
        config: &sim::ReplayConfig,
        echo_logs: bool,
    ) -> Result<Option<adapt::Adaptive>> {
        if self.shadows.is_empty() {
            return Ok(None);
        }
        let specs = self
            .shadows
            .iter()
            .map(|s| adapt::ShadowSpec::parse(s).map_err(|e| anyhow::anyhow!("--shadow {s}: {e}")))
            .collect::<Result<Vec<_>>>()?;
        let switch = self
            .switch
            .as_deref()
            .map(|path| {
                let params = self.switch_params.iter().cloned().collect();
                policy::switch::SwitchPolicy::load_file(path, &params, policy.limits())
                    .map_err(|e| anyhow::anyhow!("--switch {}: {e}", path.display()))
            })
            .transpose()?;
        let fixed = policy
            .policy
            .clone()
            .map(|p| (p, policy.params.iter().cloned().collect()));
        let limits = adapt::shadow::ShadowLimits {
            algorithm: config.algorithm,
            capacity: config.capacity,
            max_objects: self.shadow_max_objects,
            timeseries_limit: config.timeseries_limit,
            window: self.window,
            policy: policy.limits(),
        };
        let mut a = adapt::Adaptive::new(specs, switch, fixed, limits, echo_logs)
            .map_err(|e| anyhow::anyhow!(e))?;
        a.record_rows(self.shadow_out.is_some());
        Ok(Some(a))
    }

    /// Writes `--shadow-out` and returns the report to merge into the replay's.
    pub fn finish(&self, a: &mut adapt::Adaptive) -> Result<adapt::AdaptiveReport> {
        if let Some(out) = &self.shadow_out {
            sim::metrics_csv::write_shadow_file(out, a.rows())?;
        }
        Ok(a.report())
    }
}

/// The flags of a simulated cluster.
#[derive(clap::Args)]
pub struct NodesArgs {
    /// Simulate a cluster of N nodes (1 to 256): keys hash to 16,384 slots spread evenly,
    /// --cache-size is each node's cache, and the policy balances load between nodes
    /// (see docs/balancing.md).
    #[arg(
        long,
        value_name = "N",
        conflicts_with_all = ["restart_at", "warmup", "metrics_out", "report"]
    )]
    pub nodes: Option<usize>,
    /// With --nodes: how keys map to slots. hash: CRC16 of the key text, as a live cluster;
    /// range: the trace's keys in numeric order cut into slots of equal key counts, so each
    /// node owns contiguous key ranges (simulator only).
    #[arg(long, value_name = "hash|range", default_value = "hash", value_parser = parse_placement)]
    pub placement: Placement,
    /// With --nodes: bytes per second of trace time a slot migration copies (with a unit:
    /// 100MiB; unlimited: a move is done in the tick that decides it).
    #[arg(long, value_name = "RATE", default_value = "100MiB", value_parser = parse_rate)]
    pub migration_rate: f64,
    /// With --nodes: write per-tick node loads and imbalance to this CSV file.
    #[arg(long, value_name = "FILE.csv", requires = "nodes")]
    pub loads_out: Option<std::path::PathBuf>,
}

fn parse_placement(text: &str) -> Result<Placement, String> {
    match text {
        "hash" => Ok(Placement::Hash),
        "range" => Ok(Placement::Range),
        _ => Err(format!(
            "unknown placement '{text}': expected hash or range"
        )),
    }
}

fn parse_rate(text: &str) -> Result<f64, String> {
    if text == "unlimited" {
        return Ok(f64::INFINITY);
    }
    match units::parse_bytes(text)? {
        0 => Err("must be more than 0 bytes per second (or unlimited)".into()),
        n => Ok(n as f64),
    }
}
