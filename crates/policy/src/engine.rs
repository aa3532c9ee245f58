//! The policy engine a host drives: loads and hot-swaps policy versions atomically, runs a
//! tick, contains failures (count, log once, fall back after repeated failures) and keeps the
//! `WRstate` state of every policy name across reloads.
//!
//! The engine does not number versions: the host that keeps them (the server's registry, or
//! replay, whose one file is version 1) names each version it loads, and every log line,
//! error and fallback the engine reports carries that id.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::budget::Interrupt;
use crate::decision::Decision;
use crate::env::TickInput;
use crate::error::{ErrorKind, LoadError, PolicyError, PolicyId};
use crate::host::{HostShared, LogLevel, LogRecord, SequencerLoad, SlotLoad};
use crate::limits::Limits;
use crate::program::Program;
use crate::value::StateValue;

/// Counters a host reports (replay's JSON `policy` object).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineStats {
    /// Ticks run with a policy active.
    pub ticks: u64,
    /// Ticks whose decision asked something of the host.
    pub actions: u64,
    /// Ticks that failed.
    pub errors: u64,
    /// Times the engine retired a failing version.
    pub fallbacks: u64,
    /// Loads and replacements rejected.
    pub rejected_loads: u64,
}

/// A version change made by the engine itself after repeated failures.
#[derive(Debug, Clone, PartialEq)]
pub struct Fallback {
    /// The retired version.
    pub from: PolicyId,
    /// The version now running, `None` for no management.
    pub to: Option<PolicyId>,
}

/// The result of one tick.
#[derive(Debug, Clone, PartialEq)]
pub struct TickOutcome {
    /// The version that ran, `None` when no policy is active. Shared with the engine, so a
    /// tick does not copy the name.
    pub policy: Option<Arc<PolicyId>>,
    /// What to do; no action when the tick failed.
    pub decision: Decision,
    pub error: Option<PolicyError>,
    /// Set when this tick's failure made the engine fall back.
    pub fallback: Option<Fallback>,
}

/// See the module documentation. `Send`, so a server can run it on a task.
pub struct PolicyEngine {
    limits: Limits,
    host: Arc<Mutex<HostShared>>,
    active: Option<Program>,
    previous: Option<Program>,
    consecutive_failures: u32,
    last_logged_error: Option<String>,
    stats: EngineStats,
    /// The active version's state may differ from the host's map (a version became active or
    /// the host set a state): the next tick loads it from the map first.
    state_stale: bool,
    interrupt: Interrupt,
}

impl PolicyEngine {
    pub fn new(limits: Limits) -> PolicyEngine {
        PolicyEngine {
            limits,
            host: Arc::new(Mutex::new(HostShared::default())),
            active: None,
            previous: None,
            consecutive_failures: 0,
            last_logged_error: None,
            stats: EngineStats::default(),
            state_stale: false,
            interrupt: Interrupt::default(),
        }
    }

    /// An engine whose callbacks `interrupt` stops (shared by a host's engines).
    pub fn with_interrupt(limits: Limits, interrupt: Interrupt) -> PolicyEngine {
        PolicyEngine {
            interrupt,
            ..PolicyEngine::new(limits)
        }
    }

    /// A handle another thread can use to stop the running callback (and every later one
    /// until [`Interrupt::clear`]): its tick fails with [`ErrorKind::Interrupted`].
    pub fn interrupt_handle(&self) -> Interrupt {
        self.interrupt.clone()
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Loads the policy in `path` as version 1 of the file stem (`policies/fixed.lua` →
    /// `fixed@1`): a host that loads one file has one version.
    pub fn load_file(&mut self, path: &Path) -> Result<PolicyId, LoadError> {
        let source = crate::read_policy_source(path).map_err(|message| {
            self.stats.rejected_loads += 1;
            LoadError::Io {
                path: path.display().to_string(),
                message,
            }
        })?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "policy".to_string());
        self.load_version(
            PolicyId::new(&name, 1),
            &format!("@{}", path.display()),
            &source,
        )
    }

    /// Loads `source` as version 1 of policy `name` and makes it the active one. On error the
    /// active policy is untouched.
    pub fn load(&mut self, name: &str, source: &str) -> Result<PolicyId, LoadError> {
        self.load_version(PolicyId::new(name, 1), &format!("={name}.lua"), source)
    }

    /// Swaps in the version after the active one (same name). Atomic: on error the running
    /// version stays.
    pub fn replace(&mut self, source: &str) -> Result<PolicyId, LoadError> {
        let Some(active) = self.active() else {
            return Err(LoadError::NothingToReplace);
        };
        let id = PolicyId::new(&active.name, active.version + 1);
        let chunk = format!("={}.lua", id.name);
        self.load_version(id, &chunk, source)
    }

    /// Loads `source` as version `id`, named by the host that keeps versions, and makes it the
    /// active one; `chunk` is the Lua chunk name: `@path` makes messages read
    /// `path:line: ...`, `=text` makes them read `text:line: ...`. On error the active policy
    /// is untouched.
    pub fn load_version(
        &mut self,
        id: PolicyId,
        chunk: &str,
        source: &str,
    ) -> Result<PolicyId, LoadError> {
        // The new version's top level reads the state as the running one left it.
        self.save_active_state();
        self.host().logs.start_tick();
        match Program::compile(
            id.clone(),
            chunk,
            source,
            &self.limits,
            &self.host,
            self.interrupt.clone(),
        ) {
            Ok(program) => {
                self.previous = self.active.take();
                self.active = Some(program);
                self.state_stale = true;
                self.consecutive_failures = 0;
                self.last_logged_error = None;
                Ok(id)
            }
            Err(e) => {
                self.stats.rejected_loads += 1;
                let running = self.active.as_ref().map(|p| p.id().to_string());
                self.host().logs.push(
                    &id.to_string(),
                    LogLevel::Error,
                    format!(
                        "rejected: {e}; {}",
                        running.map_or("no policy is running".to_string(), |r| format!(
                            "{r} keeps running"
                        ))
                    ),
                );
                Err(e)
            }
        }
    }

    /// Compiles `source` as version `id` into the fallback slot, leaving the running version
    /// as it is: what a host that keeps a stack of versions calls after a fallback took the
    /// slot's version into service, so the next fallback lands on the one below it. On error
    /// the slot is left empty (a fallback then stops managing the cache).
    pub fn set_fallback(
        &mut self,
        id: PolicyId,
        chunk: &str,
        source: &str,
    ) -> Result<PolicyId, LoadError> {
        self.save_active_state();
        self.previous = None;
        match Program::compile(
            id.clone(),
            chunk,
            source,
            &self.limits,
            &self.host,
            self.interrupt.clone(),
        ) {
            Ok(program) => {
                self.previous = Some(program);
                Ok(id)
            }
            Err(e) => {
                self.stats.rejected_loads += 1;
                Err(e)
            }
        }
    }

    /// Stops managing the cache (the state is kept).
    pub fn unload(&mut self) {
        self.save_active_state();
        self.previous = self.active.take();
    }

    /// The running version.
    pub fn active(&self) -> Option<&PolicyId> {
        self.active.as_ref().map(Program::id)
    }

    /// The version kept for fallback.
    pub fn previous(&self) -> Option<&PolicyId> {
        self.previous.as_ref().map(Program::id)
    }

    /// Callbacks the running version defines, in call order (`["chunk"]` for a Ceph balancer).
    pub fn callbacks(&self) -> Vec<&'static str> {
        self.active
            .as_ref()
            .map(Program::callbacks)
            .unwrap_or_default()
    }

    /// Whether the running version is a Ceph-dialect balancer chunk.
    pub fn is_ceph_dialect(&self) -> bool {
        self.active.as_ref().is_some_and(Program::is_ceph_dialect)
    }

    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// Runs one decision tick. Never panics on policy misbehaviour: a failing tick decides
    /// nothing and is reported in the outcome.
    pub fn tick(&mut self, input: &TickInput) -> TickOutcome {
        let own_load = input.servers.get(input.whoami).map_or(0.0, |m| m.load);
        let idle = Decision {
            load: own_load,
            ..Decision::default()
        };
        let Some(program) = &self.active else {
            return TickOutcome {
                policy: None,
                decision: idle,
                error: None,
                fallback: None,
            };
        };
        if self.state_stale {
            program.sync_state(&self.host);
            self.state_stale = false;
        }
        let id = Arc::clone(program.shared_id());
        self.stats.ticks += 1;
        self.host().logs.start_tick();
        match program.tick(input) {
            Ok(decision) => {
                self.consecutive_failures = 0;
                if decision.acts() {
                    self.stats.actions += 1;
                }
                TickOutcome {
                    policy: Some(id),
                    decision,
                    error: None,
                    fallback: None,
                }
            }
            Err(error) => {
                self.stats.errors += 1;
                self.log_error_once(&error);
                let fallback = if matches!(error.kind, ErrorKind::Input | ErrorKind::Interrupted) {
                    None
                } else {
                    self.consecutive_failures += 1;
                    (self.consecutive_failures >= self.limits.max_consecutive_failures)
                        .then(|| self.fall_back())
                };
                TickOutcome {
                    policy: Some(id),
                    decision: idle,
                    error: Some(error),
                    fallback,
                }
            }
        }
    }

    /// Logs an error unless it repeats the previous one (a policy failing every tick would
    /// otherwise flood the log); every error is counted regardless.
    fn log_error_once(&mut self, error: &PolicyError) {
        let text = error.to_string();
        if self.last_logged_error.as_deref() == Some(text.as_str()) {
            return;
        }
        let line = error
            .line
            .map(|l| format!(" (line {l})"))
            .unwrap_or_default();
        self.host().logs.push(
            &error.policy.to_string(),
            LogLevel::Error,
            format!("{text}{line}; the tick took no action"),
        );
        self.last_logged_error = Some(text);
    }

    fn fall_back(&mut self) -> Fallback {
        self.stats.fallbacks += 1;
        self.consecutive_failures = 0;
        self.last_logged_error = None;
        self.save_active_state();
        let failed = self.active.take().map(|p| p.id().clone());
        self.active = self.previous.take();
        self.state_stale = true;
        let from = failed.unwrap_or(PolicyId {
            name: String::new(),
            version: 0,
        });
        let to = self.active().cloned();
        let message = format!(
            "failed {} consecutive ticks; falling back to {}",
            self.limits.max_consecutive_failures,
            to.as_ref()
                .map_or("no management".to_string(), |t| t.to_string())
        );
        self.host()
            .logs
            .push(&from.to_string(), LogLevel::Warn, message);
        Fallback { from, to }
    }

    /// Sets what `slots()` returns from the next tick on (this node's hottest slots, see
    /// [`SlotLoad::hottest`]); hosts outside a cluster never call it and `slots()` is empty.
    pub fn set_slots(&mut self, slots: Vec<SlotLoad>) {
        self.host().slots = slots;
    }

    /// Sets what `sequencers()` returns from the next tick on (the shared logs' sequencers
    /// this node runs, see [`SequencerLoad::busiest`]); empty outside a cluster.
    pub fn set_sequencers(&mut self, sequencers: Vec<SequencerLoad>) {
        self.host().sequencers = sequencers;
    }

    /// Takes the log lines written since the last call, and how many were dropped because
    /// the buffer was full.
    pub fn drain_logs(&mut self) -> (Vec<LogRecord>, u64) {
        self.host().logs.drain()
    }

    /// The `WRstate` value of policy `name`.
    pub fn state(&self, name: &str) -> Option<StateValue> {
        self.save_active_state();
        self.host().states.get(name).cloned()
    }

    /// Sets (e.g. restores from durable storage) the state of policy `name`; the next
    /// `RDstate` sees it.
    pub fn set_state(&mut self, name: &str, value: StateValue) {
        self.save_active_state();
        self.host().states.insert(name.to_string(), value);
        self.state_stale = true;
    }

    /// Every policy's state, for persisting.
    pub fn states(&self) -> BTreeMap<String, StateValue> {
        self.save_active_state();
        self.host()
            .states
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Moves a state the active version keeps in Lua (see `program::STATE_CELL`) to the
    /// host's map, which is then the whole truth.
    fn save_active_state(&self) {
        if let Some(program) = &self.active {
            program.push_state(&self.host);
        }
    }

    fn host(&self) -> MutexGuard<'_, HostShared> {
        // The lock is only taken for short, panic-free sections; recover from poisoning
        // rather than propagate a panic into the host.
        self.host.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}

    #[test]
    fn the_engine_can_move_to_another_thread() {
        assert_send::<PolicyEngine>();
    }

    use crate::metrics::Metrics;
    use crate::series::NoSeries;
    use crate::value::{Params, Scalar};

    fn run(e: &mut PolicyEngine, tick: u64) -> TickOutcome {
        let servers = [Metrics::default()];
        let out = e.tick(&TickInput {
            now: tick as f64,
            tick,
            whoami: 0,
            servers: &servers,
            params: &Params::new(),
            timeseries: &NoSeries,
        });
        assert!(out.error.is_none(), "tick {tick}: {:?}", out.error);
        out
    }

    fn number(n: f64) -> Option<StateValue> {
        Some(StateValue::Scalar(Scalar::Number(n)))
    }

    #[test]
    fn a_state_kept_in_lua_is_what_the_host_reads_and_sets() {
        let src = "function howmuch() local s = RDstate() WRstate(s + 1) return 0 end";
        let mut e = PolicyEngine::new(Limits::default());
        e.load("p", src).unwrap();
        run(&mut e, 1);
        run(&mut e, 2);
        assert_eq!(e.state("p"), number(2.0));
        assert_eq!(e.states().get("p").cloned(), number(2.0));
        e.set_state("p", StateValue::Scalar(Scalar::Number(40.0)));
        run(&mut e, 3);
        assert_eq!(e.state("p"), number(41.0), "RDstate saw the host's value");
        e.load("p", src).unwrap();
        run(&mut e, 4);
        assert_eq!(e.state("p"), number(42.0), "a reload keeps the state");
        e.unload();
        assert_eq!(e.state("p"), number(42.0));
    }

    #[test]
    fn numbers_in_state_read_back_as_through_the_host() {
        let src = r#"
function when()
  WRstate(2.0) assert(math.type(RDstate()) == "integer" and RDstate() == 2)
  WRstate(2.5) assert(RDstate() == 2.5)
  WRstate(1 << 60) assert(math.type(RDstate()) == "float")
  WRstate(true) assert(RDstate() == true)
  WRstate({a = 1}) assert(RDstate().a == 1)
  assert(not pcall(WRstate, {{}}), "nested tables are refused")
  assert(RDstate().a == 1, "a refused write keeps the state")
  WRstate(7)
  return false
end
"#;
        let mut e = PolicyEngine::new(Limits::default());
        e.load("q", src).unwrap();
        run(&mut e, 1);
        assert_eq!(e.state("q"), number(7.0));
    }

    #[test]
    fn a_fallback_version_reads_what_the_failing_one_wrote() {
        let mut e = PolicyEngine::new(Limits::default());
        e.load(
            "f",
            "function when() WRstate(RDstate() + 1) return false end",
        )
        .unwrap();
        run(&mut e, 1);
        e.load("f", "function when() WRstate(100) error('boom') end")
            .unwrap();
        let servers = [Metrics::default()];
        for tick in 2..2 + u64::from(e.limits().max_consecutive_failures) {
            e.tick(&TickInput {
                now: tick as f64,
                tick,
                whoami: 0,
                servers: &servers,
                params: &Params::new(),
                timeseries: &NoSeries,
            });
        }
        assert_eq!(e.active().map(|id| id.version), Some(1), "fell back");
        run(&mut e, 10);
        assert_eq!(e.state("f"), number(101.0));
    }
}
