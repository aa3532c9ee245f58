//! redis-py's `RedisCluster` against three real `mantle serve --cluster` nodes on a private
//! etcd: it discovers the cluster from one seed (`CLUSTER SLOTS`, `COMMAND`), routes keys to
//! their owners and splits multi-slot reads.
//!
//! Also redis-py's transactions against one plain node (`redis_py_transactions.py`): the
//! default `pipeline()`, `pipeline(transaction=False)`, `Redis.transaction()` with WATCH.
//!
//! redis-py is installed with pip into a venv under the target directory the first time
//! (`MANTLE_PYTHON` names a Python that already has it). Without Python the test is skipped
//! with a message.

use cluster::testing::free_port;
use cluster::testing::Etcd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NAME: &str = "py";

struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(id: &str, etcd: &Etcd, root: &Path) -> (Node, u16) {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_mantle"))
        .args(["serve", "--data-dir"])
        .arg(root.join(id))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--cluster", &etcd.address(), "--cluster-name", NAME])
        .args(["--node-id", id, "--cluster-ttl", "2s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mantle serve starts");
    let node = Node(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{id} never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    (node, port)
}

fn admin(etcd: &Etcd, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mantle"))
        .args(["cluster", "--etcd", &etcd.address(), "--name", NAME])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mantle cluster {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A Python with redis-py, or `None` (and a message) when there is no Python at all.
fn python_with_redis() -> Option<PathBuf> {
    if let Some(python) = std::env::var_os("MANTLE_PYTHON") {
        return Some(PathBuf::from(python));
    }
    let has_python = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_python {
        eprintln!("SKIPPED: python3 not found; the redis-py cluster test needs it");
        return None;
    }
    let target = Path::new(env!("CARGO_BIN_EXE_mantle"))
        .ancestors()
        .nth(2)
        .expect("the binary is under the target dir")
        .to_path_buf();
    let venv = target.join("redis-py-venv");
    let python = venv.join("bin").join("python");
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", "import redis.cluster"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    // The tests of this file run in parallel threads: one of them makes the venv while the
    // others wait, instead of two `venv` runs racing in one directory.
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    if !ready(&python) {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(made.success(), "python3 -m venv {} failed", venv.display());
        let pip = Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "redis>=5"])
            .status()
            .unwrap();
        assert!(
            pip.success(),
            "pip install redis into {} failed",
            venv.display()
        );
    }
    Some(python)
}

fn run_python(python: &Path, ports: &[u16]) {
    run_script(python, "redis_py_cluster.py", ports)
}

fn run_script(python: &Path, name: &str, ports: &[u16]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(name);
    let mut child = Command::new(python)
        .arg(&script)
        .args(ports.iter().map(u16::to_string))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("redis-py script still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("ok"),
        "redis-py: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn redis_py_cluster_client_reads_and_writes_through_every_node() {
    let Some(python) = python_with_redis() else {
        return;
    };
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let nodes: Vec<(Node, u16)> = ["n1", "n2", "n3"]
        .iter()
        .map(|id| start(id, &etcd, root.path()))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while admin(&etcd, &["status"]).matches(" at 127.0.0.1:").count() < 3 {
        assert!(Instant::now() < deadline, "three members never joined");
        std::thread::sleep(Duration::from_millis(100));
    }
    admin(&etcd, &["rebalance"]);
    let ports: Vec<u16> = nodes.iter().map(|(_, p)| *p).collect();
    // Every node must serve the new map before the client asks for it.
    for port in &ports {
        let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_connection()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn).unwrap();
            if info.contains("cluster_size:3") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{port} never saw the map: {info}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    run_python(&python, &ports);
}

#[test]
fn redis_py_pipelines_and_watch_transactions_on_one_node() {
    let Some(python) = python_with_redis() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_mantle"))
        .args(["serve", "--data-dir"])
        .arg(root.path().join("data"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mantle serve starts");
    let _node = Node(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the server never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    run_script(&python, "redis_py_transactions.py", &[port]);
}
