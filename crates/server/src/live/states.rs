//! The policies' persistent states (`WRstate`/`RDstate`, keyed by policy name) across
//! restarts: read from the registry into the engine when the engine thread opens, and written
//! back after every tick (and at stop) when they changed, in one batch. What was last written
//! is remembered, so a tick that changed nothing writes nothing.

use super::registry::Registry;
use policy::{PolicyEngine, StateValue};
use std::collections::BTreeMap;

/// The states as last written to (or read from) the registry.
pub struct SavedStates {
    saved: BTreeMap<String, StateValue>,
}

/// The engine's states at one moment and which of them differ from the saved ones.
pub struct Changes {
    now: BTreeMap<String, StateValue>,
    changed: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty()
    }

    /// The changed states, for [`Registry::save_states`].
    pub fn iter(&self) -> impl Iterator<Item = (&String, &StateValue)> {
        self.changed
            .iter()
            .filter_map(|name| self.now.get_key_value(name))
    }
}

impl SavedStates {
    /// Reads the registry's states into `engine`: each policy's next tick sees what it saved
    /// before the restart.
    pub fn restore(registry: &Registry, engine: &mut PolicyEngine) -> Result<SavedStates, String> {
        let saved = registry.states().map_err(|e| e.to_string())?;
        for (name, value) in &saved {
            engine.set_state(name, value.clone());
        }
        Ok(SavedStates { saved })
    }

    /// The engine's states that differ from what was saved.
    pub fn changes(&self, engine: &PolicyEngine) -> Changes {
        let now = engine.states();
        let changed = now
            .iter()
            .filter(|(name, value)| self.saved.get(*name) != Some(*value))
            .map(|(name, _)| name.clone())
            .collect();
        Changes { now, changed }
    }

    /// `changes` reached the registry.
    pub fn written(&mut self, changes: Changes) {
        self.saved = changes.now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::space::Space;
    use cache::AccessLog;
    use policy::{Limits, Metrics, Params, Scalar, TickInput};

    const COUNTER: &str = "function howmuch() WRstate((RDstate() or 0) + 1) return 0 end";

    fn tick(engine: &mut PolicyEngine) {
        let servers = [Metrics::default()];
        let out = engine.tick(&TickInput {
            now: 0.0,
            tick: 1,
            whoami: 0,
            servers: &servers,
            params: &Params::new(),
            timeseries: &AccessLog::new(1),
        });
        assert!(out.error.is_none(), "{:?}", out.error);
    }

    /// Saves what changed, as the runner does after a tick; how many states were written.
    fn save(states: &mut SavedStates, engine: &PolicyEngine, registry: &Registry) -> usize {
        let changes = states.changes(engine);
        let n = changes.iter().count();
        if !changes.is_empty() {
            registry.save_states(changes.iter()).unwrap();
            states.written(changes);
        }
        n
    }

    fn number(n: f64) -> Option<StateValue> {
        Some(StateValue::Scalar(Scalar::Number(n)))
    }

    #[test]
    fn a_state_saved_before_a_restart_is_what_the_policy_reads_after_it() {
        let space = Space::memory();
        let registry = Registry::new(space.clone());
        let mut engine = PolicyEngine::new(Limits::default());
        let mut states = SavedStates::restore(&registry, &mut engine).unwrap();
        engine.load("counter", COUNTER).unwrap();
        tick(&mut engine);
        tick(&mut engine);
        assert_eq!(save(&mut states, &engine, &registry), 1);

        // The restart: a new registry over the same store, a new engine.
        let registry = Registry::new(space);
        let mut engine = PolicyEngine::new(Limits::default());
        let mut states = SavedStates::restore(&registry, &mut engine).unwrap();
        assert_eq!(engine.state("counter"), number(2.0));
        engine.load("counter", COUNTER).unwrap();
        tick(&mut engine);
        assert_eq!(engine.state("counter"), number(3.0), "counting on from 2");
        assert_eq!(save(&mut states, &engine, &registry), 1);
    }

    #[test]
    fn only_states_that_changed_are_written() {
        let registry = Registry::new(Space::memory());
        let mut engine = PolicyEngine::new(Limits::default());
        let mut states = SavedStates::restore(&registry, &mut engine).unwrap();
        assert!(states.changes(&engine).is_empty());
        engine.load("counter", COUNTER).unwrap();
        engine.set_state("other", StateValue::Scalar(Scalar::Number(7.0)));
        tick(&mut engine);
        assert_eq!(save(&mut states, &engine, &registry), 2);
        assert_eq!(save(&mut states, &engine, &registry), 0, "nothing changed");
        tick(&mut engine);
        let changes = states.changes(&engine);
        let names: Vec<&String> = changes.iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["counter"]);
    }
}
