//! Memory held for clients across the whole server: every connection's request and reply
//! buffers, and replies being gathered (`MGET`), counted against one bound,
//! `--maxmemory-clients` (Redis's `maxmemory-clients`; `CONFIG SET maxmemory-clients`).
//!
//! Per-connection limits alone do not bound a server: nine clients each asking for a 1 GB
//! `MGET` reply and never reading it, or eight each streaming a 500 MB `SET`, stay within
//! every per-client limit and together exhaust memory (the allocator then aborts the
//! process). With one total, the client whose growth would pass it is the one turned away:
//! a reply that does not fit becomes an error (the connection stays usable), and a connection
//! whose buffers would pass it is closed with an error and a log line. The others go on.
//!
//! A connection's first buffers (its [`Account::with_floor`]) are granted whatever the others
//! hold: otherwise, with the total at the bound, every new client — one sending `PING` — was
//! the one whose growth passed it, and was closed, while the clients holding the memory went
//! on. So the total may pass the bound by at most one floor per connection (`maxclients` bounds
//! how many connections there are); growth past the floor is what is refused.
//!
//! Costs: a connection re-counts its buffers' capacity after each read and each queued reply,
//! and touches the shared counter only when the capacity changed (buffers are reused, so in a
//! steady state that is never). Small replies (under [`SMALL_REPLY`]) are not checked before
//! being built; each client's pending output is bounded anyway (`connection::FLUSH_AT`), and
//! it is counted once queued.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// `--maxmemory-clients` when not given: room for one request of the largest size
/// (`--proto-max-bulk-len`, 512 MiB by default, in an input buffer that grows by doubling, so
/// up to 1 GiB) beside everyone else's buffers.
pub const DEFAULT_LIMIT: u64 = 2 * 1024 * 1024 * 1024;
/// Replies smaller than this are built without asking the shared bound first.
pub const SMALL_REPLY: u64 = 64 * 1024;

/// The server-wide total and its bound.
#[derive(Debug)]
pub struct ClientMemory {
    used: AtomicU64,
    /// The bound, `u64::MAX` for unlimited (0 in flags and CONFIG).
    limit: AtomicU64,
    /// Connections closed and replies refused for passing the bound.
    refusals: AtomicU64,
}

/// The bound would be passed; says by how much, for the client's error and the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exceeded {
    /// What all clients would hold together.
    pub total: u64,
    pub limit: u64,
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "client memory limit reached: all clients' buffers would hold {} bytes, more than \
             maxmemory-clients ({} bytes)",
            self.total, self.limit
        )
    }
}

impl ClientMemory {
    /// A bound of `limit` bytes (0: unlimited).
    pub fn new(limit: u64) -> Arc<ClientMemory> {
        let memory = ClientMemory {
            used: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
            refusals: AtomicU64::new(0),
        };
        memory.set_limit(limit);
        Arc::new(memory)
    }

    /// Changes the bound (0: unlimited); what clients hold already is not taken back.
    pub fn set_limit(&self, limit: u64) {
        let limit = if limit == 0 { u64::MAX } else { limit };
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// The bound as flags and CONFIG write it (0: unlimited).
    pub fn limit(&self) -> u64 {
        match self.limit.load(Ordering::Relaxed) {
            u64::MAX => 0,
            limit => limit,
        }
    }

    /// Bytes all clients hold now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    /// Whether `extra` more bytes fit now (without taking them).
    pub fn check(&self, extra: u64) -> Result<(), Exceeded> {
        let limit = self.limit.load(Ordering::Relaxed);
        let total = self.used().saturating_add(extra);
        if total > limit {
            self.refusals.fetch_add(1, Ordering::Relaxed);
            return Err(Exceeded { total, limit });
        }
        Ok(())
    }

    /// Takes `extra` bytes whether or not they fit.
    fn force(&self, extra: u64) {
        self.used.fetch_add(extra, Ordering::Relaxed);
    }

    /// Takes `extra` bytes if they fit; nothing when they do not.
    fn take(&self, extra: u64) -> Result<(), Exceeded> {
        let limit = self.limit.load(Ordering::Relaxed);
        let before = self.used.fetch_add(extra, Ordering::Relaxed);
        let total = before.saturating_add(extra);
        if total > limit {
            self.used.fetch_sub(extra, Ordering::Relaxed);
            self.refusals.fetch_add(1, Ordering::Relaxed);
            return Err(Exceeded { total, limit });
        }
        Ok(())
    }

    fn give_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// What one holder (a connection's buffers, a reply being gathered) has counted in the total;
/// given back when dropped.
#[derive(Debug)]
pub struct Account {
    memory: Arc<ClientMemory>,
    held: u64,
    /// Up to this much is granted without asking the bound.
    floor: u64,
}

impl Account {
    /// An account all of whose growth is checked against the bound.
    pub fn new(memory: Arc<ClientMemory>) -> Account {
        Account::with_floor(memory, 0)
    }

    /// An account whose first `floor` bytes are granted even when the total is at the bound
    /// (counted all the same); only what it holds beyond them can be refused.
    pub fn with_floor(memory: Arc<ClientMemory>, floor: u64) -> Account {
        Account {
            memory,
            held: 0,
            floor,
        }
    }

    /// Records that the holder now holds `bytes`. Shrinking always succeeds; growing beyond
    /// the floor fails (and keeps the earlier figure) when the total would pass the bound.
    #[inline]
    pub fn hold(&mut self, bytes: u64) -> Result<(), Exceeded> {
        if bytes == self.held {
            return Ok(());
        }
        if bytes < self.held {
            self.memory.give_back(self.held - bytes);
        } else {
            let granted = self.floor.saturating_sub(self.held).min(bytes - self.held);
            let checked = bytes - self.held - granted;
            if checked > 0 {
                self.memory.take(checked)?;
            }
            self.memory.force(granted);
        }
        self.held = bytes;
        Ok(())
    }

    pub fn held(&self) -> u64 {
        self.held
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        self.memory.give_back(self.held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_that_would_pass_the_bound_is_refused_and_others_keep_theirs() {
        let memory = ClientMemory::new(1000);
        let mut a = Account::new(memory.clone());
        let mut b = Account::new(memory.clone());
        a.hold(600).unwrap();
        let refused = b.hold(500).unwrap_err();
        assert_eq!(
            refused,
            Exceeded {
                total: 1100,
                limit: 1000
            }
        );
        assert!(refused
            .to_string()
            .contains("maxmemory-clients (1000 bytes)"));
        assert_eq!((b.held(), memory.used()), (0, 600));
        b.hold(400).unwrap();
        a.hold(100).unwrap();
        assert_eq!(memory.used(), 500);
        drop(a);
        assert_eq!(memory.used(), 400);
        assert!(memory.check(600).is_ok() && memory.check(601).is_err());
        assert_eq!(memory.refusals(), 2);
    }

    #[test]
    fn the_floor_is_granted_at_the_bound_and_growth_past_it_is_refused() {
        let memory = ClientMemory::new(1000);
        let mut hog = Account::new(memory.clone());
        hog.hold(1000).unwrap();
        let mut fresh = Account::with_floor(memory.clone(), 100);
        fresh.hold(60).unwrap();
        fresh.hold(100).unwrap();
        assert_eq!((fresh.held(), memory.used()), (100, 1100));
        // Past the floor only what is beyond it is checked, and it does not fit.
        let refused = fresh.hold(150).unwrap_err();
        assert_eq!(refused.total, 1150);
        assert_eq!((fresh.held(), memory.used()), (100, 1100));
        // Refused from below the floor: the part under it is not taken either.
        let mut other = Account::with_floor(memory.clone(), 100);
        other.hold(120).unwrap_err();
        assert_eq!((other.held(), memory.used()), (0, 1100));
        drop(hog);
        fresh.hold(900).unwrap();
        assert_eq!(memory.used(), 900);
        drop(fresh);
        assert_eq!(memory.used(), 0);
    }

    #[test]
    fn zero_is_unlimited() {
        let memory = ClientMemory::new(0);
        assert_eq!(memory.limit(), 0);
        let mut a = Account::new(memory.clone());
        a.hold(u64::MAX / 2).unwrap();
        memory.set_limit(10);
        assert!(memory.check(1).is_err());
        assert_eq!(memory.limit(), 10);
    }
}
