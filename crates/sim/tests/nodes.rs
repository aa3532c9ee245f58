//! Multi-node replay on a generated flash-crowd trace: static placement overloads one node,
//! the adaptable balancer spreads the crowd, the Ceph greedy spill runs unmodified, and every
//! request is served exactly once.

use policy::{Limits, Params};
use sim::nodes::{replay_nodes, Balancer, ClusterReport, KeyRanges, NodesConfig, Placement};
use sim::Tick;
use std::convert::Infallible;
use std::path::PathBuf;
use trace::gen::hotspot::{HotspotGen, HotspotParams};

fn policy(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../policies")
        .join(name)
}

fn crowd() -> HotspotParams {
    HotspotParams {
        duration: 300.0,
        rate: 1_000.0,
        crowd_seconds: 120.0,
        gap: 30.0,
        crowd_share: 0.7,
        ..HotspotParams::default()
    }
}

fn run(params: &HotspotParams, balancer: Option<&str>, nodes: usize) -> ClusterReport {
    let config = NodesConfig {
        nodes,
        tick: Tick::Seconds(1.0),
        record_ticks: true,
        ..NodesConfig::default()
    };
    let mut balancer = balancer.map(|name| {
        Balancer::from_file(&policy(name), nodes, Params::new(), Limits::default()).unwrap()
    });
    let mut requests = HotspotGen::new(params.clone());
    replay_nodes(&config, balancer.as_mut(), || {
        Ok::<_, Infallible>(requests.next())
    })
    .unwrap()
}

#[test]
fn static_placement_overloads_the_crowds_node() {
    let report = run(&crowd(), None, 3);
    assert_eq!(report.requests, 300_000);
    let served: u64 = report.per_node.iter().map(|n| n.requests).sum();
    assert_eq!(served, report.requests, "every request is served once");
    assert_eq!(report.migrations.count, 0);
    assert!(
        report.imbalance.peak > 2.0,
        "a crowd of 70% of requests on one of 3 nodes: {:?}",
        report.imbalance
    );
    let slots: u64 = report.per_node.iter().map(|n| n.final_slots).sum();
    assert_eq!(slots, 16_384);
}

#[test]
fn the_adaptable_balancer_spreads_the_crowd() {
    let fixed = run(&crowd(), None, 3);
    let balanced = run(&crowd(), Some("adaptable.lua"), 3);
    assert_eq!(balanced.requests, fixed.requests);
    assert!(balanced.migrations.count > 0);
    assert!(
        balanced.imbalance.mean < fixed.imbalance.mean,
        "balanced {:?} vs static {:?}",
        balanced.imbalance,
        fixed.imbalance
    );
    let slots: u64 = balanced.per_node.iter().map(|n| n.final_slots).sum();
    assert_eq!(slots, 16_384, "every slot is owned by exactly one node");
    let exported: u64 = balanced.per_node.iter().map(|n| n.exported_slots).sum();
    let imported: u64 = balanced.per_node.iter().map(|n| n.imported_slots).sum();
    assert_eq!(exported, imported);
    assert_eq!(balanced.policy.as_ref().unwrap().errors, 0);
    // The per-tick rows say the same as the summary.
    let peak = balanced
        .rows
        .iter()
        .map(|r| r.max_over_mean)
        .fold(1.0, f64::max);
    assert!((peak - balanced.imbalance.peak).abs() < 1e-9);
}

#[test]
fn ceph_greedy_spill_runs_unmodified_and_fills_an_idle_neighbour() {
    // Two nodes, and a trace whose keys all hash to node 0's slots: node 1 is idle, so
    // greedy spill sends node 0 half its load.
    let report = {
        let config = NodesConfig {
            nodes: 2,
            tick: Tick::Seconds(1.0),
            ..NodesConfig::default()
        };
        let mut balancer = Balancer::from_file(
            &policy("greedyspill.lua"),
            2,
            Params::new(),
            Limits::default(),
        )
        .unwrap();
        let mut digits = itoa::Buffer::new();
        let keys: Vec<u64> = (0..)
            .filter(|&k: &u64| slots::key_slot(digits.format(k).as_bytes()) < 8192)
            .take(2000)
            .collect();
        let mut i = 0u64;
        replay_nodes(&config, Some(&mut balancer), || {
            i += 1;
            Ok::<_, Infallible>((i <= 20_000).then(|| trace::Request {
                time: i as f64 / 1000.0,
                key: keys[(i as usize * 7919) % keys.len()],
                size: 100,
                op: trace::Op::Get,
                offset: 0,
            }))
        })
        .unwrap()
    };
    assert!(report.migrations.count >= 1, "{:?}", report.migrations);
    let first = &report.migrations.list[0];
    assert_eq!((first.from, first.to), (0, 1));
    assert!(
        report.per_node[1].requests > 0,
        "node 1 serves once it owns slots"
    );
}

#[test]
fn without_a_policy_one_node_is_a_plain_cache() {
    let report = run(
        &HotspotParams {
            duration: 20.0,
            ..crowd()
        },
        None,
        1,
    );
    assert_eq!(report.per_node[0].requests, report.requests);
    assert!((report.imbalance.mean - 1.0).abs() < 1e-9);
}

fn run_with(params: &[(&str, &str)], balancer: &str) -> ClusterReport {
    let config = NodesConfig {
        nodes: 3,
        tick: Tick::Seconds(1.0),
        ..NodesConfig::default()
    };
    let params: Params = params
        .iter()
        .map(|(k, v)| policy::parse_param(&format!("{k}={v}")).unwrap())
        .collect();
    let mut balancer =
        Balancer::from_file(&policy(balancer), 3, params, Limits::default()).unwrap();
    let mut requests = HotspotGen::new(crowd());
    replay_nodes(&config, Some(&mut balancer), || {
        Ok::<_, Infallible>(requests.next())
    })
    .unwrap()
}

/// Two nodes, every key in node 0's slots: node 1 is idle, so greedy spill acts.
fn one_sided(file: &str) -> ClusterReport {
    let config = NodesConfig {
        nodes: 2,
        tick: Tick::Seconds(1.0),
        ..NodesConfig::default()
    };
    let mut balancer =
        Balancer::from_file(&policy(file), 2, Params::new(), Limits::default()).unwrap();
    let mut digits = itoa::Buffer::new();
    let keys: Vec<u64> = (0..)
        .filter(|&k: &u64| slots::key_slot(digits.format(k).as_bytes()) < 8192)
        .take(2000)
        .collect();
    let mut i = 0u64;
    replay_nodes(&config, Some(&mut balancer), || {
        i += 1;
        Ok::<_, Infallible>((i <= 20_000).then(|| trace::Request {
            time: i as f64 / 1000.0,
            key: keys[(i as usize * 7919) % keys.len()],
            size: 100,
            op: trace::Op::Get,
            offset: 0,
        }))
    })
    .unwrap()
}

#[test]
fn greedy_spill_in_callbacks_moves_the_same_slots_as_the_ceph_chunk() {
    let chunk = one_sided("greedyspill.lua");
    let callbacks = one_sided("greedyspill_callbacks.lua");
    assert!(chunk.migrations.count > 0);
    let moves = |r: &ClusterReport| -> Vec<(usize, usize, u64, String)> {
        r.migrations
            .list
            .iter()
            .map(|m| {
                let ranges: Vec<String> = m.ranges.iter().map(|r| r.to_string()).collect();
                (m.from, m.to, m.start_tick, ranges.join(","))
            })
            .collect()
    };
    assert_eq!(moves(&chunk), moves(&callbacks));
}

#[test]
fn the_shipped_balancers_spread_the_crowd_without_errors() {
    let fixed = run(&crowd(), None, 3);
    // The crowd puts ~700 req/s of 1000 on one node: fill up to 400, spill the rest.
    for (file, params) in [
        ("fillspill.lua", &[("threshold", "400")][..]),
        ("backoff.lua", &[][..]),
        ("hotkey.lua", &[][..]),
    ] {
        let report = run_with(params, file);
        let policy = report.policy.as_ref().unwrap();
        assert_eq!(policy.errors, 0, "{file}");
        assert!(
            report.migrations.count > 0,
            "{file}: {:?}",
            report.migrations
        );
        assert!(
            report.imbalance.mean < fixed.imbalance.mean,
            "{file}: {:?} vs static {:?}",
            report.imbalance,
            fixed.imbalance
        );
        let slots: u64 = report.per_node.iter().map(|n| n.final_slots).sum();
        assert_eq!(slots, 16_384, "{file}");
    }
}

#[test]
fn back_off_migrates_less_than_the_adaptable_balancer() {
    let eager = run_with(&[], "adaptable.lua");
    let patient = run_with(&[("wait", "10")], "backoff.lua");
    assert!(
        patient.migrations.count < eager.migrations.count,
        "back-off {} vs adaptable {}",
        patient.migrations.count,
        eager.migrations.count
    );
}

/// Every shipped balancer reads its parameters at each tick: a file that read them while
/// loading (when `params` is still empty) ignored `--param` and always ran its defaults.
#[test]
fn a_balancers_params_change_what_it_does() {
    let defaults = run_with(&[], "adaptable.lua");
    let patient = run_with(&[("backoff", "30")], "adaptable.lua");
    assert!(
        patient.migrations.count < defaults.migrations.count,
        "backoff=30 made {} migrations, the default {}",
        patient.migrations.count,
        defaults.migrations.count
    );
    let tolerant = run_with(&[("margin", "100")], "adaptable.lua");
    assert_eq!(tolerant.migrations.count, 0, "margin=100 still migrated");
}

#[test]
fn range_placement_keeps_key_order_and_equal_keys_per_slot() {
    // More keys than slots, given with repeats and out of order: slots follow key order and
    // hold equal counts (to within one).
    let keys: Vec<u64> = (0..100_000u64).map(|i| (i * 7_919) % 100_000 * 3).collect();
    let mut with_repeats = keys.clone();
    with_repeats.extend_from_slice(&keys[..500]);
    let ranges = KeyRanges::from_keys(with_repeats);
    assert_eq!(ranges.len(), 100_000);
    let mut per_slot = vec![0u32; 16_384];
    let mut last = 0u16;
    for k in (0..100_000u64).map(|i| i * 3) {
        let s = ranges.slot(k);
        assert!(s >= last, "key {k} in slot {s} after slot {last}");
        last = s;
        per_slot[usize::from(s)] += 1;
    }
    assert_eq!(ranges.slot(0), 0);
    assert_eq!(last, 16_383);
    let (lo, hi) = (
        per_slot.iter().min().unwrap(),
        per_slot.iter().max().unwrap(),
    );
    assert!(hi - lo <= 1, "{lo}..{hi} keys per slot");
    // A key between two known ones sits with its neighbours; beyond the last, in the last slot.
    assert!(ranges.slot(4) >= ranges.slot(3) && ranges.slot(4) <= ranges.slot(6));
    assert_eq!(ranges.slot(u64::MAX), 16_383);

    // Fewer keys than slots: each has its own slot, spread over the whole slot space, so an
    // even spread of slots over 3 nodes is an even spread of keys.
    let few = KeyRanges::from_keys((0..300u64).map(|k| k * 1_000_000).collect());
    let slots: Vec<u16> = (0..300u64).map(|k| few.slot(k * 1_000_000)).collect();
    assert!(slots.windows(2).all(|w| w[0] < w[1]), "{slots:?}");
    let on_node =
        |range: std::ops::RangeInclusive<u16>| slots.iter().filter(|s| range.contains(s)).count();
    for n in [
        on_node(0..=5461),
        on_node(5462..=10922),
        on_node(10923..=16383),
    ] {
        assert!((99..=101).contains(&n), "{n} of 300 keys on one node");
    }
}

/// 30,000 keys read uniformly, plus the 300 lowest keys taking 60% of the requests: a hot
/// key range, as one tenant's or one time window's keys are.
fn hot_range() -> Vec<trace::Request> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..120_000u64)
        .map(|i| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let r = state >> 33;
            let key = if r % 10 < 6 {
                (r / 10) % 300
            } else {
                (r / 10) % 30_000
            };
            trace::Request {
                time: i as f64 / 1_000.0,
                key,
                size: 10,
                op: trace::Op::Get,
                offset: 0,
            }
        })
        .collect()
}

fn run_placed(placement: Placement, balancer: Option<&str>) -> ClusterReport {
    let requests = hot_range();
    let config = NodesConfig {
        nodes: 3,
        placement,
        key_ranges: Some(std::sync::Arc::new(KeyRanges::from_keys(
            requests.iter().map(|r| r.key).collect(),
        ))),
        tick: Tick::Seconds(1.0),
        migration_rate: f64::INFINITY,
        ..NodesConfig::default()
    };
    let mut balancer = balancer.map(|name| {
        Balancer::from_file(&policy(name), 3, Params::new(), Limits::default()).unwrap()
    });
    let mut it = requests.into_iter();
    replay_nodes(&config, balancer.as_mut(), || {
        Ok::<_, Infallible>(it.next())
    })
    .unwrap()
}

#[test]
fn range_placement_puts_a_hot_key_range_on_one_node_and_a_balancer_moves_key_ranges() {
    let hashed = run_placed(Placement::Hash, None);
    let ranged = run_placed(Placement::Range, None);
    // Hashing scatters the hot range; range placement keeps it on the node owning the
    // lowest keys (node 0): 60% + 40% / 3 of the load, 2.2 times the mean.
    assert!(hashed.imbalance.mean < 1.15, "{:?}", hashed.imbalance);
    assert!(ranged.imbalance.mean > 2.0, "{:?}", ranged.imbalance);
    assert!(ranged.per_node[0].requests > 2 * ranged.per_node[1].requests);
    assert_eq!(
        ranged.per_node.iter().map(|n| n.requests).sum::<u64>(),
        120_000
    );

    let balanced = run_placed(Placement::Range, Some("adaptable.lua"));
    assert_eq!(balanced.policy.as_ref().unwrap().errors, 0);
    assert!(balanced.migrations.count > 0);
    assert!(
        balanced.imbalance.settled < ranged.imbalance.settled,
        "{:?} vs {:?}",
        balanced.imbalance,
        ranged.imbalance
    );
    // The hot range's slots are what moves, from node 0.
    let hot_end = KeyRanges::from_keys(hot_range().iter().map(|r| r.key).collect()).slot(299);
    let first = &balanced.migrations.list[0];
    assert_eq!(first.from, 0, "{first:?}");
    assert!(
        first.ranges.iter().all(|r| r.end <= hot_end),
        "{hot_end}: {first:?}"
    );
    let slots: u64 = balanced.per_node.iter().map(|n| n.final_slots).sum();
    assert_eq!(slots, 16_384);
}
