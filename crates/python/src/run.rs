//! `mantle.replay` and `mantle.compare`: one [`Setup`] (the Python form of `mantle replay`'s
//! flags) runs through `sim::replay` exactly as the CLI runs it, and comes back as the
//! `replay --json` object plus the per-tick series.
//!
//! The glue that turns flags into a `ReplayConfig` (capacity from a percentage, the restart
//! point, the default tick of a trace without timestamps) is crates/sim's, which the CLI
//! calls too; only the names in its messages are translated to the keyword arguments'.

use crate::input::TraceInput;
use crate::{error, Signals, Stop};
use cache::{Algorithm, Capacity};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;
use sim::policy_driver::PolicyController;
use sim::summary::ReplayInput;
use sim::ticks::TickFlag;
use sim::{
    BackendSpec, CacheSize, ReplayConfig, RestartAt, Tick, TickRow, WarmupConfig, WarmupFlags,
    WarmupSpec, WorkingSet,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// `tick=` as the messages of `sim::ticks::resolve` spell it.
const TICK_ARG: TickFlag = TickFlag {
    name: "tick",
    with_value: |v| format!("tick=\"{v}\""),
};

/// A library message with the CLI's flag names as Python's keyword arguments.
fn keyword_names(message: String) -> String {
    [
        ("--cache-size", "cache_size"),
        ("--restart-at", "restart_at"),
        ("--warmup-window", "warmup_window"),
        ("--region", "region"),
    ]
    .iter()
    .fold(message, |m, (flag, arg)| m.replace(flag, arg))
}

/// Everything one replay needs, checked and parsed while the GIL is held.
#[pyclass(module = "mantle._mantle", frozen)]
#[derive(Clone)]
pub struct Setup {
    label: Option<String>,
    cache_size: CacheSize,
    cache_size_text: String,
    max_cache_size: Option<CacheSize>,
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
    admission: Option<cache::Admission>,
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

pub fn parse_admission(text: Option<&str>) -> PyResult<Option<cache::Admission>> {
    text.map(|t| t.parse().map_err(|e| error(format!("admission: {e}"))))
        .transpose()
}

/// The pre-pass of an offline algorithm: each request's next access (`cache::future`).
pub fn future_of(input: &TraceInput) -> Result<std::sync::Arc<[u64]>, Stop> {
    let mut reader = trace::Batched::new(input.open()?);
    let mut keys = Vec::new();
    while let Some(req) = reader.next_request()? {
        keys.push(req.key);
    }
    Ok(cache::future::next_accesses(keys).into())
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
        monitor_limit=1 << 20, warmup_seed=1, max_cache_size=None, admission=None,
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
        max_cache_size: Option<&Bound<'_, PyAny>>,
        admission: Option<&str>,
    ) -> PyResult<Setup> {
        let (cache_size, cache_size_text) = parse_cache_size(cache_size)?;
        let max_cache_size = max_cache_size
            .map(|m| {
                text_of(m, "max_cache_size")?
                    .parse::<CacheSize>()
                    .map_err(|e| error(format!("max_cache_size: {e}")))
            })
            .transpose()?;
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
        if algorithm.is_offline() && (classes.is_some() || restart_at.is_some()) {
            return Err(error(format!(
                "eviction: {algorithm} is offline (it needs each request's next access) and runs without classes or restart_at"
            )));
        }
        let admission = parse_admission(admission)?;
        Ok(Setup {
            label,
            cache_size,
            cache_size_text,
            max_cache_size,
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
            admission,
        })
    }
}

impl Setup {
    fn warmup_flags(&self) -> WarmupFlags {
        WarmupFlags {
            restart_at: self.restart_at,
            spec: self.warmup,
            region: self.region.clone(),
            window: self.warmup_window,
            monitor_limit: self.monitor_limit,
            seed: self.warmup_seed,
        }
    }

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

/// One replay; `cancelled` is the flag to watch when running off the main thread (see
/// [`Signals::watching`]), `None` to check Python's signals directly.
fn run_setup(
    setup: &Setup,
    input: &TraceInput,
    cancelled: Option<&AtomicBool>,
) -> Result<Outcome, Stop> {
    let mut notices = Vec::new();
    let lib = |e: anyhow::Error| Stop::Input(keyword_names(format!("{e:#}")));
    let open = || input.open();
    let (capacity, working_set) =
        sim::resolve_capacity(setup.cache_size, open, &input.path).map_err(lib)?;
    let max_capacity = match setup.max_cache_size {
        Some(max) => {
            sim::resolve_capacity(max, open, &input.path)
                .map_err(|e| {
                    Stop::Input(format!("{e:#}").replace("--cache-size", "max_cache_size"))
                })?
                .0
        }
        None => Capacity::default(),
    };
    let warmup = WarmupConfig::for_trace(
        &setup.warmup_flags(),
        &input.path,
        input.format,
        input.options.block_size,
        open,
    )
    .map_err(lib)?;
    let (mut controller, hooks) = match &setup.policy {
        Some(path) => {
            let params = || setup.params.clone();
            let loaded = PolicyController::from_file(path, params(), setup.limits, false)
                .and_then(|c| Ok((c, policy::hook_source(path, params(), setup.limits)?)))
                .map_err(|e| format!("policy {}: {e}", path.display()))?;
            (Some(loaded.0), loaded.1)
        }
        None => (None, None),
    };
    if hooks.is_some() && setup.classes.is_some() {
        return Err(Stop::Input(
            "policy: per-request hooks run without classes".to_string(),
        ));
    }
    let mut reader = trace::Batched::new(input.open()?);
    let (tick, notice) =
        sim::ticks::resolve(setup.tick, reader.has_timestamps(), &input.path, TICK_ARG)
            .map_err(lib)?;
    if let (Some(notice), true) = (notice, controller.is_some()) {
        notices.push(notice);
    }
    let config = ReplayConfig {
        algorithm: setup.algorithm,
        capacity,
        backend: setup.backend,
        tick,
        record_ticks: true,
        timeseries_limit: setup.timeseries,
        classes: setup.classes.clone(),
        warmup,
        max_capacity,
        admission: setup.admission.clone(),
        future: match setup.algorithm.is_offline() {
            true => Some(future_of(input)?),
            false => None,
        },
        // The policy's per-request hooks, as in `mantle replay --policy`.
        hooks,
        // As `mantle replay`: a fixed-record trace's length sizes the cache once.
        objects_bound: reader.requests_bound(),
    };
    let mut signals = match cancelled {
        Some(flag) => Signals::watching(flag),
        None => Signals::new(),
    };
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
    let summary = ReplayInput {
        trace: input.path.display().to_string(),
        format: input.format_name(),
        algorithm: setup.algorithm.name().to_string(),
        cache_size: setup.cache_size.to_string(),
        capacity: sim::ceiling::clamp(capacity, max_capacity).0,
        working_set,
    };
    Ok(Outcome {
        json: sim::summary::to_json(&report, &summary),
        ticks,
        notices,
    })
}

/// The capacity a size asks for (for `mantle.Cache`, whose trace is optional).
pub fn resolve_capacity_of(
    size: CacheSize,
    input: Option<&TraceInput>,
) -> Result<(Capacity, Option<WorkingSet>), String> {
    let resolved = match (input, size) {
        (Some(input), _) => sim::resolve_capacity(size, || input.open(), &input.path),
        (None, CacheSize::Percent(p)) => {
            return Err(format!(
                "cache_size {p}%: a percentage of the working set needs a trace (reader=...)"
            ))
        }
        // Only a percentage reads the trace.
        (None, _) => sim::resolve_capacity(size, no_trace, std::path::Path::new("")),
    };
    resolved.map_err(|e| keyword_names(format!("{e:#}")))
}

fn no_trace() -> Result<Box<dyn trace::TraceReader>, trace::TraceError> {
    Err(trace::TraceError::Io {
        path: PathBuf::new(),
        what: "no trace given".to_string(),
        cause: std::io::Error::other("reader=... is needed"),
    })
}

/// Runs every setup on `jobs` worker threads while this (the calling) thread checks Python's
/// signals, which Python only delivers to the main thread: at Ctrl-C the workers are told to
/// stop and the `KeyboardInterrupt` is returned at once, as a single replay would.
fn run_all(
    setups: &[Setup],
    input: &TraceInput,
    jobs: usize,
) -> Result<Vec<Result<Outcome, Stop>>, PyErr> {
    /// How long the checking thread sleeps between checks when no worker wakes it.
    const CHECK_EVERY: Duration = Duration::from_millis(20);
    let next = AtomicUsize::new(0);
    let cancelled = AtomicBool::new(false);
    let slots: Mutex<Vec<Option<Result<Outcome, Stop>>>> =
        Mutex::new((0..setups.len()).map(|_| None).collect());
    let checker = std::thread::current();
    let mut interrupt = None;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| {
                    while !cancelled.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(setup) = setups.get(i) else { break };
                        let outcome = run_setup(setup, input, Some(&cancelled));
                        slots.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(outcome);
                    }
                    checker.unpark();
                })
            })
            .collect();
        while !workers.iter().all(|w| w.is_finished()) {
            std::thread::park_timeout(CHECK_EVERY);
            if interrupt.is_none() {
                if let Err(e) = Python::attach(|py| py.check_signals()) {
                    cancelled.store(true, Ordering::Relaxed);
                    interrupt = Some(e);
                }
            }
        }
    });
    if let Some(e) = interrupt {
        return Err(e);
    }
    Ok(slots
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Err(Stop::Input("the replay thread stopped".to_string()))))
        .collect())
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
    let outcome = py.detach(|| run_setup(&setup, &input, None))?;
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
    // Fail on an unreadable trace once, before starting every run. Without the GIL: the
    // trace may be a pipe that another Python thread is writing.
    py.detach(|| input.open().map(drop)).map_err(error)?;
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
    let results = py.detach(|| run_all(&setups, &input, jobs))?;
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
