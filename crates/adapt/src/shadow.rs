//! One shadow: a candidate policy version with its own engine, driving a metadata-only cache
//! (keys and sizes, no values) fed the access stream. It serves each request as the real
//! cache would (replay's semantics: a lookup inserts on a miss, a put inserts, a delete
//! removes), computes at each tick the metrics a real cache would hand its policy, and
//! applies the policy's decision to its own cache only.
//!
//! Sampled (SHARDS): only keys in the sample are served; counts and sizes are divided by the
//! rate before anything sees them and the policy's capacities and eviction counts are
//! multiplied by it. Bounded: the cache never holds more than `max_objects` entries whatever
//! the policy asks (the clamp is counted in `capped_ticks`), and `timeseries()` keeps at most
//! `timeseries_limit` events.

use crate::spec::ShadowSpec;
use crate::window::{TickSample, Window};
use crate::Sampler;
use cache::classes::RuleOp;
use cache::{AccessLog, Algorithm, Cache, Capacity, RequestCounts, Served};
use policy::switch::WindowFigures;
use policy::{Action, Limits, LoadError, Metrics, NoSeries, Params, PolicyEngine, TickInput};
use trace::{Op, Request};

/// The settings every shadow of a host shares.
#[derive(Clone, Copy, Debug)]
pub struct ShadowLimits {
    pub algorithm: Algorithm,
    /// The capacity the real cache starts with (the shadow's starts at the same, scaled).
    pub capacity: Capacity,
    /// Most entries the shadow's cache may hold (its memory cap).
    pub max_objects: u64,
    pub timeseries_limit: usize,
    /// Ticks in a window.
    pub window: usize,
    pub policy: Limits,
}

impl Default for ShadowLimits {
    fn default() -> Self {
        ShadowLimits {
            algorithm: Algorithm::Lru,
            capacity: Capacity::default(),
            max_objects: 4 << 20,
            timeseries_limit: 1_000_000,
            window: 10,
            policy: Limits::default(),
        }
    }
}

/// Whole-run figures of a shadow (scaled to the whole key space).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct ShadowTotals {
    pub requests: f64,
    pub lookups: f64,
    pub hits: f64,
    pub misses: f64,
    pub miss_ratio: f64,
    pub mean_objects: f64,
    pub peak_objects: f64,
    pub mean_bytes: f64,
    pub peak_bytes: f64,
    pub evictions: f64,
    pub ticks: u64,
    pub decisions: u64,
    pub errors: u64,
    /// Ticks at which the memory cap held the cache below what the policy asked.
    pub capped_ticks: u64,
    /// Heap bytes of the shadow's cache metadata at the end.
    pub metadata_bytes: u64,
}

/// The cache's name for a trace operation (the mapping `sim::replay_cache::rule_op` makes;
/// repeated here so the shadow core needs no simulator).
#[inline(always)]
fn cache_op(op: Op) -> RuleOp {
    match op {
        Op::Get => RuleOp::Get,
        Op::Put => RuleOp::Put,
        Op::Delete => RuleOp::Delete,
        Op::Access => RuleOp::Access,
    }
}

pub struct Shadow {
    pub spec: ShadowSpec,
    engine: PolicyEngine,
    cache: Cache,
    sampler: Sampler,
    /// 1 / rate: what one sampled event stands for.
    scale: f64,
    /// The capacity the policy asked for, in whole-key-space objects (the metric it reads).
    target: Capacity,
    max_objects: u64,
    log: Option<AccessLog>,
    c: RequestCounts,
    at_tick: RequestCounts,
    evictions_at_tick: u64,
    last_tick_time: Option<f64>,
    first_time: Option<f64>,
    window: Window,
    current: TickSample,
    totals: ShadowTotals,
    sum_objects: f64,
    sum_bytes: f64,
    last_error: Option<String>,
}

impl Shadow {
    pub fn new(spec: ShadowSpec, limits: &ShadowLimits) -> Result<Shadow, LoadError> {
        Shadow::with_interrupt(spec, limits, policy::Interrupt::default())
    }

    /// [`Shadow::new`] whose callbacks `interrupt` stops (a host shutting down).
    pub fn with_interrupt(
        spec: ShadowSpec,
        limits: &ShadowLimits,
        interrupt: policy::Interrupt,
    ) -> Result<Shadow, LoadError> {
        let mut engine = PolicyEngine::with_interrupt(limits.policy, interrupt);
        engine.load_version(
            policy::PolicyId::new(&spec.name, 1),
            &format!("@{}", spec.path.display()),
            &spec.source,
        )?;
        let sampler = Sampler::new(spec.sample);
        let uses_timeseries = spec.source.contains("timeseries");
        let mut shadow = Shadow {
            engine,
            cache: Cache::new(limits.algorithm, Capacity::default()),
            scale: 1.0 / sampler.rate(),
            sampler,
            target: limits.capacity,
            max_objects: limits.max_objects.max(1),
            log: uses_timeseries.then(|| AccessLog::new(limits.timeseries_limit)),
            c: RequestCounts::default(),
            at_tick: RequestCounts::default(),
            evictions_at_tick: 0,
            last_tick_time: None,
            first_time: None,
            window: Window::new(limits.window),
            current: TickSample::default(),
            totals: ShadowTotals::default(),
            sum_objects: 0.0,
            sum_bytes: 0.0,
            last_error: None,
            spec,
        };
        shadow.apply_target();
        Ok(shadow)
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn params(&self) -> &Params {
        &self.spec.params
    }

    pub fn sample(&self) -> f64 {
        self.sampler.rate()
    }

    /// The shadow's cache (sampled keys only, unscaled).
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Sets the sampled cache's capacity from the policy's target, within the memory cap.
    fn apply_target(&mut self) -> bool {
        let rate = self.sampler.rate();
        let scaled = |n: u64| ((n as f64) * rate).ceil() as u64;
        let objects = self.target.objects.map(scaled);
        let capped = objects.is_none_or(|o| o > self.max_objects);
        self.cache.set_capacity(Capacity {
            objects: Some(objects.unwrap_or(u64::MAX).min(self.max_objects)),
            bytes: self.target.bytes.map(scaled),
        });
        capped && self.cache.len() >= self.max_objects
    }

    /// Serves one request of the stream (ignored when its key is not sampled). Allocation
    /// free unless the policy keeps a time series.
    #[inline]
    pub fn observe(&mut self, req: &Request) {
        if self.first_time.is_none() {
            self.first_time = Some(req.time);
        }
        if !self.sampler.admits(req.key) {
            return;
        }
        let op = cache_op(req.op);
        let served = self.cache.serve(op, req.key, req.size, &mut self.c);
        // The time series holds lookups and writes, as replay's access log does.
        if served != Served::Deleted {
            if let Some(log) = &mut self.log {
                log.record(req.time, req.key);
            }
        }
        self.account();
    }

    /// A lookup that found nothing behind the cache (a host whose back end may lack the key,
    /// as the server's store can): a miss that caches nothing, and drops the key if the
    /// shadow held it (an expired key). Ignored when the key is not sampled.
    #[inline]
    pub fn observe_absent(&mut self, time: f64, key: u64) {
        if self.first_time.is_none() {
            self.first_time = Some(time);
        }
        if !self.sampler.admits(key) {
            return;
        }
        // Counted as a get that missed but inserted nothing (no size: byte figures are not
        // kept for shadows).
        self.c.count_absent_get(0);
        self.cache.remove(key);
        if let Some(log) = &mut self.log {
            log.record(time, key);
        }
        self.account();
    }

    /// Adds the cache's size after a served request to the tick's sample.
    #[inline]
    fn account(&mut self) {
        let (objects, bytes) = (self.cache.len() as f64, self.cache.bytes() as f64);
        let s = &mut self.current;
        s.requests += self.scale;
        s.sum_objects += objects * self.scale * self.scale;
        s.sum_bytes += bytes * self.scale * self.scale;
        s.peak_objects = s.peak_objects.max(objects * self.scale);
        s.peak_bytes = s.peak_bytes.max(bytes * self.scale);
    }

    /// The metrics a real cache would give the policy now (replay's definitions, scaled).
    fn metrics(&self, now: f64) -> Metrics {
        let (c, p, k) = (&self.c, &self.at_tick, self.scale);
        let dt = now - self.last_tick_time.or(self.first_time).unwrap_or(now);
        let per_s = |a: u64, b: u64| {
            if dt > 0.0 {
                (a - b) as f64 * k / dt
            } else {
                0.0
            }
        };
        Metrics {
            cachesize: self.cache.len() as f64 * k,
            cachebytes: self.cache.bytes() as f64 * k,
            capacity: self
                .target
                .objects
                .or(self.target.bytes)
                .map_or(f64::INFINITY, |c| c as f64),
            hits: c.hits as f64 * k,
            misses: c.misses as f64 * k,
            gets: c.lookups() as f64 * k,
            puts: c.puts as f64 * k,
            reqrate: per_s(c.requests, p.requests),
            getrate: per_s(c.lookups(), p.lookups()),
            putrate: per_s(c.puts, p.puts),
            missrate: per_s(c.misses, p.misses),
            hitrate: per_s(c.hits, p.hits),
            backend_rate: per_s(c.misses + c.puts + c.deletes, p.misses + p.puts + p.deletes),
            backend_queue: 0.0,
            evictions: self.cache.evictions() as f64 * k,
            load: per_s(c.requests, p.requests),
            cpu: None,
            mem: None,
        }
    }

    /// Runs the candidate's policy on the shadow's metrics and applies its decision to the
    /// shadow's cache, then closes the tick's window sample.
    pub fn tick(&mut self, now: f64, tick: u64) {
        let metrics = [self.metrics(now)];
        let outcome = self.engine.tick(&TickInput {
            now,
            tick,
            whoami: 0,
            servers: &metrics,
            params: &self.spec.params,
            timeseries: match &self.log {
                Some(log) => log,
                None => &NoSeries,
            },
        });
        // A shadow's log lines would drown the host's; its errors are counted instead.
        let _ = self.engine.drain_logs();
        let rate = self.sampler.rate();
        let failed = outcome.error.is_some();
        if let Some(error) = outcome.error {
            self.last_error = Some(error.to_string());
        }
        let mut decided = false;
        let mut capped = false;
        if !failed {
            match outcome.decision.action {
                Action::None => {}
                Action::Evict(n) => {
                    decided = true;
                    self.cache.evict(((n as f64) * rate).round() as u64);
                }
                Action::SetCapacity(n) => {
                    decided = true;
                    self.target.objects = Some(n);
                    capped = self.apply_target();
                }
            }
        }
        if !capped && self.cache.len() >= self.max_objects {
            capped = true;
        }
        self.close(now, decided, failed, capped);
    }

    /// Closes the current interval without a policy tick (the end of a replay).
    pub fn finish(&mut self, now: f64) {
        if self.c.requests > self.at_tick.requests {
            self.close(now, false, false, false);
        }
    }

    fn close(&mut self, now: f64, decided: bool, failed: bool, capped: bool) {
        let (c, p, k) = (self.c, self.at_tick, self.scale);
        let evictions = self.cache.evictions();
        let mut s = std::mem::take(&mut self.current);
        s.lookups = (c.lookups() - p.lookups()) as f64 * k;
        s.hits = (c.hits - p.hits) as f64 * k;
        s.misses = (c.misses - p.misses) as f64 * k;
        s.evictions = (evictions - self.evictions_at_tick) as f64 * k;
        s.decided = decided;
        s.failed = failed;
        let t = &mut self.totals;
        t.ticks += 1;
        t.decisions += u64::from(decided);
        t.errors += u64::from(failed);
        t.capped_ticks += u64::from(capped);
        t.peak_objects = t.peak_objects.max(s.peak_objects);
        t.peak_bytes = t.peak_bytes.max(s.peak_bytes);
        self.sum_objects += s.sum_objects;
        self.sum_bytes += s.sum_bytes;
        self.window.push(s);
        self.at_tick = c;
        self.evictions_at_tick = evictions;
        self.last_tick_time = Some(now);
    }

    /// What the candidate's policy last failed with (a host's log shows it).
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// The figures of the last window.
    pub fn figures(&self) -> WindowFigures {
        self.window.figures()
    }

    /// Whole-run figures.
    pub fn totals(&self) -> ShadowTotals {
        let (c, k) = (&self.c, self.scale);
        let requests = c.requests as f64 * k;
        let lookups = c.lookups() as f64 * k;
        let misses = c.misses as f64 * k;
        ShadowTotals {
            requests,
            lookups,
            hits: c.hits as f64 * k,
            misses,
            miss_ratio: if lookups > 0.0 { misses / lookups } else { 0.0 },
            mean_objects: if requests > 0.0 {
                self.sum_objects / requests
            } else {
                0.0
            },
            mean_bytes: if requests > 0.0 {
                self.sum_bytes / requests
            } else {
                0.0
            },
            evictions: self.cache.evictions() as f64 * k,
            metadata_bytes: self.cache.metadata_bytes() as u64,
            ..self.totals
        }
    }
}
