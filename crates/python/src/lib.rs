//! `mantle._mantle`, the native half of the `mantle` Python package: thin bindings over the
//! Mantle crates. Every figure comes from the same library calls the CLI makes; the Python
//! half (`python/mantle`) only turns results into pandas objects.
//!
//! Long runs (replay, compare, analyze, `Cache.process_trace`, trace generation) release the
//! GIL, so other Python threads keep running, and check for Ctrl-C as they go. Errors become
//! `mantle.MantleError` with the library's one-line message, never a panic across the FFI
//! boundary.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

mod analysis;
mod cache_obj;
mod gen;
mod input;
mod mrc;
mod plugin_admission;
mod plugin_cache;
mod plugin_hook;
mod plugin_request;
mod policy_check;
mod reader;
mod run;
mod zlog;

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

/// Why a run with the GIL released ended early: bad input (raised as `MantleError`), or a
/// Python exception that came up meanwhile (Ctrl-C's `KeyboardInterrupt`).
pub(crate) enum Stop {
    Input(String),
    Python(PyErr),
}

impl From<String> for Stop {
    fn from(msg: String) -> Stop {
        Stop::Input(msg)
    }
}

impl From<trace::TraceError> for Stop {
    fn from(e: trace::TraceError) -> Stop {
        Stop::Input(e.to_string())
    }
}

impl From<Stop> for PyErr {
    fn from(stop: Stop) -> PyErr {
        match stop {
            Stop::Input(msg) => error(msg),
            Stop::Python(e) => e,
        }
    }
}

/// Lets Ctrl-C stop a long run: every [`Signals::EVERY`] requests it takes the GIL back for
/// a moment to run pending signal handlers (on the main thread; elsewhere a no-op). Runs on
/// worker threads, where Python never delivers signals, watch a flag the main thread sets
/// when a handler raised instead.
pub(crate) struct Signals<'a> {
    left: u32,
    cancelled: Option<&'a AtomicBool>,
}

impl<'a> Signals<'a> {
    /// About a millisecond of replay: rare enough to cost nothing, often enough to feel instant.
    const EVERY: u32 = 1 << 16;

    pub fn new() -> Signals<'a> {
        Signals {
            left: Self::EVERY,
            cancelled: None,
        }
    }

    /// For a worker thread: stops once `cancelled` is set (by the thread that checks signals).
    pub fn watching(cancelled: &'a AtomicBool) -> Signals<'a> {
        Signals {
            left: Self::EVERY,
            cancelled: Some(cancelled),
        }
    }

    #[inline]
    pub fn poll(&mut self) -> Result<(), Stop> {
        self.left -= 1;
        if self.left == 0 {
            self.left = Self::EVERY;
            match self.cancelled {
                Some(flag) if flag.load(Ordering::Relaxed) => {
                    return Err(Stop::Input("interrupted".to_string()))
                }
                Some(_) => {}
                None => Python::attach(|py| py.check_signals()).map_err(Stop::Python)?,
            }
        }
        Ok(())
    }
}

#[pymodule]
fn _mantle(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MantleError", m.py().get_type::<MantleError>())?;
    m.add_class::<reader::TraceReader>()?;
    m.add_class::<reader::RequestIter>()?;
    m.add_class::<cache_obj::Cache>()?;
    m.add_class::<run::Setup>()?;
    m.add_class::<plugin_cache::PluginCache>()?;
    m.add_class::<plugin_cache::CommonCacheParams>()?;
    m.add_class::<plugin_admission::PluginAdmissioner>()?;
    m.add_class::<plugin_request::PluginRequest>()?;
    m.add_class::<zlog::SharedLog>()?;
    m.add("LogUnavailable", m.py().get_type::<zlog::LogUnavailable>())?;
    m.add("LogWritten", m.py().get_type::<zlog::LogWritten>())?;
    m.add("LogRefused", m.py().get_type::<zlog::LogRefused>())?;
    m.add_function(wrap_pyfunction!(run::replay_json, m)?)?;
    m.add_function(wrap_pyfunction!(run::compare_json, m)?)?;
    m.add_function(wrap_pyfunction!(analysis::analyze_json, m)?)?;
    m.add_function(wrap_pyfunction!(mrc::mrc_json, m)?)?;
    m.add_function(wrap_pyfunction!(policy_check::check_policy, m)?)?;
    m.add_function(wrap_pyfunction!(gen::gen_parsplice, m)?)?;
    Ok(())
}
