//! The activation stack: the registry's record of which versions ran, in order (last =
//! active), and the engine kept in step with it. The engine holds the stack's top two: the top
//! running and the entry below it in the engine's own fallback slot, so a version that keeps
//! failing falls back inside the engine, on the tick that failed, to where the stack says. The
//! stack then follows the engine (pops its top) and refills the engine's fallback slot with
//! the next entry down; the running version is not reloaded.
//!
//! Nothing here writes the registry or the log: the runner persists the stack and logs what
//! the returned values say, each through its watch (see `watchdog`).

use super::registry::{Registry, VersionRef};
use policy::{Fallback, PolicyEngine, PolicyId};

/// Where the engine reads a version's source.
pub trait Sources {
    fn source(&self, id: &VersionRef) -> Result<String, String>;
}

impl Sources for Registry {
    fn source(&self, id: &VersionRef) -> Result<String, String> {
        self.version(&id.name, Some(id.version))
            .map_err(|e| e.to_string())?
            .map(|record| record.source)
            .ok_or_else(|| no_such(&id.name, Some(id.version)))
    }
}

/// The error for a version (or, without one, a name) the registry does not have.
pub fn no_such(name: &str, version: Option<u32>) -> String {
    match version {
        Some(v) => format!("no policy version {name}@{v}"),
        None => format!("no policy named '{name}'"),
    }
}

/// What loading into the engine did, for the runner to act on.
#[derive(Debug, Default, PartialEq)]
pub struct Loaded {
    /// The running version's source reads the access series (`timeseries`): requests must
    /// record it.
    pub reads_series: bool,
    /// The version below the top could not be loaded as the fallback, and why.
    pub fallback_error: Option<(VersionRef, String)>,
}

#[derive(Debug, Default)]
pub struct Activation {
    stack: Vec<VersionRef>,
    /// The top is not running (`--no-policy`) until an operator activates or rolls back.
    suspended: bool,
    /// When the running version was last swapped in (µs since the Unix epoch): what the
    /// propagation bench reads from every node.
    activated_at_us: u64,
}

impl Activation {
    /// The stack as the registry recorded it; nothing is loaded yet.
    pub fn new(stack: Vec<VersionRef>) -> Activation {
        Activation {
            stack,
            ..Activation::default()
        }
    }

    pub fn stack(&self) -> &[VersionRef] {
        &self.stack
    }

    pub fn top(&self) -> Option<&VersionRef> {
        self.stack.last()
    }

    /// The entry below the top: where a fallback or a rollback lands.
    pub fn below_top(&self) -> Option<&VersionRef> {
        self.stack.len().checked_sub(2).map(|i| &self.stack[i])
    }

    /// The top, `no management` when the stack is empty.
    pub fn top_name(&self) -> String {
        self.top()
            .map_or("no management".to_string(), ToString::to_string)
    }

    /// The version running now: the top unless suspended.
    pub fn running(&self) -> Option<&VersionRef> {
        if self.suspended {
            return None;
        }
        self.top()
    }

    pub fn is_suspended(&self) -> bool {
        self.suspended
    }

    /// `--no-policy`: the top stays on the stack, not running.
    pub fn suspend(&mut self) {
        self.suspended = true;
    }

    pub fn activated_at_us(&self) -> u64 {
        self.activated_at_us
    }

    /// Makes the engine run the top, with the entry below it in the engine's fallback slot.
    /// When the top cannot be loaded the error says why, and the engine runs the entry below
    /// (if that loaded): what was running before a failed activation keeps running.
    pub fn load(
        &mut self,
        engine: &mut PolicyEngine,
        sources: &dyn Sources,
    ) -> (Loaded, Result<(), String>) {
        engine.unload();
        engine.unload(); // the engine's fallback slot is now empty too
        let mut loaded = Loaded::default();
        let mut result = Ok(());
        if let Some(below) = self.below_top().cloned() {
            // Loaded first, so loading the top moves it into the engine's fallback slot.
            if let Err(e) = load_version(engine, sources, &below) {
                loaded.fallback_error = Some((below, e));
            }
        }
        if let Some(top) = self.top().cloned() {
            match load_version(engine, sources, &top) {
                Ok(reads) => loaded.reads_series = reads,
                Err(e) => result = Err(e),
            }
        }
        if result.is_ok() {
            self.stamp();
        }
        (loaded, result)
    }

    /// Pushes `id` and makes it run. When it cannot be loaded it is taken off again, what ran
    /// before is reloaded, and the error says why.
    pub fn push(
        &mut self,
        id: VersionRef,
        engine: &mut PolicyEngine,
        sources: &dyn Sources,
    ) -> (Loaded, Result<(), String>) {
        self.suspended = false;
        self.stack.push(id);
        let (loaded, result) = self.load(engine, sources);
        match result {
            Ok(()) => (loaded, Ok(())),
            Err(e) => {
                self.stack.pop();
                let (loaded, _) = self.load(engine, sources);
                (loaded, Err(e))
            }
        }
    }

    /// Takes the top off (a rollback, a quarantine) and resumes; returns the new top's name.
    /// The caller reloads the engine ([`Activation::load`]) and persists the stack.
    pub fn pop(&mut self) -> String {
        self.suspended = false;
        self.stack.pop();
        self.top_name()
    }

    /// Adopts another stack (a cluster's registry changed); whether its top differs.
    pub fn adopt(&mut self, stack: Vec<VersionRef>) -> bool {
        let top_changed = stack.last() != self.stack.last();
        self.stack = stack;
        self.suspended = false;
        top_changed
    }

    /// Resumes a suspended top.
    pub fn resume(&mut self) {
        self.suspended = false;
    }

    /// After the engine fell back on a failing tick: the engine already runs what was below
    /// the failed version, so the stack drops its top and the engine's fallback slot gets the
    /// next entry down. The running version is not reloaded.
    pub fn follow_fallback(
        &mut self,
        fallback: &Fallback,
        engine: &mut PolicyEngine,
        sources: &dyn Sources,
    ) -> Loaded {
        let popped = self.stack.pop();
        debug_assert_eq!(
            popped.map(|v| v.to_string()),
            Some(fallback.from.to_string())
        );
        debug_assert_eq!(
            engine.active().map(ToString::to_string),
            self.top().map(ToString::to_string),
            "the engine's fallback slot held the entry below the top"
        );
        self.stamp();
        let mut loaded = Loaded::default();
        if let Some(top) = self.top() {
            // A registry that cannot say keeps the series recorded: memory, never a wrong
            // `timeseries()`.
            loaded.reads_series = sources.source(top).map_or(true, |s| reads_series(&s));
        }
        if let Some(below) = self.below_top().cloned() {
            let set = sources.source(&below).and_then(|source| {
                engine
                    .set_fallback(engine_id(&below), &chunk(&below), &source)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            });
            if let Err(e) = set {
                loaded.fallback_error = Some((below, e));
            }
        }
        loaded
    }

    fn stamp(&mut self) {
        self.activated_at_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
    }
}

/// The engine runs each version under the id the registry gave it, so every message names
/// the registry version.
fn engine_id(id: &VersionRef) -> PolicyId {
    PolicyId::new(&id.name, id.version)
}

/// The Lua chunk name: messages read `name@N:line: ...`.
fn chunk(id: &VersionRef) -> String {
    format!("={id}")
}

/// Requests record the access series only for a running policy that reads it, as in replay.
fn reads_series(source: &str) -> bool {
    source.contains("timeseries")
}

/// Loads a version into the engine (as the running one; the one it replaces moves to the
/// fallback slot); returns whether its source reads the access series.
fn load_version(
    engine: &mut PolicyEngine,
    sources: &dyn Sources,
    id: &VersionRef,
) -> Result<bool, String> {
    let source = sources.source(id)?;
    engine
        .load_version(engine_id(id), &chunk(id), &source)
        .map_err(|e| e.to_string())?;
    Ok(reads_series(&source))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cache::AccessLog;
    use policy::{Action, Limits, Metrics, Params, TickInput, TickOutcome};
    use std::collections::BTreeMap;

    /// Sources by version, as a registry would give them.
    #[derive(Default)]
    struct Book(BTreeMap<String, String>);

    impl Book {
        fn with(mut self, id: &VersionRef, source: &str) -> Book {
            self.0.insert(id.to_string(), source.to_string());
            self
        }
    }

    impl Sources for Book {
        fn source(&self, id: &VersionRef) -> Result<String, String> {
            self.0
                .get(&id.to_string())
                .cloned()
                .ok_or_else(|| format!("no policy version {id}"))
        }
    }

    fn v(name: &str, version: u32) -> VersionRef {
        VersionRef {
            name: name.into(),
            version,
        }
    }

    fn tick(engine: &mut PolicyEngine) -> TickOutcome {
        let servers = [Metrics::default()];
        engine.tick(&TickInput {
            now: 0.0,
            tick: 1,
            whoami: 0,
            servers: &servers,
            params: &Params::new(),
            timeseries: &AccessLog::new(1),
        })
    }

    const EVICT_ONE: &str = "function howmuch() return 1 end";
    const EVICT_TWO: &str = "function howmuch() return 2 end -- reads timeseries";
    const FAILING: &str = "function when() error('always') end";

    fn engine() -> PolicyEngine {
        PolicyEngine::new(Limits::default())
    }

    #[test]
    fn the_engine_runs_the_top_with_the_entry_below_as_its_fallback() {
        let book = Book::default()
            .with(&v("a", 1), EVICT_ONE)
            .with(&v("b", 1), EVICT_TWO);
        let mut e = engine();
        let mut stack = Activation::new(vec![v("a", 1), v("b", 1)]);
        let (loaded, result) = stack.load(&mut e, &book);
        result.unwrap();
        assert_eq!(
            loaded,
            Loaded {
                reads_series: true,
                fallback_error: None
            }
        );
        assert_eq!(e.active().unwrap().to_string(), "b@1");
        assert_eq!(e.previous().unwrap().to_string(), "a@1");
        assert_eq!(stack.below_top(), Some(&v("a", 1)));
        assert!(stack.activated_at_us() > 0);
    }

    #[test]
    fn a_failing_tick_falls_back_in_the_engine_and_the_stack_follows() {
        let book = Book::default()
            .with(&v("a", 1), EVICT_ONE)
            .with(&v("a", 2), EVICT_TWO)
            .with(&v("a", 3), FAILING);
        let mut e = engine();
        let mut stack = Activation::new(vec![v("a", 1), v("a", 2), v("a", 3)]);
        stack.load(&mut e, &book).1.unwrap();
        let fallback = (0..Limits::default().max_consecutive_failures)
            .find_map(|_| tick(&mut e).fallback)
            .expect("the engine falls back after its consecutive failures");
        assert_eq!(fallback.from.to_string(), "a@3");
        let loaded = stack.follow_fallback(&fallback, &mut e, &book);
        assert_eq!(stack.stack(), [v("a", 1), v("a", 2)]);
        assert_eq!(stack.top_name(), "a@2");
        assert!(loaded.reads_series && loaded.fallback_error.is_none());
        assert_eq!(e.active().unwrap().to_string(), "a@2");
        assert_eq!(
            e.previous().unwrap().to_string(),
            "a@1",
            "the fallback slot was refilled from the stack"
        );
        assert_eq!(tick(&mut e).decision.action, Action::Evict(2));
    }

    #[test]
    fn a_fallback_to_the_bottom_leaves_the_engine_without_a_fallback() {
        let book = Book::default()
            .with(&v("a", 1), EVICT_ONE)
            .with(&v("a", 2), FAILING);
        let mut e = engine();
        let mut stack = Activation::new(vec![v("a", 1), v("a", 2)]);
        stack.load(&mut e, &book).1.unwrap();
        let fallback = (0..Limits::default().max_consecutive_failures)
            .find_map(|_| tick(&mut e).fallback)
            .unwrap();
        let loaded = stack.follow_fallback(&fallback, &mut e, &book);
        assert_eq!(loaded, Loaded::default());
        assert_eq!(stack.stack(), [v("a", 1)]);
        assert!(e.previous().is_none());
        assert_eq!(tick(&mut e).decision.action, Action::Evict(1));
    }

    #[test]
    fn a_version_that_cannot_load_is_not_pushed_and_the_running_one_stays() {
        let book = Book::default().with(&v("a", 1), EVICT_ONE);
        let mut e = engine();
        let mut stack = Activation::new(Vec::new());
        stack.push(v("a", 1), &mut e, &book).1.unwrap();
        let (_, result) = stack.push(v("gone", 1), &mut e, &book);
        assert_eq!(result.unwrap_err(), "no policy version gone@1");
        assert_eq!(stack.stack(), [v("a", 1)]);
        assert_eq!(e.active().unwrap().to_string(), "a@1");
    }

    #[test]
    fn a_rollback_reinstates_the_entry_below_and_resumes() {
        let book = Book::default()
            .with(&v("a", 1), EVICT_ONE)
            .with(&v("a", 2), EVICT_TWO);
        let mut e = engine();
        let mut stack = Activation::new(vec![v("a", 1), v("a", 2)]);
        stack.suspend();
        assert_eq!(stack.running(), None);
        assert_eq!(stack.pop(), "a@1");
        assert!(!stack.is_suspended());
        stack.load(&mut e, &book).1.unwrap();
        assert_eq!(stack.running(), Some(&v("a", 1)));
        assert_eq!(e.active().unwrap().to_string(), "a@1");
        assert!(e.previous().is_none());
        assert_eq!(stack.pop(), "no management");
        stack.load(&mut e, &book).1.unwrap();
        assert!(e.active().is_none());
    }

    #[test]
    fn a_fallback_that_cannot_load_is_reported_and_the_top_still_runs() {
        let book = Book::default().with(&v("a", 2), EVICT_TWO);
        let mut e = engine();
        let mut stack = Activation::new(vec![v("a", 1), v("a", 2)]);
        let (loaded, result) = stack.load(&mut e, &book);
        result.unwrap();
        let (id, error) = loaded.fallback_error.unwrap();
        assert_eq!((id, error.as_str()), (v("a", 1), "no policy version a@1"));
        assert_eq!(e.active().unwrap().to_string(), "a@2");
    }
}
