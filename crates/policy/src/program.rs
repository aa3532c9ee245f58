//! One compiled policy version: its sandboxed Lua state, the callbacks it defines, and the
//! bridge that builds the Mantle environment for a tick, calls the callbacks in order and
//! validates what comes back (the whole bridge Ceph's `Mantle.cc` is, and no more).

use std::sync::{Arc, Mutex};

use mlua::{ffi, ChunkMode, Function, Lua, RegistryKey, Value};

use crate::budget::{Budget, Interrupt, Stop, StopReason};
use crate::decision::{self, Action, Decision};
use crate::env::{error_from, TickEnv, TickInput};
use crate::error::PolicyId;
use crate::error::{is_memory_error, line_of, root_message, ErrorKind, LoadError, PolicyError};
use crate::host::{HostShared, LogLevel};
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::sandbox;
use crate::series::NoSeries;
use crate::series_object::{build_series_object, SeriesSlot};
use crate::value::{number_to_lua, Params, Scalar, StateValue};

/// The global a policy defines to decide shared-log leases (run by the sequencer, see
/// `lease.rs`). Declared here, beside the other hook names, so that `lease` depends on
/// `program` and not the other way round.
pub const LEASE_HOOK: &str = "lease";

/// The hooks a policy file may define, in the order of `cache::hooks::HookSet`'s fields (`crate::hooks` runs them).
pub const HOOKS: [&str; 6] = [
    "admit",
    "on_hit",
    "on_insert",
    "on_evict",
    "priority",
    "evict",
];

/// The callbacks a libmantle-style policy defines, or the chunk of a Ceph balancer.
/// Each callback is kept as a registry slot: a tick pushes it with one `lua_rawgeti` and calls
/// it directly, which costs a fraction of mlua's generic call path (a message handler, a
/// reference thread, conversions of arguments and results).
enum Dialect {
    Callbacks {
        load: Option<RegistryKey>,
        when: Option<RegistryKey>,
        howmuch: Option<RegistryKey>,
        where_: Option<RegistryKey>,
    },
    /// Re-run every tick; its returned table is the `where` result.
    Ceph { chunk: RegistryKey },
}

pub(crate) struct Program {
    /// Shared so each tick's outcome can name the version without copying the name.
    id: Arc<PolicyId>,
    lua: Lua,
    budget: Arc<Budget>,
    limits: Limits,
    dialect: Dialect,
    env: TickEnv,
    state: StateCell,
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
        interrupt: Interrupt,
    ) -> Result<Program, LoadError> {
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
        let (lua, budget) = sandbox::new_state(limits, interrupt).map_err(setup)?;
        let slot = SeriesSlot::new();
        let cell = install_host_functions(&lua, &id, host, &slot, &budget).map_err(setup)?;

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
            let run = chunk.call::<Value>(());
            // What the top level wrote is the policy's state, even if the run then failed.
            let failed = run.as_ref().err().map(|e| describe(e, &budget, limits));
            budget.refill();
            cell.push(host, &id.name);
            run.map_err(|_| {
                let message = failed.unwrap_or_default();
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
        let key = |f: Option<Function>| f.map(|f| lua.create_registry_value(f)).transpose();
        let dialect = if load.is_some() || when.is_some() || howmuch.is_some() || where_.is_some() {
            Dialect::Callbacks {
                load: key(load).map_err(setup)?,
                when: key(when).map_err(setup)?,
                howmuch: key(howmuch).map_err(setup)?,
                where_: key(where_).map_err(setup)?,
            }
        } else if matches!(returned, Value::Table(_)) {
            restore_state(host, &id.name, state_before);
            cell.pull(host, &id.name);
            Dialect::Ceph {
                chunk: lua.create_registry_value(chunk).map_err(setup)?,
            }
        } else if HOOKS
            .iter()
            .chain([&LEASE_HOOK])
            .any(|h| matches!(globals.raw_get::<Value>(*h), Ok(Value::Function(_))))
        {
            // Only per-request hooks (run by the cache, see `hooks.rs`) or a shared log's
            // lease hook (run by its sequencer, see `lease.rs`): no tick decisions.
            Dialect::Callbacks {
                load: None,
                when: None,
                howmuch: None,
                where_: None,
            }
        } else {
            return Err(LoadError::NoCallbacks {
                chunk: chunk_name.trim_start_matches(['@', '=']).to_string(),
            });
        };
        Ok(Program {
            id: Arc::new(id),
            lua,
            budget,
            limits: *limits,
            dialect,
            env,
            state: cell,
            slot,
        })
    }

    pub(crate) fn id(&self) -> &PolicyId {
        &self.id
    }

    pub(crate) fn shared_id(&self) -> &Arc<PolicyId> {
        &self.id
    }

    /// Moves a state the policy wrote and kept in Lua to the host's map.
    pub(crate) fn push_state(&self, host: &Arc<Mutex<HostShared>>) {
        // A callback may have spent the budget the count hook checks.
        self.budget.refill();
        self.state.push(host, &self.id.name);
    }

    /// Moves the host's state into Lua after the map changed (or a version became active),
    /// first saving any value still pending in Lua.
    pub(crate) fn sync_state(&self, host: &Arc<Mutex<HostShared>>) {
        self.push_state(host);
        self.state.pull(host, &self.id.name);
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
            policy: PolicyId::clone(&self.id),
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
        let call = |name: &str, f: &RegistryKey| -> Result<Value, PolicyError> {
            self.budget.refill();
            call_registered(&self.lua, f).map_err(|e| {
                let kind = if let Some(reason) = self.budget.reason() {
                    match reason {
                        StopReason::Instructions => ErrorKind::InstructionBudget,
                        StopReason::Time => ErrorKind::TimeLimit,
                        StopReason::Interrupted => ErrorKind::Interrupted,
                    }
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
                    (decision.action, decision.units) =
                        decision::parse_howmuch_units(&value).map_err(|m| bad("howmuch", m))?;
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

/// Calls the function in registry slot `key` with no arguments and returns its first result.
fn call_registered(lua: &Lua, key: &RegistryKey) -> mlua::Result<Value> {
    lua.exec_raw_lua(|raw| {
        let l = raw.state();
        // SAFETY: one push within the space checked for, a protected call that pops it and
        // leaves one value (catching every Lua error), and the stack restored on every path.
        unsafe {
            if ffi::lua_checkstack(l, 2) == 0 {
                return Err(mlua::Error::runtime("Lua stack exhausted"));
            }
            let top = ffi::lua_gettop(l);
            ffi::lua_rawgeti(l, ffi::LUA_REGISTRYINDEX, key.id().into());
            let result = match ffi::lua_pcall(l, 0, 1, 0) {
                ffi::LUA_OK => Ok(raw.pop_value()),
                _ => Err(error_from(raw.pop_value())),
            };
            ffi::lua_settop(l, top);
            result
        }
    })
}

/// A readable message for a failed call, naming the limit that stopped it.
pub(crate) fn describe(err: &mlua::Error, budget: &Budget, limits: &Limits) -> String {
    let message = crate::error::bounded(root_message(err));
    let stop = match budget.reason() {
        Some(StopReason::Instructions) => Some((
            "instruction budget",
            format!(
                "instruction budget of {} instructions exceeded",
                limits.instructions
            ),
        )),
        Some(StopReason::Time) => Some((
            "time limit",
            format!(
                "time limit of {} ms exceeded",
                limits.time_limit.as_millis()
            ),
        )),
        Some(StopReason::Interrupted) => Some(("interrupted", "interrupted".to_string())),
        None => None,
    };
    if let Some((marker, text)) = stop {
        if !message.contains(marker) {
            // The stop was raised again past a pcall: keep the original wording visible.
            return format!("{text} ({message})");
        }
    }
    if is_memory_error(err) {
        return format!(
            "memory limit of {} bytes exceeded ({message})",
            limits.memory_bytes
        );
    }
    message
}

impl StateCell {
    /// Writes a pending value to the host's map. Failures (memory, budget) cannot lose a
    /// value the host has: the map keeps the previous one.
    fn push(&self, host: &Arc<Mutex<HostShared>>, name: &str) {
        let Ok((dirty, value)) = self.export.call::<(bool, Value)>(()) else {
            return;
        };
        if !dirty {
            return;
        }
        if let (Ok(state), Ok(mut host)) = (StateValue::from_lua(&value), host.lock()) {
            host.states.insert(name.to_string(), state);
        }
    }

    /// Keeps a number or boolean state of the host's map in Lua; anything else is read from
    /// the map at each `RDstate`.
    fn pull(&self, host: &Arc<Mutex<HostShared>>, name: &str) {
        let value = match host_state(host, name) {
            Some(StateValue::Scalar(Scalar::Number(n))) => number_to_lua(n),
            Some(StateValue::Scalar(Scalar::Bool(b))) => Value::Boolean(b),
            _ => Value::Nil,
        };
        let _ = self.import.call::<()>(value);
    }
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

/// Keeps a number or boolean state inside Lua, so `RDstate`/`WRstate` of such a state (the
/// common case: a flag or a counter read every tick) never leave Lua. Anything else goes to
/// the host's map through the Rust functions it wraps, as does a missing state. Numbers are
/// normalised as a round trip through the host would (`StateValue` keeps an `f64`; integral
/// values come back as integers), so a policy cannot tell where its state was kept. The
/// engine moves a pending value to the host map with `export` and sets it from the map with
/// `import`.
const STATE_CELL: &str = r#"
local host_write, host_read = ...
local mtype, tointeger = math.type, math.tointeger
local HOST = {}
local value, dirty = HOST, false
local function write(v)
  local t = mtype(v)
  if t == "integer" then
    if v <= -9e15 or v >= 9e15 then v = v + 0.0 end
  elseif t == "float" then
    if v > -9e15 and v < 9e15 and v == v // 1 then v = tointeger(v) end
  elseif v ~= true and v ~= false then
    host_write(v)
    value, dirty = HOST, false
    return
  end
  value, dirty = v, true
end
local function read()
  local v = value
  if v == HOST then return host_read() end
  return v
end
local function export()
  local d = dirty
  dirty = false
  if d then return true, value end
  return false
end
local function import(v)
  if v == nil then value = HOST else value = v end
  dirty = false
end
return write, read, {export, import}
"#;

/// The engine's side of [`STATE_CELL`].
pub(crate) struct StateCell {
    export: Function,
    import: Function,
}

impl mlua::FromLua for StateCell {
    fn from_lua(value: Value, _: &Lua) -> mlua::Result<StateCell> {
        let Value::Table(t) = value else {
            return Err(mlua::Error::runtime("state cell: expected a table"));
        };
        Ok(StateCell {
            export: t.raw_get(1)?,
            import: t.raw_get(2)?,
        })
    }
}

/// `WRstate`/`RDstate` (both spellings), `log`/`BAL_LOG`/`print` and `timeseries`. Returns
/// the engine's handle on the state kept in Lua.
pub(crate) fn install_host_functions(
    lua: &Lua,
    id: &PolicyId,
    host: &Arc<Mutex<HostShared>>,
    slot: &SeriesSlot,
    budget: &Arc<Budget>,
) -> mlua::Result<StateCell> {
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
    let (wr, rd, cell): (Function, Function, StateCell) =
        lua.load(STATE_CELL).set_name("=state").call((wr, rd))?;
    g.raw_set("WRstate", &wr)?;
    g.raw_set("WRState", wr)?;
    g.raw_set("RDstate", &rd)?;
    g.raw_set("RDState", rd)?;

    // The base library's `tostring`, kept before the policy can replace the global.
    let tostring: Function = g.raw_get("tostring")?;
    let (h, who, text) = (Arc::clone(host), id.to_string(), tostring.clone());
    let log = lua.create_function(move |_, args: mlua::MultiValue| {
        let mut args = args.into_iter();
        let level = LogLevel::from_lua(args.next().unwrap_or(Value::Nil));
        if let Ok(mut host) = h.lock() {
            if host.logs.accepts_line() {
                let message = join(args, &text)?;
                host.logs.push(&who, level, message);
            }
        }
        Ok(())
    })?;
    g.raw_set("log", &log)?;
    g.raw_set("BAL_LOG", log)?;
    let (h, who) = (Arc::clone(host), id.to_string());
    let print = lua.create_function(move |_, args: mlua::MultiValue| {
        if let Ok(mut host) = h.lock() {
            if host.logs.accepts_line() {
                let message = join(args.into_iter(), &tostring)?;
                host.logs.push(&who, LogLevel::Info, message);
            }
        }
        Ok(())
    })?;
    g.raw_set("print", print)?;

    let object = build_series_object(lua, slot)?;
    // The native scan walks the whole series: charged like the Lua loop it replaces would
    // be, at a quarter of an instruction per event, so a loop of scans meets the budget.
    let meter = Arc::clone(budget);
    let charge = lua.create_function(move |_, events: i64| {
        meter
            .charge(events.max(0) as u64 / 4 + 1)
            .map_err(Stop::error)
    })?;
    let timeseries: Function = lua
        .load(
            "local o, charge = ...\n\
             local fans, size = o.fans, o.size\n\
             o.fans = function(self, ...) charge(size(o)) return fans(self, ...) end\n\
             return function() return o end",
        )
        .set_name("=timeseries")
        .call((object, charge))?;
    g.raw_set("timeseries", timeseries)?;
    crate::host::install_slots(lua, host)?;
    crate::host::install_sequencers(lua, host)?;
    Ok(cell)
}

/// The words of a log line joined by spaces, cut at [`Limits::MAX_LOG_LINE_BYTES`]: only
/// the kept prefix of each string is copied out of Lua, so a policy logging huge strings
/// costs the host no more than the bound.
fn join(values: impl Iterator<Item = Value>, tostring: &Function) -> mlua::Result<String> {
    let max = Limits::MAX_LOG_LINE_BYTES;
    let mut out: Vec<u8> = Vec::new();
    for (i, v) in values.enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        let text = match v {
            Value::String(s) => s,
            other => tostring.call::<mlua::String>(other)?,
        };
        let bytes = text.as_bytes();
        let room = max.saturating_sub(out.len());
        out.extend_from_slice(&bytes[..bytes.len().min(room + 1)]);
        if out.len() > max {
            break;
        }
    }
    if out.len() > max {
        out.truncate(max);
        let mut line = String::from_utf8_lossy(&out).into_owned();
        if line.ends_with('\u{fffd}') {
            line.pop();
        }
        line.push_str("...");
        return Ok(line);
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}
