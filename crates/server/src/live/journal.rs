//! The central policy log: one ordered record of what happened to the server's policies —
//! loaded, activated, rolled back, failed (with the source line), decisions that changed the
//! capacity, and the policies' own `log()` lines. Bounded ([`JOURNAL_CAPACITY`] events, the
//! oldest dropped) and durable in the policy column family, so `POLICY LOG` after a crash
//! still shows why; every event is also written to stderr, the server's log, as one
//! `key=value` line.

use super::registry::Shared;
use super::space::{Change, Space};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use store::StoreError;

/// Events kept; older ones are deleted as new ones arrive.
pub const JOURNAL_CAPACITY: u64 = 1_000;
/// Longest message kept per event (a policy could log huge strings).
pub const MAX_MESSAGE_BYTES: usize = 1_024;

/// One event (defined in the parent, so the registry can name it without the journal).
pub use super::{Event, Level, LogKind};

/// Shared by the engine's thread, which records, and the control thread, which reads (and
/// records what it does itself): sequence numbers are taken atomically.
pub struct Journal {
    space: Space,
    next_seq: AtomicU64,
    /// Print events on stderr (off in unit tests).
    echo: bool,
    /// A cluster's central log: every event goes there too, and `tail` reads it.
    shared: Option<Arc<dyn Shared>>,
}

fn key(seq: u64) -> Vec<u8> {
    format!("log/{seq:020}").into_bytes()
}

impl Journal {
    pub fn open(space: Space, echo: bool) -> Result<Journal, StoreError> {
        let last = space.scan(b"log/")?.last().map(|(k, _)| {
            std::str::from_utf8(&k[4..])
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(0)
        });
        Ok(Journal {
            space,
            next_seq: AtomicU64::new(last.map_or(1, |s| s + 1)),
            echo,
            shared: None,
        })
    }

    /// Also sends every event to a cluster's central log, and reads that log in `tail`.
    pub fn with_shared(mut self, shared: Option<Arc<dyn Shared>>) -> Journal {
        self.shared = shared;
        self
    }

    /// Records an event; a store failure is reported on stderr only (logging must not fail
    /// the operation it describes).
    pub fn record(&self, level: Level, kind: LogKind, policy: &str, message: &str, at_ms: u64) {
        let mut message = message.to_string();
        if message.len() > MAX_MESSAGE_BYTES {
            let mut cut = MAX_MESSAGE_BYTES;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str("...");
        }
        let event = Event {
            seq: self.next_seq.fetch_add(1, Ordering::SeqCst),
            at_ms,
            level,
            kind,
            policy: policy.to_string(),
            message,
            node: String::new(),
        };
        if self.echo {
            super::stderr_line(&format!("mantle: policy {}", event.line()));
        }
        let mut changes: Vec<Change> = vec![(
            key(event.seq),
            Some(serde_json::to_vec(&event).unwrap_or_default()),
        )];
        if event.seq > JOURNAL_CAPACITY {
            changes.push((key(event.seq - JOURNAL_CAPACITY), None));
        }
        if let Err(e) = self.space.write(&changes, false) {
            super::stderr_line(&format!("mantle: policy log not persisted: {e}"));
        }
        if let Some(shared) = &self.shared {
            shared.record(&event);
        }
    }

    /// The last `n` events, oldest first: the cluster's, or this node's own while the
    /// central log cannot be read.
    pub fn tail(&self, n: usize) -> Result<Vec<Event>, StoreError> {
        if let Some(shared) = &self.shared {
            match shared.tail(n) {
                Ok(events) => return Ok(events),
                Err(e) => super::stderr_line(&format!(
                    "mantle: the central policy log is unreadable ({e}); showing this node's"
                )),
            }
        }
        let all = self.space.scan(b"log/")?;
        all[all.len().saturating_sub(n)..]
            .iter()
            .map(|(k, raw)| {
                serde_json::from_slice(raw).map_err(|e| {
                    StoreError(format!(
                        "policy log record '{}' is unreadable: {e}",
                        String::from_utf8_lossy(k)
                    ))
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_is_bounded_and_continues_after_reopen() {
        let space = Space::memory();
        let journal = Journal::open(space.clone(), false).unwrap();
        for i in 0..(JOURNAL_CAPACITY + 5) {
            journal.record(Level::Info, LogKind::Log, "p@1", &format!("m{i}"), i);
        }
        let all = journal.tail(usize::MAX).unwrap();
        assert_eq!(all.len() as u64, JOURNAL_CAPACITY);
        assert_eq!(all[0].message, "m5");
        let reopened = Journal::open(space, false).unwrap();
        reopened.record(Level::Warn, LogKind::RolledBack, "p@2", "back to p@1", 0);
        let last = reopened.tail(1).unwrap();
        assert_eq!(last[0].seq, JOURNAL_CAPACITY + 6);
        assert!(last[0].line().contains("event=rolled_back policy=p@2"));
    }

    #[test]
    fn long_messages_are_cut() {
        let journal = Journal::open(Space::memory(), false).unwrap();
        journal.record(Level::Info, LogKind::Log, "", &"é".repeat(2_000), 0);
        let event = &journal.tail(1).unwrap()[0];
        assert!(event.message.len() <= MAX_MESSAGE_BYTES + 3);
        assert!(event.line().contains("policy=-"));
    }
}
