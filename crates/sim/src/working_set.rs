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
