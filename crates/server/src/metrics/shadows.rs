//! The shadows' figures as the policy thread last published them (after every tick and every
//! `POLICY SHADOW`/`POLICY SWITCH` change), so `INFO`, `/metrics` and the dashboard read them
//! without a round trip to that thread.

use serde::Serialize;
use std::sync::Mutex;

/// One candidate: a shadow, or the real cache under the active version.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CandidateFigures {
    /// The candidate's name (the real cache's row: the running version, `name@N`).
    pub name: String,
    /// `shadow`, or `active` for the real cache's own figures.
    pub role: &'static str,
    /// The registry version it runs (`name@N`), and its parameter overrides (`k=v ...`).
    pub policy: String,
    pub params: String,
    pub sample: f64,
    /// A shadow whose version and overrides are what the real cache runs now.
    pub active: bool,
    /// The last window (scaled to the whole key space).
    pub window: policy::switch::WindowFigures,
    /// Since the shadow was added: lookups, hits, misses (scaled), ticks, decisions, errors,
    /// and ticks its memory cap held it below what its policy asked.
    pub total_lookups: f64,
    pub total_hits: f64,
    pub total_misses: f64,
    pub ticks: u64,
    pub decisions: u64,
    pub errors: u64,
    pub capped_ticks: u64,
    /// Entries it may hold, entries it holds (unscaled), and the heap bytes of its metadata.
    pub max_objects: u64,
    pub objects: u64,
    pub metadata_bytes: u64,
}

/// What the policy thread publishes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ShadowReport {
    /// The real cache first (when a version runs), then every shadow in the order added.
    pub candidates: Vec<CandidateFigures>,
    /// Accesses the request path could not hand to the shadows (queue full).
    pub dropped: u64,
    /// The switch policy loaded (empty: none), its calls, failures and the switches it made.
    pub switch_policy: String,
    pub switch_calls: u64,
    pub switch_errors: u64,
    pub switches: u64,
    pub last_switch: String,
}

#[derive(Default)]
pub struct ShadowBoard {
    report: Mutex<ShadowReport>,
}

impl ShadowBoard {
    pub fn publish(&self, report: ShadowReport) {
        *self.report.lock().unwrap_or_else(|p| p.into_inner()) = report;
    }

    pub fn read(&self) -> ShadowReport {
        self.report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
