//! Per-request hooks of a policy file (`admit`, `on_hit`, `on_insert`, `on_evict`,
//! `priority`, `evict`), run for the cache ([`cache::hooks::ObjectHooks`]) in a state of the
//! policy sandbox: the same libraries, memory ceiling, and an instruction budget and time
//! limit per hook call.
//!
//! The hooks get their own Lua state, separate from the tick callbacks': a hook runs on the
//! request path under the cache's lock, a tick on the policy's task, and one state shared by
//! both would let either hold the other up (and a tick's refilled budget would restart a
//! hook's). The file's top level runs once in each.
//!
//! A call reuses one `obj` table and fills only the fields the file names (`obj.id`,
//! `obj.last_access`, ...: a scan of the source at load); the other fields and the user
//! numbers `obj[1..4]` are reached through the table's metatable, whose C functions read and
//! write the host's record of the object directly, so nothing is copied back after a call
//! and a hook pays only for what it touches. `bench/hooks_vs_plugincache` measures it.
//!
//! A hook of straight-line code (no loop, no call: [`crate::straight_line`]) runs without
//! the budget's count hook, which would make the VM trap before each of its instructions:
//! it cannot run longer than the count hook lets any code run between two checks. Lua code
//! it could reach without a call instruction runs only as a metamethod, which needs a
//! metatable set from Lua: once the file's code has called `setmetatable`, every hook runs
//! under the count hook again.
//!
//! A `priority` hook that only returns fields and user numbers of `obj` is not called: its
//! results are read from the host's record ([`crate::projection`]).

use std::cell::Cell;
use std::ffi::{c_int, CStr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cache::hooks::{
    HookFailure, HookObject, HookSet, HookSource, ObjectHooks, Placement, MAX_QUEUES, USER_NUMBERS,
};
use mlua::{ffi, ChunkMode, Lua, RegistryKey, Value};

use crate::budget::{Budget, Interrupt};
use crate::env::{error_from, TickEnv, TickInput};
use crate::error::{line_of, root_message, LoadError, PolicyId};
use crate::host::HostShared;
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::program::{describe, install_host_functions, HOOKS};
use crate::projection::{projection_of, Projection, Source};
use crate::series::NoSeries;
use crate::series_object::SeriesSlot;
use crate::value::Params;

const ADMIT: usize = 0;
const ON_HIT: usize = 1;
const ON_INSERT: usize = 2;
const ON_EVICT: usize = 3;
const PRIORITY: usize = 4;
const EVICT: usize = 5;

/// Whether `source` defines a hook at its top level (a cheap scan the hosts use before
/// building a scripted cache; [`ScriptHooks::compile`] decides for certain).
pub fn mentions_hooks(source: &str) -> bool {
    HOOKS
        .iter()
        .any(|h| source.contains(&format!("function {h}(")) || source.contains(&format!("{h} =")))
}

/// A policy file's hooks, compiled in their own sandboxed state.
pub struct ScriptHooks {
    lua: Lua,
    /// `lua`'s main state, called directly: a hook call through mlua's `exec_raw_lua` takes
    /// its reentrant lock each time (about 6% of a Lua-hook replay).
    state: RawState,
    budget: Arc<Budget>,
    limits: Limits,
    defined: HookSet,
    /// Where the hook functions, the tables and the field names sit on the stack.
    pins: Pins,
    /// Which of [`FIELDS`] the source names, so each call stores them in the table (the
    /// others are answered by the metatable, as the file never reads them by name).
    stored: [bool; 5],
    /// The object each table stands for during a call (the `obj` table first): what its
    /// metatable's functions read and write. Boxed: the functions hold its address.
    bound: Box<[Bound; 1 + MAX_QUEUES]>,
    /// Which hooks (by index) are straight-line code.
    straight: [bool; 6],
    /// `priority`'s results when it only returns fields of `obj` ([`crate::projection`]):
    /// read from the host's record without a call.
    projection: Option<Projection>,
    /// Set once the file's code has called `setmetatable` (at its top level or in a hook):
    /// from then on a metamethod may run Lua code that no call instruction shows.
    metatables: Arc<AtomicBool>,
    /// The budget's count hook as the sandbox set it, and whether it is lifted now.
    count_hook: SavedHook,
    lifted: Cell<bool>,
    /// Keeps the registry entries behind `pins` alive.
    _keys: Vec<RegistryKey>,
    _host: Arc<Mutex<HostShared>>,
    // Declared last: the Lua state holds its address and must be dropped first.
    _slot: Box<SeriesSlot>,
}

/// Stack indices (absolute) of what every hook call pushes: the hook functions (nil where
/// not defined), the reused `obj` table, the candidates' tables and the field names. They
/// are pushed once, at the bottom of the hooks' own state's stack, where nothing pops them
/// (mlua and the calls here restore the top they found): `lua_pushvalue` of a slot costs a
/// third of a `lua_rawgeti` from the registry, paid several times a call.
struct Pins {
    functions: [c_int; 6],
    obj: c_int,
    candidates: [c_int; MAX_QUEUES],
    names: [c_int; 5],
}

impl Pins {
    /// Pushes the registry entries `functions` (0: none), `tables` (`obj`'s first) and
    /// `names` onto the stack of `lua`'s main state, to stay there.
    fn push(
        lua: &Lua,
        functions: [i32; 6],
        tables: [i32; 1 + MAX_QUEUES],
        names: [i32; 5],
    ) -> mlua::Result<Pins> {
        // SAFETY: pushes within the space checked for; `lua_rawgeti` of the registry cannot
        // raise (an integer key, a table without metamethods).
        lua.exec_raw_lua(|raw| unsafe {
            let l = raw.state();
            if ffi::lua_checkstack(l, (6 + 1 + MAX_QUEUES + 5) as c_int) == 0 {
                return Err(mlua::Error::runtime("Lua stack exhausted"));
            }
            let mut push = |id: i32| {
                match id {
                    0 => ffi::lua_pushnil(l),
                    id => {
                        ffi::lua_rawgeti(l, ffi::LUA_REGISTRYINDEX, id.into());
                    }
                }
                ffi::lua_gettop(l)
            };
            let functions = functions.map(&mut push);
            let tables = tables.map(&mut push);
            let names = names.map(&mut push);
            let mut candidates = [0; MAX_QUEUES];
            candidates.copy_from_slice(&tables[1..]);
            Ok(Pins {
                functions,
                obj: tables[0],
                candidates,
                names,
            })
        })
    }
}

/// The main state of a [`ScriptHooks`]' own `Lua`.
struct RawState(*mut ffi::lua_State);

// SAFETY: the state belongs to the `Lua` beside it in the same `ScriptHooks` (which is `Send`
// with mlua's `send` feature) and is used only by whoever holds that `ScriptHooks`; no other
// handle of that `Lua` runs code on another thread.
unsafe impl Send for RawState {}

// A server's cache is shared by its threads: keep the hooks `Send` (mlua's `send` feature).
const _: fn() = || {
    fn send<T: Send>() {}
    send::<ScriptHooks>();
};

impl ScriptHooks {
    /// Compiles the policy file at `path` for its hooks; `Ok(None)` when it defines none.
    pub fn from_file(
        path: &Path,
        params: &Params,
        limits: &Limits,
    ) -> Result<Option<ScriptHooks>, LoadError> {
        let source = crate::read_policy_source(path).map_err(|message| LoadError::Io {
            path: path.display().to_string(),
            message,
        })?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "policy".to_string());
        ScriptHooks::compile(
            &name,
            &format!("@{}", path.display()),
            &source,
            params,
            limits,
            Interrupt::default(),
        )
    }

    /// Runs `source`'s top level in a fresh sandbox (with `params` set, as a tick sees them)
    /// and keeps the hooks it defines; `Ok(None)` when it defines none.
    pub fn compile(
        name: &str,
        chunk_name: &str,
        source: &str,
        params: &Params,
        limits: &Limits,
        interrupt: Interrupt,
    ) -> Result<Option<ScriptHooks>, LoadError> {
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
        let id = PolicyId::new(name, 1);
        install_host_functions(&lua, &id, &host, &slot, &budget).map_err(setup)?;
        let metatables = watch_setmetatable(&lua).map_err(setup)?;
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
        let globals = lua.globals();
        let mut keys = Vec::new();
        let mut functions = [0; 6];
        for (i, name) in HOOKS.iter().enumerate() {
            if let Ok(Value::Function(f)) = globals.raw_get::<Value>(*name) {
                let key = lua.create_registry_value(f).map_err(setup)?;
                functions[i] = key.id();
                keys.push(key);
            }
        }
        if functions.iter().all(|&f| f == 0) {
            return Ok(None);
        }
        let bound: Box<[Bound; 1 + MAX_QUEUES]> = Box::default();
        let mut tables = [0; 1 + MAX_QUEUES];
        for (id, bound) in tables.iter_mut().zip(bound.iter()) {
            *id = bound_table(&lua, bound).map_err(setup)?;
        }
        let code = crate::source_scan::without_comments(source);
        let stored = FIELDS.map(|field| names_field(&code, field));
        let mut names = [0; 5];
        for (id, name) in names.iter_mut().zip(FIELDS) {
            let key = lua.create_registry_value(lua.create_string(name).map_err(setup)?);
            let key = key.map_err(setup)?;
            *id = key.id();
            keys.push(key);
        }
        let pins = Pins::push(&lua, functions, tables, names).map_err(setup)?;
        let state = RawState(lua.exec_raw_lua(|raw| raw.state()));
        // SAFETY: pushes one pinned value at a time and pops it again (the dump writer only
        // reads the function); reads the state's hook.
        let (straight, count_hook, projection) = unsafe {
            let l = state.0;
            let straight = pins.functions.map(|at| {
                ffi::lua_pushvalue(l, at);
                let straight = crate::straight_line::is_straight_line(l);
                ffi::lua_pop(l, 1);
                straight
            });
            let count_hook = SavedHook {
                hook: ffi::lua_gethook(l),
                mask: ffi::lua_gethookmask(l),
                count: ffi::lua_gethookcount(l),
            };
            ffi::lua_pushvalue(l, pins.functions[PRIORITY]);
            let dump = crate::straight_line::dump_of(l);
            ffi::lua_pop(l, 1);
            let projection = dump.and_then(|d| projection_of(&d, &FIELDS, USER_NUMBERS));
            (straight, count_hook, projection)
        };
        let defined = HookSet {
            admit: functions[ADMIT] != 0,
            on_hit: functions[ON_HIT] != 0,
            on_insert: functions[ON_INSERT] != 0,
            on_evict: functions[ON_EVICT] != 0,
            priority: functions[PRIORITY] != 0,
            evict: functions[EVICT] != 0,
        };
        Ok(Some(ScriptHooks {
            lua,
            state,
            budget,
            limits: *limits,
            defined,
            pins,
            stored,
            bound,
            straight,
            projection,
            metatables,
            count_hook,
            lifted: Cell::new(false),
            _keys: keys,
            _host: host,
            _slot: slot,
        }))
    }

    /// Calls hook `which` with the objects in `tables` (bound to `objs` for the call), then
    /// hands the results to `read` with the stack holding them at `top + 1 ..`. User numbers
    /// the hook sets land in `objs` directly.
    fn call<R>(
        &self,
        which: usize,
        objs: &mut [HookObject],
        tables: &[i32],
        bound: &[Bound],
        results: i32,
        read: impl FnOnce(*mut ffi::lua_State, i32) -> Result<R, String>,
    ) -> Result<R, HookFailure> {
        let hook = HOOKS[which];
        self.budget.refill();
        let l = self.state.0;
        self.lift_count_hook(self.straight[which] && !self.metatables.load(Ordering::Relaxed));
        let outcome = 'call: {
            // SAFETY: pushes within the space checked for; a protected call that catches every
            // Lua error; the stack restored to `top` on every path. The bound pointers are
            // taken from `objs`, which outlives the call, and cleared before it returns.
            unsafe {
                if ffi::lua_checkstack(l, 8 + objs.len() as i32) == 0 {
                    break 'call Err(Err("Lua stack exhausted".to_string()));
                }
                let top = ffi::lua_gettop(l);
                ffi::lua_pushvalue(l, self.pins.functions[which]);
                for ((obj, &table), bound) in objs.iter_mut().zip(tables).zip(bound) {
                    bound.obj.set(obj);
                    ffi::lua_pushvalue(l, table);
                    self.fill(l, obj);
                }
                let called = ffi::lua_pcall(l, objs.len() as i32, results, 0);
                for bound in &bound[..objs.len()] {
                    bound.obj.set(std::ptr::null_mut());
                }
                let result = match called {
                    ffi::LUA_OK => read(l, top).map_err(Err),
                    // The error value is on top of this same state's stack.
                    _ => Err(Ok(error_from(self.lua.exec_raw_lua(|raw| raw.pop_value())))),
                };
                ffi::lua_settop(l, top);
                result
            }
        };
        outcome.map_err(|e| HookFailure {
            hook,
            message: match e {
                Ok(error) => describe(&error, &self.budget, &self.limits),
                Err(bad) => format!("bad result: {bad}"),
            },
        })
    }

    /// Lifts the budget's count hook for the next call (`lift`) or puts it back. Only hook
    /// calls run code in this state, and each sets the hook it needs first.
    fn lift_count_hook(&self, lift: bool) {
        if self.lifted.get() == lift {
            return;
        }
        let l = self.state.0;
        // SAFETY: sets the state's hook between calls (nothing runs in the state now).
        unsafe {
            match lift {
                true => ffi::lua_sethook(l, None, 0, 0),
                false => {
                    let saved = &self.count_hook;
                    ffi::lua_sethook(l, saved.hook, saved.mask, saved.count);
                }
            }
        }
        self.lifted.set(lift);
    }

    /// Stores the fields of `obj` the file names into the table on top of the stack.
    unsafe fn fill(&self, l: *mut ffi::lua_State, obj: &HookObject) {
        let values = [
            obj.id as i64,
            obj.size.into(),
            obj.hits as i64,
            obj.last_access as i64,
            obj.inserted as i64,
        ];
        for ((&name, value), stored) in self.pins.names.iter().zip(values).zip(self.stored) {
            if stored {
                ffi::lua_pushvalue(l, name);
                ffi::lua_pushinteger(l, value);
                ffi::lua_rawset(l, -3);
            }
        }
    }

    fn call_one<R>(
        &self,
        which: usize,
        obj: &mut HookObject,
        results: i32,
        read: impl FnOnce(*mut ffi::lua_State, i32) -> Result<R, String>,
    ) -> Result<R, HookFailure> {
        let bound = &self.bound[..1];
        self.call(
            which,
            std::slice::from_mut(obj),
            &[self.pins.obj],
            bound,
            results,
            read,
        )
    }
}

impl ScriptHooks {
    /// The placement a projection `priority` hook would give `obj`, read from `obj` itself
    /// (`None`: run the hook, as the file has `rawset` a user number into `obj`'s table, which
    /// the hook would then read instead).
    fn project(
        &self,
        projection: Projection,
        obj: &HookObject,
    ) -> Option<Result<Placement, String>> {
        // As the Lua path reads its results: an integral number as an integer.
        let priority = match self.read(projection.first, obj)? {
            Number::Integer(i) => i as f64,
            Number::Float(x) => exact_integer(x).map_or(x, |i| i as f64),
        };
        let queue = match projection.second {
            None => None,
            Some(source) => Some(match self.read(source, obj)? {
                Number::Integer(i) => Some(i),
                Number::Float(x) => exact_integer(x),
            }),
        };
        Some(placement(priority, queue))
    }

    /// What the hook's `obj.FIELD` or `obj[i]` reads for `obj`.
    fn read(&self, source: Source, obj: &HookObject) -> Option<Number> {
        Some(match source {
            Source::Field(field) => Number::Integer(field_value(obj, field)),
            Source::User(i) => {
                let l = self.state.0;
                // SAFETY: a raw read runs no metamethod and cannot raise; one push within the
                // space checked for, popped again.
                let raw = unsafe {
                    if ffi::lua_checkstack(l, 1) == 0 {
                        return None;
                    }
                    let kind = ffi::lua_rawgeti(l, self.pins.obj, i as ffi::lua_Integer + 1);
                    ffi::lua_pop(l, 1);
                    kind
                };
                if raw != ffi::LUA_TNIL {
                    return None;
                }
                Number::Float(obj.user[i])
            }
        })
    }
}

/// A number a projection reads: the host's fields are integers, user numbers floats (as the
/// table's metatable pushes them).
enum Number {
    Integer(i64),
    Float(f64),
}

/// Field `field` (an index into [`FIELDS`]) of `obj`, as a hook reads it.
fn field_value(obj: &HookObject, field: usize) -> i64 {
    [
        obj.id as i64,
        obj.size.into(),
        obj.hits as i64,
        obj.last_access as i64,
        obj.inserted as i64,
    ][field]
}

/// The budget's count hook of a state, to set again after lifting it.
struct SavedHook {
    hook: Option<ffi::lua_Hook>,
    mask: c_int,
    count: c_int,
}

/// Wraps the sandbox's `setmetatable` so that a call of it from the file's code sets the
/// returned flag: a metatable from Lua is what lets a metamethod run Lua code inside a
/// hook without a call instruction (the host's own tables carry C metamethods only).
fn watch_setmetatable(lua: &Lua) -> mlua::Result<Arc<AtomicBool>> {
    let set = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&set);
    let mark = lua.create_function(move |_, ()| {
        flag.store(true, Ordering::Relaxed);
        Ok(())
    })?;
    // A tail call: the sandbox's own `setmetatable` then reports errors at the caller's line.
    lua.load(
        "local set, mark = setmetatable, ...\n\
         setmetatable = function(t, mt) mark() return set(t, mt) end",
    )
    .set_name("=hooks")
    .call::<()>(mark)?;
    Ok(set)
}

/// The fields of `obj`, in [`ScriptHooks::stored`]' order.
const FIELDS: [&str; 5] = ["id", "size", "hits", "last_access", "inserted"];

/// Whether `code` (a source without its comments) names `field` as a word
/// (`obj.last_access`, `o["hits"]`): a field it never names is left to the metatable,
/// which answers it all the same, so storing it at each call would be wasted.
fn names_field(source: &str, field: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    source.match_indices(field).any(|(at, _)| {
        let before = source[..at].chars().next_back();
        let after = source[at + field.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

/// The object a hook table stands for while a hook runs; null between calls (a table a
/// script kept then reads as empty).
#[derive(Default)]
struct Bound {
    obj: std::cell::Cell<*mut HookObject>,
}

// SAFETY: `Bound` is only reached through `ScriptHooks` (owned, used through `&mut` or from
// the one thread running its Lua state), and the pointer is set only for the length of a call.
unsafe impl Send for Bound {}

/// A hook table: empty, with a protected metatable whose functions read and write `bound`'s
/// object (`obj[1..4]` and the fields not stored by [`ScriptHooks::fill`]); returns its
/// registry id (the entry lives as long as the state).
fn bound_table(lua: &Lua, bound: &Bound) -> mlua::Result<i32> {
    let address = bound as *const Bound as *mut std::ffi::c_void;
    // SAFETY: pushes within the space checked for, all popped again (the table into the
    // registry); `lua_createtable`, `lua_setfield` and `luaL_ref` can only fail on memory,
    // and this runs under mlua's protection as the state is set up.
    lua.exec_raw_lua(|raw| unsafe {
        let l = raw.state();
        if ffi::lua_checkstack(l, 4) == 0 {
            return Err(mlua::Error::runtime("Lua stack exhausted"));
        }
        ffi::lua_createtable(l, 0, 5);
        ffi::lua_createtable(l, 0, 3);
        ffi::lua_pushlightuserdata(l, address);
        ffi::lua_pushcclosure(l, bound_index, 1);
        ffi::lua_setfield(l, -2, c"__index".as_ptr());
        ffi::lua_pushlightuserdata(l, address);
        ffi::lua_pushcclosure(l, bound_newindex, 1);
        ffi::lua_setfield(l, -2, c"__newindex".as_ptr());
        ffi::lua_pushboolean(l, 0);
        ffi::lua_setfield(l, -2, c"__metatable".as_ptr());
        ffi::lua_setmetatable(l, -2);
        Ok(ffi::luaL_ref(l, ffi::LUA_REGISTRYINDEX))
    })
}

/// The user number `obj[i]` names (0-based), if the key at `index` is 1..=4.
unsafe fn user_index(l: *mut ffi::lua_State, index: c_int) -> Option<usize> {
    if ffi::lua_type(l, index) != ffi::LUA_TNUMBER {
        return None;
    }
    let mut ok = 0;
    let i = ffi::lua_tointegerx(l, index, &mut ok);
    (ok != 0 && (1..=USER_NUMBERS as i64).contains(&i)).then(|| i as usize - 1)
}

/// `__index` of a hook table: `obj[1..4]` and the fields, from the bound object.
unsafe extern "C-unwind" fn bound_index(l: *mut ffi::lua_State) -> c_int {
    let bound = &*(ffi::lua_touserdata(l, ffi::lua_upvalueindex(1)) as *const Bound);
    let obj = bound.obj.get();
    if obj.is_null() {
        ffi::lua_pushnil(l);
        return 1;
    }
    let obj = &*obj;
    if let Some(i) = user_index(l, 2) {
        ffi::lua_pushnumber(l, obj.user[i]);
        return 1;
    }
    if ffi::lua_type(l, 2) == ffi::LUA_TSTRING {
        let mut len = 0;
        let name = ffi::lua_tolstring(l, 2, &mut len);
        let value = match std::slice::from_raw_parts(name.cast::<u8>(), len) {
            b"id" => Some(obj.id as i64),
            b"size" => Some(obj.size.into()),
            b"hits" => Some(obj.hits as i64),
            b"last_access" => Some(obj.last_access as i64),
            b"inserted" => Some(obj.inserted as i64),
            _ => None,
        };
        if let Some(value) = value {
            ffi::lua_pushinteger(l, value);
            return 1;
        }
    }
    ffi::lua_pushnil(l);
    1
}

/// `__newindex` of a hook table: `obj[1..4] = number` goes to the bound object; anything
/// else is an error in the script (the fields are the host's, and the table is reused).
///
/// It raises its errors with `lua_error`, a `longjmp` over this frame, which holds nothing
/// to drop.
unsafe extern "C-unwind" fn bound_newindex(l: *mut ffi::lua_State) -> c_int {
    let bound = &*(ffi::lua_touserdata(l, ffi::lua_upvalueindex(1)) as *const Bound);
    let obj = bound.obj.get();
    const NOT_A_NUMBER: [&CStr; USER_NUMBERS] = [
        c"obj[1] must be a number",
        c"obj[2] must be a number",
        c"obj[3] must be a number",
        c"obj[4] must be a number",
    ];
    let message = match user_index(l, 2) {
        Some(i) if ffi::lua_type(l, 3) == ffi::LUA_TNUMBER => {
            if !obj.is_null() {
                (*obj).user[i] = ffi::lua_tonumberx(l, 3, std::ptr::null_mut());
            }
            return 0;
        }
        Some(i) => NOT_A_NUMBER[i],
        None => c"obj's fields are the host's: keep numbers in obj[1] .. obj[4]",
    };
    ffi::luaL_where(l, 1);
    ffi::lua_pushstring(l, message.as_ptr());
    ffi::lua_concat(l, 2);
    ffi::lua_error(l)
}

/// The type name of the value at `index`, for messages.
unsafe fn type_name(l: *mut ffi::lua_State, index: i32) -> String {
    let name = ffi::lua_typename(l, ffi::lua_type(l, index));
    CStr::from_ptr(name).to_string_lossy().into_owned()
}

/// A `priority` hook's results checked: the priority (not NaN) and the queue (absent: the
/// first; else an integer 1..=[`MAX_QUEUES`], `Some(None)` when it is not an integer).
fn placement(priority: f64, queue: Option<Option<i64>>) -> Result<Placement, String> {
    if priority.is_nan() {
        return Err("priority() must return a number, not NaN".to_string());
    }
    let queue = match queue {
        None => 1,
        Some(Some(q)) if (1..=MAX_QUEUES as i64).contains(&q) => q,
        Some(_) => {
            return Err(format!(
                "priority()'s second result must be a queue number 1..{MAX_QUEUES}"
            ))
        }
    };
    Ok(Placement {
        priority,
        queue: (queue - 1) as u8,
    })
}

/// A float as `lua_tointegerx` converts it: when it has an exact integer value.
fn exact_integer(x: f64) -> Option<i64> {
    // 2^63 as a float; `i64::MIN` is -2^63 exactly.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    (x.floor() == x && (-LIMIT..LIMIT).contains(&x)).then_some(x as i64)
}

impl ObjectHooks for ScriptHooks {
    fn defined(&self) -> HookSet {
        self.defined
    }

    fn admit(&mut self, obj: &mut HookObject) -> Result<bool, HookFailure> {
        self.call_one(ADMIT, obj, 1, |l, top| unsafe {
            match ffi::lua_type(l, top + 1) {
                ffi::LUA_TBOOLEAN => Ok(ffi::lua_toboolean(l, top + 1) != 0),
                _ => Err(format!(
                    "admit() must return true or false, not a {}",
                    type_name(l, top + 1)
                )),
            }
        })
    }

    fn on_hit(&mut self, obj: &mut HookObject) -> Result<(), HookFailure> {
        self.call_one(ON_HIT, obj, 0, |_, _| Ok(()))
    }

    fn on_insert(&mut self, obj: &mut HookObject) -> Result<(), HookFailure> {
        self.call_one(ON_INSERT, obj, 0, |_, _| Ok(()))
    }

    fn on_evict(&mut self, obj: &mut HookObject) -> Result<(), HookFailure> {
        self.call_one(ON_EVICT, obj, 0, |_, _| Ok(()))
    }

    fn priority(&mut self, obj: &mut HookObject) -> Result<Placement, HookFailure> {
        if let Some(projection) = self.projection {
            if let Some(placed) = self.project(projection, obj) {
                return placed.map_err(|bad| HookFailure {
                    hook: HOOKS[PRIORITY],
                    message: format!("bad result: {bad}"),
                });
            }
        }
        self.call_one(PRIORITY, obj, 2, |l, top| unsafe {
            let mut ok = 0;
            let priority = match ffi::lua_type(l, top + 1) {
                // An integer (a last access, a count) read as one: `lua_tonumberx` takes its
                // slow path of conversions for every integer.
                ffi::LUA_TNUMBER => match ffi::lua_tointegerx(l, top + 1, &mut ok) {
                    i if ok != 0 => i as f64,
                    _ => ffi::lua_tonumberx(l, top + 1, std::ptr::null_mut()),
                },
                _ => {
                    let what = type_name(l, top + 1);
                    return Err(format!("priority() must return a number, not a {what}"));
                }
            };
            let queue = match ffi::lua_type(l, top + 2) {
                ffi::LUA_TNIL => None,
                _ => {
                    let q = ffi::lua_tointegerx(l, top + 2, &mut ok);
                    Some((ok != 0).then_some(q))
                }
            };
            placement(priority, queue)
        })
    }

    /// Sets the globals `capacity_objects` and `capacity_bytes` (nil when unbounded).
    fn set_capacity(&mut self, capacity: cache::Capacity) {
        let globals = self.lua.globals();
        let number = |n: Option<u64>| n.map_or(Value::Nil, |n| Value::Integer(n as i64));
        // Only fails when out of memory; the hooks then see the previous capacity.
        let _ = globals.raw_set("capacity_objects", number(capacity.objects));
        let _ = globals.raw_set("capacity_bytes", number(capacity.bytes));
    }

    fn evict(&mut self, candidates: &[HookObject]) -> Result<usize, HookFailure> {
        let n = candidates.len().min(MAX_QUEUES);
        let mut objs = [HookObject::default(); MAX_QUEUES];
        objs[..n].copy_from_slice(&candidates[..n]);
        let tables = self.pins.candidates;
        let bound = &self.bound[1..];
        self.call(
            EVICT,
            &mut objs[..n],
            &tables[..n],
            bound,
            1,
            |l, top| unsafe {
                let at = top + 1;
                if ffi::lua_type(l, at) == ffi::LUA_TNUMBER {
                    let mut ok = 0;
                    let i = ffi::lua_tointegerx(l, at, &mut ok);
                    if ok != 0 && (1..=n as i64).contains(&i) {
                        return Ok(i as usize - 1);
                    }
                }
                for (i, &table) in tables[..n].iter().enumerate() {
                    if ffi::lua_rawequal(l, at, table) != 0 {
                        return Ok(i);
                    }
                }
                Err(format!(
                    "evict() must return one of its {n} candidates (or its position), not a {}",
                    type_name(l, at)
                ))
            },
        )
    }
}

/// The per-request hooks a policy file defines, as a [`HookSource`] (`None` when it
/// defines none). Compiled once here so a bad file is refused before the replay starts; each
/// replay then compiles the same source again for hooks of its own.
pub fn hook_source(
    path: &Path,
    params: Params,
    limits: Limits,
) -> Result<Option<HookSource>, LoadError> {
    let source = crate::read_policy_source(path).map_err(|message| LoadError::Io {
        path: path.display().to_string(),
        message,
    })?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "policy".to_string());
    hook_source_of(
        &name,
        &format!("@{}", path.display()),
        source,
        params,
        limits,
    )
}

/// [`hook_source`] for a source held in memory (a registry version): `name` names the
/// policy in messages, `chunk_name` is the Lua chunk's name (`@file` or `=name@N`).
pub fn hook_source_of(
    name: &str,
    chunk_name: &str,
    source: String,
    params: Params,
    limits: Limits,
) -> Result<Option<HookSource>, LoadError> {
    let interrupt = Interrupt::default;
    if ScriptHooks::compile(name, chunk_name, &source, &params, &limits, interrupt())?.is_none() {
        return Ok(None);
    }
    let identity = {
        use std::hash::{Hash, Hasher};
        let mut digest = std::collections::hash_map::DefaultHasher::new();
        source.hash(&mut digest);
        format!("{params:?} {limits:?}").hash(&mut digest);
        digest.finish()
    };
    let (name, chunk) = (name.to_string(), chunk_name.to_string());
    Ok(Some(HookSource::new(identity, move || {
        let compiled = ScriptHooks::compile(&name, &chunk, &source, &params, &limits, interrupt());
        match compiled {
            Ok(Some(hooks)) => Box::new(hooks) as Box<dyn cache::hooks::ObjectHooks>,
            // The same source compiled a moment ago: only a limit (memory, time) can make it
            // fail now. The cache then runs LRU and reports why.
            Ok(None) => Box::new(Unavailable("defines no hooks any more".into())),
            Err(e) => Box::new(Unavailable(e.to_string())),
        }
    })))
}

/// Hooks that could not be built: the first insert reports why, and the cache runs LRU.
struct Unavailable(String);

impl cache::hooks::ObjectHooks for Unavailable {
    fn defined(&self) -> cache::hooks::HookSet {
        cache::hooks::HookSet {
            admit: true,
            ..Default::default()
        }
    }
    fn admit(&mut self, _: &mut cache::hooks::HookObject) -> Result<bool, HookFailure> {
        Err(HookFailure {
            hook: "admit",
            message: format!("the hooks could not be compiled: {}", self.0),
        })
    }
    fn on_hit(&mut self, _: &mut cache::hooks::HookObject) -> Result<(), HookFailure> {
        Ok(())
    }
    fn on_insert(&mut self, _: &mut cache::hooks::HookObject) -> Result<(), HookFailure> {
        Ok(())
    }
    fn on_evict(&mut self, _: &mut cache::hooks::HookObject) -> Result<(), HookFailure> {
        Ok(())
    }
    fn priority(
        &mut self,
        _: &mut cache::hooks::HookObject,
    ) -> Result<cache::hooks::Placement, HookFailure> {
        Ok(cache::hooks::Placement {
            priority: 0.0,
            queue: 0,
        })
    }
    fn evict(&mut self, _: &[cache::hooks::HookObject]) -> Result<usize, HookFailure> {
        Ok(0)
    }
}
