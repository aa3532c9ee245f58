//! `mantle.Request`: the request a plugin's hooks see, with libCacheSim's attribute names
//! (`obj_id`, `obj_size`, `clock_time`, `op`, `valid`). One object per cache, rewritten
//! before every hook call, so serving a request allocates no Python object for it (the same
//! contract as libCacheSim, whose hooks get a view of the request it reuses): a hook that
//! keeps a request past its call must copy the fields it needs.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyString;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

/// Frozen with atomic fields: hooks read it without a borrow check, and the host rewrites it
/// through a shared reference while Python holds references to it.
#[pyclass(module = "mantle._mantle", name = "Request", frozen)]
pub struct PluginRequest {
    obj_id: AtomicU64,
    obj_size: AtomicU32,
    /// `f64::to_bits` of the trace's time (seconds).
    clock_time: AtomicU64,
    op: AtomicU8,
}

impl PluginRequest {
    pub fn new() -> PluginRequest {
        PluginRequest {
            obj_id: AtomicU64::new(0),
            obj_size: AtomicU32::new(1),
            clock_time: AtomicU64::new(0f64.to_bits()),
            op: AtomicU8::new(op_code(trace::Op::Get)),
        }
    }

    /// The object id of the request being served.
    #[inline]
    pub fn obj_id_now(&self) -> u64 {
        self.obj_id.load(Relaxed)
    }

    /// Points the request at the one being served.
    #[inline]
    pub fn set(&self, obj_id: u64, obj_size: u32, clock_time: f64, op: trace::Op) {
        self.obj_id.store(obj_id, Relaxed);
        self.obj_size.store(obj_size, Relaxed);
        self.clock_time.store(clock_time.to_bits(), Relaxed);
        self.op.store(op_code(op), Relaxed);
    }
}

fn op_code(op: trace::Op) -> u8 {
    match op {
        trace::Op::Get => 0,
        trace::Op::Put => 1,
        trace::Op::Delete => 2,
        trace::Op::Access => 3,
    }
}

#[pymethods]
impl PluginRequest {
    /// The object's id (the trace's key).
    #[getter]
    fn obj_id(&self) -> u64 {
        self.obj_id.load(Relaxed)
    }

    /// The object's size in bytes as this request gives it.
    #[getter]
    fn obj_size(&self) -> u32 {
        self.obj_size.load(Relaxed)
    }

    /// The trace's time of the request, in seconds (0 where the trace has no clock).
    #[getter]
    fn clock_time(&self) -> f64 {
        f64::from_bits(self.clock_time.load(Relaxed))
    }

    /// `"get"`, `"put"`, `"delete"` or `"access"` (Mantle's operation names).
    #[getter]
    fn op<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        let name = match self.op.load(Relaxed) {
            0 => intern!(py, "get"),
            1 => intern!(py, "put"),
            2 => intern!(py, "delete"),
            _ => intern!(py, "access"),
        };
        name.clone()
    }

    /// Always true (libCacheSim's readers mark the end of a trace with an invalid request;
    /// Mantle's hooks never see one).
    #[getter]
    fn valid(&self) -> bool {
        true
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "mantle.Request(obj_id={}, obj_size={}, clock_time={}, op={:?})",
            self.obj_id(),
            self.obj_size(),
            self.clock_time(),
            self.op(py).to_string()
        )
    }
}
