//! The balancer on a live 3-node cluster (issue 13): real `mantle serve --cluster --tick
//! manual` processes on a private etcd, Ceph's `policies/greedyspill.lua` unmodified, and the
//! `redis` crate's cluster client writing keys that all start on one node. Ticked by hand,
//! the overloaded node sheds slots to its idle neighbour, which sheds in turn; every decision
//! and migration is in the central log, and every acknowledged write is still readable.

use cluster::testing::free_port;
use cluster::testing::Etcd;
use redis::Commands;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NAME: &str = "bal";
/// Hash tags the clients write under: one slot each, all owned by n1 at first.
const TAGS: usize = 10;
const KEYS_PER_TAG: usize = 20;

fn mantle() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mantle"))
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
        let dir: PathBuf = root.join(id);
        let log_path = root.join(format!("{id}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let child = mantle()
            .args(["serve", "--data-dir"])
            .arg(&dir)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--cluster", &etcd.address(), "--cluster-name", NAME])
            .args(["--node-id", id, "--cluster-ttl", "2s", "--tick", "manual"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("mantle serve starts");
        let node = Node {
            id: id.to_string(),
            port,
            child,
            log: log_path,
        };
        wait_until(&format!("{id} to listen"), Duration::from_secs(20), || {
            redis::Client::open(node.url())
                .and_then(|c| c.get_connection())
                .is_ok()
        });
        node
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap()
    }

    fn policy(&self, args: &[&str]) -> redis::Value {
        redis::cmd("POLICY")
            .arg(args)
            .query(&mut self.conn())
            .unwrap_or_else(|e| panic!("POLICY {args:?} on {}: {e}", self.id))
    }

    fn log(&self, n: usize) -> Vec<String> {
        redis::cmd("POLICY")
            .arg("LOG")
            .arg(n)
            .query(&mut self.conn())
            .unwrap()
    }

    fn cluster_nodes(&self) -> usize {
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.conn())
            .unwrap();
        text.lines().count()
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

fn status(etcd: &Etcd) -> Value {
    let out = mantle()
        .args(["cluster", "--etcd", &etcd.address(), "--name", NAME])
        .args(["status", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Slots owned per node, and whether every slot has exactly one owner.
fn owners(st: &Value) -> (BTreeMap<String, usize>, bool) {
    let mut owned = vec![0u8; 16384];
    let mut per_node = BTreeMap::new();
    for (node, ranges) in st["slot_map"]["owners"].as_object().unwrap() {
        let mut n = 0;
        for r in ranges.as_array().unwrap() {
            for slot in r["start"].as_u64().unwrap()..=r["end"].as_u64().unwrap() {
                owned[slot as usize] += 1;
                n += 1;
            }
        }
        per_node.insert(node.clone(), n);
    }
    (per_node, owned.iter().all(|&n| n == 1))
}

/// A manual tick on every node at once: each publishes its measurement, then decides once
/// all have (the lock-step tick, the simulator's view).
fn tick_all(nodes: &[Node], now: &str) {
    std::thread::scope(|s| {
        for node in nodes {
            s.spawn(move || node.policy(&["TICK", now]));
        }
    });
}

fn key(tag: usize, i: usize) -> String {
    format!("{{hot{tag}}}:{i}")
}

#[test]
fn greedy_spill_sheds_an_overloaded_nodes_slots_to_its_idle_neighbours() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    // n1 joins first and takes every slot: all the load starts there.
    let n1 = Node::start("n1", &etcd, root.path());
    wait_until("n1 to own the slots", Duration::from_secs(10), || {
        status(&etcd)["slot_map"]["owners"]["n1"].is_array()
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
            || node.cluster_nodes() == 3,
        );
    }
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/greedyspill.lua"),
    )
    .unwrap();
    let _ = nodes[0].policy(&["LOAD", "greedyspill", &source, "AUTHOR", "test"]);
    // A node serving only ticks and probes counts as idle; the writes make ~200 req/s.
    let _ = nodes[0].policy(&["PARAM", "idle", "30"]);
    for node in &nodes {
        wait_until(
            &format!("{} to run greedyspill", node.id),
            Duration::from_secs(10),
            || {
                let status: BTreeMap<String, redis::Value> = redis::cmd("POLICY")
                    .arg("STATUS")
                    .query(&mut node.conn())
                    .unwrap();
                status["active"] == redis::Value::Data(b"greedyspill@1".to_vec())
            },
        );
    }

    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let client = redis::cluster::ClusterClientBuilder::new(urls)
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut conn = client.get_connection().unwrap();
    // A first tick without traffic: the next rates count one round of policy time each,
    // not everything since the nodes started (the polls above included).
    tick_all(&nodes, "1");
    let mut acked: HashMap<String, u64> = HashMap::new();
    let mut spread = BTreeMap::new();
    for round in 2..=9u64 {
        // One second of policy time: 200 writes, 20 to each hot slot.
        for tag in 0..TAGS {
            for i in 0..KEYS_PER_TAG {
                let k = key(tag, i);
                let () = conn.set(&k, round).unwrap();
                acked.insert(k, round);
            }
        }
        tick_all(&nodes, &round.to_string());
        wait_until("the round's migrations", Duration::from_secs(60), || {
            status(&etcd)["slot_map"]["migrations"]
                .as_array()
                .is_some_and(|m| m.is_empty())
        });
        let (per_node, whole) = owners(&status(&etcd));
        assert!(whole, "a slot owned twice or never: {per_node:?}");
        spread = per_node;
    }

    // n1 shed to n2, which then shed to n3 (greedy spill's right-hand neighbour rule).
    assert!(spread.get("n2").copied().unwrap_or(0) > 0, "{spread:?}");
    assert!(spread.get("n3").copied().unwrap_or(0) > 0, "{spread:?}");
    let hot_owner = |tag: usize| -> String {
        let slot = slots::key_slot(key(tag, 0).as_bytes());
        let st = status(&etcd);
        st["slot_map"]["owners"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(_, ranges)| {
                ranges.as_array().unwrap().iter().any(|r| {
                    (r["start"].as_u64().unwrap()..=r["end"].as_u64().unwrap())
                        .contains(&u64::from(slot))
                })
            })
            .map(|(n, _)| n.clone())
            .unwrap()
    };
    let mut hot: BTreeMap<String, usize> = BTreeMap::new();
    for tag in 0..TAGS {
        *hot.entry(hot_owner(tag)).or_default() += 1;
    }
    assert!(
        hot.len() == 3,
        "the hot slots sit on every node now: {hot:?}"
    );

    // Every decision and migration is in the central log, with who made it.
    let log = nodes[2].log(500);
    let has = |what: &[&str]| log.iter().any(|l| what.iter().all(|w| l.contains(w)));
    assert!(
        has(&["event=balance", "policy=greedyspill@1", "to n2", "node=n1"]),
        "{log:#?}"
    );
    assert!(
        has(&["event=migration_begun", "to n2", "node=n1"]),
        "{log:#?}"
    );
    assert!(
        has(&["event=migration_begun", "to n3", "node=n2"]),
        "{log:#?}"
    );
    wait_until(
        "the finished migrations in the log",
        Duration::from_secs(10),
        || {
            let log = nodes[2].log(500);
            ["n1", "n2"].iter().all(|n| {
                log.iter().any(|l| {
                    l.contains("event=migration_done") && l.ends_with(&format!("node={n}"))
                })
            })
        },
    );

    // Every acknowledged write is readable through the cluster client.
    for (k, v) in &acked {
        let got: Option<u64> = conn.get(k).unwrap();
        assert_eq!(got, Some(*v), "{k}: the acknowledged write is gone");
    }
}
