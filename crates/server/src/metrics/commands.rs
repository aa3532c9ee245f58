//! Per-command latency: one histogram per row of the command table, in a fixed array indexed
//! by the row, so recording a command's time costs a few relaxed atomic adds and never
//! allocates or locks. `INFO commandstats|latencystats`, `LATENCY LATEST|HISTOGRAM`,
//! `/metrics` and the dashboard read it.
//!
//! Buckets are log-linear in microseconds: exact below 4 µs, then four per power of two, so a
//! percentile read from them is within 25% of the true value (Redis reports its
//! `latencystats` from an HDR histogram with similar precision).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Most rows the command table may have (checked at compile time in `cmd`).
pub const MAX_COMMANDS: usize = 128;

/// Buckets per command: 4 exact ones (0..=3 µs), then 4 per power of two up to 2^37 µs.
const BUCKETS: usize = 4 + 4 * 36;

/// What is kept per command.
pub struct CommandLatency {
    buckets: [AtomicU64; BUCKETS],
    calls: AtomicU64,
    /// Total time, in nanoseconds (microseconds would lose every sub-µs GET).
    total_ns: AtomicU64,
    /// LATENCY LATEST: the slowest call so far, and the latest over the threshold.
    max_us: AtomicU64,
    spike_us: AtomicU64,
    /// Unix seconds of the latest call over the threshold (0: none yet).
    spike_at: AtomicU64,
}

impl Default for CommandLatency {
    fn default() -> Self {
        CommandLatency {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            calls: AtomicU64::new(0),
            total_ns: AtomicU64::new(0),
            max_us: AtomicU64::new(0),
            spike_us: AtomicU64::new(0),
            spike_at: AtomicU64::new(0),
        }
    }
}

/// The bucket of a latency of `us` microseconds.
fn bucket_of(us: u64) -> usize {
    if us < 4 {
        return us as usize;
    }
    let octave = 63 - us.leading_zeros() as usize; // ≥ 2
    let sub = ((us >> (octave - 2)) & 3) as usize;
    (4 + (octave - 2) * 4 + sub).min(BUCKETS - 1)
}

/// The largest latency (µs) bucket `i` holds.
fn bucket_upper(i: usize) -> u64 {
    if i < 4 {
        return i as u64;
    }
    let octave = (i - 4) / 4 + 2;
    let sub = ((i - 4) % 4) as u64;
    ((4 + sub) << (octave - 2)) + (1u64 << (octave - 2)) - 1
}

/// One command's figures at the time read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommandFigures {
    pub calls: u64,
    pub total_us: f64,
    pub max_us: u64,
    /// (unix seconds, µs) of the latest call over `latency-monitor-threshold`.
    pub latest_spike: Option<(u64, u64)>,
    /// Per bucket, not cumulative: (largest µs it holds, calls).
    buckets: Vec<(u64, u64)>,
}

impl CommandFigures {
    /// The latency (µs) at quantile `q` (0..=1): the largest value of the bucket it falls in,
    /// 0 without calls.
    pub fn percentile_us(&self, q: f64) -> u64 {
        let total: u64 = self.buckets.iter().map(|(_, n)| n).sum();
        if total == 0 {
            return 0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for &(upper, n) in &self.buckets {
            seen += n;
            if seen >= rank {
                return upper;
            }
        }
        self.buckets.last().map_or(0, |b| b.0)
    }

    /// Cumulative calls that took less than each power of two of microseconds (1, 2, 4, ...),
    /// up to the first that counts every call: Redis's `LATENCY HISTOGRAM` buckets and the
    /// Prometheus histogram's. Exact: every fine bucket ends just under a power of two.
    pub fn power_of_two_buckets(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut cumulative = 0;
        let mut fine = self.buckets.iter().peekable();
        let mut bound = 1u64;
        while cumulative < self.calls_in_buckets() {
            while let Some(&&(upper, n)) = fine.peek() {
                if upper >= bound {
                    break;
                }
                cumulative += n;
                fine.next();
            }
            out.push((bound, cumulative));
            bound = bound.saturating_mul(2);
            if bound == u64::MAX {
                break;
            }
        }
        out
    }

    fn calls_in_buckets(&self) -> u64 {
        self.buckets.iter().map(|(_, n)| n).sum()
    }
}

/// One [`CommandLatency`] per row of the command table.
pub struct CommandLatencies {
    rows: Box<[CommandLatency]>,
    /// `latency-monitor-threshold` in milliseconds (0: LATENCY LATEST records nothing, as in
    /// Redis).
    pub monitor_threshold_ms: AtomicU64,
}

impl Default for CommandLatencies {
    fn default() -> Self {
        CommandLatencies {
            rows: (0..MAX_COMMANDS)
                .map(|_| CommandLatency::default())
                .collect(),
            monitor_threshold_ms: AtomicU64::new(0),
        }
    }
}

impl CommandLatencies {
    /// Records `calls` calls of the command in `row` that took `elapsed` together (a batch of
    /// deferred SETs is recorded as its share each).
    #[inline]
    pub fn record(&self, row: usize, elapsed: Duration, calls: u64) {
        self.record_ns(
            row,
            elapsed.as_nanos().min(u128::from(u64::MAX)) as u64,
            calls,
        );
    }

    /// [`CommandLatencies::record`] with the time in nanoseconds (what the request path measures).
    pub fn record_ns(&self, row: usize, ns: u64, calls: u64) {
        let Some(latency) = self.rows.get(row) else {
            return;
        };
        let each_us = ns / calls.max(1) / 1000;
        latency.buckets[bucket_of(each_us)].fetch_add(calls, Ordering::Relaxed);
        latency.calls.fetch_add(calls, Ordering::Relaxed);
        latency.total_ns.fetch_add(ns, Ordering::Relaxed);
        if each_us > latency.max_us.load(Ordering::Relaxed) {
            latency.max_us.fetch_max(each_us, Ordering::Relaxed);
        }
        let threshold_ms = self.monitor_threshold_ms.load(Ordering::Relaxed);
        if threshold_ms > 0 && each_us >= threshold_ms.saturating_mul(1000) {
            self.spike(latency, each_us);
        }
    }

    #[cold]
    fn spike(&self, latency: &CommandLatency, us: u64) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        latency.spike_us.store(us, Ordering::Relaxed);
        latency.spike_at.store(now, Ordering::Relaxed);
    }

    /// The figures of `row` (all zero for a row out of range).
    pub fn read(&self, row: usize) -> CommandFigures {
        let Some(latency) = self.rows.get(row) else {
            return CommandFigures::default();
        };
        let at = latency.spike_at.load(Ordering::Relaxed);
        CommandFigures {
            calls: latency.calls.load(Ordering::Relaxed),
            total_us: latency.total_ns.load(Ordering::Relaxed) as f64 / 1000.0,
            max_us: latency.max_us.load(Ordering::Relaxed),
            latest_spike: (at != 0).then(|| (at, latency.spike_us.load(Ordering::Relaxed))),
            buckets: latency
                .buckets
                .iter()
                .enumerate()
                .map(|(i, n)| (bucket_upper(i), n.load(Ordering::Relaxed)))
                .collect(),
        }
    }

    /// CONFIG RESETSTAT.
    pub fn reset(&self) {
        for latency in self.rows.iter() {
            for bucket in &latency.buckets {
                bucket.store(0, Ordering::Relaxed);
            }
            for counter in [
                &latency.calls,
                &latency.total_ns,
                &latency.max_us,
                &latency.spike_us,
                &latency.spike_at,
            ] {
                counter.store(0, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_latency_in_order() {
        let mut last = 0;
        for i in 0..BUCKETS {
            let upper = bucket_upper(i);
            assert!(i == 0 || upper > last, "bucket {i}");
            assert_eq!(bucket_of(upper), i, "upper of {i}");
            if i + 1 < BUCKETS {
                assert_eq!(bucket_of(upper + 1), i + 1, "above {i}");
            }
            last = upper;
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        // Within 25%: the largest value of a bucket over its smallest.
        for i in 5..BUCKETS {
            let lower = bucket_upper(i - 1) + 1;
            assert!(bucket_upper(i) as f64 / lower as f64 <= 1.25, "bucket {i}");
        }
    }

    #[test]
    fn percentiles_and_power_of_two_buckets_follow_the_calls() {
        let latencies = CommandLatencies::default();
        for _ in 0..98 {
            latencies.record(3, Duration::from_micros(2), 1);
        }
        latencies.record(3, Duration::from_micros(100), 1);
        latencies.record(3, Duration::from_micros(1000), 1);
        let figures = latencies.read(3);
        assert_eq!(figures.calls, 100);
        assert_eq!(figures.percentile_us(0.5), 2);
        assert_eq!(figures.percentile_us(0.99), 111); // 100 µs's bucket holds 96..=111
        assert_eq!(figures.percentile_us(0.999), 1023);
        assert_eq!(figures.max_us, 1000);
        let buckets = figures.power_of_two_buckets();
        assert_eq!(buckets[0], (1, 0));
        assert_eq!(buckets[1], (2, 0));
        assert_eq!(buckets[2], (4, 98));
        assert_eq!(*buckets.last().unwrap(), (1024, 100));
        // Another row is untouched; a batch counts each call at its share.
        assert_eq!(latencies.read(4).calls, 0);
        latencies.record(4, Duration::from_micros(160), 16);
        assert_eq!(latencies.read(4).percentile_us(1.0), 11);
        latencies.reset();
        assert_eq!(latencies.read(3), latencies.read(5));
    }

    #[test]
    fn spikes_are_recorded_only_over_the_monitor_threshold() {
        let latencies = CommandLatencies::default();
        latencies.record(0, Duration::from_millis(5), 1);
        assert_eq!(latencies.read(0).latest_spike, None);
        latencies.monitor_threshold_ms.store(2, Ordering::Relaxed);
        latencies.record(0, Duration::from_millis(1), 1);
        assert_eq!(latencies.read(0).latest_spike, None);
        latencies.record(0, Duration::from_millis(3), 1);
        assert_eq!(latencies.read(0).latest_spike.unwrap().1, 3000);
        assert_eq!(latencies.read(0).max_us, 5000);
    }
}
