//! Function libraries on a cluster of real `mantle serve --cluster` processes on a private
//! etcd: a library loaded (or replaced, rolled back) on one node is what every node runs as
//! soon as the client has the reply — no waiting — including a node started after the load
//! and the target of a slot migration right after `mantle cluster move` (and MULTI/EXEC routed
//! as their keys are: MOVED when queued, CROSSSLOT at EXEC); with etcd away
//! calls are refused rather than served from a copy that may be stale, and once etcd and a
//! restarted node are back every node runs the newest version.

use cluster::testing::free_port;
use cluster::testing::Etcd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NAME: &str = "fns";

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
        let log = std::fs::File::create(self.dir.with_extension("log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_mantle"))
            .args(["serve", "--data-dir"])
            .arg(&self.dir)
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args(["--cluster", &etcd.address(), "--cluster-name", NAME])
            .args(["--node-id", &self.id, "--cluster-ttl", "2s"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("mantle serve starts");
        self.child = Some(child);
        wait_until(
            &format!("{} to listen", self.id),
            Duration::from_secs(20),
            || {
                redis::Client::open(self.url())
                    .and_then(|c| c.get_connection())
                    .is_ok()
            },
        );
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
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

    fn load(&self, code: &str) -> redis::RedisResult<String> {
        redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(code)
            .query(&mut self.conn())
    }

    /// What `version` (a keyless function) returns here.
    fn version(&self) -> redis::RedisResult<i64> {
        redis::cmd("FCALL")
            .arg("version")
            .arg(0)
            .query(&mut self.conn())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

fn wait_until(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn library(version: u32) -> String {
    format!(
        "#!lua name=shared
redis.register_function('version', function() return {version} end)
redis.register_function('put', function(keys, args) return redis.call('SET', keys[1], args[1]) end)
redis.register_function{{function_name='fetch', callback=function(keys) return redis.call('GET', keys[1]) end, flags={{'no-writes'}}}}"
    )
}

fn start(etcd: &Etcd, root: &Path, ids: &[&str]) -> Vec<Node> {
    ids.iter().map(|id| Node::start(id, etcd, root)).collect()
}

/// Every node answers with `version` at once: no node serves an older one after the reply.
fn all_run_now(nodes: &[Node], version: i64) {
    for node in nodes {
        assert_eq!(
            node.version().unwrap(),
            version,
            "{} runs another version right after the reply",
            node.id
        );
    }
}

#[test]
fn a_load_replace_or_rollback_on_one_node_runs_on_every_node_at_once() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let nodes = start(&etcd, root.path(), &["n1", "n2", "n3"]);
    assert_eq!(nodes[0].load(&library(1)).unwrap(), "shared");
    all_run_now(&nodes, 1);
    for (i, version) in (2..=6).enumerate() {
        nodes[i % 3].load(&library(version)).unwrap();
        all_run_now(&nodes, i64::from(version));
    }
    let active: i64 = redis::cmd("FUNCTION")
        .arg("ROLLBACK")
        .arg("shared")
        .query(&mut nodes[2].conn())
        .unwrap();
    assert_eq!(active, 5);
    all_run_now(&nodes, 5);
    // Every node lists the same version.
    for node in &nodes {
        let listed: redis::Value = redis::cmd("FUNCTION")
            .arg("LIST")
            .query(&mut node.conn())
            .unwrap();
        assert!(format!("{listed:?}").contains("int(5)"), "{listed:?}");
    }
    // A node that joins after the load runs it too.
    let late = Node::start("n4", &etcd, root.path());
    all_run_now(std::slice::from_ref(&late), 5);
    let _: () = redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg("shared")
        .query(&mut late.conn())
        .unwrap();
    for node in &nodes {
        let error = node.version().unwrap_err();
        assert!(error.to_string().contains("Function not found"), "{error}");
    }
}

#[test]
fn fcall_works_on_the_target_right_after_its_slot_moves() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let n1 = Node::start("n1", &etcd, root.path());
    wait_until("n1 to own the slots", Duration::from_secs(10), || {
        n1.load(&library(1)).is_ok()
    });
    let n2 = Node::start("n2", &etcd, root.path());
    let key = "object";
    let slot = slots::key_slot(key.as_bytes());
    let put: redis::Value = redis::cmd("FCALL")
        .arg("put")
        .arg(1)
        .arg(key)
        .arg("before")
        .query(&mut n1.conn())
        .unwrap();
    assert_eq!(put, redis::Value::Okay);
    // The same library version everywhere, then the slot moves to n2.
    n2.load(&library(2)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mantle"))
        .args(["cluster", "--etcd", &etcd.address(), "--name", NAME])
        .args(["move", &format!("{slot}-{slot}"), "--to", "n2"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fetched: String = redis::cmd("FCALL_RO")
        .arg("fetch")
        .arg(1)
        .arg(key)
        .query(&mut n2.conn())
        .unwrap();
    assert_eq!(fetched, "before", "the target serves the moved key at once");
    assert_eq!(n2.version().unwrap(), 2);
    let error = redis::cmd("FCALL")
        .arg("fetch")
        .arg(1)
        .arg(key)
        .query::<String>(&mut n1.conn())
        .unwrap_err();
    assert!(
        error.to_string().contains("MOVED") || format!("{error:?}").contains("Moved"),
        "{error:?}"
    );
    // Keys of one call share a slot.
    let error = redis::cmd("FCALL")
        .arg("fetch")
        .arg(2)
        .arg("a")
        .arg("b")
        .query::<String>(&mut n2.conn())
        .unwrap_err();
    assert!(
        format!("{error:?}").contains("CROSSSLOT") || format!("{error:?}").contains("CrossSlot"),
        "{error:?}"
    );
    transactions_route_as_their_keys_do(&n1, key);
}

/// MULTI/EXEC on a cluster: a queued command (a function call too) whose key another node
/// owns is refused with MOVED when queued and EXEC aborts; keys of two slots in one
/// transaction answer CROSSSLOT at EXEC; a function queued with a key this node owns runs
/// inside EXEC. `moved` is a key whose slot `n1` no longer owns.
fn transactions_route_as_their_keys_do(n1: &Node, moved: &str) {
    let (a, b) = ("a", "b");
    assert_ne!(slots::key_slot(a.as_bytes()), slots::key_slot(b.as_bytes()));
    assert_ne!(
        slots::key_slot(a.as_bytes()),
        slots::key_slot(moved.as_bytes())
    );
    let code = |e: redis::RedisError| e.code().unwrap_or("").to_string();
    let mut con = n1.conn();
    for queued in [
        redis::cmd("SET").arg(moved).arg("x").clone(),
        redis::cmd("FCALL")
            .arg("put")
            .arg(1)
            .arg(moved)
            .arg("x")
            .clone(),
    ] {
        let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
        let refused = queued.query::<()>(&mut con).unwrap_err();
        assert_eq!(code(refused), "MOVED");
        let aborted = redis::cmd("EXEC").query::<()>(&mut con).unwrap_err();
        assert_eq!(code(aborted), "EXECABORT");
    }
    let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
    for key in [a, b] {
        let queued: String = redis::cmd("SET").arg(key).arg("1").query(&mut con).unwrap();
        assert_eq!(queued, "QUEUED");
    }
    let crossslot = redis::cmd("EXEC").query::<()>(&mut con).unwrap_err();
    assert_eq!(code(crossslot), "CROSSSLOT");
    let (put, got): (String, String) = redis::pipe()
        .atomic()
        .cmd("FCALL")
        .arg("put")
        .arg(1)
        .arg(a)
        .arg("in-exec")
        .get(a)
        .query(&mut con)
        .unwrap();
    assert_eq!((put.as_str(), got.as_str()), ("OK", "in-exec"));
}

#[test]
fn with_etcd_away_calls_are_refused_and_propagation_resumes_after_etcd_and_node_restarts() {
    let mut etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let mut nodes = start(&etcd, root.path(), &["n1", "n2", "n3"]);
    nodes[0].load(&library(1)).unwrap();
    all_run_now(&nodes, 1);

    etcd.kill();
    let error = nodes[1].version().unwrap_err();
    assert!(
        error.to_string().contains("CLUSTERDOWN") || format!("{error:?}").contains("ClusterDown"),
        "{error:?}"
    );
    assert!(nodes[1].load(&library(2)).is_err());
    let _: () = redis::cmd("PING").query(&mut nodes[1].conn()).unwrap();

    etcd.restart();
    wait_until("a load to work again", Duration::from_secs(30), || {
        nodes[1].load(&library(2)).is_ok()
    });
    all_run_now(&nodes, 2);

    // A node restarted after a newer load runs the newest version.
    nodes[2].kill();
    nodes[0].load(&library(3)).unwrap();
    let etcd_ref = &etcd;
    nodes[2].spawn(etcd_ref);
    all_run_now(&nodes, 3);
}
