//! The working set of a trace (unique objects and their bytes), which percentage cache sizes
//! are relative to. It takes a pass over the trace, as libCacheSim's does.

use std::collections::HashMap;
use trace::Request;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WorkingSet {
    pub objects: u64,
    /// Sum over unique objects of the size each had when first seen.
    pub bytes: u64,
    /// Whether any request carried a size other than 1, i.e. the trace has object sizes.
    pub has_sizes: bool,
}

impl WorkingSet {
    /// Scans every request `next` yields.
    pub fn scan<E>(mut next: impl FnMut() -> Result<Option<Request>, E>) -> Result<Self, E> {
        let mut seen: HashMap<u64, ()> = HashMap::new();
        let mut ws = WorkingSet::default();
        while let Some(req) = next()? {
            if req.size != 1 {
                ws.has_sizes = true;
            }
            if seen.insert(req.key, ()).is_none() {
                ws.objects += 1;
                ws.bytes += req.size as u64;
            }
        }
        Ok(ws)
    }
}

/// The capacity `--cache-size` asks for, and the working set when a percentage needed one (a
/// pass over the trace, opened by `open`). A percentage is of the bytes when the trace carries
/// object sizes, else of the objects. `trace` names the file in the error of an empty trace.
pub fn resolve_capacity(
    size: units::CacheSize,
    open: impl Fn() -> Result<Box<dyn trace::TraceReader>, trace::TraceError>,
    trace: &std::path::Path,
) -> anyhow::Result<(cache::Capacity, Option<WorkingSet>)> {
    use cache::Capacity;
    use units::CacheSize;
    Ok(match size {
        CacheSize::Objects(n) => (Capacity::objects(n), None),
        CacheSize::Bytes(n) => (Capacity::bytes(n), None),
        CacheSize::Unlimited => (Capacity::default(), None),
        CacheSize::Percent(percent) => {
            let mut reader = open()?;
            let ws = WorkingSet::scan(|| reader.next_request())?;
            if ws.objects == 0 {
                anyhow::bail!(
                    "--cache-size {percent}%: {} has no requests, so it has no working set",
                    trace.display()
                );
            }
            (ws.capacity_of(size), Some(ws))
        }
    })
}

impl WorkingSet {
    /// The capacity `size` asks for on a trace with this working set: a percentage is of the
    /// bytes when the trace carries object sizes, else of the objects (at least 1).
    pub fn capacity_of(&self, size: units::CacheSize) -> cache::Capacity {
        use cache::Capacity;
        use units::CacheSize;
        match size {
            CacheSize::Objects(n) => Capacity::objects(n),
            CacheSize::Bytes(n) => Capacity::bytes(n),
            CacheSize::Unlimited => Capacity::default(),
            CacheSize::Percent(percent) => {
                let of = |total: u64| ((total as f64 * percent / 100.0) as u64).max(1);
                if self.has_sizes {
                    Capacity::bytes(of(self.bytes))
                } else {
                    Capacity::objects(of(self.objects))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_key_once_with_its_first_size() {
        let reqs = [(1, 10), (2, 20), (1, 99), (3, 5)];
        let mut it = reqs.iter().map(|&(key, size)| Request {
            key,
            size,
            ..Request::default()
        });
        let ws = WorkingSet::scan(|| Ok::<_, ()>(it.next())).unwrap();
        assert_eq!(
            ws,
            WorkingSet {
                objects: 3,
                bytes: 35,
                has_sizes: true
            }
        );
    }
}
