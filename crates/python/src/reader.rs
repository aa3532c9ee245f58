//! `mantle.TraceReader`: a trace file (any format `mantle` reads) that iterates its requests
//! as `(time, key, size, op)` tuples, and names the trace for the other calls.

use crate::error;
use crate::input::TraceInput;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use pyo3::{intern, IntoPyObjectExt};
use std::path::PathBuf;

#[pyclass(module = "mantle._mantle", frozen)]
pub struct TraceReader {
    pub input: TraceInput,
    timed: bool,
}

#[pymethods]
impl TraceReader {
    /// Opens `path` once to check it (a missing or unreadable file fails here, not later).
    #[new]
    #[pyo3(signature = (path, format=None, *, csv=None, block_size=512, expand_blocks=false, rw_ops=false, max_record_requests=trace::ReadOptions::DEFAULT_MAX_RECORD_REQUESTS))]
    fn new(
        path: PathBuf,
        format: Option<&str>,
        csv: Option<&str>,
        block_size: u32,
        expand_blocks: bool,
        rw_ops: bool,
        max_record_requests: u64,
    ) -> PyResult<TraceReader> {
        let input = TraceInput::new(
            path,
            format,
            csv,
            block_size,
            expand_blocks,
            rw_ops,
            max_record_requests,
        )?;
        let timed = input.open().map_err(error)?.has_timestamps();
        Ok(TraceReader { input, timed })
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.input.path.clone()
    }

    /// The format's name, as given or as detected.
    #[getter]
    fn format(&self) -> String {
        self.input.format_name()
    }

    /// Whether requests carry the trace's clock (time-based ticks need one).
    #[getter]
    fn has_timestamps(&self) -> bool {
        self.timed
    }

    /// A new pass over the trace from its first request.
    fn __iter__(&self) -> PyResult<RequestIter> {
        Ok(RequestIter {
            reader: trace::Batched::new(self.input.open().map_err(error)?),
        })
    }

    /// Unique objects and their bytes (one pass, the GIL released): what percentage cache
    /// sizes are relative to.
    fn working_set<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let input = self.input.clone();
        let ws = py
            .detach(move || {
                let mut reader = trace::Batched::new(input.open()?);
                sim::WorkingSet::scan(|| reader.next_request())
            })
            .map_err(error)?;
        let d = PyDict::new(py);
        d.set_item("objects", ws.objects)?;
        d.set_item("bytes", ws.bytes)?;
        d.set_item("has_sizes", ws.has_sizes)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "mantle.TraceReader({:?}, format={:?})",
            self.input.path.display().to_string(),
            self.input.format_name()
        )
    }
}

/// One pass over a trace's requests.
#[pyclass(module = "mantle._mantle", unsendable)]
pub struct RequestIter {
    reader: trace::Batched<Box<dyn trace::TraceReader>>,
}

#[pymethods]
impl RequestIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let Some(r) = self.reader.next_request().map_err(error)? else {
            return Ok(None);
        };
        let op: &Bound<'py, PyString> = match r.op {
            trace::Op::Get => intern!(py, "get"),
            trace::Op::Put => intern!(py, "put"),
            trace::Op::Delete => intern!(py, "delete"),
            trace::Op::Access => intern!(py, "access"),
        };
        let items = [
            r.time.into_bound_py_any(py)?,
            r.key.into_bound_py_any(py)?,
            r.size.into_bound_py_any(py)?,
            op.clone().into_any(),
        ];
        Ok(Some(PyTuple::new(py, items)?))
    }
}

// Here rather than in `input`, so the reader depends on the input and not both ways.
impl TraceInput {
    /// `trace` as the API takes it: a `mantle.TraceReader` (its options), or a path with an
    /// optional format name.
    pub fn from_py(trace: &Bound<'_, PyAny>, format: Option<&str>) -> PyResult<TraceInput> {
        if let Ok(reader) = trace.cast::<TraceReader>() {
            let input = reader.borrow().input.clone();
            if format.is_some() {
                return Err(error(
                    "format: give the format to mantle.TraceReader, not again here",
                ));
            }
            return Ok(input);
        }
        let path: PathBuf = trace.extract().map_err(|_| {
            error("trace must be a path (str or os.PathLike) or a mantle.TraceReader")
        })?;
        TraceInput::new(
            path,
            format,
            None,
            512,
            false,
            false,
            trace::ReadOptions::DEFAULT_MAX_RECORD_REQUESTS,
        )
    }
}
