//! A model of the persistent store behind the cache: one FIFO service queue with a fixed
//! service rate, and an LSM-style compaction stall after every so many writes (ParSplice's
//! LevelDB blocked reads during compactions; seed 000 §IV).
//!
//! These are model figures, not measurements: the model exists to compare policies by the
//! load they push to the store, not to predict a real store's latency.

use hdrhistogram::Histogram;
use std::fmt;
use std::str::FromStr;

/// Tunables of the store model. Defaults describe a modest LevelDB-like store.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackendParams {
    /// Operations per second the store completes when not compacting (reads and writes alike).
    pub rate: f64,
    /// A compaction starts after this many writes.
    pub compact_every: u64,
    /// Seconds the store serves nothing while a compaction runs.
    pub stall: f64,
}

impl Default for BackendParams {
    fn default() -> Self {
        BackendParams {
            rate: 1000.0,
            compact_every: 4096,
            stall: 0.2,
        }
    }
}

/// `--backend` value: `none`, `lsm`, or `lsm:rate=N,compact_every=N,stall=SECONDS`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BackendSpec {
    None,
    Lsm(BackendParams),
}

impl Default for BackendSpec {
    fn default() -> Self {
        BackendSpec::Lsm(BackendParams::default())
    }
}

impl FromStr for BackendSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (model, args) = match text.split_once(':') {
            Some((m, a)) => (m, Some(a)),
            None => (text, None),
        };
        match model {
            "none" if args.is_none() => return Ok(BackendSpec::None),
            "lsm" => {}
            _ => {
                return Err(format!(
                    "unknown back-end model '{text}' (expected none, lsm or lsm:rate=N,compact_every=N,stall=S)"
                ))
            }
        }
        let mut params = BackendParams::default();
        for pair in args.into_iter().flat_map(|a| a.split(',')) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("back-end parameter '{pair}' must be KEY=VALUE"))?;
            let number: f64 = value
                .parse()
                .map_err(|_| format!("back-end parameter {key}: '{value}' is not a number"))?;
            if !(number.is_finite() && number >= 0.0) {
                return Err(format!(
                    "back-end parameter {key} must be >= 0, got {value}"
                ));
            }
            match key {
                "rate" if number > 0.0 => params.rate = number,
                "rate" => return Err("back-end parameter rate must be > 0".to_string()),
                "compact_every" => params.compact_every = number as u64,
                "stall" => params.stall = number,
                _ => {
                    return Err(format!(
                        "unknown back-end parameter '{key}' (expected rate, compact_every, stall)"
                    ))
                }
            }
        }
        Ok(BackendSpec::Lsm(params))
    }
}

impl fmt::Display for BackendSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendSpec::None => write!(f, "none"),
            BackendSpec::Lsm(p) => write!(
                f,
                "lsm:rate={},compact_every={},stall={}",
                p.rate, p.compact_every, p.stall
            ),
        }
    }
}

/// Totals the replay reports under `backend`: the model's in `mantle replay`, the server's
/// store counters in `mantle replay --server` (model `live`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct BackendSummary {
    pub model: String,
    pub reads: u64,
    pub writes: u64,
    /// Live only: writes that filled a nil reply, and store errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fill_writes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<u64>,
    /// Most operations arriving in any one second of trace time (null without timestamps).
    pub peak_rate: Option<f64>,
    /// Seconds of trace time in which more operations arrived than the store can serve.
    pub overload_seconds: Option<u64>,
    /// Null live (the server does not say).
    pub compactions: Option<u64>,
    pub p50_read_latency_ms: Option<f64>,
    pub p99_read_latency_ms: Option<f64>,
    pub max_read_latency_ms: Option<f64>,
}

/// The queue model. Times are trace seconds.
pub struct Backend {
    params: Option<BackendParams>,
    service_time: f64,
    /// When the store finishes the work queued so far.
    free_at: f64,
    writes_since_compaction: u64,
    compactions: u64,
    reads: u64,
    writes: u64,
    /// Per-second arrival counting for peak rate and overload seconds.
    bucket_start: Option<f64>,
    bucket_index: i64,
    bucket_ops: u64,
    peak_ops: u64,
    overload_seconds: u64,
    /// Only with a model (`None` for `--backend none`): its 188 KiB of counters would
    /// otherwise be zeroed, page by page, inside every replay's timed span for nothing.
    read_latency_us: Option<Histogram<u64>>,
}

impl Backend {
    pub fn new(spec: BackendSpec) -> Backend {
        let params = match spec {
            BackendSpec::None => None,
            BackendSpec::Lsm(p) => Some(p),
        };
        Backend {
            params,
            service_time: params.map_or(0.0, |p| 1.0 / p.rate),
            free_at: f64::NEG_INFINITY,
            writes_since_compaction: 0,
            compactions: 0,
            reads: 0,
            writes: 0,
            bucket_start: None,
            bucket_index: 0,
            bucket_ops: 0,
            peak_ops: 0,
            overload_seconds: 0,
            // Three significant digits up to an hour of latency: bounded memory.
            read_latency_us: params.map(|_| {
                Histogram::new_with_bounds(1, 3_600_000_000, 3)
                    .expect("static histogram bounds are valid")
            }),
        }
    }

    pub fn enabled(&self) -> bool {
        self.params.is_some()
    }

    /// A read the cache could not serve, arriving at `now`.
    ///
    /// Inlined (a replay's miss calls it, with `--backend none` too, where it only counts);
    /// the model's queue is out of line.
    #[inline]
    pub fn read(&mut self, now: f64) {
        self.reads += 1;
        if self.params.is_some() {
            self.queue_read(now);
        }
    }

    #[inline(never)]
    fn queue_read(&mut self, now: f64) {
        let done = self.enqueue(now);
        let latency_us = ((done - now) * 1e6).round().max(1.0) as u64;
        if let Some(h) = &mut self.read_latency_us {
            h.saturating_record(latency_us);
        }
    }

    /// A write (write-through put or delete) arriving at `now`.
    pub fn write(&mut self, now: f64) {
        self.writes += 1;
        let Some(params) = self.params else { return };
        self.enqueue(now);
        self.writes_since_compaction += 1;
        if params.compact_every > 0 && self.writes_since_compaction >= params.compact_every {
            self.writes_since_compaction = 0;
            self.compactions += 1;
            self.free_at += params.stall;
        }
    }

    /// Bulk reads (warm-up) are counted but do not queue behind client traffic in this model.
    pub fn count_reads(&mut self, n: u64) {
        self.reads += n;
    }

    /// Queues one operation and returns when it completes.
    fn enqueue(&mut self, now: f64) -> f64 {
        self.arrive(now);
        let start = if self.free_at > now {
            self.free_at
        } else {
            now
        };
        self.free_at = start + self.service_time;
        self.free_at
    }

    fn arrive(&mut self, now: f64) {
        let start = *self.bucket_start.get_or_insert(now.floor());
        let index = (now - start).floor() as i64;
        if index != self.bucket_index {
            self.close_bucket();
            self.bucket_index = index;
        }
        self.bucket_ops += 1;
    }

    fn close_bucket(&mut self) {
        let capacity = self.params.map_or(f64::INFINITY, |p| p.rate);
        if self.bucket_ops as f64 > capacity {
            self.overload_seconds += 1;
        }
        self.peak_ops = self.peak_ops.max(self.bucket_ops);
        self.bucket_ops = 0;
    }

    /// Operations waiting in the store's queue at `now` (the Ceph `queue_len` of the store).
    pub fn queue_len(&self, now: f64) -> f64 {
        if self.free_at > now && self.service_time > 0.0 {
            ((self.free_at - now) / self.service_time).ceil()
        } else {
            0.0
        }
    }

    pub fn reads(&self) -> u64 {
        self.reads
    }

    pub fn writes(&self) -> u64 {
        self.writes
    }

    /// Final figures. `timed` says whether the trace had real timestamps; without them the
    /// time-based figures are meaningless and reported as null.
    pub fn summary(&mut self, timed: bool) -> BackendSummary {
        self.close_bucket();
        let model = match self.params {
            None => BackendSpec::None.to_string(),
            Some(p) => BackendSpec::Lsm(p).to_string(),
        };
        let enabled = self.params.is_some() && timed;
        let recorded = self
            .read_latency_us
            .as_ref()
            .filter(|h| enabled && !h.is_empty());
        let latency = |q: f64| recorded.map(|h| h.value_at_quantile(q) as f64 / 1000.0);
        BackendSummary {
            model,
            reads: self.reads,
            writes: self.writes,
            peak_rate: timed.then_some(self.peak_ops as f64),
            overload_seconds: enabled.then_some(self.overload_seconds),
            compactions: Some(self.compactions),
            fill_writes: None,
            errors: None,
            p50_read_latency_ms: latency(0.5),
            p99_read_latency_ms: latency(0.99),
            max_read_latency_ms: recorded.map(|h| h.max() as f64 / 1000.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lsm(rate: f64, compact_every: u64, stall: f64) -> Backend {
        Backend::new(BackendSpec::Lsm(BackendParams {
            rate,
            compact_every,
            stall,
        }))
    }

    #[test]
    fn parses_specs() {
        assert_eq!("none".parse(), Ok(BackendSpec::None));
        assert_eq!("lsm".parse(), Ok(BackendSpec::default()));
        let spec: BackendSpec = "lsm:rate=50,stall=1.5".parse().unwrap();
        assert_eq!(
            spec,
            BackendSpec::Lsm(BackendParams {
                rate: 50.0,
                compact_every: 4096,
                stall: 1.5
            })
        );
        assert!("lsm:rate=0".parse::<BackendSpec>().is_err());
        assert!("lsm:speed=3"
            .parse::<BackendSpec>()
            .unwrap_err()
            .contains("speed"));
        assert!("redis"
            .parse::<BackendSpec>()
            .unwrap_err()
            .contains("redis"));
    }

    #[test]
    fn idle_store_answers_in_one_service_time() {
        let mut b = lsm(100.0, 0, 0.0);
        for i in 0..10 {
            b.read(i as f64);
        }
        let s = b.summary(true);
        assert_eq!(s.reads, 10);
        assert_eq!(s.overload_seconds, Some(0));
        let p99 = s.p99_read_latency_ms.unwrap();
        assert!((p99 - 10.0).abs() < 0.1, "p99 {p99}");
    }

    #[test]
    fn a_burst_over_the_rate_queues_and_counts_an_overloaded_second() {
        let mut b = lsm(10.0, 0, 0.0);
        for _ in 0..20 {
            b.read(0.5);
        }
        b.read(5.0);
        let s = b.summary(true);
        assert_eq!(s.peak_rate, Some(20.0));
        assert_eq!(s.overload_seconds, Some(1));
        // The last of 20 queued reads waits for all 20 service times (2 s).
        assert!((s.max_read_latency_ms.unwrap() - 2000.0).abs() < 5.0);
    }

    #[test]
    fn compaction_stalls_the_reads_behind_it() {
        let mut b = lsm(1000.0, 2, 1.0);
        b.write(0.0);
        b.write(0.0);
        b.read(0.0);
        let s = b.summary(true);
        assert_eq!(s.compactions, Some(1));
        assert!(s.max_read_latency_ms.unwrap() >= 1000.0);
    }

    #[test]
    fn no_model_counts_but_reports_no_timing() {
        let mut b = Backend::new(BackendSpec::None);
        assert!(b.read_latency_us.is_none(), "no latencies to record");
        b.read(0.0);
        b.write(1.0);
        let s = b.summary(true);
        assert_eq!((s.reads, s.writes), (1, 1));
        assert_eq!(s.p99_read_latency_ms, None);
        assert_eq!(s.overload_seconds, None);
    }
}
