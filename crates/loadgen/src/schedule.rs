//! When each request of the trace is due in wall time, for `--speed`.

use anyhow::{anyhow, Result};
use std::time::{Duration, Instant};

/// When each request is due: the trace's gaps divided by `--speed`, from the first request.
pub(super) struct Schedule {
    speed: f64,
    origin: Option<(f64, Instant)>,
    /// How far behind its due time the latest-sent request was, at worst.
    pub(super) max_lag: Duration,
}

impl Schedule {
    pub(super) fn new(speed: f64) -> Schedule {
        Schedule {
            speed,
            origin: None,
            max_lag: Duration::ZERO,
        }
    }

    /// The wall time `time` (trace seconds) is due at; None when the replay runs flat out.
    /// Times earlier than the first request's are due at once.
    pub(super) fn due(&mut self, time: f64, now: Instant) -> Result<Option<Instant>> {
        if self.speed == 0.0 {
            return Ok(None);
        }
        let (first, start) = *self.origin.get_or_insert((time, now));
        let offset = (time - first) / self.speed;
        if offset.is_nan() || offset <= 0.0 {
            return Ok(Some(start));
        }
        let offset = Duration::try_from_secs_f64(offset).map_err(|_| {
            anyhow!(
                "trace time {time} s is too far from the first request's ({first} s) to schedule"
            )
        })?;
        Ok(Some(start + offset))
    }

    pub(super) fn sent(&mut self, due: Option<Instant>, now: Instant) {
        if let Some(due) = due {
            self.max_lag = self.max_lag.max(now.saturating_duration_since(due));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_divides_trace_gaps_by_the_speed() {
        let now = Instant::now();
        let mut s = Schedule::new(4.0);
        assert_eq!(s.due(100.0, now).unwrap(), Some(now));
        assert_eq!(
            s.due(102.0, now).unwrap(),
            Some(now + Duration::from_millis(500))
        );
        // Out of order: due at once, never before the start.
        assert_eq!(s.due(50.0, now).unwrap(), Some(now));
        assert!(s.due(f64::MAX, now).is_err());
        s.sent(Some(now), now + Duration::from_millis(3));
        assert_eq!(s.max_lag, Duration::from_millis(3));

        let mut flat_out = Schedule::new(0.0);
        assert_eq!(flat_out.due(5.0, now).unwrap(), None);
    }
}
