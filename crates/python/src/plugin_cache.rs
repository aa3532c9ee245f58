//! `mantle.PluginCache`: a cache whose eviction algorithm is Python hooks, with libCacheSim
//! 0.3.5's `PluginCache` arguments, semantics and call order. The index and the size
//! accounting are Rust's; the hooks decide.
//!
//! Per lookup, as libCacheSim's `pypluginCache_get` does: the admissioner's update hook (if
//! any); on a hit the hit hook; on a miss, if the admissioner admits it and it fits at all,
//! the eviction hook once per victim until the object fits (each returns the id to evict),
//! the insert, and then the miss hook (called on every miss, inserted or not). A remove
//! calls the remove hook first, whether or not the object is cached. Mantle's traces also
//! have puts and deletes, served with the replay's semantics (docs/replay.md): a put of a
//! cached object updates its size and is a hit for the hooks (evicting after, if it grew), a
//! put of an absent one is a miss that is not counted as a lookup, a delete is a remove.

use crate::cache_obj::{ratios, skip_requests};
use crate::input::TraceInput;
use crate::plugin_admission::Admission;
use crate::plugin_hook::{self, At};
use crate::plugin_request::PluginRequest;
use crate::run::{parse_cache_size, resolve_capacity_of};
use crate::{error, Signals};
use cache::{Capacity, RequestCounts, Served};
use foldhash::fast::FixedState;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::collections::HashMap;

/// What the init hook is given, with libCacheSim's `CommonCacheParams` attribute names.
#[pyclass(module = "mantle._mantle", frozen)]
pub struct CommonCacheParams {
    /// The limit the eviction condition uses: bytes for a byte capacity, objects for an
    /// object capacity, 0 for an unlimited cache.
    #[pyo3(get)]
    cache_size: u64,
    /// `(objects, bytes)`, None where unbounded (`mantle.Cache.capacity`'s shape).
    #[pyo3(get)]
    capacity: (Option<u64>, Option<u64>),
    #[pyo3(get)]
    cache_name: String,
    #[pyo3(get)]
    default_ttl: u64,
    #[pyo3(get)]
    hashpower: i32,
    #[pyo3(get)]
    consider_obj_metadata: bool,
}

/// libCacheSim's defaults, kept for hooks that read them (neither changes anything: its
/// 0.3.5 wheel is built without expiry, and Mantle's index sizes itself).
const DEFAULT_TTL: u64 = 86400 * 300;
const DEFAULT_HASHPOWER: i32 = 24;

/// The one limit a plugin's `cache_size` reports.
fn limit_of(capacity: Capacity) -> u64 {
    capacity.bytes.or(capacity.objects).unwrap_or(0)
}

struct Hooks {
    hit: Py<PyAny>,
    miss: Py<PyAny>,
    eviction: Py<PyAny>,
    remove: Py<PyAny>,
    free: Option<Py<PyAny>>,
}

/// The cached objects: id to size, and the totals the capacity is checked against.
struct Index {
    sizes: HashMap<u64, u32, FixedState>,
    bytes: u64,
    capacity: Capacity,
    evictions: u64,
}

impl Index {
    #[inline]
    fn over_with(&self, size: u32) -> bool {
        self.capacity
            .exceeded_by(self.sizes.len() as u64 + 1, self.bytes + u64::from(size))
    }

    #[inline]
    fn over(&self) -> bool {
        self.capacity
            .exceeded_by(self.sizes.len() as u64, self.bytes)
    }

    fn drop_object(&mut self, obj_id: u64) -> bool {
        match self.sizes.remove(&obj_id) {
            Some(size) => {
                self.bytes -= u64::from(size);
                true
            }
            None => false,
        }
    }
}

#[pyclass(module = "mantle._mantle")]
pub struct PluginCache {
    index: Index,
    hooks: Hooks,
    /// What the init hook returned: the first argument of every other hook.
    data: Py<PyAny>,
    request: Py<PluginRequest>,
    /// `(data, request)`, the arguments of the hit, miss and eviction hooks, built once.
    args: Py<PyTuple>,
    admission: Option<Admission>,
    name: String,
    /// Requests served (libCacheSim's `n_req`); numbers the request a hook failed on.
    n_req: u64,
}

impl PluginCache {
    #[inline]
    fn at(&self) -> At {
        At {
            request: self.n_req,
            obj_id: self.request.get().obj_id_now(),
        }
    }

    #[inline]
    fn call(&self, py: Python<'_>, name: &str, hook: &Py<PyAny>) -> PyResult<()> {
        plugin_hook::call(py, name, hook, &self.args, Some(self.at())).map(drop)
    }

    /// One request, as `process_trace` and `get` serve it.
    #[inline]
    fn serve(
        &mut self,
        py: Python<'_>,
        op: trace::Op,
        obj_id: u64,
        size: u32,
        time: f64,
        counts: &mut RequestCounts,
    ) -> PyResult<Served> {
        self.n_req += 1;
        self.request.get().set(obj_id, size, time, op);
        if let Some(admission) = &self.admission {
            admission.update(py, self.at())?;
        }
        counts.requests += 1;
        match op {
            trace::Op::Get | trace::Op::Access => {
                if op == trace::Op::Get {
                    counts.gets += 1;
                } else {
                    counts.accesses += 1;
                }
                counts.lookup_bytes += u64::from(size);
                if self.index.sizes.contains_key(&obj_id) {
                    counts.hits += 1;
                    self.call(py, "cache_hit_hook", &self.hooks.hit)?;
                    Ok(Served::Hit)
                } else {
                    counts.misses += 1;
                    counts.miss_bytes += u64::from(size);
                    self.admit_and_insert(py, obj_id, size)?;
                    self.call(py, "cache_miss_hook", &self.hooks.miss)?;
                    Ok(Served::Miss)
                }
            }
            trace::Op::Put => {
                counts.puts += 1;
                self.write(py, obj_id, size)?;
                Ok(Served::Written)
            }
            trace::Op::Delete => {
                counts.deletes += 1;
                self.remove_object(py, obj_id)?;
                Ok(Served::Deleted)
            }
        }
    }

    /// libCacheSim's `cache_get_base` after a miss: admission, the size check, evictions
    /// until the object fits, the insert.
    fn admit_and_insert(&mut self, py: Python<'_>, obj_id: u64, size: u32) -> PyResult<()> {
        if let Some(admission) = &self.admission {
            if !admission.admit(py, self.at())? {
                return Ok(());
            }
        }
        if !self.index.capacity.can_hold(size) {
            return Ok(());
        }
        while self.index.over_with(size) {
            self.evict_one(py)?;
        }
        self.index.sizes.insert(obj_id, size);
        self.index.bytes += u64::from(size);
        Ok(())
    }

    /// A put: a cached object takes the new size in place (an access, so the hit hook),
    /// then victims go until it fits, which may be the object itself; one that can no
    /// longer fit at all is removed. An absent object comes in as on a miss.
    fn write(&mut self, py: Python<'_>, obj_id: u64, size: u32) -> PyResult<()> {
        let Some(&old) = self.index.sizes.get(&obj_id) else {
            self.admit_and_insert(py, obj_id, size)?;
            return self.call(py, "cache_miss_hook", &self.hooks.miss);
        };
        if !self.index.capacity.can_hold(size) {
            self.remove_object(py, obj_id)?;
            return Ok(());
        }
        self.index.sizes.insert(obj_id, size);
        self.index.bytes = self.index.bytes - u64::from(old) + u64::from(size);
        self.call(py, "cache_hit_hook", &self.hooks.hit)?;
        while self.index.over() {
            self.evict_one(py)?;
        }
        Ok(())
    }

    /// Asks the eviction hook for a victim and drops it.
    fn evict_one(&mut self, py: Python<'_>) -> PyResult<()> {
        let at = self.at();
        let victim = plugin_hook::call(
            py,
            "cache_eviction_hook",
            &self.hooks.eviction,
            &self.args,
            Some(at),
        )?;
        let obj_id: u64 = victim.extract().map_err(|_| {
            error(format!(
                "cache_eviction_hook must return the id (an int) of a cached object to evict, \
                 got {} ({at})",
                victim
                    .repr()
                    .map(|r| r.to_string())
                    .unwrap_or_else(|_| plugin_hook::type_name(&victim))
            ))
        })?;
        if !self.index.drop_object(obj_id) {
            return Err(error(format!(
                "cache_eviction_hook returned object {obj_id}, which is not in the cache \
                 ({at}; {} objects cached)",
                self.index.sizes.len()
            )));
        }
        self.index.evictions += 1;
        Ok(())
    }

    /// libCacheSim's remove: the remove hook, then the object goes if it is cached.
    fn remove_object(&mut self, py: Python<'_>, obj_id: u64) -> PyResult<bool> {
        let args = PyTuple::new(
            py,
            [
                self.data.clone_ref(py),
                obj_id.into_pyobject(py)?.into_any().unbind(),
            ],
        )?;
        plugin_hook::call(
            py,
            "cache_remove_hook",
            &self.hooks.remove,
            &args.unbind(),
            Some(At {
                request: self.n_req,
                obj_id,
            }),
        )?;
        Ok(self.index.drop_object(obj_id))
    }
}

#[pymethods]
impl PluginCache {
    /// libCacheSim's `PluginCache` arguments. `cache_size` as `mantle.Cache` takes it:
    /// objects (an int), bytes with a unit ("64MiB", or "1000B" for libCacheSim's
    /// `cache_size=1000`), "unlimited", or a percentage ("10%") of `reader`'s working set.
    #[new]
    #[pyo3(signature = (
        cache_size,
        cache_init_hook,
        cache_hit_hook,
        cache_miss_hook,
        cache_eviction_hook,
        cache_remove_hook,
        cache_free_hook=None,
        cache_name="PythonHookCache",
        default_ttl=DEFAULT_TTL,
        hashpower=DEFAULT_HASHPOWER,
        consider_obj_metadata=false,
        admissioner=None,
        reader=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        cache_size: &Bound<'_, PyAny>,
        cache_init_hook: &Bound<'_, PyAny>,
        cache_hit_hook: &Bound<'_, PyAny>,
        cache_miss_hook: &Bound<'_, PyAny>,
        cache_eviction_hook: &Bound<'_, PyAny>,
        cache_remove_hook: &Bound<'_, PyAny>,
        cache_free_hook: Option<&Bound<'_, PyAny>>,
        cache_name: &str,
        default_ttl: u64,
        hashpower: i32,
        consider_obj_metadata: bool,
        admissioner: Option<&Bound<'_, PyAny>>,
        reader: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PluginCache> {
        let init = plugin_hook::callable("cache_init_hook", cache_init_hook)?;
        let hooks = Hooks {
            hit: plugin_hook::callable("cache_hit_hook", cache_hit_hook)?,
            miss: plugin_hook::callable("cache_miss_hook", cache_miss_hook)?,
            eviction: plugin_hook::callable("cache_eviction_hook", cache_eviction_hook)?,
            remove: plugin_hook::callable("cache_remove_hook", cache_remove_hook)?,
            free: plugin_hook::optional("cache_free_hook", cache_free_hook)?,
        };
        let (size, _) = parse_cache_size(cache_size)?;
        let input = reader.map(|r| TraceInput::from_py(r, None)).transpose()?;
        let (capacity, _) = py
            .detach(|| resolve_capacity_of(size, input.as_ref()))
            .map_err(error)?;
        let request = Py::new(py, PluginRequest::new())?;
        let admission = admissioner
            .filter(|a| !a.is_none())
            .map(|a| Admission::attach(a, request.clone_ref(py), limit_of(capacity)))
            .transpose()?;
        let params = CommonCacheParams {
            cache_size: limit_of(capacity),
            capacity: (capacity.objects, capacity.bytes),
            cache_name: cache_name.to_string(),
            default_ttl,
            hashpower,
            consider_obj_metadata,
        };
        let data = init
            .bind(py)
            .call1((params,))
            .map_err(|e| plugin_hook::failed(py, "cache_init_hook", e, None))?
            .unbind();
        let args = PyTuple::new(py, [data.clone_ref(py), request.clone_ref(py).into_any()])?;
        Ok(PluginCache {
            index: Index {
                sizes: HashMap::default(),
                bytes: 0,
                capacity,
                evictions: 0,
            },
            hooks,
            data,
            request,
            args: args.unbind(),
            admission,
            name: cache_name.to_string(),
            n_req: 0,
        })
    }

    /// Replays a trace (a `mantle.TraceReader` or a path) through the hooks from the cache's
    /// current state; returns `(miss_ratio, byte_miss_ratio)` of this pass. `start_req`
    /// requests are skipped, at most `max_req` served (-1: all). Holds the GIL (every
    /// request calls Python); Ctrl-C stops it with `KeyboardInterrupt`.
    #[pyo3(signature = (reader, start_req=0, max_req=-1))]
    fn process_trace(
        &mut self,
        py: Python<'_>,
        reader: &Bound<'_, PyAny>,
        start_req: u64,
        max_req: i64,
    ) -> PyResult<(f64, f64)> {
        let input = TraceInput::from_py(reader, None)?;
        let mut requests = trace::Batched::new(input.open().map_err(error)?);
        let mut tally = RequestCounts::default();
        if !skip_requests(&mut requests, start_req).map_err(error)? {
            return Ok(ratios(&tally));
        }
        let mut left = u64::try_from(max_req).unwrap_or(u64::MAX);
        let mut signals = Signals::new();
        while left > 0 {
            signals.poll()?;
            let Some(r) = requests.next_request().map_err(error)? else {
                break;
            };
            self.serve(py, r.op, r.key, r.size, r.time, &mut tally)?;
            left -= 1;
        }
        Ok(ratios(&tally))
    }

    /// One lookup (libCacheSim's `get`): the hooks run as for a trace's get; returns whether
    /// it hit. `time` is what the hooks see as `clock_time`.
    #[pyo3(signature = (obj_id, obj_size=1, *, time=0.0))]
    fn get(&mut self, py: Python<'_>, obj_id: u64, obj_size: u32, time: f64) -> PyResult<bool> {
        let mut uncounted = RequestCounts::default();
        let served = self.serve(py, trace::Op::Get, obj_id, obj_size, time, &mut uncounted)?;
        Ok(served == Served::Hit)
    }

    /// Whether `obj_id` is cached; no hook runs (libCacheSim's `find` does not run them
    /// either).
    fn find(&self, obj_id: u64) -> bool {
        self.index.sizes.contains_key(&obj_id)
    }

    /// libCacheSim's `remove`: calls the remove hook (even for an object not cached), then
    /// drops the object; returns whether it was cached.
    fn remove(&mut self, py: Python<'_>, obj_id: u64) -> PyResult<bool> {
        self.remove_object(py, obj_id)
    }

    fn __contains__(&self, obj_id: u64) -> bool {
        self.find(obj_id)
    }

    fn __len__(&self) -> usize {
        self.index.sizes.len()
    }

    /// Objects cached (libCacheSim's name).
    fn get_n_obj(&self) -> u64 {
        self.index.sizes.len() as u64
    }

    /// Bytes cached (libCacheSim's name).
    fn get_occupied_byte(&self) -> u64 {
        self.index.bytes
    }

    /// Objects the eviction hook chose so far.
    #[getter]
    fn evictions(&self) -> u64 {
        self.index.evictions
    }

    /// Requests served so far (libCacheSim's `n_req`).
    #[getter]
    fn n_req(&self) -> u64 {
        self.n_req
    }

    /// `(objects, bytes)` the cache may hold; None where unbounded.
    #[getter]
    fn capacity(&self) -> (Option<u64>, Option<u64>) {
        (self.index.capacity.objects, self.index.capacity.bytes)
    }

    /// The limit: bytes for a byte capacity, objects for an object one, 0 if unlimited.
    #[getter]
    fn cache_size(&self) -> u64 {
        limit_of(self.index.capacity)
    }

    #[getter]
    fn cache_name(&self) -> &str {
        &self.name
    }

    /// What the init hook returned (the plugin's state).
    #[getter]
    fn data(&self, py: Python<'_>) -> Py<PyAny> {
        self.data.clone_ref(py)
    }

    /// The admissioner given, or None.
    #[getter]
    fn admissioner(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.admission.as_ref().map(|a| a.owner(py).into_any())
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        for hook in [
            &self.hooks.hit,
            &self.hooks.miss,
            &self.hooks.eviction,
            &self.hooks.remove,
            &self.data,
        ] {
            visit.call(hook)?;
        }
        if let Some(free) = &self.hooks.free {
            visit.call(free)?;
        }
        visit.call(&self.request)?;
        visit.call(&self.args)?;
        if let Some(admission) = &self.admission {
            admission.traverse(&visit)?;
        }
        Ok(())
    }

    fn __repr__(&self) -> String {
        let (objects, bytes) = self.capacity();
        let show = |v: Option<u64>| v.map_or("None".to_string(), |v| v.to_string());
        format!(
            "mantle.PluginCache({:?}, capacity_objects={}, capacity_bytes={}, objects={}, bytes={})",
            self.name,
            show(objects),
            show(bytes),
            self.index.sizes.len(),
            self.index.bytes
        )
    }
}

/// libCacheSim calls the free hook when the cache is freed; so does Mantle, when the last
/// reference goes.
impl Drop for PluginCache {
    fn drop(&mut self) {
        if let Some(free) = &self.hooks.free {
            let data = Python::attach(|py| self.data.clone_ref(py));
            plugin_hook::call_in_drop(free, vec![data]);
        }
    }
}
