//! Self-contained HTML reports with inline SVG charts.
//!
//! Analysis, replay and policy comparison all end in a page a person reads; this crate turns
//! plain data ([`Series`], [`PolicyRun`]) into SVG charts drawn with `plotters` and assembles
//! them with tables and text into one HTML file with no external resources (no scripts, fonts
//! or network). Callers build a [`Document`] block by block, or use [`comparison_report`].

mod charts;
mod document;
mod policy;

pub use charts::{bar_chart, line_chart, scatter_chart, Chart};
pub use document::{escape, Document};
pub use policy::{comparison_report, memory_vs_performance_chart, policy_charts, PolicyRun};

/// A named series of (x, y) points.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series {
            name: name.into(),
            points,
        }
    }
}

/// Why a chart could not be drawn (the plotting backend failed).
#[derive(Debug, thiserror::Error)]
#[error("chart `{chart}`: {msg}")]
pub struct ReportError {
    pub chart: String,
    pub msg: String,
}
