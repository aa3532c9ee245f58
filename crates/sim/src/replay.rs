//! The replay loop: requests in, cache and back-end model driven, metrics and ticks out.
//!
//! Request semantics (DESIGN.md §5): `get` and `access` look up and insert on a miss (a miss
//! is a back-end read); `put` writes through to the back-end and (re)inserts; `delete`
//! removes from the cache and writes to the back-end. `miss_ratio = misses / (gets + accesses)`.

use crate::backend::{Backend, BackendSpec, BackendSummary};
use crate::cache_metrics::{cache_metrics, CacheSample};
use crate::replay_cache::{class_reports, classify, rule_op, ClassReport};
pub use crate::tick_schedule::MAX_EMPTY_TICKS;
use crate::tick_schedule::{Tick, TickSchedule};
use crate::warmup::{WarmupConfig, WarmupReport, WarmupRun};
use adapt::control::{Action, Controller, ControllerSummary, TickContext, TickMetrics};
use cache::classes::ClassSet;
pub use cache::hooks::HookSource;
use cache::{AccessLog, Algorithm, AnyCache, Cache, Capacity, ClassLayer, RequestCounts, Served};
use std::time::{Duration, Instant};
use trace::Request;

/// Why a replay stopped early.
#[derive(Debug)]
pub enum ReplayError<E> {
    /// The request source failed; its error is kept as it was (a trace reader's error
    /// already names the file and line).
    Source(E),
    /// A request's time the tick schedule cannot use: not finite, or so large that
    /// consecutive tick boundaries merge at the float resolution of the time.
    Clock {
        /// The request's position in the trace, from 1.
        request: u64,
        time: f64,
        reason: String,
    },
}

impl<E> ReplayError<E> {
    /// The same error with the source's error turned by `f` (e.g. into a message).
    pub fn map_source<F>(self, f: impl FnOnce(E) -> F) -> ReplayError<F> {
        match self {
            ReplayError::Source(e) => ReplayError::Source(f(e)),
            ReplayError::Clock {
                request,
                time,
                reason,
            } => ReplayError::Clock {
                request,
                time,
                reason,
            },
        }
    }
}

impl<E: std::fmt::Display> std::fmt::Display for ReplayError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::Source(e) => e.fmt(f),
            ReplayError::Clock {
                request,
                time,
                reason,
            } => write!(f, "request {request} (time {time} s): {reason}"),
        }
    }
}

// No `source()`: the source's message is already this error's message, and a chain
// printer would repeat it.
impl<E: std::fmt::Debug + std::fmt::Display> std::error::Error for ReplayError<E> {}

/// Everything the loop needs besides the requests.
#[derive(Clone)]
pub struct ReplayConfig {
    pub algorithm: Algorithm,
    pub capacity: Capacity,
    pub backend: BackendSpec,
    pub tick: Tick,
    /// Keep one metrics row per tick (for `--metrics-out` and reports).
    pub record_ticks: bool,
    /// Bound of the access log handed to policies.
    pub timeseries_limit: usize,
    /// Cache hints by class (`--classes`): one queue per class; `None` = the plain cache.
    pub classes: Option<ClassSet>,
    /// Restart (and optionally warm up) the cache part-way (`--restart-at`, `--warmup`).
    pub warmup: Option<WarmupConfig>,
    /// `--max-cache-size`: the most the cache may hold whatever `capacity` or a policy asks
    /// (each limit cut to it, see [`crate::ceiling`]); unlimited = no ceiling.
    pub max_capacity: Capacity,
    /// Admission policy in front of the eviction algorithm (`--admission`).
    pub admission: Option<cache::Admission>,
    /// Each request's next access time, in trace order ([`cache::future::next_accesses`]),
    /// for the offline algorithms (Belady, BeladySize); `None` for the others.
    pub future: Option<std::sync::Arc<[u64]>>,
    /// Per-request hooks of a policy (`admit`, `priority`, ...): the cache is scripted, its
    /// fallback `algorithm` LRU. Not combined with `classes`.
    pub hooks: Option<HookSource>,
    /// A bound on the distinct objects the requests can name, known before the first one
    /// (a fixed-record trace's length, [`trace::TraceReader::requests_bound`]): the cache's
    /// slab and index are sized for it up front instead of growing on the way
    /// ([`Cache::reserve`]). `None`: they grow.
    pub objects_bound: Option<u64>,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            algorithm: Algorithm::Lru,
            capacity: Capacity::default(),
            backend: BackendSpec::default(),
            tick: Tick::Seconds(1.0),
            record_ticks: false,
            timeseries_limit: 1_000_000,
            classes: None,
            warmup: None,
            max_capacity: Capacity::default(),
            admission: None,
            future: None,
            hooks: None,
            objects_bound: None,
        }
    }
}

/// One row of the per-tick metrics time series (`--metrics-out`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct TickRow {
    pub tick: u64,
    /// Trace seconds at the end of the tick.
    pub time: f64,
    pub requests: u64,
    pub cache_objects: u64,
    pub cache_bytes: u64,
    pub capacity_objects: Option<u64>,
    pub capacity_bytes: Option<u64>,
    /// Lookups (gets + accesses) and their hits during this tick.
    pub lookups: u64,
    pub hits: u64,
    pub hit_ratio: Option<f64>,
    pub backend_reads: u64,
    pub backend_writes: u64,
    pub backend_queue: f64,
    pub evictions: u64,
    /// Actions the policy took at this tick (`evict:N`, `capacity:N`), `;`-separated.
    pub action: String,
    pub policy_error: bool,
}

/// The result of a replay, serialised as `mantle replay --json` (with the run's inputs,
/// [`crate::summary::to_json`]). `mantle replay --server` fills the same struct from the
/// server's counters (`loadgen`), with `live` and `client` set and what it cannot know null.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ReplayReport {
    /// Live replays only: `mode`, `server`, `speed` and the client's own counts.
    #[serde(flatten)]
    pub live: Option<LiveRun>,
    pub requests: u64,
    pub gets: u64,
    pub puts: u64,
    pub deletes: u64,
    pub accesses: u64,
    pub hits: u64,
    pub misses: u64,
    pub miss_ratio: f64,
    /// Null live (sizes of hits are not seen by the client).
    pub byte_miss_ratio: Option<f64>,
    pub evictions: u64,
    pub peak_cache_objects: u64,
    /// Request-weighted mean of the number of cached objects.
    pub mean_cache_objects: f64,
    /// Time-weighted mean over trace time; null when the trace has no timestamps.
    pub time_mean_cache_objects: Option<f64>,
    pub peak_cache_bytes: u64,
    pub mean_cache_bytes: f64,
    pub time_mean_cache_bytes: Option<f64>,
    pub final_cache_objects: u64,
    pub final_cache_bytes: u64,
    /// Trace seconds from first to last request; null without timestamps.
    pub duration_seconds: Option<f64>,
    pub backend: BackendSummary,
    /// Live replays only: the client's view (latencies of writes, lag behind the trace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientFigures>,
    pub policy: Option<ControllerSummary>,
    pub wall_seconds: f64,
    pub requests_per_second: f64,
    /// Per-class figures with `--classes` (null without).
    pub classes: Option<Vec<ClassReport>>,
    /// Restart and warm-up figures with `--restart-at` (null without).
    pub warmup: Option<WarmupReport>,
    /// With `--max-cache-size`: how many policy capacity requests were cut to it (null
    /// without a ceiling).
    pub capacity_clamps: Option<u64>,
    /// The hook failure that made a scripted cache fall back to LRU (absent when none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook_failure: Option<String>,
    #[serde(skip)]
    pub ticks: Vec<TickRow>,
}

/// The fields only a live replay (`replay --server`) has, at the top level of its JSON.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LiveRun {
    /// Always `live`.
    pub mode: String,
    pub server: String,
    pub speed: f64,
    /// GETs the server answered nil (then filled with a SET), requests that failed.
    pub nil_replies: u64,
    pub fills: u64,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// A live replay's client-side figures (`client` in its JSON).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ClientFigures {
    pub in_flight_limit: u64,
    pub max_lag_seconds: f64,
    pub p50_write_latency_ms: Option<f64>,
    pub p99_write_latency_ms: Option<f64>,
    pub max_write_latency_ms: Option<f64>,
}

/// Counters the tick logic differences to get per-tick figures.
#[derive(Clone, Copy, Default)]
struct Counters {
    r: RequestCounts,
    /// Back-end reads of warm-up bulk loads (the requests' own are `r`'s misses).
    restart_reads: u64,
    evictions: u64,
}

impl Counters {
    fn backend_reads(&self) -> u64 {
        self.r.backend_reads() + self.restart_reads
    }

    fn backend_writes(&self) -> u64 {
        self.r.backend_writes()
    }
}

struct Loop<'c, L: ClassLayer> {
    record_ticks: bool,
    cache: Cache<L>,
    warmup: Option<WarmupRun<L>>,
    backend: Backend,
    log: Option<AccessLog>,
    record_log: bool,
    observe: bool,
    controller: Option<&'c mut dyn Controller>,
    c: Counters,
    at_last_tick: Counters,
    last_tick_time: f64,
    tick_no: u64,
    ticks: Vec<TickRow>,
    peak_objects: u64,
    peak_bytes: u64,
    sum_objects: u128,
    sum_bytes: u128,
    area_objects: f64,
    area_bytes: f64,
    first_time: Option<f64>,
    last_time: f64,
    policy_actions: u64,
    policy_errors: u64,
    max_capacity: Capacity,
    capacity_clamps: u64,
    /// Next access times of an offline algorithm's requests, and how many were served.
    future: Option<std::sync::Arc<[u64]>>,
    served: usize,
}

/// Requests the loop takes from its source at a time.
pub const BATCH: usize = 1024;

/// Replays every request `next` yields. `next` returns `Ok(None)` at the end of the trace.
///
/// Every request costs O(1) tick work however far apart the timestamps are: at most
/// [`MAX_EMPTY_TICKS`] empty ticks run one by one, the rest of a gap is one tick.
pub fn replay<E>(
    config: &ReplayConfig,
    controller: Option<&mut dyn Controller>,
    mut next: impl FnMut() -> Result<Option<Request>, E>,
) -> Result<ReplayReport, ReplayError<E>> {
    replay_batches(config, controller, |batch| {
        while batch.len() < BATCH {
            match next()? {
                Some(req) => batch.push(req),
                None => break,
            }
        }
        Ok(())
    })
}

/// [`replay`] for a source that hands out requests a batch at a time (a trace reader's
/// `next_batch`): `fill` appends up to [`BATCH`] requests to the empty buffer it is given,
/// and appending none ends the trace. Requests appended before `fill` fails are replayed
/// before its error is returned, as if they had come one by one.
pub fn replay_batches<E>(
    config: &ReplayConfig,
    controller: Option<&mut dyn Controller>,
    fill: impl FnMut(&mut Vec<Request>) -> Result<(), E>,
) -> Result<ReplayReport, ReplayError<E>> {
    let (capacity, _) = crate::ceiling::clamp(config.capacity, config.max_capacity);
    if let Some(hooks) = &config.hooks {
        let mut cache = Cache::with_hooks(capacity, hooks.make());
        cache.set_admission(config.admission.clone());
        if let Some(bound) = config.objects_bound {
            cache.reserve(bound);
        }
        return run(config, controller, fill, cache);
    }
    // The one run-time choice of layer; each runs a loop compiled for it.
    let mut cache = AnyCache::new(config.algorithm, capacity, config.classes.clone());
    cache.set_admission(config.admission.clone());
    if let Some(bound) = config.objects_bound {
        cache.reserve(bound);
    }
    match cache {
        AnyCache::Plain(cache) => run(config, controller, fill, cache),
        AnyCache::Classed(cache) => run(config, controller, fill, cache),
    }
}

fn run<E, L: ClassLayer>(
    config: &ReplayConfig,
    mut controller: Option<&mut dyn Controller>,
    mut fill: impl FnMut(&mut Vec<Request>) -> Result<(), E>,
    cache: Cache<L>,
) -> Result<ReplayReport, ReplayError<E>> {
    let started = Instant::now();
    let needs_log = controller.as_ref().is_some_and(|c| c.needs_access_log());
    let mut lp = Loop {
        record_ticks: config.record_ticks,
        warmup: config.warmup.clone().map(|w| WarmupRun::new(w, &cache)),
        cache,
        backend: Backend::new(config.backend),
        // A controller that ignores the time series still gets an (empty) one to hand out.
        log: controller.as_ref().map(|_| {
            AccessLog::new(if needs_log {
                config.timeseries_limit
            } else {
                1
            })
        }),
        record_log: needs_log,
        observe: controller.as_ref().is_some_and(|c| c.observes_requests()),
        controller: controller.take(),
        c: Counters::default(),
        at_last_tick: Counters::default(),
        last_tick_time: 0.0,
        tick_no: 0,
        ticks: Vec::new(),
        peak_objects: 0,
        peak_bytes: 0,
        sum_objects: 0,
        sum_bytes: 0,
        area_objects: 0.0,
        area_bytes: 0.0,
        first_time: None,
        last_time: 0.0,
        policy_actions: 0,
        policy_errors: 0,
        max_capacity: config.max_capacity,
        capacity_clamps: 0,
        future: config.future.clone(),
        served: 0,
    };
    let mut schedule = TickSchedule::new(config.tick);
    // Nothing looks at the run between requests (no policy, no metrics rows, no warm-up):
    // ticks then change nothing but the clock check, and the loop is compiled without them.
    let watched = lp.controller.is_some() || lp.record_ticks || lp.warmup.is_some();
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        batch.clear();
        let filled = fill(&mut batch);
        if watched {
            lp.serve_watched(&batch, &mut schedule)?;
        } else {
            lp.serve_unwatched(&batch, &mut schedule)?;
        }
        filled.map_err(ReplayError::Source)?;
        if batch.is_empty() {
            break;
        }
    }
    // A final tick closes the last partial interval so the metrics series covers the trace.
    if lp.c.r.requests > lp.at_last_tick.r.requests
        && (config.record_ticks || lp.controller.is_some())
    {
        let now = lp.last_time;
        lp.record_row(now, String::new(), false);
    }
    Ok(lp.finish(started.elapsed()))
}

impl<L: ClassLayer> Loop<'_, L> {
    /// Refuses a time the tick schedule cannot use; the first request starts the clock.
    #[inline]
    fn check_time<E>(&mut self, req: &Request) -> Result<(), ReplayError<E>> {
        if !req.time.is_finite() {
            return Err(ReplayError::Clock {
                request: self.c.r.requests + 1,
                time: req.time,
                reason: "a request time must be a finite number of seconds".to_string(),
            });
        }
        if self.first_time.is_none() {
            self.first_time = Some(req.time);
            self.last_time = req.time;
            self.last_tick_time = req.time;
        }
        Ok(())
    }

    /// Runs the ticks due before `req`.
    #[inline]
    fn ticks_before<E>(
        &mut self,
        schedule: &mut TickSchedule,
        req: &Request,
    ) -> Result<(), ReplayError<E>> {
        schedule
            .before(req.time, |at| self.tick(at))
            .map_err(|reason| self.clock_error(req, reason))
    }

    /// [`Loop::ticks_before`] with nobody watching: the grid moves on and refuses a clock it
    /// cannot follow, but a tick runs nothing, since all it would do is move the per-tick
    /// baselines, which only a policy or a metrics row reads. (cloudPhysicsIO, 114k requests
    /// in 7,200 s, reaches a 1 s boundary every 16 requests on average.)
    #[inline]
    fn grid_before<E>(
        &self,
        schedule: &mut TickSchedule,
        req: &Request,
    ) -> Result<(), ReplayError<E>> {
        schedule
            .before(req.time, |_| {})
            .map_err(|reason| self.clock_error(req, reason))
    }

    #[cold]
    fn clock_error<E>(&self, req: &Request, reason: String) -> ReplayError<E> {
        ReplayError::Clock {
            request: self.c.r.requests + 1,
            time: req.time,
            reason,
        }
    }

    /// A batch with a policy, metrics rows or a warm-up watching: every tick runs.
    fn serve_watched<E>(
        &mut self,
        batch: &[Request],
        schedule: &mut TickSchedule,
    ) -> Result<(), ReplayError<E>> {
        for req in batch {
            self.check_time(req)?;
            self.ticks_before(schedule, req)?;
            let restart = self
                .warmup
                .as_ref()
                .is_some_and(|w| w.due(self.c.r.requests));
            if restart {
                self.restart(req.time);
            }
            self.advance_clock(req.time);
            if self.future.is_some() {
                self.serve::<true, true>(req);
            } else {
                self.serve::<true, false>(req);
            }
            if restart {
                // The warm-up's bulk load may have filled the cache past its earlier peak.
                self.note_peaks();
            }
            if schedule.after() {
                let now = self.last_time;
                self.tick(now);
            }
        }
        Ok(())
    }

    /// A batch nobody watches: a tick would only move the per-tick baselines, which nothing
    /// reads, so no tick runs; time ticks keep their clock check (a trace whose clock the
    /// grid cannot follow is refused either way).
    fn serve_unwatched<E>(
        &mut self,
        batch: &[Request],
        schedule: &mut TickSchedule,
    ) -> Result<(), ReplayError<E>> {
        let Some(first) = batch.first() else {
            return Ok(());
        };
        if self.first_time.is_none() {
            // The first request starts the clock at its own time, so the loop below would
            // skip it: it lays the tick grid here.
            self.check_time(first)?;
            self.grid_before(schedule, first)?;
        }
        // Whether a pre-pass knows the future is fixed for the run: test it once a batch.
        if self.future.is_some() {
            self.serve_run::<E, true>(batch, schedule)
        } else {
            self.serve_run::<E, false>(batch, schedule)
        }
    }

    /// The unwatched loop. A request at the time of the one before it (most of them: trace
    /// clocks tick in seconds or microseconds, many requests a tick) cannot be refused, cross a
    /// tick boundary (the next one lies beyond every time seen) or add to the time-weighted
    /// means, so one comparison skips all three; a NaN time never equals and takes the checks.
    #[inline(always)]
    fn serve_run<E, const FUTURE: bool>(
        &mut self,
        batch: &[Request],
        schedule: &mut TickSchedule,
    ) -> Result<(), ReplayError<E>> {
        for req in batch {
            if req.time != self.last_time {
                if !req.time.is_finite() {
                    return self.check_time(req);
                }
                self.grid_before(schedule, req)?;
                self.advance_clock(req.time);
            }
            self.serve::<false, FUTURE>(req);
        }
        Ok(())
    }

    /// Empties the cache and runs the warm-up's bulk load, counted as back-end reads.
    fn restart(&mut self, now: f64) {
        if let Some(w) = &mut self.warmup {
            let reads = w.restart(&mut self.cache, now);
            self.backend.count_reads(reads);
            self.c.restart_reads += reads;
        }
    }

    /// Integrates the time-weighted means up to `now`, before the request at `now` is served
    /// (a clock that goes back adds nothing and keeps the latest time).
    #[inline(always)]
    fn advance_clock(&mut self, now: f64) {
        if now > self.last_time {
            let dt = now - self.last_time;
            self.area_objects += self.cache.len() as f64 * dt;
            self.area_bytes += self.cache.bytes() as f64 * dt;
            self.last_time = now;
        }
    }

    /// One request, its clock already advanced ([`Loop::advance_clock`]). `WATCHED`: also
    /// feed the access log, the warm-up and an observing controller (each only if present);
    /// without, the loop has none of those branches. `FUTURE`: the run has a pre-pass's next
    /// access times (`self.future` is `Some`).
    #[inline(always)]
    fn serve<const WATCHED: bool, const FUTURE: bool>(&mut self, req: &Request) {
        let now = req.time;
        let class = classify(&self.cache, req);
        let op = rule_op(req.op);
        let served = if FUTURE {
            // A trace longer than its pre-pass (it changed since) knows no future.
            let next = self
                .future
                .as_deref()
                .and_then(|future| future.get(self.served))
                .copied()
                .unwrap_or(cache::future::NEVER);
            self.served += 1;
            self.cache
                .serve_with_future(op, req.key, req.size, class, &mut self.c.r, next)
        } else {
            self.cache
                .serve_as(op, req.key, req.size, class, &mut self.c.r)
        };
        match served {
            Served::Miss => self.backend.read(now),
            Served::Written | Served::Deleted => self.backend.write(now),
            Served::Hit => {}
        }
        if served.inserted() {
            self.note_peaks();
        }
        if WATCHED {
            // The access log holds what a policy's `timeseries()` shows: lookups and writes.
            if self.record_log && served != Served::Deleted {
                if let Some(log) = &mut self.log {
                    log.record(now, req.key);
                }
            }
            if let Some(w) = &mut self.warmup {
                w.observe(req, class, served.lookup());
            }
        }
        let objects = self.cache.len();
        let bytes = self.cache.bytes();
        self.sum_objects += objects as u128;
        self.sum_bytes += bytes as u128;
        if WATCHED && self.observe {
            if let Some(c) = self.controller.as_deref_mut() {
                c.observe(req, objects, bytes);
            }
        }
    }

    /// Footprint peaks, after an insertion (only an insertion can raise them: a lookup that
    /// hits changes neither the objects nor the bytes cached, a removal lowers them).
    /// Stores only when a peak rises (rarely, after the cache has filled): as two `max`es
    /// the compiler paired them into a vector compare that cost about 15 instructions a miss
    /// (SSE2 has no unsigned 64-bit max).
    #[inline(always)]
    fn note_peaks(&mut self) {
        let (objects, bytes) = (self.cache.len(), self.cache.bytes());
        if objects > self.peak_objects {
            self.peak_objects = objects;
        }
        if bytes > self.peak_bytes {
            self.peak_bytes = bytes;
        }
    }

    fn metrics(&self, now: f64) -> TickMetrics {
        let (c, p) = (&self.c, &self.at_last_tick);
        cache_metrics(&CacheSample {
            cache: &self.cache,
            now: &c.r,
            then: &p.r,
            backend_ops: (
                c.backend_reads() + c.backend_writes(),
                p.backend_reads() + p.backend_writes(),
            ),
            backend_queue: self.backend.queue_len(now),
            seconds: now - self.last_tick_time,
        })
    }

    fn tick(&mut self, now: f64) {
        // Only a metrics row shows the action's text: a policy that acts every tick should
        // not format (and allocate) one per tick for nothing.
        let mut actions_text = String::new();
        let mut failed = false;
        if self.controller.is_some() {
            let metrics = self.metrics(now);
            let (Some(controller), Some(log)) = (self.controller.as_deref_mut(), self.log.as_ref())
            else {
                unreachable!("a controller always comes with an access log");
            };
            let decision = controller.tick(&TickContext {
                now,
                tick: self.tick_no + 1,
                metrics: &metrics,
                access_log: log,
            });
            if decision.error.is_some() {
                failed = true;
                self.policy_errors += 1;
            } else {
                match decision.action {
                    Action::None => {}
                    Action::Evict(n) => {
                        self.policy_actions += 1;
                        self.cache.evict(n);
                        if let Some(w) = &mut self.warmup {
                            w.evict(n);
                        }
                        if self.record_ticks {
                            actions_text = format!("evict:{n}");
                        }
                    }
                    Action::SetCapacity(n) => {
                        self.policy_actions += 1;
                        let mut cap = self.cache.capacity();
                        cap.objects = Some(n);
                        let (cap, clamped) = crate::ceiling::clamp(cap, self.max_capacity);
                        self.capacity_clamps += u64::from(clamped);
                        self.cache.set_capacity(cap);
                        if let Some(w) = &mut self.warmup {
                            w.set_capacity(cap);
                        }
                        if self.record_ticks {
                            actions_text = match (clamped, cap.objects) {
                                (true, Some(max)) => format!("capacity:{n} clamped:{max}"),
                                _ => format!("capacity:{n}"),
                            };
                        }
                    }
                }
            }
        }
        self.record_row(now, actions_text, failed);
    }

    /// Closes the current tick interval: appends a metrics row (when asked for) and moves
    /// the per-tick baselines forward.
    fn record_row(&mut self, now: f64, action: String, policy_error: bool) {
        self.tick_no += 1;
        if self.record_ticks {
            let c = &self.c;
            let p = &self.at_last_tick;
            let lookups = c.r.lookups() - p.r.lookups();
            let hits = c.r.hits - p.r.hits;
            let cap = self.cache.capacity();
            self.ticks.push(TickRow {
                tick: self.tick_no,
                time: now,
                requests: c.r.requests - p.r.requests,
                cache_objects: self.cache.len(),
                cache_bytes: self.cache.bytes(),
                capacity_objects: cap.objects,
                capacity_bytes: cap.bytes,
                lookups,
                hits,
                hit_ratio: (lookups > 0).then(|| hits as f64 / lookups as f64),
                backend_reads: c.backend_reads() - p.backend_reads(),
                backend_writes: c.backend_writes() - p.backend_writes(),
                backend_queue: self.backend.queue_len(now),
                evictions: self.cache.evictions() - p.evictions,
                action,
                policy_error,
            });
        }
        self.c.evictions = self.cache.evictions();
        self.at_last_tick = self.c;
        self.last_tick_time = now;
    }

    fn finish(mut self, wall: Duration) -> ReplayReport {
        let c = self.c.r;
        let lookups = c.lookups();
        let ratio = |a: u64, b: u64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
        let duration = self.first_time.map(|t0| self.last_time - t0).unwrap_or(0.0);
        let timed = duration > 0.0;
        let wall_seconds = wall.as_secs_f64();
        ReplayReport {
            live: None,
            requests: c.requests,
            gets: c.gets,
            puts: c.puts,
            deletes: c.deletes,
            accesses: c.accesses,
            hits: c.hits,
            misses: c.misses,
            miss_ratio: ratio(c.misses, lookups),
            byte_miss_ratio: Some(ratio(c.miss_bytes, c.lookup_bytes)),
            evictions: self.cache.evictions(),
            peak_cache_objects: self.peak_objects,
            mean_cache_objects: mean(self.sum_objects, c.requests),
            time_mean_cache_objects: timed.then(|| self.area_objects / duration),
            peak_cache_bytes: self.peak_bytes,
            mean_cache_bytes: mean(self.sum_bytes, c.requests),
            time_mean_cache_bytes: timed.then(|| self.area_bytes / duration),
            final_cache_objects: self.cache.len(),
            final_cache_bytes: self.cache.bytes(),
            duration_seconds: timed.then_some(duration),
            backend: self.backend.summary(timed),
            client: None,
            policy: self.controller.as_ref().map(|ctl| {
                let mut summary = ctl.summary();
                summary.actions = self.policy_actions;
                summary.errors = self.policy_errors;
                summary
            }),
            wall_seconds,
            requests_per_second: if wall_seconds > 0.0 {
                c.requests as f64 / wall_seconds
            } else {
                0.0
            },
            classes: class_reports(&self.cache),
            warmup: self.warmup.take().map(WarmupRun::finish),
            capacity_clamps: (self.max_capacity != Capacity::default())
                .then_some(self.capacity_clamps),
            hook_failure: self.cache.hook_failure().map(|f| f.to_string()),
            ticks: std::mem::take(&mut self.ticks),
        }
    }
}

fn mean(sum: u128, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        sum as f64 / n as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TickDecision;
    use adapt::control::ControllerSummary;
    use trace::Op;

    /// A mixed trace: every op, repeated keys, sizes that force evictions, and time steps
    /// (some zero, some across several ticks).
    fn trace(n: usize) -> Vec<Request> {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut time = 100.0;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                time += [0.0, 0.0, 0.25, 3.0][(x >> 3) as usize % 4];
                Request {
                    time,
                    key: (x >> 20) % 300,
                    size: (x >> 40) as u32 % 500 + 1,
                    op: [Op::Get, Op::Access, Op::Access, Op::Put, Op::Delete]
                        [(x >> 9) as usize % 5],
                    offset: 0,
                }
            })
            .collect()
    }

    fn config(algorithm: Algorithm, record_ticks: bool) -> ReplayConfig {
        ReplayConfig {
            algorithm,
            capacity: Capacity::bytes(20_000),
            record_ticks,
            ..ReplayConfig::default()
        }
    }

    /// The report without what legitimately differs between runs (timings, metrics rows).
    fn figures(mut r: ReplayReport) -> ReplayReport {
        r.wall_seconds = 0.0;
        r.requests_per_second = 0.0;
        r.ticks.clear();
        r
    }

    fn one_by_one(config: &ReplayConfig, reqs: &[Request]) -> ReplayReport {
        let mut it = reqs.iter().copied();
        replay(config, None, || Ok::<_, ()>(it.next())).unwrap()
    }

    /// The loop compiled without ticks (nothing watching) reports exactly what the loop that
    /// runs every tick does, for every algorithm, with ticks by time and by requests.
    #[test]
    fn the_unwatched_loop_reports_what_the_watched_one_does() {
        let reqs = trace(20_000);
        // The offline algorithms decide by next-access times, which these configs do not give
        // (crates/cache tests them with `access_with_future`).
        for alg in Algorithm::ALL.into_iter().filter(|a| !a.is_offline()) {
            // LIRS refuses objects above 1% of the cache, and W-TinyLFU above its 1% window:
            // at 20 kB they would cache only the small ones, which all fit.
            let capacity = match alg {
                Algorithm::Lirs | Algorithm::WTinyLfu => Capacity::bytes(60_000),
                _ => config(alg, false).capacity,
            };
            for tick in [Tick::Seconds(1.0), Tick::Ops(7)] {
                let plain = ReplayConfig {
                    tick,
                    capacity,
                    ..config(alg, false)
                };
                let watched = ReplayConfig {
                    tick,
                    capacity,
                    ..config(alg, true)
                };
                let a = one_by_one(&plain, &reqs);
                let b = one_by_one(&watched, &reqs);
                assert!(!b.ticks.is_empty());
                // libCacheSim's ClockPro never evicts: it refuses what does not fit in half
                // the cache (cache's eviction/clockpro_libcachesim.rs).
                let evicts = alg != Algorithm::ClockProLibCacheSim;
                assert!(
                    (a.evictions > 0) == evicts && a.hits > 0,
                    "{alg}: a trace that exercises"
                );
                assert_eq!(figures(a), figures(b), "{alg} {tick:?}");
            }
        }
    }

    /// Batches of any size, and the one-request-at-a-time source, give the same report.
    #[test]
    fn batch_boundaries_do_not_change_the_report() {
        let reqs = trace(5_000);
        for record in [false, true] {
            let cfg = config(Algorithm::S3Fifo, record);
            let whole = one_by_one(&cfg, &reqs);
            for size in [1, 3, 1000, BATCH] {
                let mut chunks = reqs.chunks(size);
                let r = replay_batches(&cfg, None, |batch| {
                    if let Some(c) = chunks.next() {
                        batch.extend_from_slice(c);
                    }
                    Ok::<_, ()>(())
                })
                .unwrap();
                assert_eq!(r.ticks, whole.ticks, "size {size}");
                assert_eq!(figures(r), figures(whole.clone()), "size {size}");
            }
        }
    }

    /// A source that fails part-way through a batch: the requests before the failure are
    /// replayed first, so a bad time among them is reported, as one by one it would be.
    #[test]
    fn requests_before_a_source_error_are_replayed_first() {
        for watched in [false, true] {
            let cfg = config(Algorithm::Lru, watched);
            let mut reqs = trace(10);
            let r = replay_batches(&cfg, None, |batch| {
                batch.extend_from_slice(&reqs);
                Err("broken record")
            });
            assert!(matches!(r, Err(ReplayError::Source("broken record"))));
            reqs[4].time = f64::NAN;
            let r = replay_batches(&cfg, None, |batch| {
                batch.extend_from_slice(&reqs);
                Err("broken record")
            });
            match r {
                Err(ReplayError::Clock { request, .. }) => assert_eq!(request, 5),
                other => panic!("expected a clock error, got {other:?}"),
            }
        }
    }

    struct Shrinker;

    impl Controller for Shrinker {
        fn tick(&mut self, ctx: &TickContext<'_>) -> TickDecision {
            TickDecision {
                action: if ctx.tick.is_multiple_of(2) {
                    Action::Evict(3)
                } else {
                    Action::SetCapacity(40)
                },
                error: None,
            }
        }
        fn summary(&self) -> ControllerSummary {
            ControllerSummary::default()
        }
    }

    /// Actions are applied whether or not metrics rows are kept; their text is in the rows.
    #[test]
    fn actions_apply_with_or_without_metrics_rows() {
        let reqs = trace(3_000);
        let run = |record| {
            let cfg = config(Algorithm::Lru, record);
            let mut it = reqs.iter().copied();
            replay(&cfg, Some(&mut Shrinker), || Ok::<_, ()>(it.next())).unwrap()
        };
        let (rows, none) = (run(true), run(false));
        assert!(rows.ticks.iter().any(|t| t.action == "evict:3"));
        assert!(rows.ticks.iter().any(|t| t.action == "capacity:40"));
        assert!(none.ticks.is_empty());
        assert_eq!(figures(rows), figures(none));
    }
}
