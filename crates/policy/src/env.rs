//! Builds the per-tick environment (`whoami`, `now`, `tick`, `servers`/`server`/`mds`,
//! `nservers`, `params`) straight through the Lua C API. It runs at every tick, so it avoids
//! mlua's per-value handle bookkeeping: a tick of a trivial policy must cost microseconds for
//! replay to tick every second of trace time at full speed.

use std::ffi::{c_int, CStr};

use mlua::{ffi, Lua};

use crate::metrics::Metrics;
use crate::program::TickInput;
use crate::value::Scalar;

/// Pushes `v` as an integer when integral (so `100` prints as `100`), else as a float.
unsafe fn push_number(l: *mut ffi::lua_State, v: f64) {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        ffi::lua_pushinteger(l, v as ffi::lua_Integer);
    } else {
        ffi::lua_pushnumber(l, v);
    }
}

/// `t[key] = v` for the table on top of the stack.
unsafe fn set_number(l: *mut ffi::lua_State, key: &CStr, v: f64) {
    push_number(l, v);
    ffi::lua_setfield(l, -2, key.as_ptr());
}

/// Pushes one server's metric table: the Mantle names plus the Ceph balancer names that
/// have a meaning for a cache.
unsafe fn push_metrics(l: *mut ffi::lua_State, m: &Metrics) {
    ffi::lua_createtable(l, 0, 26);
    let fields: [(&CStr, f64); 20] = [
        (c"cachesize", m.cachesize),
        (c"cachebytes", m.cachebytes),
        (c"capacity", m.capacity),
        (c"hits", m.hits),
        (c"misses", m.misses),
        (c"gets", m.gets),
        (c"puts", m.puts),
        (c"reqrate", m.reqrate),
        (c"getrate", m.getrate),
        (c"putrate", m.putrate),
        (c"missrate", m.missrate),
        (c"hitrate", m.hitrate),
        (c"backend_rate", m.backend_rate),
        (c"backend_queue", m.backend_queue),
        (c"evictions", m.evictions),
        (c"load", m.load),
        (c"auth.meta_load", m.load),
        (c"all.meta_load", m.load),
        (c"req_rate", m.reqrate),
        (c"queue_len", m.backend_queue),
    ];
    for (key, v) in fields {
        set_number(l, key, v);
    }
    if let Some(cpu) = m.cpu {
        ffi::lua_pushnumber(l, cpu);
        ffi::lua_setfield(l, -2, c"cpu".as_ptr());
        ffi::lua_pushnumber(l, cpu);
        ffi::lua_setfield(l, -2, c"cpu_load_avg".as_ptr());
    }
    if let Some(mem) = m.mem {
        set_number(l, c"mem", mem);
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

/// Sets the per-tick globals and returns the `servers` table.
pub(crate) fn set_environment(lua: &Lua, input: &TickInput) -> mlua::Result<mlua::Table> {
    // SAFETY: balanced pushes inside `exec_raw`, which runs the closure in protected mode
    // (an allocation failure becomes an `Err`) and restores the stack; the `servers` table
    // is the single value left as the result.
    unsafe {
        lua.exec_raw((), |l| {
            ffi::lua_rawgeti(l, ffi::LUA_REGISTRYINDEX, ffi::LUA_RIDX_GLOBALS); // G
            ffi::lua_createtable(l, 0, input.servers.len() as c_int); // G S
            for (i, m) in input.servers.iter().enumerate() {
                push_metrics(l, m);
                ffi::lua_rawseti(l, -2, i as ffi::lua_Integer);
            }
            for name in [c"servers", c"server", c"mds"] {
                ffi::lua_pushvalue(l, -1);
                ffi::lua_setfield(l, -3, name.as_ptr());
            }
            ffi::lua_createtable(l, 0, input.params.len() as c_int); // G S P
            for (k, v) in input.params {
                push_str(l, k);
                push_scalar(l, v);
                ffi::lua_rawset(l, -3);
            }
            ffi::lua_setfield(l, -3, c"params".as_ptr()); // G S
            ffi::lua_pushinteger(l, input.whoami as ffi::lua_Integer);
            ffi::lua_setfield(l, -3, c"whoami".as_ptr());
            ffi::lua_pushinteger(l, input.servers.len() as ffi::lua_Integer);
            ffi::lua_setfield(l, -3, c"nservers".as_ptr());
            ffi::lua_pushinteger(l, input.tick as ffi::lua_Integer);
            ffi::lua_setfield(l, -3, c"tick".as_ptr());
            ffi::lua_pushnumber(l, input.now);
            ffi::lua_setfield(l, -3, c"now".as_ptr());
            ffi::lua_remove(l, -2); // S
        })
    }
}
