//! Trace replay.
