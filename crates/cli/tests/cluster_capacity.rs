//! A cluster's nodes (real `mantle serve --cluster` processes on a private etcd) keep their
//! configured capacity as the baseline: a rollback to "no management" on one node gives every
//! node back its own `--max-keys`, and a node's `CONFIG SET max-keys` is kept in etcd (per
//! node) and survives its restart.

use cluster::testing::{free_port, Etcd};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NAME: &str = "cap";

struct Node {
    port: u16,
    child: Child,
}

impl Node {
    fn start(id: &str, etcd: &Etcd, root: &Path, max_keys: u64) -> Node {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_mantle"))
            .args(["serve", "--data-dir"])
            .arg(root.join(id))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--cluster", &etcd.address(), "--cluster-name", NAME])
            .args(["--node-id", id, "--cluster-ttl", "2s", "--tick", "100ms"])
            .args(["--max-keys", &max_keys.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mantle serve starts");
        let node = Node { port, child };
        wait_until(&format!("{id} listens"), || node.try_con().is_some());
        node
    }

    fn try_con(&self) -> Option<redis::Connection> {
        redis::Client::open(format!("redis://127.0.0.1:{}", self.port))
            .and_then(|c| c.get_connection())
            .ok()
    }

    fn con(&self) -> redis::Connection {
        self.try_con().expect("node answers")
    }

    fn max_keys(&self) -> String {
        let pair: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("max-keys")
            .query(&mut self.con())
            .unwrap();
        pair[1].clone()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn rollback_restores_each_nodes_capacity_and_config_set_survives_a_restart() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let n1 = Node::start("n1", &etcd, root.path(), 5000);
    let n2 = Node::start("n2", &etcd, root.path(), 3000);

    let _: i64 = redis::cmd("POLICY")
        .arg("LOAD")
        .arg("sizing")
        .arg("function howmuch() return {capacity = 246} end")
        .query(&mut n1.con())
        .unwrap();
    wait_until("both nodes run the sizing policy", || {
        n1.max_keys() == "246" && n2.max_keys() == "246"
    });
    let back: String = redis::cmd("POLICY")
        .arg("ROLLBACK")
        .query(&mut n1.con())
        .unwrap();
    assert_eq!(back, "no management");
    wait_until("each node has its configured capacity back", || {
        n1.max_keys() == "5000" && n2.max_keys() == "3000"
    });

    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("max-keys")
        .arg(7000)
        .query(&mut n2.con())
        .unwrap();
    assert!(
        etcd.keys("/mantle/")
            .iter()
            .any(|k| k.ends_with("config/n2/capacity")),
        "{:?}",
        etcd.keys("/mantle/")
    );
    drop(n2);
    let n2 = Node::start("n2", &etcd, root.path(), 3000);
    assert_eq!(n2.max_keys(), "7000");
    assert_eq!(n1.max_keys(), "5000");
}
