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
//!
//! Other nodes may also prove that the lease ran out before etcd deletes the record
//! ([`crate::expiry`]: the sequencer takeover starts then). That proof holds only if a lease
//! that ran out is never renewed, which etcd guarantees except across a change of its leader
//! (a new leader extends every lease it finds). So a renewal answered after the moment the
//! lease would have ended without it ([`LeaseClock::renewed`] returns false) is not trusted:
//! the node gives that lease up and joins again under a new one, which every node sees.

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
    /// Milliseconds after `base` before which etcd cannot have let the lease run out (the
    /// last confirmation's send time plus the TTL, no margin); 0: no lease confirmed.
    ends_ms: AtomicU64,
    /// The etcd revision a view must have reached for this node to trust it (see the
    /// module doc); 0 before any rejoin.
    fresh_from: AtomicI64,
}

impl Default for LeaseClock {
    fn default() -> LeaseClock {
        LeaseClock {
            base: Instant::now(),
            confirmed_until_ms: AtomicU64::new(0),
            ends_ms: AtomicU64::new(0),
            fresh_from: AtomicI64::new(0),
        }
    }
}

impl LeaseClock {
    /// A lease of `ttl` was granted (or renewed, see [`LeaseClock::renewed`]) by a request
    /// sent at `sent`.
    pub fn confirm(&self, sent: Instant, ttl: Duration) {
        let sent = sent.saturating_duration_since(self.base);
        let until = sent + ttl.saturating_sub(margin(ttl));
        // Renewals may be answered out of order: never move the end backwards.
        self.confirmed_until_ms
            .fetch_max(until.as_millis() as u64, Ordering::AcqRel);
        self.ends_ms
            .fetch_max((sent + ttl).as_millis() as u64, Ordering::AcqRel);
    }

    /// A renewal of the lease (TTL `ttl`) sent at `sent` was answered at `received`. Counts
    /// (and returns true) only if it was answered before the lease, as confirmed so far,
    /// could have run out in etcd: a later one renewed a lease that other nodes may already
    /// have proven gone (see the module doc), and the caller must give the lease up.
    pub fn renewed(&self, sent: Instant, received: Instant, ttl: Duration) -> bool {
        let ends = self.ends_ms.load(Ordering::Acquire);
        let received = received.saturating_duration_since(self.base).as_millis() as u64;
        if ends != 0 && received >= ends {
            return false;
        }
        self.confirm(sent, ttl);
        true
    }

    /// The lease is known to be gone.
    pub fn revoke(&self) {
        self.confirmed_until_ms.store(0, Ordering::Release);
        self.ends_ms.store(0, Ordering::Release);
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
    fn a_renewal_answered_after_the_lease_could_have_run_out_does_not_count() {
        let clock = LeaseClock::default();
        let t0 = Instant::now();
        let ttl = Duration::from_secs(2);
        let ms = Duration::from_millis;
        clock.confirm(t0, ttl);
        // Renewed in time: the lease goes on.
        assert!(clock.renewed(t0 + ms(700), t0 + ms(710), ttl));
        assert!(clock.confirmed(t0 + ms(2_100), 1));
        // The process stalls; its next renewal is answered 2 s after the last one was
        // sent, when etcd may have let the lease run out and other nodes proven it gone.
        assert!(!clock.renewed(t0 + ms(2_600), t0 + ms(2_700), ttl));
        assert!(!clock.confirmed(t0 + ms(2_701), 1), "not trusted again");
        assert!(!clock.renewed(t0 + ms(2_800), t0 + ms(2_810), ttl));
        // A new lease (after a rejoin) is confirmed afresh.
        clock.revoke();
        clock.confirm(t0 + ms(3_000), ttl);
        assert!(clock.renewed(t0 + ms(3_700), t0 + ms(3_710), ttl));
        assert!(clock.confirmed(t0 + ms(4_000), 1));
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
