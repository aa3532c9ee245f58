//! The object `timeseries()` returns to a policy: `:size()`, `:get(i)` and the native scans
//! (`fans`), bound to the host's series of the tick in progress.
//!
//! Fan-detection policies call `:get(i)` up to a million times per tick, so the accessors are
//! raw Lua C closures that read the host's series through a pointer held in a [`SeriesSlot`]:
//! no userdata borrow checks, no allocation, no Rust error machinery on the hot path. The slot
//! is filled only for the duration of one tick ([`SlotGuard`]); outside a tick the accessors
//! raise a Lua error instead of touching freed memory.

use std::cell::{Cell, RefCell};
use std::ffi::c_int;

use mlua::ffi;

use crate::fans::{FanIndex, ReuseIndex};
use crate::series::TimeSeries;

type SeriesPtr = *const (dyn TimeSeries + 'static);

/// Where the accessors find the series of the tick in progress. Lives in a `Box` owned by the
/// policy program, so its address (captured by the Lua closures) is stable.
pub(crate) struct SeriesSlot {
    current: Cell<Option<SeriesPtr>>,
    pub(crate) fans: RefCell<FanIndex>,
    pub(crate) reuse: RefCell<ReuseIndex>,
}

// SAFETY: the slot is only touched from the thread that runs the tick which owns it (the Lua
// state, which is the only other holder of its address, moves together with it).
unsafe impl Send for SeriesSlot {}

impl SeriesSlot {
    pub(crate) fn new() -> Box<SeriesSlot> {
        Box::new(SeriesSlot {
            current: Cell::new(None),
            fans: RefCell::new(FanIndex::default()),
            reuse: RefCell::new(ReuseIndex::default()),
        })
    }

    /// Publishes `series` to the accessors until the guard is dropped.
    pub(crate) fn publish<'a>(&'a self, series: &'a dyn TimeSeries) -> SlotGuard<'a> {
        // SAFETY: only the lifetime is erased; the guard clears the pointer before `series`
        // can go out of scope, and the accessors never run outside the guard's lifetime
        // without finding `None`.
        let ptr: SeriesPtr =
            unsafe { std::mem::transmute::<*const (dyn TimeSeries + 'a), SeriesPtr>(series) };
        self.current.set(Some(ptr));
        SlotGuard { slot: self }
    }

    /// The series of the tick in progress, if any.
    pub(crate) fn with_series<R>(&self, f: impl FnOnce(&dyn TimeSeries) -> R) -> Option<R> {
        // SAFETY: a `Some` pointer is valid while its guard lives (see `publish`).
        self.current.get().map(|p| f(unsafe { &*p }))
    }
}

/// Clears the slot when the tick ends.
pub(crate) struct SlotGuard<'a> {
    slot: &'a SeriesSlot,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.slot.current.set(None);
    }
}

const OUTSIDE_TICK: &[u8] = b"timeseries() can only be read during a tick\0";
const BAD_INDEX: &[u8] = b"timeseries:get(i) expects an integer index\0";

/// Reads the series pointer from the closure's upvalue; null when no tick is running.
unsafe fn current_series(l: *mut ffi::lua_State) -> Option<SeriesPtr> {
    let slot = ffi::lua_touserdata(l, ffi::lua_upvalueindex(1)) as *const SeriesSlot;
    if slot.is_null() {
        return None;
    }
    (*slot).current.get()
}

/// `series:size()`.
unsafe extern "C-unwind" fn series_size(l: *mut ffi::lua_State) -> c_int {
    match current_series(l) {
        Some(series) => {
            ffi::lua_pushinteger(l, (*series).len() as ffi::lua_Integer);
            1
        }
        // No Rust value with a destructor is alive here, so Lua's longjmp is harmless.
        None => ffi::luaL_error(l, OUTSIDE_TICK.as_ptr().cast()),
    }
}

/// `series:get(i)` → `timestamp, keyid` with `i = 1` the oldest; `nil` outside `1..size()`.
unsafe extern "C-unwind" fn series_get(l: *mut ffi::lua_State) -> c_int {
    let Some(series) = current_series(l) else {
        return ffi::luaL_error(l, OUTSIDE_TICK.as_ptr().cast());
    };
    let mut is_int: c_int = 0;
    let i = ffi::lua_tointegerx(l, 2, &mut is_int);
    if is_int == 0 {
        return ffi::luaL_error(l, BAD_INDEX.as_ptr().cast());
    }
    let len = (*series).len();
    if i < 1 || i as u64 > len as u64 {
        ffi::lua_pushnil(l);
        return 1;
    }
    let (time, keyid) = (*series).get(i as usize - 1);
    ffi::lua_pushnumber(l, time);
    ffi::lua_pushinteger(l, keyid as ffi::lua_Integer);
    2
}

/// Creates a C closure over `f` whose only upvalue is the slot's address.
fn slot_closure(
    lua: &mlua::Lua,
    slot: &SeriesSlot,
    f: ffi::lua_CFunction,
) -> mlua::Result<mlua::Function> {
    let addr = slot as *const SeriesSlot as *mut std::ffi::c_void;
    // SAFETY: pushes one light userdata and one C closure; `exec_raw` guards the stack.
    unsafe {
        lua.exec_raw((), |l| {
            ffi::lua_pushlightuserdata(l, addr);
            ffi::lua_pushcclosure(l, f, 1);
        })
    }
}

/// Builds the object `timeseries()` returns: a table holding `size` and `get` directly (no
/// metatable lookup on the hot path) plus the native scans.
pub(crate) fn build_series_object(lua: &mlua::Lua, slot: &SeriesSlot) -> mlua::Result<mlua::Table> {
    let object = lua.create_table()?;
    object.raw_set("size", slot_closure(lua, slot, series_size)?)?;
    object.raw_set("get", slot_closure(lua, slot, series_get)?)?;
    object.raw_set("fans", fans_function(lua, slot)?)?;
    object.raw_set("fansummary", fansummary_function(lua, slot)?)?;
    object.raw_set("openfans", openfans_function(lua, slot)?)?;
    object.raw_set("distinct", distinct_function(lua, slot)?)?;
    Ok(object)
}

/// The Lua function behind `series:fans()`: a table of fans, newest first, each a table with
/// `first`, `last`, `start`, `finish`, `bottom`, `top`.
pub(crate) fn fans_function(lua: &mlua::Lua, slot: &SeriesSlot) -> mlua::Result<mlua::Function> {
    let addr = slot as *const SeriesSlot as usize;
    lua.create_function(move |lua, _: mlua::MultiValue| {
        // SAFETY: the slot is boxed by the program that owns this Lua state and outlives it.
        let slot = unsafe { &*(addr as *const SeriesSlot) };
        let fans = slot
            .with_series(|series| slot.fans.borrow_mut().fans(series))
            .ok_or_else(|| mlua::Error::runtime("timeseries() can only be read during a tick"))?;
        let out = lua.create_table_with_capacity(fans.len(), 0)?;
        for (i, fan) in fans.iter().enumerate() {
            let t = lua.create_table_with_capacity(0, 6)?;
            t.raw_set("first", fan.first)?;
            t.raw_set("last", fan.last)?;
            t.raw_set("start", fan.start)?;
            t.raw_set("finish", fan.finish)?;
            t.raw_set("bottom", fan.bottom)?;
            t.raw_set("top", fan.top)?;
            out.raw_set(i + 1, t)?;
        }
        Ok(out)
    })
}

/// The Lua function behind `series:fansummary()`: the number of fans and the greatest
/// `top - bottom` among them (what `:fans()` gives, without building a table per fan).
pub(crate) fn fansummary_function(
    lua: &mlua::Lua,
    slot: &SeriesSlot,
) -> mlua::Result<mlua::Function> {
    let addr = slot as *const SeriesSlot as usize;
    lua.create_function(move |_, _: mlua::MultiValue| {
        // SAFETY: as in `fans_function`.
        let slot = unsafe { &*(addr as *const SeriesSlot) };
        slot.with_series(|series| slot.fans.borrow_mut().summary(series))
            .ok_or_else(|| mlua::Error::runtime("timeseries() can only be read during a tick"))
    })
}

/// The Lua function behind `series:openfans(hold)`: a table `{since, record, new_keys, keys,
/// held}` (`since` is nil when no read is held). `hold` defaults to 1.
pub(crate) fn openfans_function(
    lua: &mlua::Lua,
    slot: &SeriesSlot,
) -> mlua::Result<mlua::Function> {
    let addr = slot as *const SeriesSlot as usize;
    lua.create_function(move |lua, (_, hold): (mlua::Value, Option<f64>)| {
        let hold = hold.unwrap_or(1.0);
        if !(hold.is_finite() && hold >= 0.0) {
            return Err(mlua::Error::runtime(format!(
                "timeseries:openfans(hold) expects a finite hold >= 0, got {hold}"
            )));
        }
        // SAFETY: the slot is boxed by the program that owns this Lua state and outlives it.
        let slot = unsafe { &*(addr as *const SeriesSlot) };
        let open = slot
            .with_series(|series| slot.reuse.borrow_mut().open_fans(series, hold))
            .ok_or_else(|| mlua::Error::runtime("timeseries() can only be read during a tick"))?;
        let t = lua.create_table_with_capacity(0, 5)?;
        if let Some(since) = open.since {
            t.raw_set("since", since)?;
        }
        t.raw_set("record", open.record)?;
        t.raw_set("new_keys", open.new_keys)?;
        t.raw_set("keys", open.keys)?;
        t.raw_set("held", open.held)?;
        Ok(t)
    })
}

/// The Lua function behind `series:distinct(time)`: distinct keys whose latest retained access
/// is at or after `time`, i.e. the LRU capacity that keeps every key read since then.
pub(crate) fn distinct_function(
    lua: &mlua::Lua,
    slot: &SeriesSlot,
) -> mlua::Result<mlua::Function> {
    let addr = slot as *const SeriesSlot as usize;
    lua.create_function(move |_, (_, time): (mlua::Value, f64)| {
        // SAFETY: as in `openfans_function`.
        let slot = unsafe { &*(addr as *const SeriesSlot) };
        slot.with_series(|series| slot.reuse.borrow_mut().distinct_since(series, time))
            .ok_or_else(|| mlua::Error::runtime("timeseries() can only be read during a tick"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::VecSeries;

    #[test]
    fn slot_is_empty_after_the_guard_drops() {
        let slot = SeriesSlot::new();
        let series = VecSeries::new(vec![(1.0, 7)]);
        {
            let _g = slot.publish(&series);
            assert_eq!(slot.with_series(|s| s.get(0)), Some((1.0, 7)));
        }
        assert_eq!(slot.with_series(|s| s.len()), None);
    }
}
