//! What one engine thread is doing, seen from the control thread (`control`), which never
//! runs Lua. The engine thread brackets every piece of work (a tick, a `POLICY` request) with
//! [`JobWatch::begin`] and [`JobWatch::end`]; the control thread reads how long the work has
//! run, records a tick that runs far longer than a tick should as wedged (so a server that
//! dies meanwhile does not reactivate that version, see `Runner::open`), and may abandon the
//! engine thread. Ending and abandoning are decided under one lock, so the engine thread
//! either finished its work before it was abandoned, or it learns that it was and writes
//! nothing more.

use super::registry::VersionRef;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one piece of engine work may run before it counts as wedged: its version is
/// recorded as such, requests that need the engine are refused until it ends, and
/// `POLICY ROLLBACK` abandons it.
pub const WEDGE_AFTER: Duration = Duration::from_secs(2);

/// One piece of engine work.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// What it is, for messages: `a tick of name@N`, `POLICY LOAD`.
    pub what: String,
    /// The version a tick runs; `None` for a request.
    pub tick_of: Option<VersionRef>,
}

impl Job {
    pub fn tick(version: Option<&VersionRef>) -> Job {
        Job {
            what: version.map_or("a tick".to_string(), |v| format!("a tick of {v}")),
            tick_of: version.cloned(),
        }
    }

    pub fn request(name: &str) -> Job {
        Job {
            what: name.to_string(),
            tick_of: None,
        }
    }
}

/// How a piece of work ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Normally; `marked` if it had been recorded as wedged meanwhile.
    Finished { marked: bool },
    /// The control thread gave up on this engine thread while the work ran: the thread must
    /// write nothing more and exit.
    Abandoned,
}

#[derive(Default)]
struct State {
    running: Option<(Job, Instant)>,
    marked: bool,
    abandoned: bool,
}

/// Shared by one engine thread and the control thread.
#[derive(Default)]
pub struct JobWatch {
    state: Mutex<State>,
}

impl JobWatch {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Work starts; false if this engine thread was abandoned (it must stop).
    pub fn begin(&self, job: Job) -> bool {
        let mut state = self.state();
        state.running = Some((job, Instant::now()));
        state.marked = false;
        !state.abandoned
    }

    /// The work ended.
    pub fn end(&self) -> Ended {
        let mut state = self.state();
        state.running = None;
        if state.abandoned {
            return Ended::Abandoned;
        }
        Ended::Finished {
            marked: std::mem::take(&mut state.marked),
        }
    }

    /// The work running now and for how long.
    pub fn running(&self) -> Option<(Job, Duration)> {
        let state = self.state();
        state
            .running
            .as_ref()
            .map(|(job, since)| (job.clone(), since.elapsed()))
    }

    /// The work running now if it has run at least [`WEDGE_AFTER`].
    pub fn wedged(&self) -> Option<(Job, Duration)> {
        self.running().filter(|(_, ran)| *ran >= WEDGE_AFTER)
    }

    /// Marks the running work as recorded wedged, once: the job and how long it ran, if this
    /// call marked it.
    pub fn mark_wedged(&self) -> Option<(Job, Duration)> {
        let mut state = self.state();
        let (job, since) = state.running.as_ref()?;
        if state.marked || since.elapsed() < WEDGE_AFTER {
            return None;
        }
        let marked = (job.clone(), since.elapsed());
        state.marked = true;
        Some(marked)
    }

    /// Gives up on this engine thread if it is still at work: the job and how long it ran.
    /// `None` if the work ended meanwhile (nothing is abandoned then).
    pub fn abandon(&self) -> Option<(Job, Duration)> {
        let mut state = self.state();
        let (job, since) = state.running.as_ref()?;
        let abandoned = (job.clone(), since.elapsed());
        state.abandoned = true;
        Some(abandoned)
    }

    pub fn is_abandoned(&self) -> bool {
        self.state().abandoned
    }

    /// Runs `write` unless this engine thread was abandoned, holding off an abandonment
    /// until it is done: an abandoned thread's writes never interleave with its successor's.
    /// `write` must not use this watch.
    pub fn unless_abandoned<T>(&self, write: impl FnOnce() -> T) -> Option<T> {
        let state = self.state();
        if state.abandoned {
            return None;
        }
        let out = write();
        drop(state);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_that_ends_is_never_abandoned() {
        let watch = JobWatch::default();
        assert!(watch.abandon().is_none(), "nothing runs");
        assert!(watch.begin(Job::request("POLICY LIST")));
        assert_eq!(watch.end(), Ended::Finished { marked: false });
        assert!(watch.abandon().is_none());
        assert!(!watch.is_abandoned());
    }

    #[test]
    fn abandoned_work_learns_it_when_it_ends_and_cannot_start_again() {
        let watch = JobWatch::default();
        let v = VersionRef {
            name: "spin".into(),
            version: 1,
        };
        assert!(watch.begin(Job::tick(Some(&v))));
        let (job, _) = watch.abandon().unwrap();
        assert_eq!(job.tick_of, Some(v));
        assert_eq!(job.what, "a tick of spin@1");
        assert_eq!(watch.end(), Ended::Abandoned);
        assert!(!watch.begin(Job::tick(None)));
        assert_eq!(watch.unless_abandoned(|| 1), None);
        assert_eq!(JobWatch::default().unless_abandoned(|| 1), Some(1));
    }

    #[test]
    fn only_work_past_the_threshold_is_marked_and_only_once() {
        let watch = JobWatch::default();
        watch.begin(Job::tick(None));
        assert!(watch.mark_wedged().is_none(), "too young");
        assert!(watch.wedged().is_none());
        // Back-date the start instead of sleeping through the threshold.
        watch.state().running.as_mut().unwrap().1 = Instant::now() - WEDGE_AFTER;
        assert!(watch.wedged().is_some());
        assert!(watch.mark_wedged().is_some());
        assert!(watch.mark_wedged().is_none(), "marked already");
        assert_eq!(watch.end(), Ended::Finished { marked: true });
        watch.begin(Job::tick(None));
        assert_eq!(watch.end(), Ended::Finished { marked: false });
    }
}
