//! When a multi-node replay ticks, simulated (`replay --nodes`) or live (`replay --server
//! --nodes`): [`TickSchedule`]'s ticks, so a policy ticks at the same times as under
//! `replay`, idle gaps included. A request-count tick has no clock of its own (a trace
//! without timestamps has none): tick `k` is at time `k` and covers one second.

use crate::tick_schedule::Tick;
use crate::tick_schedule::TickSchedule;

/// One tick due: its number (from 1), its time and the seconds since the previous one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DueTick {
    pub tick: u64,
    pub now: f64,
    pub seconds: f64,
}

/// The ticks of one multi-node replay, fed its requests' times in order.
pub struct NodeClock {
    schedule: TickSchedule,
    time_ticks: bool,
    ticks: u64,
    last_tick_time: Option<f64>,
    /// The ticks due before the current request (at most `MAX_EMPTY_TICKS` + 1), reused.
    due: Vec<DueTick>,
}

impl NodeClock {
    pub fn new(tick: Tick) -> NodeClock {
        NodeClock {
            schedule: TickSchedule::new(tick),
            time_ticks: matches!(tick, Tick::Seconds(_)),
            ticks: 0,
            last_tick_time: None,
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
        if self.time_ticks {
            let last = self.last_tick_time.get_or_insert(time);
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
        Some(DueTick {
            tick: self.ticks,
            now: self.ticks as f64,
            seconds: 1.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::MAX_EMPTY_TICKS;

    #[test]
    fn an_idle_gap_runs_the_schedules_empty_ticks() {
        let mut c = NodeClock::new(Tick::Seconds(1.0));
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
    fn request_ticks_count_one_second_each() {
        let mut c = NodeClock::new(Tick::Ops(2));
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
