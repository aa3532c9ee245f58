//! The access time series a policy reads through `timeseries()`: the trait a host implements
//! and two plain series. The Lua object over it is in `series_object`.

/// The recent accesses of the cache, oldest first, as `(timestamp, keyid)` pairs where `keyid`
/// is a dense id given to each key in order of first appearance.
pub trait TimeSeries {
    /// Number of events retained.
    fn len(&self) -> usize;
    /// Event `i` (0-based, `0` is the oldest retained). Called only with `i < len()`.
    fn get(&self, i: usize) -> (f64, u64);
    /// Events ever recorded, including those that have since dropped off the front.
    ///
    /// Optional: a host that knows it lets native scans such as `:fans()` resume where the
    /// previous tick stopped instead of rescanning the whole series (`None` = always rescan).
    fn recorded(&self) -> Option<u64> {
        None
    }
    /// Whether no event is retained.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A time series held in a vector; used by `mantle policy test`, tests and benchmarks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VecSeries {
    events: Vec<(f64, u64)>,
    dropped: u64,
}

impl VecSeries {
    pub fn new(events: Vec<(f64, u64)>) -> VecSeries {
        VecSeries { events, dropped: 0 }
    }

    /// Appends one event.
    pub fn push(&mut self, time: f64, keyid: u64) {
        self.events.push((time, keyid));
    }

    /// Drops the `n` oldest events (as a bounded access log does).
    pub fn drop_oldest(&mut self, n: usize) {
        let n = n.min(self.events.len());
        self.events.drain(..n);
        self.dropped += n as u64;
    }

    pub fn events(&self) -> &[(f64, u64)] {
        &self.events
    }
}

impl TimeSeries for VecSeries {
    fn len(&self) -> usize {
        self.events.len()
    }
    fn get(&self, i: usize) -> (f64, u64) {
        self.events[i]
    }
    fn recorded(&self) -> Option<u64> {
        Some(self.dropped + self.events.len() as u64)
    }
}

/// An empty series, for ticks where the host keeps no access log.
pub struct NoSeries;

impl TimeSeries for NoSeries {
    fn len(&self) -> usize {
        0
    }
    fn get(&self, _i: usize) -> (f64, u64) {
        (0.0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vec_series_counts_dropped_events_as_recorded() {
        let mut s = VecSeries::new(vec![(1.0, 0), (2.0, 1), (3.0, 0)]);
        s.drop_oldest(2);
        assert_eq!(s.len(), 1);
        assert_eq!(s.get(0), (3.0, 0));
        assert_eq!(s.recorded(), Some(3));
    }
}
