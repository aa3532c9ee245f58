//! Three real `mantle serve --cluster` processes on a private etcd, driven by the clients
//! users have: `mantle cluster`, the `redis` crate's cluster client, `redis-cli -c` and
//! `redis-benchmark --cluster`. Then the failures: a node killed with SIGKILL (its slots are
//! down until it returns with its data) and etcd going away (nodes keep serving, changes are
//! refused, and everything reconnects without a restart).

use cluster::testing::free_port;
use cluster::testing::Etcd;
use redis::Commands;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const NAME: &str = "live";

fn mantle() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mantle"))
}

struct Node {
    id: String,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Node {
    fn start(id: &str, etcd: &Etcd, root: &Path) -> Node {
        let mut node = Node {
            id: id.to_string(),
            port: free_port(),
            dir: root.join(id),
            child: None,
        };
        node.spawn(etcd);
        node
    }

    fn spawn(&mut self, etcd: &Etcd) {
        let child = mantle()
            .args(["serve", "--data-dir"])
            .arg(&self.dir)
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args(["--cluster", &etcd.address(), "--cluster-name", NAME])
            .args(["--node-id", &self.id, "--cluster-ttl", "2s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mantle serve starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .is_err()
        {
            assert!(Instant::now() < deadline, "{} never listened", self.id);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn cluster_info(&self) -> String {
        redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut self.conn())
            .unwrap()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

fn admin(etcd: &Etcd, args: &[&str]) -> Output {
    mantle()
        .args(["cluster", "--etcd", &etcd.address(), "--name", NAME])
        .args(args)
        .output()
        .unwrap()
}

fn status(etcd: &Etcd) -> Value {
    let out = admin(etcd, &["status", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn wait_until(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn start_cluster(etcd: &Etcd, root: &Path) -> Vec<Node> {
    let nodes: Vec<Node> = ["n1", "n2", "n3"]
        .iter()
        .map(|id| Node::start(id, etcd, root))
        .collect();
    wait_until("three members", Duration::from_secs(10), || {
        status(etcd)["members"].as_array().unwrap().len() == 3
    });
    let out = admin(etcd, &["rebalance"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("n1: 5462 slots"), "{text}");
    for node in &nodes {
        wait_until(
            "every node to see the new map",
            Duration::from_secs(5),
            || node.cluster_info().contains("cluster_size:3"),
        );
    }
    nodes
}

#[test]
fn cluster_clients_read_and_write_through_every_node() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let nodes = start_cluster(&etcd, root.path());

    // The redis crate's cluster client discovers the map with CLUSTER SLOTS.
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let client = redis::cluster::ClusterClient::new(urls).unwrap();
    let mut conn = client.get_connection().unwrap();
    for i in 0..600 {
        let _: () = conn.set(format!("key:{i}"), i).unwrap();
    }
    for i in 0..600 {
        let v: i64 = conn.get(format!("key:{i}")).unwrap();
        assert_eq!(v, i);
    }
    // Keys landed on all three nodes.
    for node in &nodes {
        let size: i64 = redis::cmd("DBSIZE").query(&mut node.conn()).unwrap();
        assert!(size > 100, "{}: {size}", node.id);
    }

    // A cluster-unaware client is told where a key lives.
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg("foo")
        .query(&mut nodes[0].conn())
        .unwrap();
    assert_eq!(slot, 12182);
    let err = nodes[0].conn().get::<_, Option<String>>("foo").unwrap_err();
    assert_eq!(err.code(), Some("MOVED"), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("127.0.0.1:{}", nodes[2].port)),
        "{err}"
    );
    // Multi-key commands must stay in one slot; hash tags make that possible.
    let err = redis::cmd("MGET")
        .arg("a")
        .arg("b")
        .query::<Vec<Option<String>>>(&mut nodes[0].conn())
        .unwrap_err();
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err}");
    let _: () = conn.set("{user}.name", "ann").unwrap();
    let _: () = conn.set("{user}.mail", "a@b").unwrap();
    let both: Vec<String> = conn.get(&["{user}.name", "{user}.mail"]).unwrap();
    assert_eq!(both, ["ann", "a@b"]);

    // redis-cli -c follows MOVED.
    for (node, key) in [(&nodes[0], "foo"), (&nodes[1], "bar"), (&nodes[2], "baz")] {
        let set = Command::new("redis-cli")
            .args(["-c", "-p", &node.port.to_string(), "set", key, "from-cli"])
            .output()
            .expect("redis-cli runs (scripts/setup.sh installs redis-tools)");
        assert_eq!(String::from_utf8_lossy(&set.stdout).trim(), "OK");
    }
    let get = Command::new("redis-cli")
        .args(["-c", "-p", &nodes[1].port.to_string(), "get", "foo"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), "from-cli");

    // redis-benchmark --cluster reads CLUSTER NODES and CLUSTER SLOTS and runs.
    let bench = Command::new("redis-benchmark")
        .args(["--cluster", "-p", &nodes[0].port.to_string()])
        .args(["-t", "set,get", "-n", "3000", "-c", "4", "-q"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&bench.stdout);
    assert!(
        bench.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&bench.stderr)
    );
    assert!(
        text.contains("GET:") && text.contains("requests per second"),
        "{text}"
    );

    // CLUSTER NODES and SHARDS describe the same map.
    let nodes_text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut nodes[1].conn())
        .unwrap();
    assert_eq!(nodes_text.lines().count(), 3, "{nodes_text}");
    assert!(
        nodes_text.contains("n2 ") && nodes_text.contains("myself,master"),
        "{nodes_text}"
    );
    let shards: redis::Value = redis::cmd("CLUSTER")
        .arg("SHARDS")
        .query(&mut nodes[1].conn())
        .unwrap();
    assert!(
        matches!(shards, redis::Value::Bulk(ref s) if s.len() == 3),
        "{shards:?}"
    );
}

#[test]
fn a_killed_node_takes_its_slots_down_until_it_returns_with_its_data() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let mut nodes = start_cluster(&etcd, root.path());
    let client =
        redis::cluster::ClusterClient::new(nodes.iter().map(Node::url).collect::<Vec<_>>())
            .unwrap();
    let mut conn = client.get_connection().unwrap();
    for i in 0..300 {
        let _: () = conn.set(format!("k{i}"), i).unwrap();
    }
    // A key that n2 owns.
    let owned_by_n2 = (0..300)
        .map(|i| format!("k{i}"))
        .find(|k| {
            let slot = slots::key_slot(k.as_bytes());
            (5462..=10922).contains(&slot)
        })
        .unwrap();

    nodes[1].kill();
    wait_until(
        "the survivors to see n2 gone",
        Duration::from_secs(10),
        || nodes[0].cluster_info().contains("cluster_state:fail"),
    );
    let info = nodes[0].cluster_info();
    assert!(info.contains("cluster_slots_fail:5461"), "{info}");
    let err = nodes[0]
        .conn()
        .get::<_, Option<i64>>(&owned_by_n2)
        .unwrap_err();
    assert_eq!(err.code(), Some("CLUSTERDOWN"), "{err}");
    let st = status(&etcd);
    assert_eq!(st["failed"], serde_json::json!(["n2"]));
    // The other nodes' keys are still served.
    let mut fine = 0;
    for i in 0..300 {
        let key = format!("k{i}");
        let slot = slots::key_slot(key.as_bytes());
        let node = if slot <= 5461 {
            &nodes[0]
        } else if slot > 10922 {
            &nodes[2]
        } else {
            continue;
        };
        let v: i64 = node.conn().get(&key).unwrap();
        assert_eq!(v, i);
        fine += 1;
    }
    assert!(fine > 150);

    nodes[1].spawn(&etcd);
    wait_until("n2 back", Duration::from_secs(15), || {
        nodes[0].cluster_info().contains("cluster_state:ok")
    });
    let v: i64 = nodes[1].conn().get(&owned_by_n2).unwrap();
    assert_eq!(format!("k{v}"), owned_by_n2, "n2 returns with its data");
}

#[test]
fn nodes_keep_serving_through_an_etcd_outage_and_reconnect() {
    let mut etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let nodes = start_cluster(&etcd, root.path());
    let client =
        redis::cluster::ClusterClient::new(nodes.iter().map(Node::url).collect::<Vec<_>>())
            .unwrap();
    let mut conn = client.get_connection().unwrap();
    let _: () = conn.set("before", "1").unwrap();

    etcd.kill();
    wait_until(
        "nodes to notice etcd is gone",
        Duration::from_secs(10),
        || nodes[0].cluster_info().contains("cluster_etcd_connected:0"),
    );
    // Reads and writes of owned slots go on with the last map.
    for i in 0..100 {
        let _: () = conn.set(format!("during{i}"), i).unwrap();
    }
    let v: String = conn.get("before").unwrap();
    assert_eq!(v, "1");
    // Map changes are refused with a clear error.
    let out = admin(&etcd, &["rebalance"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unreachable"), "{stderr}");

    etcd.restart();
    for node in &nodes {
        wait_until("reconnection", Duration::from_secs(20), || {
            node.cluster_info().contains("cluster_etcd_connected:1")
        });
    }
    assert_eq!(status(&etcd)["members"].as_array().unwrap().len(), 3);
    for i in 0..100 {
        let v: i64 = conn.get(format!("during{i}")).unwrap();
        assert_eq!(v, i);
    }
}
