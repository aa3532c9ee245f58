//! When decision ticks fall in a trace ([`Tick`], the `--tick` a user gives): the one schedule
//! `mantle replay` runs its controller on and `mantle replay --server` ticks a `--tick manual`
//! server on, so both hosts tick at the same trace times and request counts.
//!
//! A time tick (`--tick 1s`) fires at each boundary `first request time + k * step` before the
//! first request at or after it; a gap runs at most [`MAX_EMPTY_TICKS`] empty ticks one by one
//! and the rest as one tick at the last boundary passed. A request-count tick (`Nops`) fires
//! after every N requests, at the time of the last one.

/// When decision ticks (and metrics rows) happen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tick {
    /// Every this many seconds of trace time.
    Seconds(f64),
    /// Every this many requests.
    Ops(u64),
}

impl std::str::FromStr for Tick {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let s = text.trim();
        if let Some(n) = s.strip_suffix("ops") {
            let n: u64 = n
                .trim()
                .parse()
                .map_err(|_| format!("invalid tick '{text}': expected e.g. 1000ops"))?;
            if n == 0 {
                return Err(format!("invalid tick '{text}': must be > 0"));
            }
            return Ok(Tick::Ops(n));
        }
        // A bare number would be seconds to the duration grammar, but a tick can also count
        // requests: make the user say which rather than guess.
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(format!(
                "invalid tick '{text}': give a unit: {s}s of trace time or {s}ops for requests"
            ));
        }
        let d = units::parse_duration(s).map_err(|e| {
            format!("invalid tick: {e} (expected a duration like 1s, 200ms, 5m, or Nops)")
        })?;
        Ok(Tick::Seconds(d.as_secs_f64()))
    }
}

/// Empty ticks a gap between two requests runs one by one before the rest of it is
/// collapsed into one tick, so a trace with a day-long pause does not run 86,400 ticks.
pub const MAX_EMPTY_TICKS: u64 = 1000;

/// Where time ticks fall: boundaries `origin + k * step` for whole `k`. A boundary is
/// computed from its index, never by adding `step` to the previous one, because repeated
/// addition stops moving once `step` is below the float resolution of the time (a trace at
/// 1e20 s with 1 s ticks looped forever that way).
#[derive(Clone, Copy)]
struct TickGrid {
    origin: f64,
    step: f64,
    /// Index of the next boundary not yet ticked.
    next: u64,
}

impl TickGrid {
    /// Indices are kept below 2^53 so that every index is an exact `f64`.
    const MAX_INDEX: f64 = 9_007_199_254_740_992.0;

    fn at(&self, k: u64) -> f64 {
        self.origin + k as f64 * self.step
    }

    /// The index of the last boundary at or before `now`, which the caller knows is due
    /// (`now >= self.at(self.next)`); `None` when it is beyond exact indices.
    #[inline]
    fn last_due(&self, now: f64) -> Option<u64> {
        let x = (now - self.origin) / self.step;
        // NaN is an infinite time. `floor(x) >= 2^53` exactly when `x >= 2^53`, 2^53 being
        // whole.
        if x.is_nan() || x >= Self::MAX_INDEX {
            return None;
        }
        // `as` truncates towards zero and saturates below at 0: `floor` for the non-negative
        // `x` of a due boundary and 0 for a negative one, without `floor`'s libm call (x86-64
        // before SSE4.1 has no rounding instruction), which was a third of this call's cost.
        // Rounding may put the index one short of a boundary `at` says has passed.
        Some((x as u64).max(self.next))
    }
}

fn too_fine(step: f64) -> String {
    format!(
        "a {step} s tick is finer than the float resolution of the trace clock at this time; \
         use a coarser tick or a request-count tick (Nops)"
    )
}

/// The ticks of one run, fed its requests' times in order.
pub struct TickSchedule {
    tick: Tick,
    grid: Option<TickGrid>,
    /// Time of the next grid boundary (infinite for request-count ticks).
    next_time: f64,
    ops_until_tick: u64,
}

impl TickSchedule {
    pub fn new(tick: Tick) -> TickSchedule {
        TickSchedule {
            tick,
            grid: None,
            // A time tick's first request takes the slow path, which lays the grid.
            next_time: match tick {
                Tick::Seconds(_) => f64::NEG_INFINITY,
                Tick::Ops(_) => f64::INFINITY,
            },
            ops_until_tick: match tick {
                Tick::Ops(n) => n,
                Tick::Seconds(_) => u64::MAX,
            },
        }
    }

    /// Before a request at `time` is served: calls `run` with the time of each tick due, in
    /// order (at most [`MAX_EMPTY_TICKS`] + 1 of them). The error says why the grid cannot go
    /// on at `time` (the caller names the request).
    #[inline]
    pub fn before(&mut self, time: f64, run: impl FnMut(f64)) -> Result<(), String> {
        // The only test most requests take: one comparison.
        if time < self.next_time {
            return Ok(());
        }
        self.due(time, run)
    }

    /// [`TickSchedule::before`] once a boundary (or the first request of a time tick) is
    /// reached. Also reached by a NaN time, which the caller refuses before asking.
    #[inline(never)]
    fn due(&mut self, time: f64, mut run: impl FnMut(f64)) -> Result<(), String> {
        if self.grid.is_none() {
            if let Tick::Seconds(step) = self.tick {
                let grid = TickGrid {
                    origin: time,
                    step,
                    next: 1,
                };
                self.next_time = grid.at(1);
                if self.next_time <= time {
                    return Err(too_fine(step));
                }
                self.grid = Some(grid);
            }
        }
        if time < self.next_time {
            return Ok(());
        }
        let Some(grid) = self.grid.as_mut() else {
            // A request-count tick never has a time boundary (a NaN time lands here).
            return Ok(());
        };
        let step = grid.step;
        let last = grid.last_due(time).ok_or_else(|| too_fine(step))?;
        let due = last - grid.next + 1;
        for k in grid.next..grid.next + due.min(MAX_EMPTY_TICKS) {
            run(grid.at(k));
        }
        if due > MAX_EMPTY_TICKS {
            run(grid.at(last));
        }
        grid.next = last + 1;
        self.next_time = grid.at(grid.next);
        if self.next_time <= time {
            return Err(too_fine(step));
        }
        Ok(())
    }

    /// After a request was served: whether a request-count tick is due now (at the time of
    /// that request).
    #[inline]
    pub fn after(&mut self) -> bool {
        self.ops_until_tick -= 1;
        if self.ops_until_tick == 0 {
            if let Tick::Ops(n) = self.tick {
                self.ops_until_tick = n;
                return true;
            }
            self.ops_until_tick = u64::MAX;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticks(tick: Tick, times: &[f64]) -> Vec<(usize, f64)> {
        let mut s = TickSchedule::new(tick);
        let mut out = Vec::new();
        for (i, &t) in times.iter().enumerate() {
            s.before(t, |at| out.push((i, at))).unwrap();
            if s.after() {
                out.push((i + 1, t));
            }
        }
        out
    }

    #[test]
    fn time_ticks_fall_on_the_grid_before_the_request_that_passes_them() {
        assert_eq!(
            ticks(Tick::Seconds(1.0), &[10.0, 10.5, 11.0, 13.2]),
            [(2, 11.0), (3, 12.0), (3, 13.0)]
        );
    }

    #[test]
    fn long_gaps_collapse_after_max_empty_ticks() {
        let out = ticks(Tick::Seconds(1.0), &[0.0, 5000.5]);
        assert_eq!(out.len() as u64, MAX_EMPTY_TICKS + 1);
        assert_eq!(out.last(), Some(&(1, 5000.0)));
    }

    #[test]
    fn request_ticks_follow_every_n_requests() {
        assert_eq!(
            ticks(Tick::Ops(2), &[1.0, 2.0, 3.0, 4.0, 5.0]),
            [(2, 2.0), (4, 4.0)]
        );
    }

    /// The truncating index is the floor of the quotient wherever the grid can go on, and
    /// refuses what the floor refused.
    #[test]
    fn the_last_due_index_is_the_floor_of_the_quotient() {
        let floor_index = |g: &TickGrid, now: f64| {
            let k = ((now - g.origin) / g.step).floor();
            if k.is_nan() || k >= TickGrid::MAX_INDEX {
                return None;
            }
            Some((k.max(0.0) as u64).max(g.next))
        };
        let grids = [
            (0.0, 1.0, 1),
            (100.5, 0.25, 3),
            (-7.0, 3.0, 0),
            (1e15, 1e-3, 1),
        ];
        let times = [
            -1e300,
            -5.5,
            -0.0,
            0.0,
            0.999,
            1.0,
            100.5,
            100.74,
            100.75,
            12_345.678,
            1e15 + 0.5,
            9_007_199_254_740_991.0,
            9_007_199_254_740_992.0,
            1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let swept = std::iter::repeat_with(move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Times of every magnitude and sign, from the bits of a random double.
            f64::from_bits(x & !(0x7ff << 52) | ((x % 1100 + 500) << 52))
        });
        for (origin, step, next) in grids {
            let g = TickGrid { origin, step, next };
            for now in times.into_iter().chain(swept.take(20_000)) {
                assert_eq!(
                    g.last_due(now),
                    floor_index(&g, now),
                    "{origin} {step} {now}"
                );
            }
        }
    }

    #[test]
    fn a_tick_below_the_clock_resolution_is_refused() {
        let mut s = TickSchedule::new(Tick::Seconds(1e-9));
        assert!(s.before(1e20, |_| {}).is_err());
    }
}
