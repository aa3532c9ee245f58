//! How far back reads reach (reuse ages), returns to older basins and new keys per second:
//! the measures `policies/dscache2.lua` sizes the cache from, reported for a whole trace.
//!
//! The reuse age of a read is the time since the previous access to the same key. A
//! superbasin keeps reading its states, so ages stay within the life of the open fans; a read
//! that reaches back further than a fan lasts on average is counted as a *return* to an older
//! basin. The longest age is the horizon an LRU cache must cover to miss nothing.
//!
//! Memory: one `f64` per distinct key (the time of its latest access) and a fixed histogram.

use serde::Serialize;

/// Histogram bins per doubling of the age; ages below `MIN_AGE_S` share bin 0.
const BINS_PER_DOUBLING: f64 = 16.0;
const MIN_AGE_S: f64 = 1e-3;
/// Enough doublings above 1 ms to cover ten years.
const BINS: usize = 16 * 39;

/// Streaming reuse-age statistics over dense key ids.
pub struct ReuseAges {
    latest: Vec<f64>,
    histogram: Vec<u64>,
    reads: u64,
    max_age: f64,
}

/// Reuse ages as reported.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReuseReport {
    /// Reads of a key accessed before.
    pub reads: u64,
    /// Quantiles of their reuse age in seconds (upper edge of the histogram bin, within 4.4%).
    pub p50_s: f64,
    pub p99_s: f64,
    pub p999_s: f64,
    pub p9999_s: f64,
    /// Longest reuse age (exact).
    pub max_s: f64,
    /// Reads reaching back further than the mean fan duration (`return_after_s`).
    pub returns: u64,
    pub return_after_s: f64,
    pub returns_per_hour: f64,
    /// Distinct keys per second over the whole trace.
    pub new_keys_per_s: f64,
    /// Keys created per second while a fan is open: fan heights over fan durations.
    pub new_keys_per_fan_s: f64,
}

fn bin_of(age: f64) -> usize {
    if age < MIN_AGE_S {
        0
    } else {
        (((age / MIN_AGE_S).log2() * BINS_PER_DOUBLING) as usize + 1).min(BINS - 1)
    }
}

fn upper_edge(bin: usize) -> f64 {
    if bin == 0 {
        MIN_AGE_S
    } else {
        MIN_AGE_S * (bin as f64 / BINS_PER_DOUBLING).exp2()
    }
}

impl Default for ReuseAges {
    fn default() -> Self {
        ReuseAges {
            latest: Vec::new(),
            histogram: vec![0; BINS],
            reads: 0,
            max_age: 0.0,
        }
    }
}

impl ReuseAges {
    /// Records an access to dense id `id` at time `t`; `read` says whether it is a lookup.
    pub fn access(&mut self, t: f64, id: u32, read: bool) {
        let idx = id as usize;
        if idx >= self.latest.len() {
            self.latest.resize(idx + 1, f64::NAN);
        }
        let previous = self.latest[idx];
        self.latest[idx] = t;
        if read && !previous.is_nan() {
            let age = (t - previous).max(0.0);
            self.reads += 1;
            self.max_age = self.max_age.max(age);
            self.histogram[bin_of(age)] += 1;
        }
    }

    fn quantile(&self, q: f64) -> f64 {
        if self.reads == 0 {
            return 0.0;
        }
        let rank = (q * self.reads as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (bin, &count) in self.histogram.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return upper_edge(bin).min(self.max_age);
            }
        }
        self.max_age
    }

    /// The report, given the trace's duration, distinct keys and its fans' mean duration and
    /// total height per total duration.
    pub fn report(
        &self,
        duration_s: f64,
        unique_keys: u64,
        mean_fan_s: f64,
        fan_keys_per_s: f64,
    ) -> ReuseReport {
        let from = bin_of(mean_fan_s) + 1;
        let returns = self.histogram.iter().skip(from).sum();
        let per_s = |n: f64| {
            if duration_s > 0.0 {
                n / duration_s
            } else {
                0.0
            }
        };
        ReuseReport {
            reads: self.reads,
            p50_s: self.quantile(0.5),
            p99_s: self.quantile(0.99),
            p999_s: self.quantile(0.999),
            p9999_s: self.quantile(0.9999),
            max_s: self.max_age,
            returns,
            return_after_s: upper_edge(from - 1),
            returns_per_hour: per_s(returns as f64) * 3600.0,
            new_keys_per_s: per_s(unique_keys as f64),
            new_keys_per_fan_s: fan_keys_per_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_quantiles_and_returns() {
        let mut r = ReuseAges::default();
        // Key 0 read every second for 1000 s; key 1 read once 500 s after its put.
        r.access(0.0, 1, false);
        for t in 0..1000 {
            r.access(t as f64, 0, true);
        }
        r.access(500.0, 1, true);
        let rep = r.report(1000.0, 2, 100.0, 0.5);
        assert_eq!(rep.reads, 1000); // 999 reuses of key 0, one of key 1
        assert_eq!(rep.max_s, 500.0);
        assert!((1.0..=1.05).contains(&rep.p50_s), "{rep:?}");
        assert!((1.0..=1.05).contains(&rep.p99_s), "{rep:?}");
        assert_eq!(rep.returns, 1);
        assert!(rep.return_after_s >= 100.0 && rep.return_after_s < 105.0);
        assert!((rep.returns_per_hour - 3.6).abs() < 1e-9);
        assert!((rep.new_keys_per_s - 0.002).abs() < 1e-12);
    }

    #[test]
    fn bins_are_monotone_and_tight() {
        let mut last = 0;
        for i in 0..2000 {
            let age = 1e-4 * 1.01f64.powi(i);
            let b = bin_of(age);
            assert!(b >= last);
            last = b;
            assert!(upper_edge(b) >= age * 0.999 || b == BINS - 1);
            if age >= MIN_AGE_S {
                assert!(upper_edge(b) <= age * 1.05, "{age} {}", upper_edge(b));
            }
        }
    }
}
