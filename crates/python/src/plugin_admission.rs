//! `mantle.PluginAdmissioner`: an admission policy written as Python hooks, in
//! libCacheSim's shape, for `mantle.Cache` and `mantle.PluginCache` alike.
//!
//! As in libCacheSim 0.3.5, a cache with an admissioner calls its update hook on every
//! request before the lookup, and its admit hook on a miss before anything is evicted: a
//! refused object is not inserted (its miss still counts). Mantle also asks on a put of an
//! object not cached (a write is a miss that brings the object in).

use crate::plugin_hook::{self, At};
use crate::plugin_request::PluginRequest;
use crate::{error, Signals};
use cache::{RequestCounts, Served};
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

/// The hooks and their state. Shared by every cache it is given to (as libCacheSim shares
/// one admissioner object), so its data sees all of their requests.
#[pyclass(module = "mantle._mantle", frozen)]
pub struct PluginAdmissioner {
    name: String,
    /// What the init hook returned: the first argument of every other hook. `None` in the
    /// short form, whose hooks take no data argument.
    data: Option<Py<PyAny>>,
    admit: Py<PyAny>,
    update: Option<Py<PyAny>>,
    clone: Option<Py<PyAny>>,
    free: Option<Py<PyAny>>,
}

#[pymethods]
impl PluginAdmissioner {
    /// libCacheSim's form, `PluginAdmissioner(name, init_hook, admit_hook, clone_hook,
    /// update_hook, free_hook)` with hooks `init() -> data`, `admit(data, req) -> bool`,
    /// `update(data, req, cache_size)`, `free(data)`; or the short form
    /// `PluginAdmissioner(admit)` with `admit(req) -> bool` (and optionally
    /// `admissioner_update_hook=update(req, cache_size)`, `admissioner_free_hook=free()`).
    #[new]
    #[pyo3(signature = (
        admissioner_name,
        admissioner_init_hook=None,
        admissioner_admit_hook=None,
        admissioner_clone_hook=None,
        admissioner_update_hook=None,
        admissioner_free_hook=None,
    ))]
    fn new(
        admissioner_name: &Bound<'_, PyAny>,
        admissioner_init_hook: Option<&Bound<'_, PyAny>>,
        admissioner_admit_hook: Option<&Bound<'_, PyAny>>,
        admissioner_clone_hook: Option<&Bound<'_, PyAny>>,
        admissioner_update_hook: Option<&Bound<'_, PyAny>>,
        admissioner_free_hook: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PluginAdmissioner> {
        let given = |h: Option<&Bound<'_, PyAny>>| h.is_some_and(|h| !h.is_none());
        let update = plugin_hook::optional("admissioner_update_hook", admissioner_update_hook)?;
        let clone = plugin_hook::optional("admissioner_clone_hook", admissioner_clone_hook)?;
        let free = plugin_hook::optional("admissioner_free_hook", admissioner_free_hook)?;
        if !admissioner_name.is_instance_of::<PyString>() && admissioner_name.is_callable() {
            if given(admissioner_init_hook) || given(admissioner_admit_hook) {
                return Err(error(
                    "PluginAdmissioner(admit): the short form takes the admit hook alone; \
                     with an init hook use libCacheSim's form, \
                     PluginAdmissioner(name, init_hook, admit_hook, clone_hook, update_hook, free_hook)",
                ));
            }
            return Ok(PluginAdmissioner {
                name: "PluginAdmissioner".to_string(),
                data: None,
                admit: admissioner_name.clone().unbind(),
                update,
                clone,
                free,
            });
        }
        let name: String = admissioner_name.extract().map_err(|_| {
            error(format!(
                "admissioner_name must be a str (or, alone, the admit hook), got {}",
                plugin_hook::type_name(admissioner_name)
            ))
        })?;
        let (Some(init), Some(admit)) = (admissioner_init_hook, admissioner_admit_hook) else {
            return Err(error(format!(
                "PluginAdmissioner({name:?}, ...): admissioner_init_hook and \
                 admissioner_admit_hook are required"
            )));
        };
        let init = plugin_hook::callable("admissioner_init_hook", init)?;
        let admit = plugin_hook::callable("admissioner_admit_hook", admit)?;
        let py = admissioner_name.py();
        let data = init
            .bind(py)
            .call0()
            .map_err(|e| plugin_hook::failed(py, "admissioner_init_hook", e, None))?;
        Ok(PluginAdmissioner {
            name,
            data: Some(data.unbind()),
            admit,
            update,
            clone,
            free,
        })
    }

    #[getter]
    fn admissioner_name(&self) -> &str {
        &self.name
    }

    /// What the init hook returned (None in the short form).
    #[getter]
    fn data(&self, py: Python<'_>) -> Py<PyAny> {
        match &self.data {
            Some(d) => d.clone_ref(py),
            None => py.None(),
        }
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.admit)?;
        for hook in [&self.data, &self.update, &self.clone, &self.free]
            .into_iter()
            .flatten()
        {
            visit.call(hook)?;
        }
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!("mantle.PluginAdmissioner({:?})", self.name)
    }
}

impl Drop for PluginAdmissioner {
    fn drop(&mut self) {
        if let Some(free) = &self.free {
            let args = self
                .data
                .as_ref()
                .map(|d| Python::attach(|py| vec![d.clone_ref(py)]))
                .unwrap_or_default();
            plugin_hook::call_in_drop(free, args);
        }
    }
}

/// An admissioner attached to one cache: the argument tuples its hooks take, built once
/// around that cache's reused request.
pub struct Admission {
    owner: Py<PluginAdmissioner>,
    request: Py<PluginRequest>,
    admit_args: Py<PyTuple>,
    update_args: Option<Py<PyTuple>>,
}

impl Admission {
    /// Attaches `admissioner` (a `mantle.PluginAdmissioner`) to a cache whose requests are
    /// `request` and whose limit is `cache_size` (what the update hook is told).
    pub fn attach(
        admissioner: &Bound<'_, PyAny>,
        request: Py<PluginRequest>,
        cache_size: u64,
    ) -> PyResult<Admission> {
        let py = admissioner.py();
        let owner = admissioner
            .cast::<PluginAdmissioner>()
            .map_err(|_| {
                error(format!(
                    "admissioner must be a mantle.PluginAdmissioner, got {}",
                    plugin_hook::type_name(admissioner)
                ))
            })?
            .clone();
        let adm = owner.get();
        let req = request.clone_ref(py).into_any();
        let size = cache_size.into_pyobject(py)?.into_any().unbind();
        let (admit_args, update_args) = match &adm.data {
            Some(data) => (
                PyTuple::new(py, [data.clone_ref(py), req.clone_ref(py)])?,
                PyTuple::new(py, [data.clone_ref(py), req, size])?,
            ),
            None => (
                PyTuple::new(py, [req.clone_ref(py)])?,
                PyTuple::new(py, [req, size])?,
            ),
        };
        Ok(Admission {
            update_args: adm.update.as_ref().map(|_| update_args.unbind()),
            admit_args: admit_args.unbind(),
            owner: owner.unbind(),
            request,
        })
    }

    pub fn owner(&self, py: Python<'_>) -> Py<PluginAdmissioner> {
        self.owner.clone_ref(py)
    }

    pub fn name(&self) -> &str {
        &self.owner.get().name
    }

    /// The request the hooks see (the cache's).
    #[inline]
    pub fn request(&self) -> &PluginRequest {
        self.request.get()
    }

    /// The update hook, told of every request before its lookup.
    #[inline]
    pub fn update(&self, py: Python<'_>, at: At) -> PyResult<()> {
        if let (Some(hook), Some(args)) = (&self.owner.get().update, &self.update_args) {
            plugin_hook::call(py, "admissioner_update_hook", hook, args, Some(at))?;
        }
        Ok(())
    }

    /// Whether the admit hook lets the request's object in.
    #[inline]
    pub fn admit(&self, py: Python<'_>, at: At) -> PyResult<bool> {
        let hook = &self.owner.get().admit;
        let verdict = plugin_hook::call(
            py,
            "admissioner_admit_hook",
            hook,
            &self.admit_args,
            Some(at),
        )?;
        verdict
            .is_truthy()
            .map_err(|e| plugin_hook::failed(py, "admissioner_admit_hook's result", e, Some(at)))
    }

    pub fn traverse(&self, visit: &pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.owner)?;
        visit.call(&self.request)?;
        visit.call(&self.admit_args)?;
        if let Some(args) = &self.update_args {
            visit.call(args)?;
        }
        Ok(())
    }
}

/// One request through a built-in cache with an admissioner: the replay's request semantics
/// (`Cache::serve`'s), with the admit hook deciding whether a missed or newly written object
/// is inserted. `request` is the request's number, for errors.
#[inline]
pub fn serve(
    py: Python<'_>,
    cache: &mut cache::Cache,
    admission: &Admission,
    r: &trace::Request,
    request: u64,
    counts: &mut RequestCounts,
) -> PyResult<Served> {
    let at = At {
        request,
        obj_id: r.key,
    };
    admission.request().set(r.key, r.size, r.time, r.op);
    admission.update(py, at)?;
    counts.requests += 1;
    Ok(match r.op {
        trace::Op::Get | trace::Op::Access => {
            if r.op == trace::Op::Get {
                counts.gets += 1;
            } else {
                counts.accesses += 1;
            }
            counts.lookup_bytes += u64::from(r.size);
            if cache.get(r.key) {
                counts.hits += 1;
                Served::Hit
            } else {
                counts.misses += 1;
                counts.miss_bytes += u64::from(r.size);
                if admission.admit(py, at)? {
                    cache.insert(r.key, r.size);
                }
                Served::Miss
            }
        }
        trace::Op::Put => {
            counts.puts += 1;
            if cache.contains(r.key) || admission.admit(py, at)? {
                cache.insert(r.key, r.size);
            }
            Served::Written
        }
        trace::Op::Delete => {
            counts.deletes += 1;
            cache.remove(r.key);
            Served::Deleted
        }
    })
}

/// `Cache.process_trace` with an admissioner: the loop holds the GIL (every request calls
/// Python); Ctrl-C is seen in the hooks and between them.
pub fn serve_trace(
    py: Python<'_>,
    cache: &mut cache::Cache,
    admission: &Admission,
    reader: &mut trace::Batched<Box<dyn trace::TraceReader>>,
    max: Option<u64>,
    served_before: &mut u64,
) -> PyResult<RequestCounts> {
    let mut tally = RequestCounts::default();
    let mut signals = Signals::new();
    let mut left = max.unwrap_or(u64::MAX);
    while left > 0 {
        signals.poll()?;
        let Some(r) = reader.next_request().map_err(error)? else {
            break;
        };
        *served_before += 1;
        serve(py, cache, admission, &r, *served_before, &mut tally)?;
        left -= 1;
    }
    Ok(tally)
}
