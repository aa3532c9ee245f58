//! Honouring the log's lease (issue 27 item 4; docs/shared-log.md, "Lease policy"): the
//! sequencer's `ZLOG.LEASE` says how many positions this client may take at once and for how
//! long, and [`Log::reserve`] hands them out locally until the lease is spent or has
//! expired, then asks again.
//!
//! Positions a client held and did not use are holes. [`Log::release`] fills them (readers
//! then see `Filled`, CORFU's junk), and `reserve` does so itself when a delay lease expires
//! or the policy stops granting leases, so a live client leaves a hole for at most the
//! lease's duration plus one call. A client that dies holding positions leaves holes that a
//! reader fills, as in CORFU ([`Log::fill`]); positions held at an epoch that recovery
//! replaced are never filled by their holder, because the new sequencer may hand the same
//! numbers out again.

use crate::{pair_at, Error, Log, Reply, Result};
use redis::ConnectionLike;
use std::time::{Duration, Instant};

/// Most positions a client asks for under a delay lease (the server's bound too).
pub const MAX_WANT: u64 = 65_536;

/// Positions this client holds under a lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    epoch: u64,
    first: u64,
    next: u64,
    end: u64,
    granted: Instant,
    /// Delay leases: when the unused rest must be given up.
    expires: Option<Instant>,
    ms: u64,
}

/// What the last lease taught the client about its own rate, for the next delay lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizing {
    want: u64,
}

impl Default for Sizing {
    fn default() -> Sizing {
        Sizing { want: 1 }
    }
}

impl Sizing {
    /// Sizes the next delay lease from how fast the last one was used: `used` positions
    /// over `elapsed` of a lease of `ms` milliseconds.
    fn learn(&mut self, used: u64, elapsed: Duration, ms: u64) {
        if ms == 0 {
            return;
        }
        let window = Duration::from_millis(ms).as_secs_f64();
        let rate = used as f64 / elapsed.as_secs_f64().clamp(1e-6, window);
        // Too few only costs one more round trip; too many costs a fill per spare position.
        self.want = ((rate * window).ceil() as u64).clamp(1, MAX_WANT);
    }
}

impl<C: ConnectionLike> Log<C> {
    /// One position for this client: from the positions it holds under the log's lease, or
    /// from the sequencer (`ZLOG.LEASE`), recovering the sequencer if it is gone. The epoch
    /// to write it at comes with it.
    pub fn reserve(&mut self) -> Result<(u64, u64)> {
        let now = Instant::now();
        if let Some(held) = &mut self.held {
            let live = held.epoch >= self.epoch && held.expires.is_none_or(|at| now < at);
            if live && held.next < held.end {
                let pos = held.next;
                held.next += 1;
                return Ok((held.epoch, pos));
            }
        }
        self.release()?;
        let started = Instant::now();
        loop {
            let cmd = redis::cmd("ZLOG.LEASE")
                .arg(&self.name)
                .arg(self.sizing.want)
                .clone();
            match self.sequencer_call(started, &cmd)? {
                Reply::Ok(value) => {
                    let [epoch, first, count, ms] = pair_at::<4>(value)?;
                    if count == 0 {
                        return Err(Error::Refused("ZLOG.LEASE granted no position".into()));
                    }
                    self.epoch = self.epoch.max(epoch);
                    let granted = Instant::now();
                    self.held = Some(Held {
                        epoch,
                        first,
                        next: first + 1,
                        end: first + count,
                        granted,
                        expires: (ms > 0).then(|| granted + Duration::from_millis(ms)),
                        ms,
                    });
                    return Ok((epoch, first));
                }
                Reply::NoSequencer => self.recover(started, self.epoch + 1)?,
                _ => return Err(Error::Refused("ZLOG.LEASE".into())),
            }
        }
    }

    /// Gives up the positions held under a lease: fills those not used (so readers need not
    /// wait for them), unless recovery has since moved the log to a newer epoch.
    pub fn release(&mut self) -> Result<()> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        self.sizing
            .learn(held.next - held.first, held.granted.elapsed(), held.ms);
        if held.epoch < self.epoch {
            return Ok(());
        }
        for pos in held.next..held.end {
            match self.fill(pos) {
                // Filled, or someone wrote it meanwhile (only a repair of ours can): either
                // way it is no hole.
                Ok(()) | Err(Error::Written) => {}
                Err(e) => {
                    // Keep the rest for the next try.
                    self.held = Some(Held { next: pos, ..held });
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Positions held now and not yet used.
    pub fn held(&self) -> u64 {
        self.held.map_or(0, |h| h.end - h.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_lease_is_sized_to_the_rate_seen_under_the_last() {
        let mut s = Sizing::default();
        // 100 positions in 2 ms of a 10 ms lease: 50,000/s, so 500 fit in the next.
        s.learn(100, Duration::from_millis(2), 10);
        assert_eq!(s.want, 500);
        // The lease expired with 40 used: 40 over 10 ms.
        s.learn(40, Duration::from_millis(30), 10);
        assert_eq!(s.want, 40);
        s.learn(1, Duration::ZERO, 10_000);
        assert_eq!(s.want, MAX_WANT);
        s.learn(0, Duration::from_millis(10), 10);
        assert_eq!(s.want, 1);
        // Not a delay lease: nothing to learn.
        s.learn(7, Duration::from_millis(1), 0);
        assert_eq!(s.want, 1);
    }
}
