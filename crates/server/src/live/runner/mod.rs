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
//!
//! The jobs it delegates, each in a module with its own tests: the activation stack and the
//! engine kept in step with it (`activation`), the wall-clock cadence (`ticker`), the
//! policies' persistent states (`states`). Here, beside the thread's loop and its job
//! plumbing: one tick (`tick`), the `POLICY` requests (`ops`) and the shadows (`shadow_ops`,
//! over `live::shadows`).

mod ops;
mod shadow_ops;
mod tick;

use super::activation::{Activation, Loaded, Sources};
use super::journal::{Level, LogKind};
use super::link::{EngineMessage, Exit, Link, Replier};
use super::registry::{self, Registry, VersionRef};
use super::reply::Reply;
use super::sample::Sampler;
use super::shadows::ShadowHost;
use super::space::Space;
use super::states::SavedStates;
use super::ticker::Ticker;
use super::watchdog::{Ended, Job};
use super::{stderr_line, Gauges, Op};
use crate::db::{now_ms, Db};
use crate::shadow::DRAIN_INTERVAL;
use cache::AccessLog;
use policy::{Limits, LogLevel, Params, PolicyEngine};
use std::collections::VecDeque;
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
    /// Where the running version is offered to the shared log's lease thread.
    pub lease: Arc<crate::log::lease::LeaseSource>,
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
    /// The activation stack, as in the registry, and what of it the engine runs.
    activation: Activation,
    states: SavedStates,
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
        let states = SavedStates::restore(&registry, &mut engine)?;
        let params = registry.params().map_err(|e| e.to_string())?;
        let activation = Activation::new(registry.history().map_err(|e| e.to_string())?);
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
            activation,
            states,
            settings,
            tick: 0,
            last_decision: "none".into(),
            last_error: String::new(),
            warned_where: false,
            gauges,
            log,
            spare: VecDeque::new(),
            started: Instant::now(),
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
            if let Some(top) = runner.activation.top().cloned() {
                runner.activation.suspend();
                runner.note(
                    Level::Warn,
                    LogKind::Suspended,
                    &top.to_string(),
                    "not reactivated: started with --no-policy; the registry is unchanged \
                     (POLICY USE to run a version, POLICY ROLLBACK to drop this one)",
                );
            }
        } else if let Some(active) = runner.activation.top().cloned() {
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
            match runner.activation.top().cloned() {
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
        if self.activation.top() == Some(&wedged) {
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
        if self.activation.top() != Some(&id) {
            self.push_and_activate(id)?;
        }
        Ok(())
    }

    /// Serves the inbox and ticks until told to stop or abandoned.
    pub fn run(&mut self) {
        let mut ticker = Ticker::new(self.settings.tick, self.settings.manual, Instant::now());
        let inbox = self.link.inbox.clone();
        loop {
            // With shadows, queued accesses are handed to them every DRAIN_INTERVAL too.
            let drain = (!self.shadows.is_idle()).then_some(DRAIN_INTERVAL);
            let received = {
                let inbox = inbox.lock().unwrap_or_else(|e| e.into_inner());
                match ticker.wait(Instant::now(), drain) {
                    None => inbox
                        .recv()
                        .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
                    Some(wait) => inbox.recv_timeout(wait),
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
                Err(mpsc::RecvTimeoutError::Timeout) if !ticker.is_due(Instant::now()) => {
                    self.shadows.drain();
                    Some(())
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let done = self.job(Job::tick(self.running()), |r| {
                        r.run_tick();
                    });
                    ticker.ticked(Instant::now());
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
        let top = self.activation.top().map(ToString::to_string);
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

    /// Takes the top off the activation stack (resuming) and persists the stack; returns
    /// what is on top now, for the log. The caller reloads the engine.
    fn pop_stack(&mut self) -> Result<String, String> {
        let to = self.activation.pop();
        self.write(|r| r.set_history(self.activation.stack()))?;
        Ok(to)
    }

    /// The top of the activation stack, `no management` when it is empty.
    fn top_name(&self) -> String {
        self.activation.top_name()
    }

    /// The version running now: the top of the activation stack unless suspended.
    fn running(&self) -> Option<&VersionRef> {
        self.activation.running()
    }

    fn push_and_activate(&mut self, id: VersionRef) -> Result<(), String> {
        let (loaded, result) = self
            .activation
            .push(id.clone(), &mut self.engine, &self.registry);
        self.adopt(loaded);
        result?;
        if let Err(e) = self.write(|r| r.set_history(self.activation.stack())) {
            // Refused (the version was pruned on another node meanwhile, etcd is away...):
            // keep running what the registry holds, or this node would run a stack no other
            // node has.
            self.activation.pop();
            let _ = self.activate();
            return Err(e);
        }
        self.note(Level::Info, LogKind::Activated, &id.to_string(), "");
        Ok(())
    }

    /// Makes the engine run the top of the activation stack, with the entry below it as the
    /// engine's fallback, so the engine's own fallback lands where the stack says.
    fn activate(&mut self) -> Result<(), String> {
        let (loaded, result) = self.activation.load(&mut self.engine, &self.registry);
        self.adopt(loaded);
        result
    }

    /// Logs what loading the engine did and has requests record the access series only for
    /// a running policy that reads it, as in replay.
    fn adopt(&mut self, loaded: Loaded) {
        if let Some((id, e)) = loaded.fallback_error {
            self.note(
                Level::Warn,
                LogKind::Error,
                &id.to_string(),
                &format!("fallback version not loadable: {e}"),
            );
        }
        self.relay_logs();
        if self.activation.stack().is_empty() {
            self.restore_baseline();
        }
        self.adopt_hooks();
        self.db.series().set_recording(loaded.reads_series);
        if !loaded.reads_series {
            // No running policy reads the series: give its memory back.
            self.log = AccessLog::with_bounded_ids(self.db.series().limit());
        }
    }

    /// Makes the cache follow the running version's per-request hooks: a version with hooks
    /// puts them in charge of admission and victims (unless the same hooks run already), one
    /// without (or no running version) gives the cache back its built-in algorithm. Hooks
    /// that fail to compile leave the cache as it was, with the reason in the journal.
    fn adopt_hooks(&mut self) {
        let running = self.activation.running().cloned();
        let source = running
            .as_ref()
            .and_then(|id| self.registry.source(id).ok().map(|s| (id, s)));
        let hooks = match source {
            Some((id, source)) if policy::mentions_hooks(&source) => {
                let compiled = policy::hook_source_of(
                    &id.name,
                    &format!("={id}"),
                    source,
                    self.params.clone(),
                    self.settings.limits,
                );
                match compiled {
                    Ok(hooks) => hooks.map(|h| (id.to_string(), h)),
                    Err(e) => {
                        let message = format!("per-request hooks not loaded: {e}");
                        return self.note(Level::Error, LogKind::Error, &id.to_string(), &message);
                    }
                }
            }
            _ => None,
        };
        match hooks {
            Some((id, hooks)) => match self.db.set_hooks(hooks) {
                Ok(true) => self.note(
                    Level::Info,
                    LogKind::Activated,
                    &id,
                    "per-request hooks decide admission and victims (the cache starts empty)",
                ),
                Ok(false) => {}
                Err(e) => self.note(
                    Level::Warn,
                    LogKind::Error,
                    &id,
                    &format!("per-request hooks not run: {e}"),
                ),
            },
            None => {
                if self.db.end_hooks() {
                    let message = format!(
                        "no per-request hooks: the cache runs {} again (it starts empty)",
                        self.db.cache_snapshot().algorithm
                    );
                    let id = running.map(|r| r.to_string()).unwrap_or_default();
                    self.note(Level::Info, LogKind::Activated, &id, &message);
                }
            }
        }
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

    /// Writes the states that changed since they were last written.
    fn persist_states(&mut self) {
        let changes = self.states.changes(&self.engine);
        if changes.is_empty() {
            return;
        }
        match self.write(|r| r.save_states(changes.iter())) {
            Ok(()) => self.states.written(changes),
            Err(e) => stderr_line(&format!("mantle: policy state not persisted: {e}")),
        }
    }

    /// A registry write, unless this thread was abandoned (see `watchdog`).
    fn write<T>(
        &self,
        write: impl FnOnce(&Registry) -> Result<T, store::StoreError>,
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
            self.offer_lease();
        }
    }

    /// Offers the running version to the shared log's sequencers, whose lease thread runs
    /// its `lease` hook (a no-op while the running version and parameters are unchanged).
    fn offer_lease(&self) {
        use super::activation::Sources;
        let running = self.running().cloned();
        self.settings.lease.offer(
            running.as_ref().map(ToString::to_string),
            &self.params,
            || match &running {
                Some(id) => self.registry.source(id),
                None => Err("no version runs".into()),
            },
        );
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
