//! The messages about ticks that replay and compare share (the default tick itself is
//! `sim::ticks::resolve`).

use anyhow::anyhow;
pub use sim::ticks::show;
use sim::{ReplayError, ReplayReport, Tick};
use std::path::Path;

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
