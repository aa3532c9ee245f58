//! Synthetic workload generators (`mantle gen ...`).
//!
//! Generators exist so that demos, tests and policy experiments can run on traces with a known
//! shape without shipping real logs. One module per generator; each is a deterministic
//! iterator of [`crate::Request`]s for a given seed plus a CSV writer.

pub mod hotspot;
pub mod mixed;
pub mod parsplice;
pub mod phases;

pub use parsplice::{ParspliceGen, ParspliceParams, ParspliceSummary};
