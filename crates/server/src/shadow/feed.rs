//! The request side of the shadows: every GET, SET (MSET: one per key) and DEL the cache
//! serves is handed to the policy thread as a 24-byte [`Access`], without waiting on it and
//! without allocating.
//!
//! Cost: with no shadow, one relaxed atomic load per request. With shadows, the key's hash is
//! placed in SHARDS' sampling space once ([`adapt::sample::position`]) and compared with the
//! largest threshold among the shadows: a key no shadow samples costs that and nothing more. A
//! sampled access takes one short lock to append to [`ShadowFeed::pending`], a buffer of at
//! most [`MAX_PENDING`] accesses allocated when the first shadow is added; the policy thread
//! swaps it with an empty spare every [`super::DRAIN_INTERVAL`] and at each tick. When it is
//! full the access is dropped and counted (`shadow_events_dropped`): the request never waits.
//! One buffer, not one per thread, so the shadows see accesses in the order they were served.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Most accesses waiting for the policy thread (24 bytes each: 1.5 MiB, twice over with the
/// spare). At the drain interval of 20 ms that is 3.2 M sampled accesses a second.
pub const MAX_PENDING: usize = 1 << 16;

/// What the cache did with a request, as a shadow replays it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// A GET that found the key (in the cache, or in the store and filled).
    Get,
    /// A GET that found nothing anywhere: a miss that caches nothing.
    Absent,
    /// A SET (or one pair of an MSET) that the store took.
    Put,
    /// A DEL, or a write that left the key uncached.
    Delete,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Access {
    /// On the policy clock (wall or `--tick manual`).
    pub time: f64,
    /// The key's hash (the one the key table and the access series use).
    pub key: u64,
    /// Bytes the cache charges for it: key, value and bookkeeping.
    pub size: u32,
    pub op: Served,
}

#[derive(Default)]
pub struct ShadowFeed {
    /// The largest sampling threshold among the shadows; 0: no shadow, nothing is fed.
    threshold: AtomicU64,
    pending: Mutex<Vec<Access>>,
    dropped: AtomicU64,
}

impl ShadowFeed {
    /// Whether some shadow samples the key with this hash.
    #[inline]
    pub fn wants(&self, hash: u64) -> bool {
        let threshold = self.threshold.load(Ordering::Relaxed);
        threshold != 0 && adapt::sample::position(hash) < threshold
    }

    /// Queues one access (call only when [`ShadowFeed::wants`] the key).
    #[inline]
    pub fn push(&self, access: Access) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.len() >= MAX_PENDING {
            drop(pending);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        pending.push(access);
    }

    /// Sets the largest threshold of the shadows (0 when none is left); the buffer is
    /// allocated with the first shadow.
    pub fn set_threshold(&self, threshold: u64) {
        if threshold > 0 {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            let room = MAX_PENDING.saturating_sub(pending.len());
            pending.reserve_exact(room);
        }
        self.threshold.store(threshold, Ordering::Relaxed);
    }

    /// Swaps the pending accesses into `spare` (which must be empty), oldest first.
    pub fn drain(&self, spare: &mut Vec<Access>) {
        debug_assert!(spare.is_empty());
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::swap(&mut *pending, spare);
    }

    /// Accesses dropped because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(key: u64) -> Access {
        Access {
            time: 0.0,
            key,
            size: 1,
            op: Served::Get,
        }
    }

    #[test]
    fn nothing_is_wanted_without_shadows_and_everything_with_a_full_sample() {
        let feed = ShadowFeed::default();
        assert!(!(0..1000).any(|k| feed.wants(k)));
        feed.set_threshold(adapt::Sampler::new(1.0).threshold());
        assert!((0..1000).all(|k| feed.wants(k)));
        feed.set_threshold(adapt::Sampler::new(0.1).threshold());
        let n = (0..100_000u64).filter(|&k| feed.wants(k)).count();
        assert!((9_000..11_000).contains(&n), "{n}");
    }

    #[test]
    fn the_buffer_is_bounded_keeps_order_and_swaps_without_growing() {
        let feed = ShadowFeed::default();
        feed.set_threshold(1);
        let mut spare = Vec::with_capacity(MAX_PENDING);
        for key in 0..(MAX_PENDING as u64 + 5) {
            feed.push(access(key));
        }
        assert_eq!(feed.dropped(), 5);
        feed.drain(&mut spare);
        assert_eq!(spare.len(), MAX_PENDING);
        assert!(spare.iter().enumerate().all(|(i, a)| a.key == i as u64));
        spare.clear();
        feed.push(access(7));
        feed.drain(&mut spare);
        assert_eq!(spare, [access(7)]);
        assert!(spare.capacity() >= MAX_PENDING);
    }
}
