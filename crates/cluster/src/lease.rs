//! Fencing (DESIGN §8): how long a node may still act as the owner of its slots on its own
//! word. A node's membership lease is what lets the others leave its slots alone; once the
//! node cannot show that the lease is still alive, another node may be given its slots, so
//! it must stop answering for them first.
//!
//! The node measures the lease from the moment it *sent* the grant or keep-alive that etcd
//! confirmed: etcd's own expiry of that lease comes no earlier than that moment plus the
//! TTL, so a node that stops at that point minus a margin has stopped before etcd could
//! delete its record, and (the failover waits out a further grace after that) well before
//! any other node takes over. Monotonic time keeps running while a process is stopped
//! (SIGSTOP), so a stopped node that resumes finds its lease unconfirmed at once.
//!
//! A lease that lapsed and was taken out anew is not enough either: the node's view of the
//! slot map may still be the one from before the lapse, in which it owns slots that were
//! reassigned meanwhile. So after a rejoin the node also waits until its view is at least
//! as new as the rejoin's own etcd revision.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Time kept back from the end of a lease: covers a request that passed the check just
/// before the lease ran out and is acknowledged just after.
pub fn margin(ttl: Duration) -> Duration {
    (ttl / 4).min(Duration::from_millis(500))
}

/// A node's own knowledge of its membership lease.
#[derive(Debug)]
pub struct LeaseClock {
    base: Instant,
    /// Milliseconds after `base` until which the lease is confirmed; 0: not confirmed.
    confirmed_until_ms: AtomicU64,
    /// The etcd revision a view must have reached for this node to trust it (see the
    /// module doc); 0 before any rejoin.
    fresh_from: AtomicI64,
}

impl Default for LeaseClock {
    fn default() -> LeaseClock {
        LeaseClock {
            base: Instant::now(),
            confirmed_until_ms: AtomicU64::new(0),
            fresh_from: AtomicI64::new(0),
        }
    }
}

impl LeaseClock {
    /// A lease of `ttl` was granted or renewed by a request sent at `sent`.
    pub fn confirm(&self, sent: Instant, ttl: Duration) {
        let until = sent.saturating_duration_since(self.base) + ttl.saturating_sub(margin(ttl));
        // Renewals may be answered out of order: never move the end backwards.
        self.confirmed_until_ms
            .fetch_max(until.as_millis() as u64, Ordering::AcqRel);
    }

    /// The lease is known to be gone.
    pub fn revoke(&self) {
        self.confirmed_until_ms.store(0, Ordering::Release);
    }

    /// The lease was taken out anew at etcd revision `revision`.
    pub fn rejoined(&self, revision: i64) {
        self.fresh_from.fetch_max(revision, Ordering::AcqRel);
    }

    /// Whether this node may answer for its slots at `now`, given a view of the cluster
    /// as of `view_revision`.
    pub fn confirmed(&self, now: Instant, view_revision: i64) -> bool {
        let until = self.confirmed_until_ms.load(Ordering::Acquire);
        let elapsed = now.saturating_duration_since(self.base).as_millis() as u64;
        elapsed < until && view_revision >= self.fresh_from.load(Ordering::Acquire)
    }

    /// How much longer the lease is confirmed from `now` (zero when it is not).
    pub fn remaining(&self, now: Instant) -> Duration {
        let until = Duration::from_millis(self.confirmed_until_ms.load(Ordering::Acquire));
        until.saturating_sub(now.saturating_duration_since(self.base))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_trusted_until_its_ttl_less_the_margin_from_when_it_was_asked() {
        let clock = LeaseClock::default();
        let t0 = Instant::now();
        assert!(!clock.confirmed(t0, 1), "nothing confirmed yet");
        let ttl = Duration::from_secs(2);
        clock.confirm(t0, ttl);
        assert!(clock.confirmed(t0 + Duration::from_millis(1400), 1));
        assert!(!clock.confirmed(t0 + Duration::from_millis(1600), 1));
        // An older renewal answered late does not shorten it; a newer one extends it.
        clock.confirm(t0 + Duration::from_secs(1), ttl);
        clock.confirm(t0, ttl);
        assert!(clock.confirmed(t0 + Duration::from_millis(2400), 1));
        clock.revoke();
        assert!(!clock.confirmed(t0 + Duration::from_millis(100), 1));
    }

    #[test]
    fn after_a_rejoin_only_a_view_as_new_as_the_rejoin_is_trusted() {
        let clock = LeaseClock::default();
        let t0 = Instant::now();
        clock.confirm(t0, Duration::from_secs(2));
        clock.rejoined(40);
        assert!(!clock.confirmed(t0, 39));
        assert!(clock.confirmed(t0, 40));
    }
}
