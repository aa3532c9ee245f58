//! One engine, two hosts: a generated trace replayed by `mantle replay` and by
//! `mantle replay --server --tick` against a real `mantle serve --tick manual` must give the same
//! hits, misses, evictions and, tick by tick, the same decisions, capacities and cache sizes,
//! for every shipped single-node policy. A mismatch names the first tick that differs.
//!
//! The trace writes every key before it reads it (as ParSplice does), so the server's store
//! holds everything a GET asks for, as replay's back-end model does: a miss is a store read
//! and a fill, never a nil.

mod common;

use common::{json_of, mantle, parity_trace, Serve};
use serde_json::Value;
use std::path::Path;

/// Objects the cache holds (`--cache-size` in replay, `--max-keys` in serve).
const CACHE: &str = "150";

/// `mantle serve --tick manual` running `policy` with `params` (and `classes`).
fn start(policy: &str, params: &[(&str, &str)], classes: Option<&Path>) -> Serve {
    let mut args: Vec<std::ffi::OsString> = ["--threads", "2", "--tick", "manual"]
        .iter()
        .chain(&["--max-keys", CACHE, "--policy", policy])
        .map(Into::into)
        .collect();
    if let Some(c) = classes {
        args.push("--classes".into());
        args.push(c.into());
    }
    let serve = Serve::start(&args);
    let mut c = serve.client();
    for (k, v) in params {
        let _: () = redis::cmd("POLICY")
            .arg("PARAM")
            .arg(k)
            .arg(v)
            .query(&mut c)
            .unwrap();
    }
    serve
}

impl Serve {
    /// CACHE STATS as numbers (the text ones left out).
    fn cache_stats(&self) -> std::collections::HashMap<String, i64> {
        let pairs: std::collections::HashMap<String, redis::Value> = redis::cmd("CACHE")
            .arg("STATS")
            .query(&mut self.client())
            .unwrap();
        pairs
            .into_iter()
            .filter_map(|(k, v)| match v {
                redis::Value::Int(n) => Some((k, n)),
                _ => None,
            })
            .collect()
    }
}

/// The per-tick columns both hosts must agree on (cache bytes and back-end figures differ by
/// design: the server charges keys and bookkeeping, and its store is not replay's model).
const COLUMNS: [&str; 9] = [
    "tick",
    "time",
    "requests",
    "cache_objects",
    "capacity_objects",
    "lookups",
    "hits",
    "evictions",
    "action",
];

fn rows(path: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let index: Vec<usize> = COLUMNS
        .iter()
        .map(|c| {
            header
                .iter()
                .position(|h| h == c)
                .unwrap_or_else(|| panic!("{} lacks column {c}", path.display()))
        })
        .collect();
    lines
        .map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            index.iter().map(|&i| fields[i].to_string()).collect()
        })
        .collect()
}

/// Classes by key rules on the decimal key ids, an op rule and every pinning: a hard-pinned
/// class capped at 10% of the cache, a soft-pinned one, a capped low-priority one and one
/// never cached.
const CLASSES: &str = "IO class id,IO class name,Eviction priority,Allocation
0,unclassified,5,1
1,key_glob:*7&done,,0.1
2,key_prefix:1&done,9,0.3
3,key_glob:*3&done,soft,1
4,key_glob:*99&done,1,0
5,op:put&key_prefix:2&done,2,0.5
";

fn check(policy: &str, params: &[(&str, &str)]) {
    check_with(policy, params, None);
}

fn check_with(policy: &str, params: &[(&str, &str)], classes: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let trace = parity_trace(dir.path(), "parity.csv");
    let class_file = dir.path().join("classes.csv");
    if let Some(text) = classes {
        std::fs::write(&class_file, text).unwrap();
    }
    let class_file = classes.map(|_| class_file.as_path());
    let sim_csv = dir.path().join("sim.csv");
    let live_csv = dir.path().join("live.csv");
    let mut args = vec![
        "replay",
        "--trace",
        &trace,
        "--cache-size",
        CACHE,
        "--backend",
        "none",
        "--tick",
        "1s",
        "--policy",
        policy,
        "--json",
        "--quiet",
        "--metrics-out",
        sim_csv.to_str().unwrap(),
    ];
    let joined: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    for p in &joined {
        args.extend(["--param", p]);
    }
    if let Some(file) = class_file {
        args.extend(["--classes", file.to_str().unwrap()]);
    }
    let sim = json_of(&mantle(&args));

    let serve = start(policy, params, class_file);
    let live = json_of(&mantle(&[
        "replay",
        "--trace",
        &trace,
        "--server",
        &serve.addr,
        "--tick",
        "1s",
        "--json",
        "--quiet",
        "--metrics-out",
        live_csv.to_str().unwrap(),
    ]));
    let server_stats = serve.cache_stats();
    drop(serve);
    if classes.is_some() {
        let sim_classes = sim["classes"].as_array().expect("replay reports classes");
        for class in sim_classes {
            let id = class["id"].as_u64().unwrap();
            for counter in [
                "hits",
                "misses",
                "objects",
                "evictions",
                "bypassed",
                "fenced",
                "refused",
            ] {
                let served = server_stats
                    .get(&format!("class_{id}_{counter}"))
                    .unwrap_or_else(|| panic!("CACHE STATS lacks class_{id}_{counter}"));
                assert_eq!(
                    class[counter].as_u64().unwrap() as i64,
                    *served,
                    "{policy}: class {id} {counter}: replay {}, serve {served}",
                    class[counter]
                );
            }
        }
    }

    let (sim_rows, live_rows) = (rows(&sim_csv), rows(&live_csv));
    assert!(
        !live_rows.is_empty(),
        "{policy}: the live replay ran no ticks"
    );
    for (s, l) in sim_rows.iter().zip(&live_rows) {
        if s != l {
            let differ: Vec<String> = COLUMNS
                .iter()
                .zip(s.iter().zip(l))
                .filter(|(_, (a, b))| a != b)
                .map(|(c, (a, b))| format!("{c}: replay {a}, serve {b}"))
                .collect();
            panic!(
                "{policy}: first differing tick is {} (t={}): {}",
                s[0],
                s[1],
                differ.join("; ")
            );
        }
    }
    // Replay closes the trace's last partial interval with one more row (no policy call).
    assert!(
        sim_rows.len() == live_rows.len() || sim_rows.len() == live_rows.len() + 1,
        "{policy}: replay ran {} ticks, serve {}",
        sim_rows.len(),
        live_rows.len()
    );
    for key in ["requests", "hits", "misses", "evictions"] {
        assert_eq!(sim[key], live[key], "{policy}: {key} differs");
    }
    let policy_ticks = |v: &Value| v["policy"]["ticks"].as_u64().unwrap();
    assert_eq!(policy_ticks(&sim), policy_ticks(&live), "{policy}: ticks");
    assert!(
        sim["evictions"].as_u64().unwrap() > 0,
        "{policy}: the trace must make the cache evict"
    );
}

#[test]
fn fixed_decides_the_same_in_replay_and_serve() {
    check("policies/fixed.lua", &[("n", "100")]);
}

#[test]
fn multipolicy_decides_the_same_in_replay_and_serve() {
    check(
        "policies/multipolicy.lua",
        &[("n", "100"), ("absorb", "140")],
    );
}

#[test]
fn dscache_decides_the_same_in_replay_and_serve() {
    check("policies/dscache.lua", &[]);
}

#[test]
fn decay_decides_the_same_in_replay_and_serve() {
    check("policies/decay.lua", &[("history", "3")]);
}

#[test]
fn classes_decide_the_same_in_replay_and_serve() {
    check_with("policies/fixed.lua", &[("n", "100")], Some(CLASSES));
}

/// Per-request hooks decide inside the cache of each host: the same victims give the same
/// hits, misses and evictions at every tick.
#[test]
fn lru_hooks_decide_the_same_in_replay_and_serve() {
    check("policies/hooks/lru.lua", &[]);
}

#[test]
fn arc_hooks_decide_the_same_in_replay_and_serve() {
    check("policies/hooks/arc.lua", &[]);
}
