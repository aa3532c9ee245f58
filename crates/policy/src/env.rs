//! The per-tick environment (`whoami`, `now`, `tick`, `servers`/`server`/`mds`, `nservers`,
//! `params`) and the *driver* that runs a tick's callbacks in one protected call. It runs at
//! every tick, so a tick of a trivial policy must cost a small fraction of a microsecond for
//! replay to tick every second of trace time at full speed.
//!
//! What a policy sees at each tick:
//!
//! * every global above holds the engine's value again, even if the policy reassigned it;
//! * `servers[i]` is the engine's metric table again and every documented field reads the
//!   host's current value (an optional one the host does not report reads `nil`), whatever
//!   the policy stored into it before;
//! * `params` holds every `--param` with its given value again.
//!
//! Fields a policy adds to these tables itself stay until it removes them.
//!
//! The metric and parameter tables are *lazy*: they hold none of the documented fields. A
//! read falls through to `__index`, a C function reading the host's metrics in place (or,
//! for `params`, the table of the given values), so a tick writes nothing per field and
//! costs what the policy reads. The first time a policy stores a documented field into one
//! (or removes one), the table turns into an ordinary table holding every field's current
//! value, so the rest of the tick sees exactly what a plain table would show; the next tick
//! finds it changed (it has raw fields, or not its lazy metatable) and empties it again.
//! `pairs` lists every field (`__pairs`); `next` and `rawget` see only what the policy
//! stored. The tables carry a protected metatable (`getmetatable` gives `false`,
//! `setmetatable` fails).
//!
//! The driver stores the globals and calls `load`, `when` and `howmuch` itself, so a tick is
//! one `lua_pcall`. The engine's own part runs without the instruction-count hook (Lua 5.4
//! runs `luaG_traceexec` at every VM instruction while any count hook is set): it arms the
//! hook, with a full budget, just before each callback and lifts it just after, through
//! two C functions. When the policy gave `_G` a metatable, storing a global could run policy
//! code, so the whole call then runs under the hook. Everything is rebuilt when the number
//! of servers or the parameters change.

use std::cell::{Cell, RefCell, UnsafeCell};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

use mlua::{ffi, Lua, RegistryKey, Value};

use crate::metrics::Metrics;
use crate::program::TickInput;
use crate::sandbox::Budget;
use crate::value::{Params, Scalar};

/// Called once per build with the tables and the engine's C functions; returns the driver.
const DRIVER: &str = r#"
local G, S, M, N, P, ALL, restore, arm, disarm, own_load = ...
return function(whoami, tick, now, dirty, LOAD, WHEN, HOWMUCH)
  if dirty then restore(ALL) end
  for i = 0, N - 1 do S[i] = M[i] end
  G.servers = S
  G.server = S
  G.mds = S
  G.params = P
  G.whoami = whoami
  G.nservers = N
  G.tick = tick
  G.now = now
  if LOAD then
    arm(1)
    local v = LOAD()
    disarm()
    if not own_load(v, M[whoami]) then return 0, v end
  end
  if WHEN then
    arm(2)
    local w = WHEN()
    disarm()
    if w ~= true then return 1, w end
  end
  if HOWMUCH then
    arm(3)
    local h = HOWMUCH()
    disarm()
    return 2, h
  end
  return 2
end
"#;

/// The documented metric fields, in the order `pairs` lists them.
const FIELDS: [&str; 23] = [
    "cachesize",
    "cachebytes",
    "capacity",
    "hits",
    "misses",
    "gets",
    "puts",
    "reqrate",
    "getrate",
    "putrate",
    "missrate",
    "hitrate",
    "backend_rate",
    "backend_queue",
    "evictions",
    "load",
    "auth.meta_load",
    "all.meta_load",
    "req_rate",
    "queue_len",
    "cpu",
    "cpu_load_avg",
    "mem",
];

/// How a metric is pushed: `Integral` values as integers when whole (so `100` prints as
/// `100`), `Float` always as floats (`cpu`, and a `load()` result, as the host gives them).
enum Field {
    Integral(f64),
    Float(f64),
}

/// The value of metric `key` of `m`, `None` for an unknown or unreported one. `own_load`:
/// the policy's `load()` result replaced `load` (it reads as a float).
fn field(m: &Metrics, key: &[u8], own_load: bool) -> Option<Field> {
    use Field::{Float, Integral};
    let load = |v: f64| if own_load { Float(v) } else { Integral(v) };
    Some(match key {
        b"cachesize" => Integral(m.cachesize),
        b"cachebytes" => Integral(m.cachebytes),
        b"capacity" => Integral(m.capacity),
        b"hits" => Integral(m.hits),
        b"misses" => Integral(m.misses),
        b"gets" => Integral(m.gets),
        b"puts" => Integral(m.puts),
        b"reqrate" | b"req_rate" => Integral(m.reqrate),
        b"getrate" => Integral(m.getrate),
        b"putrate" => Integral(m.putrate),
        b"missrate" => Integral(m.missrate),
        b"hitrate" => Integral(m.hitrate),
        b"backend_rate" => Integral(m.backend_rate),
        b"backend_queue" | b"queue_len" => Integral(m.backend_queue),
        b"evictions" => Integral(m.evictions),
        b"load" | b"auth.meta_load" | b"all.meta_load" => load(m.load),
        b"cpu" | b"cpu_load_avg" => Float(m.cpu?),
        b"mem" => Integral(m.mem?),
        _ => return None,
    })
}

/// What the engine's C functions share with the host. Boxed, so its address (held by the
/// Lua state as a light userdata) stays put; written by the host only while no Lua runs.
struct Shared {
    /// The metrics the lazy tables read, by server.
    servers: UnsafeCell<Vec<Metrics>>,
    whoami: Cell<usize>,
    /// Set once `load()` returned this tick: `servers[whoami].load` is its result.
    own_load: Cell<bool>,
    /// The callback running (see [`Stage`]), for errors.
    stage: Cell<u8>,
    /// The whole call runs under the hook (`_G` has a metatable): `arm`/`disarm` leave it.
    hooked: Cell<bool>,
    hook: Cell<Option<ffi::lua_Hook>>,
    mask: Cell<c_int>,
    count: Cell<c_int>,
    budget: Arc<Budget>,
}

/// The stage a driver call was at, by the number `arm` was given.
pub(crate) const STAGES: [&str; 4] = ["tick", "load", "when", "howmuch"];

/// What one driver call returned, when it did not fail.
pub(crate) enum Driven {
    /// `load()` returned something that is not a finite number.
    BadLoad(Value),
    /// `when()` returned something other than `true`.
    WhenNot(Value),
    /// Every callback ran; `howmuch()`'s result (nil without one).
    Done(Value),
}

/// The callbacks a driver call runs, as registry slots.
#[derive(Clone, Copy, Default)]
pub(crate) struct Callbacks<'a> {
    pub load: Option<&'a RegistryKey>,
    pub when: Option<&'a RegistryKey>,
    pub howmuch: Option<&'a RegistryKey>,
}

/// The driver of one Lua state, and what it was built for.
struct Built {
    /// Registry references of the driver and of the table listing every lazy table with
    /// its lazy metatable (`{t1, mt1, t2, mt2, ...}`).
    driver: c_int,
    all: c_int,
    servers: usize,
    params: Params,
}

/// The tick environment of one Lua state.
pub(crate) struct TickEnv {
    built: RefCell<Option<Built>>,
    shared: Box<Shared>,
}

impl TickEnv {
    pub(crate) fn new(budget: Arc<Budget>) -> TickEnv {
        TickEnv {
            built: RefCell::new(None),
            shared: Box::new(Shared {
                servers: UnsafeCell::new(Vec::new()),
                whoami: Cell::new(0),
                own_load: Cell::new(false),
                stage: Cell::new(0),
                hooked: Cell::new(false),
                hook: Cell::new(None),
                mask: Cell::new(0),
                count: Cell::new(0),
                budget,
            }),
        }
    }

    /// The stage the last driver call reached (an index into [`STAGES`]).
    pub(crate) fn stage(&self) -> usize {
        usize::from(self.shared.stage.get()).min(STAGES.len() - 1)
    }

    /// The `load()` result of this tick, if it ran.
    pub(crate) fn own_load(&self) -> Option<f64> {
        let s = &self.shared;
        if !s.own_load.get() {
            return None;
        }
        // SAFETY: no Lua code runs while the host reads.
        unsafe { (&*s.servers.get()).get(s.whoami.get()).map(|m| m.load) }
    }

    /// Sets the environment for `input` and runs `callbacks` in order, in one protected
    /// call. The caller refills the budget first: the call may run under the count hook.
    /// On error, [`TickEnv::stage`] names the callback that failed.
    pub(crate) fn drive(
        &self,
        lua: &Lua,
        input: &TickInput,
        callbacks: Callbacks,
    ) -> mlua::Result<Driven> {
        let s = &self.shared;
        // SAFETY: no Lua code runs while the host writes; the C functions only read.
        unsafe {
            let servers = &mut *s.servers.get();
            servers.clear();
            servers.extend_from_slice(input.servers);
        }
        s.whoami.set(input.whoami);
        s.own_load.set(false);
        s.stage.set(0);
        let mut built = self.built.borrow_mut();
        let reusable = built
            .as_ref()
            .is_some_and(|b| b.servers == input.servers.len() && b.params == *input.params);
        if !reusable {
            let old = built.take();
            *built = Some(build(lua, old, s, input.servers.len(), input.params)?);
        }
        let Some(b) = built.as_ref() else {
            return Ok(Driven::Done(Value::Nil));
        };
        let result = drive(lua, b, s, input, callbacks);
        if result.is_err() && s.stage.get() == 0 {
            // The environment may have been left half written; start afresh next time.
            if let Some(old) = built.take() {
                forget(lua, old);
            }
        }
        result
    }
}

/// Compiles the driver over fresh tables for `servers` servers and `params`, dropping the
/// registry references of `old`.
fn build(
    lua: &Lua,
    old: Option<Built>,
    shared: &Shared,
    servers: usize,
    params: &Params,
) -> mlua::Result<Built> {
    if let Some(old) = old {
        forget(lua, old);
    }
    let mut refs = [ffi::LUA_NOREF; 2];
    let refs_out: *mut [c_int; 2] = &mut refs;
    let shared_ptr = shared as *const Shared as *mut c_void;
    // SAFETY: balanced pushes inside `exec_raw`, which runs the closure in protected mode
    // (an allocation failure becomes an `Err`) and restores the stack. Nothing with a
    // destructor lives in the closure, which a Lua error would jump over. The light
    // userdata outlives the state: `Program` drops its Lua state before its `TickEnv`.
    unsafe {
        lua.exec_raw::<()>((), |l| {
            let loaded = ffi::luaL_loadbufferx(
                l,
                DRIVER.as_ptr().cast(),
                DRIVER.len(),
                c"=environment".as_ptr(),
                c"t".as_ptr(),
            );
            if loaded != ffi::LUA_OK {
                ffi::lua_error(l);
            }
            push_tables(l, shared_ptr, servers, params);
            ffi::lua_call(l, 10, 1);
            let driver = ffi::luaL_ref(l, ffi::LUA_REGISTRYINDEX);
            let all = ffi::luaL_ref(l, ffi::LUA_REGISTRYINDEX);
            refs_out.write_volatile([driver, all]);
        })?;
    }
    let [driver, all] = refs;
    Ok(Built {
        driver,
        all,
        servers,
        params: params.clone(),
    })
}

/// Pushes `ALL` (kept by the caller), then the driver chunk's arguments: `_G`, `servers`,
/// the metric tables by server number, the server count, `params`, `ALL` and the engine's C
/// functions.
unsafe fn push_tables(
    l: *mut ffi::lua_State,
    shared: *mut c_void,
    servers: usize,
    params: &Params,
) {
    // Below the chunk: ALL, for the caller's reference. The chunk sits on top of it.
    let chunk = ffi::lua_gettop(l);
    ffi::lua_createtable(l, 2 * (servers as c_int + 1), 0); // chunk ALL
    ffi::lua_insert(l, chunk); // ALL chunk
    let all = chunk;
    ffi::lua_rawgeti(l, ffi::LUA_REGISTRYINDEX, ffi::LUA_RIDX_GLOBALS); // G
    ffi::lua_createtable(l, 0, 1); // G lock
    let lock = ffi::lua_gettop(l);
    ffi::lua_pushboolean(l, 0);
    ffi::lua_setfield(l, lock, c"__metatable".as_ptr());
    ffi::lua_createtable(l, 0, servers as c_int); // G lock S
    ffi::lua_pushvalue(l, lock);
    ffi::lua_setmetatable(l, -2);
    // The metric tables, and the names their `pairs` and materialisation walk.
    ffi::lua_createtable(l, 0, servers as c_int); // G lock S M
    let m = ffi::lua_gettop(l);
    ffi::lua_createtable(l, FIELDS.len() as c_int, 0); // ... M names
    ffi::lua_createtable(l, 0, FIELDS.len() as c_int); // ... M names pos
    let (names, pos) = (m + 1, m + 2);
    for (j, name) in (1..).zip(FIELDS) {
        push_str(l, name);
        ffi::lua_pushvalue(l, -1);
        ffi::lua_rawseti(l, names, j);
        ffi::lua_pushinteger(l, j);
        ffi::lua_rawset(l, pos);
    }
    let mut slot = 1;
    for i in 0..servers {
        ffi::lua_pushlightuserdata(l, shared);
        ffi::lua_pushinteger(l, i as ffi::lua_Integer);
        ffi::lua_pushcclosure(l, metric_index, 2);
        push_lazy(l, all, &mut slot, names, pos); // ... M names pos proxy
        ffi::lua_rawseti(l, m, i as ffi::lua_Integer);
    }
    ffi::lua_settop(l, m); // G lock S M
    ffi::lua_pushinteger(l, servers as ffi::lua_Integer); // G lock S M N
                                                          // `params`: its values, names and positions.
    ffi::lua_createtable(l, 0, params.len() as c_int); // ... N values
    let values = ffi::lua_gettop(l);
    ffi::lua_createtable(l, params.len() as c_int, 0); // ... N values names
    ffi::lua_createtable(l, 0, params.len() as c_int); // ... N values names pos
    for (j, (key, value)) in (1..).zip(params) {
        push_str(l, key);
        push_scalar(l, value);
        ffi::lua_rawset(l, values);
        push_str(l, key);
        ffi::lua_rawseti(l, values + 1, j);
        push_str(l, key);
        ffi::lua_pushinteger(l, j);
        ffi::lua_rawset(l, values + 2);
    }
    ffi::lua_pushvalue(l, values); // ... N values names pos __index
    push_lazy(l, all, &mut slot, values + 1, values + 2); // ... N values names pos P
    ffi::lua_replace(l, values); // ... N P names pos
    ffi::lua_settop(l, values); // G lock S M N P
    ffi::lua_pushvalue(l, all); // ... P ALL
    ffi::lua_pushcclosure(l, restore_all, 0);
    ffi::lua_pushlightuserdata(l, shared);
    ffi::lua_pushcclosure(l, arm, 1);
    ffi::lua_pushlightuserdata(l, shared);
    ffi::lua_pushcclosure(l, disarm, 1);
    ffi::lua_pushlightuserdata(l, shared);
    ffi::lua_pushcclosure(l, own_load, 1); // G lock S M N P ALL restore arm disarm own_load
    ffi::lua_remove(l, lock); // G S M N P ALL restore arm disarm own_load
}

/// Pops an `__index` (function or table) and pushes an empty lazy table reading through it,
/// with `names`/`pos` (stack indices) for `pairs` and materialisation; records the table and
/// its metatable in `ALL` from `*slot` on.
unsafe fn push_lazy(
    l: *mut ffi::lua_State,
    all: c_int,
    slot: &mut ffi::lua_Integer,
    names: c_int,
    pos: c_int,
) {
    let index = ffi::lua_gettop(l);
    ffi::lua_createtable(l, 0, 8); // index lazy
    let lazy = index + 1;
    ffi::lua_pushboolean(l, 0);
    ffi::lua_setfield(l, lazy, c"__metatable".as_ptr());
    ffi::lua_pushvalue(l, index);
    ffi::lua_setfield(l, lazy, c"__index".as_ptr());
    ffi::lua_pushcclosure(l, lazy_newindex, 0);
    ffi::lua_setfield(l, lazy, c"__newindex".as_ptr());
    ffi::lua_pushcclosure(l, lazy_pairs, 0);
    ffi::lua_setfield(l, lazy, c"__pairs".as_ptr());
    ffi::lua_pushvalue(l, names);
    ffi::lua_setfield(l, lazy, c"__names".as_ptr());
    ffi::lua_pushvalue(l, pos);
    ffi::lua_setfield(l, lazy, c"__pos".as_ptr());
    // The metatable of the table once materialised: locked, no metamethods, and the way back.
    ffi::lua_createtable(l, 0, 2); // index lazy mat
    ffi::lua_pushboolean(l, 0);
    ffi::lua_setfield(l, -2, c"__metatable".as_ptr());
    ffi::lua_pushvalue(l, lazy);
    ffi::lua_setfield(l, -2, c"__lazy".as_ptr());
    ffi::lua_setfield(l, lazy, c"__mat".as_ptr()); // index lazy
    ffi::lua_createtable(l, 0, 0); // index lazy t
    ffi::lua_pushvalue(l, lazy);
    ffi::lua_setmetatable(l, -2);
    ffi::lua_pushvalue(l, -1);
    ffi::lua_rawseti(l, all, *slot);
    ffi::lua_pushvalue(l, lazy);
    ffi::lua_rawseti(l, all, *slot + 1);
    *slot += 2;
    ffi::lua_replace(l, index); // t lazy
    ffi::lua_settop(l, index); // t
}

/// Drops the registry references of a driver.
fn forget(lua: &Lua, built: Built) {
    lua.exec_raw_lua(|raw| {
        // SAFETY: `luaL_unref` only stores into the registry's existing slots.
        unsafe {
            for r in [built.driver, built.all] {
                ffi::luaL_unref(raw.state(), ffi::LUA_REGISTRYINDEX, r);
            }
        }
    });
}

/// Whether any lazy table was changed by the policy: it holds fields of its own (added ones
/// stay, but documented ones must go), or it was materialised (its metatable is not the
/// lazy one). Neither allocates nor runs policy code.
unsafe fn any_changed(l: *mut ffi::lua_State, all: c_int) -> bool {
    let top = ffi::lua_gettop(l);
    ffi::lua_rawgeti(l, ffi::LUA_REGISTRYINDEX, all.into());
    let list = top + 1;
    let mut j = 1;
    let mut changed = false;
    while ffi::lua_rawgeti(l, list, j) == ffi::LUA_TTABLE {
        ffi::lua_rawgeti(l, list, j + 1);
        let t = top + 2;
        ffi::lua_pushnil(l);
        if ffi::lua_next(l, t) != 0 {
            changed = true;
        } else if ffi::lua_getmetatable(l, t) == 0 || ffi::lua_rawequal(l, -1, t + 1) == 0 {
            changed = true;
        }
        ffi::lua_settop(l, list);
        if changed {
            break;
        }
        j += 2;
    }
    ffi::lua_settop(l, top);
    changed
}

/// Calls the driver for `input`, the hook lifted unless `_G` has a metatable.
fn drive(
    lua: &Lua,
    built: &Built,
    shared: &Shared,
    input: &TickInput,
    callbacks: Callbacks,
) -> mlua::Result<Driven> {
    lua.exec_raw_lua(|raw| {
        let l = raw.state();
        // SAFETY: the pushes fit in the space checked for and are popped by the protected
        // call, which catches every Lua error; the stack and the hook are restored on every
        // path. The hook is lifted only while no policy code can run (see the module
        // documentation): `arm` sets it again before each callback.
        unsafe {
            if ffi::lua_checkstack(l, 12) == 0 {
                return Err(mlua::Error::runtime("Lua stack exhausted"));
            }
            let top = ffi::lua_gettop(l);
            ffi::lua_rawgeti(l, ffi::LUA_REGISTRYINDEX, ffi::LUA_RIDX_GLOBALS);
            let plain_globals = ffi::lua_getmetatable(l, -1) == 0;
            ffi::lua_settop(l, top);
            let dirty = any_changed(l, built.all);
            let saved = SavedHook {
                hook: ffi::lua_gethook(l),
                mask: ffi::lua_gethookmask(l),
                count: ffi::lua_gethookcount(l),
            };
            shared.hook.set(saved.hook);
            shared.mask.set(saved.mask);
            shared.count.set(saved.count);
            shared.hooked.set(!plain_globals);
            if plain_globals && saved.mask != 0 {
                ffi::lua_sethook(l, None, 0, 0);
            }
            ffi::lua_rawgeti(l, ffi::LUA_REGISTRYINDEX, built.driver.into());
            ffi::lua_pushinteger(l, input.whoami as ffi::lua_Integer);
            ffi::lua_pushinteger(l, input.tick as ffi::lua_Integer);
            ffi::lua_pushnumber(l, input.now);
            ffi::lua_pushboolean(l, c_int::from(dirty));
            for key in [callbacks.load, callbacks.when, callbacks.howmuch] {
                match key {
                    Some(key) => {
                        ffi::lua_rawgeti(l, ffi::LUA_REGISTRYINDEX, key.id().into());
                    }
                    None => ffi::lua_pushnil(l),
                }
            }
            let result = match ffi::lua_pcall(l, 7, 2, 0) {
                ffi::LUA_OK => {
                    let value = raw.pop_value();
                    let code = ffi::lua_tointegerx(l, -1, std::ptr::null_mut());
                    Ok(match code {
                        0 => Driven::BadLoad(value),
                        1 => Driven::WhenNot(value),
                        _ => Driven::Done(value),
                    })
                }
                _ => Err(error_from(raw.pop_value())),
            };
            ffi::lua_settop(l, top);
            saved.restore(l);
            result
        }
    })
}

unsafe fn shared<'a>(l: *mut ffi::lua_State) -> &'a Shared {
    &*(ffi::lua_touserdata(l, ffi::lua_upvalueindex(1)) as *const Shared)
}

/// `arm(stage)`: a full budget for the next callback, and the count hook set.
unsafe extern "C-unwind" fn arm(l: *mut ffi::lua_State) -> c_int {
    let s = shared(l);
    s.stage
        .set(ffi::lua_tointegerx(l, 1, std::ptr::null_mut()) as u8);
    s.budget.refill();
    if !s.hooked.get() && s.mask.get() != 0 {
        ffi::lua_sethook(l, s.hook.get(), s.mask.get(), s.count.get());
    }
    0
}

/// `disarm()`: the count hook lifted again after a callback returned.
unsafe extern "C-unwind" fn disarm(l: *mut ffi::lua_State) -> c_int {
    let s = shared(l);
    if !s.hooked.get() && s.mask.get() != 0 {
        ffi::lua_sethook(l, None, 0, 0);
    }
    0
}

/// `own_load(v, t)`: when `v` is a finite number, makes it `servers[whoami].load` (and its
/// Ceph names) for the later callbacks, also in `t` if the policy materialised it, and
/// returns true; else false (the host reports the error).
unsafe extern "C-unwind" fn own_load(l: *mut ffi::lua_State) -> c_int {
    let s = shared(l);
    let mut isnum = 0;
    let v = ffi::lua_tonumberx(l, 1, &mut isnum);
    if ffi::lua_type(l, 1) != ffi::LUA_TNUMBER || isnum == 0 || !v.is_finite() {
        ffi::lua_pushboolean(l, 0);
        return 1;
    }
    let servers = &mut *s.servers.get();
    if let Some(m) = servers.get_mut(s.whoami.get()) {
        m.load = v;
    }
    s.own_load.set(true);
    if ffi::lua_type(l, 2) == ffi::LUA_TTABLE && ffi::lua_getmetatable(l, 2) != 0 {
        if ffi::lua_getfield(l, -1, c"__lazy".as_ptr()) != ffi::LUA_TNIL {
            for name in [c"load", c"auth.meta_load", c"all.meta_load"] {
                ffi::lua_pushnumber(l, v);
                ffi::lua_setfield(l, 2, name.as_ptr());
            }
        }
    }
    ffi::lua_pushboolean(l, 1);
    1
}

/// `__index` of `servers[i]`: the host's current value of a documented metric.
unsafe extern "C-unwind" fn metric_index(l: *mut ffi::lua_State) -> c_int {
    let s = shared(l);
    if ffi::lua_type(l, 2) != ffi::LUA_TSTRING {
        ffi::lua_pushnil(l);
        return 1;
    }
    let i = ffi::lua_tointegerx(l, ffi::lua_upvalueindex(2), std::ptr::null_mut()) as usize;
    let mut len = 0;
    let p = ffi::lua_tolstring(l, 2, &mut len);
    let key = std::slice::from_raw_parts(p.cast::<u8>(), len);
    let servers = &*s.servers.get();
    let own = s.own_load.get() && i == s.whoami.get();
    match servers.get(i).and_then(|m| field(m, key, own)) {
        Some(Field::Integral(v)) => push_number(l, v),
        Some(Field::Float(v)) => ffi::lua_pushnumber(l, v),
        None => ffi::lua_pushnil(l),
    }
    1
}

/// `__newindex` of a lazy table: a key that is not a documented field is stored as in a
/// plain table; storing (or removing) a documented one first materialises the table.
unsafe extern "C-unwind" fn lazy_newindex(l: *mut ffi::lua_State) -> c_int {
    ffi::lua_settop(l, 3); // t k v
    if ffi::lua_getmetatable(l, 1) != 0 {
        // t k v mt
        ffi::lua_getfield(l, 4, c"__pos".as_ptr()); // t k v mt pos
        ffi::lua_pushvalue(l, 2);
        if ffi::lua_rawget(l, 5) != ffi::LUA_TNIL {
            ffi::lua_getfield(l, 4, c"__names".as_ptr()); // t k v mt pos found names
            let names = 7;
            let n = ffi::lua_rawlen(l, names) as ffi::lua_Integer;
            for j in 1..=n {
                ffi::lua_rawgeti(l, names, j); // ... name
                ffi::lua_pushvalue(l, -1);
                ffi::lua_gettable(l, 1); // ... name value (read through __index)
                ffi::lua_rawset(l, 1);
            }
            ffi::lua_getfield(l, 4, c"__mat".as_ptr());
            ffi::lua_setmetatable(l, 1);
        }
        ffi::lua_settop(l, 3);
    }
    ffi::lua_rawset(l, 1);
    0
}

/// `__pairs` of a lazy table.
unsafe extern "C-unwind" fn lazy_pairs(l: *mut ffi::lua_State) -> c_int {
    ffi::lua_pushcclosure(l, lazy_next, 0);
    ffi::lua_pushvalue(l, 1);
    ffi::lua_pushnil(l);
    3
}

/// The iterator of [`lazy_pairs`]: the documented fields that are not nil, then the
/// table's own fields.
unsafe extern "C-unwind" fn lazy_next(l: *mut ffi::lua_State) -> c_int {
    ffi::lua_settop(l, 2); // t k
    let mut start = 1;
    if ffi::lua_getmetatable(l, 1) != 0
        && ffi::lua_getfield(l, 3, c"__names".as_ptr()) == ffi::LUA_TTABLE
    {
        // t k mt names
        let mut own_key = false;
        if ffi::lua_type(l, 2) != ffi::LUA_TNIL {
            ffi::lua_getfield(l, 3, c"__pos".as_ptr()); // t k mt names pos
            ffi::lua_pushvalue(l, 2);
            ffi::lua_rawget(l, 5);
            let mut isnum = 0;
            let j = ffi::lua_tointegerx(l, -1, &mut isnum);
            if isnum != 0 {
                start = j + 1;
            } else {
                own_key = true;
            }
            ffi::lua_settop(l, 4);
        }
        if !own_key {
            let n = ffi::lua_rawlen(l, 4) as ffi::lua_Integer;
            for j in start..=n {
                ffi::lua_rawgeti(l, 4, j); // t k mt names name
                ffi::lua_pushvalue(l, -1);
                if ffi::lua_gettable(l, 1) != ffi::LUA_TNIL {
                    return 2;
                }
                ffi::lua_settop(l, 4);
            }
            ffi::lua_pushnil(l);
            ffi::lua_replace(l, 2);
        }
    }
    ffi::lua_settop(l, 2);
    if ffi::lua_next(l, 1) != 0 {
        2
    } else {
        ffi::lua_pushnil(l);
        1
    }
}

/// `restore(ALL)`: every lazy table emptied of documented fields and lazy again.
unsafe extern "C-unwind" fn restore_all(l: *mut ffi::lua_State) -> c_int {
    ffi::lua_settop(l, 1);
    let mut j = 1;
    while ffi::lua_rawgeti(l, 1, j) == ffi::LUA_TTABLE {
        ffi::lua_rawgeti(l, 1, j + 1); // ALL t lazy
        ffi::lua_getfield(l, 3, c"__names".as_ptr()); // ALL t lazy names
        let n = ffi::lua_rawlen(l, 4) as ffi::lua_Integer;
        for k in 1..=n {
            ffi::lua_rawgeti(l, 4, k);
            ffi::lua_pushnil(l);
            ffi::lua_rawset(l, 2);
        }
        ffi::lua_pushvalue(l, 3);
        ffi::lua_setmetatable(l, 2);
        ffi::lua_settop(l, 1);
        j += 2;
    }
    0
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

/// The count hook as it was before a driver call lifted it.
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
