//! The engine's thread: ticks on the wall clock (or, with `--tick manual`, once per
//! `POLICY TICK`), feeds the policy the server's access series, applies decisions to the cache,
//! answers `POLICY` commands, keeps the registry's activation stack and the engine in step, rolls back
//! a version that keeps failing, and writes everything that happens to the journal.
//!
//! The registry numbers versions durably (`name@N` forever); the engine numbers the loads it
//! sees since the process started. `ids` maps the engine's numbering to the registry's so
//! every message an operator reads names the registry version.

use super::journal::Journal;
use super::registry::{self, Registry, VersionRecord, VersionRef};
use super::sample::Sampler;
use super::space::Space;
use super::watchdog::TickWatch;
use super::{stderr_line, Gauges, Message, Op, MAX_RESTARTS};
use crate::db::{now_ms, Db};
use crate::frame::Frame;
use crate::stats::Stats;
use cache::AccessLog;
use policy::{Action, Interrupt, Limits, LogLevel, Params, PolicyEngine, StateValue, TickInput};
use std::collections::{BTreeMap, HashMap, VecDeque};
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
    /// (name, engine version) → registry version.
    ids: HashMap<(String, u32), u32>,
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
}

impl Runner {
    pub fn open(
        db: Db,
        space: Space,
        settings: Settings,
        gauges: Arc<Gauges>,
    ) -> Result<Runner, String> {
        let registry = Registry::new(space.clone()).with_shared(settings.shared.clone());
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
        let log = AccessLog::new(db.series().limit());
        let mut runner = Runner {
            db,
            engine,
            registry,
            journal,
            sampler: Sampler::default(),
            params,
            history,
            ids: HashMap::new(),
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
        };
        if !runner.registry.is_durable() {
            stderr_line(
                "mantle: policies are kept in memory only (no local store in front of an upstream)",
            );
        }
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

    /// A version recorded as wedged in a tick when the server stopped (see `watchdog`) is taken
    /// off the activation stack, so a restart does not run it into the same wedge; it stays in
    /// the registry for `POLICY USE`.
    fn quarantine_wedged(&mut self) -> Result<(), String> {
        let Some(wedged) = self.registry.wedged().map_err(|e| e.to_string())? else {
            return Ok(());
        };
        if self.history.last() == Some(&wedged) {
            self.history.pop();
            self.registry
                .set_history(&self.history)
                .map_err(|e| e.to_string())?;
            let to = self
                .history
                .last()
                .map_or("no management".to_string(), |t| t.to_string());
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
        let source = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read policy: {e}", path.display()))?;
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
            let received = if self.settings.manual {
                inbox
                    .recv()
                    .map_err(|_| mpsc::RecvTimeoutError::Disconnected)
            } else {
                inbox.recv_timeout(next_tick.saturating_duration_since(Instant::now()))
            };
            match received {
                Ok(Message::Request(op, reply)) => {
                    let frame = self.handle(op);
                    let _ = reply.send(frame);
                }
                Ok(Message::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // The interrupt stopped the last callback; saving the states runs Lua.
                    self.settings.interrupt.clear();
                    self.persist_states();
                    return;
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
        let Some(running) = self.history.last().cloned() else {
            return (String::new(), None);
        };
        if self.engine.active().is_none() || self.suspended {
            return (String::new(), None);
        }
        let own = [metrics];
        let shared = self.settings.shared.clone();
        let cluster = shared.as_ref().and_then(|s| s.cluster_env(&own[0], now));
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
            .map(|id| self.registry_id(id))
            .unwrap_or_default();
        let error = outcome
            .error
            .as_ref()
            .map(|e| self.translate(&e.to_string()));
        if let Some(error) = &error {
            self.last_error = error.clone();
        }
        let applied = match outcome.decision.action {
            Action::None => String::new(),
            Action::Evict(n) => format!("evict:{n}"),
            Action::SetCapacity(n) => format!("capacity:{n}"),
        };
        self.last_decision = match outcome.decision.action {
            Action::None => "none".to_string(),
            Action::Evict(n) => {
                let evicted = self.db.evict(n);
                format!("evict {n} (evicted {evicted})")
            }
            Action::SetCapacity(n) => {
                let before = self.db.cache_snapshot().capacity.objects;
                if before != Some(n) {
                    let evicted = self.db.set_object_capacity(Some(n));
                    let message = format!(
                        "capacity {} -> {n} objects (evicted {evicted})",
                        before.map_or("unlimited".to_string(), |b| b.to_string())
                    );
                    self.note("info", "capacity", &policy, &message);
                }
                format!("capacity {n}")
            }
        };
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
            let from = self.registry_id(&fallback.from);
            if let Some(top) = self.history.pop() {
                debug_assert_eq!(top.to_string(), from);
            }
            let to = self
                .history
                .last()
                .map_or("no management".to_string(), |t| t.to_string());
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

    /// `POLICY TICK [now]` (manual ticks only): sets the clock, runs one tick, and replies
    /// with what it did and the cache's figures after it.
    fn op_tick(&mut self, now: Option<f64>) -> Result<Frame, String> {
        if !self.settings.manual {
            return Err("POLICY TICK needs a server started with --tick manual".into());
        }
        if let Some(now) = now {
            self.db.series().clock.set(now)?;
        }
        let (action, error) = self.run_tick();
        let snapshot = self.db.cache_snapshot();
        let stats = self.db.stats();
        let int = |n: u64| Frame::Integer(n as i64);
        let optional = |n: Option<u64>| n.map_or(Frame::Null, int);
        let pairs = vec![
            ("tick", int(self.tick)),
            (
                "now",
                Frame::bulk_str(&self.db.series().clock.now().to_string()),
            ),
            ("action", Frame::bulk_str(&action)),
            ("error", error.map_or(Frame::Null, |e| Frame::bulk_str(&e))),
            ("cache_objects", int(snapshot.objects)),
            ("cache_bytes", int(snapshot.bytes)),
            ("capacity_objects", optional(snapshot.capacity.objects)),
            ("capacity_bytes", optional(snapshot.capacity.bytes)),
            ("hits", int(Stats::read(&stats.cache_hits))),
            ("misses", int(Stats::read(&stats.cache_misses))),
            ("evictions", int(snapshot.evictions)),
            ("store_reads", int(Stats::read(&stats.store_reads))),
            ("store_writes", int(Stats::read(&stats.store_writes))),
            ("series_events", int(self.log.len() as u64)),
            ("series_keys", int(self.log.distinct_keys())),
        ];
        Ok(Frame::Map(
            pairs
                .into_iter()
                .map(|(k, v)| (Frame::static_bulk(k), v))
                .collect(),
        ))
    }

    fn handle(&mut self, op: Op) -> Frame {
        let result = match op {
            Op::Load {
                name,
                source,
                author,
            } => self.op_load(&name, &source, &author),
            Op::Use { name, version } => self.op_use(&name, version),
            Op::List => self.op_list(),
            Op::Show { name, version } => match self.registry.version(&name, version) {
                Ok(Some(record)) => Ok(Frame::bulk_str(&record.source)),
                Ok(None) => Err(no_such(&name, version)),
                Err(e) => Err(e.to_string()),
            },
            Op::Rollback => self.op_rollback(),
            Op::Tick { now } => self.op_tick(now),
            Op::Status => Ok(self.op_status()),
            Op::Param { key, value } => self.op_param(&key, &value),
            Op::Log { count } => self
                .journal
                .tail(count.min(MAX_LOG_REPLY))
                .map(|events| {
                    Frame::Array(events.iter().map(|e| Frame::bulk_str(&e.line())).collect())
                })
                .map_err(|e| e.to_string()),
            Op::Sync => self.op_sync(),
        };
        self.update_gauges();
        result.unwrap_or_else(Frame::err)
    }

    fn op_load(&mut self, name: &str, source: &str, author: &str) -> Result<Frame, String> {
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
        Ok(Frame::Integer(i64::from(record.version)))
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
            .latest(name)
            .map_err(|e| e.to_string())?
            .map_or(1, |r| r.version + 1);
        let label = format!("{name}@{next}");
        let mut scratch =
            PolicyEngine::with_interrupt(self.settings.limits, self.settings.interrupt.clone());
        if let Err(e) = scratch.load_named_chunk(name, &format!("={label}"), source) {
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

    fn op_use(&mut self, name: &str, version: Option<u32>) -> Result<Frame, String> {
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
        Ok(Frame::Integer(i64::from(record.version)))
    }

    fn op_rollback(&mut self) -> Result<Frame, String> {
        self.suspended = false;
        let Some(from) = self.history.pop() else {
            return Err("no policy is active; nothing to roll back".into());
        };
        self.registry
            .set_history(&self.history)
            .map_err(|e| e.to_string())?;
        let to = self
            .history
            .last()
            .map_or("no management".to_string(), |t| t.to_string());
        self.note(
            "info",
            "rolled_back",
            &from.to_string(),
            &format!("by POLICY ROLLBACK; reinstated {to}"),
        );
        self.activate()?;
        Ok(Frame::bulk_str(&to))
    }

    /// Adopts the shared registry's activation stack and parameters after another node
    /// changed them: every node of a cluster runs the same version.
    fn op_sync(&mut self) -> Result<Frame, String> {
        let (history, params) = self.registry.snapshot().map_err(|e| e.to_string())?;
        if params != self.params {
            self.params = params;
        }
        if history == self.history {
            return Ok(Frame::ok());
        }
        let top_changed = history.last() != self.history.last();
        self.history = history;
        self.suspended = false;
        let top = self
            .history
            .last()
            .map_or("no management".to_string(), |t| t.to_string());
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
        Ok(Frame::ok())
    }

    fn op_list(&self) -> Result<Frame, String> {
        let active = self.running();
        let lines = self
            .registry
            .list()
            .map_err(|e| e.to_string())?
            .iter()
            .map(|r| {
                let mark = if Some(&r.id()) == active {
                    " active"
                } else {
                    ""
                };
                Frame::bulk_str(&format!(
                    "{} loaded_at_ms={} author={:?} bytes={}{mark}",
                    r.id(),
                    r.loaded_at_ms,
                    r.author,
                    r.source.len()
                ))
            })
            .collect();
        Ok(Frame::Array(lines))
    }

    fn op_status(&self) -> Frame {
        let stats = self.engine.stats();
        let text = |s: &str| Frame::bulk_str(s);
        let int = |n: u64| Frame::Integer(n as i64);
        let active = self.running().map_or(String::new(), |r| r.to_string());
        let suspended = match (self.suspended, self.history.last()) {
            (true, Some(top)) => top.to_string(),
            _ => String::new(),
        };
        let previous = self
            .history
            .len()
            .checked_sub(2)
            .map_or(String::new(), |i| self.history[i].to_string());
        let pairs = vec![
            ("active", text(&active)),
            ("previous", text(&previous)),
            ("tick_ms", int(self.settings.tick.as_millis() as u64)),
            ("ticks", int(stats.ticks)),
            ("actions", int(stats.actions)),
            ("errors", int(stats.errors)),
            ("fallbacks", int(stats.fallbacks)),
            ("last_decision", text(&self.last_decision)),
            ("last_error", text(&self.last_error)),
            ("durable", int(u64::from(self.registry.is_durable()))),
            ("suspended", text(&suspended)),
            ("activated_at_us", int(self.activated_at_us)),
            ("params", text(&params_line(&self.params))),
        ];
        Frame::Map(
            pairs
                .into_iter()
                .map(|(k, v)| (Frame::static_bulk(k), v))
                .collect(),
        )
    }

    fn op_param(&mut self, key: &str, value: &str) -> Result<Frame, String> {
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
        self.params.insert(key, scalar);
        Ok(Frame::ok())
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
        let current: Vec<policy::PolicyId> = [self.engine.active(), self.engine.previous()]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        self.ids
            .retain(|(name, v), _| current.iter().any(|c| &c.name == name && c.version == *v));
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
        let engine_id = self
            .engine
            .load_named_chunk(&id.name, &format!("={id}"), &record.source)
            .map_err(|e| e.to_string())?;
        self.ids
            .insert((engine_id.name, engine_id.version), id.version);
        Ok(record.source.contains("timeseries"))
    }

    fn registry_id(&self, id: &policy::PolicyId) -> String {
        match self.ids.get(&(id.name.clone(), id.version)) {
            Some(v) => format!("{}@{v}", id.name),
            None => id.to_string(),
        }
    }

    /// Rewrites the engine's `name@E` in a message to the registry's `name@N`.
    fn translate(&self, text: &str) -> String {
        let pairs: Vec<(String, String)> = self
            .ids
            .iter()
            .filter(|((_, engine), registry)| engine != *registry)
            .map(|((name, engine), registry)| {
                (format!("{name}@{engine}"), format!("{name}@{registry}"))
            })
            .collect();
        replace_ids(text, &pairs)
    }

    fn relay_logs(&mut self) {
        let (records, dropped) = self.engine.drain_logs();
        for record in records {
            let policy = self.translate(&record.policy);
            let message = self.translate(&record.message);
            let (level, kind) = match record.level {
                LogLevel::Error => ("error", "error"),
                LogLevel::Warn => ("warn", "log"),
                LogLevel::Info | LogLevel::Debug => ("info", "log"),
            };
            self.note(level, kind, &policy, &message);
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

/// Replaces whole occurrences of engine ids with registry ids, in one pass (a replacement
/// is never replaced again). Lua's own `chunk:line:` prefixes already carry the registry's id
/// (the chunk is named after it) and are left alone.
fn replace_ids(text: &str, pairs: &[(String, String)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    'scan: while i < text.len() {
        for (from, to) in pairs {
            if !text[i..].starts_with(from.as_str()) {
                continue;
            }
            let end = i + from.len();
            let after = &text.as_bytes()[end..];
            let lua_line =
                after.first() == Some(&b':') && after.get(1).is_some_and(u8::is_ascii_digit);
            let glued_after = after.first().is_some_and(u8::is_ascii_digit);
            let glued_before = text[..i]
                .ends_with(|c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !lua_line && !glued_after && !glued_before {
                out.push_str(to);
                i = end;
                continue 'scan;
            }
        }
        let c = text[i..].chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_replaced_whole() {
        let pairs = [("p@1".to_string(), "p@7".to_string())];
        assert_eq!(
            replace_ids("policy p@1: x p@12 xp@1", &pairs),
            "policy p@7: x p@12 xp@1"
        );
        assert_eq!(
            replace_ids("policy p@1: p@1:2: oops; back to p@1", &pairs),
            "policy p@7: p@1:2: oops; back to p@7"
        );
        let chain = [
            ("p@3".to_string(), "p@2".to_string()),
            ("p@2".to_string(), "p@1".to_string()),
        ];
        assert_eq!(replace_ids("p@3 then p@2", &chain), "p@2 then p@1");
    }
}
