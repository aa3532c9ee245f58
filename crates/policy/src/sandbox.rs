//! The Lua state a policy runs in: only `string`, `table`, `math`, `utf8` and a safe base
//! library, an instruction budget and a time limit enforced by a count hook, and a memory
//! ceiling.
//!
//! Every way policy code can make the host work must be metered, or the policy thread can be
//! held forever. The holes the count hook alone leaves, and how each is closed:
//!
//! * `pcall`/`xpcall` would catch the budget error: they are wrapped so it is raised again.
//! * An `xpcall` message handler for the budget error runs with hooks off (the error is raised
//!   from inside the hook): the wrapper does not call the policy's handler once the budget is
//!   spent.
//! * `__gc` finalizers run with hooks off (Lua's `GCTM`): `setmetatable` refuses a metatable
//!   with a `__gc` field (Lua marks an object for finalization only if the field is present
//!   then). Every other metamethod (`__close`, `__index`, `__tostring`, ...) runs as ordinary
//!   metered Lua code; `__mode` runs none.
//! * C library functions do unmetered work. Patterns are matched in Rust under the budget
//!   (`pattern.rs`); every other function whose work is not O(1) is wrapped to charge the
//!   budget for the bytes or elements it touches ([`PRELUDE`]); `string.rep` of an empty string
//!   no longer loops; the string metatable is hidden, so no C function can become a
//!   metamethod called from inside a C loop.
//! * Anything else that is slow per instruction (operations on long strings) is caught by
//!   the wall-clock time limit, checked with the budget; the host can also interrupt a
//!   callback from another thread ([`Interrupt`]).
//! * `coroutine` is absent (hooks are per coroutine).

use std::sync::Arc;

use mlua::{ChunkMode, HookTriggers, Lua, LuaOptions, StdLib, Value, VmState};

use crate::budget::{Budget, Interrupt, Stop};
use crate::limits::Limits;

/// Globals a policy must not reach. Most are never loaded; removing them again guards against
/// a base library that registers them anyway.
pub const FORBIDDEN_GLOBALS: &[&str] = &[
    "io",
    "os",
    "package",
    "require",
    "debug",
    "dofile",
    "loadfile",
    "coroutine",
    "module",
    "warn",
    "collectgarbage",
    "load",
    "loadstring",
];

/// Registry key of the sandbox's `load`, so the engine can tell it from a policy's `load()`
/// callback.
pub(crate) const BUILTIN_LOAD_KEY: &str = "mantle.builtin_load";

/// Bytes of C work (copying, scanning) charged as one instruction.
pub(crate) const BYTES_PER_INSTRUCTION: u64 = 16;

/// Lua side of the sandbox, run once per state with the budget's `charge` and `exhausted`
/// functions and the memory limit. Wrappers keep the originals as upvalues, out of the
/// policy's reach. Each C function whose work is not O(1) charges the budget for what it
/// touched (one instruction per element, or per [`BYTES_PER_INSTRUCTION`] bytes); a single
/// call cannot do more than the memory limit allows, and the charge makes a loop of them
/// meet the budget or the time limit.
const PRELUDE: &str = r##"
local charge, exhausted, memory = ...
local type, error, select, getmetatable, rawget = type, error, select, getmetatable, rawget
local raw_pcall, raw_xpcall, raw_setmetatable = pcall, xpcall, setmetatable
local raw_tonumber = tonumber
local tointeger = math.tointeger
local S, T, U = string, table, utf8
local BYTES = 16

local function pass(ok, ...)
  if not ok and exhausted() then error((...), 0) end
  return ok, ...
end
pcall = function(...) return pass(raw_pcall(...)) end
xpcall = function(f, handler, ...)
  if type(handler) ~= "function" then
    error("bad argument #2 to 'xpcall' (function expected)", 2)
  end
  -- The handler of an error raised by the count hook would run with hooks off.
  local function guarded(...)
    if exhausted() then return ... end
    return handler(...)
  end
  return pass(raw_xpcall(f, guarded, ...))
end

setmetatable = function(t, mt)
  if type(mt) == "table" and rawget(mt, "__gc") ~= nil then
    error("setmetatable: __gc finalizers are not allowed in policies (the collector runs "
      .. "them outside the instruction budget)", 2)
  end
  return raw_setmetatable(t, mt)
end

local function bytes(n) charge(n // BYTES + 1) end
local function strlen(v)
  local t = type(v)
  if t == "string" then return #v end
  if t == "number" then return 24 end
  return nil
end
-- Charges a result's size after the call.
local function sized(f)
  return function(...)
    local r = f(...)
    if type(r) == "string" then bytes(#r) end
    return r
  end
end
local function counted_results(...)
  charge(select("#", ...) + 1)
  return ...
end
local function counted(f)
  return function(...) return counted_results(f(...)) end
end
-- Charges the subject's length before the call.
local function scans(f)
  return function(s, ...)
    local n = strlen(s)
    if n then bytes(n) end
    return f(s, ...)
  end
end

local rep = S.rep
S.rep = function(s, n, sep)
  local count, unit = tointeger(n), strlen(s)
  local sepn = sep == nil and 0 or strlen(sep)
  if count == nil or unit == nil or sepn == nil then return rep(s, n, sep) end
  if count <= 0 then return "" end
  -- Lua's loop copies the empty string n times.
  if unit + sepn == 0 then return "" end
  local total = (unit + sepn) * (count + 0.0)
  if total > memory then return rep(s, count, sep) end -- fails at once: too large
  charge(total // BYTES + 1)
  return rep(s, count, sep)
end
for _, name in ipairs({"upper", "lower", "reverse", "sub", "format", "char", "pack"}) do
  S[name] = sized(S[name])
end
S.byte = counted(S.byte)
S.unpack = counted(S.unpack)
S.packsize = scans(S.packsize)
U.char = sized(U.char)
U.codepoint = counted(U.codepoint)
U.len = scans(U.len)
U.offset = scans(U.offset)
local codes = U.codes
U.codes = function(s, ...)
  local step, subject, i = codes(s, ...)
  return function(a, b)
    local j, c = step(a, b)
    if j then bytes(j - (tointeger(b) or 0)) end
    return j, c
  end, subject, i
end
tonumber = function(v, ...)
  local n = strlen(v)
  if n and type(v) == "string" then bytes(n) end
  return raw_tonumber(v, ...)
end

local function plain(t, what)
  if type(t) == "table" and getmetatable(t) ~= nil then
    error("table." .. what .. ": tables with a metatable are not supported in policies", 3)
  end
end
local function span(a, b)
  a, b = tointeger(a), tointeger(b)
  if a and b and b >= a then charge((b + 0.0) - a + 1) end
end
local concat, unpack, move = T.concat, T.unpack, T.move
local insert, remove, sort = T.insert, T.remove, T.sort
T.concat = function(t, sep, i, j)
  if type(t) ~= "table" then return concat(t, sep, i, j) end
  if i == nil then i = 1 end
  if j == nil then j = #t end
  span(i, j)
  local r = concat(t, sep, i, j)
  bytes(#r)
  return r
end
T.unpack = function(t, i, j)
  if type(t) ~= "table" then return unpack(t, i, j) end
  if i == nil then i = 1 end
  if j == nil then j = #t end
  span(i, j)
  return unpack(t, i, j)
end
T.move = function(a1, f, e, t, ...)
  span(f, e)
  return move(a1, f, e, t, ...)
end
T.insert = function(t, ...)
  plain(t, "insert")
  if type(t) == "table" then charge(#t + 1) end
  return insert(t, ...)
end
T.remove = function(t, ...)
  plain(t, "remove")
  if type(t) == "table" then charge(#t + 1) end
  return remove(t, ...)
end
-- Each comparison of two long strings is a strcmp inside C's sort, unseen by the count hook:
-- when the table holds one, every comparison runs through a Lua function (so the hook and
-- the time limit see the sort) that charges the bytes it may compare.
local LONG = 64
local function less(a, b) return a < b end
local function metered(cmp)
  return function(a, b)
    if type(a) == "string" and type(b) == "string" then
      local n, m = #a, #b
      if m < n then n = m end
      if n > LONG then bytes(n) end
    end
    return cmp(a, b)
  end
end
T.sort = function(t, cmp)
  plain(t, "sort")
  if type(t) ~= "table" or (cmp ~= nil and type(cmp) ~= "function") then
    return sort(t, cmp)
  end
  local n = #t
  charge((n + 1.0) * math.log(n + 1.0, 2) + 1)
  for i = 1, n do
    local v = rawget(t, i)
    if type(v) == "string" and #v > LONG then
      return sort(t, metered(cmp or less))
    end
  end
  return sort(t, cmp)
end

-- A C function set as a metamethod of strings would run inside C loops (table.concat over
-- a string), out of the hook's sight.
getmetatable("").__metatable = false
"##;

/// Creates a sandboxed Lua state with `limits` applied; `interrupt` stops its callbacks.
pub(crate) fn new_state(limits: &Limits, interrupt: Interrupt) -> mlua::Result<(Lua, Arc<Budget>)> {
    let lua = Lua::new_with(
        StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8,
        LuaOptions::default(),
    )?;
    let globals = lua.globals();
    for name in FORBIDDEN_GLOBALS {
        globals.raw_set(*name, Value::Nil)?;
    }
    let string: mlua::Table = globals.raw_get("string")?;
    string.raw_set("dump", Value::Nil)?;

    let budget = Arc::new(Budget::new(limits, interrupt));
    let load = text_only_load(&lua, &budget)?;
    lua.set_named_registry_value(BUILTIN_LOAD_KEY, &load)?;
    globals.raw_set("load", load)?;
    globals.raw_set("collectgarbage", restricted_collectgarbage(&lua, &budget)?)?;
    crate::pattern::install(&lua, &string, &budget, limits.memory_bytes)?;

    let flag = Arc::clone(&budget);
    let exhausted = lua.create_function(move |_, ()| Ok(flag.is_exhausted()))?;
    let meter = Arc::clone(&budget);
    let charge = lua.create_function(move |_, n: f64| {
        let n = if n.is_nan() || n < 0.0 {
            0
        } else if n >= u64::MAX as f64 {
            u64::MAX
        } else {
            n as u64
        };
        meter.charge(n).map_err(Stop::error)
    })?;
    lua.load(PRELUDE).set_name("=sandbox").call::<()>((
        charge,
        exhausted,
        limits.memory_bytes as f64,
    ))?;

    let hook_budget = Arc::clone(&budget);
    lua.set_hook(
        HookTriggers::new().every_nth_instruction(Limits::HOOK_STEP),
        move |_, debug| {
            let Err(stop) = hook_budget.charge(u64::from(Limits::HOOK_STEP)) else {
                return Ok(VmState::Continue);
            };
            let line = debug
                .current_line()
                .map(|l| format!(" (at line {l})"))
                .unwrap_or_default();
            Err(mlua::Error::runtime(format!("{}{line}", stop.message())))
        },
    )?;
    lua.set_memory_limit(limits.memory_bytes)?;
    Ok((lua, budget))
}

/// The policy sandbox for other untrusted Lua the host runs (the server's functions and
/// scripts): the same libraries, wrappers, instruction budget, wall-clock cut-off and memory
/// ceiling as a policy's state, so a function cannot do what a policy may not.
pub struct Sandbox {
    lua: Lua,
    budget: Arc<Budget>,
}

impl Sandbox {
    /// A fresh sandboxed state under `limits`; `interrupt` stops the running call.
    pub fn new(limits: &Limits, interrupt: Interrupt) -> mlua::Result<Sandbox> {
        let (lua, budget) = new_state(limits, interrupt)?;
        Ok(Sandbox { lua, budget })
    }

    pub fn lua(&self) -> &Lua {
        &self.lua
    }

    /// A full budget and a fresh deadline for the next call.
    pub fn refill(&self) {
        self.budget.refill();
    }

    /// Whether the last call was stopped by its budget, its deadline or the interrupt (its
    /// error then says which).
    pub fn stopped(&self) -> bool {
        self.budget.is_exhausted()
    }

    /// Charges `n` instructions' worth of host work done for the running call (a host
    /// function's copying); fails once the budget is spent.
    pub fn charge(&self, n: u64) -> mlua::Result<()> {
        self.budget.charge(n).map_err(Stop::error)
    }

    /// A handle that charges the running call's budget, for host functions the state calls.
    pub fn meter(&self) -> Meter {
        Meter(Arc::clone(&self.budget))
    }
}

/// Charges host work to a [`Sandbox`]'s running call (see [`Sandbox::meter`]).
#[derive(Clone)]
pub struct Meter(Arc<Budget>);

impl Meter {
    pub fn charge(&self, n: u64) -> mlua::Result<()> {
        self.0.charge(n).map_err(Stop::error)
    }
}

/// `load(text [, chunkname [, mode [, env]]])` that only accepts source text and runs it in
/// the policy's own environment unless another table is given.
fn text_only_load(lua: &Lua, budget: &Arc<Budget>) -> mlua::Result<mlua::Function> {
    let budget = Arc::clone(budget);
    lua.create_function(
        move |lua, (chunk, name, _mode, env): (Value, Option<String>, Value, Option<mlua::Table>)| {
            let Value::String(text) = chunk else {
                return Err(mlua::Error::runtime(
                    "load: policies may only load source text given as a string",
                ));
            };
            let bytes = text.as_bytes();
            if bytes.len() > MAX_LOAD_BYTES {
                return Err(mlua::Error::runtime(format!(
                    "load: chunks of at most {MAX_LOAD_BYTES} bytes are accepted in policies"
                )));
            }
            // Compiling is linear in the text once `source_scan` has refused quadratic
            // chains.
            budget
                .charge(bytes.len() as u64 / BYTES_PER_INSTRUCTION * 4 + 1)
                .map_err(Stop::error)?;
            if bytes.first() == Some(&0x1b) {
                return Err(mlua::Error::runtime(
                    "load: binary chunks are not allowed in policies",
                ));
            }
            let name = name.unwrap_or_else(|| "=(load)".to_string());
            // Lua's `load` reports a chunk it will not compile as (nil, message).
            if let Err(e) = crate::source_scan::check_compile_cost(&name, &bytes) {
                return Ok((Value::Nil, Value::String(lua.create_string(e)?)));
            }
            let env = match env {
                Some(env) => env,
                None => lua.globals(),
            };
            let loaded = lua
                .load(&bytes[..])
                .set_name(name)
                .set_mode(ChunkMode::Text)
                .set_environment(env)
                .into_function();
            match loaded {
                Ok(f) => Ok((Value::Function(f), Value::Nil)),
                Err(e) => Ok((Value::Nil, Value::String(lua.create_string(e.to_string())?))),
            }
        },
    )
}

/// Largest chunk the sandbox's `load` compiles (as the server's policy source limit).
pub(crate) const MAX_LOAD_BYTES: usize = Limits::MAX_SOURCE_BYTES;

/// `collectgarbage` limited to options that cannot change the collector's behaviour. A
/// collection walks the whole heap: it is charged as such.
fn restricted_collectgarbage(lua: &Lua, budget: &Arc<Budget>) -> mlua::Result<mlua::Function> {
    let budget = Arc::clone(budget);
    lua.create_function(move |lua, opt: Option<String>| {
        let heap = lua.used_memory() as u64 / 4 + 1;
        match opt.as_deref().unwrap_or("collect") {
            "collect" => {
                budget.charge(heap).map_err(Stop::error)?;
                lua.gc_collect()?;
                Ok(Value::Integer(0))
            }
            "step" => {
                budget.charge(heap).map_err(Stop::error)?;
                Ok(Value::Boolean(lua.gc_step()?))
            }
            "count" => Ok(Value::Number(lua.used_memory() as f64 / 1024.0)),
            other => Err(mlua::Error::runtime(format!(
                "collectgarbage('{other}') is not allowed in policies (only collect, step, count)"
            ))),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval_err(src: &str) -> String {
        let (lua, budget) = new_state(
            &Limits {
                instructions: 1_000_000,
                memory_bytes: 8 << 20,
                ..Limits::default()
            },
            Interrupt::default(),
        )
        .unwrap();
        budget.refill();
        lua.load(src).exec().unwrap_err().to_string()
    }

    #[test]
    fn forbidden_libraries_are_absent() {
        assert!(eval_err("os.execute('true')").contains("global 'os'"));
        assert!(eval_err("io.open('/etc/passwd')").contains("global 'io'"));
        assert!(eval_err("require('x')").contains("global 'require'"));
        assert!(eval_err("debug.getinfo(1)").contains("global 'debug'"));
        assert!(eval_err("string.dump(print)").contains("field 'dump'"));
    }

    #[test]
    fn budget_survives_pcall() {
        let msg = eval_err("while true do pcall(function() while true do end end) end");
        assert!(msg.contains("instruction budget"), "{msg}");
    }

    #[test]
    fn collectgarbage_is_restricted() {
        assert!(eval_err("collectgarbage('stop')").contains("not allowed"));
    }
}
