//! Replay's host of shadows and the switch policy: a [`Controller`] that feeds every
//! shadow each request the real cache serves, ticks them with the real cache, asks the switch
//! policy which candidate should manage the real cache, and runs that candidate's policy on
//! it. Without a switch policy the shadows only report; the real cache keeps its `--policy`
//! (or none).

use crate::control::{Action, Controller, ControllerSummary, TickContext, TickDecision};
use crate::shadow::{Shadow, ShadowLimits, ShadowTotals};
use crate::spec::ShadowSpec;
use crate::window::{TickSample, Window};
use policy::switch::{Candidate, SwitchPolicy, WindowFigures};
use policy::{Limits, LoadError, Params, PolicyEngine, TickInput};

/// A stretch of the replay during which one version managed the real cache.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Segment {
    /// First tick (from 1; 0 = from the start) and trace time of the stretch.
    pub from_tick: u64,
    pub from_time: f64,
    /// The candidate's name (null: the real cache unmanaged).
    pub version: Option<String>,
    /// What the switch policy logged when it made the switch (empty at the start).
    pub reason: String,
}

/// One candidate in the report.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CandidateReport {
    pub name: String,
    pub policy: String,
    pub params: Params,
    pub sample: f64,
    /// Ticks during which it managed the real cache.
    pub active_ticks: u64,
    /// What its shadow did over the whole replay.
    pub shadow: ShadowTotals,
    /// Its shadow's figures over the last window.
    pub last_window: WindowFigures,
}

/// `adaptive` in `mantle replay --json`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct AdaptiveReport {
    pub switch_policy: Option<String>,
    pub switch_calls: u64,
    pub switch_errors: u64,
    pub window_ticks: usize,
    pub switches: u64,
    pub timeline: Vec<Segment>,
    pub candidates: Vec<CandidateReport>,
}

/// One row of `--shadow-out`: a candidate's window figures at a tick.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ShadowRow {
    pub tick: u64,
    pub time: f64,
    pub candidate: String,
    pub active: bool,
    pub lookups: f64,
    pub misses: f64,
    pub miss_ratio: f64,
    pub mean_objects: f64,
    pub peak_objects: f64,
    pub mean_bytes: f64,
    pub evictions: f64,
    pub decisions: u64,
    pub errors: u64,
}

/// The real cache's policy: the active candidate's source and parameters.
struct Active {
    index: usize,
    engine: PolicyEngine,
}

pub struct Adaptive {
    shadows: Vec<Shadow>,
    switch: Option<SwitchPolicy>,
    /// `--policy` without a switch: runs on the real cache whatever the shadows show.
    fixed: Option<(PolicyEngine, Params, String)>,
    active: Option<Active>,
    policy_limits: Limits,
    /// The real cache's object capacity at the start, and the shadows' memory cap.
    start_objects: u64,
    max_objects: u64,
    /// Set at a switch: the capacity the real cache takes at that tick (see `handover`).
    handover: Option<u64>,
    /// The real cache's figures, for `current` in `switch()`.
    real: Window,
    real_sample: TickSample,
    real_at_tick: (f64, f64, f64, f64),
    active_ticks: Vec<u64>,
    timeline: Vec<Segment>,
    switches: u64,
    ticks_run: u64,
    actions: u64,
    errors: u64,
    record_rows: bool,
    rows: Vec<ShadowRow>,
    echo_logs: bool,
    last_time: f64,
}

impl Adaptive {
    /// Candidates are `specs` in preference order. With `switch`, the first candidate manages
    /// the real cache at the start; without it, `policy` (if any) does, for the whole replay.
    pub fn new(
        specs: Vec<ShadowSpec>,
        switch: Option<SwitchPolicy>,
        policy: Option<(std::path::PathBuf, Params)>,
        limits: ShadowLimits,
        echo_logs: bool,
    ) -> Result<Adaptive, String> {
        let mut shadows: Vec<Shadow> = Vec::with_capacity(specs.len());
        for spec in specs {
            if shadows.iter().any(|s| s.name() == spec.name) {
                return Err(format!(
                    "two candidates are named '{}': give one a label=NAME",
                    spec.name
                ));
            }
            let shown = spec.path.display().to_string();
            shadows.push(Shadow::new(spec, &limits).map_err(|e| format!("--shadow {shown}: {e}"))?);
        }
        let fixed = match policy {
            Some((path, params)) => {
                let mut engine = PolicyEngine::new(limits.policy);
                let id = engine
                    .load_file(&path)
                    .map_err(|e| format!("--policy {}: {e}", path.display()))?;
                Some((engine, params, id.name))
            }
            None => None,
        };
        let mut a = Adaptive {
            active_ticks: vec![0; shadows.len()],
            shadows,
            switch,
            fixed,
            active: None,
            policy_limits: limits.policy,
            start_objects: limits.capacity.objects.unwrap_or(u64::MAX),
            max_objects: limits.max_objects,
            handover: None,
            real: Window::new(limits.window),
            real_sample: TickSample::default(),
            real_at_tick: (0.0, 0.0, 0.0, 0.0),
            timeline: Vec::new(),
            switches: 0,
            ticks_run: 0,
            actions: 0,
            errors: 0,
            record_rows: false,
            rows: Vec::new(),
            echo_logs,
            last_time: 0.0,
        };
        if a.switch.is_some() {
            if a.shadows.is_empty() {
                return Err("--switch needs at least one --shadow candidate".to_string());
            }
            a.activate(0, 0, 0.0, String::new())
                .map_err(|e| e.to_string())?;
        } else {
            a.timeline.push(Segment {
                from_tick: 0,
                from_time: 0.0,
                version: a.fixed.as_ref().map(|f| f.2.clone()),
                reason: String::new(),
            });
        }
        Ok(a)
    }

    /// Keep every candidate's window figures at every tick (for `--shadow-out`).
    pub fn record_rows(&mut self, on: bool) {
        self.record_rows = on;
    }

    pub fn rows(&self) -> &[ShadowRow] {
        &self.rows
    }

    pub fn shadows(&self) -> &[Shadow] {
        &self.shadows
    }

    /// The candidate managing the real cache now.
    pub fn active_name(&self) -> Option<&str> {
        self.active.as_ref().map(|a| self.shadows[a.index].name())
    }

    fn activate(
        &mut self,
        index: usize,
        tick: u64,
        now: f64,
        reason: String,
    ) -> Result<(), LoadError> {
        let spec = &self.shadows[index].spec;
        // A fresh engine per activation: the candidate starts as it would if an operator had
        // loaded it now (its WRstate starts empty, as a first load's does).
        let mut engine = PolicyEngine::new(self.policy_limits);
        engine.load_version(
            policy::PolicyId::new(&spec.name, 1),
            &format!("@{}", spec.path.display()),
            &spec.source,
        )?;
        self.active = Some(Active { index, engine });
        if tick > 0 {
            self.handover = Some(self.handover_capacity(index));
        }
        self.timeline.push(Segment {
            from_tick: tick,
            from_time: now,
            version: Some(spec.name.clone()),
            reason,
        });
        Ok(())
    }

    /// The object capacity the real cache takes when `index` becomes active: what that
    /// candidate's shadow has in force. A candidate whose policy only evicts (fixed, decay,
    /// multipolicy) relies on the capacity it started with, so a capacity the previous
    /// candidate set (dscache's) must not outlive it; a shadow held at the memory cap stands
    /// for the starting capacity.
    fn handover_capacity(&self, index: usize) -> u64 {
        let shadow = &self.shadows[index];
        match shadow.cache().capacity().objects {
            Some(o) if o < self.max_objects => ((o as f64) / shadow.sample()).round() as u64,
            _ => self.start_objects,
        }
        .max(1)
    }

    fn echo(&self, line: &str) {
        if self.echo_logs {
            use std::io::Write;
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
    }

    /// Closes the real cache's tick sample from the loop's counters.
    fn close_real(&mut self, ctx: &TickContext<'_>) {
        let m = ctx.metrics;
        let (gets, hits, misses, evictions) = self.real_at_tick;
        let mut s = std::mem::take(&mut self.real_sample);
        s.lookups = m.gets - gets;
        s.hits = m.hits - hits;
        s.misses = m.misses - misses;
        s.evictions = m.evictions - evictions;
        self.real_at_tick = (m.gets, m.hits, m.misses, m.evictions);
        self.real.push(s);
    }

    fn run_switch(&mut self, ctx: &TickContext<'_>) {
        let Some(switch) = self.switch.as_mut() else {
            return;
        };
        let active = self.active.as_ref().map(|a| a.index);
        let figures: Vec<WindowFigures> = self.shadows.iter().map(Shadow::figures).collect();
        let candidates: Vec<Candidate<'_>> = self
            .shadows
            .iter()
            .zip(&figures)
            .enumerate()
            .map(|(i, (s, f))| Candidate {
                name: s.name(),
                active: Some(i) == active,
                sample: s.sample(),
                figures: f,
            })
            .collect();
        let real = self.real.figures();
        let current = Candidate {
            name: active.map_or("", |i| self.shadows[i].name()),
            active: true,
            sample: 1.0,
            figures: &real,
        };
        let choice = switch.choose(ctx.now, ctx.tick, &candidates, &current);
        let (records, _) = switch.drain_logs();
        let id = switch.id().to_string();
        let reason = records
            .iter()
            .map(|r| r.message.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        for r in &records {
            self.echo(&format!(
                "switch {} [{:?}]: {}",
                r.policy, r.level, r.message
            ));
        }
        match choice {
            Ok(Some(name)) => {
                let index = self.shadows.iter().position(|s| s.name() == name);
                if let Some(index) = index.filter(|&i| Some(i) != active) {
                    match self.activate(index, ctx.tick, ctx.now, reason) {
                        Ok(()) => self.switches += 1,
                        Err(e) => self.echo(&format!("switch {id}: cannot activate {name}: {e}")),
                    }
                }
            }
            Ok(None) => {}
            Err(e) => self.echo(&format!("switch {id}: tick {} failed: {e}", ctx.tick)),
        }
    }

    /// The report; call after the replay.
    pub fn report(&mut self) -> AdaptiveReport {
        let now = self.last_time;
        for s in &mut self.shadows {
            s.finish(now);
        }
        let (calls, errors) = self.switch.as_ref().map_or((0, 0), |s| s.stats());
        AdaptiveReport {
            switch_policy: self.switch.as_ref().map(|s| s.id().name.clone()),
            switch_calls: calls,
            switch_errors: errors,
            window_ticks: self.real.len(),
            switches: self.switches,
            timeline: self.timeline.clone(),
            candidates: self
                .shadows
                .iter()
                .zip(&self.active_ticks)
                .map(|(s, &active_ticks)| CandidateReport {
                    name: s.name().to_string(),
                    policy: s.spec.path.display().to_string(),
                    params: s.params().clone(),
                    sample: s.sample(),
                    active_ticks,
                    shadow: s.totals(),
                    last_window: s.figures(),
                })
                .collect(),
        }
    }
}

impl Controller for Adaptive {
    fn needs_access_log(&self) -> bool {
        let uses = |source: &str| source.contains("timeseries");
        match (&self.active, &self.fixed) {
            (Some(_), _) => self.shadows.iter().any(|s| uses(&s.spec.source)),
            (None, Some(_)) => true,
            (None, None) => false,
        }
    }

    fn observes_requests(&self) -> bool {
        true
    }

    #[inline]
    fn observe(&mut self, req: &trace::Request, objects: u64, bytes: u64) {
        if self.real_sample.requests == 0.0 && self.real.is_empty() {
            // The first request: the opening stretch starts at its time.
            if let Some(first) = self.timeline.first_mut() {
                first.from_time = req.time;
            }
        }
        self.last_time = req.time;
        for s in &mut self.shadows {
            s.observe(req);
        }
        let r = &mut self.real_sample;
        r.requests += 1.0;
        r.sum_objects += objects as f64;
        r.sum_bytes += bytes as f64;
        r.peak_objects = r.peak_objects.max(objects as f64);
        r.peak_bytes = r.peak_bytes.max(bytes as f64);
    }

    fn tick(&mut self, ctx: &TickContext<'_>) -> TickDecision {
        self.last_time = ctx.now;
        for s in &mut self.shadows {
            s.tick(ctx.now, ctx.tick);
        }
        self.close_real(ctx);
        self.run_switch(ctx);
        if let Some(a) = &self.active {
            self.active_ticks[a.index] += 1;
        }
        if self.record_rows {
            let active = self.active.as_ref().map(|a| a.index);
            for (i, s) in self.shadows.iter().enumerate() {
                let f = s.figures();
                self.rows.push(ShadowRow {
                    tick: ctx.tick,
                    time: ctx.now,
                    candidate: s.name().to_string(),
                    active: Some(i) == active,
                    lookups: f.lookups,
                    misses: f.misses,
                    miss_ratio: f.miss_ratio,
                    mean_objects: f.mean_objects,
                    peak_objects: f.peak_objects,
                    mean_bytes: f.mean_bytes,
                    evictions: f.evictions,
                    decisions: f.decisions,
                    errors: f.errors,
                });
            }
        }
        if let Some(objects) = self.handover.take() {
            // The tick of a switch hands the real cache over at the new candidate's capacity;
            // its policy manages it from the next tick.
            self.actions += 1;
            return TickDecision {
                action: Action::SetCapacity(objects),
                error: None,
            };
        }
        let servers = [ctx.metrics.clone()];
        let (engine, params) = match (&mut self.active, &mut self.fixed) {
            (Some(a), _) => (&mut a.engine, &self.shadows[a.index].spec.params),
            (None, Some((engine, params, _))) => (engine, &*params),
            (None, None) => return TickDecision::default(),
        };
        self.ticks_run += 1;
        let outcome = engine.tick(&TickInput {
            now: ctx.now,
            tick: ctx.tick,
            whoami: 0,
            servers: &servers,
            params,
            timeseries: ctx.access_log,
        });
        let (records, _) = engine.drain_logs();
        for r in records {
            self.echo(&format!(
                "policy {} [{:?}]: {}",
                r.policy, r.level, r.message
            ));
        }
        if let Some(error) = outcome.error {
            self.errors += 1;
            return TickDecision {
                action: Action::None,
                error: Some(error.to_string()),
            };
        }
        if outcome.decision.action != Action::None {
            self.actions += 1;
        }
        TickDecision {
            action: outcome.decision.action,
            error: None,
        }
    }

    fn summary(&self) -> ControllerSummary {
        let name = match (&self.switch, &self.fixed) {
            (Some(s), _) => format!("{} (adaptive)", s.id().name),
            (None, Some(f)) => f.2.clone(),
            (None, None) => "shadows only".to_string(),
        };
        ControllerSummary {
            name,
            version: None,
            ticks: self.ticks_run,
            actions: self.actions,
            errors: self.errors,
            fallback: None,
        }
    }
}

impl AdaptiveReport {
    /// One paragraph for a report page: which version was active when, and each shadow's
    /// whole-run figures.
    pub fn describe(&self) -> String {
        let mut text = String::new();
        if let Some(name) = &self.switch_policy {
            let stretches: Vec<String> = self
                .timeline
                .iter()
                .take(20)
                .map(|s| {
                    format!(
                        "{} from {:.0} s",
                        s.version.as_deref().unwrap_or("unmanaged"),
                        s.from_time
                    )
                })
                .collect();
            let more = self.timeline.len().saturating_sub(20);
            text.push_str(&format!(
                "Switch policy {name}: {} switches; active: {}{}. ",
                self.switches,
                stretches.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        let shadows: Vec<String> = self
            .candidates
            .iter()
            .map(|c| {
                format!(
                    "{} (sample {}): miss ratio {:.6}, mean {:.1} objects",
                    c.name, c.sample, c.shadow.miss_ratio, c.shadow.mean_objects
                )
            })
            .collect();
        text.push_str(&format!("Shadows: {}.", shadows.join("; ")));
        text
    }

    /// The human summary's lines about the shadows and the switches.
    pub fn print(&self) {
        if let Some(name) = &self.switch_policy {
            println!(
                "switch       {name}: {} switches in {} calls ({} failed), window {} ticks",
                self.switches, self.switch_calls, self.switch_errors, self.window_ticks
            );
            for s in &self.timeline {
                let reason = if s.reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", s.reason)
                };
                println!(
                    "  from tick {:<6} t={:<10.1} {}{reason}",
                    s.from_tick,
                    s.from_time,
                    s.version.as_deref().unwrap_or("unmanaged")
                );
            }
        }
        for c in &self.candidates {
            let t = &c.shadow;
            println!(
                "shadow       {} (sample {}): miss ratio {:.6} ({:.0} misses), mean {:.1} objects, peak {:.0}, {} decisions, {} errors, active {} ticks",
                c.name,
                c.sample,
                t.miss_ratio,
                t.misses,
                t.mean_objects,
                t.peak_objects,
                t.decisions,
                t.errors,
                c.active_ticks
            );
        }
    }
}
