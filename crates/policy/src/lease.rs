//! The `lease(log)` hook of a policy file: how long a shared log's client may hold the
//! sequencer (seed 003, Malacology's ZLog: round trip per position, or a lease of T ms or N
//! positions). The server's sequencers call it for each log from the contention they
//! measured (docs/shared-log.md, "Lease policy"); it runs in its own state of the policy
//! sandbox, with the same libraries, memory ceiling, instruction budget and time limit per
//! call as a tick's callbacks.
//!
//! A call gets one table, `log = {name, rate, positions, clients, interval}`, and must return
//! `{mode = "roundtrip"}`, `{mode = "delay", ms = T}` or `{mode = "quota", n = N}`; anything
//! else is an error the host answers with round trips.

use mlua::{ChunkMode, Function, Lua, Table, Value};
use std::sync::{Arc, Mutex};

use crate::budget::{Budget, Interrupt};
use crate::env::{TickEnv, TickInput};
use crate::error::{line_of, root_message, LoadError, PolicyId};
use crate::host::HostShared;
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::program::{describe, install_host_functions};
use crate::series::NoSeries;
use crate::series_object::SeriesSlot;
use crate::value::Params;

pub use crate::program::LEASE_HOOK;

/// Most positions one quota lease may hand a client (also the most a delay lease reserves at
/// once): a client that dies holding them leaves at most this many holes for readers to fill.
pub const MAX_LEASE_POSITIONS: u64 = 65_536;

/// Longest delay lease, in milliseconds.
pub const MAX_LEASE_MS: u64 = 10_000;

/// What a lease policy decided for one log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// One position per request: every client asks the sequencer each time.
    RoundTrip,
    /// A client keeps the range it was given for `ms` milliseconds.
    Delay { ms: u64 },
    /// A client is given `n` positions at once and uses them all before it asks again.
    Quota { n: u64 },
}

impl std::fmt::Display for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lease::RoundTrip => f.write_str("roundtrip"),
            Lease::Delay { ms } => write!(f, "delay {ms} ms"),
            Lease::Quota { n } => write!(f, "quota {n}"),
        }
    }
}

/// The contention one log's sequencer saw over the last interval: what `lease(log)` reads.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Contention<'a> {
    pub name: &'a [u8],
    /// Sequencer requests (`ZLOG.NEXT`, `ZLOG.LEASE`) per second.
    pub rate: f64,
    /// Positions handed out per second.
    pub positions: f64,
    /// Distinct connections that asked (an estimate past a few dozen).
    pub clients: f64,
    /// Seconds the figures cover.
    pub interval: f64,
}

/// A policy file's `lease` hook, compiled in its own sandboxed state.
pub struct LeaseHook {
    lua: Lua,
    budget: Arc<Budget>,
    limits: Limits,
    hook: Function,
    _host: Arc<Mutex<HostShared>>,
    // Declared last: the Lua state holds its address and must be dropped first.
    _slot: Box<SeriesSlot>,
}

// The server's sequencers evaluate it on a thread of their own.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<LeaseHook>();
};

impl LeaseHook {
    /// Runs `source`'s top level in a fresh sandbox (with `params` set) and keeps its
    /// `lease` function; `Ok(None)` when it defines none.
    pub fn compile(
        name: &str,
        chunk_name: &str,
        source: &str,
        params: &Params,
        limits: &Limits,
        interrupt: Interrupt,
    ) -> Result<Option<LeaseHook>, LoadError> {
        let setup = |e: mlua::Error| LoadError::Run {
            message: format!("{chunk_name}: cannot set up the policy sandbox: {e}"),
            line: None,
        };
        crate::source_scan::check_compile_cost(chunk_name, source.as_bytes()).map_err(
            |message| LoadError::Compile {
                message,
                line: None,
            },
        )?;
        let (lua, budget) = crate::sandbox::new_state(limits, interrupt).map_err(setup)?;
        let host = Arc::new(Mutex::new(HostShared::default()));
        let slot = SeriesSlot::new();
        install_host_functions(&lua, &PolicyId::new(name, 1), &host, &slot, &budget)
            .map_err(setup)?;
        let chunk = lua
            .load(source)
            .set_name(chunk_name)
            .set_mode(ChunkMode::Text)
            .into_function()
            .map_err(|e| {
                let message = root_message(&e);
                LoadError::Compile {
                    line: line_of(&message),
                    message,
                }
            })?;
        let metrics = [Metrics::default()];
        let input = TickInput {
            now: 0.0,
            tick: 0,
            whoami: 0,
            servers: &metrics,
            params,
            timeseries: &NoSeries,
        };
        {
            let _series = slot.publish(input.timeseries);
            TickEnv::default().set(&lua, &input).map_err(setup)?;
            budget.refill();
            let run = chunk.call::<Value>(());
            let failed = run.as_ref().err().map(|e| describe(e, &budget, limits));
            budget.refill();
            run.map_err(|_| {
                let message = failed.unwrap_or_default();
                LoadError::Run {
                    line: line_of(&message),
                    message: format!("{chunk_name}: {message}"),
                }
            })?;
        }
        let hook = match lua.globals().raw_get::<Value>(LEASE_HOOK) {
            Ok(Value::Function(f)) => f,
            _ => return Ok(None),
        };
        Ok(Some(LeaseHook {
            lua,
            budget,
            limits: *limits,
            hook,
            _host: host,
            _slot: slot,
        }))
    }

    /// Asks the policy for `log`'s lease. An error names the hook and says what was wrong
    /// (a Lua error, a spent budget or time limit, or a bad return value).
    pub fn decide(&self, log: &Contention<'_>) -> Result<Lease, String> {
        self.budget.refill();
        let argument = self
            .contention_table(log)
            .map_err(|e| format!("lease(): {}", root_message(&e)))?;
        let returned = self.hook.call::<Value>(argument);
        let outcome = match returned {
            Ok(value) => lease_of(&value),
            Err(e) => Err(describe(&e, &self.budget, &self.limits)),
        };
        self.budget.refill();
        outcome.map_err(|message| format!("lease(): {message}"))
    }

    fn contention_table(&self, log: &Contention<'_>) -> mlua::Result<Table> {
        let t = self.lua.create_table_with_capacity(0, 5)?;
        t.raw_set("name", self.lua.create_string(log.name)?)?;
        t.raw_set("rate", log.rate)?;
        t.raw_set("positions", log.positions)?;
        t.raw_set("clients", log.clients)?;
        t.raw_set("interval", log.interval)?;
        Ok(t)
    }
}

/// Reads what `lease()` returned.
fn lease_of(value: &Value) -> Result<Lease, String> {
    let Value::Table(t) = value else {
        return Err(format!(
            "must return a table {{mode = \"roundtrip\" | \"delay\" | \"quota\", ...}}, got {}",
            value.type_name()
        ));
    };
    let mode = match t.raw_get::<Value>("mode") {
        Ok(Value::String(s)) => s.to_string_lossy(),
        Ok(other) => {
            return Err(format!(
                "mode must be \"roundtrip\", \"delay\" or \"quota\", got {}",
                other.type_name()
            ))
        }
        Err(e) => return Err(root_message(&e)),
    };
    match mode.as_str() {
        "roundtrip" => Ok(Lease::RoundTrip),
        "delay" => whole(t, "ms", MAX_LEASE_MS).map(|ms| Lease::Delay { ms }),
        "quota" => whole(t, "n", MAX_LEASE_POSITIONS).map(|n| Lease::Quota { n }),
        other => Err(format!(
            "mode must be \"roundtrip\", \"delay\" or \"quota\", got \"{other}\""
        )),
    }
}

/// Field `name` of `t` as a whole number in `1..=max`.
fn whole(t: &Table, name: &str, max: u64) -> Result<u64, String> {
    let n = match t.raw_get::<Value>(name) {
        Ok(Value::Integer(i)) => i as f64,
        Ok(Value::Number(n)) => n,
        Ok(other) => {
            return Err(format!(
                "{name} must be a number, got {}",
                other.type_name()
            ))
        }
        Err(e) => return Err(root_message(&e)),
    };
    if !(n >= 1.0 && n <= max as f64) || n.fract() != 0.0 {
        return Err(format!(
            "{name} must be a whole number from 1 to {max}, got {n}"
        ));
    }
    Ok(n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn hook(source: &str) -> LeaseHook {
        LeaseHook::compile(
            "t",
            "@t.lua",
            source,
            &Params::new(),
            &Limits::default(),
            Interrupt::default(),
        )
        .unwrap()
        .expect("defines lease")
    }

    fn quiet() -> Contention<'static> {
        Contention {
            name: b"orders",
            rate: 100.0,
            positions: 100.0,
            clients: 1.0,
            interval: 0.1,
        }
    }

    #[test]
    fn reads_each_mode_from_the_contention_it_is_given() {
        let h = hook(
            r#"function lease(log)
                 if log.name ~= "orders" then return {mode = "roundtrip"} end
                 if log.clients > 2 then return {mode = "roundtrip"} end
                 if log.rate > 50 then return {mode = "quota", n = 100} end
                 return {mode = "delay", ms = 10}
               end"#,
        );
        assert_eq!(h.decide(&quiet()), Ok(Lease::Quota { n: 100 }));
        let slow = Contention {
            rate: 10.0,
            ..quiet()
        };
        assert_eq!(h.decide(&slow), Ok(Lease::Delay { ms: 10 }));
        let crowded = Contention {
            clients: 8.0,
            ..quiet()
        };
        assert_eq!(h.decide(&crowded), Ok(Lease::RoundTrip));
        let other = Contention {
            name: b"x",
            ..quiet()
        };
        assert_eq!(h.decide(&other), Ok(Lease::RoundTrip));
    }

    #[test]
    fn a_file_without_the_hook_has_none() {
        let none = LeaseHook::compile(
            "t",
            "@t.lua",
            "function when() return false end",
            &Params::new(),
            &Limits::default(),
            Interrupt::default(),
        )
        .unwrap();
        assert!(none.is_none());
    }

    #[test]
    fn bad_returns_are_errors_that_say_what_was_wrong() {
        let cases = [
            ("return 5", "must return a table"),
            ("return {}", "mode must be"),
            ("return {mode = \"forever\"}", "got \"forever\""),
            ("return {mode = \"quota\"}", "n must be a number, got nil"),
            (
                "return {mode = \"quota\", n = 0}",
                "n must be a whole number from 1 to 65536",
            ),
            ("return {mode = \"quota\", n = 1e9}", "from 1 to 65536"),
            (
                "return {mode = \"delay\", ms = 2.5}",
                "ms must be a whole number",
            ),
            (
                "return {mode = \"delay\", ms = 0/0}",
                "ms must be a whole number",
            ),
            ("error(\"boom\")", "boom"),
        ];
        for (body, expected) in cases {
            let h = hook(&format!("function lease(log) {body} end"));
            let err = h.decide(&quiet()).unwrap_err();
            assert!(err.starts_with("lease(): "), "{body}: {err}");
            assert!(err.contains(expected), "{body}: {err}");
        }
    }

    #[test]
    fn a_loop_is_stopped_by_the_budget() {
        let limits = Limits {
            instructions: 1_000_000,
            time_limit: Duration::from_secs(5),
            ..Limits::default()
        };
        let h = LeaseHook::compile(
            "t",
            "@t.lua",
            "function lease(log) while true do end end",
            &Params::new(),
            &limits,
            Interrupt::default(),
        )
        .unwrap()
        .unwrap();
        let err = h.decide(&quiet()).unwrap_err();
        assert!(err.contains("instruction budget"), "{err}");
        // The state is usable again for the next call.
        assert!(h.decide(&quiet()).is_err());
    }

    #[test]
    fn params_are_read_at_load_and_in_the_hook() {
        let mut params = Params::new();
        params.insert("n".into(), crate::value::Scalar::Number(7.0));
        let h = LeaseHook::compile(
            "t",
            "@t.lua",
            "function lease(log) return {mode = \"quota\", n = params.n} end",
            &params,
            &Limits::default(),
            Interrupt::default(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.decide(&quiet()), Ok(Lease::Quota { n: 7 }));
    }
}
