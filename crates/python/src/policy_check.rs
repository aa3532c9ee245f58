//! `mantle.check_policy`: `policy::check` (what `mantle policy check` prints).

use crate::error;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;

#[pyfunction]
#[pyo3(signature = (path, max_instructions=None, max_memory=None))]
pub fn check_policy<'py>(
    py: Python<'py>,
    path: PathBuf,
    max_instructions: Option<u64>,
    max_memory: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let source = policy::read_policy_file(&path).map_err(error)?;
    let mut limits = policy::Limits::default();
    if let Some(n) = max_instructions {
        limits.instructions = n;
    }
    if let Some(m) = max_memory {
        limits.memory_bytes = m;
    }
    let file = path.display().to_string();
    let report = py.detach(|| policy::check::check_source(&file, &source, &limits));
    let d = PyDict::new(py);
    d.set_item("file", &report.file)?;
    d.set_item("ok", report.ok())?;
    d.set_item("callbacks", PyList::new(py, &report.callbacks)?)?;
    d.set_item("ceph_dialect", report.ceph_dialect)?;
    let problems = PyList::empty(py);
    for p in &report.problems {
        problems.append((p.line, p.message.as_str()))?;
    }
    d.set_item("problems", problems)?;
    d.set_item("text", report.to_string())?;
    Ok(d)
}
