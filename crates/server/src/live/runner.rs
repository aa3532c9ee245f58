//! The engine's thread: ticks on the wall clock (or, with `--tick manual`, once per
//! `POLICY TICK`), feeds the policy the server's access series, applies decisions to the cache,
//! answers the `POLICY` commands that need the Lua state (the control thread, `control`,
//! answers the others), keeps the registry's activation stack and the engine in step, rolls
//! back a version that keeps failing, and writes everything that happens to the journal.
//!
//! Every tick and request is bracketed in the thread's `JobWatch`; once the control thread
//! has abandoned the thread (its work wedged), it writes nothing more: every registry write,
//! journal line and cache action goes through `JobWatch::unless_abandoned`.
//!
//! The registry is the one owner of version numbers (`name@N` forever): the engine runs each
//! version under the id the registry gave it, so every message names the registry version.
//! Replies are plain values ([`Reply`]); `cmd::policy` makes frames of them.

use super::journal::{Level, LogKind};
use super::link::{EngineMessage, Exit, Link, Replier};
use super::registry::{self, Registry, VersionRecord, VersionRef};
use super::reply::{Reply, Status, TickReport};
use super::sample::Sampler;
use super::shadows::{ShadowHost, SwitchTo};
use super::space::Space;
use super::watchdog::{Ended, Job};
use super::{stderr_line, Gauges, Op};
use crate::db::{now_ms, Db};
use crate::metrics::Stats;
use crate::shadow::DRAIN_INTERVAL;
use cache::AccessLog;
use policy::{Action, Limits, LogLevel, Params, PolicyEngine, PolicyId, StateValue, TickInput};
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Most events `POLICY LOG n` returns.
pub const MAX_LOG_REPLY: usize = super::journal::JOURNAL_CAPACITY as usize;

#[derive(Clone)]
pub struct Settings {
    pub tick: Duration,
    /// `--tick manual`: no wall-clock ticks; each `POLICY TICK` runs one.
    pub manual: bool,
    pub limits: Limits,
    pub policy_file: Option<PathBuf>,
    pub echo: bool,
    /// `--no-policy`: do not reactivate the registry's active version.
    pub no_policy: bool,
    /// A cluster's registry and central log (`--cluster`).
    pub shared: Option<Arc<dyn registry::Shared>>,
    /// `--policy-keep-versions`: versions kept per name in the node's own registry.
    pub keep_versions: usize,
    /// The configured capacity, restored when no policy manages the cache.
    pub baseline: Arc<super::baseline::Baseline>,
}

/// The engine thread's body: opens the runner (telling `opened`, for the first thread, how
/// that went) and runs it until told to stop, abandoned, or it panics.
pub fn run_engine(
    db: Db,
    space: Space,
    settings: Settings,
    gauges: Arc<Gauges>,
    link: Link,
    opened: Option<mpsc::Sender<Result<(), String>>>,
) -> Exit {
    let watch = link.watch.clone();
    let runner = Runner::open(db, space, settings, gauges, link);
    let mut runner = match runner {
        Ok(runner) => runner,
        Err(e) => {
            match opened {
                Some(opened) => {
                    let _ = opened.send(Err(e));
                }
                None => stderr_line(&format!("mantle: the policy engine cannot restart: {e}")),
            }
            return Exit::OpenFailed;
        }
    };
    if let Some(opened) = opened {
        let _ = opened.send(Ok(()));
    }
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runner.run()));
    match run {
        Ok(()) => Exit::Finished,
        Err(_) => Exit::Panicked(watch.running().and_then(|(job, _)| job.tick_of)),
    }
}

pub struct Runner {
    db: Db,
    engine: PolicyEngine,
    registry: Registry,
    /// The journal, the inbox, the watch and the board, shared with the control thread.
    link: Link,
    sampler: Sampler,
    params: Params,
    /// The activation stack, as in the registry (last = active).
    history: Vec<VersionRef>,
    persisted: BTreeMap<String, StateValue>,
    settings: Settings,
    tick: u64,
    last_decision: String,
    last_error: String,
    warned_where: bool,
    gauges: Arc<Gauges>,
    /// `timeseries()`: the events requests recorded, drained in before each tick.
    log: AccessLog,
    /// The ring that takes the pending one's place at each drain (see `access_series`).
    spare: VecDeque<(f64, u64)>,
    /// Wall-clock origin of the sampler's rates (manual ticks use the policy clock).
    started: Instant,
    /// The top of the activation stack is not running (`--no-policy`) until an operator
    /// activates or rolls back.
    suspended: bool,
    /// When the running version was last swapped in (µs since the Unix epoch): what the
    /// propagation bench reads from every node.
    activated_at_us: u64,
    /// Candidate versions in shadow and the switch policy (see `shadow`).
    shadows: ShadowHost,
}

impl Runner {
    pub fn open(
        db: Db,
        space: Space,
        settings: Settings,
        gauges: Arc<Gauges>,
        link: Link,
    ) -> Result<Runner, String> {
        let registry = Registry::new(space)
            .with_shared(settings.shared.clone())
            .with_keep(settings.keep_versions);
        let mut engine = PolicyEngine::with_interrupt(settings.limits, link.interrupt.clone());
        let persisted = registry.states().map_err(|e| e.to_string())?;
        for (name, value) in &persisted {
            engine.set_state(name, value.clone());
        }
        let params = registry.params().map_err(|e| e.to_string())?;
        let history = registry.history().map_err(|e| e.to_string())?;
        db.series().clock.set_manual(settings.manual);
        let log = AccessLog::with_bounded_ids(db.series().limit());
        let shadows = ShadowHost::new(db.clone(), settings.limits, link.interrupt.clone());
        let mut runner = Runner {
            db,
            engine,
            registry,
            link,
            sampler: Sampler::default(),
            params,
            history,
            persisted,
            settings,
            tick: 0,
            last_decision: "none".into(),
            last_error: String::new(),
            warned_where: false,
            gauges,
            log,
            spare: VecDeque::new(),
            started: Instant::now(),
            suspended: false,
            activated_at_us: 0,
            shadows,
        };
        if !runner.registry.is_durable() {
            stderr_line(
                "mantle: policies are kept in memory only (in front of an upstream without --state-dir)",
            );
        }
        runner.report_unreadable();
        runner.quarantine_wedged()?;
        if runner.settings.no_policy {
            if let Some(top) = runner.history.last().cloned() {
                runner.suspended = true;
                runner.note(
                    Level::Warn,
                    LogKind::Suspended,
                    &top.to_string(),
                    "not reactivated: started with --no-policy; the registry is unchanged \
                     (POLICY USE to run a version, POLICY ROLLBACK to drop this one)",
                );
            }
        } else if let Some(active) = runner.history.last().cloned() {
            match runner.activate() {
                Ok(()) => runner.note(
                    Level::Info,
                    LogKind::Activated,
                    &active.to_string(),
                    "active again after restart",
                ),
                Err(e) => runner.note(
                    Level::Error,
                    LogKind::Error,
                    &active.to_string(),
                    &format!("cannot reactivate after restart: {e}"),
                ),
            }
        }
        if let Some(path) = runner.settings.policy_file.clone() {
            // In a cluster the registry is shared: a node that (re)joins with --policy must not
            // roll back what an operator pushed since, so the file only seeds a cluster that
            // runs nothing yet.
            match runner.history.last().cloned() {
                Some(active) if runner.settings.shared.is_some() => runner.note(
                    Level::Info,
                    LogKind::Kept,
                    &active.to_string(),
                    &format!(
                        "the cluster already runs it; --policy {} seeds only a cluster without \
                         an active policy",
                        path.display()
                    ),
                ),
                _ => runner.load_file(&path)?,
            }
        }
        runner.update_gauges();
        runner.link.board.set_params(&runner.params);
        runner.publish();
        Ok(runner)
    }

    /// One log line per registry record that cannot be read back: the readers skipped it.
    fn report_unreadable(&mut self) {
        let found = match self.registry.unreadable() {
            Ok(found) => found,
            Err(e) => vec![registry::Unreadable {
                key: "*".into(),
                error: e.to_string(),
            }],
        };
        for record in found {
            let message = format!(
                "{}; skipped (POLICY UNREADABLE DROP {} deletes it)",
                record.error, record.key
            );
            if !self.settings.echo {
                stderr_line(&format!("mantle: {message}"));
            }
            self.note(Level::Error, LogKind::Unreadable, "", &message);
        }
    }

    /// A version recorded as wedged in a tick when the server stopped (see `watchdog`) is taken
    /// off the activation stack, so a restart does not run it into the same wedge; it stays in
    /// the registry for `POLICY USE`.
    fn quarantine_wedged(&mut self) -> Result<(), String> {
        let Some(wedged) = self.registry.wedged().map_err(|e| e.to_string())? else {
            return Ok(());
        };
        if self.history.last() == Some(&wedged) {
            let to = self.pop_stack()?;
            self.note(
                Level::Error,
                LogKind::Quarantined,
                &wedged.to_string(),
                &format!(
                    "its tick did not finish before the engine stopped; not reactivated, \
                     reinstated {to} (POLICY USE {} {} to run it again)",
                    wedged.name, wedged.version
                ),
            );
        }
        self.registry.set_wedged(None).map_err(|e| e.to_string())
    }

    /// `--policy FILE`: stored as a new version of the file's stem unless identical to its
    /// latest version, then activated.
    fn load_file(&mut self, path: &std::path::Path) -> Result<(), String> {
        let source = policy::read_policy_file(path)?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        registry::validate_name(&name).map_err(|e| format!("{}: {e}", path.display()))?;
        let latest = self.registry.latest(&name).map_err(|e| e.to_string())?;
        let version = match latest {
            Some(record) if record.source == source => record.version,
            _ => {
                let author = format!("mantle serve --policy {}", path.display());
                self.store_version(&name, &source, &author)?.version
            }
        };
        let id = VersionRef { name, version };
        if self.history.last() != Some(&id) {
            self.push_and_activate(id)?;
        }
        Ok(())
    }

    /// Serves the inbox and ticks until told to stop or abandoned.
    pub fn run(&mut self) {
        let mut next_tick = Instant::now() + self.settings.tick;
        let inbox = self.link.inbox.clone();
        loop {
            // With shadows, queued accesses are handed to them every DRAIN_INTERVAL too.
            let drain = (!self.shadows.is_idle()).then_some(DRAIN_INTERVAL);
            let received = {
                let inbox = inbox.lock().unwrap_or_else(|e| e.into_inner());
                match (self.settings.manual, drain) {
                    (true, None) => inbox
                        .recv()
                        .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
                    (true, Some(drain)) => inbox.recv_timeout(drain),
                    (false, drain) => {
                        let to_tick = next_tick.saturating_duration_since(Instant::now());
                        inbox.recv_timeout(drain.map_or(to_tick, |d| d.min(to_tick)))
                    }
                }
            };
            let done = match received {
                Ok(EngineMessage::Request(op, reply)) => self.request(op, reply),
                Ok(EngineMessage::Rollback { seen, reply }) => {
                    self.link.pending_rollbacks.fetch_sub(1, Ordering::SeqCst);
                    self.rollback(seen, reply)
                }
                Ok(EngineMessage::Param(key, value)) => {
                    self.shadows.set_param(&key, &value);
                    self.params.insert(key, value);
                    self.publish();
                    Some(())
                }
                Ok(EngineMessage::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // The interrupt stopped the last callback; saving the states runs Lua.
                    self.link.interrupt.clear();
                    self.persist_states();
                    return;
                }
                Err(mpsc::RecvTimeoutError::Timeout)
                    if self.settings.manual || Instant::now() < next_tick =>
                {
                    self.shadows.drain();
                    Some(())
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let done = self.job(Job::tick(self.running()), |r| {
                        r.run_tick();
                    });
                    // Ticks keep their period; a tick that overran starts the next one at once
                    // rather than running a burst to catch up.
                    next_tick += self.settings.tick;
                    let now = Instant::now();
                    if next_tick < now {
                        next_tick = now + self.settings.tick;
                    }
                    done
                }
            };
            if done.is_none() {
                return; // abandoned: the control thread runs a new engine thread
            }
        }
    }

    /// Runs one request as a job and answers it, unless the thread was abandoned meanwhile
    /// (then the control thread answered it); `None` then.
    fn request(&mut self, op: Op, reply: Replier) -> Option<()> {
        let job = match op {
            Op::Tick { .. } => Job::tick(self.running()),
            _ => Job::request(&format!("POLICY {}", op_name(&op))),
        };
        self.answer_in_job(job, reply, |r| r.handle(op))
    }

    /// `POLICY ROLLBACK` of `seen`: when another version is on top now (the wedged one was
    /// taken off already, or a fallback ran), that one is left alone.
    fn rollback(&mut self, seen: Option<String>, reply: Replier) -> Option<()> {
        let top = self.history.last().map(ToString::to_string);
        if seen.is_some() && top != seen {
            let _ = reply.send(Ok(Reply::Reinstated(self.top_name())));
            return Some(());
        }
        self.answer_in_job(Job::request("POLICY ROLLBACK"), reply, |r| {
            let result = r.op_rollback();
            r.update_gauges();
            r.publish_shadows();
            result
        })
    }

    fn answer_in_job(
        &mut self,
        job: Job,
        reply: Replier,
        work: impl FnOnce(&mut Self) -> Result<Reply, String>,
    ) -> Option<()> {
        *self
            .link
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(reply);
        let result = self.job(job, work)?;
        let reply = self
            .link
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(reply) = reply {
            let _ = reply.send(result);
        }
        Some(())
    }

    /// Runs `work` watched by the control thread; `None` if the thread was abandoned while
    /// it ran (nothing of it may be published then).
    fn job<T>(&mut self, job: Job, work: impl FnOnce(&mut Self) -> T) -> Option<T> {
        let tick_of = job.tick_of.clone();
        if !self.link.watch.begin(job) {
            return None;
        }
        let out = work(self);
        match self.link.watch.end() {
            Ended::Abandoned => return None,
            Ended::Finished { marked: true } => {
                if let Some(version) = tick_of {
                    if let Err(e) = self.registry.set_wedged(None) {
                        self.note(
                            Level::Error,
                            LogKind::Error,
                            &version.to_string(),
                            &format!("{e}"),
                        );
                    }
                    self.note(
                        Level::Warn,
                        LogKind::Log,
                        &version.to_string(),
                        "a tick that ran past the wedge threshold finished; no longer recorded \
                         as wedged",
                    );
                }
            }
            Ended::Finished { marked: false } => {}
        }
        self.publish();
        Some(out)
    }

    /// Runs one tick; returns the action applied in replay's notation (`capacity:N`,
    /// `evict:N`, empty for none) and the error, if the policy failed.
    fn run_tick(&mut self) -> (String, Option<String>) {
        self.tick += 1;
        let series = self.db.series();
        let now = series.clock.now();
        let at = if self.settings.manual {
            now
        } else {
            self.started.elapsed().as_secs_f64()
        };
        let metrics = self.sampler.sample(&self.db, at);
        series.drain_into(&mut self.log, &mut self.spare);
        self.tick_shadows(now);
        if self.history.is_empty() || self.engine.active().is_none() || self.suspended {
            return (String::new(), None);
        }
        let own = [metrics];
        let shared = self.settings.shared.clone();
        let cluster = shared.as_ref().and_then(|s| s.cluster_env(&own[0], now));
        if let (Some(shared), Some(_)) = (&shared, &cluster) {
            self.engine.set_slots(shared.cluster_slots());
        }
        let (servers, whoami) = cluster
            .as_ref()
            .map_or((&own[..], 0), |(s, w)| (&s[..], *w));
        let input = TickInput {
            now,
            tick: self.tick,
            whoami,
            servers,
            params: &self.params,
            timeseries: &self.log,
        };
        let outcome = self.engine.tick(&input);
        if self.link.watch.is_abandoned() {
            return (String::new(), None);
        }
        self.relay_logs();
        let policy = outcome
            .policy
            .as_ref()
            .map(|id| id.to_string())
            .unwrap_or_default();
        let error = outcome.error.as_ref().map(|e| e.to_string());
        if let Some(error) = &error {
            self.last_error = error.clone();
        }
        let applied = match outcome.decision.action {
            Action::None => String::new(),
            Action::Evict(n) => format!("evict:{n}"),
            Action::SetCapacity(n) => format!("capacity:{n}"),
        };
        let applied_now = super::actions::apply(&self.db, outcome.decision.action);
        if let Some(message) = &applied_now.capacity_change {
            self.note(Level::Info, LogKind::Capacity, &policy, message);
        }
        self.last_decision = applied_now.decision;
        if let (Some(shared), Some(_)) = (&shared, &cluster) {
            let failed = error.is_some();
            shared.after_cluster_tick(
                self.tick,
                &servers[whoami],
                &outcome.decision,
                &policy,
                failed,
            );
        } else if !outcome.decision.targets.is_empty() && !self.warned_where {
            self.warned_where = true;
            self.note(
                Level::Warn,
                LogKind::Log,
                &policy,
                "where() asked to move load to other servers; ignored on a single node",
            );
        }
        if let Some(fallback) = outcome.fallback {
            let from = fallback.from.to_string();
            if let Some(top) = self.history.pop() {
                debug_assert_eq!(top.to_string(), from);
            }
            let to = self.top_name();
            let message = format!(
                "{from} failed {} consecutive ticks; reinstated {to}",
                self.settings.limits.max_consecutive_failures
            );
            self.note(Level::Warn, LogKind::RolledBack, &from, &message);
            if let Err(e) = self.write(|r| r.set_history(&self.history)) {
                self.note(
                    Level::Error,
                    LogKind::Error,
                    &from,
                    &format!("rollback not persisted: {e}"),
                );
            }
            if let Err(e) = self.activate() {
                self.note(Level::Error, LogKind::Error, &to, &e);
            }
        }
        self.persist_states();
        self.update_gauges();
        (applied, error)
    }

    /// Ticks the shadows (before the live policy, as replay does), logs what they report and
    /// makes the switch policy's choice active.
    fn tick_shadows(&mut self, now: f64) {
        let running = self.running().cloned();
        let result = self
            .shadows
            .tick(now, self.tick, running.as_ref(), &self.params);
        for (level, message) in result.notes {
            self.note(level, LogKind::Shadow, "", &message);
        }
        if let Some(to) = result.switch_to {
            self.switch_to(to);
        }
        self.publish_shadows();
    }

    /// Activates what the switch policy chose through the registry, as POLICY PARAM and
    /// POLICY USE would (so the log, ROLLBACK and a cluster's propagation apply).
    fn switch_to(&mut self, to: SwitchTo) {
        let from = self.top_name();
        for (key, value) in &to.overrides {
            if self.params.get(key) == Some(value) {
                continue;
            }
            if let Err(e) = self.write(|r| r.set_param(key, value)) {
                let message = format!("cannot switch to {}: {e}", to.candidate);
                self.note(
                    Level::Error,
                    LogKind::Error,
                    &to.version.to_string(),
                    &message,
                );
                return;
            }
            self.note(
                Level::Info,
                LogKind::Param,
                "",
                &format!("{key}={value} (switch)"),
            );
            self.params.insert(key.clone(), value.clone());
            self.link.board.set_params(&self.params);
            self.shadows.set_param(key, value);
        }
        if self.running() != Some(&to.version) {
            if let Err(e) = self.push_and_activate(to.version.clone()) {
                let message = format!("cannot switch to {}: {e}", to.candidate);
                self.note(
                    Level::Error,
                    LogKind::Error,
                    &to.version.to_string(),
                    &message,
                );
                return;
            }
        }
        let message = format!(
            "at tick {}, from {from} to {}: {}",
            self.tick, to.candidate, to.reason
        );
        self.note(
            Level::Info,
            LogKind::Switched,
            &to.version.to_string(),
            &message,
        );
    }

    fn publish_shadows(&self) {
        let report = self.shadows.report(self.running(), &self.params);
        self.db.metrics().shadows.publish(report);
    }

    fn op_shadow(&mut self, op: Op) -> Result<Reply, String> {
        match op {
            Op::ShadowAdd {
                name,
                version,
                options,
            } => {
                let record = self
                    .registry
                    .version(&name, version)
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| no_such(&name, version))?;
                let id = record.id();
                let added = self
                    .shadows
                    .add(id.clone(), record.source, &options, &self.params)?;
                self.note(
                    Level::Info,
                    LogKind::Shadow,
                    &id.to_string(),
                    &format!("shadow {added} added"),
                );
                Ok(Reply::Name(added))
            }
            Op::ShadowDrop { name } => {
                self.shadows.remove(&name)?;
                self.note(
                    Level::Info,
                    LogKind::Shadow,
                    "",
                    &format!("shadow {name} dropped"),
                );
                Ok(Reply::Done)
            }
            Op::ShadowList => {
                let report = self.shadows.report(self.running(), &self.params);
                Ok(Reply::Lines(
                    report
                        .candidates
                        .iter()
                        .filter(|c| c.role == "shadow")
                        .map(|c| {
                            format!(
                                "{} policy={} params={:?} sample={} max_objects={}{}",
                                c.name,
                                c.policy,
                                c.params,
                                c.sample,
                                c.max_objects,
                                if c.active { " active" } else { "" }
                            )
                        })
                        .collect(),
                ))
            }
            Op::ShadowStatus { name: None } => {
                self.shadows.drain();
                let report = self.shadows.report(self.running(), &self.params);
                Ok(Reply::Candidates(report.candidates))
            }
            Op::ShadowStatus { name: Some(name) } => {
                self.shadows.drain();
                let running = self.running().cloned();
                self.shadows
                    .status_of(&name, running.as_ref(), &self.params)
                    .map(|c| Reply::Candidate(Box::new(c)))
            }
            Op::SwitchLoad { source, options } => {
                let params = self.shadows.load_switch(&source, &options)?;
                let message = format!("switch policy loaded ({} bytes) {params}", source.len());
                self.note(Level::Info, LogKind::Switch, "", message.trim_end());
                Ok(Reply::Done)
            }
            Op::SwitchOff => {
                if self.shadows.unload_switch() {
                    self.note(Level::Info, LogKind::Switch, "", "switch policy unloaded");
                }
                Ok(Reply::Done)
            }
            Op::SwitchStatus => Ok(Reply::Switch(Box::new(
                self.shadows.report(self.running(), &self.params),
            ))),
            _ => Err("not a shadow command".into()),
        }
    }

    /// `POLICY TICK [now]` (manual ticks only): sets the clock, runs one tick, and replies
    /// with what it did and the cache's figures after it.
    fn op_tick(&mut self, now: Option<f64>) -> Result<Reply, String> {
        if !self.settings.manual {
            return Err("POLICY TICK needs a server started with --tick manual".into());
        }
        if let Some(now) = now {
            self.db.series().clock.set(now)?;
        }
        let (action, error) = self.run_tick();
        let snapshot = self.db.cache_snapshot();
        let stats = self.db.stats();
        Ok(Reply::Tick(Box::new(TickReport {
            tick: self.tick,
            now: self.db.series().clock.now(),
            action,
            error,
            cache_objects: snapshot.objects,
            cache_bytes: snapshot.bytes,
            capacity_objects: snapshot.capacity.objects,
            capacity_bytes: snapshot.capacity.bytes,
            hits: Stats::read(&stats.cache_hits),
            misses: Stats::read(&stats.cache_misses),
            evictions: snapshot.evictions,
            store_reads: Stats::read(&stats.store_reads),
            store_writes: Stats::read(&stats.store_writes),
            series_events: self.log.len() as u64,
            series_keys: self.log.distinct_keys(),
        })))
    }

    fn handle(&mut self, op: Op) -> Result<Reply, String> {
        let result = match op {
            Op::Load {
                name,
                source,
                author,
            } => self.op_load(&name, &source, &author),
            Op::Use { name, version } => self.op_use(&name, version),
            Op::Tick { now } => self.op_tick(now),
            Op::Sync => self.op_sync(),
            Op::Unreadable => self
                .registry
                .unreadable()
                .map(|found| {
                    Reply::Lines(
                        found
                            .into_iter()
                            .map(|u| format!("{} {}", u.key, u.error))
                            .collect(),
                    )
                })
                .map_err(|e| e.to_string()),
            Op::DropUnreadable { key } => {
                self.registry
                    .drop_unreadable(&key)
                    .map_err(|e| e.to_string())?;
                self.note(
                    Level::Warn,
                    LogKind::Dropped,
                    "",
                    &format!("unreadable registry record '{key}' deleted"),
                );
                Ok(Reply::Done)
            }
            Op::List
            | Op::Show { .. }
            | Op::Rollback
            | Op::Status
            | Op::Param { .. }
            | Op::Log { .. } => Err(format!(
                "POLICY {} is answered by the control thread",
                op_name(&op)
            )),
            op @ (Op::ShadowAdd { .. }
            | Op::ShadowList
            | Op::ShadowStatus { .. }
            | Op::ShadowDrop { .. }
            | Op::SwitchLoad { .. }
            | Op::SwitchOff
            | Op::SwitchStatus) => self.op_shadow(op),
        };
        self.update_gauges();
        self.publish_shadows();
        result
    }

    fn op_load(&mut self, name: &str, source: &str, author: &str) -> Result<Reply, String> {
        registry::validate_name(name)?;
        if source.len() > registry::MAX_SOURCE_BYTES {
            return Err(format!(
                "policy source is {} bytes; at most {} accepted",
                source.len(),
                registry::MAX_SOURCE_BYTES
            ));
        }
        let record = self.store_version(name, source, author)?;
        self.push_and_activate(record.id())?;
        Ok(Reply::Version(record.version))
    }

    /// Compiles `source` on a scratch engine (so a bad version never touches the running
    /// one), then stores it as the next version of `name`.
    fn store_version(
        &mut self,
        name: &str,
        source: &str,
        author: &str,
    ) -> Result<VersionRecord, String> {
        let next = self
            .registry
            .next_version(name)
            .map_err(|e| e.to_string())?;
        let label = format!("{name}@{next}");
        let mut scratch =
            PolicyEngine::with_interrupt(self.settings.limits, self.link.interrupt.clone());
        if let Err(e) =
            scratch.load_version(PolicyId::new(name, next), &format!("={label}"), source)
        {
            let running = self
                .history
                .last()
                .map_or("no policy is running".to_string(), |r| {
                    format!("{r} keeps running")
                });
            self.note(
                Level::Error,
                LogKind::Rejected,
                &label,
                &format!("{e}; {running}"),
            );
            return Err(format!("policy rejected: {e}"));
        }
        let record = self.write(|r| r.add_version(name, source, author, now_ms()))?;
        self.note(
            Level::Info,
            LogKind::Loaded,
            &record.id().to_string(),
            &format!("stored by {author}, {} bytes", source.len()),
        );
        Ok(record)
    }

    fn op_use(&mut self, name: &str, version: Option<u32>) -> Result<Reply, String> {
        let record = self
            .registry
            .version(name, version)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| no_such(name, version))?;
        if self.history.last() != Some(&record.id()) {
            self.push_and_activate(record.id())?;
        } else if self.suspended {
            self.activate()?;
            self.suspended = false;
            self.note(
                Level::Info,
                LogKind::Activated,
                &record.id().to_string(),
                "resumed",
            );
        }
        Ok(Reply::Version(record.version))
    }

    fn op_rollback(&mut self) -> Result<Reply, String> {
        self.suspended = false;
        let Some(from) = self.history.last().cloned() else {
            return Err("no policy is active; nothing to roll back".into());
        };
        let to = self.pop_stack()?;
        self.note(
            Level::Info,
            LogKind::RolledBack,
            &from.to_string(),
            &format!("by POLICY ROLLBACK; reinstated {to}"),
        );
        self.activate()?;
        Ok(Reply::Reinstated(to))
    }

    /// Adopts the shared registry's activation stack and parameters after another node
    /// changed them: every node of a cluster runs the same version.
    fn op_sync(&mut self) -> Result<Reply, String> {
        let (history, params) = self.registry.snapshot().map_err(|e| e.to_string())?;
        if params != self.params {
            for (key, value) in &params {
                self.shadows.set_param(key, value);
            }
            self.params = params;
            self.link.board.set_params(&self.params);
        }
        if history == self.history {
            return Ok(Reply::Done);
        }
        let top_changed = history.last() != self.history.last();
        self.history = history;
        self.suspended = false;
        let top = self.top_name();
        match self.activate() {
            Ok(()) if top_changed => self.note(
                Level::Info,
                LogKind::Activated,
                &top,
                "from the cluster's registry",
            ),
            Ok(()) => {}
            Err(e) => self.note(
                Level::Error,
                LogKind::Error,
                &top,
                &format!("cannot run the cluster's active version here: {e}"),
            ),
        }
        Ok(Reply::Done)
    }

    fn op_status(&self) -> Status {
        let stats = self.engine.stats();
        let suspended = match (self.suspended, self.history.last()) {
            (true, Some(top)) => top.to_string(),
            _ => String::new(),
        };
        let previous = self
            .history
            .len()
            .checked_sub(2)
            .map_or(String::new(), |i| self.history[i].to_string());
        Status {
            active: self.running().map_or(String::new(), |r| r.to_string()),
            previous,
            tick_ms: self.settings.tick.as_millis() as u64,
            ticks: stats.ticks,
            actions: stats.actions,
            errors: stats.errors,
            fallbacks: stats.fallbacks,
            last_decision: self.last_decision.clone(),
            last_error: self.last_error.clone(),
            durable: self.registry.is_durable(),
            suspended,
            activated_at_us: self.activated_at_us,
            params: BTreeMap::new(), // the board keeps them (see `control::Board`)
            busy_ms: 0,
            busy_with: String::new(),
        }
    }

    /// Takes the top off the activation stack and persists the stack; returns what is on top
    /// now, for the log.
    fn pop_stack(&mut self) -> Result<String, String> {
        self.history.pop();
        self.write(|r| r.set_history(&self.history))?;
        Ok(self.top_name())
    }

    /// The top of the activation stack, `no management` when it is empty.
    fn top_name(&self) -> String {
        self.history
            .last()
            .map_or("no management".to_string(), |t| t.to_string())
    }

    /// The version running now: the top of the activation stack unless suspended.
    fn running(&self) -> Option<&VersionRef> {
        if self.suspended {
            return None;
        }
        self.history.last()
    }

    fn push_and_activate(&mut self, id: VersionRef) -> Result<(), String> {
        self.suspended = false;
        self.history.push(id.clone());
        if let Err(e) = self.activate() {
            self.history.pop();
            let _ = self.activate();
            return Err(e);
        }
        self.write(|r| r.set_history(&self.history))?;
        self.note(Level::Info, LogKind::Activated, &id.to_string(), "");
        Ok(())
    }

    /// Makes the engine run the top of the activation stack, with the entry below it as the
    /// engine's fallback, so the engine's own fallback lands where the stack says.
    fn activate(&mut self) -> Result<(), String> {
        self.engine.unload();
        self.engine.unload(); // the engine's fallback slot is now empty too
        let n = self.history.len();
        let mut loaded = Ok(());
        // Requests record the series only for a running policy that reads it, as in replay.
        self.db.series().set_recording(false);
        for (i, id) in self.history[n.saturating_sub(2)..]
            .to_vec()
            .iter()
            .enumerate()
        {
            let is_top = i + n.saturating_sub(2) == n - 1;
            match self.load_into_engine(id) {
                Ok(reads_series) if is_top => self.db.series().set_recording(reads_series),
                Ok(_) => {}
                Err(e) if is_top => loaded = Err(e),
                Err(e) => self.note(
                    Level::Warn,
                    LogKind::Error,
                    &id.to_string(),
                    &format!("fallback version not loadable: {e}"),
                ),
            }
        }
        self.relay_logs();
        if self.history.is_empty() {
            self.restore_baseline();
        }
        if !self.db.series().is_recording() {
            // No running policy reads the series: give its memory back.
            self.log = AccessLog::with_bounded_ids(self.db.series().limit());
        }
        if loaded.is_ok() {
            self.activated_at_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64);
        }
        loaded
    }

    /// With no policy managing the cache, gives it back the configured capacity (a policy
    /// may have left its own).
    fn restore_baseline(&mut self) {
        let baseline = self.settings.baseline.get();
        let before = self.db.cache_snapshot().capacity;
        if before == baseline {
            return;
        }
        let evicted = self.db.set_capacity(baseline);
        let show = |c: cache::Capacity| {
            format!(
                "max-keys {} maxmemory {}",
                c.objects.unwrap_or(0),
                c.bytes.unwrap_or(0)
            )
        };
        let message = format!(
            "no policy manages the cache: restored the configured capacity ({}; was {}), \
             evicted {evicted}",
            show(baseline),
            show(before)
        );
        self.note(Level::Info, LogKind::Capacity, "", &message);
    }

    /// Loads a registry version into the engine; returns whether its source reads the access
    /// series (`timeseries`).
    fn load_into_engine(&mut self, id: &VersionRef) -> Result<bool, String> {
        let record = self
            .registry
            .version(&id.name, Some(id.version))
            .map_err(|e| e.to_string())?
            .ok_or_else(|| no_such(&id.name, Some(id.version)))?;
        self.engine
            .load_version(
                PolicyId::new(&id.name, id.version),
                &format!("={id}"),
                &record.source,
            )
            .map_err(|e| e.to_string())?;
        Ok(record.source.contains("timeseries"))
    }

    fn relay_logs(&mut self) {
        let (records, dropped) = self.engine.drain_logs();
        for record in records {
            let (level, kind) = match record.level {
                LogLevel::Error => (Level::Error, LogKind::Error),
                LogLevel::Warn => (Level::Warn, LogKind::Log),
                LogLevel::Info | LogLevel::Debug => (Level::Info, LogKind::Log),
            };
            self.note(level, kind, &record.policy, &record.message);
        }
        if dropped > 0 {
            self.note(
                Level::Warn,
                LogKind::Log,
                "",
                &format!("{dropped} policy log lines dropped (buffer full)"),
            );
        }
    }

    fn persist_states(&mut self) {
        let states = self.engine.states();
        let changed: Vec<(&String, &StateValue)> = states
            .iter()
            .filter(|(k, v)| self.persisted.get(*k) != Some(*v))
            .collect();
        if changed.is_empty() {
            return;
        }
        match self.write(|r| r.save_states(changed.into_iter())) {
            Ok(()) => self.persisted = states,
            Err(e) => stderr_line(&format!("mantle: policy state not persisted: {e}")),
        }
    }

    /// A registry write, unless this thread was abandoned (see `watchdog`).
    fn write<T>(
        &self,
        write: impl FnOnce(&Registry) -> Result<T, crate::store::StoreError>,
    ) -> Result<T, String> {
        self.link
            .watch
            .unless_abandoned(|| write(&self.registry))
            .ok_or_else(|| "this policy engine thread was abandoned".to_string())?
            .map_err(|e| e.to_string())
    }

    /// Records an event, unless this thread was abandoned.
    fn note(&self, level: Level, kind: LogKind, policy: &str, message: &str) {
        self.link.watch.unless_abandoned(|| {
            self.link
                .journal
                .record(level, kind, policy, message, now_ms())
        });
    }

    /// Publishes the status for the control thread (after every tick and request).
    fn publish(&self) {
        if !self.link.watch.is_abandoned() {
            self.link.board.publish(self.op_status());
        }
    }

    fn update_gauges(&self) {
        let stats = self.engine.stats();
        let g = &self.gauges;
        g.ticks.store(stats.ticks, Ordering::Relaxed);
        g.actions.store(stats.actions, Ordering::Relaxed);
        g.errors.store(stats.errors, Ordering::Relaxed);
        g.fallbacks.store(stats.fallbacks, Ordering::Relaxed);
        let active = self.running();
        g.active_version.store(
            active.map_or(0, |a| u64::from(a.version)),
            Ordering::Relaxed,
        );
        if let Ok(mut name) = g.active.lock() {
            *name = active.map_or(String::new(), |a| a.to_string());
        }
    }
}

/// The name of a request, for messages: `LOAD`, `SHADOW ADD`.
pub fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Load { .. } => "LOAD",
        Op::Use { .. } => "USE",
        Op::List => "LIST",
        Op::Show { .. } => "SHOW",
        Op::Rollback => "ROLLBACK",
        Op::Tick { .. } => "TICK",
        Op::Status => "STATUS",
        Op::Param { .. } => "PARAM",
        Op::Log { .. } => "LOG",
        Op::Sync => "SYNC",
        Op::Unreadable => "UNREADABLE",
        Op::DropUnreadable { .. } => "UNREADABLE DROP",
        Op::ShadowAdd { .. } => "SHADOW ADD",
        Op::ShadowList => "SHADOW LIST",
        Op::ShadowStatus { .. } => "SHADOW STATUS",
        Op::ShadowDrop { .. } => "SHADOW DROP",
        Op::SwitchLoad { .. } => "SWITCH LOAD",
        Op::SwitchOff => "SWITCH OFF",
        Op::SwitchStatus => "SWITCH STATUS",
    }
}

pub fn no_such(name: &str, version: Option<u32>) -> String {
    match version {
        Some(v) => format!("no policy version {name}@{v}"),
        None => format!("no policy named '{name}'"),
    }
}
