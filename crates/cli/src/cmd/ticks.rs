//! The decision tick a run uses, and the messages about ticks that replay and compare share.
//!
//! A trace without timestamps (txt, arc, lirs, raw key arrays, csv without a time column)
//! reports every request at time 0, so a time tick never fires there and a policy would
//! silently never run. Such a trace ticks on requests instead: by default every
//! [`TIMELESS_DEFAULT`] requests, with a one-line notice; an explicit time tick is refused.

use anyhow::{anyhow, bail, Result};
use sim::{ReplayError, ReplayReport, Tick};
use std::path::Path;

/// Requests per tick on a trace without timestamps when `--tick` is not given.
pub const TIMELESS_DEFAULT: u64 = 1000;

/// `--tick` as the user would write it.
pub fn show(tick: Tick) -> String {
    match tick {
        Tick::Seconds(s) => format!("{s}s"),
        Tick::Ops(n) => format!("{n}ops"),
    }
}

/// The tick for a trace: the one asked for, else 1 s, or [`TIMELESS_DEFAULT`] requests on a
/// trace without timestamps. Also returns the notice to print when the default was switched.
pub fn resolve(
    requested: Option<Tick>,
    timed: bool,
    trace: &Path,
) -> Result<(Tick, Option<String>)> {
    match (requested, timed) {
        (Some(Tick::Seconds(_)), false) => bail!(
            "--tick {}: {} has no timestamps, so a time tick would never fire; use a request-count tick such as --tick {TIMELESS_DEFAULT}ops",
            show(requested.expect("matched Some")),
            trace.display()
        ),
        (Some(tick), _) => Ok((tick, None)),
        (None, true) => Ok((Tick::Seconds(1.0), None)),
        (None, false) => Ok((
            Tick::Ops(TIMELESS_DEFAULT),
            Some(format!(
                "mantle: {} has no timestamps; ticking every {TIMELESS_DEFAULT} requests (choose with --tick Nops)",
                trace.display()
            )),
        )),
    }
}

/// A warning when a policy was given but no tick fell within the trace.
pub fn never_ran(report: &ReplayReport, tick: Tick) -> Option<String> {
    let policy = report.policy.as_ref()?;
    if policy.ticks > 0 || report.requests == 0 {
        return None;
    }
    let span = match tick {
        Tick::Seconds(_) => format!(
            "the trace spans {} s",
            report.duration_seconds.unwrap_or(0.0)
        ),
        Tick::Ops(_) => format!("the trace has {} requests", report.requests),
    };
    Some(format!(
        "mantle: warning: policy {} never ran: {span}, less than one --tick {}",
        policy.name,
        show(tick)
    ))
}

/// A replay error as one line naming the trace.
pub fn replay_error(err: ReplayError<trace::TraceError>, trace: &Path) -> anyhow::Error {
    match err {
        // A reader's error already names the file and line.
        ReplayError::Source(e) => e.into(),
        clock => anyhow!("{}: {clock}", trace.display()),
    }
}
