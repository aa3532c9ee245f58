//! `mantle gen hotspot` and `mantle replay --nodes` as a user runs them: a flash-crowd trace
//! that overloads one node under static placement, the adaptable balancer evening it out,
//! the per-tick loads CSV, and clean errors for bad flags.

mod common;

use common::{json_of, mantle};
use std::path::Path;

fn hotspot(dir: &Path) -> String {
    let path = dir.join("hot.csv.zst");
    let out = mantle(&[
        "gen",
        "hotspot",
        "--duration",
        "4m",
        "--rate",
        "1000",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("wrote 240000 requests"));
    path.to_str().unwrap().to_string()
}

#[test]
fn a_balancer_evens_out_a_flash_crowd() {
    let dir = tempfile::tempdir().unwrap();
    let trace = hotspot(dir.path());
    let base = [
        "replay",
        "--trace",
        &trace,
        "--cache-size",
        "5000",
        "--nodes",
        "3",
        "--json",
    ];
    let fixed = json_of(&mantle(&base));
    assert_eq!(fixed["requests"], 240_000);
    assert_eq!(fixed["nodes"], 3);
    assert_eq!(fixed["migrations"]["count"], 0);
    assert!(
        fixed["imbalance"]["peak"].as_f64().unwrap() > 2.0,
        "{}",
        fixed["imbalance"]
    );

    let loads = dir.path().join("loads.csv");
    let mut args = base.to_vec();
    args.extend([
        "--policy",
        "policies/adaptable.lua",
        "--loads-out",
        loads.to_str().unwrap(),
    ]);
    let balanced = json_of(&mantle(&args));
    let settled = balanced["imbalance"]["settled"].as_f64().unwrap();
    assert!(
        settled < fixed["imbalance"]["settled"].as_f64().unwrap(),
        "{} vs {}",
        balanced["imbalance"],
        fixed["imbalance"]
    );
    assert!(balanced["migrations"]["count"].as_u64().unwrap() > 0);
    assert_eq!(balanced["policy"]["errors"], 0);
    let slots: u64 = balanced["per_node"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["final_slots"].as_u64().unwrap())
        .sum();
    assert_eq!(slots, 16_384);

    let csv = std::fs::read_to_string(&loads).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "tick,time,load0,load1,load2,max_over_mean,migrations_in_flight"
    );
    assert_eq!(lines.count() as u64, balanced["ticks"].as_u64().unwrap());

    // The human summary names the imbalance and the migrations.
    let out = mantle(&base[..base.len() - 1]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("imbalance (max/mean node load)"), "{text}");
}

#[test]
fn bad_cluster_flags_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    std::fs::write(&trace, "timestamp_s,op,key\n0,GET,1\n1,GET,2\n").unwrap();
    let t = trace.to_str().unwrap();
    for (args, expect) in [
        (vec!["--nodes", "0"], "--nodes must be between 1 and 256"),
        (vec!["--nodes", "300"], "--nodes must be between 1 and 256"),
        (
            vec!["--nodes", "2", "--placement", "ranges"],
            "unknown placement 'ranges': expected hash or range",
        ),
        (
            vec!["--nodes", "2", "--migration-rate", "0"],
            "more than 0 bytes",
        ),
        (
            vec!["--nodes", "2", "--policy", "does/not/exist.lua"],
            "does/not/exist.lua",
        ),
    ] {
        let mut all = vec!["replay", "--trace", t, "--cache-size", "10"];
        all.extend(args.iter());
        let out = mantle(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // A live cluster hashes keys: range placement is refused before connecting.
    let out = mantle(&[
        "replay",
        "--trace",
        t,
        "--nodes",
        "2",
        "--placement",
        "range",
        "--server",
        "127.0.0.1:1",
        "--tick",
        "1s",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--placement range is for the simulator only"),
        "{stderr}"
    );
    let out = mantle(&["gen", "hotspot", "--crowd-share", "2", "-o", "x.csv"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--crowd-share"));
}

/// `--placement range`: nodes own contiguous key ranges, so the hot low keys of a trace all
/// land on node 0, which hashing spreads; the report names the placement, and `hash` (the
/// default) gives the same report as no flag.
#[test]
fn range_placement_keeps_a_hot_key_range_on_one_node() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    let mut text = String::from("timestamp_s,op,key\n");
    for i in 0..30_000u64 {
        // Every third request to the 30 lowest of 3,000 keys.
        let key = if i % 3 == 0 {
            i % 30
        } else {
            (i * 7_919) % 3_000
        };
        text.push_str(&format!("{:.3},GET,{key}\n", i as f64 / 1_000.0));
    }
    std::fs::write(&trace, text).unwrap();
    let t = trace.to_str().unwrap();
    let base = [
        "replay",
        "--trace",
        t,
        "--cache-size",
        "100",
        "--nodes",
        "3",
        "--json",
        "--quiet",
    ];
    let report = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let mut json = json_of(&mantle(&args));
        json.as_object_mut().unwrap().remove("wall_seconds");
        json.as_object_mut().unwrap().remove("requests_per_second");
        json
    };
    let default = report(&[]);
    assert_eq!(default, report(&["--placement", "hash"]));
    assert_eq!(default["placement"], "hash");
    let ranged = report(&["--placement", "range"]);
    assert_eq!(ranged["placement"], "range");
    assert_eq!(ranged["requests"], 30_000);
    let requests = |r: &serde_json::Value, i: usize| r["per_node"][i]["requests"].as_u64().unwrap();
    // A third of the load in the lowest 1% of keys, plus a third of the rest: node 0 serves
    // over half under range placement, about a third when keys are hashed.
    assert!(requests(&ranged, 0) > 15_000, "{}", ranged["per_node"]);
    assert!(requests(&default, 0) < 12_000, "{}", default["per_node"]);
    assert!(
        ranged["imbalance"]["mean"].as_f64().unwrap()
            > default["imbalance"]["mean"].as_f64().unwrap()
    );
}

/// `--nodes 1` is plain `replay`: a policy whose capacity decision reads its metrics and
/// `timeseries()`, on a trace with a 40 s and a 3,000 s pause, runs the same ticks (the
/// gaps' empty ticks included), takes the same decisions and leaves the same counters.
#[test]
fn one_node_ticks_decides_and_counts_as_plain_replay() {
    one_node_as_plain_replay("1s", None);
}

/// The same for request-count ticks: each falls at its last request's time and covers the
/// trace time since the previous one, so the rates the policy reads are replay's.
#[test]
fn one_node_on_request_count_ticks_decides_and_counts_as_plain_replay() {
    one_node_as_plain_replay("100ops", None);
}

/// And with `--classes`: the node's cache is classed by the same rules and its per-class
/// counters are replay's.
#[test]
fn one_classed_node_decides_and_counts_as_plain_classed_replay() {
    one_node_as_plain_replay("1s", Some("classes/size-bins.csv"));
}

fn one_node_as_plain_replay(tick: &str, classes: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("gap.csv");
    let mut text = String::new();
    let (mut x, mut time) = (0x9e37_79b9_7f4a_7c15u64, 50.0f64);
    for i in 0..20_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        time += match i {
            7_000 => 40.0,
            14_000 => 3_000.0,
            _ => 0.002,
        };
        let op = ["get", "get", "get", "set", "delete"][(x >> 9) as usize % 5];
        text.push_str(&format!(
            "{time:.3},{},{},{op}\n",
            (x >> 20) % 400,
            (x >> 40) % 200 + 1
        ));
    }
    std::fs::write(&trace, text).unwrap();
    let policy = dir.path().join("cap.lua");
    std::fs::write(
        &policy,
        r#"
local target = 0
function when()
  local s = servers[whoami]
  local queued = 0
  if s.backend_queue > 0 then queued = 5 end
  target = 20 + (math.floor(s.hits) % 13) + (timeseries():size() % 11) + queued
    + (math.floor(s.reqrate) % 7) + (tick % 3)
  return s.capacity ~= target
end
function howmuch() return {capacity = target} end
"#,
    )
    .unwrap();
    let base = [
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--csv",
        "time-col=1,obj-id-col=2,obj-size-col=3,op-col=4,has-header=false",
        "--cache-size",
        "60",
        "--policy",
        policy.to_str().unwrap(),
        "--tick",
        tick,
        "--json",
    ];
    let mut base = base.to_vec();
    if let Some(classes) = classes {
        base.extend(["--classes", classes]);
    }
    let single = json_of(&mantle(&base));
    let mut args = base.to_vec();
    args.extend(["--nodes", "1"]);
    let nodes = json_of(&mantle(&args));
    let ticks = single["policy"]["ticks"].as_u64().unwrap();
    if tick.ends_with("ops") {
        assert_eq!(ticks, 200, "20,000 requests, one tick every 100");
    } else {
        assert!(ticks > 1_000, "the gaps' empty ticks run: {ticks}");
    }
    assert_eq!(nodes["ticks"].as_u64(), Some(ticks));
    assert_eq!(single["policy"]["errors"], 0);
    assert_eq!(nodes["policy"]["errors"], 0);
    assert!(single["policy"]["actions"].as_u64().unwrap() > 100);
    assert_eq!(nodes["policy"]["actions"], single["policy"]["actions"]);
    let node = &nodes["per_node"][0];
    assert_eq!(nodes["requests"], single["requests"]);
    assert_eq!(node["hits"], single["hits"]);
    assert_eq!(node["misses"], single["misses"]);
    assert_eq!(node["cached_objects"], single["final_cache_objects"]);
    assert_eq!(nodes["backend"], single["backend"]);
    match classes {
        Some(_) => {
            assert!(node["classes"].as_array().is_some_and(|c| !c.is_empty()));
            assert_eq!(node["classes"], single["classes"]);
        }
        None => assert!(node.get("classes").is_none(), "{node}"),
    }
}
