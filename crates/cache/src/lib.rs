//! The cache Mantle manages: objects with sizes, a capacity in bytes and/or objects that can
//! change at run time, pluggable eviction algorithms (LRU, FIFO, CLOCK, SIEVE, S3-FIFO, ARC,
//! LIRS, 2Q, SLRU, LFU, LFUDA, Random, Hyperbolic) that behave like libCacheSim 0.3.5's
//! (docs/cache.md says how exactly, per algorithm), and an access log for policies.
//!
//! Replaying a trace the way libCacheSim does is one call per request:
//!
//! ```
//! use cache::{Algorithm, Cache, Capacity};
//! let mut cache = Cache::new(Algorithm::Lru, Capacity { bytes: Some(100), objects: None });
//! let mut misses = 0;
//! for (key, size) in [(1, 60), (2, 30), (1, 60), (3, 40), (2, 30)] {
//!     if !cache.access(key, size) {
//!         misses += 1;
//!     }
//! }
//! assert_eq!(misses, 4);
//! assert!(cache.bytes() <= 100);
//! ```
//!
//! Classes (priorities, allocation caps, pinning; `docs/cache-hints.md`) are a layer of the
//! same type: `Cache<Classes>` ([`ClassedCache`], built with [`Cache::with_classes`]) runs the
//! same code with the class rules asked at each decision; [`AnyCache`] chooses at run time.
//!
//! See `docs/cache.md` for the semantics, the memory accounting and the agreement with
//! libCacheSim.

mod access_log;
pub mod admission;
mod algorithm;
mod any;
mod cache;
pub mod capacity;
mod classed;
mod eviction;
pub mod future;
/// Per-request hooks (a Lua policy's `admit`, `priority`, ...) behind one trait.
pub mod hooks;
mod layer;
mod prefetch;
mod queue;
mod request;
mod slab;

pub use access_log::AccessLog;
pub use admission::Admission;
pub use algorithm::Algorithm;
pub use any::AnyCache;
pub use cache::{Cache, SlotHint};
pub use capacity::Capacity;
pub use classed::{ClassFigures, ClassStats, ClassedCache, Classes};
pub use layer::{ClassLayer, NoClasses, Rewrite};
pub use prefetch::prefetch_read;
pub use request::{RequestCounts, Served};
pub use slab::Packing;

/// Class files and rules (cache hints, seed 004): parsed once, matched per request.
pub mod classes;
pub mod glob;

/// Per-object metadata accounting, exposed so tests and docs compute it from the real types.
pub mod overhead;
pub mod warmup;
