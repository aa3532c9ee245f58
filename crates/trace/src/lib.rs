//! Streaming readers for the cache trace formats Mantle replays.
//!
//! Every reader turns a file (optionally compressed) into a stream of [`Request`]s in constant
//! memory. Readers are selected by [`Format`], which is auto-detected from the file name and
//! magic bytes unless the user names one.

pub mod gen;
mod request;

pub use request::{Op, Request};
