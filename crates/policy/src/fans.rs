//! Native access-fan detection, the scan of seed 000 Fig. 9 exposed as `timeseries():fans()`.
//!
//! Fig. 9 walks the series backwards and opens a new fan each time the key id drops below the
//! lowest id seen so far. Those fan boundaries are exactly the *strict suffix minima* of the
//! key-id sequence, which a monotone stack maintains in amortised O(1) per event. Keeping the
//! stack between ticks means a tick only pays for the events recorded since the previous one
//! (when the host reports [`TimeSeries::recorded`]); otherwise the stack is rebuilt in one
//! O(n) pass in Rust, still far cheaper than a million `:get(i)` calls from Lua.

use std::collections::VecDeque;

use crate::series::{SeriesSlot, TimeSeries};

/// One access fan, as Fig. 9 defines it. Indices are 1-based positions in the series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fan {
    /// Oldest event of the fan.
    pub first: usize,
    /// Newest event of the fan (where the backward scan found `bottom`).
    pub last: usize,
    /// Timestamp of `first`.
    pub start: f64,
    /// Timestamp of `last`.
    pub finish: f64,
    /// Lowest key id accessed from `first` to the end of the series.
    pub bottom: u64,
    /// Highest key id accessed within the fan.
    pub top: u64,
}

/// A suffix minimum of the key-id sequence and the fan that ends at it.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Absolute position (counting every event ever recorded).
    pos: u64,
    id: u64,
    finish: f64,
    /// Highest id over absolute positions `top_from..=pos`.
    top: u64,
    top_from: u64,
}

/// The fan stack of one policy's series, kept across ticks.
#[derive(Debug, Default)]
pub(crate) struct FanIndex {
    stack: VecDeque<Entry>,
    /// Absolute position one past the newest processed event.
    processed: u64,
    /// The newest processed event, to detect a host whose series changed under us.
    newest: Option<(f64, u64)>,
}

impl FanIndex {
    /// Brings the stack up to date with `series` and returns its fans, newest first.
    pub(crate) fn fans(&mut self, series: &dyn TimeSeries) -> Vec<Fan> {
        let len = series.len();
        if len == 0 {
            *self = FanIndex::default();
            return Vec::new();
        }
        let recorded = series.recorded().filter(|&r| r >= len as u64);
        let base = recorded.map_or(0, |r| r - len as u64);
        if !self.can_resume(series, recorded, base) {
            *self = FanIndex::default();
            self.processed = base;
        }
        let end = base + len as u64;
        for pos in self.processed..end {
            let (time, id) = series.get((pos - base) as usize);
            self.push(pos, time, id);
        }
        self.processed = end;
        self.newest = Some(series.get(len - 1));
        self.expire(series, base);
        self.collect(series, base)
    }

    fn can_resume(&self, series: &dyn TimeSeries, recorded: Option<u64>, base: u64) -> bool {
        let (Some(recorded), Some(newest)) = (recorded, self.newest) else {
            return false;
        };
        // The previous newest event must still be retained and unchanged.
        if self.processed > recorded || self.processed <= base {
            return false;
        }
        series.get((self.processed - 1 - base) as usize) == newest
    }

    fn push(&mut self, pos: u64, finish: f64, id: u64) {
        let mut entry = Entry {
            pos,
            id,
            finish,
            top: id,
            top_from: pos,
        };
        while let Some(back) = self.stack.back() {
            if back.id < id {
                break;
            }
            entry.top = entry.top.max(back.top);
            entry.top_from = back.top_from;
            self.stack.pop_back();
        }
        self.stack.push_back(entry);
    }

    /// Drops fans that left the window and recomputes the top of the oldest one if part of
    /// its range left (its old top may have been an expired event).
    fn expire(&mut self, series: &dyn TimeSeries, base: u64) {
        while self.stack.front().is_some_and(|e| e.pos < base) {
            self.stack.pop_front();
        }
        if let Some(front) = self.stack.front_mut() {
            if front.top_from < base {
                let top = (0..=(front.pos - base))
                    .map(|i| series.get(i as usize).1)
                    .max()
                    .unwrap_or(front.id);
                front.top = top;
                front.top_from = base;
            }
        }
    }

    fn collect(&self, series: &dyn TimeSeries, base: u64) -> Vec<Fan> {
        let mut fans = Vec::with_capacity(self.stack.len());
        let mut older_pos: Option<u64> = None;
        let mut firsts = Vec::with_capacity(self.stack.len());
        for e in &self.stack {
            firsts.push(older_pos.map_or(base, |p| p + 1));
            older_pos = Some(e.pos);
        }
        for (e, first) in self.stack.iter().zip(firsts).rev() {
            let first_idx = (first - base) as usize;
            fans.push(Fan {
                first: first_idx + 1,
                last: (e.pos - base) as usize + 1,
                start: series.get(first_idx).0,
                finish: e.finish,
                bottom: e.id,
                top: e.top,
            });
        }
        fans
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::VecSeries;

    /// Fig. 9 transcribed literally, as the oracle.
    fn fig9(events: &[(f64, u64)]) -> Vec<Fan> {
        let n = events.len();
        let mut fans = Vec::new();
        let (t, id) = events[n - 1];
        let mut fan = Fan {
            first: 0,
            last: n,
            start: 0.0,
            finish: t,
            bottom: id,
            top: 0,
        };
        for i in (0..n).rev() {
            let (t, id) = events[i];
            if id < fan.bottom {
                fan.first = i + 2;
                fan.start = events[i + 1].0;
                fans.push(fan);
                fan = Fan {
                    first: 0,
                    last: i + 1,
                    start: 0.0,
                    finish: t,
                    bottom: id,
                    top: 0,
                };
            }
            fan.top = fan.top.max(id);
        }
        fan.first = 1;
        fan.start = events[0].0;
        fans.push(fan);
        fans
    }

    fn pseudo_random_events(n: usize, seed: u64) -> Vec<(f64, u64)> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Ids drift upwards with noise, like fans of a growing key space.
                let id = (i as u64 / 10) + x % 40;
                (i as f64 * 0.5, id)
            })
            .collect()
    }

    #[test]
    fn matches_fig9_on_a_full_scan() {
        let events = pseudo_random_events(5000, 42);
        let mut index = FanIndex::default();
        let series = VecSeries::new(events.clone());
        assert_eq!(index.fans(&series), fig9(&events));
    }

    #[test]
    fn incremental_updates_with_a_sliding_window_match_fig9() {
        let events = pseudo_random_events(20_000, 7);
        let mut series = VecSeries::new(Vec::new());
        let mut index = FanIndex::default();
        let window = 3000;
        for chunk in events.chunks(731) {
            for &(t, id) in chunk {
                series.push(t, id);
            }
            if series.len() > window {
                series.drop_oldest(series.len() - window);
            }
            assert_eq!(index.fans(&series), fig9(series.events()));
        }
    }

    #[test]
    fn rebuilds_when_the_series_is_replaced() {
        let mut index = FanIndex::default();
        let a = VecSeries::new(pseudo_random_events(500, 1));
        index.fans(&a);
        let b = VecSeries::new(pseudo_random_events(800, 2));
        assert_eq!(index.fans(&b), fig9(b.events()));
        assert!(index.fans(&VecSeries::default()).is_empty());
    }

    #[test]
    fn a_rising_series_is_one_fan_per_event_and_a_constant_one_is_one_fan() {
        let rising: Vec<(f64, u64)> = (0..5).map(|i| (i as f64, i)).collect();
        let fans = FanIndex::default().fans(&VecSeries::new(rising));
        assert_eq!(fans.len(), 5);
        assert_eq!((fans[0].bottom, fans[0].top), (4, 4));
        let flat: Vec<(f64, u64)> = (0..5).map(|i| (i as f64, 3)).collect();
        let fans = FanIndex::default().fans(&VecSeries::new(flat));
        assert_eq!(fans.len(), 1);
        assert_eq!((fans[0].first, fans[0].last), (1, 5));
    }
}
