//! Proving that a member's membership lease ran out before etcd deletes its record
//! (docs/shared-log.md, "Sequencer takeover"). etcd revokes expired leases from a loop that
//! wakes every 500 ms, so a dead node's record outlives its lease by up to half a second, and
//! everything that waits for the record to go (the sequencer takeover) waits with it. A node
//! that has a reason to think a member is dead (it cannot connect to it) asks etcd for that
//! lease's time to live until the answers prove the lease ran out, then revokes it: every
//! node's watch sees the record deleted, which is the usual signal
//! ([`crate::successor::Lapses`]), only sooner.
//!
//! etcd answers a time to live in whole seconds, rounded towards zero: `0` means that less
//! than a second is left *or* that the lease ran out less than a second ago, so one answer
//! proves nothing. A run of them does ([`ExpiryWitness`]):
//!
//! 1. Let answer *a* be the first `0` of a run and *z* a later one. Had nothing renewed the
//!    lease after etcd answered *a* (at a moment no later than *a* came back), it ran out
//!    less than a second after that moment.
//! 2. A renewal sets the time to live to the full TTL (at least 1 s), so every answer given
//!    in the second after it is at least `1`. Consecutive answers of the run were given less
//!    than a second apart (each came back less than a second after the previous one was
//!    sent), so a renewal between *a* and *z* would have broken the run.
//! 3. So if *z* was sent a second (and a little: clock rates differ) after *a* came back,
//!    the lease had run out when etcd answered *z*, and etcd renews no lease that ran out (a
//!    keep-alive for one waits for its revocation and fails).
//!
//! The one exception to 3: a newly elected etcd leader extends every lease it finds, so a
//! lease that ran out and was not yet revoked could be renewed again. The owner guards
//! against that itself ([`crate::lease`]: a renewal answered after the lease's end does not
//! count), and the revocation that follows the proof ends the lease for good either way.

use crate::control::{ClusterError, ControlPlane};
use crate::node::NodeId;
use std::time::{Duration, Instant};

/// etcd's unit for a lease's time to live.
const SECOND: Duration = Duration::from_secs(1);

/// Added to the second of step 3: this host's clock and etcd's may run at slightly
/// different rates (parts per million, far below this).
const SLACK: Duration = Duration::from_millis(10);

/// How often a suspected member's lease is asked after: the proof comes at most this much
/// after the lease ran out (plus a round trip).
pub const POLL: Duration = Duration::from_millis(20);

/// What the answers so far prove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The lease ran out (or was revoked).
    Expired,
    /// Not proven yet: ask again.
    Undecided,
}

/// The argument of the module doc, kept over a sequence of time-to-live answers for one
/// lease.
#[derive(Debug, Default)]
pub struct ExpiryWitness {
    /// When the first answer of the current run of zeros came back.
    first_zero: Option<Instant>,
    /// When the previous question was sent.
    last_sent: Option<Instant>,
}

impl ExpiryWitness {
    /// Takes in etcd's answer `ttl` (whole seconds; negative once the lease is gone) to a
    /// question sent at `sent` and answered by `received`.
    pub fn observe(&mut self, sent: Instant, received: Instant, ttl: i64) -> Verdict {
        let close_to_previous = self
            .last_sent
            .is_some_and(|previous| received.saturating_duration_since(previous) < SECOND);
        self.last_sent = Some(sent);
        if ttl < 0 {
            // Revoked already, or ran out more than a second ago.
            return Verdict::Expired;
        }
        if ttl > 0 || !close_to_previous {
            // Alive now, or a gap a renewal could hide in: the run starts over.
            self.first_zero = None;
        }
        if ttl > 0 {
            return Verdict::Undecided;
        }
        let first = *self.first_zero.get_or_insert(received);
        if sent >= first + SECOND + SLACK {
            Verdict::Expired
        } else {
            Verdict::Undecided
        }
    }
}

/// The lease `id`'s record is under; `None` when it has no record.
pub async fn member_lease(plane: &ControlPlane, id: &NodeId) -> Result<Option<i64>, ClusterError> {
    let key = plane.key(&format!("members/{id}"));
    let resp = plane.bounded(plane.client().get(key, None)).await?;
    Ok(resp.kvs().first().map(|kv| kv.lease()))
}

/// etcd's time to live of `lease` in whole seconds, rounded towards zero; -1 once it is
/// gone.
pub async fn lease_ttl(plane: &ControlPlane, lease: i64) -> Result<i64, ClusterError> {
    let resp = plane
        .bounded(plane.client().lease_time_to_live(lease, None))
        .await?;
    Ok(resp.ttl())
}

/// How a check of a suspected member ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Its lease ran out and this check revoked it: every watch now sees it go.
    Revoked,
    /// It had no record, or its lease was gone already.
    Gone,
    /// Its lease was still alive after `within`: it renews it, whatever the suspicion.
    Alive,
}

/// Asks after `id`'s lease every [`POLL`] until the answers prove it ran out (then revokes
/// it) or `within` passes.
pub async fn confirm_gone(
    plane: &ControlPlane,
    id: &NodeId,
    within: Duration,
) -> Result<Outcome, ClusterError> {
    let Some(lease) = member_lease(plane, id).await? else {
        return Ok(Outcome::Gone);
    };
    let give_up = Instant::now() + within;
    let mut witness = ExpiryWitness::default();
    while Instant::now() < give_up {
        let sent = Instant::now();
        // An unanswered question is no answer: the run it interrupts restarts by itself
        // (the next answer comes more than a second after the last one sent, or not).
        if let Ok(ttl) = lease_ttl(plane, lease).await {
            if witness.observe(sent, Instant::now(), ttl) == Verdict::Expired {
                if ttl < 0 {
                    return Ok(Outcome::Gone);
                }
                match plane.bounded(plane.client().lease_revoke(lease)).await {
                    Ok(_) => {}
                    // etcd revoked it meanwhile.
                    Err(ClusterError::Unreachable { reason, .. })
                        if reason.contains("requested lease not found") =>
                    {
                        return Ok(Outcome::Gone)
                    }
                    Err(e) => return Err(e),
                }
                return Ok(Outcome::Revoked);
            }
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(Outcome::Alive)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds answers `(sent ms, received ms, ttl)` and returns the last verdict.
    fn verdicts(answers: &[(u64, u64, i64)]) -> Vec<Verdict> {
        let t0 = Instant::now();
        let mut witness = ExpiryWitness::default();
        answers
            .iter()
            .map(|&(sent, received, ttl)| {
                let ms = Duration::from_millis;
                witness.observe(t0 + ms(sent), t0 + ms(received), ttl)
            })
            .collect()
    }

    #[test]
    fn a_second_of_zeros_proves_the_lease_ran_out() {
        let mut answers: Vec<(u64, u64, i64)> = (0..60).map(|i| (i * 20, i * 20 + 2, 0)).collect();
        let v = verdicts(&answers);
        // The first zero came back at 2 ms: nothing is proven before a question sent at
        // 1,012 ms or later.
        let first_proof = v.iter().position(|v| *v == Verdict::Expired).unwrap();
        assert_eq!(answers[first_proof].0, 1_020);
        assert!(v[..first_proof].iter().all(|v| *v == Verdict::Undecided));
        // A lease that is gone is gone.
        answers.truncate(1);
        answers.push((30, 31, -1));
        assert_eq!(verdicts(&answers)[1], Verdict::Expired);
    }

    /// etcd's answer at `t` ms for a lease of 2 s renewed every `period` ms.
    fn renewed_every(period: u64, t: u64) -> i64 {
        ((2_000 - t % period) / 1_000) as i64
    }

    #[test]
    fn a_live_lease_is_never_taken_for_expired() {
        // Renewed every 700 ms (as a member renews its 2 s lease), and every 1.95 s (each
        // renewal at the last moment: zeros for 950 ms at a time), asked every 20 ms with
        // answers given anywhere between sending and receiving.
        for period in [700, 1_950] {
            for delay in [0, 3, 15] {
                let answers: Vec<(u64, u64, i64)> = (0..1_000)
                    .map(|i| (i * 20, i * 20 + delay, renewed_every(period, i * 20)))
                    .collect();
                assert!(
                    verdicts(&answers).iter().all(|v| *v == Verdict::Undecided),
                    "renewed every {period} ms, answers {delay} ms late"
                );
            }
        }
    }

    #[test]
    fn a_gap_a_renewal_could_hide_in_starts_the_run_again() {
        // Zeros, then no answer for a second (a renewal then would show only in that
        // second), then zeros again: the proof needs a fresh second of them.
        let v = verdicts(&[
            (0, 2, 0),
            (500, 502, 0),
            (1_600, 1_602, 0),
            (2_000, 2_002, 0),
        ]);
        assert_eq!(v, [Verdict::Undecided; 4]);
        let v = verdicts(&[
            (0, 2, 0),
            (500, 502, 0),
            (1_600, 1_602, 0),
            (2_612, 2_614, 0),
        ]);
        assert_eq!(
            v[3],
            Verdict::Undecided,
            "the gap after 500 ms broke the run"
        );
        let v = verdicts(&[
            (0, 2, 0),
            (900, 902, 0),
            (1_700, 1_702, 0),
            (2_612, 2_614, 0),
        ]);
        assert_eq!(v[3], Verdict::Expired);
        // A slow answer (sent at 0, back after 1.2 s) is a gap as well.
        let v = verdicts(&[(0, 2, 0), (500, 1_700, 0), (1_750, 1_752, 0)]);
        assert_eq!(v[2], Verdict::Undecided);
        // An answer of 1 in the middle: renewed.
        let v = verdicts(&[
            (0, 2, 0),
            (500, 502, 1),
            (1_020, 1_022, 0),
            (1_500, 1_502, 0),
        ]);
        assert_eq!(v, [Verdict::Undecided; 4]);
    }
}
