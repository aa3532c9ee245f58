//! `mantle.Cache`: one of Mantle's caches driven from Python, request by request or a whole
//! trace at a time (`process_trace`, in Rust with the GIL released), optionally with a
//! `mantle.PluginAdmissioner` deciding what a miss inserts.

use crate::input::TraceInput;
use crate::plugin_admission::{self, Admission};
use crate::plugin_request::PluginRequest;
use crate::run::{
    future_of, parse_admission, parse_algorithm, parse_cache_size, resolve_capacity_of,
};
use crate::{error, Signals, Stop};
use cache::classes::RuleOp;
use cache::{RequestCounts, Served};
use pyo3::prelude::*;
use sim::replay_cache::rule_op;

#[pyclass(module = "mantle._mantle")]
pub struct Cache {
    cache: cache::Cache,
    admission: Option<Admission>,
    /// Requests served through the admissioner (numbers the one a hook failed on).
    admitted_requests: u64,
}

/// The miss ratio and byte miss ratio of one pass.
pub(crate) fn ratios(n: &RequestCounts) -> (f64, f64) {
    let ratio = |a: u64, b: u64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
    (
        ratio(n.misses, n.lookups()),
        ratio(n.miss_bytes, n.lookup_bytes),
    )
}

/// Reads past the first `n` requests; false if the trace ended first.
pub(crate) fn skip_requests(
    reader: &mut trace::Batched<Box<dyn trace::TraceReader>>,
    n: u64,
) -> Result<bool, trace::TraceError> {
    for _ in 0..n {
        if reader.next_request()?.is_none() {
            return Ok(false);
        }
    }
    Ok(true)
}

fn serve_trace(
    cache: &mut cache::Cache,
    input: &TraceInput,
    start: u64,
    max: Option<u64>,
) -> Result<RequestCounts, Stop> {
    // An offline algorithm learns every request's next access from a first pass.
    let future = match cache.algorithm().is_offline() {
        true => Some(future_of(input)?),
        false => None,
    };
    let mut reader = trace::Batched::new(input.open()?);
    let mut tally = RequestCounts::default();
    let mut signals = Signals::new();
    if !skip_requests(&mut reader, start)? {
        return Ok(tally);
    }
    let mut position = start;
    let mut left = max.unwrap_or(u64::MAX);
    while left > 0 {
        signals.poll()?;
        let Some(r) = reader.next_request()? else {
            break;
        };
        // The one request path every simulated cache shares (docs/replay.md).
        let op = rule_op(r.op);
        match &future {
            None => cache.serve(op, r.key, r.size, &mut tally),
            Some(next) => {
                let next = next.get(position as usize).copied();
                let next = next.unwrap_or(cache::future::NEVER);
                cache.serve_with_future(op, r.key, r.size, (), &mut tally, next)
            }
        };
        position += 1;
        left -= 1;
    }
    Ok(tally)
}

#[pymethods]
impl Cache {
    /// `cache_size` as `mantle replay --cache-size` takes it: objects (1000), bytes with a
    /// unit ("64MiB"), "unlimited", or a percentage ("10%") of `reader`'s working set.
    /// `admissioner`: a `mantle.PluginAdmissioner` asked on every miss whether to insert.
    #[new]
    ///
    /// `admission` puts an admission policy in front of the eviction algorithm, as `mantle
    /// replay --admission` takes it: "size:size=4096", "prob:prob=0.3", "bloomfilter",
    /// "adaptsize".
    #[pyo3(signature = (eviction, cache_size, *, reader=None, admission=None, admissioner=None))]
    fn new(
        py: Python<'_>,
        eviction: &str,
        cache_size: &Bound<'_, PyAny>,
        reader: Option<&Bound<'_, PyAny>>,
        admission: Option<&str>,
        admissioner: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Cache> {
        let algorithm = parse_algorithm(eviction)?;
        let (size, _) = parse_cache_size(cache_size)?;
        let input = reader.map(|r| TraceInput::from_py(r, None)).transpose()?;
        let (capacity, _) = py
            .detach(|| resolve_capacity_of(size, input.as_ref()))
            .map_err(error)?;
        let limit = capacity.bytes.or(capacity.objects).unwrap_or(0);
        let plugin = admissioner
            .filter(|a| !a.is_none())
            .map(|a| Admission::attach(a, Py::new(py, PluginRequest::new())?, limit))
            .transpose()?;
        let mut cache = cache::Cache::new(algorithm, capacity);
        cache.set_admission(parse_admission(admission)?);
        Ok(Cache {
            cache,
            admission: plugin,
            admitted_requests: 0,
        })
    }

    /// Replays a trace (a `mantle.TraceReader` or a path) through this cache from its current
    /// state and returns `(miss_ratio, byte_miss_ratio)` of this pass; on a fresh cache these
    /// are `mantle replay`'s. `start_req` requests are skipped, at most `max_req` served
    /// (-1: all).
    #[pyo3(signature = (reader, start_req=0, max_req=-1))]
    fn process_trace(
        &mut self,
        py: Python<'_>,
        reader: &Bound<'_, PyAny>,
        start_req: u64,
        max_req: i64,
    ) -> PyResult<(f64, f64)> {
        let input = TraceInput::from_py(reader, None)?;
        let max = u64::try_from(max_req).ok();
        let cache = &mut self.cache;
        if let Some(admission) = &self.admission {
            // Every request calls Python: the GIL stays held.
            let mut requests = trace::Batched::new(input.open().map_err(error)?);
            if !skip_requests(&mut requests, start_req).map_err(error)? {
                return Ok((0.0, 0.0));
            }
            let tally = plugin_admission::serve_trace(
                py,
                cache,
                admission,
                &mut requests,
                max,
                &mut self.admitted_requests,
            )?;
            return Ok(ratios(&tally));
        }
        let tally = py.detach(|| serve_trace(cache, &input, start_req, max))?;
        Ok(ratios(&tally))
    }

    /// A lookup that inserts `key` on a miss, as a trace's get does; returns whether it hit.
    /// With an admissioner, the miss inserts only if its admit hook agrees. `next_access`
    /// (the 1-based index of the key's next request, None for never) is what the offline
    /// algorithms (belady, beladysize) decide by; the others ignore it.
    #[pyo3(signature = (key, size=1, next_access=None))]
    fn get(
        &mut self,
        py: Python<'_>,
        key: u64,
        size: u32,
        next_access: Option<u64>,
    ) -> PyResult<bool> {
        let mut uncounted = RequestCounts::default();
        let served = match &self.admission {
            Some(admission) => {
                self.admitted_requests += 1;
                let r = trace::Request {
                    time: 0.0,
                    key,
                    size,
                    op: trace::Op::Get,
                    offset: 0,
                };
                plugin_admission::serve(
                    py,
                    &mut self.cache,
                    admission,
                    &r,
                    self.admitted_requests,
                    &mut uncounted,
                )?
            }
            None => {
                let next = next_access.unwrap_or(cache::future::NEVER);
                self.cache
                    .serve_with_future(RuleOp::Get, key, size, (), &mut uncounted, next)
            }
        };
        Ok(served == Served::Hit)
    }

    /// The admission policy's spec, None without one.
    #[getter]
    fn admission(&self) -> Option<String> {
        self.cache.admission().map(|a| a.to_string())
    }

    /// A lookup that never inserts; a hit counts as an access for the eviction algorithm.
    fn find(&mut self, key: u64) -> bool {
        self.cache.get(key)
    }

    /// Inserts `key` (or updates its size); false when it cannot be cached (too large).
    #[pyo3(signature = (key, size=1))]
    fn insert(&mut self, key: u64, size: u32) -> bool {
        self.cache.insert(key, size)
    }

    /// Removes `key`; returns whether it was cached.
    fn remove(&mut self, key: u64) -> bool {
        self.cache.remove(key)
    }

    /// Evicts up to `n` objects as the algorithm chooses; returns how many went.
    #[pyo3(signature = (n=1))]
    fn evict(&mut self, n: u64) -> u64 {
        self.cache.evict(n)
    }

    fn __contains__(&self, key: u64) -> bool {
        self.cache.contains(key)
    }

    fn __len__(&self) -> usize {
        usize::try_from(self.cache.len()).unwrap_or(usize::MAX)
    }

    /// Objects cached (libCacheSim's name).
    fn get_n_obj(&self) -> u64 {
        self.cache.len()
    }

    /// Bytes cached (libCacheSim's name).
    fn get_occupied_byte(&self) -> u64 {
        self.cache.bytes()
    }

    #[getter]
    fn evictions(&self) -> u64 {
        self.cache.evictions()
    }

    #[getter]
    fn eviction(&self) -> String {
        self.cache.algorithm().to_string()
    }

    /// The admissioner given, or None.
    #[getter]
    fn admissioner(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.admission.as_ref().map(|a| a.owner(py).into_any())
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        match &self.admission {
            Some(admission) => admission.traverse(&visit),
            None => Ok(()),
        }
    }

    /// `(objects, bytes)` the cache may hold; None where unbounded.
    #[getter]
    fn capacity(&self) -> (Option<u64>, Option<u64>) {
        let c = self.cache.capacity();
        (c.objects, c.bytes)
    }

    fn __repr__(&self) -> String {
        let (objects, bytes) = self.capacity();
        let show = |v: Option<u64>| v.map_or("None".to_string(), |v| v.to_string());
        let admissioner = self
            .admission
            .as_ref()
            .map(|a| format!(", admissioner={:?}", a.name()))
            .unwrap_or_default();
        format!(
            "mantle.Cache({:?}, capacity_objects={}, capacity_bytes={}, objects={}, bytes={}{admissioner})",
            self.cache.algorithm().to_string(),
            show(objects),
            show(bytes),
            self.cache.len(),
            self.cache.bytes()
        )
    }
}
