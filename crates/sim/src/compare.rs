//! `mantle compare`: one trace replayed under several cache-management setups (no
//! management, fixed-size caches of any algorithm, Lua policies, each optionally under a
//! ceiling) in parallel across cores, and the comparison table, JSON and charts of the results.

use crate::policy_driver::PolicyController;
use crate::{ReplayConfig, ReplayError, ReplayReport, WorkingSet};
use anyhow::{anyhow, bail, Context, Result};
use cache::{Algorithm, Capacity};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use units::CacheSize;

/// One setup to replay.
pub struct Setup {
    pub label: String,
    pub algorithm: Algorithm,
    pub capacity: Capacity,
    /// The ceiling a policy cannot lift (`:max=` or `--max-cache-size`); unlimited = none.
    pub max_capacity: Capacity,
    pub policy: Option<(PathBuf, policy::Params)>,
}

/// What the command line asks to compare, before percentages are resolved.
pub struct Plan<'a> {
    /// The unmanaged, unlimited cache first (not `--no-baseline`).
    pub baseline: bool,
    /// `--fixed SIZE`: the `eviction` algorithm at each size, without a policy.
    pub fixed: &'a [CacheSize],
    /// `--setup ALG:SIZE[:max=SIZE][:policy=FILE.lua[:K=V,...]]`.
    pub setups: &'a [String],
    /// `--policy FILE.lua[:K=V,...]`: the policy on an unlimited `eviction` cache.
    pub policies: &'a [String],
    pub eviction: Algorithm,
    /// `--max-cache-size`: the ceiling of every setup but the baseline.
    pub max_cache_size: Option<CacheSize>,
}

/// One `--setup`, parsed.
struct SetupSpec {
    algorithm: Algorithm,
    size: CacheSize,
    max: Option<CacheSize>,
    policy: Option<(PathBuf, policy::Params)>,
}

/// `ALG:SIZE[:max=SIZE][:policy=FILE.lua[:K=V,...]]`; the error names the bad part.
fn parse_setup(spec: &str) -> Result<SetupSpec, String> {
    let (algorithm, rest) = spec
        .split_once(':')
        .ok_or("expected ALG:SIZE[:max=SIZE][:policy=FILE.lua[:K=V,...]], e.g. arc:10%")?;
    let algorithm = algorithm.parse::<Algorithm>()?;
    let (size, mut rest) = match rest.split_once(':') {
        Some((size, rest)) => (size, Some(rest)),
        None => (rest, None),
    };
    let size = size.parse::<CacheSize>()?;
    let mut max = None;
    if let Some(r) = rest.and_then(|r| r.strip_prefix("max=")) {
        let (text, after) = match r.split_once(':') {
            Some((text, after)) => (text, Some(after)),
            None => (r, None),
        };
        max = Some(
            text.parse::<CacheSize>()
                .map_err(|e| format!("max={text}: {e}"))?,
        );
        rest = after;
    }
    let policy = match rest {
        None => None,
        Some(r) => match r.strip_prefix("policy=") {
            Some(p) if !p.is_empty() => {
                Some(parse_policy_spec(p).map_err(|e| format!("policy={p}: {e}"))?)
            }
            _ => {
                return Err(format!(
                    "unexpected '{r}' after the size: expected max=SIZE or policy=FILE.lua"
                ))
            }
        },
    };
    Ok(SetupSpec {
        algorithm,
        size,
        max,
        policy,
    })
}

/// A policy's label: the file name with its parameters.
fn policy_label(path: &Path, params: &policy::Params) -> String {
    let stem = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    if params.is_empty() {
        stem
    } else {
        let kv: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{stem} {}", kv.join(","))
    }
}

/// The setups `plan` asks for: the baseline, `--fixed`, `--setup` and `--policy`, in that
/// order. Every spec is parsed before `working_set` is asked for (once, and only when a
/// percentage needs it), so a typo fails before a pass over the trace.
pub fn plan(
    plan: &Plan<'_>,
    working_set: impl FnOnce() -> Result<WorkingSet>,
) -> Result<Vec<Setup>> {
    let mut specs = Vec::new();
    for &size in plan.fixed {
        if size == CacheSize::Unlimited {
            bail!(
                "--fixed unlimited: a fixed cache needs a size (the baseline is the unlimited one)"
            );
        }
        specs.push((
            format!("{} {size}", plan.eviction),
            SetupSpec {
                algorithm: plan.eviction,
                size,
                max: None,
                policy: None,
            },
        ));
    }
    for text in plan.setups {
        let spec = parse_setup(text).map_err(|e| anyhow!("--setup {text}: {e}"))?;
        let mut label = format!("{} {}", spec.algorithm, spec.size);
        if let Some(max) = spec.max {
            label.push_str(&format!(" max {max}"));
        }
        if let Some((path, params)) = &spec.policy {
            label.push_str(&format!(" {}", policy_label(path, params)));
        }
        specs.push((label, spec));
    }
    for text in plan.policies {
        let (path, params) =
            parse_policy_spec(text).map_err(|e| anyhow!("--policy {text}: {e}"))?;
        specs.push((
            policy_label(&path, &params),
            SetupSpec {
                algorithm: plan.eviction,
                size: CacheSize::Unlimited,
                max: None,
                policy: Some((path, params)),
            },
        ));
    }
    let needs_ws = specs
        .iter()
        .flat_map(|(_, s)| [Some(s.size), s.max])
        .chain([plan.max_cache_size])
        .any(|s| matches!(s, Some(CacheSize::Percent(_))));
    let ws = if needs_ws {
        working_set()?
    } else {
        WorkingSet::default()
    };
    let global_max = plan
        .max_cache_size
        .map_or(Capacity::default(), |m| ws.capacity_of(m));
    let mut runs = Vec::new();
    if plan.baseline {
        runs.push(Setup {
            label: "no management".to_string(),
            algorithm: plan.eviction,
            capacity: Capacity::default(),
            max_capacity: Capacity::default(),
            policy: None,
        });
    }
    for (label, spec) in specs {
        runs.push(Setup {
            label,
            algorithm: spec.algorithm,
            capacity: ws.capacity_of(spec.size),
            max_capacity: spec.max.map_or(global_max, |m| ws.capacity_of(m)),
            policy: spec.policy,
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
    let (mut controller, hooks) = match &setup.policy {
        Some((path, params)) => {
            let limits = policy::Limits::default();
            let loaded = PolicyController::from_file(path, params.clone(), limits, false)
                .and_then(|c| Ok((c, policy::hook_source(path, params.clone(), limits)?)));
            let (controller, hooks) = loaded.map_err(|e| anyhow!("{}: {e}", path.display()))?;
            (Some(controller), hooks)
        }
        None => (None, None),
    };
    if hooks.is_some() && config.classes.is_some() {
        bail!("{}: per-request hooks run without classes", setup.label);
    }
    // A policy's per-request hooks decide admission and victims, as in `mantle replay`.
    let mut reader = trace::Batched::new(open()?);
    let config = ReplayConfig {
        algorithm: setup.algorithm,
        capacity: setup.capacity,
        max_capacity: setup.max_capacity,
        hooks,
        objects_bound: reader.requests_bound(),
        ..config.clone()
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> Result<WorkingSet> {
        Ok(WorkingSet {
            objects: 1000,
            bytes: 64_000,
            has_sizes: false,
        })
    }

    fn planned(setups: &[&str], fixed: &[CacheSize]) -> Result<Vec<Setup>> {
        let setups: Vec<String> = setups.iter().map(|s| s.to_string()).collect();
        plan(
            &Plan {
                baseline: false,
                fixed,
                setups: &setups,
                policies: &[],
                eviction: Algorithm::Lru,
                max_cache_size: None,
            },
            ws,
        )
    }

    #[test]
    fn setups_take_any_algorithm_and_any_size_form() {
        let runs = planned(
            &[
                "s3fifo:10%",
                "fifo:64KiB",
                "clock:500:max=20%",
                "sieve:50:policy=p.lua:n=3",
            ],
            &[CacheSize::Percent(5.0)],
        )
        .unwrap();
        let got: Vec<(&str, Algorithm, Capacity, Capacity)> = runs
            .iter()
            .map(|r| (r.label.as_str(), r.algorithm, r.capacity, r.max_capacity))
            .collect();
        let none = Capacity::default();
        assert_eq!(
            got,
            [
                ("lru 5%", Algorithm::Lru, Capacity::objects(50), none),
                (
                    "s3fifo 10%",
                    Algorithm::S3Fifo,
                    Capacity::objects(100),
                    none
                ),
                (
                    "fifo 65536B",
                    Algorithm::Fifo,
                    Capacity::bytes(65_536),
                    none
                ),
                (
                    "clock 500 max 20%",
                    Algorithm::Clock,
                    Capacity::objects(500),
                    Capacity::objects(200)
                ),
                (
                    "sieve 50 p.lua n=3",
                    Algorithm::Sieve,
                    Capacity::objects(50),
                    none
                ),
            ]
        );
        assert_eq!(runs[4].policy.as_ref().unwrap().0, PathBuf::from("p.lua"));
    }

    #[test]
    fn errors_name_the_flag_and_the_bad_part() {
        for (spec, part) in [
            ("arc", "expected ALG:SIZE"),
            ("nosuch:10%", "'nosuch'"),
            ("lru:10x", "'10x'"),
            ("lru:10:max=abc", "max=abc"),
            ("lru:10:polcy=p.lua", "'polcy=p.lua'"),
            ("lru:10:policy=", "'policy='"),
        ] {
            let err = planned(&[spec], &[]).err().expect(spec).to_string();
            assert!(err.starts_with(&format!("--setup {spec}: ")), "{err}");
            assert!(err.contains(part), "{spec}: {err}");
        }
        let err = planned(&[], &[CacheSize::Unlimited])
            .err()
            .unwrap()
            .to_string();
        assert!(err.starts_with("--fixed unlimited"), "{err}");
    }

    #[test]
    fn the_working_set_is_read_only_for_a_percentage() {
        let setups = vec!["lru:100".to_string()];
        let p = Plan {
            baseline: true,
            fixed: &[CacheSize::Objects(10)],
            setups: &setups,
            policies: &[],
            eviction: Algorithm::Fifo,
            max_cache_size: Some(CacheSize::Bytes(4096)),
        };
        let runs = plan(&p, || panic!("no percentage, no pass over the trace")).unwrap();
        assert_eq!(runs.len(), 3);
        // The baseline stays unlimited; the others are under the ceiling.
        assert_eq!(runs[0].max_capacity, Capacity::default());
        assert_eq!(runs[1].max_capacity, Capacity::bytes(4096));
        assert_eq!(runs[1].algorithm, Algorithm::Fifo);
    }
}
