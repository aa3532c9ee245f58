//! The engine's thread: ticks on the wall clock (or, with `--tick manual`, once per
//! `POLICY TICK`), feeds the policy the server's access series, applies decisions to the cache,
//! answers `POLICY` commands, keeps the registry's activation stack and the engine in step, rolls back
//! a version that keeps failing, and writes everything that happens to the journal.
//!
//! The registry is the one owner of version numbers (`name@N` forever): the engine runs each
//! version under the id the registry gave it, so every message names the registry version.
//! Replies are plain values ([`Reply`]); `cmd::policy` makes frames of them.

use super::journal::Journal;
use super::registry::{self, Registry, VersionRecord, VersionRef};
use super::reply::{Reply, Status, TickReport, VersionSummary};
use super::sample::Sampler;
use super::shadows::{ShadowHost, SwitchTo};
use super::space::Space;
use super::watchdog::TickWatch;
use super::{stderr_line, Gauges, Message, Op, MAX_RESTARTS};
use crate::db::{now_ms, Db};
use crate::metrics::Stats;
use crate::shadow::DRAIN_INTERVAL;
use cache::AccessLog;
use policy::{
    Action, Interrupt, Limits, LogLevel, Params, PolicyEngine, PolicyId, StateValue, TickInput,
};
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
    /// Stops a running callback when the server shuts down.
    pub interrupt: Interrupt,
    pub watch: Arc<TickWatch>,
    /// A cluster's registry and central log (`--cluster`).
    pub shared: Option<Arc<dyn registry::Shared>>,
    /// `--policy-keep-versions`: versions kept per name in the node's own registry.
    pub keep_versions: usize,
}

/// Runs the engine's thread: opens the runner, runs it, and rebuilds it from the registry
/// after a panic (at most [`MAX_RESTARTS`] times), quarantining the version whose tick
/// panicked. `ready` gets the outcome of the first open.
pub fn supervise(
    db: Db,
    space: Space,
    mut settings: Settings,
    gauges: Arc<Gauges>,
    ready: tokio::sync::oneshot::Sender<Result<(), String>>,
    inbox: &mpsc::Receiver<Message>,
) {
    let mut ready = Some(ready);
    let mut restarts = 0;
    loop {
        let opened = Runner::open(db.clone(), space.clone(), settings.clone(), gauges.clone());
        let mut runner = match opened {
            Ok(runner) => runner,
            Err(e) => {
                match ready.take() {
                    Some(ready) => {
                        let _ = ready.send(Err(e));
                    }
                    None => stderr_line(&format!("mantle: the policy engine cannot restart: {e}")),
                }
                return;
            }
        };
        if let Some(ready) = ready.take() {
            let _ = ready.send(Ok(()));
        }
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runner.run(inbox)));
        if run.is_ok() {
            return;
        }
        restarts += 1;
        let in_tick = settings.watch.running();
        settings.watch.end();
        stderr_line(&format!(
            "mantle: the policy engine panicked{}; {}",
            in_tick
                .as_ref()
                .map(|v| format!(" in a tick of {v}"))
                .unwrap_or_default(),
            if restarts > MAX_RESTARTS {
                "it stays stopped (too many restarts)"
            } else {
                "rebuilding it from the registry"
            }
        ));
        if restarts > MAX_RESTARTS {
            return;
        }
        if let Some(version) = in_tick {
            // Quarantined by the next open, like a version wedged when the server died.
            let _ = Registry::new(space.clone()).set_wedged(Some(&version));
        }
        // The file is in the registry already; do not activate it over a quarantine.
        settings.policy_file = None;
    }
}

pub struct Runner {
    db: Db,
    engine: PolicyEngine,
    registry: Registry,
    journal: Journal,
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
    ) -> Result<Runner, String> {
        let registry = Registry::new(space.clone())
            .with_shared(settings.shared.clone())
            .with_keep(settings.keep_versions);
        let journal = Journal::open(space, settings.echo)
            .map_err(|e| e.to_string())?
            .with_shared(settings.shared.clone());
        let mut engine = PolicyEngine::with_interrupt(settings.limits, settings.interrupt.clone());
        let persisted = registry.states().map_err(|e| e.to_string())?;
        for (name, value) in &persisted {
            engine.set_state(name, value.clone());
        }
        let params = registry.params().map_err(|e| e.to_string())?;
        let history = registry.history().map_err(|e| e.to_string())?;
        db.series().clock.set_manual(settings.manual);
        let log = AccessLog::with_bounded_ids(db.series().limit());
        let shadows = ShadowHost::new(db.clone(), settings.limits, settings.interrupt.clone());
        let mut runner = Runner {
            db,
            engine,
            registry,
            journal,
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
                "mantle: policies are kept in memory only (no local store in front of an upstream)",
            );
        }
        runner.report_unreadable();
        runner.quarantine_wedged()?;
        if runner.settings.no_policy {
            if let Some(top) = runner.history.last().cloned() {
                runner.suspended = true;
                runner.note(
                    "warn",
                    "suspended",
                    &top.to_string(),
                    "not reactivated: started with --no-policy; the registry is unchanged \
                     (POLICY USE to run a version, POLICY ROLLBACK to drop this one)",
                );
            }
        } else if let Some(active) = runner.history.last().cloned() {
            match runner.activate() {
                Ok(()) => runner.note(
                    "info",
                    "activated",
                    &active.to_string(),
                    "active again after restart",
                ),
                Err(e) => runner.note(
                    "error",
                    "error",
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
                    "info",
                    "kept",
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
            self.note("error", "unreadable", "", &message);
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
                "error",
                "quarantined",
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

    pub fn run(&mut self, inbox: &mpsc::Receiver<Message>) {
        let mut next_tick = Instant::now() + self.settings.tick;
        loop {
            // With shadows, queued accesses are handed to them every DRAIN_INTERVAL too.
            let drain = (!self.shadows.is_idle()).then_some(DRAIN_INTERVAL);
            let received = match (self.settings.manual, drain) {
                (true, None) => inbox
                    .recv()
                    .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
                (true, Some(drain)) => inbox.recv_timeout(drain),
                (false, drain) => {
                    let to_tick = next_tick.saturating_duration_since(Instant::now());
                    inbox.recv_timeout(drain.map_or(to_tick, |d| d.min(to_tick)))
                }
            };
            match received {
                Ok(Message::Request(op, reply)) => {
                    let _ = reply.send(self.handle(op));
                }
                Ok(Message::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // The interrupt stopped the last callback; saving the states runs Lua.
                    self.settings.interrupt.clear();
                    self.persist_states();
                    return;
                }
                Err(mpsc::RecvTimeoutError::Timeout)
                    if self.settings.manual || Instant::now() < next_tick =>
                {
                    self.shadows.drain();
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = self.run_tick();
                    // Ticks keep their period; a tick that overran starts the next one at once
                    // rather than running a burst to catch up.
                    next_tick += self.settings.tick;
                    let now = Instant::now();
                    if next_tick < now {
                        next_tick = now + self.settings.tick;
                    }
                }
            }
        }
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
        let Some(running) = self.history.last().cloned() else {
            return (String::new(), None);
        };
        if self.engine.active().is_none() || self.suspended {
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
        self.settings.watch.begin(&running);
        let outcome = self.engine.tick(&input);
        if self.settings.watch.end() {
            if let Err(e) = self.registry.set_wedged(None) {
                self.note("error", "error", &running.to_string(), &format!("{e}"));
            }
            self.note(
                "warn",
                "log",
                &running.to_string(),
                "a tick that ran past the wedge threshold finished; no longer recorded as wedged",
            );
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
            self.note("info", "capacity", &policy, message);
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
                "warn",
                "log",
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
            self.note("warn", "rolled_back", &from, &message);
            if let Err(e) = self.registry.set_history(&self.history) {
                self.note(
                    "error",
                    "error",
                    &from,
                    &format!("rollback not persisted: {e}"),
                );
            }
            if let Err(e) = self.activate() {
                self.note("error", "error", &to, &e);
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
            self.note(level, "shadow", "", &message);
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
            if let Err(e) = self.registry.set_param(key, value) {
                let message = format!("cannot switch to {}: {e}", to.candidate);
                self.note("error", "error", &to.version.to_string(), &message);
                return;
            }
            self.note("info", "param", "", &format!("{key}={value} (switch)"));
            self.params.insert(key.clone(), value.clone());
            self.shadows.set_param(key, value);
        }
        if self.running() != Some(&to.version) {
            if let Err(e) = self.push_and_activate(to.version.clone()) {
                let message = format!("cannot switch to {}: {e}", to.candidate);
                self.note("error", "error", &to.version.to_string(), &message);
                return;
            }
        }
        let message = format!(
            "at tick {}, from {from} to {}: {}",
            self.tick, to.candidate, to.reason
        );
        self.note("info", "switched", &to.version.to_string(), &message);
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
                    "info",
                    "shadow",
                    &id.to_string(),
                    &format!("shadow {added} added"),
                );
                Ok(Reply::Name(added))
            }
            Op::ShadowDrop { name } => {
                self.shadows.remove(&name)?;
                self.note("info", "shadow", "", &format!("shadow {name} dropped"));
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
                self.note("info", "switch", "", message.trim_end());
                Ok(Reply::Done)
            }
            Op::SwitchOff => {
                if self.shadows.unload_switch() {
                    self.note("info", "switch", "", "switch policy unloaded");
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
            Op::List => self.op_list(),
            Op::Show { name, version } => match self.registry.version(&name, version) {
                Ok(Some(record)) => Ok(Reply::Source(record.source)),
                Ok(None) => Err(no_such(&name, version)),
                Err(e) => Err(e.to_string()),
            },
            Op::Rollback => self.op_rollback(),
            Op::Tick { now } => self.op_tick(now),
            Op::Status => Ok(Reply::Status(Box::new(self.op_status()))),
            Op::Param { key, value } => self.op_param(&key, &value),
            Op::Log { count } => self
                .journal
                .tail(count.min(MAX_LOG_REPLY))
                .map(Reply::Log)
                .map_err(|e| e.to_string()),
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
                    "warn",
                    "dropped",
                    "",
                    &format!("unreadable registry record '{key}' deleted"),
                );
                Ok(Reply::Done)
            }
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
            PolicyEngine::with_interrupt(self.settings.limits, self.settings.interrupt.clone());
        if let Err(e) =
            scratch.load_version(PolicyId::new(name, next), &format!("={label}"), source)
        {
            let running = self
                .history
                .last()
                .map_or("no policy is running".to_string(), |r| {
                    format!("{r} keeps running")
                });
            self.note("error", "rejected", &label, &format!("{e}; {running}"));
            return Err(format!("policy rejected: {e}"));
        }
        let record = self
            .registry
            .add_version(name, source, author, now_ms())
            .map_err(|e| e.to_string())?;
        self.note(
            "info",
            "loaded",
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
            self.note("info", "activated", &record.id().to_string(), "resumed");
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
            "info",
            "rolled_back",
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
        }
        if history == self.history {
            return Ok(Reply::Done);
        }
        let top_changed = history.last() != self.history.last();
        self.history = history;
        self.suspended = false;
        let top = self.top_name();
        match self.activate() {
            Ok(()) if top_changed => {
                self.note("info", "activated", &top, "from the cluster's registry")
            }
            Ok(()) => {}
            Err(e) => self.note(
                "error",
                "error",
                &top,
                &format!("cannot run the cluster's active version here: {e}"),
            ),
        }
        Ok(Reply::Done)
    }

    fn op_list(&self) -> Result<Reply, String> {
        let active = self.running();
        let versions = self
            .registry
            .summaries()
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|r| VersionSummary {
                active: Some(&r.id()) == active,
                id: r.id(),
                loaded_at_ms: r.loaded_at_ms,
                bytes: r.bytes,
                author: r.author,
            })
            .collect();
        Ok(Reply::Versions(versions))
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
            params: params_line(&self.params),
        }
    }

    fn op_param(&mut self, key: &str, value: &str) -> Result<Reply, String> {
        if value.len() > Limits::MAX_PARAM_VALUE_BYTES || key.len() > Limits::MAX_PARAM_KEY_BYTES {
            return Err(format!(
                "policy parameter too large: names are at most {} bytes and values at most {} \
                 bytes",
                Limits::MAX_PARAM_KEY_BYTES,
                Limits::MAX_PARAM_VALUE_BYTES
            ));
        }
        let (key, scalar) = policy::parse_param(&format!("{key}={value}"))?;
        if !self.params.contains_key(&key) && self.params.len() >= Limits::MAX_PARAMS {
            return Err(format!(
                "too many policy parameters: at most {} (set an existing one to change it)",
                Limits::MAX_PARAMS
            ));
        }
        self.registry
            .set_param(&key, &scalar)
            .map_err(|e| e.to_string())?;
        self.note("info", "param", "", &format!("{key}={scalar}"));
        self.shadows.set_param(&key, &scalar);
        self.params.insert(key, scalar);
        Ok(Reply::Done)
    }

    /// Takes the top off the activation stack and persists the stack; returns what is on top
    /// now, for the log.
    fn pop_stack(&mut self) -> Result<String, String> {
        self.history.pop();
        self.registry
            .set_history(&self.history)
            .map_err(|e| e.to_string())?;
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
        self.registry
            .set_history(&self.history)
            .map_err(|e| e.to_string())?;
        self.note("info", "activated", &id.to_string(), "");
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
                    "warn",
                    "error",
                    &id.to_string(),
                    &format!("fallback version not loadable: {e}"),
                ),
            }
        }
        self.relay_logs();
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
                LogLevel::Error => ("error", "error"),
                LogLevel::Warn => ("warn", "log"),
                LogLevel::Info | LogLevel::Debug => ("info", "log"),
            };
            self.note(level, kind, &record.policy, &record.message);
        }
        if dropped > 0 {
            self.note(
                "warn",
                "log",
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
        match self.registry.save_states(changed.into_iter()) {
            Ok(()) => self.persisted = states,
            Err(e) => stderr_line(&format!("mantle: policy state not persisted: {e}")),
        }
    }

    fn note(&mut self, level: &str, kind: &str, policy: &str, message: &str) {
        self.journal.record(level, kind, policy, message, now_ms());
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

/// `k=v k2=v2`, for POLICY STATUS (and the dashboard, which splits it).
fn params_line(params: &policy::Params) -> String {
    let pairs: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join(" ")
}

fn no_such(name: &str, version: Option<u32>) -> String {
    match version {
        Some(v) => format!("no policy version {name}@{v}"),
        None => format!("no policy named '{name}'"),
    }
}
