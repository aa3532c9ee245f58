//! Honouring the log's lease (issue 27 item 4; docs/shared-log.md, "Lease policy"): the
//! sequencer's `ZLOG.LEASE` says how many positions this client may take at once and for how
//! long, and [`Log::reserve`] hands them out locally until the lease is spent or has
//! expired, then asks again.
//!
//! A lease is a range of positions of this client's own: holding one blocks no other
//! client, which gets a range of its own (or a round trip) at once. What a client holds and
//! does not use costs something only when it gives it up: [`Log::release`] first hands the
//! rest back to the sequencer (`ZLOG.RETURN`, which takes it if nothing was reserved after
//! it, so it is handed out again), and otherwise fills it (readers then see `Filled`,
//! CORFU's junk): a fill per replica per position, sent as one pipelined request per
//! storage object. So the size of a delay lease is what
//! bounds that cost: it grows at most twofold per lease and never past [`WANT_CAP`] (see
//! [`Sizing`]). `reserve` gives positions up itself when a delay lease expires or the
//! policy stops granting leases, so a live client leaves a hole for at most the lease's
//! duration plus one call. A client that dies holding positions leaves holes that a reader
//! fills, as in CORFU ([`Log::fill`]); positions held at an epoch that recovery replaced
//! are never filled by their holder, because the new sequencer may hand the same numbers
//! out again.

use crate::{pair_at, Error, Log, Reply, Result};
use redis::{ConnectionLike, Value};
use std::time::{Duration, Instant};

/// Most positions a client may ask for under a delay lease (the server's bound).
pub const MAX_WANT: u64 = 65_536;

/// Most positions this client asks for under a delay lease. A lease round trip shared by
/// 1,024 positions costs each a few nanoseconds, so more gains nothing, while a lease that
/// expires unused (its client descheduled, or done appending) and cannot be handed back
/// costs a fill per replica for every position left: this caps that at about 2,000 fills.
pub const WANT_CAP: u64 = 1_024;

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
    /// over `elapsed` of a lease of `ms` milliseconds. Too few only costs one more round
    /// trip; too many costs a fill per replica per spare position, and a rate measured over
    /// a few microseconds of a burst says little about the next milliseconds (the client
    /// may stop, or not be scheduled). So it asks for what that rate fills the lease with,
    /// but at most twice what it used last time and at most [`WANT_CAP`].
    fn learn(&mut self, used: u64, elapsed: Duration, ms: u64) {
        if ms == 0 {
            return;
        }
        let window = Duration::from_millis(ms).as_secs_f64();
        let rate = used as f64 / elapsed.as_secs_f64().clamp(1e-6, window);
        let fits = (rate * window).ceil() as u64;
        self.want = fits.min(used.max(1) * 2).clamp(1, WANT_CAP);
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

    /// Gives up the positions held under a lease: hands those not used back to the
    /// sequencer, or fills them if it cannot take them back (so readers need not wait for
    /// them), unless recovery has since moved the log to a newer epoch.
    pub fn release(&mut self) -> Result<()> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        self.sizing
            .learn(held.next - held.first, held.granted.elapsed(), held.ms);
        if held.epoch < self.epoch || held.next == held.end {
            return Ok(());
        }
        if self.give_back(&held)? {
            self.given_back += held.end - held.next;
            return Ok(());
        }
        if self.fill_by_object(held.next, held.end) {
            self.filled += held.end - held.next;
            return Ok(());
        }
        // One by one: each refusal (a stale epoch, a position a reader repaired, a slot
        // that moved) is handled where it happens.
        for pos in held.next..held.end {
            match self.fill(pos) {
                // Filled, or someone wrote it meanwhile (only a repair of ours can): either
                // way it is no hole.
                Ok(()) | Err(Error::Written) => self.filled += 1,
                Err(e) => {
                    // Keep the rest for the next try.
                    self.held = Some(Held { next: pos, ..held });
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Fills `from..end` with one pipelined request per storage object, head replicas
    /// before the rest as a chain is written, instead of a round trip per position and
    /// replica. `false` if any reply was not a plain fill (the caller then fills one by one:
    /// a fill is idempotent).
    fn fill_by_object(&mut self, from: u64, end: u64) -> bool {
        let stripes = u64::from(self.layout.stripes());
        for replica in 0..self.layout.replicas() {
            for stripe in 0..self.layout.stripes() {
                let first = from + (u64::from(stripe) + stripes - from % stripes) % stripes;
                if first >= end {
                    continue;
                }
                let obj = self.layout.object(stripe, replica);
                let mut pipe = redis::pipe();
                for pos in (first..end).step_by(stripes as usize) {
                    pipe.add_command(crate::storage("ZLOG.FILL", &obj, self.epoch, pos));
                }
                if pipe.query::<Vec<Value>>(&mut self.conn).is_err() {
                    return false;
                }
            }
        }
        true
    }

    /// `ZLOG.RETURN`: whether the sequencer took the unused rest of `held` back. A
    /// sequencer that is gone takes nothing back (the rest is filled, or refused as stale
    /// once a new one runs).
    fn give_back(&mut self, held: &Held) -> Result<bool> {
        let cmd = redis::cmd("ZLOG.RETURN")
            .arg(&self.name)
            .arg(held.epoch)
            .arg(held.next)
            .arg(held.end)
            .clone();
        match self.sequencer_call(Instant::now(), &cmd)? {
            Reply::Ok(Value::Int(taken)) => Ok(taken == 1),
            Reply::NoSequencer => Ok(false),
            _ => Err(Error::Refused("ZLOG.RETURN".into())),
        }
    }

    /// Positions held now and not yet used.
    pub fn held(&self) -> u64 {
        self.held.map_or(0, |h| h.end - h.next)
    }

    /// Positions this client held under leases and gave up unused: `(handed back to the
    /// sequencer, filled)`, since it opened the log.
    pub fn given_up(&self) -> (u64, u64) {
        (self.given_back, self.filled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_lease_is_sized_to_the_rate_seen_under_the_last() {
        let mut s = Sizing::default();
        // 100 positions in 2 ms of a 10 ms lease: 50,000/s, so 500 would fit in the next,
        // but it asks for at most twice what it used.
        s.learn(100, Duration::from_millis(2), 10);
        assert_eq!(s.want, 200);
        s.learn(200, Duration::from_millis(2), 10);
        assert_eq!(s.want, 400);
        s.learn(400, Duration::from_millis(9), 10);
        assert_eq!(s.want, 445);
        // The lease expired with 40 used: 40 over 10 ms.
        s.learn(40, Duration::from_millis(30), 10);
        assert_eq!(s.want, 40);
        // A burst's rate never sizes a lease past the cap.
        s.learn(1_000, Duration::ZERO, 10_000);
        assert_eq!(s.want, WANT_CAP);
        s.learn(0, Duration::from_millis(10), 10);
        assert_eq!(s.want, 1);
        // Not a delay lease: nothing to learn.
        s.learn(7, Duration::from_millis(1), 0);
        assert_eq!(s.want, 1);
    }
}
