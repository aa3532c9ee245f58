//! The access series a live policy reads through `timeseries()`, and the clock its events and
//! ticks are stamped with.
//!
//! The series is replay's: [`cache::AccessLog`] assigns the dense first-seen key ids and keeps
//! the newest `--timeseries N` events, and a GET or a SET (MSET: one per key) is one event, as
//! a lookup or a put is in replay; DEL is none. Only the ids differ in what they are computed
//! from: the server knows a key by the hash its key table uses (64 bits, so two keys share an
//! id with odds of about n²/2⁶⁵).
//!
//! Clients must not wait on a policy: the log belongs to the policy thread, and a request only
//! appends `(time, key hash)` to [`AccessSeries::pending`], a ring of at most N events that the
//! thread drains into the log before each tick (a swap with a spare ring: no allocation once
//! both have grown). If more than N events arrive between two drains, the oldest are dropped
//! before they get an id (counted in `series_dropped`); the log would have kept only the newest
//! N of them anyway.
//!
//! Recording is on while the running policy's source mentions `timeseries` (as in replay), so a
//! server without such a policy pays one relaxed atomic load per request.

use cache::AccessLog;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// `--timeseries` when not given: replay's default.
pub const DEFAULT_TIMESERIES: usize = 1_000_000;

/// The time live policies see: wall seconds since the Unix epoch, or with `--tick manual` the
/// time the last `POLICY TICK now` / `POLICY CLOCK now` set (0 until then).
#[derive(Default)]
pub struct PolicyClock {
    manual: AtomicBool,
    /// An `f64` of seconds, as bits.
    seconds: AtomicU64,
}

impl PolicyClock {
    pub fn set_manual(&self, manual: bool) {
        self.manual.store(manual, Ordering::Relaxed);
    }

    pub fn is_manual(&self) -> bool {
        self.manual.load(Ordering::Relaxed)
    }

    /// Seconds now, on this clock.
    #[inline]
    pub fn now(&self) -> f64 {
        if self.is_manual() {
            f64::from_bits(self.seconds.load(Ordering::Acquire))
        } else {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        }
    }

    /// Sets a manual clock; refused (with the reason) on a wall clock or for a time that is not
    /// a finite number.
    pub fn set(&self, seconds: f64) -> Result<(), String> {
        if !self.is_manual() {
            return Err(
                "the policy clock follows the wall clock; start the server with \
                        --tick manual to set it"
                    .into(),
            );
        }
        if !seconds.is_finite() {
            return Err(format!(
                "invalid time '{seconds}': expected a finite number of seconds"
            ));
        }
        self.seconds.store(seconds.to_bits(), Ordering::Release);
        Ok(())
    }
}

/// The request side of the series: the clock and the events not yet handed to the policy
/// thread.
#[derive(Default)]
pub struct AccessSeries {
    pub clock: PolicyClock,
    /// `--timeseries N`: most events kept (and pending); 0 turns the series off.
    limit: AtomicUsize,
    /// Whether requests record (see the module's doc).
    recording: AtomicBool,
    pending: Mutex<VecDeque<(f64, u64)>>,
    dropped: AtomicU64,
}

impl AccessSeries {
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Turns recording on or off (never on with a zero limit).
    pub fn set_recording(&self, on: bool) {
        self.recording
            .store(on && self.limit() > 0, Ordering::Relaxed);
    }

    pub fn is_recording(&self) -> bool {
        self.recording.load(Ordering::Relaxed)
    }

    /// Events dropped before the policy thread drained them.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// One access (a GET or a SET) of the key with this hash, now.
    #[inline]
    pub fn record(&self, hash: u64) {
        if !self.is_recording() {
            return;
        }
        let time = self.clock.now();
        let limit = self.limit();
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if pending.len() >= limit {
            pending.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        pending.push_back((time, hash));
    }

    /// Moves the pending events into `log` (in arrival order); `spare` is an empty ring that
    /// takes the pending one's place, and comes back empty.
    pub fn drain_into(&self, log: &mut AccessLog, spare: &mut VecDeque<(f64, u64)>) {
        debug_assert!(spare.is_empty());
        {
            let mut pending = self
                .pending
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            std::mem::swap(&mut *pending, spare);
        }
        for (time, hash) in spare.drain(..) {
            log.record(time, hash);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(limit: usize) -> AccessSeries {
        let s = AccessSeries::default();
        s.set_limit(limit);
        s.clock.set_manual(true);
        s.set_recording(true);
        s
    }

    #[test]
    fn drained_events_get_first_seen_ids_and_manual_times() {
        let s = series(10);
        let mut log = AccessLog::new(10);
        let mut spare = VecDeque::new();
        for (t, key) in [(1.0, 500), (1.0, 7), (2.5, 500)] {
            s.clock.set(t).unwrap();
            s.record(key);
        }
        s.drain_into(&mut log, &mut spare);
        assert_eq!(
            log.iter().collect::<Vec<_>>(),
            [(1.0, 0), (1.0, 1), (2.5, 0)]
        );
        assert!(spare.is_empty());
        s.record(9);
        s.drain_into(&mut log, &mut spare);
        assert_eq!(log.get(3), (2.5, 2));
    }

    #[test]
    fn pending_is_bounded_and_counts_what_it_drops() {
        let s = series(3);
        for key in 0..5 {
            s.record(key);
        }
        assert_eq!(s.dropped(), 2);
        let mut log = AccessLog::new(3);
        s.drain_into(&mut log, &mut VecDeque::new());
        assert_eq!(log.len(), 3);
        assert_eq!(log.distinct_keys(), 3);
    }

    #[test]
    fn off_records_nothing_and_a_wall_clock_cannot_be_set() {
        let s = AccessSeries::default();
        s.set_recording(true); // a zero limit keeps it off
        s.record(1);
        let mut log = AccessLog::new(10);
        s.drain_into(&mut log, &mut VecDeque::new());
        assert!(log.is_empty());
        assert!(s.clock.set(5.0).is_err());
        s.clock.set_manual(true);
        assert!(s.clock.set(f64::NAN).is_err());
        assert!(s.clock.set(5.0).is_ok());
        assert_eq!(s.clock.now(), 5.0);
    }
}
