//! The decision tick a run uses when none is given, shared by the CLI and the Python package.
//!
//! A trace without timestamps (txt, arc, lirs, raw key arrays, csv without a time column)
//! reports every request at time 0, so a time tick never fires there and a policy would
//! silently never run. Such a trace ticks on requests instead: by default every
//! [`TIMELESS_DEFAULT`] requests, with a one-line notice; an explicit time tick is refused.

use crate::Tick;
use anyhow::{bail, Result};
use std::path::Path;

/// Requests per tick on a trace without timestamps when no tick is given.
pub const TIMELESS_DEFAULT: u64 = 1000;

/// How the caller's users spell the tick setting, for the messages of [`resolve`]: the CLI's
/// `--tick 1000ops` or Python's `tick="1000ops"`.
#[derive(Clone, Copy)]
pub struct TickFlag {
    /// The setting's name before a value it refuses (`--tick 1s: ...`).
    pub name: &'static str,
    /// The setting as written with a value, in suggestions.
    pub with_value: fn(&str) -> String,
}

/// `--tick` of the command line.
pub const CLI_FLAG: TickFlag = TickFlag {
    name: "--tick",
    with_value: |v| format!("--tick {v}"),
};

/// A tick as the user would write it.
pub fn show(tick: Tick) -> String {
    match tick {
        Tick::Seconds(s) => format!("{s}s"),
        Tick::Ops(n) => format!("{n}ops"),
    }
}

/// The tick for a trace: the one asked for, else 1 s, or [`TIMELESS_DEFAULT`] requests on a
/// trace without timestamps (`timed` false). Also returns the notice to print when the
/// default was switched.
pub fn resolve(
    requested: Option<Tick>,
    timed: bool,
    trace: &Path,
    flag: TickFlag,
) -> Result<(Tick, Option<String>)> {
    match (requested, timed) {
        (Some(tick @ Tick::Seconds(_)), false) => bail!(
            "{} {}: {} has no timestamps, so a time tick would never fire; use a request-count tick such as {}",
            flag.name,
            show(tick),
            trace.display(),
            (flag.with_value)(&format!("{TIMELESS_DEFAULT}ops"))
        ),
        (Some(tick), _) => Ok((tick, None)),
        (None, true) => Ok((Tick::Seconds(1.0), None)),
        (None, false) => Ok((
            Tick::Ops(TIMELESS_DEFAULT),
            Some(format!(
                "mantle: {} has no timestamps; ticking every {TIMELESS_DEFAULT} requests (choose with {})",
                trace.display(),
                (flag.with_value)("Nops")
            )),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeless_trace_ticks_on_requests_and_refuses_a_time_tick() {
        let p = Path::new("k.txt");
        assert_eq!(
            resolve(None, true, p, CLI_FLAG).unwrap(),
            (Tick::Seconds(1.0), None)
        );
        let (tick, notice) = resolve(None, false, p, CLI_FLAG).unwrap();
        assert_eq!(tick, Tick::Ops(TIMELESS_DEFAULT));
        assert_eq!(
            notice.unwrap(),
            "mantle: k.txt has no timestamps; ticking every 1000 requests (choose with --tick Nops)"
        );
        let err = resolve(Some(Tick::Seconds(1.0)), false, p, CLI_FLAG).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--tick 1s: k.txt has no timestamps, so a time tick would never fire; use a request-count tick such as --tick 1000ops"
        );
        let ops = Some(Tick::Ops(5));
        assert_eq!(
            resolve(ops, false, p, CLI_FLAG).unwrap(),
            (Tick::Ops(5), None)
        );
    }
}
