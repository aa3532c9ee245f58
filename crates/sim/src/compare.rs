//! `mantle compare`: one trace replayed under several cache-management setups (no
//! management, fixed-size caches, Lua policies) in parallel across cores, and the comparison
//! table, JSON and charts of the results.

use crate::policy_driver::PolicyController;
use crate::{ReplayConfig, ReplayError, ReplayReport};
use anyhow::{anyhow, bail, Context, Result};
use cache::{Algorithm, Capacity};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// One setup to replay.
pub struct Setup {
    pub label: String,
    pub capacity: Capacity,
    pub policy: Option<(PathBuf, policy::Params)>,
}

/// The setups `--no-baseline`, `--fixed N` and `--policy FILE.lua[:k=v,...]` ask for, in that
/// order.
pub fn plan(
    baseline: bool,
    fixed: &[u64],
    policies: &[String],
    eviction: Algorithm,
) -> Result<Vec<Setup>> {
    let mut runs = Vec::new();
    if baseline {
        runs.push(Setup {
            label: "no management".to_string(),
            capacity: Capacity::default(),
            policy: None,
        });
    }
    for &n in fixed {
        if n == 0 {
            bail!("--fixed must be > 0");
        }
        runs.push(Setup {
            label: format!("{eviction} {n}"),
            capacity: Capacity::objects(n),
            policy: None,
        });
    }
    for spec in policies {
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
        runs.push(Setup {
            label,
            capacity: Capacity::default(),
            policy: Some((path, params)),
        });
    }
    Ok(runs)
}

/// Loads every setup's policy once, so a broken one is reported before any replay runs.
pub fn check_policies(setups: &[Setup]) -> Result<()> {
    for setup in setups {
        if let Some((path, params)) = &setup.policy {
            PolicyController::from_file(path, params.clone(), policy::Limits::default(), false)
                .map_err(|e| anyhow!("--policy {}: {e}", path.display()))?;
        }
    }
    Ok(())
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

/// Replays every setup with `config` (its capacity replaced by the setup's), `jobs` at a
/// time, each on its own reader from `open`; `done` hears of each run as it ends. The reports
/// come back in the setups' order; the first failure (named by its setup) is the error.
pub fn replay_all(
    setups: &[Setup],
    jobs: usize,
    config: &ReplayConfig,
    trace_path: &Path,
    open: impl Fn() -> Result<Box<dyn trace::TraceReader>, trace::TraceError> + Sync,
    done: impl Fn(&Setup, &Result<ReplayReport>) + Sync,
) -> Result<Vec<(String, ReplayReport)>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<ReplayReport>>>> =
        Mutex::new((0..setups.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, setups.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(setup) = setups.get(i) else { break };
                let outcome = replay_one(setup, config, trace_path, &open);
                done(setup, &outcome);
                results.lock().expect("no replay thread panics")[i] = Some(outcome);
            });
        }
    });
    let mut reports = Vec::new();
    for (setup, result) in setups
        .iter()
        .zip(results.into_inner().expect("threads joined"))
    {
        let report = result
            .expect("every run was taken by a thread")
            .with_context(|| format!("replaying {}", setup.label))?;
        reports.push((setup.label.clone(), report));
    }
    Ok(reports)
}

fn replay_one(
    setup: &Setup,
    config: &ReplayConfig,
    trace_path: &Path,
    open: &dyn Fn() -> Result<Box<dyn trace::TraceReader>, trace::TraceError>,
) -> Result<ReplayReport> {
    let config = ReplayConfig {
        capacity: setup.capacity,
        ..config.clone()
    };
    let mut controller = match &setup.policy {
        Some((path, params)) => Some(
            PolicyController::from_file(path, params.clone(), policy::Limits::default(), false)
                .map_err(|e| anyhow!("{}: {e}", path.display()))?,
        ),
        None => None,
    };
    let mut reader = trace::Batched::new(open()?);
    crate::replay(
        &config,
        controller.as_mut().map(|c| c as &mut dyn crate::Controller),
        || reader.next_request(),
    )
    .map_err(|e| match e {
        // A reader's error already names the file and line.
        ReplayError::Source(e) => e.into(),
        clock => anyhow!("{}: {clock}", trace_path.display()),
    })
}

/// The report's charts as separate SVG files (for docs and slides).
pub fn write_charts(dir: &Path, runs: &[report::PolicyRun]) -> Result<()> {
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

/// The human table, one row per setup.
pub fn print_table(reports: &[(String, ReplayReport)]) {
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
