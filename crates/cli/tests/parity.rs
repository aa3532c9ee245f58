//! One engine, two hosts: a generated trace replayed by `mantle replay` and by
//! `mantle replay --server --tick` against a real `mantle serve --tick manual` must give the same
//! hits, misses, evictions and, tick by tick, the same decisions, capacities and cache sizes,
//! for every shipped single-node policy. A mismatch names the first tick that differs.
//!
//! The trace writes every key before it reads it (as ParSplice does), so the server's store
//! holds everything a GET asks for, as replay's back-end model does: a miss is a store read
//! and a fill, never a nil.

mod common;

use common::{json_of, mantle, repo};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Objects the cache holds (`--cache-size` in replay, `--max-keys` in serve).
const CACHE: &str = "150";

/// A ParSplice-format trace: 4,000 requests 0.01 s apart over 40 s; keys come from a basin of
/// 90 that moves by 60 every 8 s (so old keys go cold and fans form); a key's first request
/// writes it, later ones read it, with one write in twenty.
fn trace(dir: &Path) -> String {
    let path = dir.join("parity.csv");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    writeln!(out, "timestamp_s,op,key").unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..4_000u64 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let r = state >> 33;
        let key = (i / 800) * 60 + r % 90;
        let op = if seen.insert(key) || r.is_multiple_of(20) {
            "PUT"
        } else {
            "GET"
        };
        writeln!(out, "{:.2},{op},{key}", i as f64 * 0.01).unwrap();
    }
    out.flush().unwrap();
    path.to_str().unwrap().to_string()
}

/// A `mantle serve --tick manual` child process, killed when dropped (even on failure).
struct Serve {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Serve {
    fn start(policy: &str, params: &[(&str, &str)], classes: Option<&Path>) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_mantle"))
            .args(["serve", "--listen", "127.0.0.1:0", "--threads", "2"])
            .args(["--tick", "manual", "--max-keys", CACHE, "--policy", policy])
            .args(
                classes
                    .map(|c| vec!["--classes".into(), c.as_os_str().to_owned()])
                    .unwrap_or_default(),
            )
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .current_dir(repo())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mantle serve starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let addr = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(rest) = line.strip_prefix("mantle: serving on ") {
                        break rest.split_whitespace().next().unwrap().to_string();
                    }
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("mantle serve exited before listening");
                }
            }
        };
        std::thread::spawn(move || lines.for_each(drop));
        let serve = Serve {
            child,
            addr,
            _dir: dir,
        };
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
}

impl Serve {
    fn client(&self) -> redis::Connection {
        redis::Client::open(format!("redis://{}", self.addr))
            .unwrap()
            .get_connection()
            .unwrap()
    }

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

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
    let trace = trace(dir.path());
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

    let serve = Serve::start(policy, params, class_file);
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
