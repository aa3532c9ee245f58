//! Runs a Lua policy (`crates/policy`) as the replay's controller: turns the replay's tick
//! metrics and access log into the policy environment, and the policy's decision into cache
//! actions. Policy log lines go to stderr, prefixed with the policy version.

use adapt::control::{Action, Controller, ControllerSummary, TickContext, TickDecision};
use policy::{Limits, LoadError, Params, PolicyEngine, TickInput};
use std::path::Path;

/// Writes a line to stderr, ignoring failures: a closed pipe (the reader of the log went
/// away) must not end the replay with a panic.
fn stderr_line(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The per-request hooks a policy file defines (see [`policy::hook_source`]).
pub fn hook_source(
    path: &Path,
    params: Params,
    limits: Limits,
) -> Result<Option<crate::HookSource>, LoadError> {
    policy::hook_source(path, params, limits)
}

pub struct PolicyController {
    engine: PolicyEngine,
    /// The version loaded from the file (the engine may later fall back from it).
    loaded: policy::PolicyId,
    params: Params,
    uses_timeseries: bool,
    warned_where: bool,
    fallback: Option<String>,
    /// Print policy log lines (and engine messages) on stderr.
    echo_logs: bool,
}

impl PolicyController {
    /// Loads the policy in `path`; the error says why it was rejected.
    pub fn from_file(
        path: &Path,
        params: Params,
        limits: Limits,
        echo_logs: bool,
    ) -> Result<PolicyController, LoadError> {
        let mut engine = PolicyEngine::new(limits);
        let loaded = engine.load_file(path)?;
        // Recording the access log costs time on every request; skip it for policies that
        // never ask for it.
        let uses_timeseries = policy::read_policy_source(path)
            .map(|s| s.contains("timeseries"))
            .unwrap_or(true);
        Ok(PolicyController {
            engine,
            loaded,
            params,
            uses_timeseries,
            warned_where: false,
            fallback: None,
            echo_logs,
        })
    }

    fn print_logs(&mut self) {
        let (records, dropped) = self.engine.drain_logs();
        if !self.echo_logs {
            return;
        }
        for r in records {
            stderr_line(&format!(
                "policy {} [{:?}]: {}",
                r.policy, r.level, r.message
            ));
        }
        if dropped > 0 {
            stderr_line(&format!(
                "policy: {dropped} log lines dropped (at most {} a tick)",
                policy::Limits::MAX_LOG_LINES_PER_TICK
            ));
        }
    }
}

impl Controller for PolicyController {
    fn needs_access_log(&self) -> bool {
        self.uses_timeseries
    }

    fn tick(&mut self, ctx: &TickContext<'_>) -> TickDecision {
        let servers = [ctx.metrics.clone()];
        let outcome = self.engine.tick(&TickInput {
            now: ctx.now,
            tick: ctx.tick,
            whoami: 0,
            servers: &servers,
            params: &self.params,
            timeseries: ctx.access_log,
        });
        if let Some(fallback) = &outcome.fallback {
            self.fallback = Some(
                fallback
                    .to
                    .as_ref()
                    .map_or("no management".to_string(), |id| id.to_string()),
            );
        }
        if !outcome.decision.targets.is_empty() && !self.warned_where && self.echo_logs {
            self.warned_where = true;
            stderr_line(
                "policy: where() asked to move load to other servers; ignored in single-node replay",
            );
        }
        self.print_logs();
        if let Some(error) = outcome.error {
            return TickDecision {
                action: Action::None,
                error: Some(error.to_string()),
            };
        }
        TickDecision {
            action: outcome.decision.action,
            error: None,
        }
    }

    fn summary(&self) -> ControllerSummary {
        let stats = self.engine.stats();
        ControllerSummary {
            name: self.loaded.name.clone(),
            version: Some(self.loaded.version as u64),
            ticks: stats.ticks,
            actions: stats.actions,
            errors: stats.errors,
            fallback: self.fallback.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cache::AccessLog;

    /// The policies that once held `mantle replay` forever now fail their ticks, and the
    /// replay goes on (falling back to no management).
    #[test]
    fn hostile_policies_do_not_hold_the_replay() {
        let dir = std::env::temp_dir().join(format!("mantle-hostile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let limits = Limits {
            instructions: 2_000_000,
            time_limit: std::time::Duration::from_secs(5),
            ..Limits::default()
        };
        for (i, body) in [
            "xpcall(function() while true do end end, function() while true do end end)",
            "local s = string.rep('a', 50000) s:find('.-.-.-.-.-.-b')",
            "while true do string.rep('', math.maxinteger) end",
            "setmetatable({}, {__gc = function() while true do end end}) collectgarbage()",
        ]
        .iter()
        .enumerate()
        {
            let path = dir.join(format!("hostile{i}.lua"));
            std::fs::write(&path, format!("function when()\n{body}\nend\n")).unwrap();
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut c =
                    PolicyController::from_file(&path, Params::new(), limits, false).unwrap();
                let log = AccessLog::new(10);
                let metrics = adapt::control::TickMetrics::default();
                let mut errors = 0;
                for tick in 1..=4 {
                    let d = c.tick(&TickContext {
                        now: tick as f64,
                        tick,
                        metrics: &metrics,
                        access_log: &log,
                    });
                    errors += usize::from(d.error.is_some());
                }
                let _ = done_tx.send((errors, c.summary().fallback));
            });
            let (errors, fallback) = done_rx
                .recv_timeout(std::time::Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("replay ticks never ended: {body}"));
            assert_eq!(errors, 3, "{body}");
            assert_eq!(fallback.as_deref(), Some("no management"), "{body}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
