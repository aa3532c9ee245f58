//! One node of `replay --nodes` is `replay`: the same policy, on a trace with idle gaps,
//! ticks at the same times, decides the same and leaves the same counters under both, for
//! time ticks and request-count ticks, with and without classes.

use cache::classes::ClassSet;
use cache::Capacity;
use policy::{Limits, Params};
use sim::nodes::{replay_nodes, Balancer, NodesConfig};
use sim::policy_driver::PolicyController;
use sim::{replay, ReplayConfig, Tick};
use std::convert::Infallible;
use trace::{Op, Request};

/// A policy whose capacity decision depends on what it is shown: hit count, request rate,
/// back-end queue, the access log's length and the tick number.
const POLICY: &str = r#"
local target = 0
function when()
  local s = servers[whoami]
  local d = timeseries()
  local queued = 0
  if s.backend_queue > 0 then queued = 5 end
  target = 20 + (math.floor(s.hits) % 13) + (d:size() % 11) + queued
    + (math.floor(s.reqrate) % 7) + (tick % 3)
  return s.capacity ~= target
end
function howmuch() return {capacity = target} end
"#;

/// Mixed operations over 400 keys, with a 40 s pause and a 3,000 s pause (longer than the
/// 1,000 empty ticks a gap runs one by one).
fn trace() -> Vec<Request> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut time = 50.0;
    let mut out = Vec::new();
    for i in 0..30_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        time += match i {
            10_000 => 40.0,
            20_000 => 3_000.0,
            _ => 0.002,
        };
        out.push(Request {
            time,
            key: (x >> 20) % 400,
            size: (x >> 40) as u32 % 200 + 1,
            op: [Op::Get, Op::Get, Op::Access, Op::Put, Op::Delete][(x >> 9) as usize % 5],
            offset: 0,
        });
    }
    out
}

#[test]
fn one_node_replays_as_replay_does_across_idle_gaps() {
    check(Tick::Seconds(1.0), None, "seconds");
}

/// A request-count tick falls at its last request's time and covers the trace time since
/// the previous tick, as replay's does (it was at time `k`, covering one second: the policy
/// saw other rates and back-end queues, and decided otherwise).
#[test]
fn one_node_replays_as_replay_does_on_request_count_ticks() {
    check(Tick::Ops(100), None, "ops");
}

/// Every node's cache classed by the same rules: one node is `replay --classes`, per-class
/// counters included.
#[test]
fn one_classed_node_replays_as_classed_replay_does() {
    let classes = ClassSet::parse(
        "IO class id,IO class name,Eviction priority,Allocation\n\
         0,unclassified,12,1\n\
         1,size:le:60&done,1,0.5\n\
         2,size:gt:60,5,1\n",
        "size classes",
    )
    .unwrap();
    for tick in [Tick::Seconds(1.0), Tick::Ops(100)] {
        check(tick, Some(classes.clone()), "classes");
    }
}

fn check(tick: Tick, classes: Option<ClassSet>, label: &str) {
    let dir = std::env::temp_dir().join(format!(
        "mantle-nodes-parity-{label}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("capacity.lua");
    std::fs::write(&path, POLICY).unwrap();
    let reqs = trace();
    let capacity = Capacity::objects(60);

    let mut controller =
        PolicyController::from_file(&path, Params::new(), Limits::default(), false).unwrap();
    let config = ReplayConfig {
        capacity,
        tick,
        record_ticks: true,
        classes: classes.clone(),
        ..ReplayConfig::default()
    };
    let mut it = reqs.iter().copied();
    let single = replay(&config, Some(&mut controller), || {
        Ok::<_, Infallible>(it.next())
    })
    .unwrap();

    let mut balancer = Balancer::from_file(&path, 1, Params::new(), Limits::default()).unwrap();
    let config = NodesConfig {
        nodes: 1,
        capacity,
        tick,
        record_ticks: true,
        classes,
        ..NodesConfig::default()
    };
    let mut it = reqs.iter().copied();
    let nodes = replay_nodes(&config, Some(&mut balancer), || {
        Ok::<_, Infallible>(it.next())
    })
    .unwrap();

    // Ticks: the same number at the same times (replay's last row only closes the trace's
    // last partial interval, if any; no policy runs there).
    let policy = single.policy.as_ref().unwrap();
    assert_eq!(policy.errors, 0);
    match tick {
        Tick::Seconds(_) => assert!(
            policy.ticks > 1_000,
            "the gaps run their ticks: {}",
            policy.ticks
        ),
        Tick::Ops(n) => assert_eq!(policy.ticks, reqs.len() as u64 / n),
    }
    assert_eq!(nodes.ticks, policy.ticks);
    let replay_times: Vec<f64> = single.ticks.iter().map(|t| t.time).collect();
    let nodes_times: Vec<f64> = nodes.rows.iter().map(|t| t.time).collect();
    assert_eq!(nodes_times[..], replay_times[..nodes_times.len()]);
    // The trace's 30,000 requests end on a request-count tick: no partial interval is left.
    let partial = usize::from(matches!(tick, Tick::Seconds(_)));
    assert_eq!(replay_times.len(), nodes_times.len() + partial);

    // Decisions: as many capacity changes, ending at the same capacity.
    let balancer = nodes.policy.as_ref().unwrap();
    assert_eq!(balancer.errors, 0);
    assert!(policy.actions > 100, "the policy acts: {}", policy.actions);
    assert_eq!(balancer.actions, Some(policy.actions));

    // Counters.
    let node = &nodes.per_node[0];
    assert_eq!(nodes.requests, single.requests);
    assert_eq!((node.hits, node.misses), (single.hits, single.misses));
    assert_eq!(node.cached_objects, single.final_cache_objects);
    assert_eq!(nodes.miss_ratio, single.miss_ratio);
    assert_eq!(nodes.backend.as_ref(), Some(&single.backend));
    assert_eq!(node.classes, single.classes);
    if let Some(classes) = &node.classes {
        assert_eq!(classes.len(), 3);
        let served = classes.iter().filter(|c| c.stats.hits > 0).count();
        assert_eq!(served, 2, "both size classes serve hits: {classes:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
