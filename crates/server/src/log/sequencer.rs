//! The sequencers this node runs: per log, an epoch and an in-memory counter of the next
//! position, as ZLog's sequencer is (`fetch_add` per request). Nothing here is durable, by
//! design: a node that starts (or takes a log's slot over) knows no sequencer, answers
//! `NOSEQ`, and a client recovers the tail from storage by sealing it at a newer epoch and
//! installing the result with `ZLOG.INIT` (see docs/shared-log.md).
//!
//! Safety never rests on this state being dropped when the slot moves away: positions handed
//! out at an old epoch are refused by storage once it is sealed at a newer one.

use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// The most positions one `ZLOG.NEXT` may reserve.
pub const MAX_BATCH: u64 = 1 << 20;

/// The most logs one node sequences; an INIT past it is refused, so a client cannot grow the
/// map without bound.
pub const MAX_LOGS: usize = 100_000;

/// One log's sequencer.
struct Sequencer {
    epoch: u64,
    next: AtomicU64,
    /// `ZLOG.NEXT` requests served, for the balancer's rates (`sequencers()`).
    requests: AtomicU64,
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

/// Why `install` refused.
#[derive(Debug, PartialEq, Eq)]
pub enum InstallError {
    /// The running sequencer's epoch is not older (it is given).
    Stale(u64),
    /// [`MAX_LOGS`] reached.
    Full,
}

#[derive(Default)]
pub struct Sequencers {
    logs: RwLock<HashMap<Bytes, Arc<Sequencer>>>,
}

impl Sequencers {
    fn get(&self, log: &[u8]) -> Option<Arc<Sequencer>> {
        self.logs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(log)
            .cloned()
    }

    /// Reserves `count` positions: the epoch and the first; `None` without a sequencer.
    pub fn next(&self, log: &[u8], count: u64) -> Option<(u64, u64)> {
        let seq = self.get(log)?;
        seq.requests.fetch_add(1, Ordering::Relaxed);
        Some((seq.epoch, seq.next.fetch_add(count, Ordering::Relaxed)))
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
        logs.insert(
            Bytes::copy_from_slice(log),
            Arc::new(Sequencer {
                epoch,
                next: AtomicU64::new(tail),
                requests: AtomicU64::new(0),
                start: tail,
            }),
        );
        Ok(())
    }

    /// Every sequencer's counts, for the balancer (which keeps only the hottest it is shown).
    pub fn counts(&self) -> Vec<SequencerCount> {
        let logs = self.logs.read().unwrap_or_else(|e| e.into_inner());
        logs.iter()
            .map(|(log, seq)| SequencerCount {
                log: log.clone(),
                epoch: seq.epoch,
                requests: seq.requests.load(Ordering::Relaxed),
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
}
