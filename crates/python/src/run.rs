//! `mantle.replay` and `mantle.compare`: one [`Setup`] (the Python form of `mantle replay`'s
//! flags) runs through `sim::replay` exactly as the CLI runs it, and comes back as the
//! `replay --json` object plus the per-tick series.
//!
//! The glue that turns flags into a `ReplayConfig` (capacity from a percentage, the restart
//! point, the default tick of a trace without timestamps) still lives in crates/cli; until it
//! moves into crates/sim it is mirrored here, and tests/test_replay.py holds the two to the
//! same numbers.

use crate::input::TraceInput;
use crate::{error, Signals, Stop};
use cache::{Algorithm, Capacity};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::{json, Value};
use sim::policy_driver::PolicyController;
use sim::{
    BackendSpec, CacheSize, Granularity, ReplayConfig, ReplayReport, RestartAt, Tick, TickRow,
    WarmupConfig, WarmupSpec, WorkingSet,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Requests per tick on a trace without timestamps when no tick is given (as the CLI).
const TIMELESS_TICK: u64 = 1000;

/// Everything one replay needs, checked and parsed while the GIL is held.
#[pyclass(module = "mantle._mantle", frozen)]
#[derive(Clone)]
pub struct Setup {
    label: Option<String>,
    cache_size: CacheSize,
    cache_size_text: String,
    algorithm: Algorithm,
    backend: BackendSpec,
    tick: Option<Tick>,
    policy: Option<PathBuf>,
    params: policy::Params,
    limits: policy::Limits,
    timeseries: usize,
    classes: Option<cache::classes::ClassSet>,
    restart_at: Option<RestartAt>,
    warmup: Option<WarmupSpec>,
    region: Option<String>,
    warmup_window: Option<u64>,
    monitor_limit: usize,
    warmup_seed: u64,
}

/// A size, count or duration as Python gives it: a str as written on the command line, or a
/// number, which reads as its decimal text (so `1000` and `"1000"` mean the same).
fn text_of(value: &Bound<'_, PyAny>, name: &str) -> PyResult<String> {
    if let Ok(s) = value.extract::<String>() {
        return Ok(s);
    }
    if value.is_instance_of::<pyo3::types::PyBool>() {
        return Err(error(format!(
            "{name}: expected a number or a string, got a bool"
        )));
    }
    if value.is_instance_of::<pyo3::types::PyInt>()
        || value.is_instance_of::<pyo3::types::PyFloat>()
    {
        return Ok(value.str()?.to_string());
    }
    Err(error(format!(
        "{name}: expected a number or a string, got {}",
        value.get_type().name()?
    )))
}

pub fn parse_cache_size(value: &Bound<'_, PyAny>) -> PyResult<(CacheSize, String)> {
    let text = text_of(value, "cache_size")?;
    let size = text
        .parse::<CacheSize>()
        .map_err(|e| error(format!("cache_size: {e}")))?;
    Ok((size, text))
}

pub fn parse_algorithm(text: &str) -> PyResult<Algorithm> {
    text.parse::<Algorithm>()
        .map_err(|e| error(format!("eviction: {e}")))
}

/// Policy parameters from a dict; values read as `--param K=V` would (numbers and
/// true/false converted, the rest strings).
fn parse_params(params: Option<&Bound<'_, PyDict>>) -> PyResult<policy::Params> {
    let mut out = policy::Params::new();
    for (k, v) in params.into_iter().flat_map(|d| d.iter()) {
        let key: String = k
            .extract()
            .map_err(|_| error("params: keys must be strings"))?;
        let value = if let Ok(b) = v.extract::<bool>() {
            b.to_string()
        } else {
            v.str()?.to_string()
        };
        let (key, scalar) = policy::parse_param(&format!("{key}={value}"))
            .map_err(|e| error(format!("params: {e}")))?;
        out.insert(key, scalar);
    }
    Ok(out)
}

#[pymethods]
impl Setup {
    #[new]
    #[pyo3(signature = (
        cache_size, *, eviction="lru", policy=None, params=None, tick=None, classes=None,
        restart_at=None, warmup=None, backend="lsm", label=None, policy_instructions=None,
        policy_memory=None, timeseries=1_000_000, region=None, warmup_window=None,
        monitor_limit=1 << 20, warmup_seed=1,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        cache_size: &Bound<'_, PyAny>,
        eviction: &str,
        policy: Option<PathBuf>,
        params: Option<&Bound<'_, PyDict>>,
        tick: Option<&Bound<'_, PyAny>>,
        classes: Option<PathBuf>,
        restart_at: Option<&Bound<'_, PyAny>>,
        warmup: Option<&str>,
        backend: &str,
        label: Option<String>,
        policy_instructions: Option<u64>,
        policy_memory: Option<&Bound<'_, PyAny>>,
        timeseries: usize,
        region: Option<String>,
        warmup_window: Option<u64>,
        monitor_limit: usize,
        warmup_seed: u64,
    ) -> PyResult<Setup> {
        let (cache_size, cache_size_text) = parse_cache_size(cache_size)?;
        let algorithm = parse_algorithm(eviction)?;
        let backend = backend
            .parse::<BackendSpec>()
            .map_err(|e| error(format!("backend: {e}")))?;
        let tick = match tick {
            None => None,
            Some(t) => {
                let mut text = text_of(t, "tick")?;
                // A bare number is seconds (the CLI wants a unit).
                if text.parse::<f64>().is_ok() {
                    text.push('s');
                }
                Some(
                    text.parse::<Tick>()
                        .map_err(|e| error(format!("tick: {e}")))?,
                )
            }
        };
        let params = parse_params(params)?;
        if !params.is_empty() && policy.is_none() {
            return Err(error("params: parameters go with a policy"));
        }
        let mut limits = policy::Limits::default();
        if let Some(n) = policy_instructions {
            limits.instructions = n;
        }
        if let Some(m) = policy_memory {
            let bytes = sim::parse_bytes(&text_of(m, "policy_memory")?)
                .map_err(|e| error(format!("policy_memory: {e}")))?;
            limits.memory_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        }
        let classes = classes
            .as_deref()
            .map(cache::classes::ClassSet::from_file)
            .transpose()
            .map_err(|e| error(format!("classes {e}")))?;
        let restart_at = restart_at
            .map(|r| {
                text_of(r, "restart_at")?
                    .parse::<RestartAt>()
                    .map_err(|e| error(format!("restart_at: {e}")))
            })
            .transpose()?;
        let warmup = warmup
            .map(|w| {
                w.parse::<WarmupSpec>()
                    .map_err(|e| error(format!("warmup: {e}")))
            })
            .transpose()?;
        if restart_at.is_none() && (warmup.is_some() || region.is_some() || warmup_window.is_some())
        {
            return Err(error(
                "warmup, region and warmup_window go with restart_at (the restart they measure)",
            ));
        }
        Ok(Setup {
            label,
            cache_size,
            cache_size_text,
            algorithm,
            backend,
            tick,
            policy,
            params,
            limits,
            timeseries,
            classes,
            restart_at,
            warmup,
            region,
            warmup_window,
            monitor_limit,
            warmup_seed,
        })
    }
}

impl Setup {
    /// The name of this setup in a comparison: the one given, else the policy file (with its
    /// parameters) or the eviction algorithm and size.
    fn label(&self) -> String {
        if let Some(l) = &self.label {
            return l.clone();
        }
        match &self.policy {
            Some(p) => {
                let stem = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| p.display().to_string());
                if self.params.is_empty() {
                    stem
                } else {
                    let kv: Vec<String> = self
                        .params
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    format!("{stem} {}", kv.join(","))
                }
            }
            None => format!("{} {}", self.algorithm, self.cache_size_text),
        }
    }
}

/// One replay's result: the `replay --json` object, the per-tick rows and the notices the
/// CLI would print on stderr.
struct Outcome {
    json: Value,
    ticks: Vec<TickRow>,
    notices: Vec<String>,
}

fn run_setup(setup: &Setup, input: &TraceInput) -> Result<Outcome, Stop> {
    let mut notices = Vec::new();
    let (capacity, working_set) = resolve_capacity(setup, input)?;
    let warmup = match setup.restart_at {
        Some(at) => Some(warmup_config(setup, at, input)?),
        None => None,
    };
    let mut controller = match &setup.policy {
        Some(path) => Some(
            PolicyController::from_file(path, setup.params.clone(), setup.limits, false)
                .map_err(|e| format!("policy {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let mut reader = trace::Batched::new(input.open()?);
    let tick = match (setup.tick, reader.has_timestamps()) {
        (Some(Tick::Seconds(secs)), false) => {
            return Err(Stop::Input(format!(
                "tick {secs}s: {} has no timestamps, so a time tick would never fire; use a request-count tick such as tick=\"{TIMELESS_TICK}ops\"",
                input.path.display()
            )))
        }
        (Some(t), _) => t,
        (None, true) => Tick::Seconds(1.0),
        (None, false) => {
            if controller.is_some() {
                notices.push(format!(
                    "mantle: {} has no timestamps; ticking every {TIMELESS_TICK} requests (choose with tick=\"Nops\")",
                    input.path.display()
                ));
            }
            Tick::Ops(TIMELESS_TICK)
        }
    };
    let config = ReplayConfig {
        algorithm: setup.algorithm,
        capacity,
        backend: setup.backend,
        tick,
        record_ticks: true,
        timeseries_limit: setup.timeseries,
        classes: setup.classes.clone(),
        warmup,
    };
    let mut signals = Signals::new();
    let mut report = sim::replay(
        &config,
        controller.as_mut().map(|c| c as &mut dyn sim::Controller),
        || {
            signals.poll()?;
            reader.next_request().map_err(Stop::from)
        },
    )
    .map_err(|e| match e {
        sim::ReplayError::Source(stop) => stop,
        clock => Stop::Input(format!(
            "{}: {}",
            input.path.display(),
            clock.map_source(|_| "")
        )),
    })?;
    if let Some(p) = &report.policy {
        if p.ticks == 0 && report.requests > 0 {
            notices.push(format!(
                "mantle: warning: policy {} never ran: the trace is shorter than one tick",
                p.name
            ));
        }
    }
    let ticks = std::mem::take(&mut report.ticks);
    Ok(Outcome {
        json: to_json(setup, input, &report, capacity, working_set),
        ticks,
        notices,
    })
}

/// The `replay --json` object: the report plus what was asked for.
fn to_json(
    setup: &Setup,
    input: &TraceInput,
    report: &ReplayReport,
    capacity: Capacity,
    working_set: Option<WorkingSet>,
) -> Value {
    let mut value = serde_json::to_value(report).expect("report serialises");
    let extra = json!({
        "trace": input.path.display().to_string(),
        "format": input.format_name(),
        "algorithm": format!("{:?}", setup.algorithm).to_lowercase(),
        "cache_size": setup.cache_size.to_string(),
        "capacity_objects": capacity.objects,
        "capacity_bytes": capacity.bytes,
        "working_set": working_set,
    });
    if let (Value::Object(map), Value::Object(extra)) = (&mut value, extra) {
        map.extend(extra);
    }
    value
}

/// The capacity a size asks for, and the working set when a percentage needed one.
pub fn resolve_capacity_of(
    size: CacheSize,
    input: Option<&TraceInput>,
) -> Result<(Capacity, Option<WorkingSet>), String> {
    Ok(match size {
        CacheSize::Objects(n) => (Capacity::objects(n), None),
        CacheSize::Bytes(n) => (Capacity::bytes(n), None),
        CacheSize::Unlimited => (Capacity::default(), None),
        CacheSize::Percent(p) => {
            let Some(input) = input else {
                return Err(format!(
                    "cache_size {p}%: a percentage of the working set needs a trace (reader=...)"
                ));
            };
            let mut reader = trace::Batched::new(input.open().map_err(|e| e.to_string())?);
            let ws = WorkingSet::scan(|| reader.next_request()).map_err(|e| e.to_string())?;
            if ws.objects == 0 {
                return Err(format!(
                    "cache_size {p}%: {} has no requests, so it has no working set",
                    input.path.display()
                ));
            }
            let of = |total: u64| ((total as f64 * p / 100.0) as u64).max(1);
            let capacity = if ws.has_sizes {
                Capacity::bytes(of(ws.bytes))
            } else {
                Capacity::objects(of(ws.objects))
            };
            (capacity, Some(ws))
        }
    })
}

fn resolve_capacity(
    setup: &Setup,
    input: &TraceInput,
) -> Result<(Capacity, Option<WorkingSet>), String> {
    resolve_capacity_of(setup.cache_size, Some(input))
}

/// The restart point and monitor window resolved against the trace (one counting pass).
fn warmup_config(setup: &Setup, at: RestartAt, input: &TraceInput) -> Result<WarmupConfig, String> {
    let s = |e: trace::TraceError| e.to_string();
    let (mut requests, mut lookups) = (0u64, Vec::new());
    let mut reader = trace::Batched::new(input.open().map_err(s)?);
    while let Some(r) = reader.next_request().map_err(s)? {
        requests += 1;
        if matches!(r.op, trace::Op::Get | trace::Op::Access) {
            lookups.push(requests);
        }
    }
    let restart_at = at.resolve(requests);
    if restart_at >= requests {
        return Err(format!("restart_at: the trace has {requests} requests, so a restart after {restart_at} leaves nothing to measure"));
    }
    let lookups_after = lookups.iter().filter(|&&i| i > restart_at).count() as u64;
    let window_lookups = match setup.warmup_window {
        Some(0) => return Err("warmup_window must be > 0".to_string()),
        Some(n) => n,
        None => (lookups_after / 200).max(100),
    };
    let format = input.format.or_else(|| trace::detect(&input.path).ok());
    let regions = |bytes: u64| Granularity::Regions {
        region_bytes: bytes,
        block_size: u64::from(input.options.block_size),
    };
    use trace::Format as F;
    let granularity = match setup.region.as_deref() {
        Some(r) if r.eq_ignore_ascii_case("keys") => Granularity::Keys,
        Some(r) => {
            let bytes = sim::parse_bytes(r).map_err(|e| format!("region: {e}"))?;
            if bytes == 0 {
                return Err("region must be > 0 bytes (or `keys`)".to_string());
            }
            regions(bytes)
        }
        None => match format {
            Some(F::Vscsi | F::Msr | F::Arc | F::Systor | F::TencentCbs | F::Lirs) => {
                regions(1 << 20)
            }
            _ => Granularity::Keys,
        },
    };
    Ok(WarmupConfig {
        restart_at,
        spec: setup.warmup,
        granularity,
        monitor_limit: setup.monitor_limit,
        window_lookups,
        seed: setup.warmup_seed,
        ..WarmupConfig::default()
    })
}

/// One outcome as Python gets it: `(replay --json text, ticks as JSON text, notices)`.
fn to_py<'py>(py: Python<'py>, label: String, o: Outcome) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("label", label)?;
    d.set_item("json", o.json.to_string())?;
    d.set_item(
        "ticks",
        serde_json::to_string(&o.ticks).map_err(|e| error(e.to_string()))?,
    )?;
    d.set_item("notices", PyList::new(py, o.notices)?)?;
    Ok(d)
}

/// Replays `trace` under `setup` with the GIL released.
#[pyfunction]
#[pyo3(signature = (trace, setup, format=None))]
pub fn replay_json<'py>(
    py: Python<'py>,
    trace: &Bound<'py, PyAny>,
    setup: &Bound<'py, Setup>,
    format: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let input = TraceInput::from_py(trace, format)?;
    let setup = setup.get().clone();
    let outcome = py.detach(|| run_setup(&setup, &input))?;
    to_py(py, setup.label(), outcome)
}

/// Replays `trace` under every setup, `jobs` at a time (default: the cores), with the GIL
/// released; fails with the first failing setup's message, naming it.
#[pyfunction]
#[pyo3(signature = (trace, setups, jobs=None, format=None))]
pub fn compare_json<'py>(
    py: Python<'py>,
    trace: &Bound<'py, PyAny>,
    setups: Vec<Bound<'py, Setup>>,
    jobs: Option<usize>,
    format: Option<&str>,
) -> PyResult<Bound<'py, PyList>> {
    if setups.is_empty() {
        return Err(error("setups: nothing to compare"));
    }
    let input = TraceInput::from_py(trace, format)?;
    // Fail on an unreadable trace once, before starting every run.
    input.open().map_err(error)?;
    let setups: Vec<Setup> = setups.iter().map(|s| s.get().clone()).collect();
    for setup in &setups {
        if let Some(path) = &setup.policy {
            PolicyController::from_file(path, setup.params.clone(), setup.limits, false)
                .map_err(|e| error(format!("policy {}: {e}", path.display())))?;
        }
    }
    let jobs = jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, setups.len());
    let results: Vec<Result<Outcome, Stop>> = py.detach(|| {
        let next = AtomicUsize::new(0);
        let slots: Mutex<Vec<Option<Result<Outcome, Stop>>>> =
            Mutex::new((0..setups.len()).map(|_| None).collect());
        std::thread::scope(|scope| {
            for _ in 0..jobs {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(setup) = setups.get(i) else { break };
                    let outcome = run_setup(setup, &input);
                    slots.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(outcome);
                });
            }
        });
        slots
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(Stop::Input("the replay thread stopped".to_string()))))
            .collect()
    });
    let out = PyList::empty(py);
    for (setup, result) in setups.into_iter().zip(results) {
        let label = setup.label();
        let outcome = result.map_err(|stop| match stop {
            Stop::Input(msg) => error(format!("{label}: {msg}")),
            Stop::Python(e) => e,
        })?;
        out.append(to_py(py, label, outcome)?)?;
    }
    Ok(out)
}
