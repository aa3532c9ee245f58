//! Shadows in the server (issue 17): candidate policy versions from the registry, each run by
//! replay's [`adapt::Shadow`] on a metadata-only cache fed the live access stream, ticking with
//! the live policy on the same clock; and an optional switch policy that reads their window
//! figures and names the version to run, which the runner activates through the registry (so
//! the log, rollback and a cluster's propagation apply). See docs/adaptive.md, "In the server".
//!
//! Two halves: [`feed`] here, on the request path (a sampled, bounded, allocation-free
//! hand-off), and `live::shadows` on the policy thread (the shadows, the real cache's window,
//! the switch). This module depends on no other of the server, so `db` can feed it.
//!
//! Bounds: at most [`MAX_SHADOWS`] shadows; each holds at most its `max_objects` entries
//! (default [`DEFAULT_MAX_OBJECTS`]) and together at most [`MAX_TOTAL_OBJECTS`]; each policy
//! runs under the live policy's instruction and memory limits and stops when the server does;
//! the hand-off queue holds at most [`feed::MAX_PENDING`] accesses.

pub mod feed;

pub use feed::{Access, Served, ShadowFeed};

use std::time::Duration;

/// Most shadows a server runs at once.
pub const MAX_SHADOWS: usize = 8;
/// A shadow's memory cap (entries of its metadata cache) unless `max_objects=N` is given.
pub const DEFAULT_MAX_OBJECTS: u64 = 1 << 20;
/// The cap on the sum of every shadow's `max_objects` (about 100 bytes an entry at most).
pub const MAX_TOTAL_OBJECTS: u64 = 8 << 20;
/// Ticks in a window (replay's `--window` default).
pub const DEFAULT_WINDOW: usize = 10;
/// How often the policy thread hands queued accesses to the shadows between ticks.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(20);
