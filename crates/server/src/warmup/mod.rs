//! Warm-up on restart (seed 001, Bonfire): an empty cache after a restart takes hours of
//! misses to refill on demand, so the server remembers what was being accessed and, when
//! started with `--warmup STRATEGY:K`, bulk-loads it from the store while it already serves.
//!
//! - [`monitor`] records accesses (GET, MGET, SET, MSET) with bounded memory;
//! - [`persist`] keeps that record in RocksDB, every `--warmup-persist` period and at clean
//!   shutdown, and reads it back at start;
//! - [`key_walk`] finds the tracked keys the store holds (the monitor keeps none of their
//!   bytes): a walk of the embedded store's keys, or of an upstream's by `SCAN`;
//! - [`load`] picks the K keys the strategy ranks first (`cache::warmup::choose`, the ranking
//!   replay uses) and fills the cache with them in rank order in the background, up to the
//!   first key that does not fit (`cache::warmup::LoadBudget`, replay's rule too). The fill
//!   only uses free space (it never evicts what clients brought in) and never overwrites a
//!   key a client wrote or read meanwhile: clients always win.
//!
//! INFO's `warmup` section shows the progress; `docs/server.md` documents it.

pub mod key_walk;
pub mod load;
pub mod persist;

pub use crate::access_monitor as monitor;
pub use crate::config::DEFAULT_WARMUP_PERSIST as DEFAULT_PERSIST;
pub use cache::warmup::{Strategy, WarmupSpec};
pub use monitor::{AccessMonitor, DEFAULT_PERIOD};

pub use crate::db::Filled as Fill;
pub use crate::metrics::WarmupProgress as Progress;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn specs_parse_like_replay_does() {
        let spec: WarmupSpec = "lastk:1000".parse().unwrap();
        assert_eq!(
            (spec.strategy, spec.k, spec.period),
            (Strategy::LastK, 1000, None)
        );
        assert_eq!(spec.to_string(), "lastk:1000");
        let first: WarmupSpec = "FirstK:5:1h".parse().unwrap();
        assert_eq!(first.period, Some(Duration::from_secs(3600)));
        assert_eq!(
            "topk:3".parse::<WarmupSpec>().unwrap().strategy,
            Strategy::TopK
        );
        assert_eq!(
            "randomk:3".parse::<WarmupSpec>().unwrap().strategy,
            Strategy::RandomK
        );
        for bad in [
            "lastk",
            "lastk:0",
            "lastk:x",
            "hotk:5",
            "topk:5:1h",
            "firstk:5:soon",
        ] {
            assert!(bad.parse::<WarmupSpec>().is_err(), "{bad}");
        }
    }
}
