//! Per-interval counters over the whole trace in bounded memory.
//!
//! Rates over time (reads/s, writes/s), the key space and the sliding-window distinct-key count
//! are kept in at most [`MAX_BUCKETS`] buckets: the bucket width starts at 1/1024 s and doubles
//! (merging neighbours) whenever the trace outgrows the buckets, so any trace length fits.

use serde::Serialize;

/// Upper bound on buckets kept.
pub const MAX_BUCKETS: usize = 2048;
const FIRST_WIDTH: f64 = 1.0 / 1024.0;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Bucket {
    reads: u64,
    writes: u64,
    requests: u64,
    /// Distinct keys seen since the start, at the bucket's last access.
    keyspace: u64,
    /// Distinct keys in the sliding window, at the bucket's last access.
    window_keys: u64,
}

/// Adaptive-width time series of request counters.
pub struct TimeSeries {
    width: f64,
    buckets: Vec<Bucket>,
}

/// The series as plain columns, one entry per bucket (`time` is the bucket start, seconds
/// from the first request).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SeriesColumns {
    pub bucket_s: f64,
    pub time: Vec<f64>,
    pub read_rate: Vec<f64>,
    pub write_rate: Vec<f64>,
    pub request_rate: Vec<f64>,
    pub keyspace: Vec<u64>,
    pub window_keys: Vec<u64>,
}

impl Default for TimeSeries {
    fn default() -> Self {
        TimeSeries {
            width: FIRST_WIDTH,
            buckets: Vec::new(),
        }
    }
}

impl TimeSeries {
    /// Records one request at relative time `t >= 0` (non-decreasing across calls).
    pub fn record(&mut self, t: f64, read: bool, write: bool, keyspace: u64, window_keys: u64) {
        let mut index = (t / self.width) as usize;
        while index >= MAX_BUCKETS {
            self.coarsen();
            index = (t / self.width) as usize;
        }
        if index >= self.buckets.len() {
            let carry = self.buckets.last().copied().unwrap_or_default();
            self.buckets.resize(
                index + 1,
                Bucket {
                    keyspace: carry.keyspace,
                    window_keys: carry.window_keys,
                    ..Bucket::default()
                },
            );
        }
        let b = &mut self.buckets[index];
        b.requests += 1;
        b.reads += u64::from(read);
        b.writes += u64::from(write);
        b.keyspace = keyspace;
        b.window_keys = window_keys;
    }

    fn coarsen(&mut self) {
        let merged: Vec<Bucket> = self
            .buckets
            .chunks(2)
            .map(|pair| {
                let last = pair[pair.len() - 1];
                Bucket {
                    reads: pair.iter().map(|b| b.reads).sum(),
                    writes: pair.iter().map(|b| b.writes).sum(),
                    requests: pair.iter().map(|b| b.requests).sum(),
                    keyspace: last.keyspace,
                    window_keys: last.window_keys,
                }
            })
            .collect();
        self.buckets = merged;
        self.width *= 2.0;
    }

    /// Bucket width in seconds.
    pub fn width(&self) -> f64 {
        self.width
    }

    pub fn columns(&self) -> SeriesColumns {
        let w = self.width;
        let mut c = SeriesColumns {
            bucket_s: w,
            ..SeriesColumns::default()
        };
        for (i, b) in self.buckets.iter().enumerate() {
            c.time.push(i as f64 * w);
            c.read_rate.push(b.reads as f64 / w);
            c.write_rate.push(b.writes as f64 / w);
            c.request_rate.push(b.requests as f64 / w);
            c.keyspace.push(b.keyspace);
            c.window_keys.push(b.window_keys);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_traces_stay_bounded_and_keep_totals() {
        let mut s = TimeSeries::default();
        for i in 0..100_000u64 {
            s.record(i as f64 * 0.5, i % 3 != 0, i % 3 == 0, i / 10, 7);
        }
        let c = s.columns();
        assert!(c.time.len() <= MAX_BUCKETS);
        let reads: f64 = c.read_rate.iter().map(|r| r * c.bucket_s).sum();
        let writes: f64 = c.write_rate.iter().map(|r| r * c.bucket_s).sum();
        assert_eq!(reads.round() as u64 + writes.round() as u64, 100_000);
        assert_eq!(*c.keyspace.last().unwrap(), 9_999);
        // 2 requests per second, whatever the bucket width.
        let mid = c.request_rate[c.request_rate.len() / 2];
        assert!((mid - 2.0).abs() < 1e-9, "rate {mid}");
    }
}
