//! The second-generation sizing policies (`dscache2.lua`, `multipolicy2.lua`) driven through
//! the engine: the capacity follows an open fan up and a closed one down, the native scans
//! agree with the plain accessors' view, and a host without an access log gets no action.

mod common;

use common::*;
use policy::{Action, Metrics, Params, TimeSeries, VecSeries};

/// Deterministic reads of `keys` keys starting at id `first`, `rate` per second over
/// `from..to` seconds; each key is put (first access) before it is read.
fn superbasin(series: &mut VecSeries, first: u64, keys: u64, from: u64, to: u64, rate: u64) {
    let mut x: u64 = first.wrapping_mul(2654435761).wrapping_add(17);
    for t in from..to {
        for j in 0..rate {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let offset = (x >> 33) % keys;
            series.push(t as f64 + j as f64 / rate as f64, first + offset);
        }
    }
}

/// Runs `policy` once a second over `series` (trace seconds `0..until`), applying its
/// capacity decisions; returns the capacity in force after each tick.
fn capacities(policy: &str, events: &[(f64, u64)], until: u64) -> Vec<f64> {
    let mut engine = engine(policy, &shipped(&format!("{policy}.lua")));
    let mut series = VecSeries::new(Vec::new());
    let mut capacity = f64::INFINITY;
    let mut next = 0;
    let mut out = Vec::new();
    for now in 1..=until {
        while next < events.len() && events[next].0 < now as f64 {
            series.push(events[next].0, events[next].1);
            next += 1;
        }
        let m = Metrics {
            capacity,
            cachesize: capacity.min(series.len() as f64),
            ..Metrics::default()
        };
        let outcome = tick_at(&mut engine, now as f64, &[m], &Params::new(), &series);
        assert!(outcome.error.is_none(), "{:?}", outcome.error);
        if let Action::SetCapacity(n) = outcome.decision.action {
            capacity = n as f64;
        }
        out.push(capacity);
    }
    out
}

/// Superbasin A reads 400 keys for 300 s, then B reads 20 new keys for 900 s.
fn two_superbasins() -> Vec<(f64, u64)> {
    let mut s = VecSeries::new(Vec::new());
    superbasin(&mut s, 0, 400, 0, 300, 20);
    superbasin(&mut s, 400, 20, 300, 1200, 20);
    s.events().to_vec()
}

#[test]
fn dscache2_follows_an_open_fan_up_and_a_closed_one_down() {
    let events = two_superbasins();
    let caps = capacities("dscache2", &events, 1200);
    // While A is open the cache holds its keys.
    assert!(
        caps[299] >= 390.0,
        "capacity at the end of A: {}",
        caps[299]
    );
    // Long after A closed, only B's keys and the allowance are kept.
    assert!(
        caps[1199] <= 60.0,
        "capacity at the end of B: {}",
        caps[1199]
    );
    // The paper's version keeps room for A's fan as long as it is in the series.
    let old = capacities("dscache", &events, 1200);
    assert!(old[1199] >= 390.0, "dscache at the end: {}", old[1199]);
}

#[test]
fn dscache2_serves_the_reads_once_their_reuse_ages_are_known() {
    // Replay the reads through an LRU list sized by the policy's decisions each second.
    let events = two_superbasins();
    let caps = capacities("dscache2", &events, 1200);
    let mut lru: std::collections::VecDeque<u64> = Default::default();
    let mut seen = std::collections::HashSet::new();
    let mut misses = Vec::new();
    for &(t, id) in &events {
        let cap = if t < 1.0 {
            usize::MAX
        } else {
            caps[t as usize - 1] as usize
        };
        match lru.iter().position(|&k| k == id) {
            Some(p) => {
                lru.remove(p);
            }
            None if seen.contains(&id) => misses.push(t),
            None => {}
        }
        seen.insert(id);
        lru.push_front(id);
        lru.truncate(cap.max(1));
    }
    // Reads of a memoryless random walk over A's keys keep setting longer reuse ages while
    // A is young, and the first read of each new age misses; once the ages are known, and
    // through the switch from A to B, nothing misses.
    assert!(misses.len() * 200 <= events.len(), "{misses:?}");
    assert!(misses.iter().all(|&t| t < 150.0), "{misses:?}");
}

#[test]
fn sizing_policies_take_no_action_without_an_access_log() {
    for name in ["dscache2", "multipolicy2"] {
        let mut engine = engine(name, &shipped(&format!("{name}.lua")));
        for now in 1..=1200 {
            let m = Metrics {
                capacity: f64::INFINITY,
                cachesize: 100.0,
                gets: (now * (2000 - now)) as f64,
                ..Metrics::default()
            };
            let outcome = tick_at(
                &mut engine,
                now as f64,
                &[m],
                &Params::new(),
                &VecSeries::default(),
            );
            assert!(outcome.error.is_none(), "{name}: {:?}", outcome.error);
            assert_eq!(outcome.decision.action, Action::None, "{name} at {now}");
        }
    }
}

#[test]
fn multipolicy2_is_unlimited_until_the_read_rate_has_come_down() {
    // 20 reads/s over 50 keys for 10 minutes, then 2 reads/s over new keys.
    let mut s = VecSeries::new(Vec::new());
    superbasin(&mut s, 0, 50, 0, 600, 20);
    superbasin(&mut s, 50, 30, 600, 1800, 2);
    let events = s.events().to_vec();
    let mut engine = engine("multipolicy2", &shipped("multipolicy2.lua"));
    let mut series = VecSeries::new(Vec::new());
    let (mut capacity, mut gets, mut next) = (f64::INFINITY, 0u64, 0);
    let mut switched_at = None;
    for now in 1..=1800u64 {
        while next < events.len() && events[next].0 < now as f64 {
            series.push(events[next].0, events[next].1);
            gets += 1;
            next += 1;
        }
        let m = Metrics {
            capacity,
            cachesize: capacity.min(80.0),
            gets: gets as f64,
            ..Metrics::default()
        };
        let outcome = tick_at(&mut engine, now as f64, &[m], &Params::new(), &series);
        assert!(outcome.error.is_none(), "{:?}", outcome.error);
        if let Action::SetCapacity(n) = outcome.decision.action {
            assert!(n >= 1);
            capacity = n as f64;
            switched_at.get_or_insert(now);
        }
    }
    let at = switched_at.expect("multipolicy2 never constrained the cache");
    assert!(at > 600, "switched during the burst, at {at} s");
    // After the switch the size covers the working set of the slow phase (30 keys).
    assert!(
        (30.0..=200.0).contains(&capacity),
        "final capacity {capacity}"
    );
}
