//! The control thread: every `POLICY` command arrives here first, and this thread never runs
//! Lua. What needs no Lua state is answered here at once from the registry, the journal and
//! the status the engine thread last published (`STATUS`, `LOG`, `LIST`, `SHOW`, `PARAM`), so
//! a policy that wedges its engine thread (work below the sandbox's instruction hook, which
//! no limit interrupts) cannot hold them up. The rest goes to the engine thread (`runner`).
//!
//! This thread also supervises the engine thread: it records a tick running past
//! [`WEDGE_AFTER`] as wedged (so a server that dies meanwhile does not run that version
//! again), refuses requests that would queue behind a wedged engine, and gives up on a wedged
//! engine thread when `POLICY ROLLBACK` asks for it (or its work outlives every callback's
//! time limit): the thread is interrupted and left to finish on its own, writing nothing more
//! (see `watchdog`), and a new one is opened from the registry, which takes the wedged
//! version off the activation stack. A panicked engine thread is rebuilt the same way.

use super::journal::{Journal, Level, LogKind};
use super::link::{Board, EngineMessage, Exit, Link, Replier};
use super::registry::{self, Registry};
use super::reply::{Reply, Status, VersionSummary};
use super::runner::{self, Settings};
use super::space::Space;
use super::watchdog::{JobWatch, WEDGE_AFTER};
use super::{stderr_line, Gauges, Message, Op, MAX_RESTARTS, STOP_TIMEOUT};
use crate::db::{now_ms, Db};
use policy::{Interrupt, Limits};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the control thread looks at the engine thread between commands.
const POLL: Duration = Duration::from_millis(100);

struct Engine {
    link: Link,
    exit: mpsc::Receiver<Exit>,
    thread: Option<JoinHandle<()>>,
}

pub struct Control {
    db: Db,
    space: Space,
    settings: Settings,
    gauges: Arc<Gauges>,
    registry: Registry,
    journal: Arc<Journal>,
    board: Arc<Board>,
    to_engine: mpsc::Sender<EngineMessage>,
    inbox: Arc<Mutex<mpsc::Receiver<EngineMessage>>>,
    pending_rollbacks: Arc<AtomicUsize>,
    engine: Option<Engine>,
    /// Engine threads rebuilt so far (panics and abandonments); past [`MAX_RESTARTS`] the
    /// engine stays stopped.
    restarts: u32,
    /// Work running longer than this is abandoned without being asked.
    abandon_after: Duration,
}

/// Work running longer than every callback of a tick could (three callbacks, each stopped at
/// the time limit, and the wedge threshold) went below the sandbox: it is abandoned.
pub fn abandon_after(limits: &Limits) -> Duration {
    limits
        .time_limit
        .saturating_mul(3)
        .saturating_add(WEDGE_AFTER)
}

impl Control {
    /// Opens the journal and starts the first engine thread; the error is why it could not
    /// start (then nothing runs).
    pub fn start(
        db: Db,
        space: Space,
        settings: Settings,
        gauges: Arc<Gauges>,
    ) -> Result<Control, String> {
        let journal = Arc::new(
            Journal::open(space.clone(), settings.echo)
                .map_err(|e| e.to_string())?
                .with_shared(settings.shared.clone()),
        );
        let (to_engine, inbox) = mpsc::channel();
        let mut control = Control {
            registry: Registry::new(space.clone())
                .with_shared(settings.shared.clone())
                .with_keep(settings.keep_versions),
            abandon_after: abandon_after(&settings.limits),
            db,
            space,
            settings,
            gauges,
            journal,
            board: Arc::new(Board::default()),
            to_engine,
            inbox: Arc::new(Mutex::new(inbox)),
            pending_rollbacks: Arc::new(AtomicUsize::new(0)),
            engine: None,
            restarts: 0,
        };
        let (opened_tx, opened_rx) = mpsc::channel();
        control.engine = Some(control.spawn(Some(opened_tx))?);
        match opened_rx.recv() {
            Ok(Ok(())) => Ok(control),
            Ok(Err(e)) => {
                control.join_engine();
                Err(e)
            }
            Err(_) => Err("the policy thread stopped while starting".into()),
        }
    }

    fn spawn(
        &mut self,
        opened: Option<mpsc::Sender<Result<(), String>>>,
    ) -> Result<Engine, String> {
        let link = Link {
            watch: Arc::new(JobWatch::default()),
            interrupt: Interrupt::default(),
            in_flight: Arc::new(Mutex::new(None)),
            board: self.board.clone(),
            journal: self.journal.clone(),
            inbox: self.inbox.clone(),
            pending_rollbacks: self.pending_rollbacks.clone(),
        };
        let (exit_tx, exit) = mpsc::channel();
        let (db, space, settings, gauges) = (
            self.db.clone(),
            self.space.clone(),
            self.settings.clone(),
            self.gauges.clone(),
        );
        let thread_link = link.clone();
        let thread = std::thread::Builder::new()
            .name("mantle-policy".into())
            .spawn(move || {
                let ended = runner::run_engine(db, space, settings, gauges, thread_link, opened);
                let _ = exit_tx.send(ended);
            })
            .map_err(|e| format!("cannot start the policy thread: {e}"))?;
        // A later engine thread must not load the file over what the registry now says.
        self.settings.policy_file = None;
        Ok(Engine {
            link,
            exit,
            thread: Some(thread),
        })
    }

    /// Serves commands until told to stop.
    pub fn run(&mut self, inbox: &mpsc::Receiver<Message>) {
        loop {
            match inbox.recv_timeout(POLL) {
                Ok(Message::Request(op, reply)) => self.request(op, reply),
                Ok(Message::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.stop();
                    return;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            self.supervise();
        }
    }

    fn request(&mut self, op: Op, reply: Replier) {
        let answer = match op {
            Op::Status => Ok(Reply::Status(Box::new(self.status()))),
            Op::Log { count } => self
                .journal
                .tail(count.min(runner::MAX_LOG_REPLY))
                .map(Reply::Log)
                .map_err(|e| e.to_string()),
            Op::List => self.list(),
            Op::Show { name, version } => match self.registry.version(&name, version) {
                Ok(Some(record)) => Ok(Reply::Source(record.source)),
                Ok(None) => Err(super::activation::no_such(&name, version)),
                Err(e) => Err(e.to_string()),
            },
            Op::Param { key, value } => self.param(&key, &value),
            Op::Rollback => return self.rollback(reply),
            op => return self.forward(op, reply),
        };
        let _ = reply.send(answer);
    }

    fn status(&self) -> Status {
        let mut status = self.board.status();
        if let Some((job, ran)) = self.engine.as_ref().and_then(|e| e.link.watch.running()) {
            status.busy_ms = ran.as_millis() as u64;
            status.busy_with = job.what;
        }
        status
    }

    fn list(&self) -> Result<Reply, String> {
        let active = self.board.status().active;
        let versions = self
            .registry
            .summaries()
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|r| VersionSummary {
                active: r.id().to_string() == active,
                id: r.id(),
                loaded_at_ms: r.loaded_at_ms,
                bytes: r.bytes,
                author: r.author,
            })
            .collect();
        Ok(Reply::Versions(versions))
    }

    /// `POLICY PARAM`: stored and logged here; the engine thread adopts the value before its
    /// next tick (or, wedged, its replacement reads it from the registry).
    fn param(&mut self, key: &str, value: &str) -> Result<Reply, String> {
        if value.len() > Limits::MAX_PARAM_VALUE_BYTES || key.len() > Limits::MAX_PARAM_KEY_BYTES {
            return Err(format!(
                "policy parameter too large: names are at most {} bytes and values at most {} \
                 bytes",
                Limits::MAX_PARAM_KEY_BYTES,
                Limits::MAX_PARAM_VALUE_BYTES
            ));
        }
        let (key, scalar) = policy::parse_param(&format!("{key}={value}"))?;
        let params = self.registry.params().map_err(|e| e.to_string())?;
        if !params.contains_key(&key) && params.len() >= Limits::MAX_PARAMS {
            return Err(format!(
                "too many policy parameters: at most {} (set an existing one to change it)",
                Limits::MAX_PARAMS
            ));
        }
        self.registry
            .set_param(&key, &scalar)
            .map_err(|e| e.to_string())?;
        self.journal.record(
            Level::Info,
            LogKind::Param,
            "",
            &format!("{key}={scalar}"),
            now_ms(),
        );
        self.board.set_param(&key, &scalar);
        let _ = self.to_engine.send(EngineMessage::Param(key, scalar));
        Ok(Reply::Done)
    }

    /// `POLICY ROLLBACK` rolls back the version the caller saw on top of the stack: a wedged
    /// engine is abandoned first (its replacement takes the wedged version off the stack), and
    /// a rollback that then finds another version on top does not roll back a second one.
    fn rollback(&mut self, reply: Replier) {
        let seen = {
            let status = self.board.status();
            let top = if status.suspended.is_empty() {
                status.active
            } else {
                status.suspended
            };
            (!top.is_empty()).then_some(top)
        };
        if self.wedged() {
            self.abandon("POLICY ROLLBACK");
        }
        self.pending_rollbacks.fetch_add(1, Ordering::SeqCst);
        self.send(EngineMessage::Rollback { seen, reply });
    }

    fn forward(&mut self, op: Op, reply: Replier) {
        // Requests from clients would wait for the wedged work to end, which may be never;
        // `Sync` (the cluster's registry changed) must not be lost, so it waits.
        if op != Op::Sync {
            if let Some((job, ran)) = self.engine.as_ref().and_then(|e| e.link.watch.wedged()) {
                let _ = reply.send(Err(format!(
                    "the policy engine is wedged: {} has run for {} ms; POLICY ROLLBACK \
                     abandons it (POLICY STATUS, LOG, LIST, SHOW and PARAM still answer)",
                    job.what,
                    ran.as_millis()
                )));
                return;
            }
        }
        self.send(EngineMessage::Request(op, reply));
    }

    fn send(&mut self, message: EngineMessage) {
        if self.engine.is_none() {
            if let EngineMessage::Request(_, reply) | EngineMessage::Rollback { reply, .. } =
                message
            {
                let _ = reply.send(Err("the policy engine is stopped".into()));
            }
            return;
        }
        let _ = self.to_engine.send(message);
    }

    fn wedged(&self) -> bool {
        self.engine
            .as_ref()
            .is_some_and(|e| e.link.watch.wedged().is_some())
    }

    /// Looks after the engine thread: rebuilds it after a panic, records a wedged tick, and
    /// abandons wedged work a rollback waits behind or that ran past every time limit.
    fn supervise(&mut self) {
        let Some(engine) = &self.engine else {
            return;
        };
        match engine.exit.try_recv() {
            Ok(Exit::Panicked(in_tick)) => return self.after_panic(in_tick),
            Ok(Exit::Finished | Exit::OpenFailed) | Err(mpsc::TryRecvError::Disconnected) => {
                self.join_engine();
                return;
            }
            Err(mpsc::TryRecvError::Empty) => {}
        }
        if let Some((job, ran)) = engine.link.watch.mark_wedged() {
            let outcome = match &job.tick_of {
                Some(version) => match self.registry.set_wedged(Some(version)) {
                    Ok(()) => "recorded as wedged: it will not be reactivated if the server \
                               stops before the tick ends"
                        .to_string(),
                    Err(e) => format!("recording it as wedged failed: {e}"),
                },
                None => "requests that need the engine are refused until it ends".to_string(),
            };
            stderr_line(&format!(
                "mantle: policy {}: {} has run for {} ms; {outcome}",
                job.tick_of
                    .as_ref()
                    .map_or("engine".to_string(), |v| v.to_string()),
                if job.tick_of.is_some() {
                    "a tick"
                } else {
                    job.what.as_str()
                },
                ran.as_millis()
            ));
        }
        let running = engine.link.watch.running();
        if let Some((_, ran)) = running {
            if ran >= self.abandon_after {
                self.abandon("it ran past every callback's time limit");
            } else if ran >= WEDGE_AFTER && self.pending_rollbacks.load(Ordering::SeqCst) > 0 {
                self.abandon("a POLICY ROLLBACK waits behind it");
            }
        }
    }

    /// Gives up on the engine thread's running work and opens a new engine thread; nothing
    /// if the work ended meanwhile.
    fn abandon(&mut self, why: &str) {
        let Some(engine) = self.engine.take() else {
            return;
        };
        let Some((job, ran)) = engine.link.watch.abandon() else {
            self.engine = Some(engine);
            return;
        };
        // Stops it at once if the hook still sees it; else it ends when the C call returns.
        engine.link.interrupt.interrupt();
        let message = format!(
            "{} ran for {} ms without returning; the engine was replaced ({why}) and the \
             abandoned thread exits when the call returns",
            job.what,
            ran.as_millis()
        );
        let taken = engine
            .link
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(reply) = taken {
            let _ = reply.send(Err(format!("policy engine: {message}")));
        }
        let policy = job
            .tick_of
            .as_ref()
            .map_or(String::new(), |v| v.to_string());
        if let Some(version) = &job.tick_of {
            // The new engine thread takes it off the stack, as after a crash.
            if let Err(e) = self.registry.set_wedged(Some(version)) {
                stderr_line(&format!(
                    "mantle: policy {version}: recording it as wedged failed: {e}"
                ));
            }
        }
        self.journal.record(
            Level::Error,
            LogKind::Abandoned,
            &policy,
            &message,
            now_ms(),
        );
        drop(engine.thread); // detached: it may never return
        self.restart();
    }

    fn after_panic(&mut self, in_tick: Option<registry::VersionRef>) {
        self.join_engine();
        stderr_line(&format!(
            "mantle: the policy engine panicked{}; {}",
            in_tick
                .as_ref()
                .map(|v| format!(" in a tick of {v}"))
                .unwrap_or_default(),
            if self.restarts >= MAX_RESTARTS {
                "it stays stopped (too many restarts)"
            } else {
                "rebuilding it from the registry"
            }
        ));
        if let Some(version) = in_tick {
            // Quarantined by the next open, like a version wedged when the server died.
            let _ = self.registry.set_wedged(Some(&version));
        }
        self.restart();
    }

    fn restart(&mut self) {
        self.restarts += 1;
        if self.restarts > MAX_RESTARTS {
            stderr_line("mantle: the policy engine stays stopped (too many restarts)");
            self.answer_queued("the policy engine is stopped");
            return;
        }
        match self.spawn(None) {
            Ok(engine) => self.engine = Some(engine),
            Err(e) => {
                stderr_line(&format!("mantle: the policy engine cannot restart: {e}"));
                self.answer_queued("the policy engine is stopped");
            }
        }
    }

    /// Answers whatever waits in the engine's inbox when no engine will take it.
    fn answer_queued(&self, why: &str) {
        let inbox = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
        while let Ok(message) = inbox.try_recv() {
            if let EngineMessage::Request(_, reply) | EngineMessage::Rollback { reply, .. } =
                message
            {
                let _ = reply.send(Err(why.to_string()));
            }
        }
    }

    fn join_engine(&mut self) {
        if let Some(mut engine) = self.engine.take() {
            if let Some(thread) = engine.thread.take() {
                let _ = thread.join();
            }
        }
        self.answer_queued("the policy engine is stopped");
    }

    /// Interrupts the engine's work and waits for the thread (it saves the states); past
    /// [`STOP_TIMEOUT`] it is left behind.
    fn stop(&mut self) {
        let Some(mut engine) = self.engine.take() else {
            return;
        };
        engine.link.interrupt.interrupt();
        let _ = self.to_engine.send(EngineMessage::Stop);
        match engine.exit.recv_timeout(STOP_TIMEOUT) {
            Ok(_) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                if let Some(thread) = engine.thread.take() {
                    let _ = thread.join();
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => stderr_line(&format!(
                "mantle: the policy thread did not stop within {} s; exiting without it",
                STOP_TIMEOUT.as_secs()
            )),
        }
    }
}
