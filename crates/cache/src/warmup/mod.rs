//! Warm-up on restart (Bonfire, seed 001), the part both hosts share: the spec
//! (`--warmup STRATEGY:K`), what is recorded per unit ([`Record`]) and the bounded table that
//! keeps it ([`UnitTable`]), the ranking of the four strategies ([`choose`]) and the rule for
//! what a bulk load takes when the chosen units do not all fit ([`LoadBudget`]).
//!
//! Replay (`crates/sim/src/warmup/monitor.rs`: trace ids or block regions, one thread) and the
//! server (`crates/server/src/access_monitor.rs`: key bytes, sharded across connections) wrap
//! this in their own front ends, so for the same accesses they rank the same units in the same
//! order and load the same prefix of that ranking.

mod budget;
mod rank;
mod spec;
mod table;

pub use budget::LoadBudget;
pub use rank::{choose, random_rank, Name, DEFAULT_SEED};
pub use spec::{Strategy, WarmupSpec};
pub use table::{recency_threshold, Record, Stamp, Unit, UnitTable};
