//! `mantle.gen_parsplice`: `trace::gen::parsplice` (what `mantle gen parsplice` writes).

use crate::analysis::seconds;
use crate::error;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;
use trace::gen::parsplice::{self, ParspliceParams};

#[pyfunction]
#[pyo3(signature = (output, *, seed=1, duration=None, workers=28, growth_rate=1.0, temperature=1.0, start_time=0))]
#[allow(clippy::too_many_arguments)]
pub fn gen_parsplice<'py>(
    py: Python<'py>,
    output: PathBuf,
    seed: u64,
    duration: Option<&Bound<'py, PyAny>>,
    workers: u32,
    growth_rate: f64,
    temperature: f64,
    start_time: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let duration = duration
        .map(|d| seconds(d, "duration"))
        .transpose()?
        .unwrap_or(3600.0);
    let params = ParspliceParams {
        seed,
        duration_s: duration.round().max(1.0) as u64,
        workers,
        growth_rate,
        temperature,
        start_time,
    };
    params.validate().map_err(error)?;
    let summary = py
        .detach(|| parsplice::write_file(&params, &output))
        .map_err(|e| error(format!("generating the ParSplice trace: {e}")))?;
    let d = PyDict::new(py);
    d.set_item("path", output)?;
    d.set_item("requests", summary.requests)?;
    d.set_item("gets", summary.gets)?;
    d.set_item("puts", summary.puts)?;
    d.set_item("unique_keys", summary.unique_keys)?;
    d.set_item("superbasins", summary.fans)?;
    Ok(d)
}
