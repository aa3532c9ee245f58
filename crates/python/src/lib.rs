//! `mantle._mantle`, the native half of the `mantle` Python package: thin bindings over the
//! Mantle crates. Every figure comes from the same library calls the CLI makes; the Python
//! half (`python/mantle`) only turns results into pandas objects.
//!
//! Long runs (replay, compare, analyze, `Cache.process_trace`, trace generation) release the
//! GIL, so other Python threads keep running. Errors become `mantle.MantleError` with the
//! library's one-line message, never a panic across the FFI boundary.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

mod analysis;
mod cache_obj;
mod gen;
mod input;
mod policy_check;
mod reader;
mod run;

create_exception!(
    _mantle,
    MantleError,
    PyException,
    "Bad input to a mantle call: a missing or malformed trace, an invalid size, a policy that does not load. The message is the one the `mantle` command prints."
);

/// A `MantleError` carrying `msg`.
pub(crate) fn error(msg: impl std::fmt::Display) -> PyErr {
    MantleError::new_err(msg.to_string())
}

#[pymodule]
fn _mantle(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MantleError", m.py().get_type::<MantleError>())?;
    m.add_class::<reader::TraceReader>()?;
    m.add_class::<reader::RequestIter>()?;
    m.add_class::<cache_obj::Cache>()?;
    m.add_class::<run::Setup>()?;
    m.add_function(wrap_pyfunction!(run::replay_json, m)?)?;
    m.add_function(wrap_pyfunction!(run::compare_json, m)?)?;
    m.add_function(wrap_pyfunction!(analysis::analyze_json, m)?)?;
    m.add_function(wrap_pyfunction!(policy_check::check_policy, m)?)?;
    m.add_function(wrap_pyfunction!(gen::gen_parsplice, m)?)?;
    Ok(())
}
