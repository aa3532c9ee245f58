//! Miss-ratio curves of any built-in eviction algorithm (`mantle analyze --mrc`,
//! `mantle.mrc`), in objects or bytes.
//!
//! Exact: one simulated cache per (algorithm, size), served every request with the semantics
//! every host shares ([`cache::Cache::serve`]), so each point is the miss ratio `mantle
//! replay` reports at that size. The caches are spread over worker threads, each reading the
//! trace itself (no copy of the trace in memory).
//!
//! Sampled at rate R: only keys whose hash falls under R of the hash space are served
//! (spatial sampling; the same hash as [`crate::mrc`]'s SHARDS). LRU in objects uses SHARDS
//! (Waldspurger et al., FAST'15): one pass of stack distances reads the curve at every size.
//! Every other algorithm, and LRU in bytes, runs a miniature cache of `ceil(size × R)` objects
//! or bytes per size (Waldspurger et al., ATC'17). For LRU the two are the same model: a
//! sampled distance below `size × R` is a hit of the miniature cache of that size.

use crate::mrc::{key_hash, threshold_of, MissRatioCurve, MrcPoint};
use cache::classes::RuleOp;
use cache::{Algorithm, Cache, Capacity, RequestCounts};
use rustc_hash::FxHashSet;
use serde::Serialize;
use std::str::FromStr;
use std::time::Instant;
use trace::{Op, Request, TraceError, TraceReader};
use units::CacheSize;

/// What a curve's sizes count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Objects,
    Bytes,
}

impl FromStr for Unit {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "objects" => Ok(Unit::Objects),
            "bytes" => Ok(Unit::Bytes),
            other => Err(format!("unknown unit '{other}': expected objects or bytes")),
        }
    }
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Objects => "objects",
            Unit::Bytes => "bytes",
        }
    }
}

/// Exact (one full cache per size) or spatially sampled at a rate in (0, 1].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Method {
    Exact,
    Sampled(f64),
}

/// The libCacheSim default sampling rate of its SHARDS and miniature-simulation tools.
pub const DEFAULT_SAMPLE_RATE: f64 = 0.01;

/// Sizes when none are given: this many, log-spaced from 0.1% to 100% of the working set.
pub const DEFAULT_POINTS: usize = 20;

/// What to compute.
#[derive(Clone, Debug)]
pub struct CurveOptions {
    pub algorithms: Vec<Algorithm>,
    /// Sizes in `unit` (objects or bytes) or percentages of the working set; empty: `points`
    /// log-spaced sizes.
    pub sizes: Vec<CacheSize>,
    pub points: usize,
    pub unit: Unit,
    pub method: Method,
    /// Worker threads (each reads the trace once).
    pub jobs: usize,
}

impl Default for CurveOptions {
    fn default() -> Self {
        CurveOptions {
            algorithms: vec![Algorithm::Lru],
            sizes: Vec::new(),
            points: DEFAULT_POINTS,
            unit: Unit::Objects,
            method: Method::Exact,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// One algorithm's curve.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Curve {
    pub algorithm: String,
    /// `exact`, `shards` or `miniature`.
    pub method: String,
    pub points: Vec<MrcPoint>,
}

/// Every curve, at the same sizes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Curves {
    /// `objects` or `bytes`: what `cache_size` counts.
    pub unit: String,
    /// 1.0 when exact; else the rate keys were sampled at (as the hash space rounds it).
    pub sample_rate: f64,
    /// Unique keys and their bytes (first size seen); null when every size was absolute.
    pub working_set_objects: Option<u64>,
    pub working_set_bytes: Option<u64>,
    pub curves: Vec<Curve>,
    pub wall_seconds: f64,
}

impl Curves {
    /// The curve of `algorithm`, if computed.
    pub fn curve(&self, algorithm: Algorithm) -> Option<&Curve> {
        self.curves.iter().find(|c| c.algorithm == algorithm.name())
    }
}

/// Mean absolute difference of two curves' miss ratios over the sizes both have; `None` when
/// they share none.
pub fn mean_absolute_error(a: &Curve, b: &Curve) -> Option<f64> {
    let diffs: Vec<f64> = a
        .points
        .iter()
        .filter_map(|p| {
            b.points
                .iter()
                .find(|q| q.cache_size == p.cache_size)
                .map(|q| (p.miss_ratio - q.miss_ratio).abs())
        })
        .collect();
    (!diffs.is_empty()).then(|| diffs.iter().sum::<f64>() / diffs.len() as f64)
}

/// Whether `key` is in a spatial sample at `rate` (the keys the sampled curves serve).
pub fn in_sample(key: u64, rate: f64) -> bool {
    key_hash(key) < threshold_of(rate).0
}

/// Opens the trace afresh (once per worker and once for the working set).
pub type Open<'a> = dyn Fn() -> Result<Box<dyn TraceReader>, TraceError> + Sync + 'a;

/// The curves `options` asks for. Errors are one line: a trace error names the file and
/// line, an option error starts with the option (`sizes`, `sample rate`, `algorithms`).
pub fn miss_ratio_curves(open: &Open<'_>, options: &CurveOptions) -> Result<Curves, String> {
    let started = Instant::now();
    if options.algorithms.is_empty() {
        return Err("algorithms: give at least one".to_string());
    }
    if let Some(offline) = options.algorithms.iter().find(|a| a.is_offline()) {
        // A curve's caches are served request by request without the next-access pre-pass
        // the offline algorithms decide by.
        return Err(format!(
            "algorithms: {offline} is offline (it needs each request's next access); \
             replay it at each size with mantle replay --eviction {offline}"
        ));
    }
    let rate = match options.method {
        Method::Exact => None,
        Method::Sampled(r) if r > 0.0 && r <= 1.0 => Some(threshold_of(r)),
        Method::Sampled(r) => {
            return Err(format!(
                "sample rate: {r} is not a rate in (0, 1] (e.g. 0.01)"
            ))
        }
    };
    let needs_working_set = options.sizes.is_empty()
        || options
            .sizes
            .iter()
            .any(|s| matches!(s, CacheSize::Percent(_)));
    let working_set = if needs_working_set {
        Some(working_set(open)?)
    } else {
        None
    };
    let sizes = resolve_sizes(options, working_set)?;
    let shards_lru = rate.is_some() && options.unit == Unit::Objects;
    let mut models: Vec<Model> = Vec::new();
    for (a, &algorithm) in options.algorithms.iter().enumerate() {
        if shards_lru && algorithm == Algorithm::Lru {
            continue;
        }
        for (s, &size) in sizes.iter().enumerate() {
            let scaled = match rate {
                Some((_, r)) => ((size as f64 * r).ceil() as u64).max(1),
                None => size,
            };
            let capacity = match options.unit {
                Unit::Objects => Capacity::objects(scaled),
                Unit::Bytes => Capacity::bytes(scaled),
            };
            models.push(Model {
                algorithm: a,
                size: s,
                cache: Cache::new(algorithm, capacity),
                counts: RequestCounts::default(),
            });
        }
    }
    let wants_shards = shards_lru && options.algorithms.contains(&Algorithm::Lru);
    let threshold = rate.map(|(t, _)| t);
    let workers = options.jobs.clamp(1, models.len().max(1));
    let mut groups: Vec<Group> = (0..workers)
        .map(|_| Group {
            models: Vec::new(),
            shards: None,
            lookups: 0,
        })
        .collect();
    for (i, model) in models.into_iter().enumerate() {
        groups[i % workers].models.push(model);
    }
    if wants_shards {
        let (_, r) = rate.expect("shards only when sampled");
        // The lightest group: the one with the fewest caches.
        let lightest = groups
            .iter_mut()
            .min_by_key(|g| g.models.len())
            .expect("at least one group");
        lightest.shards = Some(MissRatioCurve::fixed_rate(r));
    }
    let outcomes: Vec<Result<Group, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = groups
            .into_iter()
            .map(|group| scope.spawn(move || group.run(open, threshold)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("an MRC worker panicked".to_string()))
            })
            .collect()
    });
    let mut ratios = vec![vec![f64::NAN; sizes.len()]; options.algorithms.len()];
    for group in outcomes {
        let group = group?;
        let ratio = |misses: f64, sampled_lookups: f64| match rate {
            None if sampled_lookups > 0.0 => misses / sampled_lookups,
            // SHARDS-adj (Waldspurger et al., FAST'15 §4.3): the sample's misses over the
            // lookups a sample of exactly R of the trace would have. A hot key in or out of
            // the sample moves the sampled lookups far from R × N, almost all of them hits;
            // dividing by R × N instead takes that error out of the small sizes.
            Some((_, r)) if group.lookups > 0 => (misses / (r * group.lookups as f64)).min(1.0),
            _ => 0.0,
        };
        for m in &group.models {
            ratios[m.algorithm][m.size] = ratio(m.counts.misses as f64, m.counts.lookups() as f64);
        }
        if let Some(shards) = &group.shards {
            let lru = options
                .algorithms
                .iter()
                .position(|&a| a == Algorithm::Lru)
                .expect("shards only for lru");
            for (s, &size) in sizes.iter().enumerate() {
                let (misses, lookups) = shards.sampled_misses_at(size).unwrap_or((0.0, 0.0));
                ratios[lru][s] = ratio(misses, lookups);
            }
        }
    }
    let curves = options
        .algorithms
        .iter()
        .zip(ratios)
        .map(|(&algorithm, row)| Curve {
            algorithm: algorithm.name().to_string(),
            method: match (rate, algorithm == Algorithm::Lru && shards_lru) {
                (None, _) => "exact",
                (Some(_), true) => "shards",
                (Some(_), false) => "miniature",
            }
            .to_string(),
            points: sizes
                .iter()
                .zip(row)
                .map(|(&cache_size, miss_ratio)| MrcPoint {
                    cache_size,
                    miss_ratio,
                })
                .collect(),
        })
        .collect();
    Ok(Curves {
        unit: options.unit.name().to_string(),
        sample_rate: rate.map_or(1.0, |(_, r)| r),
        working_set_objects: working_set.map(|w| w.0),
        working_set_bytes: working_set.map(|w| w.1),
        curves,
        wall_seconds: started.elapsed().as_secs_f64(),
    })
}

/// One cache of the curve of `algorithm` (an index into the options) at `size` (an index
/// into the sizes).
struct Model {
    algorithm: usize,
    size: usize,
    cache: Cache,
    counts: RequestCounts,
}

/// What one worker thread serves: its caches, and the SHARDS pass if it has it.
struct Group {
    models: Vec<Model>,
    shards: Option<MissRatioCurve>,
    /// Lookups of the whole trace, sampled or not.
    lookups: u64,
}

impl Group {
    /// One pass over the trace; with `threshold`, only the sampled keys.
    fn run(mut self, open: &Open<'_>, threshold: Option<u64>) -> Result<Group, String> {
        let mut reader = trace::Batched::new(open().map_err(|e| e.to_string())?);
        while let Some(req) = reader.next_request().map_err(|e| e.to_string())? {
            self.lookups += u64::from(matches!(req.op, Op::Get | Op::Access));
            if threshold.is_some_and(|t| key_hash(req.key) >= t) {
                continue;
            }
            self.serve(&req);
        }
        Ok(self)
    }

    #[inline]
    fn serve(&mut self, req: &Request) {
        let op = match req.op {
            Op::Get => RuleOp::Get,
            Op::Put => RuleOp::Put,
            Op::Delete => RuleOp::Delete,
            Op::Access => RuleOp::Access,
        };
        for m in &mut self.models {
            m.cache.serve(op, req.key, req.size, &mut m.counts);
        }
        if let Some(shards) = &mut self.shards {
            match req.op {
                Op::Get | Op::Access => shards.lookup(req.key),
                Op::Put => shards.insert(req.key),
                Op::Delete => shards.remove(req.key),
            }
        }
    }
}

/// Unique keys and the bytes of their first sizes (what percentages are of, as in replay).
fn working_set(open: &Open<'_>) -> Result<(u64, u64), String> {
    let mut reader = trace::Batched::new(open().map_err(|e| e.to_string())?);
    let mut seen = FxHashSet::default();
    let mut bytes = 0u64;
    while let Some(req) = reader.next_request().map_err(|e| e.to_string())? {
        if seen.insert(req.key) {
            bytes += u64::from(req.size);
        }
    }
    Ok((seen.len() as u64, bytes))
}

/// The sizes in the unit, ascending and distinct.
fn resolve_sizes(options: &CurveOptions, ws: Option<(u64, u64)>) -> Result<Vec<u64>, String> {
    let total = ws.map(|(objects, bytes)| match options.unit {
        Unit::Objects => objects,
        Unit::Bytes => bytes,
    });
    if total == Some(0) {
        return Err("sizes: the trace has no requests, so no working set to size from".into());
    }
    let mut sizes = Vec::new();
    if options.sizes.is_empty() {
        let total = total.expect("the working set is read when no sizes are given") as f64;
        let points = options.points.max(2);
        let low = (total / 1000.0).max(1.0);
        for i in 0..points {
            let f = i as f64 / (points - 1) as f64;
            sizes.push((low * (total / low).powf(f)).round() as u64);
        }
    }
    for &size in &options.sizes {
        sizes.push(match (size, options.unit) {
            (CacheSize::Objects(n), Unit::Objects) | (CacheSize::Bytes(n), Unit::Bytes) => n,
            (CacheSize::Percent(p), _) => {
                let total = total.expect("the working set is read for a percentage");
                ((total as f64 * p / 100.0) as u64).max(1)
            }
            (CacheSize::Bytes(_), Unit::Objects) => {
                return Err(format!(
                    "sizes: {size} is bytes; in objects give counts (1000) or percentages (10%), or use unit bytes"
                ))
            }
            (CacheSize::Objects(n), Unit::Bytes) => {
                return Err(format!(
                    "sizes: {n} is a count of objects; in bytes give a unit (64MiB, {n}B) or a percentage"
                ))
            }
            (CacheSize::Unlimited, _) => {
                return Err("sizes: unlimited is not a point of a curve".to_string())
            }
        });
    }
    sizes.sort_unstable();
    sizes.dedup();
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_unit_and_name_the_bad_one() {
        let opts = |sizes: Vec<CacheSize>, unit| CurveOptions {
            sizes,
            unit,
            ..CurveOptions::default()
        };
        let ws = Some((1000, 64_000));
        let got = resolve_sizes(
            &opts(
                vec![
                    CacheSize::Percent(10.0),
                    CacheSize::Objects(5),
                    CacheSize::Objects(100),
                ],
                Unit::Objects,
            ),
            ws,
        )
        .unwrap();
        assert_eq!(got, [5, 100]);
        let got = resolve_sizes(
            &opts(
                vec![CacheSize::Percent(50.0), CacheSize::Bytes(4096)],
                Unit::Bytes,
            ),
            ws,
        )
        .unwrap();
        assert_eq!(got, [4096, 32_000]);
        let err = resolve_sizes(&opts(vec![CacheSize::Bytes(4096)], Unit::Objects), ws);
        assert!(err.unwrap_err().contains("4096B is bytes"));
        let err = resolve_sizes(&opts(vec![CacheSize::Objects(7)], Unit::Bytes), ws);
        assert!(err.unwrap_err().contains("7 is a count of objects"));
        let default = resolve_sizes(&opts(vec![], Unit::Objects), ws).unwrap();
        assert_eq!((default[0], *default.last().unwrap()), (1, 1000));
        assert!(default.len() >= 15 && default.windows(2).all(|w| w[0] < w[1]));
    }
}
