//! Bonfire-style cache warm-up in replay (seed 001): a monitor records accesses; at the
//! restart point the cache is emptied and, with a strategy, bulk-loaded with the chosen set
//! (read from the store in sorted key order, counted as back-end reads); then the hit ratio
//! is compared window by window with an always-warm cache and an on-demand (cold) cache fed
//! the same requests alongside, to measure warm-up time and back-end load as Bonfire defines
//! them. `docs/warmup.md` states every definition and the measured numbers.

mod monitor;

pub use cache::warmup::{Strategy, WarmupSpec};
pub use monitor::{Granularity, Monitor};

use crate::replay_cache::ReplayCache;
use std::str::FromStr;
use trace::{Op, Request};

/// `--restart-at`: after this many requests, or after this percentage of the trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RestartAt {
    Requests(u64),
    Percent(f64),
}

impl RestartAt {
    /// Requests served before the restart, for a trace of `total` requests.
    pub fn resolve(self, total: u64) -> u64 {
        match self {
            RestartAt::Requests(n) => n,
            RestartAt::Percent(p) => (total as f64 * p / 100.0).round() as u64,
        }
    }
}

impl FromStr for RestartAt {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let s = text.trim();
        if let Some(p) = s.strip_suffix('%') {
            let p: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("invalid restart point '{text}': expected N or P%"))?;
            if !(0.0..=100.0).contains(&p) {
                return Err(format!(
                    "invalid restart point '{text}': percentage must be in 0..100"
                ));
            }
            return Ok(RestartAt::Percent(p));
        }
        s.parse().map(RestartAt::Requests).map_err(|_| {
            format!("invalid restart point '{text}': expected requests (N) or a percentage (P%)")
        })
    }
}

/// Everything the restart needs.
#[derive(Clone, Debug, PartialEq)]
pub struct WarmupConfig {
    /// Requests served before the cache restarts.
    pub restart_at: u64,
    /// `None`: the cache refills on demand.
    pub spec: Option<WarmupSpec>,
    pub granularity: Granularity,
    /// Most units the monitor keeps.
    pub monitor_limit: usize,
    /// Lookups per convergence window.
    pub window_lookups: u64,
    /// Random-K's seed.
    pub seed: u64,
    /// Hit-ratio gaps (absolute) to the always-warm cache that count as converged.
    pub strict_band: f64,
    pub loose_band: f64,
}

/// First-K's default look-back: Bonfire's 24 hours.
pub const DEFAULT_PERIOD: f64 = 24.0 * 3600.0;

impl Default for WarmupConfig {
    fn default() -> Self {
        WarmupConfig {
            restart_at: 0,
            spec: None,
            granularity: Granularity::Keys,
            monitor_limit: 1 << 20,
            window_lookups: 1000,
            seed: 1,
            strict_band: 0.01,
            loose_band: 0.05,
        }
    }
}

/// Hit-ratio window after the restart, one row of `warmup.windows`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct WindowRow {
    /// Requests since the restart at the window's end.
    pub requests: u64,
    /// Trace seconds since the restart at the window's end.
    pub seconds: f64,
    pub lookups: u64,
    pub hit_ratio: f64,
    pub warm_hit_ratio: f64,
    pub ondemand_hit_ratio: f64,
}

/// `replay --json`'s `warmup` object. Definitions in `docs/warmup.md`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct WarmupReport {
    /// `lastk`, `firstk`, `topk`, `randomk`, or null for on-demand refill.
    pub strategy: Option<String>,
    pub k: Option<u64>,
    /// `keys` or `regions`; region size in bytes.
    pub granularity: String,
    pub region_bytes: Option<u64>,
    pub restart_at_request: u64,
    pub restart_time: f64,
    pub selected_units: u64,
    pub loaded_objects: u64,
    pub loaded_bytes: u64,
    /// Objects read from the store for the bulk load (also in `backend.reads`).
    pub bulk_load_reads: u64,
    pub monitor_units: u64,
    pub monitor_trims: u64,
    pub window_lookups: u64,
    pub strict_band: f64,
    pub loose_band: f64,
    /// Requests after the restart until the hit ratio stays within the strict (loose) band of
    /// the always-warm cache's; null if it never does.
    pub convergence_requests: Option<u64>,
    pub convergence_requests_loose: Option<u64>,
    pub convergence_seconds: Option<f64>,
    pub convergence_seconds_loose: Option<f64>,
    pub ondemand_convergence_requests: Option<u64>,
    pub ondemand_convergence_requests_loose: Option<u64>,
    pub ondemand_convergence_seconds: Option<f64>,
    /// Back-end reads from the restart until on-demand converges (strict; to the end if it
    /// never does), bulk load included; and on-demand's over the same requests.
    pub backend_reads_during_warmup: u64,
    pub ondemand_backend_reads_during_warmup: u64,
    /// Lookups in that interval, and the share the cache served (Bonfire's "I/O load
    /// reduction", foreground I/O only: the bulk load is in `backend_reads_during_warmup`).
    pub lookups_during_warmup: u64,
    pub load_reduction: Option<f64>,
    pub ondemand_load_reduction: Option<f64>,
    /// `1 - convergence / on-demand convergence` (strict), and
    /// `load_reduction / ondemand_load_reduction - 1`.
    pub warmup_time_improvement: Option<f64>,
    pub load_reduction_improvement: Option<f64>,
    /// Hit ratios over everything after the restart.
    pub hit_ratio_after_restart: Option<f64>,
    pub warm_hit_ratio_after_restart: Option<f64>,
    pub ondemand_hit_ratio_after_restart: Option<f64>,
    pub windows: Vec<WindowRow>,
}

#[derive(Clone, Copy, Default)]
struct Window {
    start_requests: u64,
    start_time: f64,
    end_requests: u64,
    end_time: f64,
    lookups: u64,
    hits: u64,
    warm_hits: u64,
    ondemand_hits: u64,
}

impl Window {
    fn ratio(hits: u64, lookups: u64) -> f64 {
        if lookups == 0 {
            0.0
        } else {
            hits as f64 / lookups as f64
        }
    }
}

/// The warm-up side of a replay: monitor before the restart, shadows throughout.
pub(crate) struct WarmupRun<C: ReplayCache> {
    config: WarmupConfig,
    monitor: Option<Monitor>,
    warm: C,
    ondemand: Option<C>,
    restarted: bool,
    restart_time: f64,
    selected_units: u64,
    loaded_objects: u64,
    loaded_bytes: u64,
    bulk_reads: u64,
    monitor_units: u64,
    monitor_trims: u64,
    requests_since: u64,
    last_time: f64,
    current: Window,
    windows: Vec<Window>,
}

impl<C: ReplayCache> WarmupRun<C> {
    pub fn new(config: WarmupConfig, main: &C) -> Self {
        let period = config
            .spec
            .and_then(|s| s.period)
            .map_or(DEFAULT_PERIOD, |d| d.as_secs_f64());
        WarmupRun {
            monitor: config
                .spec
                .map(|_| Monitor::new(config.granularity, config.monitor_limit, period)),
            warm: main.fresh(),
            ondemand: None,
            restarted: false,
            restart_time: 0.0,
            selected_units: 0,
            loaded_objects: 0,
            loaded_bytes: 0,
            bulk_reads: 0,
            monitor_units: 0,
            monitor_trims: 0,
            requests_since: 0,
            last_time: 0.0,
            current: Window::default(),
            windows: Vec::new(),
            config,
        }
    }

    /// Whether the restart happens before serving the next request.
    #[inline]
    pub fn due(&self, served: u64) -> bool {
        !self.restarted && served == self.config.restart_at
    }

    /// Empties `main` and bulk-loads it; returns the objects read from the store.
    pub fn restart(&mut self, main: &mut C, now: f64) -> u64 {
        self.restarted = true;
        self.restart_time = now;
        self.last_time = now;
        self.current = Window {
            start_time: now,
            ..Window::default()
        };
        main.empty();
        let (Some(spec), Some(monitor)) = (self.config.spec, self.monitor.take()) else {
            return 0;
        };
        self.monitor_units = monitor.units() as u64;
        self.monitor_trims = monitor.trims();
        self.ondemand = Some(main.fresh());
        let chosen = monitor.choose(spec.strategy, spec.k, now, self.config.seed);
        self.selected_units = chosen.len() as u64;
        let mut objects = monitor.objects_of(&chosen);
        drop(monitor);
        // Take objects in rank order while they fit, then read them in key order (Bonfire
        // sorts the warm-up set by address so the store reads it sequentially).
        let capacity = main.capacity();
        let (mut count, mut bytes) = (0u64, 0u64);
        let fitting = objects
            .iter()
            .take_while(|o| {
                let fits = !capacity.exceeded_by(count + 1, bytes + u64::from(o.size));
                if fits {
                    count += 1;
                    bytes += u64::from(o.size);
                }
                fits
            })
            .count();
        objects.truncate(fitting);
        objects.sort_unstable_by_key(|o| o.key);
        for object in &objects {
            let class = main.classify(object);
            if main.insert(object.key, object.size, class) {
                self.loaded_objects += 1;
                self.loaded_bytes += u64::from(object.size);
            }
        }
        self.bulk_reads = objects.len() as u64;
        self.bulk_reads
    }

    /// Feeds one request (already served by the main cache; `main_hit` for lookups) to the
    /// monitor and the shadow caches, and accounts the windows after the restart.
    #[inline]
    pub fn observe(&mut self, req: &Request, class: C::Class, main_hit: Option<bool>) {
        if !self.restarted {
            if let Some(m) = &mut self.monitor {
                if req.op != Op::Delete {
                    m.record(req);
                }
            }
        }
        let warm_hit = serve(&mut self.warm, req, class);
        let ondemand_hit = self.ondemand.as_mut().map(|c| serve(c, req, class));
        if !self.restarted {
            return;
        }
        self.requests_since += 1;
        if req.time > self.last_time {
            self.last_time = req.time;
        }
        let w = &mut self.current;
        if let Some(hit) = main_hit {
            w.lookups += 1;
            w.hits += u64::from(hit);
            w.warm_hits += u64::from(warm_hit.unwrap_or(false));
            w.ondemand_hits += u64::from(ondemand_hit.flatten().unwrap_or(hit));
        }
        if w.lookups >= self.config.window_lookups {
            self.close_window();
        }
    }

    fn close_window(&mut self) {
        let mut w = self.current;
        w.end_requests = self.requests_since;
        w.end_time = self.last_time;
        self.windows.push(w);
        self.current = Window {
            start_requests: self.requests_since,
            start_time: self.last_time,
            ..Window::default()
        };
    }

    /// Applies a policy's eviction to the shadows too, so they stay comparable.
    pub fn evict(&mut self, n: u64) {
        self.warm.evict(n);
        if let Some(c) = &mut self.ondemand {
            c.evict(n);
        }
    }

    pub fn set_capacity(&mut self, capacity: cache::Capacity) {
        self.warm.set_capacity(capacity);
        if let Some(c) = &mut self.ondemand {
            c.set_capacity(capacity);
        }
    }

    pub fn finish(mut self) -> WarmupReport {
        if let Some(m) = &self.monitor {
            self.monitor_units = m.units() as u64;
            self.monitor_trims = m.trims();
        }
        if self.current.lookups > 0 {
            self.close_window();
        }
        let windows = &self.windows;
        let timed = self.last_time > self.restart_time;
        let cfg = &self.config;
        let main = |w: &Window| Window::ratio(w.hits, w.lookups);
        let od = |w: &Window| Window::ratio(w.ondemand_hits, w.lookups);
        let strict = converged_from(windows, cfg.strict_band, main);
        let loose = converged_from(windows, cfg.loose_band, main);
        let od_strict = converged_from(windows, cfg.strict_band, od);
        let od_loose = converged_from(windows, cfg.loose_band, od);
        let at = |i: Option<usize>| i.map(|i| window_start(windows, i).0);
        let secs = |i: Option<usize>| {
            i.filter(|_| timed)
                .map(|i| window_start(windows, i).1 - self.restart_time)
        };
        // Bonfire's load reduction over the on-demand warm-up period (the longer one).
        let span = od_strict.unwrap_or(windows.len());
        let lookups: u64 = windows[..span].iter().map(|w| w.lookups).sum();
        let misses: u64 = windows[..span].iter().map(|w| w.lookups - w.hits).sum();
        let od_misses: u64 = windows[..span]
            .iter()
            .map(|w| w.lookups - w.ondemand_hits)
            .sum();
        let reads = misses + self.bulk_reads;
        // Bonfire's load reduction is over foreground I/O: the share of lookups the cache
        // served. The bulk load is reported separately (and counted in the reads above).
        let reduction = |r: u64| (lookups > 0).then(|| 1.0 - r as f64 / lookups as f64);
        let load_reduction = reduction(misses);
        let ondemand_load_reduction = reduction(od_misses);
        let total = |f: &dyn Fn(&Window) -> u64| windows.iter().map(f).sum::<u64>();
        let all_lookups = total(&|w| w.lookups);
        let after = |hits: u64| (all_lookups > 0).then(|| hits as f64 / all_lookups as f64);
        let (region_bytes, granularity) = match cfg.granularity {
            Granularity::Keys => (None, "keys".to_string()),
            Granularity::Regions { region_bytes, .. } => {
                (Some(region_bytes), "regions".to_string())
            }
        };
        let conv = at(strict);
        let od_conv = at(od_strict);
        WarmupReport {
            strategy: cfg.spec.map(|s| s.strategy.name().to_string()),
            k: cfg.spec.map(|s| s.k),
            granularity,
            region_bytes,
            restart_at_request: cfg.restart_at,
            restart_time: self.restart_time,
            selected_units: self.selected_units,
            loaded_objects: self.loaded_objects,
            loaded_bytes: self.loaded_bytes,
            bulk_load_reads: self.bulk_reads,
            monitor_units: self.monitor_units,
            monitor_trims: self.monitor_trims,
            window_lookups: cfg.window_lookups,
            strict_band: cfg.strict_band,
            loose_band: cfg.loose_band,
            convergence_requests: conv,
            convergence_requests_loose: at(loose),
            convergence_seconds: secs(strict),
            convergence_seconds_loose: secs(loose),
            ondemand_convergence_requests: od_conv,
            ondemand_convergence_requests_loose: at(od_loose),
            ondemand_convergence_seconds: secs(od_strict),
            backend_reads_during_warmup: reads,
            ondemand_backend_reads_during_warmup: od_misses,
            lookups_during_warmup: lookups,
            load_reduction,
            ondemand_load_reduction,
            warmup_time_improvement: match (conv, od_conv) {
                (Some(c), Some(o)) if o > 0 => Some(1.0 - c as f64 / o as f64),
                _ => None,
            },
            load_reduction_improvement: match (load_reduction, ondemand_load_reduction) {
                (Some(a), Some(b)) if b > 0.0 => Some(a / b - 1.0),
                _ => None,
            },
            hit_ratio_after_restart: after(total(&|w| w.hits)),
            warm_hit_ratio_after_restart: after(total(&|w| w.warm_hits)),
            ondemand_hit_ratio_after_restart: after(total(&|w| w.ondemand_hits)),
            windows: windows
                .iter()
                .map(|w| WindowRow {
                    requests: w.end_requests,
                    seconds: if timed {
                        w.end_time - self.restart_time
                    } else {
                        0.0
                    },
                    lookups: w.lookups,
                    hit_ratio: main(w),
                    warm_hit_ratio: Window::ratio(w.warm_hits, w.lookups),
                    ondemand_hit_ratio: od(w),
                })
                .collect(),
        }
    }
}

/// `(requests, time)` since the restart at the start of window `i`.
fn window_start(windows: &[Window], i: usize) -> (u64, f64) {
    (windows[i].start_requests, windows[i].start_time)
}

/// Index of the first window of the longest suffix whose hit ratio is within `band` of the
/// always-warm cache's; `None` if the last window is not.
fn converged_from(windows: &[Window], band: f64, ratio: impl Fn(&Window) -> f64) -> Option<usize> {
    let within = |w: &Window| (ratio(w) - Window::ratio(w.warm_hits, w.lookups)).abs() <= band;
    let mut i = windows.len();
    while i > 0 && within(&windows[i - 1]) {
        i -= 1;
    }
    (i < windows.len()).then_some(i)
}

/// One request through a shadow cache with the replay's semantics; `Some(hit)` for lookups.
#[inline]
fn serve<C: ReplayCache>(cache: &mut C, req: &Request, class: C::Class) -> Option<bool> {
    match req.op {
        Op::Get | Op::Access => {
            let hit = cache.get(req.key, class);
            if !hit {
                cache.insert(req.key, req.size, class);
            }
            Some(hit)
        }
        Op::Put => {
            cache.insert(req.key, req.size, class);
            None
        }
        Op::Delete => {
            cache.remove(req.key);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs_and_restart_points() {
        let s: WarmupSpec = "lastk:1000".parse().unwrap();
        assert_eq!((s.strategy, s.k, s.period), (Strategy::LastK, 1000, None));
        let s: WarmupSpec = "firstk:5:1h".parse().unwrap();
        assert_eq!(s.period, Some(std::time::Duration::from_secs(3600)));
        for bad in ["lastk", "lastk:0", "best:4", "topk:x", "topk:3:1h"] {
            assert!(bad.parse::<WarmupSpec>().is_err(), "{bad}");
        }
        assert_eq!("50%".parse::<RestartAt>().unwrap().resolve(1001), 501);
        assert_eq!("7".parse::<RestartAt>().unwrap().resolve(10), 7);
        assert!("150%".parse::<RestartAt>().is_err());
        assert!("x".parse::<RestartAt>().is_err());
    }

    fn window(hits: u64, warm: u64) -> Window {
        Window {
            lookups: 100,
            hits,
            warm_hits: warm,
            ..Window::default()
        }
    }

    #[test]
    fn convergence_is_the_start_of_the_in_band_tail() {
        let ws = [
            window(10, 50),
            window(49, 50),
            window(45, 50),
            window(49, 49),
            window(50, 50),
        ];
        let r = |w: &Window| Window::ratio(w.hits, w.lookups);
        assert_eq!(converged_from(&ws, 0.01, r), Some(3));
        assert_eq!(converged_from(&ws, 0.10, r), Some(1));
        assert_eq!(converged_from(&ws, 0.5, r), Some(0));
        assert_eq!(converged_from(&ws[..3], 0.01, r), None);
        assert_eq!(converged_from(&[], 0.01, r), None);
    }

    /// A cache that records what is inserted, in order.
    #[derive(Default)]
    struct Recorder {
        inserted: Vec<(u64, u32)>,
        capacity: cache::Capacity,
    }

    impl ReplayCache for Recorder {
        type Class = ();
        fn fresh(&self) -> Self {
            Recorder {
                inserted: Vec::new(),
                capacity: self.capacity,
            }
        }
        fn classify(&self, _: &Request) {}
        fn get(&mut self, _: u64, _: ()) -> bool {
            false
        }
        fn insert(&mut self, key: u64, size: u32, _: ()) -> bool {
            self.inserted.push((key, size));
            true
        }
        fn remove(&mut self, _: u64) -> bool {
            false
        }
        fn len(&self) -> u64 {
            0
        }
        fn bytes(&self) -> u64 {
            0
        }
        fn evictions(&self) -> u64 {
            0
        }
        fn capacity(&self) -> cache::Capacity {
            self.capacity
        }
        fn evict(&mut self, _: u64) -> u64 {
            0
        }
        fn set_capacity(&mut self, _: cache::Capacity) -> u64 {
            0
        }
        fn empty(&mut self) {
            self.inserted.clear();
        }
        fn class_reports(&self) -> Option<Vec<crate::ClassReport>> {
            None
        }
    }

    fn bulk_load(strategy: Strategy, k: u64, capacity: cache::Capacity) -> Vec<(u64, u32)> {
        let config = WarmupConfig {
            restart_at: 500,
            spec: Some(WarmupSpec {
                strategy,
                k,
                period: None,
            }),
            ..WarmupConfig::default()
        };
        let mut main = Recorder {
            capacity,
            ..Recorder::default()
        };
        let mut run = WarmupRun::new(config, &main);
        // Keys scattered over the key space, some repeated, sizes by key.
        for i in 0..500u64 {
            let key = (i * 7919) % 263;
            let req = Request {
                time: i as f64,
                key,
                size: 1 + (key % 5) as u32,
                op: Op::Get,
                offset: 0,
            };
            run.observe(&req, (), Some(false));
        }
        assert!(run.due(500));
        let reads = run.restart(&mut main, 500.0);
        assert_eq!(reads, main.inserted.len() as u64);
        main.inserted
    }

    #[test]
    fn warm_up_loads_exactly_k_objects_in_sorted_order() {
        for strategy in [
            Strategy::LastK,
            Strategy::FirstK,
            Strategy::TopK,
            Strategy::RandomK,
        ] {
            for k in [1, 17, 100] {
                let loaded = bulk_load(strategy, k, cache::Capacity::default());
                assert_eq!(loaded.len() as u64, k, "{strategy:?} k={k}");
                assert!(
                    loaded.windows(2).all(|w| w[0].0 < w[1].0),
                    "{strategy:?} k={k}: not in strictly ascending key order"
                );
                for &(key, size) in &loaded {
                    assert_eq!(size, 1 + (key % 5) as u32, "the size last seen is reloaded");
                }
            }
        }
        // LastK picks the most recent: the last 17 distinct keys of the stream.
        let mut expect: Vec<u64> = Vec::new();
        for i in (0..500u64).rev() {
            let key = (i * 7919) % 263;
            if !expect.contains(&key) {
                expect.push(key);
            }
            if expect.len() == 17 {
                break;
            }
        }
        expect.sort_unstable();
        let got: Vec<u64> = bulk_load(Strategy::LastK, 17, cache::Capacity::default())
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn warm_up_never_loads_more_than_fits() {
        let loaded = bulk_load(Strategy::TopK, 100, cache::Capacity::objects(10));
        assert_eq!(loaded.len(), 10);
        let loaded = bulk_load(Strategy::LastK, 100, cache::Capacity::bytes(50));
        assert!(loaded.iter().map(|&(_, s)| u64::from(s)).sum::<u64>() <= 50);
        assert!(loaded.len() >= 10, "sizes are 1..=5 bytes");
    }
}
