//! When a multi-node replay ticks, simulated (`replay --nodes`) or live (`replay --server
//! --nodes`): [`TickSchedule`]'s ticks, so a policy ticks at the same times as under
//! `replay`, idle gaps included, and each tick covers the trace time `replay`'s does: a time
//! tick the time since the previous one, a request-count tick the time from the previous
//! tick to its last request (the latest time seen, as `replay` keeps it). A trace without
//! timestamps has no clock (every request is at time 0): there request-count tick `k` is at
//! time `k` and covers one second, so a balancer still sees loads.

use crate::tick_schedule::Tick;
use crate::tick_schedule::TickSchedule;

/// One tick due: its number (from 1), its time and the seconds since the previous one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DueTick {
    pub tick: u64,
    pub now: f64,
    pub seconds: f64,
}

impl DueTick {
    /// `count` events over the tick as a rate; 0 over an empty interval (two ticks at one
    /// trace time), as `replay`'s rates are.
    pub fn per_second(&self, count: u64) -> f64 {
        if self.seconds > 0.0 {
            count as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// The ticks of one multi-node replay, fed its requests' times in order.
pub struct NodeClock {
    schedule: TickSchedule,
    time_ticks: bool,
    /// The trace has timestamps (see the module documentation).
    trace_clock: bool,
    ticks: u64,
    last_tick_time: Option<f64>,
    /// The latest request time seen.
    latest: f64,
    /// The ticks due before the current request (at most `MAX_EMPTY_TICKS` + 1), reused.
    due: Vec<DueTick>,
}

impl NodeClock {
    /// `trace_clock`: the trace has timestamps.
    pub fn new(tick: Tick, trace_clock: bool) -> NodeClock {
        NodeClock {
            schedule: TickSchedule::new(tick),
            time_ticks: matches!(tick, Tick::Seconds(_)),
            trace_clock,
            ticks: 0,
            last_tick_time: None,
            latest: f64::NEG_INFINITY,
            due: Vec::new(),
        }
    }

    /// Ticks run so far.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// Before a request at `time`: the ticks due, in order. The error says why the tick grid
    /// cannot go on at `time` (the caller names the request).
    pub fn before(&mut self, time: f64) -> Result<&[DueTick], String> {
        self.due.clear();
        if !time.is_finite() {
            return Err("a request time must be a finite number of seconds".to_string());
        }
        self.latest = self.latest.max(time);
        let last = self.last_tick_time.get_or_insert(time);
        if self.time_ticks {
            let (due, ticks) = (&mut self.due, &mut self.ticks);
            self.schedule.before(time, |now| {
                *ticks += 1;
                due.push(DueTick {
                    tick: *ticks,
                    now,
                    seconds: now - *last,
                });
                *last = now;
            })?;
        }
        Ok(&self.due)
    }

    /// After a request: the request-count tick due now, if any.
    pub fn after(&mut self) -> Option<DueTick> {
        if !self.schedule.after() {
            return None;
        }
        self.ticks += 1;
        if !self.trace_clock {
            return Some(DueTick {
                tick: self.ticks,
                now: self.ticks as f64,
                seconds: 1.0,
            });
        }
        let now = self.latest;
        let last = self.last_tick_time.replace(now).unwrap_or(now);
        Some(DueTick {
            tick: self.ticks,
            now,
            seconds: now - last,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::MAX_EMPTY_TICKS;

    #[test]
    fn an_idle_gap_runs_the_schedules_empty_ticks() {
        let mut c = NodeClock::new(Tick::Seconds(1.0), true);
        assert!(c.before(10.0).unwrap().is_empty());
        let due = c.before(13.5).unwrap().to_vec();
        assert_eq!(
            due.iter().map(|t| t.now).collect::<Vec<_>>(),
            [11.0, 12.0, 13.0]
        );
        assert!(due.iter().all(|t| t.seconds == 1.0));
        assert_eq!(due.last().unwrap().tick, 3);
        let due = c.before(5000.0).unwrap().to_vec();
        assert_eq!(due.len() as u64, MAX_EMPTY_TICKS + 1);
        let last = due.last().unwrap();
        assert_eq!((last.now, last.tick), (5000.0, 3 + MAX_EMPTY_TICKS + 1));
        assert_eq!(
            last.seconds,
            5000.0 - 1013.0,
            "the collapsed rest of the gap"
        );
        assert!(c.after().is_none());
    }

    #[test]
    fn request_ticks_fall_at_their_last_requests_time_as_in_replay() {
        let mut c = NodeClock::new(Tick::Ops(2), true);
        let mut due = Vec::new();
        for time in [10.0, 10.5, 12.0, 11.0, 11.5, 16.0] {
            assert!(c.before(time).unwrap().is_empty());
            due.extend(c.after());
        }
        let at: Vec<(u64, f64, f64)> = due.iter().map(|t| (t.tick, t.now, t.seconds)).collect();
        // The second tick's last request is at 11.0, but the clock had reached 12.0.
        assert_eq!(at, [(1, 10.5, 0.5), (2, 12.0, 1.5), (3, 16.0, 4.0)]);
        assert_eq!(due[0].per_second(3), 6.0);
    }

    #[test]
    fn two_ticks_at_one_time_have_no_rate() {
        let t = DueTick {
            tick: 2,
            now: 5.0,
            seconds: 0.0,
        };
        assert_eq!(t.per_second(100), 0.0);
    }

    #[test]
    fn request_ticks_count_one_second_each_without_timestamps() {
        let mut c = NodeClock::new(Tick::Ops(2), false);
        for _ in 0..3 {
            assert!(c.before(0.0).unwrap().is_empty());
            c.after();
        }
        assert_eq!(c.ticks(), 1);
        assert!(c.before(0.0).unwrap().is_empty());
        let t = c.after().unwrap();
        assert_eq!((t.tick, t.now, t.seconds), (2, 2.0, 1.0));
        assert!(c.before(f64::NAN).is_err());
    }
}
