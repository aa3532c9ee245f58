//! The instruction budget and time limit a policy callback runs under, and the host's
//! interrupt flag: what the sandbox's count hook and every metered host function (the
//! pattern matcher, the wrapped C functions) charge their work to.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::limits::Limits;

/// A flag the host sets from any thread to stop the running callback (and every later one)
/// at its next budget check, e.g. when the server shuts down.
#[derive(Debug, Clone, Default)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    pub fn interrupt(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn clear(&self) {
        self.0.store(false, Ordering::Relaxed);
    }

    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Why a callback was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopReason {
    Instructions = 1,
    Time = 2,
    Interrupted = 3,
}

/// A stopped callback's error, raised in Lua.
#[derive(Debug)]
pub(crate) struct Stop(String);

impl Stop {
    /// What the policy is told, without where it stopped (the count hook adds the line).
    pub(crate) fn message(&self) -> &str {
        &self.0
    }

    pub(crate) fn error(self) -> mlua::Error {
        mlua::Error::runtime(self.0)
    }
}

/// The per-callback instruction budget and time limit, shared with the count hook and every
/// host function that charges work.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: u64,
    remaining: AtomicU64,
    /// 0 while running, else a [`StopReason`].
    stopped: AtomicU8,
    time_limit: Duration,
    epoch: Instant,
    /// Nanoseconds after `epoch` at which the running callback is stopped; 0 until its first
    /// charge.
    deadline_ns: AtomicU64,
    interrupt: Interrupt,
}

impl Budget {
    pub(crate) fn new(limits: &Limits, interrupt: Interrupt) -> Budget {
        let budget = Budget {
            limit: limits.instructions,
            remaining: AtomicU64::new(limits.instructions),
            stopped: AtomicU8::new(0),
            time_limit: limits.time_limit,
            epoch: Instant::now(),
            deadline_ns: AtomicU64::new(0),
            interrupt,
        };
        budget.refill();
        budget
    }

    /// Gives the next callback a full budget and a fresh deadline.
    pub(crate) fn refill(&self) {
        self.remaining.store(self.limit, Ordering::Relaxed);
        self.stopped.store(0, Ordering::Relaxed);
        // The clock is read at the first charge, not here: most callbacks of a tick end
        // before any charge, and a tick must stay well under a microsecond.
        self.deadline_ns.store(0, Ordering::Relaxed);
    }

    /// Whether the running callback is past its deadline (set at its first charge, so the
    /// time before it — under one hook step of work — is not counted).
    fn past_deadline(&self) -> bool {
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let deadline = self.deadline_ns.load(Ordering::Relaxed);
        if deadline == 0 {
            let limit = u64::try_from(self.time_limit.as_nanos()).unwrap_or(u64::MAX);
            self.deadline_ns
                .store(now.saturating_add(limit).max(1), Ordering::Relaxed);
            return false;
        }
        now > deadline
    }

    pub(crate) fn is_exhausted(&self) -> bool {
        self.stopped.load(Ordering::Relaxed) != 0
    }

    pub(crate) fn reason(&self) -> Option<StopReason> {
        match self.stopped.load(Ordering::Relaxed) {
            1 => Some(StopReason::Instructions),
            2 => Some(StopReason::Time),
            3 => Some(StopReason::Interrupted),
            _ => None,
        }
    }

    /// Charges `n` instructions' worth of work; fails (and keeps failing until the next
    /// refill) once the budget is spent, the time limit has passed, or the host interrupted.
    pub(crate) fn charge(&self, n: u64) -> Result<(), Stop> {
        if let Some(reason) = self.reason() {
            return Err(self.stop(reason));
        }
        let left = self.remaining.load(Ordering::Relaxed);
        let reason = if self.interrupt.is_set() {
            Some(StopReason::Interrupted)
        } else if left <= n {
            Some(StopReason::Instructions)
        } else if self.past_deadline() {
            Some(StopReason::Time)
        } else {
            None
        };
        match reason {
            Some(reason) => {
                self.stopped.store(reason as u8, Ordering::Relaxed);
                Err(self.stop(reason))
            }
            None => {
                self.remaining.store(left - n, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    fn stop(&self, reason: StopReason) -> Stop {
        Stop(match reason {
            StopReason::Instructions => {
                format!("instruction budget of {} instructions exceeded", self.limit)
            }
            StopReason::Time => {
                format!("time limit of {} ms exceeded", self.time_limit.as_millis())
            }
            StopReason::Interrupted => "interrupted: the host is stopping the policy".into(),
        })
    }
}
