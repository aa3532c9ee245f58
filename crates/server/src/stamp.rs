//! A monotonic clock in plain nanoseconds, for the bookkeeping every request does (command
//! statistics, the slow log, `CLIENT LIST`'s idle time). `Instant` reads the same clock
//! (`CLOCK_MONOTONIC`), but each subtraction normalises seconds and nanoseconds with checks,
//! and a request read the clock twice and subtracted twice; here a reading is one integer and
//! a difference one subtraction.

/// A reading of the monotonic clock, in nanoseconds from an arbitrary origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(u64);

impl Stamp {
    #[inline]
    pub fn now() -> Stamp {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a valid `timespec` for the call to fill; the monotonic clock exists
        // on every system this builds for, so the call cannot fail (`Instant::now` makes the
        // same call and assumes the same).
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        Stamp(now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64)
    }

    /// Nanoseconds from `earlier` to this reading (0 if `earlier` is the later one).
    #[inline]
    pub fn nanos_since(self, earlier: Stamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn stamps_measure_what_instants_measure() {
        let (stamp, instant) = (Stamp::now(), Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let reference = instant.elapsed();
        let measured = Stamp::now().nanos_since(stamp);
        assert!(measured >= 20_000_000, "{measured} ns");
        // The two clocks are one clock: the stamp's span holds the instant's, read inside it.
        assert!(
            u128::from(measured) >= reference.as_nanos(),
            "{measured} / {reference:?}"
        );
        assert_eq!(stamp.nanos_since(Stamp::now()), 0);
    }
}
