//! Slot ranges moving between real `mantle serve --cluster` processes with their keys while
//! clients (the `redis` crate's cluster client) keep writing and reading them; then the same
//! with the source, and separately the target, killed with SIGKILL mid-migration. And proxy
//! mode, driven by plain `redis-cli` and `redis-benchmark` that know nothing of the cluster.

use cluster::testing::free_port;
use cluster::testing::Etcd;
use redis::Commands;
use serde_json::Value;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NAME: &str = "mig";

fn mantle() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mantle"))
}

struct Node {
    id: String,
    port: u16,
    dir: PathBuf,
    mode: &'static str,
    /// `--requirepass`, also used by the test's clients.
    password: Option<&'static str>,
    child: Option<Child>,
}

impl Node {
    fn start(id: &str, etcd: &Etcd, root: &Path, mode: &'static str) -> Node {
        Node::start_with(id, etcd, root, mode, None)
    }

    fn start_with(
        id: &str,
        etcd: &Etcd,
        root: &Path,
        mode: &'static str,
        password: Option<&'static str>,
    ) -> Node {
        let mut node = Node {
            id: id.to_string(),
            port: free_port(),
            dir: root.join(id),
            mode,
            password,
            child: None,
        };
        node.spawn(etcd);
        node
    }

    fn spawn(&mut self, etcd: &Etcd) {
        let log = std::fs::File::create(self.dir.with_extension("log")).unwrap();
        let child = mantle()
            .args(["serve", "--data-dir"])
            .arg(&self.dir)
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args(["--cluster", &etcd.address(), "--cluster-name", NAME])
            .args(["--node-id", &self.id, "--cluster-ttl", "2s"])
            .args(["--cluster-mode", self.mode])
            .args(self.password.iter().flat_map(|p| ["--requirepass", p]))
            .stdout(Stdio::null())
            .stderr(log)
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
        match self.password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap()
    }

    /// SIGKILL: no shutdown code runs.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn count_in(&self, start: u16, end: u16) -> i64 {
        let mut conn = self.conn();
        (start..=end)
            .map(|slot| {
                redis::cmd("CLUSTER")
                    .arg("COUNTKEYSINSLOT")
                    .arg(slot)
                    .query::<i64>(&mut conn)
                    .unwrap()
            })
            .sum()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

fn admin(etcd: &Etcd, args: &[&str]) -> Output {
    admin_command(etcd, args).output().unwrap()
}

fn admin_command(etcd: &Etcd, args: &[&str]) -> Command {
    let mut command = mantle();
    command
        .args(["cluster", "--etcd", &etcd.address(), "--name", NAME])
        .args(args);
    command
}

/// Runs an admin command that must end within `within` (a move that cannot finish would
/// otherwise hang the test).
fn admin_within(etcd: &Etcd, args: &[&str], within: Duration) -> Output {
    let mut child = admin_command(etcd, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "`mantle cluster {}` did not finish within {within:?}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
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
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every slot owned by exactly one node, no migration left.
fn assert_whole(etcd: &Etcd) {
    let st = status(etcd);
    assert_eq!(st["unassigned"], serde_json::json!([]), "{st}");
    let map = &st["slot_map"];
    assert_eq!(map["migrations"], serde_json::json!([]), "{st}");
    let mut owned = vec![0u8; 16384];
    for ranges in map["owners"].as_object().unwrap().values() {
        for r in ranges.as_array().unwrap() {
            for slot in r["start"].as_u64().unwrap()..=r["end"].as_u64().unwrap() {
                owned[slot as usize] += 1;
            }
        }
    }
    assert!(owned.iter().all(|&n| n == 1), "a slot owned twice or never");
}

/// Two nodes: n1 owns every slot, n2 none.
fn two_nodes(etcd: &Etcd, root: &Path) -> Vec<Node> {
    let n1 = Node::start("n1", etcd, root, "client");
    wait_until("n1 owns the slots", Duration::from_secs(10), || {
        status(etcd)["slot_map"]["owners"]["n1"].is_array()
    });
    let n2 = Node::start("n2", etcd, root, "client");
    wait_until("two members", Duration::from_secs(10), || {
        status(etcd)["members"].as_array().unwrap().len() == 2
    });
    vec![n1, n2]
}

/// Writes `count` keys of about `size` bytes straight to n1 (it owns them all), pipelined.
fn preload(node: &Node, count: usize, size: usize) {
    let mut conn = node.conn();
    let value = "x".repeat(size);
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.set(format!("pre:{i}"), format!("{i}:{value}"))
                .ignore();
        }
        let _: () = pipe.query(&mut conn).unwrap();
    }
}

/// Clients writing and reading while something happens to the cluster. Each writer sets its
/// keys to increasing values and reads each back at once (a stale read shows an older
/// value); only acknowledged writes are remembered.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<HashMap<String, u64>>>,
    stale: Arc<Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

impl Load {
    /// Writers through the cluster client, which follows `-MOVED` itself.
    fn start(urls: Vec<String>, writers: usize) -> Load {
        let client = redis::cluster::ClusterClientBuilder::new(urls)
            .connection_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        Load::start_with(writers, move |_| client.get_connection())
    }

    /// Writers each on a connection `connect(writer)` opens (again after a failure).
    fn start_with<C, F>(writers: usize, connect: F) -> Load
    where
        C: redis::ConnectionLike,
        F: Fn(usize) -> redis::RedisResult<C> + Send + Sync + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(HashMap::new()));
        let stale = Arc::new(Mutex::new(Vec::new()));
        let connect = Arc::new(connect);
        let threads = (0..writers)
            .map(|w| {
                let (stop, acked, stale, connect) =
                    (stop.clone(), acked.clone(), stale.clone(), connect.clone());
                std::thread::spawn(move || {
                    let mut conn = None;
                    let mut ops = 0u64;
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let key = format!("w{w}:{}", n % 400);
                        let c = match conn.as_mut() {
                            Some(c) => c,
                            None => match connect(w) {
                                Ok(c) => conn.insert(c),
                                Err(_) => {
                                    std::thread::sleep(Duration::from_millis(50));
                                    continue;
                                }
                            },
                        };
                        // redis 0.25's cluster client panics ("Connections is empty")
                        // when every node it knew dropped at once: treat it as a failure.
                        let set = catch_unwind(AssertUnwindSafe(|| c.set::<_, _, ()>(&key, n)));
                        if !matches!(set, Ok(Ok(()))) {
                            conn = None;
                            continue;
                        }
                        acked.lock().unwrap().insert(key.clone(), n);
                        ops += 1;
                        match catch_unwind(AssertUnwindSafe(|| c.get::<_, Option<u64>>(&key))) {
                            Ok(Ok(Some(v))) if v == n => ops += 1,
                            Ok(Ok(other)) => stale
                                .lock()
                                .unwrap()
                                .push(format!("{key}: wrote {n}, read {other:?}")),
                            _ => conn = None,
                        }
                    }
                    ops
                })
            })
            .collect();
        Load {
            stop,
            acked,
            stale,
            threads,
        }
    }

    /// Stops the clients; the acknowledged writes and the operations done.
    fn stop(self) -> (HashMap<String, u64>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let ops = self.threads.into_iter().map(|t| t.join().unwrap()).sum();
        let stale = self.stale.lock().unwrap();
        assert!(
            stale.is_empty(),
            "stale reads: {:?}",
            &stale[..stale.len().min(5)]
        );
        let acked = self.acked.lock().unwrap().clone();
        (acked, ops)
    }
}

/// Every acknowledged write and every preloaded key, read through the cluster client.
fn assert_all_readable(nodes: &[Node], acked: &HashMap<String, u64>, preloaded: usize) {
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let mut conn = redis::cluster::ClusterClient::new(urls)
        .unwrap()
        .get_connection()
        .unwrap();
    for (key, n) in acked {
        let v: Option<u64> = conn.get(key).unwrap();
        assert_eq!(v, Some(*n), "{key}: the acknowledged write is gone");
    }
    for i in 0..preloaded {
        let v: Option<String> = conn.get(format!("pre:{i}")).unwrap();
        let v = v.unwrap_or_else(|| panic!("pre:{i} lost"));
        assert!(v.starts_with(&format!("{i}:")), "pre:{i}");
    }
}

#[test]
fn a_range_moves_with_its_keys_while_clients_write_and_read_it() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let nodes = two_nodes(&etcd, root.path());
    preload(&nodes[0], 3000, 100);
    let before = nodes[0].count_in(0, 8191);
    assert!(before > 1000, "{before}");
    // GETKEYSINSLOT lists what COUNTKEYSINSLOT counts.
    let slot = slots::key_slot(b"pre:0");
    let mut c = nodes[0].conn();
    let n: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut c)
        .unwrap();
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(100)
        .query(&mut c)
        .unwrap();
    assert_eq!(keys.len() as i64, n);
    assert!(keys.contains(&"pre:0".to_string()));

    let load = Load::start(nodes.iter().map(Node::url).collect(), 3);
    std::thread::sleep(Duration::from_millis(300));
    let out = admin(&etcd, &["move", "0-8191", "--to", "n2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("moved slots 0-8191 from n1 to n2"), "{text}");
    std::thread::sleep(Duration::from_millis(300));
    let (acked, ops) = load.stop();
    assert!(ops > 100, "the clients kept working: {ops} operations");

    assert_whole(&etcd);
    // The keys live on n2 now, and n1 deleted its copy.
    assert!(nodes[1].count_in(0, 8191) >= before + count_acked_in(&acked, 0, 8191));
    assert_eq!(nodes[0].count_in(0, 8191), 0);
    assert_all_readable(&nodes, &acked, 3000);
    // n2 serves them to a plain client; n1 redirects it there.
    let key = (0..3000)
        .map(|i| format!("pre:{i}"))
        .find(|k| slots::key_slot(k.as_bytes()) <= 8191)
        .unwrap();
    let v: String = nodes[1].conn().get(&key).unwrap();
    assert!(v.starts_with(&key[4..]));
    let err = nodes[0].conn().get::<_, String>(&key).unwrap_err();
    assert_eq!(err.code(), Some("MOVED"), "{err}");

    // And back: the range returns to n1 with the writes made on n2.
    let out = admin(&etcd, &["move", "0-8191", "--to", "n1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_whole(&etcd);
    assert_eq!(nodes[1].count_in(0, 8191), 0);
    assert_all_readable(&nodes, &acked, 3000);
}

/// Proxy mode while a range moves away and back: plain clients of both nodes write and read
/// back keys of every slot, each node serving its own and forwarding the rest. Every table
/// swap of the move happens while requests are being routed and forwarded; one routed by a
/// table older than the move's end would run where the keys no longer live (an
/// acknowledged write lost, or an older value read back).
#[test]
fn a_range_moves_while_plain_clients_write_through_both_proxying_nodes() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let n1 = Node::start("n1", &etcd, root.path(), "proxy");
    wait_until("n1 owns the slots", Duration::from_secs(10), || {
        status(&etcd)["slot_map"]["owners"]["n1"].is_array()
    });
    let n2 = Node::start("n2", &etcd, root.path(), "proxy");
    wait_until("two members", Duration::from_secs(10), || {
        status(&etcd)["members"].as_array().unwrap().len() == 2
    });
    let nodes = [n1, n2];
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let load = Load::start_with(4, move |w| {
        redis::Client::open(urls[w % 2].as_str())?
            .get_connection_with_timeout(Duration::from_secs(5))
    });
    std::thread::sleep(Duration::from_millis(300));
    for to in ["n2", "n1"] {
        let out = admin(&etcd, &["move", "0-8191", "--to", to]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let (acked, ops) = load.stop();
    assert!(ops > 100, "the clients kept working: {ops} operations");
    assert_whole(&etcd);
    assert_eq!(nodes[1].count_in(0, 16383), 0, "n2 gave the range back");
    // Each acknowledged write reads back through either node, and from the owner's store.
    for node in &nodes {
        let mut conn = node.conn();
        for (key, n) in &acked {
            let v: Option<u64> = conn.get(key).unwrap();
            assert_eq!(v, Some(*n), "{key} through {}", node.id);
        }
    }
    let owned = nodes[0].count_in(0, 16383);
    assert!(owned >= acked.len() as i64, "{owned} keys on n1");
}

fn count_acked_in(acked: &HashMap<String, u64>, start: u16, end: u16) -> i64 {
    acked
        .keys()
        .filter(|k| (start..=end).contains(&slots::key_slot(k.as_bytes())))
        .count() as i64
}

/// Starts `move 0-16383 --to n2` and waits until the target holds part of the range, so a
/// kill lands mid-migration.
fn start_big_move(etcd: &Etcd, nodes: &[Node]) -> Child {
    let mover = admin_command(etcd, &["move", "0-16383", "--to", "n2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut probe = nodes[1].conn();
    wait_until("the copy to start", Duration::from_secs(30), || {
        redis::cmd("DBSIZE").query::<i64>(&mut probe).unwrap_or(0) > 2000
    });
    let st = status(etcd);
    assert_eq!(
        st["slot_map"]["migrations"].as_array().map(Vec::len),
        Some(1),
        "still migrating when killed: {st}"
    );
    mover
}

#[test]
fn killing_the_source_mid_migration_loses_no_acknowledged_write() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let mut nodes = two_nodes(&etcd, root.path());
    preload(&nodes[0], 40_000, 2000);
    let load = Load::start(nodes.iter().map(Node::url).collect(), 2);
    std::thread::sleep(Duration::from_millis(200));
    let mover = start_big_move(&etcd, &nodes);
    nodes[0].kill();
    std::thread::sleep(Duration::from_millis(300));
    // The source returns with its data and resumes the declared migration by itself.
    nodes[0].spawn(&etcd);
    let out = mover.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::thread::sleep(Duration::from_millis(300));
    let (acked, _) = load.stop();
    assert_whole(&etcd);
    assert_eq!(
        status(&etcd)["slot_map"]["owners"]["n2"],
        serde_json::json!([{"start": 0, "end": 16383}])
    );
    assert_all_readable(&nodes, &acked, 40_000);
    assert_eq!(nodes[0].count_in(0, 300), 0, "the source dropped its copy");
}

#[test]
fn killing_the_target_mid_migration_loses_no_acknowledged_write() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let mut nodes = two_nodes(&etcd, root.path());
    preload(&nodes[0], 40_000, 2000);
    let load = Load::start(nodes.iter().map(Node::url).collect(), 2);
    std::thread::sleep(Duration::from_millis(200));
    let mover = start_big_move(&etcd, &nodes);
    nodes[1].kill();
    // The target's lease lapses: the source aborts and keeps everything.
    let out = mover.wait_with_output().unwrap();
    assert!(
        !out.status.success(),
        "the move cannot succeed without its target"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("aborted"), "{err}");
    nodes[1].spawn(&etcd);
    assert_whole(&etcd);
    assert_eq!(
        status(&etcd)["slot_map"]["owners"]["n1"],
        serde_json::json!([{"start": 0, "end": 16383}])
    );
    let (acked, _) = load.stop();
    assert_all_readable(&nodes, &acked, 40_000);
    // Moving again works, over whatever the killed attempt left on n2.
    let out = admin(&etcd, &["move", "0-99", "--to", "n2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_whole(&etcd);
    assert_all_readable(&nodes, &acked, 40_000);
}

fn redis_tool(name: &str) -> Option<Command> {
    let found = Command::new(name)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipping: {name} not installed (apt-get install redis-tools)");
    }
    found.then(|| Command::new(name))
}

#[test]
fn proxy_mode_serves_plain_clients_from_any_node() {
    let (Some(_), Some(mut bench)) = (redis_tool("redis-cli"), redis_tool("redis-benchmark"))
    else {
        return;
    };
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let nodes: Vec<Node> = ["n1", "n2", "n3"]
        .iter()
        .map(|id| Node::start(id, &etcd, root.path(), "proxy"))
        .collect();
    wait_until("three members", Duration::from_secs(10), || {
        status(&etcd)["members"].as_array().unwrap().len() == 3
    });
    let out = admin(&etcd, &["rebalance"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("n1 to see three owners", Duration::from_secs(10), || {
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut nodes[0].conn())
            .unwrap();
        info.contains("cluster_size:3")
    });

    // redis-cli without -c: every key works through n1, wherever it lives.
    let port = nodes[0].port.to_string();
    for key in ["foo", "bar", "{user}.name", "x", "y", "a"] {
        let out = Command::new("redis-cli")
            .args(["-p", &port, "SET", key, &format!("v-{key}")])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "OK",
            "SET {key}"
        );
        let out = Command::new("redis-cli")
            .args(["-p", &port, "GET", key])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("v-{key}")
        );
    }
    // The keys really are spread: each owner holds its own.
    let sizes: Vec<i64> = nodes
        .iter()
        .map(|n| redis::cmd("DBSIZE").query(&mut n.conn()).unwrap())
        .collect();
    assert!(sizes.iter().filter(|&&s| s > 0).count() >= 2, "{sizes:?}");
    // Arrays relay too (MGET in one slot).
    let out = Command::new("redis-cli")
        .args(["-p", &port, "MGET", "{user}.name", "{user}.none"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "v-{user}.name\n\n");
    // A client's pipeline goes on to the owners as a pipeline and its replies come back in
    // the order asked, each key's write before its read, whichever node holds the key.
    let mut pipe = redis::pipe();
    for i in 0..300 {
        let key = format!("p{i}");
        pipe.cmd("SET").arg(&key).arg(format!("first-{i}")).ignore();
        pipe.cmd("GET").arg(&key);
        pipe.cmd("SET")
            .arg(&key)
            .arg(format!("second-{i}"))
            .ignore();
        pipe.cmd("GET").arg(&key);
        pipe.cmd("PING");
    }
    let got: Vec<String> = pipe.query(&mut nodes[0].conn()).unwrap();
    let want: Vec<String> = (0..300)
        .flat_map(|i| [format!("first-{i}"), format!("second-{i}"), "PONG".into()])
        .collect();
    assert_eq!(got, want);

    // Plain redis-benchmark against one node, pipelined, with random keys over all slots.
    let out = bench
        .args([
            "-p", &port, "-t", "set,get", "-n", "20000", "-r", "10000", "-P", "8", "-q",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(!text.to_lowercase().contains("error"), "{text}");
    assert!(text.contains("SET:") && text.contains("GET:"), "{text}");
    let sizes: Vec<i64> = nodes
        .iter()
        .map(|n| redis::cmd("DBSIZE").query(&mut n.conn()).unwrap())
        .collect();
    assert!(sizes.iter().all(|&s| s > 1000), "{sizes:?}");
}

/// The class of the bug where a move under heavy writing never finished: the copy (one store
/// write per key on the target) fell behind the writers, so the rounds of re-sending written
/// keys never shrank. Many cluster clients plus pipelined redis-benchmark writers (when
/// installed) write to the moving range the whole time; the move must end, and every
/// acknowledged write be readable on the new owner.
#[test]
fn a_move_under_sustained_writes_finishes_and_keeps_every_acknowledged_write() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let nodes = two_nodes(&etcd, root.path());
    preload(&nodes[0], 20_000, 100);
    // redis-benchmark --cluster wants every master to own a slot.
    let out = admin(&etcd, &["move", "16383", "--to", "n2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bench = redis_tool("redis-benchmark").map(|mut bench| {
        bench
            .args(["--cluster", "-p", &nodes[0].port.to_string()])
            .args(["-c", "40", "-P", "16", "-n", "100000000", "-r", "200000"])
            .args(["-d", "100", "-t", "set", "-q"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    });
    struct KillOnDrop(Option<Child>);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            if let Some(c) = self.0.as_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let mut bench = KillOnDrop(bench);
    let load = Load::start(nodes.iter().map(Node::url).collect(), 12);
    std::thread::sleep(Duration::from_secs(2));
    let out = admin_within(
        &etcd,
        &["move", "0-8191", "--to", "n2"],
        Duration::from_secs(180),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::thread::sleep(Duration::from_millis(500));
    drop(bench.0.take().map(|mut c| {
        let _ = c.kill();
        c.wait()
    }));
    let (acked, ops) = load.stop();
    assert!(ops > 100, "the clients kept working: {ops} operations");
    assert_whole(&etcd);
    // The source deletes its copy after the flip (the move returns at the flip).
    wait_until("n1 to delete its copy", Duration::from_secs(60), || {
        nodes[0].count_in(0, 8191) == 0
    });
    assert_all_readable(&nodes, &acked, 20_000);
}

/// With --requirepass, the nodes' own connections (the migration's link, the proxy's pool)
/// log in: a move completes and a proxied request reaches the owner.
#[test]
fn a_cluster_with_a_password_migrates_and_proxies() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let pw = Some("s3cret");
    let n1 = Node::start_with("n1", &etcd, root.path(), "proxy", pw);
    wait_until("n1 owns the slots", Duration::from_secs(10), || {
        status(&etcd)["slot_map"]["owners"]["n1"].is_array()
    });
    let n2 = Node::start_with("n2", &etcd, root.path(), "proxy", pw);
    wait_until("two members", Duration::from_secs(10), || {
        status(&etcd)["members"].as_array().unwrap().len() == 2
    });
    // Without the password a client is refused, as on a single node.
    let refused = redis::Client::open(format!("redis://127.0.0.1:{}", n1.port))
        .unwrap()
        .get_connection()
        .and_then(|mut c| c.set::<_, _, ()>("k", "v"));
    assert!(refused.is_err(), "a client without the password was served");

    preload(&n1, 2000, 10);
    let out = admin_within(
        &etcd,
        &["move", "0-8191", "--to", "n2"],
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_whole(&etcd);
    let moved: Vec<String> = (0..2000)
        .map(|i| format!("pre:{i}"))
        .filter(|k| slots::key_slot(k.as_bytes()) <= 8191)
        .collect();
    assert!(!moved.is_empty());
    assert!(n2.count_in(0, 8191) >= moved.len() as i64);
    // n1 no longer owns them: it forwards, logged in, to n2.
    wait_until("n1 to see the new owner", Duration::from_secs(10), || {
        !status(&etcd)["slot_map"]["owners"]["n2"].is_null()
    });
    let mut c = n1.conn();
    for key in moved.iter().take(50) {
        let v: String = c.get(key).unwrap();
        assert!(v.starts_with(&key[4..]), "{key}: {v}");
    }
    c.set::<_, _, ()>(&moved[0], "new").unwrap();
    let v: String = n2.conn().get(&moved[0]).unwrap();
    assert_eq!(v, "new");
}
