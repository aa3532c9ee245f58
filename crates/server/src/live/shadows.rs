//! The policy thread's side of the shadows (see `shadow`): the [`adapt::Shadow`]s themselves
//! (replay's type, one implementation for both hosts), fed from `shadow::ShadowFeed`, ticked with the live
//! policy's ticks on the same clock, the real cache's window figures, and the optional switch
//! policy whose choice the runner activates through the registry.

use super::journal::Level;
use super::registry::VersionRef;
use crate::db::Db;
use crate::metrics::{CandidateFigures, ShadowReport, Stats};
use crate::shadow::feed::{Access, Served, MAX_PENDING};
use crate::shadow::{DEFAULT_MAX_OBJECTS, DEFAULT_WINDOW, MAX_SHADOWS, MAX_TOTAL_OBJECTS};
use adapt::shadow::ShadowLimits;
use adapt::window::{TickSample, Window};
use adapt::{Shadow, ShadowSpec};
use policy::switch::{Candidate, SwitchPolicy, WindowFigures};
use policy::{Interrupt, Limits, Params, Scalar};

/// One shadow and what it runs.
struct Entry {
    shadow: Shadow,
    version: VersionRef,
    /// The parameters given at `POLICY SHADOW ADD` (the rest follow the live ones).
    overrides: Params,
    max_objects: u64,
    /// The last error written to the log, so a failing shadow logs each new error once.
    logged_error: Option<String>,
}

/// What the switch policy asked for: the runner activates `version` with `overrides` through
/// the registry and logs `reason`.
#[derive(Debug, Clone, PartialEq)]
pub struct SwitchTo {
    pub candidate: String,
    pub version: VersionRef,
    pub overrides: Params,
    pub reason: String,
}

/// A line for the policy log: level and message.
pub type Note = (Level, String);

/// What a tick of the shadows produced for the runner.
#[derive(Default)]
pub struct TickResult {
    pub switch_to: Option<SwitchTo>,
    pub notes: Vec<Note>,
}

/// Cumulative request-path counters at the last drain or tick.
#[derive(Clone, Copy, Default)]
struct Counters {
    lookups: u64,
    hits: u64,
    misses: u64,
    writes: u64,
    evictions: u64,
}

pub struct ShadowHost {
    db: Db,
    limits: Limits,
    interrupt: Interrupt,
    entries: Vec<Entry>,
    spare: Vec<Access>,
    switch: Option<SwitchPolicy>,
    switches: u64,
    last_switch: String,
    /// The real cache's window figures, for `current` in `switch()` and the reports.
    real: Window,
    real_sample: TickSample,
    at_drain: Counters,
    at_tick: Counters,
    ticks: u64,
}

impl ShadowHost {
    pub fn new(db: Db, limits: Limits, interrupt: Interrupt) -> ShadowHost {
        ShadowHost {
            db,
            limits,
            interrupt,
            entries: Vec::new(),
            spare: Vec::new(),
            switch: None,
            switches: 0,
            last_switch: String::new(),
            real: Window::new(DEFAULT_WINDOW),
            real_sample: TickSample::default(),
            at_drain: Counters::default(),
            at_tick: Counters::default(),
            ticks: 0,
        }
    }

    /// No shadow and no switch policy: nothing to drain or tick.
    pub fn is_idle(&self) -> bool {
        self.entries.is_empty() && self.switch.is_none()
    }

    fn counters(&self) -> Counters {
        self.counters_at(&self.db.cache_snapshot())
    }

    /// The counters with the evictions of `snapshot` (each snapshot takes the lock requests
    /// take, so a drain takes one).
    fn counters_at(&self, snapshot: &crate::metrics::CacheSnapshot) -> Counters {
        let stats = self.db.stats();
        let hits = Stats::read(&stats.cache_hits);
        let misses = Stats::read(&stats.cache_misses);
        Counters {
            lookups: hits + misses,
            hits,
            misses,
            writes: Stats::read(&stats.store_writes),
            evictions: snapshot.evictions,
        }
    }

    /// Hands the accesses queued since the last drain to every shadow, in the order they
    /// were served, and adds the real cache's size to its window sample.
    pub fn drain(&mut self) {
        if self.is_idle() {
            return;
        }
        self.db.shadow_feed().drain(&mut self.spare);
        for access in self.spare.drain(..) {
            for entry in &mut self.entries {
                match access.op {
                    Served::Absent => entry.shadow.observe_absent(access.time, access.key),
                    op => entry.shadow.observe(&trace::Request {
                        time: access.time,
                        key: access.key,
                        size: access.size,
                        op: match op {
                            Served::Put => trace::Op::Put,
                            Served::Delete => trace::Op::Delete,
                            _ => trace::Op::Get,
                        },
                        offset: 0,
                    }),
                }
            }
        }
        // The real cache's request-weighted size, sampled at each drain: the requests served
        // since the last one count at the size it has now.
        let snapshot = self.db.cache_snapshot();
        let now = self.counters_at(&snapshot);
        let requests = (now.lookups + now.writes)
            .saturating_sub(self.at_drain.lookups + self.at_drain.writes)
            as f64;
        self.at_drain = now;
        if requests > 0.0 {
            let (objects, bytes) = (snapshot.objects as f64, snapshot.bytes as f64);
            let s = &mut self.real_sample;
            s.requests += requests;
            s.sum_objects += objects * requests;
            s.sum_bytes += bytes * requests;
            s.peak_objects = s.peak_objects.max(objects);
            s.peak_bytes = s.peak_bytes.max(bytes);
        }
    }

    /// `POLICY SHADOW ADD`: a shadow of `version` (whose source is `source`) with `options`
    /// (`k=v`: the policy's parameter overrides and the shadow's own `sample`, `label`,
    /// `max_objects`, `window`). Returns the shadow's name.
    pub fn add(
        &mut self,
        version: VersionRef,
        source: String,
        options: &[String],
        live_params: &Params,
    ) -> Result<String, String> {
        if self.entries.len() >= MAX_SHADOWS {
            return Err(format!(
                "too many shadows: at most {MAX_SHADOWS} (POLICY SHADOW DROP one first)"
            ));
        }
        let mut overrides = Params::new();
        let mut max_objects = DEFAULT_MAX_OBJECTS;
        let mut window = DEFAULT_WINDOW;
        for option in options {
            if option.len() > Limits::MAX_PARAM_KEY_BYTES + Limits::MAX_PARAM_VALUE_BYTES + 1 {
                return Err(format!(
                    "shadow parameter too large: names are at most {} bytes and values at most \
                     {} bytes",
                    Limits::MAX_PARAM_KEY_BYTES,
                    Limits::MAX_PARAM_VALUE_BYTES
                ));
            }
            let (key, value) = policy::parse_param(option)?;
            match key.as_str() {
                "max_objects" => max_objects = whole(&key, &value, 1, 1 << 40)?,
                "window" => window = whole(&key, &value, 1, 100_000)? as usize,
                _ => {
                    overrides.insert(key, value);
                }
            }
        }
        if overrides.len() > Limits::MAX_PARAMS {
            return Err(format!(
                "too many shadow parameters: at most {}",
                Limits::MAX_PARAMS
            ));
        }
        let held: u64 = self.entries.iter().map(|e| e.max_objects).sum();
        if held + max_objects > MAX_TOTAL_OBJECTS {
            return Err(format!(
                "shadow memory: max_objects={max_objects} with the {held} entries the other \
                 shadows may hold is over the server's budget of {MAX_TOTAL_OBJECTS} entries \
                 (give a smaller max_objects or a sample=R, or DROP a shadow)"
            ));
        }
        let shown = version.to_string();
        let mut spec = ShadowSpec::from_source(&shown, &shown, source, overrides)?;
        if self.entries.iter().any(|e| e.shadow.name() == spec.name) {
            return Err(format!(
                "a shadow is already named '{}' (DROP it, or give this one a label=NAME)",
                spec.name
            ));
        }
        let overrides = spec.params.clone();
        for (k, v) in live_params {
            spec.params.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let snapshot = self.db.cache_snapshot();
        let limits = ShadowLimits {
            algorithm: snapshot.algorithm,
            capacity: snapshot.capacity,
            max_objects,
            timeseries_limit: self.db.series().limit(),
            window,
            policy: self.limits,
        };
        // Accesses queued so far belong to the shadows that were there when they were served.
        self.drain();
        let shadow = Shadow::with_interrupt(spec, &limits, self.interrupt.clone())
            .map_err(|e| format!("shadow rejected: {e}"))?;
        let name = shadow.name().to_string();
        self.entries.push(Entry {
            shadow,
            version,
            overrides,
            max_objects,
            logged_error: None,
        });
        self.refresh_feed();
        Ok(name)
    }

    /// `POLICY SHADOW DROP`: frees the shadow (its cache and its engine).
    pub fn remove(&mut self, name: &str) -> Result<(), String> {
        let index = self.index(name)?;
        self.drain();
        self.entries.remove(index);
        self.refresh_feed();
        Ok(())
    }

    fn index(&self, name: &str) -> Result<usize, String> {
        self.entries
            .iter()
            .position(|e| e.shadow.name() == name)
            .ok_or_else(|| format!("no shadow named '{name}' (POLICY SHADOW LIST shows them)"))
    }

    /// Feeds the largest sample any shadow takes (nothing when none is left).
    fn refresh_feed(&mut self) {
        let threshold = self
            .entries
            .iter()
            .map(|e| adapt::Sampler::new(e.shadow.sample()).threshold())
            .max()
            .unwrap_or(0);
        if threshold > 0 && self.spare.capacity() < MAX_PENDING {
            self.spare.reserve_exact(MAX_PENDING);
        }
        self.db.shadow_feed().set_threshold(threshold);
    }

    /// The live parameters changed: shadows that do not override `key` follow.
    pub fn set_param(&mut self, key: &str, value: &Scalar) {
        for e in &mut self.entries {
            if !e.overrides.contains_key(key) {
                e.shadow.spec.params.insert(key.to_string(), value.clone());
            }
        }
    }

    /// `POLICY SWITCH LOAD`: compiles the switch policy (replacing the loaded one).
    pub fn load_switch(&mut self, source: &str, options: &[String]) -> Result<String, String> {
        let mut params = Params::new();
        for option in options {
            let (k, v) = policy::parse_param(option)?;
            params.insert(k, v);
        }
        let switch = SwitchPolicy::load("switch", "=switch", source, &params, self.limits)
            .map_err(|e| format!("switch policy rejected: {e}"))?;
        self.switch = Some(switch);
        let shown: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Ok(shown.join(" "))
    }

    pub fn unload_switch(&mut self) -> bool {
        self.switch.take().is_some()
    }

    /// Names of the shadows, in the order added (the switch's preference order).
    pub fn names(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| e.shadow.name().to_string())
            .collect()
    }

    fn is_active(e: &Entry, running: Option<&VersionRef>, live: &Params) -> bool {
        running == Some(&e.version) && e.overrides.iter().all(|(k, v)| live.get(k) == Some(v))
    }

    /// Runs at every live tick, before the live policy's: the shadows get the accesses
    /// served so far and tick at `now`; the real cache's window closes; the switch policy (if
    /// any) names the candidate that should run.
    pub fn tick(
        &mut self,
        now: f64,
        tick: u64,
        running: Option<&VersionRef>,
        live: &Params,
    ) -> TickResult {
        let mut result = TickResult::default();
        if self.is_idle() {
            return result;
        }
        self.drain();
        self.ticks += 1;
        for e in &mut self.entries {
            e.shadow.tick(now, tick);
            let error = e.shadow.last_error();
            if error.is_some() && error != e.logged_error.as_deref() {
                let error = error.unwrap_or_default().to_string();
                result.notes.push((
                    Level::Warn,
                    format!("shadow {} failed: {error}", e.shadow.name()),
                ));
                e.logged_error = Some(error);
            }
        }
        self.close_real();
        let window = self.real.len() as u64;
        if window > 0 && self.ticks.is_multiple_of(window) {
            for e in &self.entries {
                result
                    .notes
                    .push((Level::Info, summary(e.shadow.name(), &e.shadow.figures())));
            }
        }
        result.switch_to = self.run_switch(now, tick, running, live, &mut result.notes);
        result
    }

    fn close_real(&mut self) {
        let now = self.counters();
        let p = self.at_tick;
        let mut s = std::mem::take(&mut self.real_sample);
        s.lookups = now.lookups.saturating_sub(p.lookups) as f64;
        s.hits = now.hits.saturating_sub(p.hits) as f64;
        s.misses = now.misses.saturating_sub(p.misses) as f64;
        s.evictions = now.evictions.saturating_sub(p.evictions) as f64;
        self.at_tick = now;
        self.real.push(s);
    }

    fn run_switch(
        &mut self,
        now: f64,
        tick: u64,
        running: Option<&VersionRef>,
        live: &Params,
        notes: &mut Vec<Note>,
    ) -> Option<SwitchTo> {
        let switch = self.switch.as_mut()?;
        let active = self
            .entries
            .iter()
            .position(|e| Self::is_active(e, running, live));
        let figures: Vec<WindowFigures> = self.entries.iter().map(|e| e.shadow.figures()).collect();
        let candidates: Vec<Candidate<'_>> = self
            .entries
            .iter()
            .zip(&figures)
            .enumerate()
            .map(|(i, (e, f))| Candidate {
                name: e.shadow.name(),
                active: Some(i) == active,
                sample: e.shadow.sample(),
                figures: f,
            })
            .collect();
        let real = self.real.figures();
        let running_name = running.map(|r| r.to_string()).unwrap_or_default();
        let current = Candidate {
            name: active.map_or(running_name.as_str(), |i| self.entries[i].shadow.name()),
            active: true,
            sample: 1.0,
            figures: &real,
        };
        let choice = switch.choose(now, tick, &candidates, &current);
        let (records, _) = switch.drain_logs();
        let reason: Vec<&str> = records.iter().map(|r| r.message.as_str()).collect();
        let reason = reason.join("; ");
        let name = match choice {
            Ok(Some(name)) => name,
            Ok(None) => return None,
            Err(e) => {
                notes.push((
                    Level::Warn,
                    format!("switch policy failed at tick {tick}: {e}"),
                ));
                return None;
            }
        };
        let index = self
            .entries
            .iter()
            .position(|e| e.shadow.name() == name)
            .filter(|&i| Some(i) != active)?;
        let e = &self.entries[index];
        self.switches += 1;
        self.last_switch = format!("tick {tick}: {name}");
        Some(SwitchTo {
            candidate: name,
            version: e.version.clone(),
            overrides: e.overrides.clone(),
            reason: if reason.is_empty() {
                "chosen by the switch policy".to_string()
            } else {
                reason
            },
        })
    }

    /// Every candidate's figures (the real cache first when a version runs), or one.
    pub fn report(&self, running: Option<&VersionRef>, live: &Params) -> ShadowReport {
        if self.is_idle() {
            return ShadowReport {
                dropped: self.db.shadow_feed().dropped(),
                switches: self.switches,
                last_switch: self.last_switch.clone(),
                ..ShadowReport::default()
            };
        }
        let mut candidates = Vec::with_capacity(self.entries.len() + 1);
        if let Some(running) = running {
            let c = self.counters();
            let snapshot = self.db.cache_snapshot();
            candidates.push(CandidateFigures {
                name: running.to_string(),
                role: "active",
                policy: running.to_string(),
                params: line(live),
                sample: 1.0,
                active: true,
                window: self.real.figures(),
                total_lookups: c.lookups as f64,
                total_hits: c.hits as f64,
                total_misses: c.misses as f64,
                ticks: self.ticks,
                objects: snapshot.objects,
                max_objects: snapshot.capacity.objects.unwrap_or(0),
                metadata_bytes: snapshot.metadata_bytes,
                ..CandidateFigures::default()
            });
        }
        for e in &self.entries {
            let t = e.shadow.totals();
            candidates.push(CandidateFigures {
                name: e.shadow.name().to_string(),
                role: "shadow",
                policy: e.version.to_string(),
                params: line(&e.overrides),
                sample: e.shadow.sample(),
                active: Self::is_active(e, running, live),
                window: e.shadow.figures(),
                total_lookups: t.lookups,
                total_hits: t.hits,
                total_misses: t.misses,
                ticks: t.ticks,
                decisions: t.decisions,
                errors: t.errors,
                capped_ticks: t.capped_ticks,
                max_objects: e.max_objects,
                objects: e.shadow.cache().len(),
                metadata_bytes: t.metadata_bytes,
            });
        }
        let (calls, errors) = self.switch.as_ref().map_or((0, 0), |s| s.stats());
        ShadowReport {
            candidates,
            dropped: self.db.shadow_feed().dropped(),
            switch_policy: if self.switch.is_some() {
                "loaded".into()
            } else {
                String::new()
            },
            switch_calls: calls,
            switch_errors: errors,
            switches: self.switches,
            last_switch: self.last_switch.clone(),
        }
    }

    /// One shadow's figures (`POLICY SHADOW STATUS name`), with the accesses queued so far.
    pub fn status_of(
        &mut self,
        name: &str,
        running: Option<&VersionRef>,
        live: &Params,
    ) -> Result<CandidateFigures, String> {
        self.index(name)?;
        let report = self.report(running, live);
        Ok(report
            .candidates
            .into_iter()
            .find(|c| c.role == "shadow" && c.name == name)
            .unwrap_or_default())
    }
}

/// A whole number option in `[min, max]`.
fn whole(key: &str, value: &Scalar, min: u64, max: u64) -> Result<u64, String> {
    match value {
        Scalar::Number(n) if n.fract() == 0.0 && *n >= min as f64 && *n <= max as f64 => {
            Ok(*n as u64)
        }
        other => Err(format!(
            "{key}={other}: expected a whole number from {min} to {max}"
        )),
    }
}

fn line(params: &Params) -> String {
    let pairs: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join(" ")
}

/// The log line a shadow writes once per window.
fn summary(name: &str, f: &WindowFigures) -> String {
    format!(
        "shadow {name}, last {} ticks: hit_ratio={:.4} misses={:.0} mean_objects={:.1} \
         peak_objects={:.0} decisions={} errors={}",
        f.ticks, f.hit_ratio, f.misses, f.mean_objects, f.peak_objects, f.decisions, f.errors
    )
}
