//! The cache's bounded access log ([`cache::AccessLog`]) is what every host hands a policy as
//! `timeseries()`: replay records it in its request loop, `mantle serve` on its policy thread.
//! One implementation, so the ids and events a policy reads are the same in both hosts.

use crate::series::TimeSeries;
use cache::AccessLog;

impl TimeSeries for AccessLog {
    fn len(&self) -> usize {
        AccessLog::len(self)
    }
    fn get(&self, i: usize) -> (f64, u64) {
        AccessLog::get(self, i)
    }
    fn recorded(&self) -> Option<u64> {
        Some(AccessLog::recorded(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_is_read_oldest_first_with_dense_ids() {
        let mut log = AccessLog::new(2);
        for (t, k) in [(1.0, 90), (2.0, 7), (3.0, 90)] {
            log.record(t, k);
        }
        let series: &dyn TimeSeries = &log;
        assert_eq!(series.len(), 2);
        assert_eq!(series.get(0), (2.0, 1));
        assert_eq!(series.get(1), (3.0, 0));
        assert_eq!(series.recorded(), Some(3));
    }
}
