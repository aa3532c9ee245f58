//! Workload analysis of a request stream: what `mantle analyze` prints and charts.
//!
//! One streaming pass ([`Analyzer::feed`]) computes request mix, read rate over time, distinct
//! keys per sliding window, key popularity, an LRU miss-ratio curve, access fans (seed 000
//! §V-B) and workload regimes by k-means (seed 002 §6). It takes plain [`trace::Request`]s so
//! any reader or generator can drive it.
//!
//! Memory bounds: the time series ([`series::MAX_BUCKETS`] buckets), the scatter sample
//! (`scatter_points`), the fan stack (`max_fans`) and the miss-ratio-curve state (`mrc_max_keys`
//! keys, SHARDS sampling beyond) are bounded by options. Dense ids, per-key read counts and
//! per-key last-access times grow with the distinct keys (about 40 bytes per key); the sliding
//! window holds one heap entry per key active in one window.

pub mod curves;
pub mod dense;
pub mod fans;
pub mod html;
pub mod kmeans;
pub mod mrc;
pub mod popularity;
pub mod regimes;
pub mod reuse;
pub mod scatter;
pub mod series;
pub mod window;

use serde::Serialize;
use trace::{Op, Request};

pub use curves::{Curve, CurveOptions, Curves};
pub use fans::{FanOut, FanReport};
pub use mrc::{MrcPoint, MrcResult};
pub use popularity::Popularity;
pub use regimes::{Regime, Regimes};
pub use reuse::ReuseReport;
pub use series::SeriesColumns;

/// Knobs of an analysis. `Default` matches `mantle analyze` without flags.
#[derive(Clone, Debug, PartialEq)]
pub struct AnalyzeOptions {
    /// Sliding window for distinct keys, in seconds.
    pub window_s: f64,
    /// Regimes for k-means (seed 002 uses 4).
    pub regimes: usize,
    /// Keys the miss-ratio curve tracks exactly before switching to SHARDS sampling.
    pub mrc_max_keys: usize,
    /// Bound on open fans kept by the detector.
    pub max_fans: usize,
    /// Fans with fewer accesses are merged into their predecessor when reported;
    /// `None` = 1 per 10,000 requests, at least 100.
    pub min_fan_accesses: Option<u64>,
    /// Points kept for the key id vs time chart.
    pub scatter_points: usize,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            window_s: 60.0,
            regimes: 4,
            mrc_max_keys: 1 << 22,
            max_fans: 1 << 20,
            min_fan_accesses: None,
            scatter_points: 20_000,
        }
    }
}

/// Everything `mantle analyze` reports. Times are seconds from the first request.
#[derive(Clone, Debug, Serialize)]
pub struct Analysis {
    pub requests: u64,
    pub gets: u64,
    pub puts: u64,
    pub deletes: u64,
    pub accesses: u64,
    /// Reads (gets + accesses) per write (puts); null without writes.
    pub reads_per_write: Option<f64>,
    pub unique_keys: u64,
    /// Time from the first to the last request; 0 when the trace has no timestamps.
    pub duration_s: f64,
    pub window_s: f64,
    /// Most reads in one second of trace time.
    pub peak_read_rate: f64,
    /// Mean read rate over the last tenth of the trace.
    pub final_read_rate: f64,
    /// Distinct keys per tumbling window of `window_s`: mean and max.
    pub mean_unique_keys_per_window: f64,
    pub max_unique_keys_per_window: u64,
    /// Distinct keys in the sliding window: the largest value seen.
    pub peak_sliding_window_keys: u64,
    pub popularity: Popularity,
    pub mrc: MrcResult,
    /// `--mrc ALG,...`: the curves of those algorithms (absent without the flag).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub curves: Option<Curves>,
    pub fans: FanReport,
    /// Reuse ages, returns to older basins and new keys per second (what dscache2 sizes from).
    pub reuse: ReuseReport,
    pub regimes: Regimes,
    pub series: SeriesColumns,
    /// Sampled (time, dense key id) points for the key-activity chart.
    #[serde(skip)]
    pub scatter: Vec<(f64, u32)>,
}

/// Streaming analysis state.
pub struct Analyzer {
    options: AnalyzeOptions,
    ids: dense::DenseIds,
    reads_per_key: Vec<u64>,
    window: window::WindowKeys,
    series: series::TimeSeries,
    mrc: mrc::MissRatioCurve,
    fans: fans::FanDetector,
    reuse: reuse::ReuseAges,
    scatter: scatter::ScatterSample,
    first_time: Option<f64>,
    last_t: f64,
    counts: [u64; 4],
    second: i64,
    reads_this_second: u64,
    peak_read_rate: u64,
    peak_window_keys: u64,
}

impl Analyzer {
    pub fn new(options: AnalyzeOptions) -> Self {
        let window_s = if options.window_s > 0.0 && options.window_s.is_finite() {
            options.window_s
        } else {
            60.0
        };
        Analyzer {
            ids: dense::DenseIds::default(),
            reads_per_key: Vec::new(),
            window: window::WindowKeys::new(window_s),
            series: series::TimeSeries::default(),
            mrc: mrc::MissRatioCurve::new(options.mrc_max_keys),
            fans: fans::FanDetector::new(options.max_fans),
            reuse: reuse::ReuseAges::default(),
            scatter: scatter::ScatterSample::new(options.scatter_points),
            first_time: None,
            last_t: 0.0,
            counts: [0; 4],
            second: 0,
            reads_this_second: 0,
            peak_read_rate: 0,
            peak_window_keys: 0,
            options: AnalyzeOptions {
                window_s,
                ..options
            },
        }
    }

    /// Feeds one request. Times that go backwards are clamped to the latest time seen, so a
    /// slightly unordered trace still analyses.
    pub fn feed(&mut self, request: &Request) {
        let first = *self.first_time.get_or_insert(request.time);
        let raw = request.time - first;
        let t = if raw.is_finite() && raw > self.last_t {
            raw
        } else {
            self.last_t
        };
        self.last_t = t;
        let (id, _) = self.ids.id(request.key);
        let read = matches!(request.op, Op::Get | Op::Access);
        let write = request.op == Op::Put;
        self.counts[match request.op {
            Op::Get => 0,
            Op::Put => 1,
            Op::Delete => 2,
            Op::Access => 3,
        }] += 1;
        match request.op {
            Op::Get | Op::Access => self.mrc.lookup(request.key),
            Op::Put => self.mrc.insert(request.key),
            Op::Delete => self.mrc.remove(request.key),
        }
        if read {
            let idx = id as usize;
            if idx >= self.reads_per_key.len() {
                self.reads_per_key.resize(idx + 1, 0);
            }
            self.reads_per_key[idx] += 1;
            let second = t.floor() as i64;
            if second != self.second {
                self.second = second;
                self.reads_this_second = 0;
            }
            self.reads_this_second += 1;
            self.peak_read_rate = self.peak_read_rate.max(self.reads_this_second);
        }
        self.window.access(t, id);
        self.peak_window_keys = self.peak_window_keys.max(self.window.active());
        self.fans.access(t, id);
        self.reuse.access(t, id, read);
        self.scatter.access(t, id);
        self.series
            .record(t, read, write, self.ids.len() as u64, self.window.active());
    }

    /// Feeds every request of an iterator.
    pub fn feed_all<I: IntoIterator<Item = Request>>(&mut self, requests: I) {
        for request in requests {
            self.feed(&request);
        }
    }

    /// The analysis of everything fed so far.
    pub fn finish(&self) -> Analysis {
        let [gets, puts, deletes, accesses] = self.counts;
        let requests = gets + puts + deletes + accesses;
        let series = self.series.columns();
        let tail_from = series.time.len() - series.time.len() / 10;
        let tail = &series.read_rate[tail_from.min(series.read_rate.len().saturating_sub(1))..];
        let final_read_rate = if tail.is_empty() {
            0.0
        } else {
            tail.iter().sum::<f64>() / tail.len() as f64
        };
        let tumbling = self.window.tumbling();
        let min_fan = self
            .options
            .min_fan_accesses
            .unwrap_or_else(|| (requests / 10_000).max(100));
        let fans = self.fans.report(min_fan);
        let fan_s: f64 = fans.fans.iter().map(|f| f.end - f.start).sum();
        let fan_keys: u64 = fans.fans.iter().map(|f| f.keys).sum();
        let reuse = self.reuse.report(
            self.last_t,
            self.ids.len() as u64,
            fans.mean_duration_s,
            if fan_s > 0.0 {
                fan_keys as f64 / fan_s
            } else {
                0.0
            },
        );
        Analysis {
            requests,
            gets,
            puts,
            deletes,
            accesses,
            reads_per_write: (puts > 0).then(|| (gets + accesses) as f64 / puts as f64),
            unique_keys: self.ids.len() as u64,
            duration_s: self.last_t,
            window_s: self.options.window_s,
            peak_read_rate: self.peak_read_rate as f64,
            final_read_rate,
            mean_unique_keys_per_window: tumbling.mean(),
            max_unique_keys_per_window: tumbling.max,
            peak_sliding_window_keys: self.peak_window_keys,
            popularity: popularity::popularity(&self.reads_per_key),
            mrc: self.mrc.result(),
            curves: None,
            fans,
            reuse,
            regimes: regimes::detect(&series, self.options.regimes),
            series,
            scatter: self.scatter.points().to_vec(),
        }
    }
}

/// Analyses a whole request stream in one call.
pub fn analyze<I: IntoIterator<Item = Request>>(requests: I, options: AnalyzeOptions) -> Analysis {
    let mut analyzer = Analyzer::new(options);
    analyzer.feed_all(requests);
    analyzer.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace::gen::{ParspliceGen, ParspliceParams};

    #[test]
    fn generated_parsplice_trace_shows_the_papers_shape() {
        let params = ParspliceParams {
            duration_s: 3600,
            ..ParspliceParams::default()
        };
        let a = analyze(
            ParspliceGen::new(params).unwrap(),
            AnalyzeOptions::default(),
        );
        assert_eq!(a.requests, a.gets + a.puts);
        assert_eq!(a.unique_keys, a.puts);
        let ratio = a.reads_per_write.unwrap();
        assert!((50.0..=100.0).contains(&ratio), "reads per write {ratio}");
        assert!(a.peak_read_rate > 4.0 * a.final_read_rate);
        assert_eq!(a.mrc.method, "exact");
        // Every key is put before it is read: only puts miss in an unlimited cache.
        assert_eq!(a.mrc.points.last().unwrap().miss_ratio, 0.0);
        assert!(a.fans.count >= 5, "fans {}", a.fans.count);
        assert!(a.fans.fans.windows(2).all(|w| w[0].bottom < w[1].bottom));
        assert_eq!(a.regimes.regimes.len(), 4);
        let size = a.regimes.suggested_cache_size.unwrap();
        assert!(size > 0 && size < a.unique_keys);
        let json = serde_json::to_value(&a).unwrap();
        assert!(json["fans"]["fans"].is_array());
        assert!(json.get("scatter").is_none());
    }

    #[test]
    fn traces_without_time_or_ops_still_analyse() {
        let requests = (0..1000u64).map(|i| Request {
            key: i % 37,
            ..Request::default()
        });
        let a = analyze(requests, AnalyzeOptions::default());
        assert_eq!(a.accesses, 1000);
        assert_eq!(a.duration_s, 0.0);
        assert_eq!(a.reads_per_write, None);
        assert_eq!(a.unique_keys, 37);
        assert_eq!(a.peak_read_rate, 1000.0);
    }
}
