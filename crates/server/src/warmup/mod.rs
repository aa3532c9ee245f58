//! Warm-up on restart (seed 001, Bonfire): an empty cache after a restart takes hours of
//! misses to refill on demand, so the server remembers what was being accessed and, when
//! started with `--warmup STRATEGY:K`, bulk-loads it from the store while it already serves.
//!
//! - [`monitor`] records accesses (GET, MGET, SET, MSET) with bounded memory;
//! - [`persist`] keeps that record in RocksDB, every `--warmup-persist` period and at clean
//!   shutdown, and reads it back at start;
//! - [`load`] picks the K keys the strategy ranks first (`cache::warmup::choose`, the ranking
//!   replay uses) and fills the cache with them in rank order in the background, up to the
//!   first key that does not fit (`cache::warmup::LoadBudget`, replay's rule too). The fill
//!   only uses free space (it never evicts what clients brought in) and never overwrites a
//!   key a client wrote or read meanwhile: clients always win.
//!
//! INFO's `warmup` section shows the progress; `docs/server.md` documents it.

pub mod load;
pub mod monitor;
pub mod persist;

pub use cache::warmup::{Strategy, WarmupSpec};
pub use monitor::{AccessMonitor, Unit};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// First-K's look-back when the spec does not give one (Bonfire's 24 hours).
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(24 * 3600);
/// How often the monitor's record is persisted when `--warmup-persist` is not given.
pub const DEFAULT_PERSIST: Duration = Duration::from_secs(10);

/// Everything warm-up keeps per server: the monitor and the progress of the current fill.
pub struct Warmup {
    pub monitor: AccessMonitor,
    pub progress: Progress,
}

impl Default for Warmup {
    fn default() -> Warmup {
        Warmup {
            monitor: AccessMonitor::new(monitor::DEFAULT_TRACK, DEFAULT_PERIOD.as_secs()),
            progress: Progress::default(),
        }
    }
}

/// Numbers INFO reads while the fill runs.
#[derive(Default)]
pub struct Progress {
    spec: Mutex<Option<WarmupSpec>>,
    started: Mutex<Option<Instant>>,
    /// Keys chosen to load.
    pub total: AtomicU64,
    /// Keys put into the cache by the fill.
    pub loaded: AtomicU64,
    /// Chosen keys not loaded: already cached, written meanwhile, gone from the store.
    pub skipped: AtomicU64,
    /// Store reads that failed.
    pub errors: AtomicU64,
    /// Milliseconds the fill took, once done.
    pub elapsed_ms: AtomicU64,
    pub done: AtomicBool,
    /// Persists written, and keys in the last one.
    pub persists: AtomicU64,
    pub persisted_keys: AtomicU64,
    /// The monitor's access number when the last persist began: every access up to it is in
    /// the store.
    pub persisted_seq: AtomicU64,
}

impl Progress {
    pub fn read(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    pub fn spec(&self) -> Option<WarmupSpec> {
        *self.spec.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Seconds since the fill started (frozen once it is done).
    pub fn seconds(&self) -> f64 {
        if self.is_done() {
            return Self::read(&self.elapsed_ms) as f64 / 1000.0;
        }
        let started = *self.started.lock().unwrap_or_else(|p| p.into_inner());
        started.map_or(0.0, |t| t.elapsed().as_secs_f64())
    }

    fn begin(&self, spec: WarmupSpec, total: u64) {
        *self.spec.lock().unwrap_or_else(|p| p.into_inner()) = Some(spec);
        *self.started.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.total.store(total, Ordering::Relaxed);
    }

    fn finish(&self) {
        let started = *self.started.lock().unwrap_or_else(|p| p.into_inner());
        let ms = started.map_or(0, |t| t.elapsed().as_millis() as u64);
        self.elapsed_ms.store(ms, Ordering::Relaxed);
        self.done.store(true, Ordering::Release);
    }
}

/// What one key of the bulk fill came to (see `Db::warm_fill`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    Loaded,
    /// Already cached, touched by a client meanwhile, or not in the store.
    Skipped,
    /// The key does not fit in the free room (or the share of the cache `K%` allows): the
    /// fill stops there rather than evict or skip ahead to lower-ranked keys.
    Full,
}

#[cfg(test)]
mod tests {
    use super::*;

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
