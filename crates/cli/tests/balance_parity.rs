//! Parity of the balancer (issue 13): the same trace through `mantle replay --nodes 3` (the
//! simulator, migrations done within their tick) and through `mantle replay --server --nodes 3
//! --tick 1s` against a live 3-node cluster ticked in lock step must move the same slots to
//! the same nodes at the same ticks. A mismatch names the first tick that differs.
//!
//! The trace sends all its load to keys in n1's slots, so Ceph's greedy spill (stateless,
//! unmodified) sheds: n1 to its idle neighbour n2, then n2 to n3; and the adaptable balancer,
//! which keeps its back-off countdown with WRstate, sends n2 and n3 what each lacks.

use cluster::testing::{free_port, Etcd};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NAME: &str = "par";

fn mantle() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mantle"));
    c.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    c
}

struct Node {
    id: String,
    port: u16,
    child: Child,
    log: PathBuf,
}

impl Node {
    fn start(id: &str, etcd: &Etcd, root: &Path) -> Node {
        let port = free_port();
        let log = root.join(format!("{id}.log"));
        let child = mantle()
            .args(["serve", "--data-dir"])
            .arg(root.join(id))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--cluster", &etcd.address(), "--cluster-name", NAME])
            .args(["--node-id", id, "--cluster-ttl", "2s", "--tick", "manual"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("mantle serve starts");
        let node = Node {
            id: id.to_string(),
            port,
            child,
            log,
        };
        wait_until(&format!("{id} to listen"), Duration::from_secs(20), || {
            node.try_conn().is_some()
        });
        node
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn try_conn(&self) -> Option<redis::Connection> {
        redis::Client::open(format!("redis://{}", self.addr()))
            .ok()?
            .get_connection_with_timeout(Duration::from_secs(5))
            .ok()
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> T {
        cmd.query(&mut self.try_conn().expect("connects"))
            .unwrap_or_else(|e| panic!("{}: {e}", self.id))
    }

    /// Slots per owner as this node sees them (CLUSTER NODES).
    fn owned(&self) -> Vec<usize> {
        let text: String = self.query(redis::cmd("CLUSTER").arg("NODES"));
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort();
        lines
            .iter()
            .map(|l| {
                l.split_whitespace()
                    .skip(8)
                    .map(|r| {
                        let (a, b) = r.split_once('-').unwrap_or((r, r));
                        b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1
                    })
                    .sum()
            })
            .collect()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("--- {} stderr ---\n{log}", self.id);
        }
    }
}

fn wait_until(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// 24 s at 300 requests a second to 40 keys of n1's slots (0-5461 after the rebalance), with
/// skewed popularity so slots differ in load; each key is written first, then read, with
/// one write in ten.
fn trace(dir: &Path) -> PathBuf {
    let keys: Vec<u64> = (0u64..)
        .filter(|k| slots::key_slot(k.to_string().as_bytes()) <= 5461)
        .take(40)
        .collect();
    let path = dir.join("parity.csv");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    writeln!(out, "timestamp_s,op,key").unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    for i in 0..7_200u64 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let r = (state >> 33) as f64 / f64::from(1u32 << 31);
        // Quadratic skew: low ranks are hotter, none carries most of the load.
        let key = keys[((r * r * 40.0) as usize).min(39)];
        let op = if seen.insert(key) || i % 10 == 0 {
            "PUT"
        } else {
            "GET"
        };
        writeln!(out, "{:.4},{op},{key}", i as f64 / 300.0).unwrap();
    }
    out.flush().unwrap();
    path
}

fn json(cmd: &mut Command) -> Value {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (tick, from, to, ranges) of every migration, in order.
fn moves(report: &Value) -> Vec<(u64, u64, u64, String)> {
    let mut list: Vec<(u64, u64, u64, String)> = report["migrations"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let ranges: Vec<String> = m["ranges"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| format!("{}-{}", r["start"], r["end"]))
                .collect();
            (
                m["start_tick"].as_u64().unwrap(),
                m["from"].as_u64().unwrap(),
                m["to"].as_u64().unwrap(),
                ranges.join(","),
            )
        })
        .collect();
    list.sort();
    list
}

#[test]
fn the_simulator_and_a_live_cluster_make_the_same_moves() {
    parity("greedyspill", &[("idle", "30")], 2);
}

/// A balancer with state between ticks (adaptable.lua's back-off, kept with WRstate): the
/// live engines must carry it from tick to tick as the simulator's do.
#[test]
fn a_balancer_that_keeps_state_makes_the_same_moves_live() {
    parity("adaptable", &[], 2);
}

/// Runs the trace through the simulator and a fresh live cluster under `policies/NAME.lua`
/// with `params`; the moves (at least `min_moves`) must be the same.
fn parity(name: &str, params: &[(&str, &str)], min_moves: usize) {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let n1 = Node::start("n1", &etcd, root.path());
    wait_until("n1 to own the slots", Duration::from_secs(10), || {
        n1.owned() == [16384]
    });
    let nodes = [
        n1,
        Node::start("n2", &etcd, root.path()),
        Node::start("n3", &etcd, root.path()),
    ];
    for node in &nodes {
        wait_until(
            &format!("{} to see 3 members", node.id),
            Duration::from_secs(10),
            || node.owned().len() == 3,
        );
    }
    // The simulator's start: slots spread evenly, in id order.
    let out = mantle()
        .args([
            "cluster",
            "--etcd",
            &etcd.address(),
            "--name",
            NAME,
            "rebalance",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for node in &nodes {
        wait_until(
            &format!("{} to see the even spread", node.id),
            Duration::from_secs(20),
            || node.owned() == [5462, 5461, 5461],
        );
    }
    let file = format!("policies/{name}.lua");
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(&file),
    )
    .unwrap();
    let _: redis::Value =
        nodes[0].query(redis::cmd("POLICY").arg(&["LOAD", name, &source, "AUTHOR", "test"][..]));
    for &(k, v) in params {
        let _: redis::Value = nodes[0].query(redis::cmd("POLICY").arg(&["PARAM", k, v][..]));
    }
    let active = format!("{name}@1");
    for node in &nodes {
        wait_until(
            &format!("{} to run {active}", node.id),
            Duration::from_secs(10),
            || {
                let status: std::collections::BTreeMap<String, redis::Value> =
                    node.query(redis::cmd("POLICY").arg("STATUS"));
                status.get("active") == Some(&redis::Value::Data(active.as_bytes().to_vec()))
            },
        );
    }

    let trace = trace(root.path());
    let trace = trace.to_str().unwrap();
    let mut sim = mantle();
    sim.args([
        "replay",
        "--trace",
        trace,
        "--cache-size",
        "1000",
        "--nodes",
        "3",
        "--tick",
        "1s",
        "--policy",
        &file,
        "--migration-rate",
        "unlimited",
        "--json",
        "--quiet",
    ]);
    for (k, v) in params {
        sim.args(["--param", &format!("{k}={v}")]);
    }
    let sim = json(&mut sim);
    let live = json(mantle().args([
        "replay",
        "--trace",
        trace,
        "--server",
        &nodes[0].addr(),
        "--nodes",
        "3",
        "--tick",
        "1s",
        "--json",
        "--quiet",
    ]));

    assert_eq!(sim["requests"], 7_200);
    assert_eq!(live["requests"], 7_200);
    assert_eq!(sim["ticks"], live["ticks"]);
    let (s, l) = (moves(&sim), moves(&live));
    assert!(
        s.len() >= min_moves,
        "{name} sheds n1's load in the simulator: {s:?}"
    );
    if s != l {
        let first = s
            .iter()
            .zip(&l)
            .find(|(a, b)| a != b)
            .map(|(a, b)| a.0.min(b.0))
            .unwrap_or_else(|| s.len().min(l.len()) as u64);
        let at = |list: &[(u64, u64, u64, String)]| -> Vec<_> {
            list.iter().filter(|m| m.0 == first).cloned().collect()
        };
        panic!(
            "the moves differ first at tick {first}: simulated {:?}, live {:?}\nall simulated: \
             {s:?}\nall live: {l:?}",
            at(&s),
            at(&l)
        );
    }
    // The same requests reached the same nodes.
    for i in 0..3 {
        assert_eq!(
            sim["per_node"][i]["requests"], live["per_node"][i]["requests"],
            "node {i}"
        );
        assert_eq!(
            sim["per_node"][i]["final_slots"], live["per_node"][i]["final_slots"],
            "node {i}"
        );
    }
}
