//! The Lua state a policy runs in: only `string`, `table`, `math`, `utf8` and a safe base
//! library, an instruction budget enforced by a count hook, and a memory ceiling.
//!
//! The budget must not be escapable: `pcall`/`xpcall` are wrapped so a budget error caught by
//! the policy is raised again, and `coroutine` is absent (hooks are per coroutine).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use mlua::{ChunkMode, HookTriggers, Lua, LuaOptions, StdLib, Value, VmState};

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

/// The per-callback instruction budget, shared with the count hook.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: u64,
    remaining: AtomicU64,
    exhausted: AtomicBool,
}

impl Budget {
    fn new(limit: u64) -> Budget {
        Budget {
            limit,
            remaining: AtomicU64::new(limit),
            exhausted: AtomicBool::new(false),
        }
    }

    /// Gives the next callback a full budget.
    pub(crate) fn refill(&self) {
        self.remaining.store(self.limit, Ordering::Relaxed);
        self.exhausted.store(false, Ordering::Relaxed);
    }

    pub(crate) fn is_exhausted(&self) -> bool {
        self.exhausted.load(Ordering::Relaxed)
    }

    /// Charges one hook step; `false` once the budget is spent.
    fn charge(&self) -> bool {
        let step = u64::from(Limits::HOOK_STEP);
        let left = self.remaining.load(Ordering::Relaxed);
        if left <= step || self.is_exhausted() {
            self.exhausted.store(true, Ordering::Relaxed);
            return false;
        }
        self.remaining.store(left - step, Ordering::Relaxed);
        true
    }
}

/// Raises again, past the policy's own `pcall`/`xpcall`, an error caught after the budget ran
/// out, so `while true do pcall(f) end` cannot outlive its budget.
const PCALL_PRELUDE: &str = r#"
local raw_pcall, raw_xpcall, raw_error, exhausted = pcall, xpcall, error, ...
local function pass(ok, ...)
  if not ok and exhausted() then raw_error((...), 0) end
  return ok, ...
end
pcall = function(...) return pass(raw_pcall(...)) end
xpcall = function(...) return pass(raw_xpcall(...)) end
"#;

/// Creates a sandboxed Lua state with `limits` applied.
pub(crate) fn new_state(limits: &Limits) -> mlua::Result<(Lua, Arc<Budget>)> {
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

    let load = text_only_load(&lua)?;
    lua.set_named_registry_value(BUILTIN_LOAD_KEY, &load)?;
    globals.raw_set("load", load)?;
    globals.raw_set("collectgarbage", restricted_collectgarbage(&lua)?)?;

    let budget = Arc::new(Budget::new(limits.instructions));
    let flag = Arc::clone(&budget);
    let exhausted = lua.create_function(move |_, ()| Ok(flag.is_exhausted()))?;
    lua.load(PCALL_PRELUDE)
        .set_name("=sandbox")
        .call::<()>(exhausted)?;

    let hook_budget = Arc::clone(&budget);
    let limit = limits.instructions;
    lua.set_hook(
        HookTriggers::new().every_nth_instruction(Limits::HOOK_STEP),
        move |_, debug| {
            if hook_budget.charge() {
                return Ok(VmState::Continue);
            }
            let line = debug
                .current_line()
                .map(|l| format!(" (at line {l})"))
                .unwrap_or_default();
            Err(mlua::Error::runtime(format!(
                "instruction budget of {limit} instructions exceeded{line}"
            )))
        },
    )?;
    lua.set_memory_limit(limits.memory_bytes)?;
    Ok((lua, budget))
}

/// `load(text [, chunkname [, mode [, env]]])` that only accepts source text and runs it in
/// the policy's own environment unless another table is given.
fn text_only_load(lua: &Lua) -> mlua::Result<mlua::Function> {
    lua.create_function(
        |lua, (chunk, name, _mode, env): (Value, Option<String>, Value, Option<mlua::Table>)| {
            let Value::String(text) = chunk else {
                return Err(mlua::Error::runtime(
                    "load: policies may only load source text given as a string",
                ));
            };
            let bytes = text.as_bytes();
            if bytes.first() == Some(&0x1b) {
                return Err(mlua::Error::runtime(
                    "load: binary chunks are not allowed in policies",
                ));
            }
            let name = name.unwrap_or_else(|| "=(load)".to_string());
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

/// `collectgarbage` limited to options that cannot change the collector's behaviour.
fn restricted_collectgarbage(lua: &Lua) -> mlua::Result<mlua::Function> {
    lua.create_function(
        |lua, opt: Option<String>| match opt.as_deref().unwrap_or("collect") {
            "collect" => {
                lua.gc_collect()?;
                Ok(Value::Integer(0))
            }
            "step" => Ok(Value::Boolean(lua.gc_step()?)),
            "count" => Ok(Value::Number(lua.used_memory() as f64 / 1024.0)),
            other => Err(mlua::Error::runtime(format!(
                "collectgarbage('{other}') is not allowed in policies (only collect, step, count)"
            ))),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval_err(src: &str) -> String {
        let (lua, budget) = new_state(&Limits {
            instructions: 1_000_000,
            memory_bytes: 8 << 20,
            max_consecutive_failures: 3,
        })
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
