//! Multi-node replay on a generated flash-crowd trace: static placement overloads one node,
//! the adaptable balancer spreads the crowd, the Ceph greedy spill runs unmodified, and every
//! request is served exactly once.

use policy::{Limits, Params};
use sim::nodes::{replay_nodes, Balancer, ClusterReport, NodesConfig};
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
            .filter(|&k: &u64| cluster::key_slot(digits.format(k).as_bytes()) < 8192)
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
        .filter(|&k: &u64| cluster::key_slot(digits.format(k).as_bytes()) < 8192)
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
