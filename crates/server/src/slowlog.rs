//! The slow log (`SLOWLOG GET|LEN|RESET`): the last `slowlog-max-len` commands that took at
//! least `slowlog-log-slower-than` microseconds, newest first. A bounded ring behind a mutex
//! that only slow commands take: a fast command pays one relaxed load and a comparison.

use bytes::Bytes;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

/// Redis's defaults: 10 ms, 128 entries.
pub const DEFAULT_SLOWER_THAN_US: i64 = 10_000;
pub const DEFAULT_MAX_LEN: u64 = 128;
/// The largest `slowlog-max-len` accepted: the ring's memory stays bounded whatever is set
/// (each entry keeps at most [`MAX_ARGS`] arguments of at most [`MAX_ARG_BYTES`]).
pub const MAX_LEN_LIMIT: u64 = 10_000;
/// As Redis: the arguments of an entry are cut to 32, each to 128 bytes.
const MAX_ARGS: usize = 32;
const MAX_ARG_BYTES: usize = 128;

/// One slow command.
#[derive(Clone, Debug)]
pub struct SlowEntry {
    pub id: u64,
    /// Unix seconds when it finished.
    pub at: u64,
    pub duration_us: u64,
    pub args: Vec<Bytes>,
    pub peer: String,
    pub name: String,
}

pub struct SlowLog {
    /// Negative: off; 0: every command.
    slower_than_us: AtomicI64,
    max_len: AtomicU64,
    next_id: AtomicU64,
    entries: Mutex<VecDeque<SlowEntry>>,
}

impl Default for SlowLog {
    fn default() -> Self {
        SlowLog {
            slower_than_us: AtomicI64::new(DEFAULT_SLOWER_THAN_US),
            max_len: AtomicU64::new(DEFAULT_MAX_LEN),
            next_id: AtomicU64::new(0),
            entries: Mutex::new(VecDeque::new()),
        }
    }
}

impl SlowLog {
    /// Whether a command of `us` microseconds belongs in the log.
    #[inline]
    pub fn is_slow(&self, us: u64) -> bool {
        let threshold = self.slower_than_us.load(Ordering::Relaxed);
        threshold >= 0 && us >= threshold as u64
    }

    #[cold]
    pub fn push(&self, us: u64, args: &[Bytes], peer: Option<SocketAddr>, name: Option<&Bytes>) {
        let mut kept: Vec<Bytes> = args
            .iter()
            .take(if args.len() > MAX_ARGS {
                MAX_ARGS - 1
            } else {
                MAX_ARGS
            })
            .map(|arg| {
                if arg.len() > MAX_ARG_BYTES {
                    let mut cut = arg[..MAX_ARG_BYTES].to_vec();
                    cut.extend_from_slice(
                        format!("... ({} more bytes)", arg.len() - MAX_ARG_BYTES).as_bytes(),
                    );
                    Bytes::from(cut)
                } else {
                    arg.clone()
                }
            })
            .collect();
        if args.len() > MAX_ARGS {
            kept.push(Bytes::from(format!(
                "... ({} more arguments)",
                args.len() - (MAX_ARGS - 1)
            )));
        }
        let entry = SlowEntry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            duration_us: us,
            args: kept,
            peer: peer.map(|p| p.to_string()).unwrap_or_default(),
            name: name
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .unwrap_or_default(),
        };
        let max = self.max_len.load(Ordering::Relaxed) as usize;
        let mut entries = self.lock();
        entries.push_front(entry);
        entries.truncate(max);
    }

    /// The newest `n` entries (all with `None`), newest first.
    pub fn newest(&self, n: Option<usize>) -> Vec<SlowEntry> {
        let entries = self.lock();
        entries
            .iter()
            .take(n.unwrap_or(usize::MAX))
            .cloned()
            .collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn reset(&self) {
        self.lock().clear();
    }

    pub fn slower_than_us(&self) -> i64 {
        self.slower_than_us.load(Ordering::Relaxed)
    }

    pub fn set_slower_than_us(&self, us: i64) {
        self.slower_than_us.store(us, Ordering::Relaxed);
    }

    pub fn max_len(&self) -> u64 {
        self.max_len.load(Ordering::Relaxed)
    }

    /// Also drops the oldest entries past the new length at once.
    pub fn set_max_len(&self, len: u64) {
        self.max_len.store(len, Ordering::Relaxed);
        self.lock().truncate(len as usize);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<SlowEntry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(n: usize, len: usize) -> Vec<Bytes> {
        (0..n).map(|_| Bytes::from(vec![b'a'; len])).collect()
    }

    #[test]
    fn the_ring_is_bounded_newest_first_and_cuts_long_requests() {
        let log = SlowLog::default();
        assert!(log.is_slow(10_000) && !log.is_slow(9_999));
        log.set_max_len(3);
        for _ in 0..5 {
            log.push(20_000, &args(2, 4), None, None);
        }
        assert_eq!(log.len(), 3);
        let ids: Vec<u64> = log.newest(None).iter().map(|e| e.id).collect();
        assert_eq!(ids, [4, 3, 2]);
        assert_eq!(log.newest(Some(1)).len(), 1);
        log.push(1, &args(40, 200), None, None);
        let entry = &log.newest(Some(1))[0];
        assert_eq!(entry.args.len(), 32);
        assert_eq!(entry.args[31], Bytes::from("... (9 more arguments)"));
        assert!(entry.args[0].ends_with(b"... (72 more bytes)"));
        log.set_max_len(1);
        assert_eq!(log.len(), 1);
        log.set_slower_than_us(-1);
        assert!(!log.is_slow(u64::MAX));
        log.reset();
        assert!(log.is_empty());
    }
}
