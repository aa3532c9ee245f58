//! Calling a plugin's Python hooks: the checks their arguments get when a plugin is built,
//! and the error a hook's exception becomes, naming the hook and the request it failed on.

use crate::{error, MantleError};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::fmt;

/// Where a hook failed: the request number (counted from 1 by the cache) and its object.
#[derive(Clone, Copy)]
pub struct At {
    pub request: u64,
    pub obj_id: u64,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request {}, object {}", self.request, self.obj_id)
    }
}

/// A hook argument: a callable, or an error naming the parameter.
pub fn callable(name: &str, hook: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    if !hook.is_callable() {
        return Err(error(format!(
            "{name} must be callable, got {}",
            type_name(hook)
        )));
    }
    Ok(hook.clone().unbind())
}

/// An optional hook: `None` or a callable.
pub fn optional(name: &str, hook: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
    match hook {
        Some(h) if !h.is_none() => callable(name, h).map(Some),
        _ => Ok(None),
    }
}

pub fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".to_string())
}

/// Calls `hook(*args)`. `args` is built once per cache and reused for every call (the data
/// object and the reused request never change), so a call allocates no argument tuple.
#[inline]
pub fn call<'py>(
    py: Python<'py>,
    name: &str,
    hook: &Py<PyAny>,
    args: &Py<PyTuple>,
    at: Option<At>,
) -> PyResult<Bound<'py, PyAny>> {
    hook.bind(py)
        .call1(args.bind(py))
        .map_err(|e| failed(py, name, e, at))
}

/// The error a hook's exception becomes: a `MantleError` naming the hook (and the request),
/// chained to the original (`__cause__`), so the hook's own traceback is shown too.
/// `KeyboardInterrupt` and `SystemExit` pass through unchanged.
pub fn failed(py: Python<'_>, name: &str, err: PyErr, at: Option<At>) -> PyErr {
    if !err.is_instance_of::<PyException>(py) {
        return err;
    }
    let value = err.value(py);
    let kind = type_name(value.as_any());
    let text = value
        .str()
        .map(|s| s.to_string())
        .unwrap_or_else(|_| "<unprintable>".to_string());
    let mut msg = format!("{name} raised {kind}");
    if !text.is_empty() {
        msg.push_str(": ");
        msg.push_str(&text);
    }
    if let Some(at) = at {
        msg.push_str(&format!(" ({at})"));
    }
    let wrapped = MantleError::new_err(msg);
    wrapped.set_cause(py, Some(err));
    wrapped
}

/// Runs a free hook from a destructor, where nothing can be raised: its exception is
/// reported as Python reports one from `__del__` (`sys.unraisablehook`).
pub fn call_in_drop(hook: &Py<PyAny>, args: Vec<Py<PyAny>>) {
    Python::attach(|py| {
        let args = match PyTuple::new(py, args) {
            Ok(args) => args,
            Err(e) => return e.write_unraisable(py, None),
        };
        if let Err(e) = hook.bind(py).call1(args) {
            e.write_unraisable(py, Some(hook.bind(py)));
        }
    });
}
