//! What the host tells a policy at a tick ([`TickInput`]), and how it becomes the per-tick
//! environment (`whoami`, `now`, `tick`, `servers`/`server`/`mds`, `nservers`, `params`).
//! That runs at every tick, so a tick of a trivial policy must cost well
//! under a microsecond for replay to tick every second of trace time at full speed.
//!
//! The tables live across ticks: they are created once, with a small Lua *writer* function
//! that holds them as upvalues, and each tick calls the writer with the new values, which it
//! stores in place. A store to an existing field is one VM instruction with a pre-interned
//! key; the C API would need a key push and a `lua_rawset` per field, and fresh tables each
//! tick would also feed the garbage collector. What a policy sees at each tick:
//!
//! * every global above holds the engine's value again, even if the policy reassigned it;
//! * `servers[i]` is the engine's metric table again, with every documented field rewritten
//!   (an optional one the host stopped reporting is removed);
//! * `params` holds every `--param` with its given value again.
//!
//! Fields a policy adds to these tables itself stay until it removes them. The engine's tables
//! carry a protected metatable (`getmetatable` gives `false`, `setmetatable` fails), so no
//! policy code can run while the writer stores into them; the writer then runs without the
//! instruction-count hook unless the policy gave `_G` a metatable. Everything is rebuilt when
//! the number of servers or the parameters change.

use std::cell::RefCell;
use std::ffi::c_int;

use mlua::{ffi, Lua, Value};

use crate::metrics::Metrics;
use crate::series::TimeSeries;
use crate::value::{Params, Scalar};

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

/// Called once per build with the tables; returns the writer and the `load()` updater.
const WRITER: &str = r#"
local G, S, P, M, PK, PV = ...
local NP = #PK
local function write(i, whoami, nservers, tick, now, optional, cpu, mem,
    cachesize, cachebytes, capacity, hits, misses, gets, puts, reqrate, getrate, putrate,
    missrate, hitrate, backend_rate, backend_queue, evictions, load)
  if i >= 0 then
    local m = M[i]
    S[i] = m
    m.cachesize = cachesize
    m.cachebytes = cachebytes
    m.capacity = capacity
    m.hits = hits
    m.misses = misses
    m.gets = gets
    m.puts = puts
    m.reqrate = reqrate
    m.getrate = getrate
    m.putrate = putrate
    m.missrate = missrate
    m.hitrate = hitrate
    m.backend_rate = backend_rate
    m.backend_queue = backend_queue
    m.evictions = evictions
    m.load = load
    m["auth.meta_load"] = load
    m["all.meta_load"] = load
    m.req_rate = reqrate
    m.queue_len = backend_queue
    if optional then
      m.cpu = cpu
      m.cpu_load_avg = cpu
      m.mem = mem
    end
  end
  if i <= 0 then
    local s = S
    G.servers = s
    G.server = s
    G.mds = s
    G.params = P
    G.whoami = whoami
    G.nservers = nservers
    G.tick = tick
    G.now = now
    if NP > 0 then
      local p, pk, pv = P, PK, PV
      for j = 1, NP do
        p[pk[j]] = pv[j]
      end
    end
  end
end
local function own_load(i, load)
  local m = S[i]
  m.load = load
  m["auth.meta_load"] = load
  m["all.meta_load"] = load
end
return write, own_load
"#;

/// Arguments of the writer, and stack slots a tick needs.
const WRITER_ARGS: c_int = 24;

/// The writer of one Lua state, and what it was built for.
struct Built {
    /// Registry references of the writer and the `load()` updater.
    writer: c_int,
    own_load: c_int,
    servers: usize,
    params: Params,
    /// Per server: whether its table may hold `cpu`, `cpu_load_avg` or `mem`.
    optional: Vec<bool>,
}

/// The tick environment of one Lua state.
#[derive(Default)]
pub(crate) struct TickEnv {
    built: RefCell<Option<Built>>,
}

impl TickEnv {
    /// Sets the per-tick globals and tables for `input`. The caller refills the instruction
    /// budget first: the writer may run under the count hook.
    pub(crate) fn set(&self, lua: &Lua, input: &TickInput) -> mlua::Result<()> {
        let mut built = self.built.borrow_mut();
        let reusable = built
            .as_ref()
            .is_some_and(|b| b.servers == input.servers.len() && b.params == *input.params);
        if !reusable {
            let old = built.take();
            *built = Some(build(lua, old, input.servers.len(), input.params)?);
        }
        let Some(b) = built.as_mut() else {
            return Ok(());
        };
        let result = write(lua, b, input);
        for (optional, m) in b.optional.iter_mut().zip(input.servers) {
            *optional = m.cpu.is_some() || m.mem.is_some();
        }
        if result.is_err() {
            // The writer may have stopped half way; start afresh next time.
            if let Some(old) = built.take() {
                forget(lua, old);
            }
        }
        result
    }

    /// Writes the `load()` result into `servers[whoami]` (with its Ceph aliases), so later
    /// callbacks of the same tick see it.
    pub(crate) fn set_own_load(&self, lua: &Lua, whoami: usize, load: f64) -> mlua::Result<()> {
        let built = self.built.borrow();
        let Some(own_load) = built.as_ref().map(|b| b.own_load) else {
            return Ok(());
        };
        lua.exec_raw_lua(|raw| {
            let l = raw.state();
            // SAFETY: two pushes within the space checked for, a protected call that pops
            // them, and the stack restored on every path.
            unsafe {
                if ffi::lua_checkstack(l, 3) == 0 {
                    return Err(mlua::Error::runtime("Lua stack exhausted"));
                }
                let top = ffi::lua_gettop(l);
                ffi::lua_rawgeti(l, ffi::LUA_REGISTRYINDEX, own_load.into());
                ffi::lua_pushinteger(l, whoami as ffi::lua_Integer);
                ffi::lua_pushnumber(l, load);
                let result = match ffi::lua_pcall(l, 2, 0, 0) {
                    ffi::LUA_OK => Ok(()),
                    _ => Err(error_from(raw.pop_value())),
                };
                ffi::lua_settop(l, top);
                result
            }
        })
    }
}

/// Compiles the writer over fresh tables for `servers` servers and `params`, dropping the
/// registry references of `old`.
fn build(lua: &Lua, old: Option<Built>, servers: usize, params: &Params) -> mlua::Result<Built> {
    if let Some(old) = old {
        forget(lua, old);
    }
    let mut refs = [ffi::LUA_NOREF; 2];
    let refs_out: *mut [c_int; 2] = &mut refs;
    // SAFETY: balanced pushes inside `exec_raw`, which runs the closure in protected mode
    // (an allocation failure becomes an `Err`) and restores the stack. Nothing with a
    // destructor lives in the closure, which a Lua error would jump over.
    unsafe {
        lua.exec_raw::<()>((), |l| {
            let loaded = ffi::luaL_loadbufferx(
                l,
                WRITER.as_ptr().cast(),
                WRITER.len(),
                c"=environment".as_ptr(),
                c"t".as_ptr(),
            );
            if loaded != ffi::LUA_OK {
                ffi::lua_error(l);
            }
            push_tables(l, servers, params);
            ffi::lua_call(l, 6, 2);
            let own_load = ffi::luaL_ref(l, ffi::LUA_REGISTRYINDEX);
            let writer = ffi::luaL_ref(l, ffi::LUA_REGISTRYINDEX);
            refs_out.write_volatile([writer, own_load]);
        })?;
    }
    let [writer, own_load] = refs;
    Ok(Built {
        writer,
        own_load,
        servers,
        params: params.clone(),
        optional: vec![false; servers],
    })
}

/// Pushes the writer's upvalues: `_G`, `servers`, `params`, the metric tables by server
/// number, and the parameter names and values.
unsafe fn push_tables(l: *mut ffi::lua_State, servers: usize, params: &Params) {
    ffi::lua_rawgeti(l, ffi::LUA_REGISTRYINDEX, ffi::LUA_RIDX_GLOBALS); // G
    ffi::lua_createtable(l, 0, 1); // G lock
    let lock = ffi::lua_gettop(l);
    ffi::lua_pushboolean(l, 0);
    ffi::lua_setfield(l, lock, c"__metatable".as_ptr());
    let locked_table = |narr: usize, nrec: usize| {
        ffi::lua_createtable(l, narr as c_int, nrec as c_int);
        ffi::lua_pushvalue(l, lock);
        ffi::lua_setmetatable(l, -2);
    };
    locked_table(0, servers); // G lock S
    locked_table(0, params.len()); // G lock S P
    ffi::lua_createtable(l, 0, servers as c_int); // G lock S P M
    let fields = 23;
    for i in 0..servers {
        locked_table(0, fields);
        ffi::lua_rawseti(l, -2, i as ffi::lua_Integer);
    }
    ffi::lua_createtable(l, params.len() as c_int, 0); // G lock S P M PK
    ffi::lua_createtable(l, params.len() as c_int, 0); // G lock S P M PK PV
    for (j, (key, value)) in (1..).zip(params) {
        push_str(l, key);
        ffi::lua_rawseti(l, -3, j);
        push_scalar(l, value);
        ffi::lua_rawseti(l, -2, j);
    }
    ffi::lua_remove(l, lock); // G S P M PK PV
}

/// Drops the registry references of a writer.
fn forget(lua: &Lua, built: Built) {
    lua.exec_raw_lua(|raw| {
        // SAFETY: `luaL_unref` only stores into the registry's existing slots.
        unsafe {
            for r in [built.writer, built.own_load] {
                ffi::luaL_unref(raw.state(), ffi::LUA_REGISTRYINDEX, r);
            }
        }
    });
}

/// Calls the writer once per server (once with `i = -1` for none).
fn write(lua: &Lua, built: &Built, input: &TickInput) -> mlua::Result<()> {
    lua.exec_raw_lua(|raw| {
        let l = raw.state();
        // SAFETY: each call's pushes fit in the space checked for and are popped by the
        // protected call, which catches every Lua error; the stack and the hook are restored
        // on every path. The hook is lifted only when no policy code can run: the writer
        // stores into the engine's tables, whose metatables are locked without metamethods,
        // and into `_G`, checked to have no metatable.
        unsafe {
            if ffi::lua_checkstack(l, WRITER_ARGS + 2) == 0 {
                return Err(mlua::Error::runtime("Lua stack exhausted"));
            }
            let top = ffi::lua_gettop(l);
            ffi::lua_rawgeti(l, ffi::LUA_REGISTRYINDEX, ffi::LUA_RIDX_GLOBALS);
            let plain_globals = ffi::lua_getmetatable(l, -1) == 0;
            ffi::lua_settop(l, top);
            let hook = plain_globals.then(|| lift_hook(l));
            let mut result = Ok(());
            for i in 0..input.servers.len().max(1) {
                ffi::lua_rawgeti(l, ffi::LUA_REGISTRYINDEX, built.writer.into());
                push_writer_args(l, input, i, built.optional.get(i).copied());
                if ffi::lua_pcall(l, WRITER_ARGS, 0, 0) != ffi::LUA_OK {
                    result = Err(error_from(raw.pop_value()));
                    break;
                }
            }
            ffi::lua_settop(l, top);
            if let Some(hook) = hook {
                hook.restore(l);
            }
            result
        }
    })
}

/// Pushes the writer's arguments for server `i` (no server's metrics when there is none).
/// `had_optional` says whether the server's table may hold optional fields from before.
unsafe fn push_writer_args(
    l: *mut ffi::lua_State,
    input: &TickInput,
    i: usize,
    had_optional: Option<bool>,
) {
    let Some(m) = input.servers.get(i) else {
        ffi::lua_pushinteger(l, -1);
        push_globals(l, input);
        for _ in 0..WRITER_ARGS - 5 {
            ffi::lua_pushnil(l);
        }
        return;
    };
    ffi::lua_pushinteger(l, i as ffi::lua_Integer);
    push_globals(l, input);
    let optional = m.cpu.is_some() || m.mem.is_some() || had_optional.unwrap_or(false);
    ffi::lua_pushboolean(l, c_int::from(optional));
    match m.cpu {
        Some(cpu) => ffi::lua_pushnumber(l, cpu),
        None => ffi::lua_pushnil(l),
    }
    match m.mem {
        Some(mem) => push_number(l, mem),
        None => ffi::lua_pushnil(l),
    }
    for v in metric_values(m) {
        push_number(l, v);
    }
}

unsafe fn push_globals(l: *mut ffi::lua_State, input: &TickInput) {
    ffi::lua_pushinteger(l, input.whoami as ffi::lua_Integer);
    ffi::lua_pushinteger(l, input.servers.len() as ffi::lua_Integer);
    ffi::lua_pushinteger(l, input.tick as ffi::lua_Integer);
    ffi::lua_pushnumber(l, input.now);
}

/// The metrics in the order of the writer's parameters.
fn metric_values(m: &Metrics) -> [f64; 16] {
    [
        m.cachesize,
        m.cachebytes,
        m.capacity,
        m.hits,
        m.misses,
        m.gets,
        m.puts,
        m.reqrate,
        m.getrate,
        m.putrate,
        m.missrate,
        m.hitrate,
        m.backend_rate,
        m.backend_queue,
        m.evictions,
        m.load,
    ]
}

/// The error a failed `lua_pcall` left: the host's own error when a host function (such as
/// the budget hook) raised it, else the message.
pub(crate) fn error_from(value: Value) -> mlua::Error {
    match value {
        Value::Error(e) => *e,
        Value::String(s) => {
            // Only a bounded prefix is copied out of Lua.
            let bytes = s.as_bytes();
            let keep = &bytes[..bytes.len().min(crate::Limits::MAX_ERROR_BYTES + 4)];
            mlua::Error::runtime(crate::error::bounded(
                String::from_utf8_lossy(keep).into_owned(),
            ))
        }
        other => mlua::Error::runtime(format!("(error object is a {} value)", other.type_name())),
    }
}

/// The count hook as it was before [`lift_hook`].
struct SavedHook {
    hook: Option<ffi::lua_Hook>,
    mask: c_int,
    count: c_int,
}

impl SavedHook {
    unsafe fn restore(self, l: *mut ffi::lua_State) {
        if self.mask != 0 {
            ffi::lua_sethook(l, self.hook, self.mask, self.count);
        }
    }
}

/// Removes the hook (the instruction budget's count hook), which would otherwise be
/// consulted at every VM instruction.
unsafe fn lift_hook(l: *mut ffi::lua_State) -> SavedHook {
    let saved = SavedHook {
        hook: ffi::lua_gethook(l),
        mask: ffi::lua_gethookmask(l),
        count: ffi::lua_gethookcount(l),
    };
    if saved.mask != 0 {
        ffi::lua_sethook(l, None, 0, 0);
    }
    saved
}

/// Pushes `v` as an integer when integral (so `100` prints as `100`), else as a float.
unsafe fn push_number(l: *mut ffi::lua_State, v: f64) {
    // A round trip through the integer is cheaper than `fract` (a libm call); NaN and the
    // infinities fail it.
    let i = v as ffi::lua_Integer;
    if i as f64 == v && v.abs() < 9.0e15 {
        ffi::lua_pushinteger(l, i);
    } else {
        ffi::lua_pushnumber(l, v);
    }
}

unsafe fn push_str(l: *mut ffi::lua_State, s: &str) {
    ffi::lua_pushlstring(l, s.as_ptr().cast(), s.len());
}

unsafe fn push_scalar(l: *mut ffi::lua_State, v: &Scalar) {
    match v {
        Scalar::Bool(b) => ffi::lua_pushboolean(l, c_int::from(*b)),
        Scalar::Number(n) => push_number(l, *n),
        Scalar::Str(s) => push_str(l, s),
    }
}

#[cfg(test)]
mod tests {
    use crate::{
        parse_param, Limits, Metrics, NoSeries, Params, PolicyEngine, TickInput, TickOutcome,
    };

    fn engine(limits: Limits, source: &str) -> PolicyEngine {
        let mut e = PolicyEngine::new(limits);
        e.load("env", source).unwrap();
        e
    }

    fn params(pairs: &[&str]) -> Params {
        pairs.iter().map(|p| parse_param(p).unwrap()).collect()
    }

    fn tick(e: &mut PolicyEngine, tick: u64, servers: &[Metrics], params: &Params) -> TickOutcome {
        e.tick(&TickInput {
            now: tick as f64 * 2.0,
            tick,
            whoami: 0,
            servers,
            params,
            timeseries: &NoSeries,
        })
    }

    /// Runs ticks 1..=n; every tick's `when()` must return true without error.
    fn ticks_pass(e: &mut PolicyEngine, runs: &[(&[Metrics], &Params)]) {
        for (i, (servers, params)) in runs.iter().enumerate() {
            let out = tick(e, i as u64 + 1, servers, params);
            assert!(out.error.is_none(), "tick {}: {:?}", i + 1, out.error);
            assert_eq!(out.decision.when, Some(true), "tick {}", i + 1);
        }
    }

    fn server(cachesize: f64, hits: f64) -> Metrics {
        Metrics {
            cachesize,
            hits,
            ..Metrics::default()
        }
    }

    #[test]
    fn what_a_policy_changes_is_restored_at_the_next_tick() {
        let src = r#"
function when()
  if tick == 1 then
    servers[0].cachesize = -1
    servers[0].hits = nil
    servers[0].mine = "kept"
    params.n = 5
    params.mode = nil
    whoami, nservers, tick, now = 9, 9, 9, -1
    server, mds = nil, {}
    servers = {[0] = {cachesize = 1}}
    collectgarbage()
    return true
  end
  assert(servers[0].cachesize == 10 and math.type(servers[0].cachesize) == "integer")
  assert(servers[0].hits == 3, "a removed field is back")
  assert(servers[0].mine == "kept", "fields a policy adds stay")
  assert(params.n == 100 and params.mode == "lru", "params")
  assert(whoami == 0 and nservers == 1 and tick == 2 and now == 4.0, "globals")
  assert(server == servers and mds == servers and servers[0].capacity == math.huge)
  return true
end
"#;
        let mut e = engine(Limits::default(), src);
        let p = params(&["n=100", "mode=lru"]);
        let one = [server(10.0, 3.0)];
        ticks_pass(&mut e, &[(&one, &p), (&one, &p)]);
    }

    #[test]
    fn optional_fields_follow_what_the_host_reports() {
        let src = r#"
function when()
  local me = servers[0]
  if tick == 1 then
    assert(me.cpu == 1.0 and math.type(me.cpu) == "float" and me.cpu_load_avg == 1.0)
    assert(me.mem == 10 and math.type(me.mem) == "integer")
  elseif tick == 2 then
    assert(me.cpu == nil and me.cpu_load_avg == nil and me.mem == 10)
  else
    assert(me.cpu == nil and me.mem == nil)
    for k in pairs(me) do assert(k ~= "cpu" and k ~= "mem", k) end
  end
  return true
end
"#;
        let mut e = engine(Limits::default(), src);
        let p = Params::new();
        let both = [Metrics {
            cpu: Some(1.0),
            mem: Some(10.0),
            ..Metrics::default()
        }];
        let mem = [Metrics {
            mem: Some(10.0),
            ..Metrics::default()
        }];
        let none = [Metrics::default()];
        ticks_pass(&mut e, &[(&both, &p), (&mem, &p), (&none, &p)]);
    }

    #[test]
    fn a_new_server_count_or_new_params_rebuild_the_tables() {
        let src = r#"
local seen
function when()
  local n = 0
  for i, m in pairs(servers) do n = n + 1 assert(m.cachesize == i + 1) end
  assert(n == nservers, "servers 0..n-1")
  if tick == 1 then seen = servers[0] end
  if tick == 2 then assert(servers[0] == seen, "same shape keeps the tables") end
  if tick == 4 then assert(params.n == 7 and params.mode == nil, "new params") end
  return true
end
"#;
        let mut e = engine(Limits::default(), src);
        let p = params(&["n=1", "mode=lru"]);
        let q = params(&["n=7"]);
        let one = [server(1.0, 0.0)];
        let two = [server(1.0, 0.0), server(2.0, 0.0)];
        ticks_pass(&mut e, &[(&one, &p), (&one, &p), (&two, &p), (&two, &q)]);
    }

    #[test]
    fn the_engine_tables_have_a_locked_metatable() {
        let src = r#"
function when()
  assert(getmetatable(servers) == false and getmetatable(servers[0]) == false)
  assert(getmetatable(params) == false)
  assert(not pcall(setmetatable, servers[0], {__newindex = function() end}))
  return true
end
"#;
        let mut e = engine(Limits::default(), src);
        ticks_pass(&mut e, &[(&[Metrics::default()], &Params::new())]);
    }

    #[test]
    fn metamethods_on_globals_still_run_under_the_budget() {
        // With a metatable on `_G`, setting a global the policy removed calls its
        // `__newindex`; the environment then runs under the instruction budget.
        let src = r#"
function when()
  if tick == 1 then
    whoami = nil
    collectgarbage()
    setmetatable(_G, {__newindex = function() while true do end end})
  end
  return true
end
"#;
        let limits = Limits {
            instructions: 100_000,
            ..Limits::default()
        };
        let mut e = engine(limits, src);
        let one = [Metrics::default()];
        let p = Params::new();
        assert!(tick(&mut e, 1, &one, &p).error.is_none());
        let err = tick(&mut e, 2, &one, &p)
            .error
            .expect("the loop is stopped");
        assert!(err.message.contains("instruction budget"), "{err:?}");
    }
}
