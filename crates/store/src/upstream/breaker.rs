//! A circuit breaker in front of the upstream: after [`THRESHOLD`] consecutive failures
//! (timeouts, refused or dropped connections, protocol violations) requests fail at once for
//! [`COOL_DOWN`] instead of each waiting out its timeout; then one request is let through as a
//! probe, and its outcome closes the breaker or opens it again. Errors the upstream answers
//! with (`-ERR ...`) are not failures: it is up and talking.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Consecutive failures that open the breaker.
pub const THRESHOLD: u32 = 5;
/// How long an open breaker fails requests before probing the upstream again.
pub const COOL_DOWN: Duration = Duration::from_secs(1);

pub struct Breaker {
    started: Instant,
    consecutive: AtomicU32,
    /// While open: until when, in milliseconds since `started`.
    open_until_ms: AtomicU64,
    /// A probe is in flight (half-open): others keep failing fast.
    probing: AtomicBool,
}

/// What [`Breaker::admit`] decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    Go,
    /// Half-open: this request is the probe; report its outcome, or [`Breaker::abandon`].
    Probe,
    /// Open: fail now; the next probe is due in this long.
    Refused(Duration),
}

/// A transition worth a log line.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    None,
    Opened,
    Closed,
}

impl Default for Breaker {
    fn default() -> Breaker {
        Breaker {
            started: Instant::now(),
            consecutive: AtomicU32::new(0),
            open_until_ms: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }
}

impl Breaker {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub fn is_open(&self) -> bool {
        self.consecutive.load(Ordering::Relaxed) >= THRESHOLD
    }

    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive.load(Ordering::Relaxed)
    }

    pub fn admit(&self) -> Admission {
        if !self.is_open() {
            return Admission::Go;
        }
        let now = self.now_ms();
        let until = self.open_until_ms.load(Ordering::Acquire);
        if now < until {
            return Admission::Refused(Duration::from_millis(until - now));
        }
        if self
            .probing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            Admission::Probe
        } else {
            Admission::Refused(Duration::ZERO)
        }
    }

    pub fn success(&self) -> Change {
        let before = self.consecutive.swap(0, Ordering::AcqRel);
        self.probing.store(false, Ordering::Release);
        if before >= THRESHOLD {
            Change::Closed
        } else {
            Change::None
        }
    }

    /// The probe's request was cancelled before it had an outcome: let another probe go.
    pub fn abandon(&self) {
        self.probing.store(false, Ordering::Release);
    }

    pub fn failure(&self) -> Change {
        let count = self.consecutive.fetch_add(1, Ordering::AcqRel) + 1;
        if count >= THRESHOLD {
            self.open_until_ms.store(
                self.now_ms() + COOL_DOWN.as_millis() as u64,
                Ordering::Release,
            );
            self.probing.store(false, Ordering::Release);
        }
        if count == THRESHOLD {
            Change::Opened
        } else {
            Change::None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_the_threshold_then_lets_one_probe_through() {
        let breaker = Breaker::default();
        for _ in 1..THRESHOLD {
            assert_eq!(breaker.failure(), Change::None);
            assert_eq!(breaker.admit(), Admission::Go);
        }
        assert_eq!(breaker.failure(), Change::Opened);
        assert!(matches!(breaker.admit(), Admission::Refused(d) if d <= COOL_DOWN));
        // Cool-down over: exactly one probe.
        breaker.open_until_ms.store(0, Ordering::Release);
        assert_eq!(breaker.admit(), Admission::Probe);
        assert_eq!(breaker.admit(), Admission::Refused(Duration::ZERO));
        breaker.abandon();
        assert_eq!(
            breaker.admit(),
            Admission::Probe,
            "a cancelled probe is replaced"
        );
        // The probe failed: open again for a full cool-down.
        assert_eq!(breaker.failure(), Change::None);
        assert!(matches!(breaker.admit(), Admission::Refused(d) if d > Duration::ZERO));
        breaker.open_until_ms.store(0, Ordering::Release);
        assert_eq!(breaker.admit(), Admission::Probe);
        assert_eq!(breaker.success(), Change::Closed);
        assert_eq!(breaker.admit(), Admission::Go);
        assert!(!breaker.is_open());
    }

    #[test]
    fn a_success_resets_the_count() {
        let breaker = Breaker::default();
        for _ in 1..THRESHOLD {
            breaker.failure();
        }
        assert_eq!(breaker.success(), Change::None);
        breaker.failure();
        assert_eq!(breaker.admit(), Admission::Go);
    }
}
