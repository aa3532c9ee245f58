//! One compiled policy version: its sandboxed Lua state, the callbacks it defines, and the
//! bridge that builds the Mantle environment for a tick, calls the callbacks in order and
//! validates what comes back (the whole bridge Ceph's `Mantle.cc` is, and no more).

use std::sync::{Arc, Mutex};

use mlua::{ChunkMode, Function, Lua, Value};

use crate::decision::{self, Action, Decision};
use crate::env::TickEnv;
use crate::error::PolicyId;
use crate::error::{is_memory_error, line_of, root_message, ErrorKind, LoadError, PolicyError};
use crate::host::{HostShared, LogLevel};
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::sandbox::{self, Budget};
use crate::series::{build_series_object, NoSeries, SeriesSlot, TimeSeries};
use crate::value::{Params, StateValue};

/// Everything the host tells a policy at one tick.
pub struct TickInput<'a> {
    /// Seconds: trace time in replay, wall time in serve.
    pub now: f64,
    /// Tick number, from 1.
    pub tick: u64,
    /// Index of this server in `servers`.
    pub whoami: usize,
    /// Metrics of every server, index = server number (0-based).
    pub servers: &'a [Metrics],
    /// `--param` values.
    pub params: &'a Params,
    /// The recent accesses.
    pub timeseries: &'a dyn TimeSeries,
}

/// The callbacks a libmantle-style policy defines, or the chunk of a Ceph balancer.
enum Dialect {
    Callbacks {
        load: Option<Function>,
        when: Option<Function>,
        howmuch: Option<Function>,
        where_: Option<Function>,
    },
    /// Re-run every tick; its returned table is the `where` result.
    Ceph { chunk: Function },
}

pub(crate) struct Program {
    id: PolicyId,
    lua: Lua,
    budget: Arc<Budget>,
    limits: Limits,
    dialect: Dialect,
    env: TickEnv,
    // Declared last: the Lua state holds its address and must be dropped first.
    slot: Box<SeriesSlot>,
}

/// Names of the callbacks, in the order a tick calls them.
pub const CALLBACKS: [&str; 4] = ["load", "when", "howmuch", "where"];

impl Program {
    /// Compiles `source`, runs its top level once and finds its callbacks.
    pub(crate) fn compile(
        id: PolicyId,
        chunk_name: &str,
        source: &str,
        limits: &Limits,
        host: &Arc<Mutex<HostShared>>,
    ) -> Result<Program, LoadError> {
        let setup = |e: mlua::Error| LoadError::Run {
            message: format!("{chunk_name}: cannot set up the policy sandbox: {e}"),
            line: None,
        };
        let (lua, budget) = sandbox::new_state(limits).map_err(setup)?;
        let slot = SeriesSlot::new();
        install_host_functions(&lua, &id, host, &slot).map_err(setup)?;

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

        // Top-level code runs once now, against an empty one-server environment; a Ceph chunk
        // is a probe run whose state writes are undone.
        let state_before = host_state(host, &id.name);
        let probe_metrics = [Metrics::default()];
        let probe = TickInput {
            now: 0.0,
            tick: 0,
            whoami: 0,
            servers: &probe_metrics,
            params: &Params::new(),
            timeseries: &NoSeries,
        };
        let env = TickEnv::default();
        let returned = {
            let _series = slot.publish(probe.timeseries);
            env.set(&lua, &probe).map_err(setup)?;
            budget.refill();
            chunk.call::<Value>(()).map_err(|e| {
                let message = describe(&e, &budget, limits);
                LoadError::Run {
                    line: line_of(&message),
                    message: format!("{chunk_name}: {message}"),
                }
            })?
        };

        let globals = lua.globals();
        let builtin_load = lua
            .named_registry_value::<Value>(sandbox::BUILTIN_LOAD_KEY)
            .map_err(setup)?;
        // Lua's own `load` shares its name with the Mantle callback: only a function the
        // policy defined counts.
        let callback = |name: &str| match globals.raw_get::<Value>(name) {
            Ok(Value::Function(f)) if Value::Function(f.clone()) != builtin_load => Some(f),
            _ => None,
        };
        let (load, when, howmuch, where_) = (
            callback("load"),
            callback("when"),
            callback("howmuch"),
            callback("where"),
        );
        let dialect = if load.is_some() || when.is_some() || howmuch.is_some() || where_.is_some() {
            Dialect::Callbacks {
                load,
                when,
                howmuch,
                where_,
            }
        } else if matches!(returned, Value::Table(_)) {
            restore_state(host, &id.name, state_before);
            Dialect::Ceph { chunk }
        } else {
            return Err(LoadError::NoCallbacks {
                chunk: chunk_name.trim_start_matches(['@', '=']).to_string(),
            });
        };
        Ok(Program {
            id,
            lua,
            budget,
            limits: *limits,
            dialect,
            env,
            slot,
        })
    }

    pub(crate) fn id(&self) -> &PolicyId {
        &self.id
    }

    /// The callbacks this version defines (`chunk` for a Ceph balancer).
    pub(crate) fn callbacks(&self) -> Vec<&'static str> {
        match &self.dialect {
            Dialect::Callbacks {
                load,
                when,
                howmuch,
                where_,
            } => CALLBACKS
                .iter()
                .zip([load, when, howmuch, where_])
                .filter(|(_, f)| f.is_some())
                .map(|(n, _)| *n)
                .collect(),
            Dialect::Ceph { .. } => vec!["chunk"],
        }
    }

    pub(crate) fn is_ceph_dialect(&self) -> bool {
        matches!(self.dialect, Dialect::Ceph { .. })
    }

    /// Runs one tick. On error nothing is decided.
    pub(crate) fn tick(&self, input: &TickInput) -> Result<Decision, PolicyError> {
        let fail = |callback: &str, kind: ErrorKind, message: String| PolicyError {
            policy: self.id.clone(),
            callback: callback.to_string(),
            kind,
            line: line_of(&message),
            message,
        };
        let Some(own) = input.servers.get(input.whoami) else {
            return Err(fail(
                "tick",
                ErrorKind::Input,
                format!(
                    "whoami={} but metrics were given for {} server(s)",
                    input.whoami,
                    input.servers.len()
                ),
            ));
        };
        let _series = self.slot.publish(input.timeseries);
        // The environment may run under the count hook; the last callback may have spent
        // the budget.
        self.budget.refill();
        self.env
            .set(&self.lua, input)
            .map_err(|e| fail("tick", ErrorKind::Runtime, root_message(&e)))?;
        let mut decision = Decision {
            load: own.load,
            ..Decision::default()
        };
        let call = |name: &str, f: &Function| -> Result<Value, PolicyError> {
            self.budget.refill();
            f.call::<Value>(()).map_err(|e| {
                let kind = if self.budget.is_exhausted() {
                    ErrorKind::InstructionBudget
                } else if is_memory_error(&e) {
                    ErrorKind::Memory
                } else {
                    ErrorKind::Runtime
                };
                fail(name, kind, describe(&e, &self.budget, &self.limits))
            })
        };
        let bad = |name: &str, message: String| fail(name, ErrorKind::BadResult, message);

        match &self.dialect {
            Dialect::Callbacks {
                load,
                when,
                howmuch,
                where_,
            } => {
                if let Some(f) = load {
                    let value = call("load", f)?;
                    decision.load = decision::parse_load(&value).map_err(|m| bad("load", m))?;
                    self.env
                        .set_own_load(&self.lua, input.whoami, decision.load)
                        .map_err(|e| fail("load", ErrorKind::Runtime, root_message(&e)))?;
                }
                if let Some(f) = when {
                    let value = call("when", f)?;
                    let act = decision::parse_when(&value).map_err(|m| bad("when", m))?;
                    decision.when = Some(act);
                    if !act {
                        return Ok(decision);
                    }
                }
                if let Some(f) = howmuch {
                    let value = call("howmuch", f)?;
                    decision.action =
                        decision::parse_howmuch(&value).map_err(|m| bad("howmuch", m))?;
                }
                if let Some(f) = where_ {
                    let value = call("where", f)?;
                    decision.targets =
                        decision::parse_targets(&value, input.servers.len(), "where()")
                            .map_err(|m| bad("where", m))?;
                }
            }
            Dialect::Ceph { chunk } => {
                let value = call("chunk", chunk)?;
                decision.targets =
                    decision::parse_targets(&value, input.servers.len(), "the balancer chunk")
                        .map_err(|m| bad("chunk", m))?;
                decision.action = Action::None;
            }
        }
        Ok(decision)
    }
}

/// A readable message for a failed call, naming the limit that stopped it.
fn describe(err: &mlua::Error, budget: &Budget, limits: &Limits) -> String {
    let message = root_message(err);
    if budget.is_exhausted() && !message.contains("instruction budget") {
        // The budget error was raised again past a pcall, keep the original wording visible.
        return format!(
            "instruction budget of {} instructions exceeded ({message})",
            limits.instructions
        );
    }
    if is_memory_error(err) {
        return format!(
            "memory limit of {} bytes exceeded ({message})",
            limits.memory_bytes
        );
    }
    message
}

fn host_state(host: &Arc<Mutex<HostShared>>, name: &str) -> Option<StateValue> {
    host.lock().ok()?.states.get(name).cloned()
}

fn restore_state(host: &Arc<Mutex<HostShared>>, name: &str, state: Option<StateValue>) {
    if let Ok(mut host) = host.lock() {
        match state {
            Some(s) => host.states.insert(name.to_string(), s),
            None => host.states.remove(name),
        };
    }
}

/// `WRstate`/`RDstate` (both spellings), `log`/`BAL_LOG`/`print` and `timeseries`.
fn install_host_functions(
    lua: &Lua,
    id: &PolicyId,
    host: &Arc<Mutex<HostShared>>,
    slot: &SeriesSlot,
) -> mlua::Result<()> {
    let g = lua.globals();

    let (h, name) = (Arc::clone(host), id.name.clone());
    let wr = lua.create_function(move |_, value: Value| {
        let state = StateValue::from_lua(&value).map_err(mlua::Error::runtime)?;
        let mut host = h
            .lock()
            .map_err(|_| mlua::Error::runtime("policy state is unavailable"))?;
        host.states.insert(name.clone(), state);
        Ok(())
    })?;
    let (h, name) = (Arc::clone(host), id.name.clone());
    let rd = lua.create_function(move |lua, ()| {
        let state = h
            .lock()
            .ok()
            .and_then(|host| host.states.get(&name).cloned());
        match state {
            Some(s) => s.into_lua(lua),
            // Ceph's balancers read a number before any write; start them at 0.
            None => Ok(Value::Integer(0)),
        }
    })?;
    g.raw_set("WRstate", &wr)?;
    g.raw_set("WRState", wr)?;
    g.raw_set("RDstate", &rd)?;
    g.raw_set("RDState", rd)?;

    let (h, who) = (Arc::clone(host), id.to_string());
    let log = lua.create_function(move |_, args: mlua::MultiValue| {
        let mut args = args.into_iter();
        let level = LogLevel::from_lua(args.next().unwrap_or(Value::Nil));
        let message = join(args)?;
        if let Ok(mut host) = h.lock() {
            host.logs.push(&who, level, message);
        }
        Ok(())
    })?;
    g.raw_set("log", &log)?;
    g.raw_set("BAL_LOG", log)?;
    let (h, who) = (Arc::clone(host), id.to_string());
    let print = lua.create_function(move |_, args: mlua::MultiValue| {
        let message = join(args.into_iter())?;
        if let Ok(mut host) = h.lock() {
            host.logs.push(&who, LogLevel::Info, message);
        }
        Ok(())
    })?;
    g.raw_set("print", print)?;

    let object = build_series_object(lua, slot)?;
    let timeseries: Function = lua
        .load("local o = ... return function() return o end")
        .set_name("=timeseries")
        .call(object)?;
    g.raw_set("timeseries", timeseries)
}

fn join(values: impl Iterator<Item = Value>) -> mlua::Result<String> {
    let mut out = String::new();
    for (i, v) in values.enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&v.to_string()?);
    }
    Ok(out)
}
