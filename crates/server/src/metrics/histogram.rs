//! The store read latency histogram: fixed buckets of relaxed atomics, so the request path
//! observes without allocating or locking; [`super::exposition`] encodes it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds, in microseconds, of the store read latency histogram's buckets: from a
/// memtable hit (a few microseconds) to a read stuck behind a compaction stall.
pub const READ_LATENCY_BOUNDS_US: [u64; 14] = [
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 50_000, 250_000, 1_000_000,
];

/// A Prometheus histogram of durations: fixed buckets of relaxed atomic counters, so
/// observing costs a few adds and never allocates or locks.
#[derive(Default, Debug)]
pub struct LatencyHistogram {
    /// Per bucket (not cumulative); the last one is `+Inf`.
    buckets: [AtomicU64; READ_LATENCY_BOUNDS_US.len() + 1],
    sum_ns: AtomicU64,
    count: AtomicU64,
}

impl LatencyHistogram {
    pub fn observe(&self, elapsed: Duration) {
        let us = elapsed.as_micros().min(u128::from(u64::MAX)) as u64;
        let bucket = READ_LATENCY_BOUNDS_US.partition_point(|&bound| bound < us);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let ns = elapsed.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// `(upper bound in seconds, observations in that bucket)`, the last bound infinite, and
    /// the sum in seconds; the count is the buckets' total, so the three always agree.
    pub(super) fn buckets(&self) -> (Vec<(f64, u64)>, f64, u64) {
        let buckets: Vec<(f64, u64)> = self
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let bound = READ_LATENCY_BOUNDS_US
                    .get(i)
                    .map_or(f64::INFINITY, |&us| us as f64 / 1e6);
                (bound, b.load(Ordering::Relaxed))
            })
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        (buckets, sum, count)
    }
}
