//! The shipped balancers (policies/*.lua, issue 13) decide as their headers say, on
//! synthetic per-server loads: which server sends, to whom, how much, and when they hold
//! back. How they fare on a whole trace is in crates/sim/tests/nodes.rs.

mod common;

use common::*;
use policy::{Metrics, Params, PolicyEngine, TickInput, VecSeries};

fn loads(ls: &[f64]) -> Vec<Metrics> {
    ls.iter()
        .map(|&load| Metrics {
            load,
            ..Metrics::default()
        })
        .collect()
}

/// The targets of one tick of `whoami` on servers with these loads.
fn targets(e: &mut PolicyEngine, p: &Params, whoami: usize, ls: &[f64]) -> Vec<(usize, f64)> {
    let none = VecSeries::default();
    let servers = loads(ls);
    let out = e.tick(&TickInput {
        now: 0.0,
        tick: 1,
        whoami,
        servers: &servers,
        params: p,
        timeseries: &none,
    });
    assert!(out.error.is_none(), "{:?}", out.error);
    out.decision.targets
}

#[test]
fn greedy_spill_in_callbacks_decides_as_the_ceph_chunk() {
    let mut callbacks = engine("gs", &shipped("greedyspill_callbacks.lua"));
    let mut chunk = engine("ceph", &shipped("greedyspill.lua"));
    assert!(!callbacks.is_ceph_dialect() && chunk.is_ceph_dialect());
    let p = Params::new();
    let cases: [(usize, &[f64]); 6] = [
        (0, &[4.0, 0.0, 0.0]),
        (1, &[4.0, 6.0, 0.0]),
        (0, &[4.0, 1.0, 0.0]),
        (2, &[0.0, 0.0, 5.0]),
        (0, &[0.0, 0.0]),
        (1, &[3.0, 8.0, 0.001]),
    ];
    for (whoami, ls) in cases {
        assert_eq!(
            targets(&mut callbacks, &p, whoami, ls),
            targets(&mut chunk, &p, whoami, ls),
            "whoami {whoami}, loads {ls:?}"
        );
    }
    assert_eq!(targets(&mut callbacks, &p, 0, &[4.0, 0.0]), vec![(1, 2.0)]);
}

#[test]
fn fill_and_spill_keeps_load_under_the_threshold_and_spills_the_rest_in_rank_order() {
    let mut e = engine("fs", &shipped("fillspill.lua"));
    let p = params(&[("threshold", "100"), ("backoff", "0")]);
    assert!(
        targets(&mut e, &p, 0, &[90.0, 0.0, 0.0]).is_empty(),
        "not full"
    );
    // 150: 50 over; the neighbour has room for 30, the next for the remaining 20.
    assert_eq!(
        targets(&mut e, &p, 0, &[150.0, 70.0, 0.0]),
        vec![(1, 30.0), (2, 20.0)]
    );
    // Spills only to higher ranks, and never past the threshold of a receiver.
    assert_eq!(targets(&mut e, &p, 1, &[0.0, 130.0, 95.0]), vec![(2, 5.0)]);
    assert!(targets(&mut e, &p, 2, &[0.0, 0.0, 500.0]).is_empty());
    // Back-off: after a spill it waits the given ticks.
    let p = params(&[("threshold", "100"), ("backoff", "2")]);
    assert_eq!(targets(&mut e, &p, 0, &[150.0, 0.0]), vec![(1, 50.0)]);
    assert!(targets(&mut e, &p, 0, &[150.0, 0.0]).is_empty());
    assert!(targets(&mut e, &p, 0, &[150.0, 0.0]).is_empty());
    assert_eq!(targets(&mut e, &p, 0, &[150.0, 0.0]), vec![(1, 50.0)]);
}

#[test]
fn back_off_waits_after_an_export_and_for_the_receiver_to_cool_down() {
    let mut e = engine("bo", &shipped("backoff.lua"));
    let p = params(&[("wait", "3"), ("receiver", "20")]);
    // The coolest server is above the receiver threshold: hold back.
    assert!(targets(&mut e, &p, 0, &[300.0, 50.0, 40.0]).is_empty());
    // Now it is below: half the difference goes to it.
    assert_eq!(
        targets(&mut e, &p, 0, &[300.0, 50.0, 10.0]),
        vec![(2, 145.0)]
    );
    // Then three ticks of waiting, whatever the loads; the countdown is kept with WRstate,
    // so a reload half-way does not cut it short.
    assert!(targets(&mut e, &p, 0, &[300.0, 0.0, 0.0]).is_empty());
    e.replace(&shipped("backoff.lua")).unwrap();
    for _ in 0..2 {
        assert!(targets(&mut e, &p, 0, &[300.0, 0.0, 0.0]).is_empty());
    }
    assert_eq!(
        targets(&mut e, &p, 0, &[300.0, 0.0, 10.0]),
        vec![(1, 150.0)]
    );
    // A server near the mean never exports.
    let mut e = engine("bo2", &shipped("backoff.lua"));
    assert!(targets(&mut e, &Params::new(), 1, &[10.0, 10.5, 10.0]).is_empty());
}

#[test]
fn hot_key_sends_nearly_the_whole_gap_to_the_coolest_server_then_backs_off() {
    let mut e = engine("hk", &shipped("hotkey.lua"));
    let p = params(&[("backoff", "2")]);
    // Mean 100; 240 is over 1.5x it: 0.9 of the gap to server 2 (the coolest).
    assert_eq!(
        targets(&mut e, &p, 0, &[240.0, 40.0, 20.0]),
        vec![(2, 198.0)]
    );
    assert!(targets(&mut e, &p, 0, &[240.0, 40.0, 20.0]).is_empty());
    assert!(targets(&mut e, &p, 0, &[240.0, 40.0, 20.0]).is_empty());
    assert_eq!(targets(&mut e, &p, 0, &[240.0, 40.0, 20.0]).len(), 1);
    // Not a hot spot: under 1.5x the mean.
    let mut e = engine("hk2", &shipped("hotkey.lua"));
    assert!(targets(&mut e, &Params::new(), 0, &[140.0, 80.0, 80.0]).is_empty());
}

/// A decision's targets (server, amount) and units (slot ranges).
type Moves = (Vec<(usize, f64)>, Vec<(u16, u16)>);

/// One tick of the sequencer balancer on `whoami`, which runs `seqs` (log, slot, NEXT/s),
/// beside servers with these loads: its decision's targets and units.
fn sequencer_tick(
    e: &mut PolicyEngine,
    p: &Params,
    whoami: usize,
    ls: &[f64],
    seqs: &[(&str, u16, f64)],
) -> Moves {
    e.set_sequencers(
        seqs.iter()
            .map(|&(log, slot, rate)| policy::SequencerLoad {
                log: log.into(),
                slot,
                rate,
                positions: rate,
                load: rate,
            })
            .collect(),
    );
    let none = VecSeries::default();
    let servers = loads(ls);
    let out = e.tick(&TickInput {
        now: 0.0,
        tick: 1,
        whoami,
        servers: &servers,
        params: p,
        timeseries: &none,
    });
    assert!(out.error.is_none(), "{:?}", out.error);
    let seq_load: f64 = seqs.iter().map(|s| s.2).sum();
    assert_eq!(
        out.decision.load, seq_load,
        "load() is the sequencers' load"
    );
    (out.decision.targets, out.decision.units)
}

#[test]
fn the_sequencer_balancer_moves_one_hot_sequencer_to_the_coolest_node_then_backs_off() {
    let mut e = engine("sb", &shipped("sequencer_balance.lua"));
    let p = params(&[("hold", "2"), ("wait", "3")]);
    let three = [("a", 100, 500.0), ("b", 200, 400.0), ("c", 300, 300.0)];
    // The first tick of an imbalance only counts it (hold 2)...
    assert_eq!(
        sequencer_tick(&mut e, &p, 0, &[0.0, 50.0, 10.0], &three),
        (vec![], vec![])
    );
    // ... the second moves the busiest sequencer, alone, to the coolest node (2).
    assert_eq!(
        sequencer_tick(&mut e, &p, 0, &[0.0, 50.0, 10.0], &three),
        (vec![(2, 500.0)], vec![(100, 100)])
    );
    // Back-off: three ticks without a move, whatever the loads (kept with WRstate, so a
    // reload half-way does not cut it short).
    assert!(sequencer_tick(&mut e, &p, 0, &[0.0, 0.0, 0.0], &three)
        .0
        .is_empty());
    e.replace(&shipped("sequencer_balance.lua")).unwrap();
    for _ in 0..2 {
        assert!(sequencer_tick(&mut e, &p, 0, &[0.0, 0.0, 0.0], &three)
            .0
            .is_empty());
    }
    // Then it holds for two ticks again before the next move.
    let two = [("b", 200, 400.0), ("c", 300, 300.0)];
    assert!(sequencer_tick(&mut e, &p, 0, &[0.0, 0.0, 500.0], &two)
        .0
        .is_empty());
    assert_eq!(
        sequencer_tick(&mut e, &p, 0, &[0.0, 0.0, 500.0], &two),
        (vec![(1, 400.0)], vec![(200, 200)])
    );
}

#[test]
fn the_sequencer_balancer_never_makes_a_move_that_would_swap_the_hotter_node() {
    let p = params(&[("hold", "1"), ("wait", "0")]);
    // Balanced three ways (one sequencer each, the loads a little noisy): nobody moves.
    for whoami in 0..3 {
        let mut e = engine("sb", &shipped("sequencer_balance.lua"));
        let loads = [310.0, 290.0, 300.0];
        let own = [("x", whoami as u16, loads[whoami])];
        assert!(sequencer_tick(&mut e, &p, whoami, &loads, &own)
            .0
            .is_empty());
    }
    // Two sequencers against one: moving one would only swap the nodes (600 vs 300 becomes
    // 300 vs 600): no move, so the two cannot pass it back and forth.
    let mut e = engine("sb", &shipped("sequencer_balance.lua"));
    let two = [("a", 1, 300.0), ("b", 2, 300.0)];
    assert!(sequencer_tick(&mut e, &p, 0, &[0.0, 300.0], &two)
        .0
        .is_empty());
    // A hot sequencer that would overshoot is skipped for a smaller one that fits.
    let mut e = engine("sb", &shipped("sequencer_balance.lua"));
    let mixed = [("hot", 1, 900.0), ("warm", 2, 200.0)];
    assert_eq!(
        sequencer_tick(&mut e, &p, 0, &[0.0, 500.0], &mixed),
        (vec![(1, 200.0)], vec![(2, 2)])
    );
    // Below min_rate a sequencer stays put however unbalanced the nodes are.
    let mut e = engine("sb", &shipped("sequencer_balance.lua"));
    let idle = [("a", 1, 5.0), ("b", 2, 5.0)];
    assert!(sequencer_tick(&mut e, &p, 0, &[0.0, 0.0], &idle)
        .0
        .is_empty());
}

#[test]
fn the_sequencer_balancer_in_half_units_sends_half_the_gap_as_whole_sequencers() {
    let mut e = engine("sb", &shipped("sequencer_balance.lua"));
    let p = params(&[("hold", "1"), ("wait", "0"), ("units", "half")]);
    let six: Vec<(&str, u16, f64)> = ["a", "b", "c", "d", "e", "f"]
        .iter()
        .zip(10u16..)
        .map(|(&log, slot)| (log, slot, 100.0))
        .collect();
    // 600 against 0: 300 goes to node 1; every sequencer is a candidate unit.
    let (targets, units) = sequencer_tick(&mut e, &p, 0, &[0.0, 0.0, 0.0], &six);
    assert_eq!(targets, vec![(1, 300.0)]);
    assert_eq!(units.len(), 6);
    // Only sequencers that narrow the gap by the margin on their own are candidates: the
    // 500 one would leave node 1 hotter than this one was (600 - 500 < 500 + margin).
    let mixed = [("big", 1, 500.0), ("small", 2, 100.0)];
    assert_eq!(
        sequencer_tick(&mut e, &p, 0, &[0.0, 0.0, 0.0], &mixed),
        (vec![(1, 300.0)], vec![(2, 2)])
    );
    // A bad unit name is an error of the tick, not a silent default.
    let p = params(&[("units", "all")]);
    let out = {
        e.set_sequencers(vec![]);
        let none = VecSeries::default();
        let servers = loads(&[0.0, 0.0]);
        e.tick(&TickInput {
            now: 0.0,
            tick: 1,
            whoami: 0,
            servers: &servers,
            params: &p,
            timeseries: &none,
        })
    };
    let error = out
        .error
        .expect("an unknown unit fails the tick")
        .to_string();
    assert!(error.contains("units must be"), "{error}");
}
