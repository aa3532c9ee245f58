//! Lease decisions for this node's sequencers (issue 27 item 4; seed 003, Malacology's ZLog):
//! per log, whether a client makes a round trip per position or holds the sequencer for T ms
//! or N positions, decided by the running policy's `lease(log)` hook from the contention the
//! sequencer measured.
//!
//! Lua never runs on the request path: a thread of its own ([`LeaseThread`]) calls the hook
//! for every log each [`LEASE_INTERVAL`] and stores the answer in the sequencer, where
//! `ZLOG.LEASE` reads it with one atomic load. A hook that raises an error, spends its
//! budget or returns something else than a lease puts every log back on round trips until
//! another version runs; the failure is counted, written to stderr and shown by `ZLOG.OPEN`.
//!
//! The hook is the running policy's, so the policy commands switch it (`POLICY LOAD`,
//! `USE`, `ROLLBACK`): the policy thread offers each version it starts running
//! ([`LeaseSource::offer`]), and the lease thread compiles the offer at its next round.

use bytes::Bytes;
use policy::{Contention, Interrupt, Lease, LeaseHook, Limits, Params};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

/// How often the lease of every log is decided again; a switched policy takes effect within
/// about this long.
pub const LEASE_INTERVAL: Duration = Duration::from_millis(100);

/// The version the policy thread runs, offered to the lease thread.
#[derive(Default)]
struct Offer {
    /// `name@N` of the running version; `None`: no policy runs.
    id: Option<String>,
    source: Option<Arc<str>>,
    params: Params,
    /// Bumped by every offer that changes something.
    generation: u64,
}

/// What the lease thread last made of the offers, for `ZLOG.OPEN`.
#[derive(Default, Clone)]
pub struct LeaseStatus {
    /// `name@N` whose `lease` hook decides now (empty: round trips, no hook runs).
    pub policy: String,
    /// Lease hooks that failed (at load or in a call) since the server started.
    pub failures: u64,
    /// The last failure's message.
    pub last_error: String,
}

/// The meeting point of the policy thread (which offers the running version) and the lease
/// thread (which compiles it and decides).
#[derive(Default)]
pub struct LeaseSource {
    offer: Mutex<Offer>,
    status: Mutex<LeaseStatus>,
    failures: AtomicU64,
}

impl LeaseSource {
    /// The policy thread's offer of the version it runs now (`None`: none). Cheap when
    /// nothing changed, so the policy thread calls it after every tick and request; `source`
    /// is read only for a new version.
    pub fn offer(
        &self,
        id: Option<String>,
        params: &Params,
        source: impl FnOnce() -> Result<String, String>,
    ) {
        let mut offer = self.offer.lock().unwrap_or_else(|e| e.into_inner());
        if offer.id == id && offer.params == *params {
            return;
        }
        let text = match &id {
            Some(_) if offer.id != id => match source() {
                Ok(text) => Some(Arc::from(text)),
                Err(e) => {
                    drop(offer);
                    self.failed(&format!("lease policy source unreadable: {e}"));
                    return;
                }
            },
            Some(_) => offer.source.clone(),
            None => None,
        };
        offer.id = id;
        offer.source = text;
        offer.params = params.clone();
        offer.generation += 1;
    }

    pub fn status(&self) -> LeaseStatus {
        let mut status = self
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        status.failures = self.failures.load(Ordering::Relaxed);
        status
    }

    fn failed(&self, message: &str) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        status.policy.clear();
        status.last_error = message.to_string();
        store::log::line(format_args!(
            "mantle: {message}; the shared logs' sequencers answer with round trips"
        ));
    }

    fn running(&self, policy: &str) {
        let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        status.policy = policy.to_string();
    }
}

/// What a sequencer saw since the lease thread last asked.
pub struct Seen {
    pub requests: u64,
    pub positions: u64,
    /// Distinct connections over the last two rounds (a client on a lease may skip one).
    pub clients: f64,
}

/// What the lease thread needs of a log's sequencer (`sequencer::Sequencer` implements it;
/// a trait, so that this module does not depend on the one that runs it).
pub trait Leased: Send + Sync + 'static {
    /// The contention since the last call (the lease thread's alone).
    fn take_contention(&self) -> Seen;
    fn set_lease(&self, lease: Lease);
}

/// The lease thread's state: the hook it compiled from the latest offer.
pub struct LeaseThread<S: Leased> {
    logs: Weak<RwLock<HashMap<Bytes, Arc<S>>>>,
    source: Arc<LeaseSource>,
    limits: Limits,
    generation: u64,
    hook: Option<(String, LeaseHook)>,
    last_round: Instant,
}

impl<S: Leased> LeaseThread<S> {
    pub fn new(
        logs: Weak<RwLock<HashMap<Bytes, Arc<S>>>>,
        source: Arc<LeaseSource>,
        limits: Limits,
    ) -> LeaseThread<S> {
        LeaseThread {
            logs,
            source,
            limits,
            generation: 0,
            hook: None,
            last_round: Instant::now(),
        }
    }

    /// Starts the thread; it ends once the sequencers it serves are dropped.
    pub fn spawn(mut self) {
        let source = self.source.clone();
        let spawned = std::thread::Builder::new()
            .name("mantle-zlog-lease".into())
            .spawn(move || loop {
                std::thread::sleep(LEASE_INTERVAL);
                if !self.round() {
                    return;
                }
            });
        if let Err(e) = spawned {
            source.failed(&format!("cannot start the lease thread: {e}"));
        }
    }

    /// Adopts a new offer, then decides every log's lease; `false` once the sequencers
    /// are gone.
    pub fn round(&mut self) -> bool {
        self.adopt_offer();
        let Some(logs) = self.logs.upgrade() else {
            return false;
        };
        let snapshot: Vec<(Bytes, Arc<S>)> = logs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(name, seq)| (name.clone(), seq.clone()))
            .collect();
        drop(logs);
        let interval = self.last_round.elapsed().as_secs_f64().max(1e-3);
        self.last_round = Instant::now();
        for (name, seq) in snapshot {
            let seen = seq.take_contention();
            let contention = Contention {
                name: &name,
                rate: seen.requests as f64 / interval,
                positions: seen.positions as f64 / interval,
                clients: seen.clients,
                interval,
            };
            let lease = match &self.hook {
                Some((id, hook)) => match hook.decide(&contention) {
                    Ok(lease) => lease,
                    Err(e) => {
                        self.source.failed(&format!(
                            "{id}: {e} (log {})",
                            String::from_utf8_lossy(&name)
                        ));
                        self.hook = None;
                        Lease::RoundTrip
                    }
                },
                None => Lease::RoundTrip,
            };
            seq.set_lease(lease);
        }
        // A hook that failed half way through leaves no log on a lease it no longer stands by.
        if self.hook.is_none() {
            if let Some(logs) = self.logs.upgrade() {
                for seq in logs.read().unwrap_or_else(|e| e.into_inner()).values() {
                    seq.set_lease(Lease::RoundTrip);
                }
            }
        }
        true
    }

    fn adopt_offer(&mut self) {
        let (id, source, params) = {
            let offer = self.source.offer.lock().unwrap_or_else(|e| e.into_inner());
            if offer.generation == self.generation {
                return;
            }
            self.generation = offer.generation;
            (offer.id.clone(), offer.source.clone(), offer.params.clone())
        };
        self.hook = None;
        self.source.running("");
        let (Some(id), Some(source)) = (id, source) else {
            return;
        };
        let chunk = format!("={id}");
        match LeaseHook::compile(
            &id,
            &chunk,
            &source,
            &params,
            &self.limits,
            Interrupt::default(),
        ) {
            Ok(Some(hook)) => {
                self.source.running(&id);
                self.hook = Some((id, hook));
            }
            Ok(None) => {}
            Err(e) => self
                .source
                .failed(&format!("{id}: lease hook not loadable: {e}")),
        }
    }
}

/// `Lease` in one word, so a sequencer stores it in an atomic: the mode in the top two bits,
/// its value below.
pub fn encode(lease: Lease) -> u64 {
    match lease {
        Lease::RoundTrip => 0,
        Lease::Delay { ms } => 1 << 62 | ms,
        Lease::Quota { n } => 2 << 62 | n,
    }
}

pub fn decode(word: u64) -> Lease {
    let value = word & ((1 << 62) - 1);
    match word >> 62 {
        1 => Lease::Delay { ms: value },
        2 => Lease::Quota { n: value },
        _ => Lease::RoundTrip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::sequencer::{Cached, Sequencers};

    fn sequencers_with(source: &Arc<LeaseSource>) -> Sequencers {
        Sequencers::new(source.clone(), Limits::default())
    }

    fn offer(source: &LeaseSource, id: &str, text: &str) {
        let text = text.to_string();
        source.offer(Some(id.into()), &Params::new(), move || Ok(text));
    }

    #[test]
    fn leases_encode_and_decode() {
        for lease in [
            Lease::RoundTrip,
            Lease::Delay { ms: 10_000 },
            Lease::Quota { n: 65_536 },
        ] {
            assert_eq!(decode(encode(lease)), lease);
        }
    }

    #[test]
    fn the_offered_policy_decides_and_a_new_offer_switches_it() {
        let source = Arc::new(LeaseSource::default());
        let seqs = sequencers_with(&source);
        seqs.install(b"l", 1, 0).unwrap();
        let mut thread = seqs.lease_thread();
        assert!(thread.round());
        assert_eq!(seqs.lease(b"l"), Some(Lease::RoundTrip));
        offer(
            &source,
            "q@1",
            "function lease(log) return {mode = 'quota', n = 50} end",
        );
        thread.round();
        assert_eq!(seqs.lease(b"l"), Some(Lease::Quota { n: 50 }));
        assert_eq!(source.status().policy, "q@1");
        source.offer(None, &Params::new(), || unreachable!());
        thread.round();
        assert_eq!(seqs.lease(b"l"), Some(Lease::RoundTrip));
        drop(seqs);
        assert!(!thread.round(), "the thread ends with its sequencers");
    }

    #[test]
    fn the_hook_sees_the_contention_since_the_last_round() {
        let source = Arc::new(LeaseSource::default());
        let seqs = sequencers_with(&source);
        seqs.install(b"l", 1, 0).unwrap();
        offer(
            &source,
            "c@1",
            "function lease(log)
               if log.clients >= 3 then return {mode = 'roundtrip'} end
               return {mode = 'delay', ms = math.max(1, math.floor(log.positions * log.interval))}
             end",
        );
        let mut thread = seqs.lease_thread();
        for _ in 0..4 {
            seqs.next_for(&mut Cached::default(), b"l", 10, 7);
        }
        thread.round();
        assert_eq!(seqs.lease(b"l"), Some(Lease::Delay { ms: 40 }));
        for client in [1, 2, 3] {
            seqs.next_for(&mut Cached::default(), b"l", 1, client);
        }
        thread.round();
        assert_eq!(seqs.lease(b"l"), Some(Lease::RoundTrip));
    }

    #[test]
    fn every_misbehaving_hook_means_round_trips_counted_and_reported() {
        let limits = Limits {
            instructions: 1_000_000,
            ..Limits::default()
        };
        let cases = [
            (
                "loop@1",
                "function lease(log) while true do end end",
                "instruction budget",
            ),
            (
                "err@1",
                "function lease(log) error('no lease') end",
                "no lease",
            ),
            (
                "bad@1",
                "function lease(log) return {mode = 'quota', n = -1} end",
                "n must be",
            ),
            (
                "type@1",
                "function lease(log) return 'quota' end",
                "must return a table",
            ),
            ("load@1", "error('top level')", "not loadable"),
        ];
        let source = Arc::new(LeaseSource::default());
        let seqs = Sequencers::new(source.clone(), limits);
        seqs.install(b"l", 1, 0).unwrap();
        let mut thread = seqs.lease_thread();
        for (i, (id, text, expected)) in cases.into_iter().enumerate() {
            offer(
                &source,
                "good@1",
                "function lease(log) return {mode = 'quota', n = 9} end",
            );
            thread.round();
            assert_eq!(seqs.lease(b"l"), Some(Lease::Quota { n: 9 }));
            offer(&source, id, text);
            thread.round();
            assert_eq!(seqs.lease(b"l"), Some(Lease::RoundTrip), "{id}");
            let status = source.status();
            assert_eq!(status.failures, i as u64 + 1, "{id}");
            assert!(
                status.last_error.contains(expected),
                "{id}: {}",
                status.last_error
            );
            assert!(status.last_error.starts_with(id), "{}", status.last_error);
            assert_eq!(status.policy, "");
            // It stays off: the next round does not call the failed hook again.
            thread.round();
            assert_eq!(source.status().failures, i as u64 + 1);
        }
    }
}
