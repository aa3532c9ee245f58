//! The access time series a policy reads through `timeseries()`.
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

/// The recent accesses of the cache, oldest first, as `(timestamp, keyid)` pairs where `keyid`
/// is a dense id given to each key in order of first appearance.
pub trait TimeSeries {
    /// Number of events retained.
    fn len(&self) -> usize;
    /// Event `i` (0-based, `0` is the oldest retained). Called only with `i < len()`.
    fn get(&self, i: usize) -> (f64, u64);
    /// Events ever recorded, including those that have since dropped off the front.
    ///
    /// Optional: a host that knows it lets native scans such as `:fans()` resume where the
    /// previous tick stopped instead of rescanning the whole series (`None` = always rescan).
    fn recorded(&self) -> Option<u64> {
        None
    }
    /// Whether no event is retained.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A time series held in a vector; used by `mantle policy test`, tests and benchmarks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VecSeries {
    events: Vec<(f64, u64)>,
    dropped: u64,
}

impl VecSeries {
    pub fn new(events: Vec<(f64, u64)>) -> VecSeries {
        VecSeries { events, dropped: 0 }
    }

    /// Appends one event.
    pub fn push(&mut self, time: f64, keyid: u64) {
        self.events.push((time, keyid));
    }

    /// Drops the `n` oldest events (as a bounded access log does).
    pub fn drop_oldest(&mut self, n: usize) {
        let n = n.min(self.events.len());
        self.events.drain(..n);
        self.dropped += n as u64;
    }

    pub fn events(&self) -> &[(f64, u64)] {
        &self.events
    }
}

impl TimeSeries for VecSeries {
    fn len(&self) -> usize {
        self.events.len()
    }
    fn get(&self, i: usize) -> (f64, u64) {
        self.events[i]
    }
    fn recorded(&self) -> Option<u64> {
        Some(self.dropped + self.events.len() as u64)
    }
}

/// An empty series, for ticks where the host keeps no access log.
pub struct NoSeries;

impl TimeSeries for NoSeries {
    fn len(&self) -> usize {
        0
    }
    fn get(&self, _i: usize) -> (f64, u64) {
        (0.0, 0)
    }
}

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
    object.raw_set("fans", crate::fans::fans_function(lua, slot)?)?;
    object.raw_set("fansummary", crate::fans::fansummary_function(lua, slot)?)?;
    object.raw_set("openfans", crate::fans::openfans_function(lua, slot)?)?;
    object.raw_set("distinct", crate::fans::distinct_function(lua, slot)?)?;
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vec_series_counts_dropped_events_as_recorded() {
        let mut s = VecSeries::new(vec![(1.0, 0), (2.0, 1), (3.0, 0)]);
        s.drop_oldest(2);
        assert_eq!(s.len(), 1);
        assert_eq!(s.get(0), (3.0, 0));
        assert_eq!(s.recorded(), Some(3));
    }

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
