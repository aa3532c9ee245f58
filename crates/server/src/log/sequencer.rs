//! The sequencers this node runs: per log, an epoch and an in-memory counter of the next
//! position, as ZLog's sequencer is (`fetch_add` per request). Nothing here is durable, by
//! design: a node that starts (or takes a log's slot over) knows no sequencer, answers
//! `NOSEQ`, and a client recovers the tail from storage by sealing it at a newer epoch and
//! installing the result with `ZLOG.INIT` (see docs/shared-log.md).
//!
//! Safety never rests on this state being dropped when the slot moves away: positions handed
//! out at an old epoch are refused by storage once it is sealed at a newer one.

use super::lease::{self, LeaseSource, LeaseThread, Leased, Seen};
use bytes::Bytes;
use policy::{Lease, Limits};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Once, RwLock};

/// The most positions one `ZLOG.NEXT` may reserve.
pub const MAX_BATCH: u64 = 1 << 20;

/// The most logs one node sequences; an INIT past it is refused, so a client cannot grow the
/// map without bound.
pub const MAX_LOGS: usize = 100_000;

/// One log's sequencer.
pub struct Sequencer {
    /// The log's name (sharing the map key's bytes), which a connection's [`Cached`]
    /// sequencer is matched on.
    log: Bytes,
    epoch: u64,
    next: AtomicU64,
    /// The lease `ZLOG.LEASE` hands out (`lease::encode`), decided by the lease thread.
    lease: AtomicU64,
    /// A 64-bit sketch of the connections that made requests since the lease thread last
    /// looked (bit `hash(id) % 64`), which counts distinct clients without a set that grows.
    clients: AtomicU64,
    /// The lease thread's own bookkeeping: `next`, `served` and the sketch at its last look.
    seen_next: AtomicU64,
    seen_served: AtomicU64,
    seen_clients: AtomicU64,
    /// `ZLOG.NEXT`/`ZLOG.LEASE` requests served since it was installed: the balancer's
    /// rates (`sequencers()`), and the lease thread's contention as the difference to
    /// `seen_served` (one counter per request, not two).
    served: AtomicU64,
    /// Replaced by a newer epoch's sequencer: connections that kept it (`Cached`) look the
    /// log up again.
    retired: AtomicBool,
    /// The position it started at: `next - start` positions were handed out.
    start: u64,
}

/// What the balancer reads of one sequencer: totals since it was installed, which it turns
/// into rates by differencing two ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequencerCount {
    pub log: Bytes,
    pub epoch: u64,
    /// `ZLOG.NEXT` requests served.
    pub requests: u64,
    /// Positions handed out.
    pub positions: u64,
}

impl Sequencer {
    fn new(log: Bytes, epoch: u64, tail: u64) -> Sequencer {
        Sequencer {
            log,
            epoch,
            next: AtomicU64::new(tail),
            lease: AtomicU64::new(lease::encode(Lease::RoundTrip)),
            clients: AtomicU64::new(0),
            seen_next: AtomicU64::new(tail),
            seen_served: AtomicU64::new(0),
            seen_clients: AtomicU64::new(0),
            served: AtomicU64::new(0),
            retired: AtomicBool::new(false),
            start: tail,
        }
    }

    /// Reserves `count` positions for connection `client`, counting the request.
    fn reserve(&self, count: u64, client: u64) -> u64 {
        self.served.fetch_add(1, Ordering::Relaxed);
        let bit = 1u64 << (client.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58);
        if self.clients.load(Ordering::Relaxed) & bit == 0 {
            self.clients.fetch_or(bit, Ordering::Relaxed);
        }
        self.next.fetch_add(count, Ordering::Relaxed)
    }

    pub fn set_lease(&self, lease: Lease) {
        self.lease.store(lease::encode(lease), Ordering::Relaxed);
    }

    /// The contention since the last call (the lease thread's alone).
    pub fn take_contention(&self) -> Seen {
        let next = self.next.load(Ordering::Relaxed);
        let positions = next.saturating_sub(self.seen_next.swap(next, Ordering::Relaxed));
        let served = self.served.load(Ordering::Relaxed);
        let requests = served.saturating_sub(self.seen_served.swap(served, Ordering::Relaxed));
        let now = self.clients.swap(0, Ordering::Relaxed);
        let before = self.seen_clients.swap(now, Ordering::Relaxed);
        Seen {
            requests,
            positions,
            clients: distinct(now | before),
        }
    }
}

impl Leased for Sequencer {
    fn take_contention(&self) -> Seen {
        Sequencer::take_contention(self)
    }

    fn set_lease(&self, lease: Lease) {
        Sequencer::set_lease(self, lease)
    }
}

/// Linear counting over a 64-bit sketch: exact while clients fall on distinct bits, an
/// estimate (rounded) past that, at most 266 when every bit is set.
fn distinct(sketch: u64) -> f64 {
    let zeros = f64::from(sketch.count_zeros());
    if zeros == 0.0 {
        return (64.0 * 64f64.ln()).round();
    }
    (-64.0 * (zeros / 64.0).ln()).round()
}

/// Why `install` refused.
#[derive(Debug, PartialEq, Eq)]
pub enum InstallError {
    /// The running sequencer's epoch is not older (it is given).
    Stale(u64),
    /// [`MAX_LOGS`] reached.
    Full,
}

/// What a lease grants one `ZLOG.LEASE`: positions from `first`, `count` of them, to use
/// within `ms` milliseconds (0: until spent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub epoch: u64,
    pub first: u64,
    pub count: u64,
    pub ms: u64,
}

/// The sequencer a connection asked last (kept in its `Session`), so its next request on
/// the same log skips the map's lock, the hashing of the name and the reference count: a
/// round-trip client makes one request per position. It is dropped for a lookup when the
/// log's sequencer was replaced at a newer epoch ([`Sequencers::install`] retires the old).
#[derive(Default)]
pub struct Cached(Option<Arc<Sequencer>>);

impl std::fmt::Debug for Cached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let log = self.0.as_ref().map(|seq| &seq.log);
        f.debug_tuple("Cached").field(&log).finish()
    }
}

pub struct Sequencers {
    logs: Arc<RwLock<HashMap<Bytes, Arc<Sequencer>>>>,
    /// The running policy's lease hook, and the thread that runs it (started with the first
    /// sequencer, so a node that serves no log runs no lease thread).
    lease_source: Arc<LeaseSource>,
    limits: Limits,
    lease_thread: Once,
}

impl Default for Sequencers {
    fn default() -> Sequencers {
        Sequencers::new(Arc::default(), Limits::default())
    }
}

impl Sequencers {
    /// Sequencers whose leases the policy offered to `lease_source` decides, under `limits`.
    pub fn new(lease_source: Arc<LeaseSource>, limits: Limits) -> Sequencers {
        Sequencers {
            logs: Arc::default(),
            lease_source,
            limits,
            lease_thread: Once::new(),
        }
    }

    /// A lease thread's state over these sequencers (not started: tests drive its rounds).
    pub fn lease_thread(&self) -> LeaseThread<Sequencer> {
        LeaseThread::new(
            Arc::downgrade(&self.logs),
            self.lease_source.clone(),
            self.limits,
        )
    }

    pub fn lease_status(&self) -> lease::LeaseStatus {
        self.lease_source.status()
    }

    fn get(&self, log: &[u8]) -> Option<Arc<Sequencer>> {
        self.logs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(log)
            .cloned()
    }

    /// `log`'s running sequencer through the connection's `cached` one: looked up (and
    /// kept) only when the connection last asked another log or that sequencer was retired.
    fn get_cached<'c>(&self, cached: &'c mut Cached, log: &[u8]) -> Option<&'c Sequencer> {
        let hit = matches!(&cached.0, Some(seq)
            if seq.log[..] == *log && !seq.retired.load(Ordering::Acquire));
        if !hit {
            // No allocation on a miss either: the map's `Arc` is shared, as before.
            cached.0 = None;
            cached.0 = Some(self.get(log)?);
        }
        cached.0.as_deref()
    }

    /// Reserves `count` positions: the epoch and the first; `None` without a sequencer.
    pub fn next(&self, log: &[u8], count: u64) -> Option<(u64, u64)> {
        self.next_for(&mut Cached::default(), log, count, 0)
    }

    /// [`Sequencers::next`] for connection `client` (counted in the log's contention),
    /// through the sequencer it `cached`.
    pub fn next_for(
        &self,
        cached: &mut Cached,
        log: &[u8],
        count: u64,
        client: u64,
    ) -> Option<(u64, u64)> {
        let seq = self.get_cached(cached, log)?;
        Some((seq.epoch, seq.reserve(count, client)))
    }

    /// The log's lease now; `None` without a sequencer.
    pub fn lease(&self, log: &[u8]) -> Option<Lease> {
        let seq = self.get(log)?;
        Some(lease::decode(seq.lease.load(Ordering::Relaxed)))
    }

    /// Reserves what the log's lease grants connection `client`: one position on round
    /// trips, `n` under a quota, and under a delay the `want` positions (`1..=MAX_LEASE_POSITIONS`)
    /// the client expects to use within the lease's `ms`.
    pub fn lease_for(
        &self,
        cached: &mut Cached,
        log: &[u8],
        want: u64,
        client: u64,
    ) -> Option<Grant> {
        let seq = self.get_cached(cached, log)?;
        let (count, ms) = match lease::decode(seq.lease.load(Ordering::Relaxed)) {
            Lease::RoundTrip => (1, 0),
            Lease::Quota { n } => (n, 0),
            Lease::Delay { ms } => (want.clamp(1, policy::MAX_LEASE_POSITIONS), ms),
        };
        Some(Grant {
            epoch: seq.epoch,
            first: seq.reserve(count, client),
            count,
            ms,
        })
    }

    /// Takes back positions `from..end` that a lease granted at `epoch` and the client did
    /// not use, so they are handed out again instead of being filled: only while nothing was
    /// reserved after them (`end` is still the next position), so no other client's
    /// positions move. `None` without a sequencer, `Some(false)` if they cannot be taken back
    /// (the client fills them). Uniqueness rests on the client returning only its own
    /// positions; storage's write-once check still refuses a second write to any position.
    pub fn give_back(&self, log: &[u8], epoch: u64, from: u64, end: u64) -> Option<bool> {
        let seq = self.get(log)?;
        if seq.epoch != epoch || from >= end || from < seq.start {
            return Some(false);
        }
        Some(
            seq.next
                .compare_exchange(end, from, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok(),
        )
    }

    /// The epoch and the position the next append gets (CheckTail), without reserving it.
    pub fn tail(&self, log: &[u8]) -> Option<(u64, u64)> {
        let seq = self.get(log)?;
        Some((seq.epoch, seq.next.load(Ordering::Relaxed)))
    }

    /// Starts `log`'s sequencer at `epoch`, handing out positions from `tail`, unless one runs
    /// at the same or a newer epoch.
    pub fn install(&self, log: &[u8], epoch: u64, tail: u64) -> Result<(), InstallError> {
        let mut logs = self.logs.write().unwrap_or_else(|e| e.into_inner());
        match logs.get(log) {
            Some(running) if running.epoch >= epoch => {
                return Err(InstallError::Stale(running.epoch))
            }
            None if logs.len() >= MAX_LOGS => return Err(InstallError::Full),
            _ => {}
        }
        let lease = logs
            .get(log)
            .map_or(lease::encode(Lease::RoundTrip), |running| {
                running.lease.load(Ordering::Relaxed)
            });
        let name = Bytes::copy_from_slice(log);
        let seq = Sequencer::new(name.clone(), epoch, tail);
        seq.lease.store(lease, Ordering::Relaxed);
        if let Some(old) = logs.insert(name, Arc::new(seq)) {
            // Before the reply to ZLOG.INIT: no request after it reserves at the old epoch.
            old.retired.store(true, Ordering::Release);
        }
        drop(logs);
        self.lease_thread.call_once(|| self.lease_thread().spawn());
        Ok(())
    }

    /// Every sequencer's counts, for the balancer (which keeps only the hottest it is shown).
    pub fn counts(&self) -> Vec<SequencerCount> {
        let logs = self.logs.read().unwrap_or_else(|e| e.into_inner());
        logs.iter()
            .map(|(log, seq)| SequencerCount {
                log: log.clone(),
                epoch: seq.epoch,
                requests: seq.served.load(Ordering::Relaxed),
                positions: seq.next.load(Ordering::Relaxed).wrapping_sub(seq.start),
            })
            .collect()
    }

    /// How many logs this node sequences.
    pub fn len(&self) -> usize {
        self.logs.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_handed_out_once_and_epochs_only_advance() {
        let seqs = Sequencers::default();
        assert_eq!(seqs.next(b"l", 1), None);
        seqs.install(b"l", 1, 5).unwrap();
        assert_eq!(seqs.next(b"l", 1), Some((1, 5)));
        assert_eq!(seqs.next(b"l", 10), Some((1, 6)));
        assert_eq!(seqs.tail(b"l"), Some((1, 16)));
        assert_eq!(seqs.install(b"l", 1, 0), Err(InstallError::Stale(1)));
        seqs.install(b"l", 2, 40).unwrap();
        assert_eq!(seqs.next(b"l", 1), Some((2, 40)));
    }

    #[test]
    fn a_connections_kept_sequencer_follows_a_newer_epoch_and_another_log() {
        let seqs = Sequencers::default();
        let mut cached = Cached::default();
        assert_eq!(seqs.next_for(&mut cached, b"l", 1, 1), None);
        seqs.install(b"l", 1, 5).unwrap();
        assert_eq!(seqs.next_for(&mut cached, b"l", 1, 1), Some((1, 5)));
        // Another connection recovers the log at epoch 2: this one's next request must not
        // reserve at epoch 1 from the sequencer it kept.
        seqs.install(b"l", 2, 100).unwrap();
        assert_eq!(seqs.next_for(&mut cached, b"l", 1, 1), Some((2, 100)));
        let grant = seqs.lease_for(&mut cached, b"l", 1, 1).unwrap();
        assert_eq!((grant.epoch, grant.first), (2, 101));
        // Another log, then back: each answers from its own counter.
        seqs.install(b"m", 7, 0).unwrap();
        assert_eq!(seqs.next_for(&mut cached, b"m", 1, 1), Some((7, 0)));
        assert_eq!(seqs.next_for(&mut cached, b"l", 1, 1), Some((2, 102)));
        assert_eq!(seqs.next_for(&mut cached, b"none", 1, 1), None);
        assert_eq!(seqs.next_for(&mut cached, b"m", 2, 1), Some((7, 1)));
        assert_eq!(seqs.tail(b"m"), Some((7, 3)));
    }

    #[test]
    fn counts_follow_requests_and_positions() {
        let seqs = Sequencers::default();
        seqs.install(b"l", 3, 10).unwrap();
        seqs.next(b"l", 1);
        seqs.next(b"l", 5);
        seqs.tail(b"l");
        let counts = seqs.counts();
        assert_eq!(
            counts,
            vec![SequencerCount {
                log: Bytes::from_static(b"l"),
                epoch: 3,
                requests: 2,
                positions: 6,
            }]
        );
    }

    #[test]
    fn a_lease_grants_what_its_mode_says() {
        let seqs = Sequencers::default();
        assert_eq!(seqs.lease_for(&mut Cached::default(), b"l", 5, 1), None);
        seqs.install(b"l", 1, 0).unwrap();
        let grant = |want| {
            seqs.lease_for(&mut Cached::default(), b"l", want, 1)
                .unwrap()
        };
        assert_eq!(
            grant(5),
            Grant {
                epoch: 1,
                first: 0,
                count: 1,
                ms: 0
            }
        );
        seqs.get(b"l").unwrap().set_lease(Lease::Quota { n: 10 });
        assert_eq!(
            grant(5),
            Grant {
                epoch: 1,
                first: 1,
                count: 10,
                ms: 0
            }
        );
        seqs.get(b"l").unwrap().set_lease(Lease::Delay { ms: 7 });
        assert_eq!(
            grant(5),
            Grant {
                epoch: 1,
                first: 11,
                count: 5,
                ms: 7
            }
        );
        assert_eq!(grant(0).count, 1);
        assert_eq!(grant(u64::MAX).count, policy::MAX_LEASE_POSITIONS);
        // A newer epoch keeps the log's lease.
        seqs.install(b"l", 2, 100).unwrap();
        assert_eq!(seqs.lease(b"l"), Some(Lease::Delay { ms: 7 }));
    }

    #[test]
    fn only_the_last_grant_is_taken_back_and_only_at_its_epoch() {
        let seqs = Sequencers::default();
        assert_eq!(seqs.give_back(b"l", 1, 0, 1), None);
        seqs.install(b"l", 1, 10).unwrap();
        seqs.get(b"l").unwrap().set_lease(Lease::Delay { ms: 5 });
        let a = seqs.lease_for(&mut Cached::default(), b"l", 8, 1).unwrap();
        let b = seqs.lease_for(&mut Cached::default(), b"l", 8, 2).unwrap();
        assert_eq!((a.first, b.first), (10, 18));
        // a's spare positions lie below b's: giving them back would hand b's out again.
        assert_eq!(
            seqs.give_back(b"l", 1, a.first + 3, a.first + a.count),
            Some(false)
        );
        // Wrong epoch, empty or reversed range, below the sequencer's start: refused.
        assert_eq!(seqs.give_back(b"l", 2, 20, 26), Some(false));
        assert_eq!(seqs.give_back(b"l", 1, 26, 26), Some(false));
        assert_eq!(seqs.give_back(b"l", 1, 5, 26), Some(false));
        assert_eq!(seqs.tail(b"l"), Some((1, 26)));
        assert_eq!(seqs.give_back(b"l", 1, 20, 26), Some(true));
        assert_eq!(seqs.tail(b"l"), Some((1, 20)));
        assert_eq!(seqs.next(b"l", 1), Some((1, 20)));
        // Taken back once: the same range again is not the tail any more.
        assert_eq!(seqs.give_back(b"l", 1, 20, 26), Some(false));
    }

    #[test]
    fn distinct_clients_are_counted_by_their_sketch() {
        let seqs = Sequencers::default();
        seqs.install(b"l", 1, 0).unwrap();
        let seq = seqs.get(b"l").unwrap();
        for client in 1..=4 {
            for _ in 0..10 {
                seqs.next_for(&mut Cached::default(), b"l", 2, client);
            }
        }
        let seen = seq.take_contention();
        assert_eq!((seen.requests, seen.positions, seen.clients), (40, 80, 4.0));
        // The previous round's clients still count once; two rounds later they are gone.
        assert_eq!(seq.take_contention().clients, 4.0);
        assert_eq!(seq.take_contention().clients, 0.0);
        assert_eq!(distinct(u64::MAX), 266.0);
    }
}
