//! Bonfire-style cache warm-up in replay (seed 001): a monitor records accesses; at the
//! restart point the cache is emptied and, with a strategy, bulk-loaded with the chosen set
//! (read from the store in sorted key order, counted as back-end reads); then its misses are
//! compared, lookup by lookup, with an always-warm cache and an on-demand (cold) cache fed
//! the same requests alongside, to measure warm-up time and back-end load as Bonfire defines
//! them. `docs/warmup.md` states every definition and the measured numbers.

mod monitor;

pub use cache::warmup::{Strategy, WarmupSpec};

use cache::warmup::LoadBudget;
pub use monitor::{Granularity, Monitor};

use crate::replay_cache::{classify, rule_op};
use cache::{Cache, ClassLayer, RequestCounts};
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
    /// Lookups per row of `warmup.windows` (the chart's resolution); also the fewest lookups
    /// that must follow a convergence point for it to count as sustained.
    pub window_lookups: u64,
    /// Random-K's seed.
    pub seed: u64,
    /// How far (absolute hit ratio) below the always-warm cache still counts as converged.
    pub strict_band: f64,
    pub loose_band: f64,
}

/// `replay`'s warm-up flags as given, before they are resolved against the trace.
#[derive(Clone, Debug, Default)]
pub struct WarmupFlags {
    pub restart_at: Option<RestartAt>,
    pub spec: Option<WarmupSpec>,
    /// `--region`: a size or `keys`.
    pub region: Option<String>,
    pub window: Option<u64>,
    pub monitor_limit: usize,
    pub seed: u64,
}

impl WarmupConfig {
    /// Resolves the restart point and the window against the trace (one counting pass over
    /// what `open` opens) and picks the monitor's granularity for `format`; `None` without
    /// `--restart-at`.
    pub fn for_trace(
        flags: &WarmupFlags,
        trace_path: &std::path::Path,
        format: Option<trace::Format>,
        block_size: u32,
        open: impl Fn() -> Result<Box<dyn trace::TraceReader>, trace::TraceError>,
    ) -> anyhow::Result<Option<WarmupConfig>> {
        use anyhow::bail;
        let Some(at) = flags.restart_at else {
            return Ok(None);
        };
        let (mut requests, mut lookups) = (0u64, Vec::new());
        let mut reader = open()?;
        while let Some(r) = reader.next_request()? {
            requests += 1;
            if matches!(r.op, Op::Get | Op::Access) {
                lookups.push(requests);
            }
        }
        let restart_at = at.resolve(requests);
        if restart_at >= requests {
            bail!("--restart-at: the trace has {requests} requests, so a restart after {restart_at} leaves nothing to measure");
        }
        let lookups_after = lookups.iter().filter(|&&i| i > restart_at).count() as u64;
        let window_lookups = match flags.window {
            Some(0) => bail!("--warmup-window must be > 0"),
            Some(n) => n,
            None => (lookups_after / 200).max(100),
        };
        let format = format.or_else(|| trace::detect(trace_path).ok());
        let granularity = Granularity::from_flag(flags.region.as_deref(), format, block_size)?;
        Ok(Some(WarmupConfig {
            restart_at,
            spec: flags.spec,
            granularity,
            monitor_limit: flags.monitor_limit,
            window_lookups,
            seed: flags.seed,
            ..WarmupConfig::default()
        }))
    }
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
            seed: cache::warmup::DEFAULT_SEED,
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
    /// K as a count of units; null when K was a share of the cache (`k_share`).
    pub k: Option<u64>,
    /// K as a share of the cache (1.0 for `lastk:100%`).
    pub k_share: Option<f64>,
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
    /// Requests (and trace seconds) after the restart until the hit ratio, from then on over
    /// every stretch of lookups, is at least the always-warm cache's minus the strict (loose)
    /// band; null if that point is not followed by `window_lookups` lookups. See `Converging`.
    pub convergence_requests: Option<u64>,
    pub convergence_requests_loose: Option<u64>,
    pub convergence_seconds: Option<f64>,
    pub convergence_seconds_loose: Option<f64>,
    pub ondemand_convergence_requests: Option<u64>,
    pub ondemand_convergence_requests_loose: Option<u64>,
    pub ondemand_convergence_seconds: Option<f64>,
    pub ondemand_convergence_seconds_loose: Option<f64>,
    /// Read misses after the restart beyond the always-warm cache's (negative: fewer).
    pub excess_misses: i64,
    pub ondemand_excess_misses: i64,
    /// Back-end reads from the restart until on-demand converges (strict; to the end if it
    /// never does), bulk load included; and on-demand's over the same requests.
    pub backend_reads_during_warmup: u64,
    pub ondemand_backend_reads_during_warmup: u64,
    /// Lookups in that interval, and the share the cache served (Bonfire's "I/O load
    /// reduction", foreground I/O only: the bulk load is in `backend_reads_during_warmup`).
    pub lookups_during_warmup: u64,
    pub load_reduction: Option<f64>,
    pub ondemand_load_reduction: Option<f64>,
    /// `1 - convergence / on-demand convergence` in requests (strict; loose), and
    /// `load_reduction / ondemand_load_reduction - 1`.
    pub warmup_time_improvement: Option<f64>,
    pub warmup_time_improvement_loose: Option<f64>,
    pub load_reduction_improvement: Option<f64>,
    /// Hit ratios over everything after the restart.
    pub hit_ratio_after_restart: Option<f64>,
    pub warm_hit_ratio_after_restart: Option<f64>,
    pub ondemand_hit_ratio_after_restart: Option<f64>,
    pub windows: Vec<WindowRow>,
}

/// The counts of one row of `warmup.windows`.
#[derive(Clone, Copy, Default)]
struct Window {
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
pub(crate) struct WarmupRun<L: ClassLayer> {
    config: WarmupConfig,
    monitor: Option<Monitor>,
    warm: Cache<L>,
    ondemand: Option<Cache<L>>,
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
    /// Everything since the restart.
    total: Totals,
    strict: Converging,
    loose: Converging,
    ondemand_strict: Converging,
    ondemand_loose: Converging,
}

impl<L: ClassLayer> WarmupRun<L> {
    pub fn new(config: WarmupConfig, main: &Cache<L>) -> Self {
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
            total: Totals::default(),
            strict: Converging::new(config.strict_band),
            loose: Converging::new(config.loose_band),
            ondemand_strict: Converging::new(config.strict_band),
            ondemand_loose: Converging::new(config.loose_band),
            config,
        }
    }

    /// Whether the restart happens before serving the next request.
    #[inline]
    pub fn due(&self, served: u64) -> bool {
        !self.restarted && served == self.config.restart_at
    }

    /// Empties `main` and bulk-loads it; returns the objects read from the store.
    pub fn restart(&mut self, main: &mut Cache<L>, now: f64) -> u64 {
        self.restarted = true;
        self.restart_time = now;
        self.last_time = now;
        self.current = Window::default();
        self.total = Totals {
            time: now,
            ..Totals::default()
        };
        let start = self.total;
        for c in self.trackers() {
            c.at = start;
        }
        main.clear();
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
        // The longest prefix of the ranking that fits (the rule both hosts share, reasons in
        // `cache::warmup::LoadBudget`), then read in key order (Bonfire sorts the warm-up set
        // by address so the store reads it sequentially).
        let budget = LoadBudget::new(&spec, main.capacity());
        objects.truncate(budget.prefix(objects.iter().map(|o| u64::from(o.size))));
        objects.sort_unstable_by_key(|o| o.key);
        for object in &objects {
            let class = classify(main, object);
            if main
                .insert_as(object.key, object.size, class, |_, _| {})
                .is_some()
            {
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
    pub fn observe(&mut self, req: &Request, class: L::Class, main_hit: Option<bool>) {
        if !self.restarted {
            if let Some(m) = &mut self.monitor {
                if req.op != Op::Delete {
                    m.record(req);
                }
            }
        }
        let op = rule_op(req.op);
        // The windows below count lookups themselves, over the restart's span only.
        let mut uncounted = RequestCounts::default();
        let warm_hit = self
            .warm
            .serve_as(op, req.key, req.size, class, &mut uncounted)
            .lookup();
        let ondemand_hit = self.ondemand.as_mut().map(|c| {
            c.serve_as(op, req.key, req.size, class, &mut uncounted)
                .lookup()
        });
        if !self.restarted {
            return;
        }
        self.requests_since += 1;
        if req.time > self.last_time {
            self.last_time = req.time;
        }
        self.total.requests = self.requests_since;
        self.total.time = self.last_time;
        let Some(hit) = main_hit else {
            return;
        };
        let warm_hit = warm_hit.unwrap_or(false);
        let ondemand_hit = ondemand_hit.flatten().unwrap_or(hit);
        let w = &mut self.current;
        w.lookups += 1;
        w.hits += u64::from(hit);
        w.warm_hits += u64::from(warm_hit);
        w.ondemand_hits += u64::from(ondemand_hit);
        let t = &mut self.total;
        t.lookups += 1;
        t.misses += u64::from(!hit);
        t.warm_misses += u64::from(!warm_hit);
        t.ondemand_misses += u64::from(!ondemand_hit);
        let t = self.total;
        self.strict.observe(&t, t.misses);
        self.loose.observe(&t, t.misses);
        self.ondemand_strict.observe(&t, t.ondemand_misses);
        self.ondemand_loose.observe(&t, t.ondemand_misses);
        if self.current.lookups >= self.config.window_lookups {
            self.close_window();
        }
    }

    fn trackers(&mut self) -> [&mut Converging; 4] {
        [
            &mut self.strict,
            &mut self.loose,
            &mut self.ondemand_strict,
            &mut self.ondemand_loose,
        ]
    }

    fn close_window(&mut self) {
        let mut w = self.current;
        w.end_requests = self.requests_since;
        w.end_time = self.last_time;
        self.windows.push(w);
        self.current = Window::default();
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
        let all = self.total;
        let evidence = cfg.window_lookups;
        let strict = self.strict.converged(&all, evidence);
        let loose = self.loose.converged(&all, evidence);
        let od_strict = self.ondemand_strict.converged(&all, evidence);
        let od_loose = self.ondemand_loose.converged(&all, evidence);
        let at = |c: Option<Totals>| c.map(|t| t.requests);
        let secs = |c: Option<Totals>| c.filter(|_| timed).map(|t| t.time - self.restart_time);
        // Both runs are measured over the on-demand warm-up period, the same requests.
        let span = od_strict.unwrap_or(all);
        let lookups = span.lookups;
        let misses = span.misses;
        let od_misses = span.ondemand_misses;
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
        let improvement = |c: Option<Totals>, o: Option<Totals>| match (at(c), at(o)) {
            (Some(c), Some(o)) if o > 0 => Some(1.0 - c as f64 / o as f64),
            _ => None,
        };
        let excess = |misses: u64| misses as i64 - all.warm_misses as i64;
        WarmupReport {
            strategy: cfg.spec.map(|s| s.strategy.name().to_string()),
            k: cfg.spec.filter(|s| s.share().is_none()).map(|s| s.k),
            k_share: cfg.spec.and_then(|s| s.share()),
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
            convergence_requests: at(strict),
            convergence_requests_loose: at(loose),
            convergence_seconds: secs(strict),
            convergence_seconds_loose: secs(loose),
            ondemand_convergence_requests: at(od_strict),
            ondemand_convergence_requests_loose: at(od_loose),
            ondemand_convergence_seconds: secs(od_strict),
            ondemand_convergence_seconds_loose: secs(od_loose),
            excess_misses: excess(all.misses),
            ondemand_excess_misses: excess(all.ondemand_misses),
            backend_reads_during_warmup: reads,
            ondemand_backend_reads_during_warmup: od_misses,
            lookups_during_warmup: lookups,
            load_reduction,
            ondemand_load_reduction,
            warmup_time_improvement: improvement(strict, od_strict),
            warmup_time_improvement_loose: improvement(loose, od_loose),
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

/// Counts since the restart, at one request.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
struct Totals {
    requests: u64,
    /// Trace time of the last request counted.
    time: f64,
    lookups: u64,
    misses: u64,
    warm_misses: u64,
    ondemand_misses: u64,
}

/// Where one cache converges to the always-warm one, found online at request resolution.
///
/// With `D(n)` the cache's read misses beyond the always-warm cache's over the first `n`
/// lookups after the restart, the cache has converged at `n` when from there on it never
/// falls more than `band` below the always-warm hit ratio over any stretch:
/// `D(m) - D(n) <= band * (m - n)` for every later `m`. The earliest such `n` is the first
/// maximum of `D(n) - band * n`, so one running maximum finds it. The test is one-sided (a
/// cache that does better than the always-warm one has converged) and needs no windows, so
/// neither a window's noise nor its width decides the figure.
#[derive(Clone, Copy, Debug)]
struct Converging {
    band: f64,
    /// `max D(n) - band * n` so far (0 at the restart), and the counts where it was reached.
    best: f64,
    at: Totals,
}

impl Converging {
    fn new(band: f64) -> Converging {
        Converging {
            band,
            best: 0.0,
            at: Totals::default(),
        }
    }

    /// After a lookup, with `misses` this cache's misses since the restart.
    #[inline]
    fn observe(&mut self, now: &Totals, misses: u64) {
        let excess = misses as f64 - now.warm_misses as f64 - self.band * now.lookups as f64;
        if excess > self.best {
            self.best = excess;
            self.at = *now;
        }
    }

    /// The counts at convergence, if at least `evidence` lookups (or all there were) followed
    /// it: a point reached only at the very end is not yet shown to be sustained.
    fn converged(&self, end: &Totals, evidence: u64) -> Option<Totals> {
        let after = end.lookups - self.at.lookups;
        (end.lookups > 0 && after >= evidence.min(end.lookups)).then_some(self.at)
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

    /// Convergence (in lookups) of a cache whose lookups hit as `hits` says, against an
    /// always-warm cache hitting as `warm` says.
    fn convergence(hits: &[bool], warm: &[bool], band: f64, evidence: u64) -> Option<u64> {
        let mut c = Converging::new(band);
        let mut t = Totals::default();
        for (&hit, &warm_hit) in hits.iter().zip(warm) {
            t.requests += 1;
            t.lookups += 1;
            t.misses += u64::from(!hit);
            t.warm_misses += u64::from(!warm_hit);
            c.observe(&t, t.misses);
        }
        c.converged(&t, evidence).map(|t| t.lookups)
    }

    /// `n` lookups hitting with probability about `p` (a fixed pseudo-random pattern).
    fn pattern(n: usize, p: f64, seed: u64) -> Vec<bool> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 10_000) as f64 / 10_000.0 < p
            })
            .collect()
    }

    #[test]
    fn a_cache_never_worse_than_the_always_warm_one_has_converged_at_once() {
        // The warmed cache hits more than the always-warm one everywhere (a bulk load can
        // hold what the always-warm cache evicted): one-sided, that is converged, not slower.
        let warm = pattern(20_000, 0.5, 7);
        let better: Vec<bool> = warm
            .iter()
            .enumerate()
            .map(|(i, &h)| h || i % 3 == 0)
            .collect();
        assert_eq!(convergence(&better, &warm, 0.01, 100), Some(0));
        assert_eq!(convergence(&warm, &warm, 0.01, 100), Some(0), "identical");
    }

    #[test]
    fn convergence_is_found_at_lookup_resolution() {
        // Cold for the first `cold` lookups (all misses), then as good as the always-warm
        // cache: converged exactly there, whatever the chart's window width.
        let warm = vec![true; 10_000];
        for cold in [0usize, 1, 30, 80, 999, 4_321] {
            let hits: Vec<bool> = (0..10_000).map(|i| i >= cold).collect();
            assert_eq!(convergence(&hits, &warm, 0.01, 100), Some(cold as u64));
            assert_eq!(convergence(&hits, &warm, 0.05, 100), Some(cold as u64));
        }
        // Two caches warming 30 and 80 lookups in, which windows of 100 lookups lumped
        // together, now differ.
        let w30: Vec<bool> = (0..10_000).map(|i| i >= 30).collect();
        let w80: Vec<bool> = (0..10_000).map(|i| i >= 80).collect();
        assert!(convergence(&w30, &warm, 0.01, 100) < convergence(&w80, &warm, 0.01, 100));
    }

    #[test]
    fn convergence_is_sustained_and_tolerates_the_band() {
        let warm = pattern(50_000, 0.6, 3);
        // Half the always-warm hits for 5,000 lookups, then the same: converged at 5,000
        // by either band (a deficit of 30 points ends there).
        let hits: Vec<bool> = warm
            .iter()
            .enumerate()
            .map(|(i, &h)| h && (i >= 5_000 || i % 2 == 0))
            .collect();
        for band in [0.01, 0.05] {
            let at = convergence(&hits, &warm, band, 100).unwrap();
            assert!((4_990..=5_000).contains(&at), "{band}: {at}");
        }
        // 2.4 points below the always-warm cache for good: within the loose band from the
        // start, never within the strict one.
        let lower: Vec<bool> = warm
            .iter()
            .enumerate()
            .map(|(i, &h)| h && i % 25 != 0)
            .collect();
        assert_eq!(convergence(&lower, &warm, 0.05, 100), Some(0));
        assert_eq!(convergence(&lower, &warm, 0.01, 100), None);
        // A relapse after a good stretch moves convergence past it.
        let relapse: Vec<bool> = warm
            .iter()
            .enumerate()
            .map(|(i, &h)| h && !(20_000..22_000).contains(&i))
            .collect();
        let at = convergence(&relapse, &warm, 0.05, 100).unwrap();
        assert!((21_900..=22_000).contains(&at), "{at}");
        // A deficit that lasts to the end is not convergence, and neither is a point with too
        // few lookups after it to show it lasts.
        let late: Vec<bool> = (0..1_000).map(|i| i >= 950).collect();
        assert_eq!(convergence(&late, &[true; 1_000], 0.01, 100), None);
        assert_eq!(convergence(&late, &[true; 1_000], 0.01, 50), Some(950));
        assert_eq!(convergence(&[], &[], 0.01, 100), None);
    }

    /// What a bulk load inserted, in order: a FIFO cache evicts in insertion order.
    fn inserted(main: &mut Cache) -> Vec<(u64, u32)> {
        let mut order = Vec::new();
        main.evict_with(u64::MAX, |key, size| order.push((key, size)));
        order
    }

    fn bulk_load(strategy: Strategy, k: u64, capacity: cache::Capacity) -> Vec<(u64, u32)> {
        let config = WarmupConfig {
            restart_at: 500,
            spec: Some(WarmupSpec {
                strategy,
                k,
                period: None,
                share_ppm: None,
            }),
            ..WarmupConfig::default()
        };
        let mut main = Cache::new(cache::Algorithm::Fifo, capacity);
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
        let loaded = inserted(&mut main);
        assert_eq!(reads, loaded.len() as u64);
        loaded
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

    /// The rule shared with the server (`cache::warmup::LoadBudget`): an object that does not
    /// fit ends the load, even when smaller, lower-ranked ones after it would.
    #[test]
    fn warm_up_loads_the_longest_prefix_of_the_ranking_that_fits() {
        let config = WarmupConfig {
            restart_at: 4,
            spec: Some("lastk:4".parse().unwrap()),
            ..WarmupConfig::default()
        };
        let mut main = Cache::new(cache::Algorithm::Fifo, cache::Capacity::bytes(100));
        let mut run = WarmupRun::new(config, &main);
        // Last-K ranks 4, 3, 2, 1: 4 (30 B) fits, 3 (80 B) does not, so 2 and 1 stay out.
        for (key, size) in [(1u64, 10u32), (2, 10), (3, 80), (4, 30)] {
            let req = Request {
                time: key as f64,
                key,
                size,
                op: Op::Get,
                offset: 0,
            };
            run.observe(&req, (), Some(false));
        }
        run.restart(&mut main, 4.0);
        assert_eq!(inserted(&mut main), [(4, 30)]);
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
