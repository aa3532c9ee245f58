//! When the engine thread ticks on the wall clock, and how long it may wait on its inbox
//! meanwhile. Ticks keep their period; a tick that overran is followed by a full period
//! rather than a burst of ticks catching up (a policy that overruns its period would otherwise
//! tick back to back and starve the inbox). With `--tick manual` there is no wall-clock tick:
//! each `POLICY TICK` runs one. Times are passed in, so the cadence is tested on a manual
//! clock.

use std::time::{Duration, Instant};

pub struct Ticker {
    period: Duration,
    manual: bool,
    next: Instant,
}

impl Ticker {
    /// The first tick is one period after `now`.
    pub fn new(period: Duration, manual: bool, now: Instant) -> Ticker {
        Ticker {
            period,
            manual,
            next: now + period,
        }
    }

    /// How long to wait on the inbox at `now`: until the next tick, or the next `drain` of
    /// the shadows' accesses if that is sooner; `None` waits for a message (manual ticks and
    /// nothing to drain).
    pub fn wait(&self, now: Instant, drain: Option<Duration>) -> Option<Duration> {
        if self.manual {
            return drain;
        }
        let to_tick = self.next.saturating_duration_since(now);
        Some(drain.map_or(to_tick, |d| d.min(to_tick)))
    }

    /// Whether a wall-clock tick is due at `now` (never with manual ticks).
    pub fn is_due(&self, now: Instant) -> bool {
        !self.manual && now >= self.next
    }

    /// A tick finished at `now`: the next is one period after the last one due, or one
    /// period from now if the tick overran.
    pub fn ticked(&mut self, now: Instant) {
        self.next += self.period;
        if self.next < now {
            self.next = now + self.period;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn ticks_fall_at_the_configured_cadence() {
        let t0 = Instant::now();
        let mut t = Ticker::new(100 * MS, false, t0);
        assert_eq!(t.wait(t0, None), Some(100 * MS));
        assert!(!t.is_due(t0 + 99 * MS));
        let mut ticks = Vec::new();
        // A manual clock stepping 10 ms at a time for one second, ticks taking no time.
        for step in 0..=100u32 {
            let now = t0 + step * 10 * MS;
            if t.is_due(now) {
                ticks.push(step * 10);
                t.ticked(now);
            }
        }
        assert_eq!(ticks, (1..=10).map(|k| k * 100).collect::<Vec<_>>());
        assert_eq!(t.wait(t0 + 1030 * MS, None), Some(70 * MS));
    }

    #[test]
    fn a_late_tick_keeps_the_grid_and_an_overrun_does_not_burst() {
        let t0 = Instant::now();
        let mut t = Ticker::new(100 * MS, false, t0);
        // Woken 30 ms late: the next tick is still on the grid.
        t.ticked(t0 + 130 * MS);
        assert_eq!(t.wait(t0 + 130 * MS, None), Some(70 * MS));
        // A tick that ran 450 ms: one period after it ends, not four ticks at once.
        t.ticked(t0 + 650 * MS);
        assert!(!t.is_due(t0 + 700 * MS));
        assert!(t.is_due(t0 + 750 * MS));
    }

    #[test]
    fn draining_shortens_the_wait_but_is_not_a_tick() {
        let t0 = Instant::now();
        let t = Ticker::new(100 * MS, false, t0);
        assert_eq!(t.wait(t0, Some(20 * MS)), Some(20 * MS));
        assert_eq!(t.wait(t0 + 90 * MS, Some(20 * MS)), Some(10 * MS));
        assert_eq!(t.wait(t0 + 500 * MS, Some(20 * MS)), Some(Duration::ZERO));
        assert!(!t.is_due(t0 + 20 * MS));
    }

    #[test]
    fn manual_ticks_never_fall_due_on_the_clock() {
        let t0 = Instant::now();
        let t = Ticker::new(100 * MS, true, t0);
        assert_eq!(t.wait(t0, None), None, "waits for POLICY TICK");
        assert_eq!(t.wait(t0, Some(20 * MS)), Some(20 * MS));
        assert!(!t.is_due(t0 + Duration::from_secs(3600)));
    }
}
