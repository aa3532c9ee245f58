//! The dashboard's memory: a task that reads the server's counters every [`PERIOD`] into a
//! bounded ring of [`Sample`]s (rates over the period, gauges at its end), and refreshes its
//! view of the policy engine (`POLICY STATUS` and `POLICY LOG`, the same requests the
//! commands make) every [`POLICY_PERIOD`]. Pages ask for the samples after the last one they
//! have, so any number of viewers see one history and none of them waits on the engine.

use crate::instance::Instance;
use crate::live::journal::Event;
use crate::live::reply::Status;
use crate::live::{Gauges, Op, Reply};
use crate::metrics::Stats;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Time between samples: the charts move twice a second.
pub const PERIOD: Duration = Duration::from_millis(500);
/// Samples kept: five minutes.
pub const KEPT: usize = 600;
/// Time between refreshes of the policy status and log.
pub const POLICY_PERIOD: Duration = Duration::from_secs(1);
/// Longest wait for the policy's answer (STATUS and LOG come from the control thread, which
/// never runs Lua, so this is only a guard).
const POLICY_TIMEOUT: Duration = Duration::from_secs(1);
/// Policy log entries shown.
pub const LOG_LINES: usize = 30;

/// One point of every chart.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Sample {
    /// Increases by one per sample; pages ask for `after` the last they have.
    pub seq: u64,
    /// Milliseconds since the Unix epoch.
    pub t_ms: u64,
    /// Commands per second over the period.
    pub requests_per_s: f64,
    pub hits_per_s: f64,
    pub misses_per_s: f64,
    /// Hits over lookups in the period; `null` when there were none.
    pub hit_ratio: Option<f64>,
    pub objects: u64,
    pub bytes: u64,
    /// `null`: unlimited.
    pub capacity_objects: Option<u64>,
    pub capacity_bytes: Option<u64>,
    pub evictions_per_s: f64,
    pub store_reads_per_s: f64,
    /// Policy ticks run and ticks whose decision acted, in the period.
    pub policy_ticks: u64,
    pub policy_actions: u64,
}

/// Counter readings a sample is the difference of.
#[derive(Clone, Copy, Default)]
struct Reading {
    at: Option<Instant>,
    commands: u64,
    hits: u64,
    misses: u64,
    evictions: u64,
    store_reads: u64,
    ticks: u64,
    actions: u64,
}

impl Reading {
    fn take(instance: &Instance) -> (Reading, crate::db::CacheSnapshot) {
        let stats = instance.db.stats();
        let snapshot = instance.db.cache_snapshot();
        let gauges = &instance.db.metrics().policy;
        let reading = Reading {
            at: Some(Instant::now()),
            commands: Stats::read(&stats.commands_processed),
            hits: Stats::read(&stats.cache_hits),
            misses: Stats::read(&stats.cache_misses),
            evictions: snapshot.evictions,
            store_reads: Stats::read(&stats.store_reads),
            ticks: Gauges::read(&gauges.ticks),
            actions: Gauges::read(&gauges.actions),
        };
        (reading, snapshot)
    }
}

/// What the engine said last.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PolicyView {
    /// `POLICY STATUS`; `None` until it first answered.
    pub status: Option<Status>,
    /// The last [`LOG_LINES`] events, oldest first.
    pub log: Vec<Event>,
    /// Why the last refresh failed, if it did.
    pub error: Option<String>,
}

#[derive(Default)]
pub struct History {
    samples: Mutex<VecDeque<Sample>>,
    policy: Mutex<PolicyView>,
}

impl History {
    /// Samples with `seq > after`, oldest first.
    pub fn after(&self, after: u64) -> Vec<Sample> {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        // Sequence numbers are contiguous, so the first wanted one is found by arithmetic.
        let first = samples.front().map_or(0, |s| s.seq);
        let skip = after.saturating_add(1).saturating_sub(first) as usize;
        samples.iter().skip(skip).cloned().collect()
    }

    pub fn policy(&self) -> PolicyView {
        self.policy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn push(&self, sample: Sample) {
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        if samples.len() == KEPT {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// Asks the engine for its status and log (after an admin action, and periodically).
    pub async fn refresh_policy(&self, instance: &Instance) {
        let ask = |op| async {
            tokio::time::timeout(POLICY_TIMEOUT, instance.live.request(op))
                .await
                .map_err(|_| "the policy engine did not answer in time".to_string())
                .and_then(|reply| reply)
        };
        let status = ask(Op::Status).await;
        let log = ask(Op::Log { count: LOG_LINES }).await;
        let mut view = self.policy.lock().unwrap_or_else(|e| e.into_inner());
        view.error = None;
        match status {
            Ok(Reply::Status(status)) => view.status = Some(*status),
            Ok(other) => view.error = Some(format!("POLICY STATUS: unexpected {other:?}")),
            Err(e) => view.error = Some(format!("POLICY STATUS: {e}")),
        }
        match log {
            Ok(Reply::Log(events)) => view.log = events,
            Ok(other) => view.error = Some(format!("POLICY LOG: unexpected {other:?}")),
            Err(e) => view.error = Some(format!("POLICY LOG: {e}")),
        }
    }
}

fn rate(now: u64, before: u64, seconds: f64) -> f64 {
    // saturating: CONFIG RESETSTAT sets counters back to 0.
    now.saturating_sub(before) as f64 / seconds
}

fn sample(
    seq: u64,
    now: &Reading,
    before: &Reading,
    snapshot: &crate::db::CacheSnapshot,
) -> Sample {
    let seconds = match (now.at, before.at) {
        (Some(a), Some(b)) => a.duration_since(b).as_secs_f64().max(1e-3),
        _ => PERIOD.as_secs_f64(),
    };
    let hits = now.hits.saturating_sub(before.hits);
    let misses = now.misses.saturating_sub(before.misses);
    Sample {
        seq,
        t_ms: crate::db::now_ms(),
        requests_per_s: rate(now.commands, before.commands, seconds),
        hits_per_s: hits as f64 / seconds,
        misses_per_s: misses as f64 / seconds,
        hit_ratio: (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64),
        objects: snapshot.objects,
        bytes: snapshot.bytes,
        capacity_objects: snapshot.capacity.objects,
        capacity_bytes: snapshot.capacity.bytes,
        evictions_per_s: rate(now.evictions, before.evictions, seconds),
        store_reads_per_s: rate(now.store_reads, before.store_reads, seconds),
        policy_ticks: now.ticks.saturating_sub(before.ticks),
        policy_actions: now.actions.saturating_sub(before.actions),
    }
}

/// Samples until `stop` turns true.
pub async fn run(instance: Arc<Instance>, history: Arc<History>, mut stop: watch::Receiver<bool>) {
    let mut before = Reading::take(&instance).0;
    let mut seq = 0;
    let mut ticker = tokio::time::interval(PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_policy: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => return,
        }
        let (now, snapshot) = Reading::take(&instance);
        seq += 1;
        history.push(sample(seq, &now, &before, &snapshot));
        before = now;
        if last_policy.is_none_or(|t| t.elapsed() >= POLICY_PERIOD) {
            last_policy = Some(Instant::now());
            history.refresh_policy(&instance).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dummy(seq: u64) -> Sample {
        Sample {
            seq,
            t_ms: 0,
            requests_per_s: 0.0,
            hits_per_s: 0.0,
            misses_per_s: 0.0,
            hit_ratio: None,
            objects: 0,
            bytes: 0,
            capacity_objects: None,
            capacity_bytes: None,
            evictions_per_s: 0.0,
            store_reads_per_s: 0.0,
            policy_ticks: 0,
            policy_actions: 0,
        }
    }

    #[test]
    fn after_returns_only_newer_samples_and_the_ring_is_bounded() {
        let history = History::default();
        for seq in 1..=(KEPT as u64 + 10) {
            history.push(dummy(seq));
        }
        let all = history.after(0);
        assert_eq!(all.len(), KEPT);
        assert_eq!(all[0].seq, 11);
        let newer = history.after(KEPT as u64 + 7);
        assert_eq!(
            newer.iter().map(|s| s.seq).collect::<Vec<_>>(),
            [KEPT as u64 + 8, KEPT as u64 + 9, KEPT as u64 + 10]
        );
        assert!(history.after(u64::MAX).is_empty());
        assert_eq!(
            history.after(3).len(),
            KEPT,
            "a page far behind gets what is kept"
        );
    }

    #[test]
    fn rates_are_per_second_and_survive_a_counter_reset() {
        let start = Instant::now();
        let before = Reading {
            at: Some(start),
            commands: 1_000,
            hits: 10,
            misses: 10,
            ..Reading::default()
        };
        let now = Reading {
            at: Some(start + Duration::from_millis(500)),
            commands: 1_500,
            hits: 40,
            misses: 20,
            ..Reading::default()
        };
        let snapshot = crate::db::CacheSnapshot {
            algorithm: cache::Algorithm::Lru,
            objects: 5,
            bytes: 50,
            capacity: cache::Capacity {
                objects: Some(10),
                bytes: None,
            },
            evictions: 0,
            metadata_bytes: 0,
            object_overhead: 0,
        };
        let s = sample(1, &now, &before, &snapshot);
        assert_eq!(s.requests_per_s, 1_000.0);
        assert_eq!(s.hit_ratio, Some(0.75));
        let reset = sample(2, &before, &now, &snapshot);
        assert_eq!(reset.requests_per_s, 0.0);
        assert_eq!(reset.hit_ratio, None);
    }
}
