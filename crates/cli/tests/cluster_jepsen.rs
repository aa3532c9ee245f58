//! A Jepsen-style check of the cluster under faults (issue 25, items 13–15): clients record
//! every write the cluster acknowledged and every read it answered, with when each began and
//! ended, while a node is stopped and resumed (a zombie), etcd stalls, or slots move under a
//! proxy-mode cluster. A [`History`] then fails the test on a lost acknowledged write or a
//! stale read: a read that returns a value older than one whose write was acknowledged
//! before the read began. Each key is written by one client at a time with increasing
//! values, so "older" is a comparison of numbers; a write whose answer was an error (or
//! none) may or may not have happened, and reading its value is allowed.
//!
//! Each test starts its own etcd and nodes on loopback (random ports, temp dirs) and runs
//! for well under a minute.

mod common;

use cluster::testing::{free_port, Etcd};
use common::nodes::{admin, keys_in, node_flags, owned, serve, signal, wait_until, Proc};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A minimal RESP client over one socket, so a test controls exactly what is queued on an
/// open connection and sees every reply as it came.
struct Raw {
    out: TcpStream,
    input: BufReader<TcpStream>,
}

/// A reply, as much of it as the checks need.
#[derive(Debug, Clone, PartialEq)]
enum Reply {
    Ok,
    Value(Option<u64>),
    Error(String),
    Other(String),
}

impl Raw {
    fn connect(port: u16) -> std::io::Result<Raw> {
        let out = TcpStream::connect(("127.0.0.1", port))?;
        out.set_read_timeout(Some(Duration::from_secs(15)))?;
        let input = BufReader::new(out.try_clone()?);
        Ok(Raw { out, input })
    }

    fn send(&mut self, args: &[&str]) -> std::io::Result<()> {
        let mut buf = format!("*{}\r\n", args.len());
        for a in args {
            buf.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.out.write_all(buf.as_bytes())
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut line = String::new();
        if self.input.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line.trim_end().to_string())
    }

    fn reply(&mut self) -> std::io::Result<Reply> {
        let line = self.line()?;
        Ok(match line.as_bytes().first() {
            Some(b'+') if line == "+OK" => Reply::Ok,
            Some(b'-') => Reply::Error(line[1..].to_string()),
            Some(b'$') if line == "$-1" => Reply::Value(None),
            Some(b'$') => {
                let value = self.line()?;
                Reply::Value(Some(value.parse().unwrap_or(0)))
            }
            Some(b'*') => {
                // CLUSTER SLOTS: skip the nested array (only counted, never read here).
                Reply::Other(line)
            }
            _ => Reply::Other(line),
        })
    }

    fn call(&mut self, args: &[&str]) -> std::io::Result<Reply> {
        self.send(args)?;
        self.reply()
    }
}

/// What one client saw: a write of `value` or a read returning `value`.
#[derive(Debug, Clone)]
struct Op {
    key: String,
    write: bool,
    value: Option<u64>,
    /// Whether the cluster acknowledged the write / answered the read with a value.
    ok: bool,
    start: Instant,
    end: Instant,
    node: u16,
}

#[derive(Default, Clone)]
struct History(Arc<Mutex<Vec<Op>>>);

impl History {
    fn record(&self, op: Op) {
        self.0.lock().unwrap().push(op);
    }

    /// Every anomaly: stale reads and lost acknowledged writes (the final reads, started
    /// after every write ended, are reads like any other).
    fn anomalies(&self) -> Vec<String> {
        let ops = self.0.lock().unwrap().clone();
        let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
        for op in &ops {
            by_key.entry(&op.key).or_default().push(op);
        }
        let mut found = Vec::new();
        for (key, ops) in by_key {
            for read in ops.iter().filter(|o| !o.write && o.ok) {
                let newest_acked = ops
                    .iter()
                    .filter(|w| w.write && w.ok && w.end < read.start)
                    .max_by_key(|w| w.value);
                if let Some(w) = newest_acked {
                    if read.value.unwrap_or(0) < w.value.unwrap_or(0) {
                        found.push(format!(
                            "{key}: read {:?} at node :{} although {:?} was acknowledged by :{} {:?} before the read began",
                            read.value,
                            read.node,
                            w.value,
                            w.node,
                            read.start.duration_since(w.end)
                        ));
                    }
                }
            }
        }
        found
    }

    fn acked_writes(&self) -> usize {
        let ops = self.0.lock().unwrap();
        ops.iter().filter(|o| o.write && o.ok).count()
    }
}

/// A cluster-aware client of the test's own: it follows `-MOVED` (re-reading nothing: the
/// redirection names the owner), treats every other error and a timeout as "unknown", and
/// records what it saw.
struct Client {
    conns: BTreeMap<u16, Raw>,
    /// Where each slot was last sent (learnt from `-MOVED`).
    routes: BTreeMap<u16, u16>,
    seeds: Vec<u16>,
    history: History,
}

impl Client {
    fn new(seeds: &[u16], history: &History) -> Client {
        Client {
            conns: BTreeMap::new(),
            routes: BTreeMap::new(),
            seeds: seeds.to_vec(),
            history: history.clone(),
        }
    }

    fn call_at(&mut self, port: u16, args: &[&str]) -> std::io::Result<Reply> {
        let raw = match self.conns.entry(port) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let raw = Raw::connect(port)?;
                raw.out.set_read_timeout(Some(Duration::from_secs(4)))?;
                e.insert(raw)
            }
        };
        let result = raw.call(args);
        if result.is_err() {
            self.conns.remove(&port);
        }
        result
    }

    /// Runs `args` on the key's owner, following up to 5 redirections; `None` when the
    /// outcome is unknown.
    fn run(&mut self, key: &str, args: &[&str]) -> (Option<Reply>, u16) {
        let slot = slots::key_slot(key.as_bytes());
        let mut port = *self.routes.get(&slot).unwrap_or(&self.seeds[0]);
        for _ in 0..5 {
            match self.call_at(port, args) {
                Ok(Reply::Error(e)) if e.starts_with("MOVED ") => {
                    let addr = e.rsplit(' ').next().unwrap_or_default();
                    port = addr.rsplit(':').next().unwrap().parse().unwrap();
                    self.routes.insert(slot, port);
                }
                Ok(Reply::Error(_)) | Err(_) => return (None, port),
                Ok(reply) => return (Some(reply), port),
            }
        }
        (None, port)
    }

    fn set(&mut self, key: &str, value: u64) -> bool {
        let start = Instant::now();
        let v = value.to_string();
        let (reply, node) = self.run(key, &["SET", key, &v]);
        let ok = reply == Some(Reply::Ok);
        self.history.record(Op {
            key: key.to_string(),
            write: true,
            value: Some(value),
            ok,
            start,
            end: Instant::now(),
            node,
        });
        ok
    }

    fn get(&mut self, key: &str) -> Option<Option<u64>> {
        let start = Instant::now();
        let (reply, node) = self.run(key, &["GET", key]);
        let value = match reply {
            Some(Reply::Value(v)) => Some(v),
            _ => None,
        };
        self.history.record(Op {
            key: key.to_string(),
            write: false,
            value: value.flatten(),
            ok: value.is_some(),
            start,
            end: Instant::now(),
            node,
        });
        value
    }
}

struct Cluster {
    etcd: Etcd,
    name: &'static str,
    root: tempfile::TempDir,
    _upstream: Option<Proc>,
    nodes: Vec<(Proc, u16)>,
}

impl Cluster {
    /// Three nodes: a cache tier in front of one upstream (`upstream`), or nodes with
    /// their own data in proxy mode.
    fn start(name: &'static str, upstream: bool) -> Cluster {
        let etcd = Etcd::start();
        let root = tempfile::tempdir().unwrap();
        let upstream_proc = upstream.then(|| {
            let port = free_port();
            let data = root.path().join("upstream");
            (
                serve(
                    &["--data-dir", data.to_str().unwrap()],
                    port,
                    &root.path().join("upstream.log"),
                ),
                port,
            )
        });
        let mut nodes = Vec::new();
        for id in ["n1", "n2", "n3"] {
            let port = free_port();
            let mut args = node_flags(&etcd, name, id);
            match &upstream_proc {
                Some((_, up)) => {
                    args.extend(["--upstream".into(), format!("redis://127.0.0.1:{up}")])
                }
                None => {
                    let data = root.path().join(id);
                    args.extend([
                        "--data-dir".into(),
                        data.to_str().unwrap().into(),
                        "--cluster-mode".into(),
                        "proxy".into(),
                    ]);
                }
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let log = root.path().join(format!("{id}.log"));
            nodes.push((serve(&args, port, &log), port));
        }
        let cluster = Cluster {
            etcd,
            name,
            root,
            _upstream: upstream_proc.map(|(p, _)| p),
            nodes,
        };
        let first = cluster.nodes[0].1;
        wait_until("three members", Duration::from_secs(20), || {
            cluster.info(first).contains("cluster_known_nodes:3")
        });
        cluster.admin(&["rebalance"]).expect("rebalance");
        for (_, port) in &cluster.nodes {
            wait_until("the balanced map", Duration::from_secs(20), || {
                cluster.info(*port).contains("cluster_size:3")
            });
        }
        cluster
    }

    fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|(_, p)| *p).collect()
    }

    fn info(&self, port: u16) -> String {
        Raw::connect(port)
            .and_then(|mut r| {
                r.send(&["CLUSTER", "INFO"])?;
                let head = r.line()?;
                let len: usize = head.trim_start_matches(['$', '=']).parse().unwrap_or(0);
                let mut body = vec![0; len + 2];
                std::io::Read::read_exact(&mut r.input, &mut body)?;
                Ok(String::from_utf8_lossy(&body).into_owned())
            })
            .unwrap_or_default()
    }

    fn admin(&self, args: &[&str]) -> Result<String, String> {
        let out = admin(&self.etcd, self.name, args);
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    fn status(&self) -> serde_json::Value {
        let out = self.admin(&["status", "--json"]).expect("cluster status");
        serde_json::from_str(&out).unwrap()
    }

    /// Ranges `id` owns.
    fn owned(&self, id: &str) -> Vec<(u16, u16)> {
        owned(&self.etcd, self.name, id)
    }

    fn log(&self, id: &str) -> String {
        std::fs::read_to_string(self.root.path().join(format!("{id}.log"))).unwrap_or_default()
    }
}

fn assert_clean(history: &History) {
    let anomalies = history.anomalies();
    assert!(
        anomalies.is_empty(),
        "{} anomalies in {} acknowledged writes:\n{}",
        anomalies.len(),
        history.acked_writes(),
        anomalies[..anomalies.len().min(20)].join("\n")
    );
}

/// A cache-tier node stopped past its lease (SIGSTOP) while the others take its slots and
/// its keys are rewritten there; requests queued on a connection opened to it before are
/// answered when it resumes. It must neither acknowledge those writes nor answer the reads
/// with what it cached: the new owners would serve their older values (a lost write), and
/// the reads would be stale.
#[test]
fn a_stopped_cache_tier_node_acknowledges_nothing_when_it_resumes() {
    let cluster = Cluster::start("zombie", true);
    let ports = cluster.ports();
    let history = History::default();
    let keys = keys_in(&cluster.owned("n1"), 20);
    let mut client = Client::new(&ports, &history);
    for k in &keys {
        assert!(client.set(k, 1), "SET {k} 1 before any fault");
        assert_eq!(client.get(k), Some(Some(1)), "{k} is cached on n1");
    }
    // Opened before the stop; the requests are queued on it while n1 is stopped.
    let mut zombie = Raw::connect(ports[0]).unwrap();
    signal(cluster.nodes[0].0 .0.id(), "-STOP");
    let survivors = [ports[1], ports[2]];
    wait_until(
        "the survivors to take n1's slots",
        Duration::from_secs(30),
        || {
            survivors
                .iter()
                .all(|p| cluster.info(*p).contains("cluster_size:2"))
        },
    );
    let mut client = Client::new(&survivors, &history);
    for k in &keys {
        assert!(client.set(k, 2), "SET {k} 2 through the new owner");
    }
    let queued = Instant::now();
    for k in &keys {
        zombie.send(&["GET", k]).unwrap();
        zombie.send(&["SET", k, "3"]).unwrap();
    }
    signal(cluster.nodes[0].0 .0.id(), "-CONT");
    let mut answered = Vec::new();
    for k in &keys {
        let read = zombie.reply().expect("n1 answers the queued GET");
        let end = Instant::now();
        history.record(Op {
            key: k.clone(),
            write: false,
            value: match &read {
                Reply::Value(v) => *v,
                _ => None,
            },
            ok: matches!(read, Reply::Value(_)),
            start: queued,
            end,
            node: ports[0],
        });
        let write = zombie.reply().expect("n1 answers the queued SET");
        history.record(Op {
            key: k.clone(),
            write: true,
            value: Some(3),
            ok: write == Reply::Ok,
            start: queued,
            end: Instant::now(),
            node: ports[0],
        });
        answered.push(format!("{read:?} {write:?}"));
    }
    // Once n1 is back, reads (through whoever owns each key now) must not go back in time.
    wait_until("n1 to rejoin", Duration::from_secs(30), || {
        cluster.info(ports[1]).contains("cluster_known_nodes:3")
    });
    let mut client = Client::new(&ports, &history);
    for k in &keys {
        let mut tries = 0;
        while client.get(k).is_none() {
            tries += 1;
            assert!(tries < 50, "no read of {k} succeeded");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let acked_by_zombie = answered.iter().filter(|a| a.ends_with(" Ok")).count();
    assert_eq!(
        acked_by_zombie,
        0,
        "n1 acknowledged writes to slots it no longer owned: {answered:?}\nn1's log:\n{}",
        cluster.log("n1")
    );
    assert_clean(&history);
}

/// etcd stalls (SIGSTOP) for longer than every node's lease, then resumes: all leases lapse
/// at once, but no node failed, so none of them must lose its slots (and with them its
/// cache) to the first one back; clients writing and reading throughout see no anomaly.
#[test]
fn an_etcd_stall_reassigns_no_slots_and_loses_nothing() {
    let cluster = Cluster::start("stall", true);
    let ports = cluster.ports();
    let before = cluster.status()["slot_map"].clone();
    let history = History::default();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let history = history.clone();
            let stop = Arc::clone(&stop);
            let ports = ports.clone();
            std::thread::spawn(move || {
                let mut client = Client::new(&ports[w..w + 1], &history);
                let keys: Vec<String> = (0..30).map(|i| format!("w{w}:{i}")).collect();
                let mut next = 1;
                while !stop.load(Ordering::Relaxed) {
                    for k in &keys {
                        client.set(k, next);
                        client.get(k);
                    }
                    next += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let pid = cluster.etcd.pid().expect("etcd runs");
    signal(pid, "-STOP");
    std::thread::sleep(Duration::from_secs(8));
    signal(pid, "-CONT");
    // Past the failover's grace after etcd is back: a reassignment would have happened.
    std::thread::sleep(Duration::from_secs(10));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let after = cluster.status();
    assert_eq!(
        after["slot_map"]["owners"],
        before["owners"],
        "the slot map changed after an etcd stall; n1's log:\n{}",
        cluster.log("n1")
    );
    assert_eq!(after["members"].as_array().map(Vec::len), Some(3));
    for (id, port) in ["n1", "n2", "n3"].iter().zip(&ports) {
        wait_until("every node to serve again", Duration::from_secs(20), || {
            cluster.info(*port).contains("cluster_state:ok")
        });
        assert!(
            !cluster.log(id).contains("reassigned"),
            "{id} logged a reassignment:\n{}",
            cluster.log(id)
        );
    }
    // Every key read once more, after everything ended.
    let mut client = Client::new(&ports, &history);
    for w in 0..3 {
        for i in 0..30 {
            client.get(&format!("w{w}:{i}"));
        }
    }
    assert!(history.acked_writes() > 100, "{}", history.acked_writes());
    assert_clean(&history);
}

/// Proxy mode under moves: plain clients on every node keep writing and reading while slot
/// ranges move back and forth. A request must never bounce between the move's source and
/// target (it used to, until the 10 s forward timeout), and nothing is lost or stale.
#[test]
fn proxy_mode_under_moves_neither_hangs_nor_loses_writes() {
    let cluster = Cluster::start("proxy", false);
    let ports = cluster.ports();
    let history = History::default();
    let stop = Arc::new(AtomicBool::new(false));
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let history = history.clone();
            let stop = Arc::clone(&stop);
            let errors = Arc::clone(&errors);
            let port = ports[w];
            std::thread::spawn(move || {
                // A plain client: one node, no redirections expected.
                let mut raw = Raw::connect(port).unwrap();
                let keys: Vec<String> = (0..40).map(|i| format!("p{w}:{i}")).collect();
                let mut next = 1;
                while !stop.load(Ordering::Relaxed) {
                    for k in &keys {
                        let start = Instant::now();
                        let v = next.to_string();
                        let reply = raw.call(&["SET", k, &v]);
                        let end = Instant::now();
                        if let Ok(Reply::Error(e)) = &reply {
                            errors.lock().unwrap().push(format!("SET {k}: {e}"));
                        }
                        history.record(Op {
                            key: k.clone(),
                            write: true,
                            value: Some(next),
                            ok: matches!(reply, Ok(Reply::Ok)),
                            start,
                            end,
                            node: port,
                        });
                        let start = Instant::now();
                        let reply = raw.call(&["GET", k]);
                        if let Ok(Reply::Error(e)) = &reply {
                            errors.lock().unwrap().push(format!("GET {k}: {e}"));
                        }
                        history.record(Op {
                            key: k.clone(),
                            write: false,
                            value: match &reply {
                                Ok(Reply::Value(v)) => *v,
                                _ => None,
                            },
                            ok: matches!(reply, Ok(Reply::Value(_))),
                            start,
                            end: Instant::now(),
                            node: port,
                        });
                        if reply.is_err() {
                            raw = Raw::connect(port).unwrap();
                        }
                    }
                    next += 1;
                }
            })
        })
        .collect();
    // Moves between every pair, of ranges that hold the clients' keys.
    let moves = [
        ("n1", "n2"),
        ("n2", "n3"),
        ("n3", "n1"),
        ("n2", "n1"),
        ("n3", "n2"),
        ("n1", "n3"),
    ];
    for (from, to) in moves {
        let (a, b) = cluster.owned(from)[0];
        let range = format!("{a}-{}", b.min(a + 1500));
        cluster
            .admin(&["move", &range, "--to", to])
            .unwrap_or_else(|e| panic!("move {range} from {from} to {to}: {e}"));
        std::thread::sleep(Duration::from_millis(300));
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let errors = errors.lock().unwrap().clone();
    let hung: Vec<&String> = errors
        .iter()
        .filter(|e| e.contains("did not answer") || e.contains("lost"))
        .collect();
    assert!(hung.is_empty(), "requests failed in proxy mode: {hung:#?}");
    let mut client = Client::new(&ports, &history);
    for w in 0..3 {
        for i in 0..40 {
            client.get(&format!("p{w}:{i}"));
        }
    }
    assert!(history.acked_writes() > 100, "{}", history.acked_writes());
    assert_clean(&history);
}
