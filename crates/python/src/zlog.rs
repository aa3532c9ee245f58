//! `mantle.zlog`'s native half: a Mantle shared log (docs/shared-log.md) through the typed
//! Rust client (`crates/zlog`), one method per client call. Every call releases the GIL
//! while it talks to the servers (an append may wait out a failover). Entries come back as
//! `(kind, bytes | None)` and the Python half (`python/mantle/zlog.py`) turns them into
//! values; the client's errors become the exceptions below.

use ::zlog::{Entry, Error};
use pyo3::create_exception;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Mutex;
use std::time::{Duration, Instant};

create_exception!(
    _mantle,
    LogUnavailable,
    crate::MantleError,
    "The log's servers did not answer (or kept refusing) within the deadline."
);
create_exception!(
    _mantle,
    LogWritten,
    crate::MantleError,
    "fill found the position written: it holds data, which stays."
);
create_exception!(
    _mantle,
    LogRefused,
    crate::MantleError,
    "A server refused a shared-log request; the message says why."
);

fn raised(e: Error) -> PyErr {
    match e {
        Error::Unavailable(_) => LogUnavailable::new_err(e.to_string()),
        Error::Written => LogWritten::new_err(e.to_string()),
        Error::Refused(_) => LogRefused::new_err(e.to_string()),
    }
}

/// One node's log or a cluster's: the client is generic over its connection (boxed: the
/// two differ in size).
enum Client {
    Node(Box<::zlog::Log<redis::Connection>>),
    Cluster(Box<::zlog::Log<redis::cluster::ClusterConnection>>),
}

/// Runs `$body` with `$log` bound to whichever client it is.
macro_rules! with_log {
    ($client:expr, |$log:ident| $body:expr) => {
        match $client {
            Client::Node($log) => $body,
            Client::Cluster($log) => $body,
        }
    };
}

/// An open shared log (`mantle.zlog.Log` wraps it).
#[pyclass(module = "mantle._mantle")]
pub struct SharedLog {
    // A Mutex: the client needs `&mut` for every call and the class must be shareable.
    client: Mutex<Client>,
    name: String,
}

/// `deadline=` in seconds, checked before anything is opened.
fn deadline_of(seconds: Option<f64>) -> PyResult<Option<Duration>> {
    seconds
        .map(|s| {
            Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| crate::error(format!("deadline must be positive seconds, got {s}")))
        })
        .transpose()
}

impl SharedLog {
    fn call<T: Send>(
        &self,
        py: Python<'_>,
        op: impl FnOnce(&mut Client) -> ::zlog::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut client = self.client.lock().unwrap_or_else(|e| e.into_inner());
            op(&mut client)
        })
        .map_err(raised)
    }

    fn opened(client: Client, deadline: Option<Duration>) -> PyResult<SharedLog> {
        let mut client = client;
        if let Some(deadline) = deadline {
            with_log!(&mut client, |log| log.set_deadline(deadline));
        }
        let name = with_log!(&client, |log| log.name().to_string());
        Ok(SharedLog {
            client: Mutex::new(client),
            name,
        })
    }
}

#[pymethods]
impl SharedLog {
    /// Opens (creating on first use) the log `name` on the single node at `url`
    /// (`redis://HOST:PORT`).
    #[staticmethod]
    #[pyo3(signature = (url, name, *, deadline=None))]
    fn open(py: Python<'_>, url: String, name: String, deadline: Option<f64>) -> PyResult<Self> {
        let deadline = deadline_of(deadline)?;
        let log = py
            .detach(|| ::zlog::Log::open(&url, &name))
            .map_err(raised)?;
        SharedLog::opened(Client::Node(Box::new(log)), deadline)
    }

    /// Opens the log `name` on the cluster reachable at any of `urls`.
    #[staticmethod]
    #[pyo3(signature = (urls, name, *, deadline=None))]
    fn open_cluster(
        py: Python<'_>,
        urls: Vec<String>,
        name: String,
        deadline: Option<f64>,
    ) -> PyResult<Self> {
        if urls.is_empty() {
            return Err(crate::error("open_cluster needs at least one node's URL"));
        }
        let deadline = deadline_of(deadline)?;
        let log = py
            .detach(|| ::zlog::Log::open_cluster(&urls, &name))
            .map_err(raised)?;
        SharedLog::opened(Client::Cluster(Box::new(log)), deadline)
    }

    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The newest epoch this client has seen.
    #[getter]
    fn epoch(&self) -> u64 {
        with_log!(
            &*self.client.lock().unwrap_or_else(|e| e.into_inner()),
            |log| log.epoch()
        )
    }

    /// How many nodes each entry is written to, and how many objects positions are
    /// striped over (from the servers, `ZLOG.OPEN`).
    #[getter]
    fn replicas(&self) -> u32 {
        with_log!(
            &*self.client.lock().unwrap_or_else(|e| e.into_inner()),
            |log| log.layout().replicas()
        )
    }

    #[getter]
    fn stripes(&self) -> u32 {
        with_log!(
            &*self.client.lock().unwrap_or_else(|e| e.into_inner()),
            |log| log.layout().stripes()
        )
    }

    /// Appends `data`; its position once every replica holds it.
    fn append(&self, py: Python<'_>, data: Vec<u8>) -> PyResult<u64> {
        self.call(py, |c| with_log!(c, |log| log.append(&data)))
    }

    /// What `pos` holds: `(kind, data)`, kind one of "data", "not_written", "filled",
    /// "trimmed".
    fn read<'py>(
        &self,
        py: Python<'py>,
        pos: u64,
    ) -> PyResult<(&'static str, Option<Bound<'py, PyBytes>>)> {
        let entry = self.call(py, |c| with_log!(c, |log| log.read(pos)))?;
        Ok(match entry {
            Entry::Data(data) => ("data", Some(PyBytes::new(py, &data))),
            Entry::NotWritten => ("not_written", None),
            Entry::Filled => ("filled", None),
            Entry::Trimmed => ("trimmed", None),
        })
    }

    /// The position the next append gets (CheckTail).
    fn tail(&self, py: Python<'_>) -> PyResult<u64> {
        self.call(py, |c| with_log!(c, |log| log.tail()))
    }

    /// Reserves `count` positions: `(epoch, first, count)`.
    #[pyo3(signature = (count=1))]
    fn next(&self, py: Python<'_>, count: u64) -> PyResult<(u64, u64, u64)> {
        let p = self.call(py, |c| with_log!(c, |log| log.next(count)))?;
        Ok((p.epoch, p.first, p.count))
    }

    /// Writes `data` at a position reserved by `next` at `epoch`. False: the position was
    /// lost (filled by a reader, the epoch moved on, a replica's node is gone); reserve
    /// another.
    fn write_at(&self, py: Python<'_>, epoch: u64, pos: u64, data: Vec<u8>) -> PyResult<bool> {
        self.call(py, |c| {
            with_log!(c, |log| log.write_at(Instant::now(), epoch, pos, &data))
        })
    }

    /// Invalidates `pos` if nothing was written there (raises LogWritten if it was).
    fn fill(&self, py: Python<'_>, pos: u64) -> PyResult<()> {
        self.call(py, |c| with_log!(c, |log| log.fill(pos)))
    }

    /// Trims `pos`: its entry is dropped, reads say it was trimmed.
    fn trim(&self, py: Python<'_>, pos: u64) -> PyResult<()> {
        self.call(py, |c| with_log!(c, |log| log.trim(pos)))
    }

    /// Trims every position below `pos`.
    fn trim_to(&self, py: Python<'_>, pos: u64) -> PyResult<()> {
        self.call(py, |c| with_log!(c, |log| log.trim_to(pos)))
    }

    fn __repr__(&self) -> String {
        format!("SharedLog({:?}, epoch={})", self.name, self.epoch())
    }
}
