//! The sequencer balancer on a live 3-node cluster (issue 27 item 5): real `mantle serve
//! --cluster --log-node` processes on a private etcd, wall-clock policy ticks, and
//! `policies/sequencer_balance.lua` loaded with `POLICY LOAD`. Three logs whose sequencers
//! all start on n1 take appends from concurrent appenders through the typed client
//! (`crates/zlog`); the balancer moves sequencers (their slots) off n1 while the appends go
//! on. Checked: at least one sequencer moved and runs on its new node; no log's slot goes
//! back to a node it left (no ping-pong); a node's balancing decisions are at least the
//! back-off apart in ticks; no position acknowledged twice and every acknowledged append
//! reads back. Both balancing modes: client (`-MOVED`, cluster-aware clients follow it) and
//! proxy (`--cluster-mode proxy`, every client stays on n1, which forwards to the new owner).
//! Nothing here asserts on wall-clock time.

mod common;

use cluster::testing::{free_port, Etcd};
use common::nodes::{admin_ok, node_flags, owned, serve, wait_until, Proc};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zlog::{Entry, Log};

const LOGS: usize = 3;
const APPENDERS_PER_LOG: usize = 2;
/// The policy's back-off: ticks a node waits after a move, and ticks an imbalance must hold.
const WAIT: u64 = 4;
const HOLD: u64 = 2;

fn conn(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap()
}

struct Cluster {
    etcd: Etcd,
    _root: tempfile::TempDir,
    /// (id, port, process) of n1, n2, n3.
    nodes: Vec<(String, u16, Proc)>,
}

impl Cluster {
    fn start(name: &'static str, mode: &str) -> Cluster {
        let etcd = Etcd::start();
        let root = tempfile::tempdir().unwrap();
        let nodes: Vec<(String, u16, Proc)> = ["n1", "n2", "n3"]
            .iter()
            .map(|id| {
                let port = free_port();
                let dir = root.path().join(id);
                let mut args: Vec<String> = [
                    "--data-dir",
                    dir.to_str().unwrap(),
                    "--log-node",
                    "--log-replicas",
                    "2",
                    "--tick",
                    "500ms",
                    "--cluster-mode",
                    mode,
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                args.extend(node_flags(&etcd, name, id));
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let log = root.path().join(format!("{id}.log"));
                (id.to_string(), port, serve(&args, port, Path::new(&log)))
            })
            .collect();
        let info = |port: u16| -> String {
            redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut conn(port))
                .unwrap_or_default()
        };
        wait_until("three members", Duration::from_secs(20), || {
            info(nodes[0].1).contains("cluster_known_nodes:3")
        });
        admin_ok(&etcd, name, &["rebalance"]);
        for (_, port, _) in &nodes {
            wait_until("the balanced map", Duration::from_secs(20), || {
                info(*port).contains("cluster_size:3")
            });
        }
        Cluster {
            etcd,
            _root: root,
            nodes,
        }
    }

    fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|(_, p, _)| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// The id of the node owning `slot`, as n1's `CLUSTER SLOTS` says.
    fn owner_of(&self, slot: u16) -> String {
        let ranges: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut conn(self.nodes[0].1))
            .unwrap_or_default();
        let int = |v: &redis::Value| match v {
            redis::Value::Int(n) => *n,
            _ => -1,
        };
        for range in ranges {
            let redis::Value::Bulk(items) = range else {
                continue;
            };
            let (a, b) = (int(&items[0]), int(&items[1]));
            if !(a..=b).contains(&i64::from(slot)) {
                continue;
            }
            let redis::Value::Bulk(node) = &items[2] else {
                continue;
            };
            let port = int(&node[1]);
            if let Some((id, _, _)) = self.nodes.iter().find(|(_, p, _)| i64::from(*p) == port) {
                return id.clone();
            }
        }
        String::new()
    }

    fn port_of(&self, id: &str) -> u16 {
        self.nodes.iter().find(|(i, _, _)| i == id).unwrap().1
    }
}

/// `n` log names whose slots are n1's (so their sequencers start there), each in its own slot.
fn logs_on(ranges: &[(u16, u16)], n: usize) -> Vec<(String, u16)> {
    let mut taken = Vec::new();
    (0..)
        .map(|i| format!("seqlog{i}"))
        .filter_map(|name| {
            let slot = slots::key_slot(name.as_bytes());
            let mine = ranges.iter().any(|&(a, b)| (a..=b).contains(&slot));
            (mine && !taken.contains(&slot)).then(|| {
                taken.push(slot);
                (name, slot)
            })
        })
        .take(n)
        .collect()
}

/// One acknowledged append.
struct Acked {
    log: usize,
    pos: u64,
    data: Vec<u8>,
}

/// No two acknowledged appends of `name` share a position, and each reads back below the
/// tail with its bytes.
fn check<C: redis::ConnectionLike>(mut log: Log<C>, name: &str, acked: &[&Acked]) {
    let mut by_pos: HashMap<u64, &Acked> = HashMap::new();
    for a in acked {
        assert!(
            by_pos.insert(a.pos, a).is_none(),
            "{name}: position {} acknowledged twice",
            a.pos
        );
    }
    let tail = log.tail().unwrap();
    for (&pos, a) in &by_pos {
        assert!(
            pos < tail,
            "{name}: acknowledged position {pos} past the tail {tail}"
        );
        match log.read(pos).unwrap() {
            Entry::Data(d) => assert_eq!(d, a.data, "{name}: position {pos}"),
            other => panic!("{name}: acknowledged position {pos} reads {other:?}"),
        }
    }
    eprintln!("{name}: {} appends acknowledged, tail {tail}", acked.len());
}

fn balance_sequencers(name: &'static str, mode: &str) {
    let cluster = Cluster::start(name, mode);
    let n1 = cluster.port_of("n1");
    let logs = logs_on(&owned(&cluster.etcd, name, "n1"), LOGS);
    let source = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../policies/sequencer_balance.lua"
    ))
    .unwrap();
    let mut c = conn(n1);
    for (k, v) in [("wait", WAIT), ("hold", HOLD)] {
        let _: () = redis::cmd("POLICY")
            .arg("PARAM")
            .arg(k)
            .arg(v)
            .query(&mut c)
            .unwrap();
    }
    let _: redis::Value = redis::cmd("POLICY")
        .arg("LOAD")
        .arg("seqbal")
        .arg(&source)
        .query(&mut c)
        .unwrap();

    // Client mode: a cluster-aware client, which follows -MOVED to the sequencer's new node.
    // Proxy mode: one connection to n1, which forwards what it no longer owns.
    let urls = cluster.urls();
    if mode == "proxy" {
        let url = urls[0].clone();
        run(&cluster, &logs, mode, move |log| {
            Log::open(&url, log).unwrap()
        });
    } else {
        run(&cluster, &logs, mode, move |log| {
            Log::open_cluster(&urls, log).unwrap()
        });
    }
}

/// Appenders on every log while the balancer works, then the checks.
fn run<C, F>(cluster: &Cluster, logs: &[(String, u16)], mode: &str, open: F)
where
    C: redis::ConnectionLike,
    F: Fn(&str) -> Log<C> + Send + Sync + 'static,
{
    let n1 = cluster.nodes[0].1;
    let open = Arc::new(open);
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..LOGS * APPENDERS_PER_LOG)
        .map(|t| {
            let (open, stop) = (Arc::clone(&open), Arc::clone(&stop));
            let (log_index, name) = (t % LOGS, logs[t % LOGS].0.clone());
            std::thread::spawn(move || {
                let mut log = open(&name);
                let mut acked = Vec::new();
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    let data = format!("{name}-{t}-{i}").into_bytes();
                    match log.append(&data) {
                        Ok(pos) => acked.push(Acked {
                            log: log_index,
                            pos,
                            data,
                        }),
                        Err(e) => panic!("appender {t} of {name}: {e}"),
                    }
                    i += 1;
                }
                acked
            })
        })
        .collect();

    // Who owns each log's slot, sampled while the appends run, until two sequencers moved
    // and the balancer had time for more (and so for a ping-pong, were it to make one).
    let mut history: Vec<Vec<String>> = logs.iter().map(|_| vec!["n1".to_string()]).collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut settled_at: Option<Instant> = None;
    loop {
        for (i, (_, slot)) in logs.iter().enumerate() {
            let owner = cluster.owner_of(*slot);
            if !owner.is_empty() && history[i].last() != Some(&owner) {
                history[i].push(owner);
            }
        }
        let moved = history.iter().filter(|h| h.len() > 1).count();
        if moved >= 2 && settled_at.is_none() {
            settled_at = Some(Instant::now());
        }
        // Watch on for (WAIT + HOLD) * 3 ticks of 500 ms after the second move.
        let watched = Duration::from_millis(500 * (WAIT + HOLD) * 3);
        if settled_at.is_some_and(|t| t.elapsed() > watched) || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::SeqCst);
    let acked: Vec<Acked> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("an appender panicked"))
        .collect();
    eprintln!("{mode} mode: owners of each log's slot over the run: {history:?}");

    let moved: Vec<usize> = (0..LOGS).filter(|&i| history[i].len() > 1).collect();
    assert!(!moved.is_empty(), "no sequencer moved off n1: {history:?}");
    for (i, owners) in history.iter().enumerate() {
        let mut seen = std::collections::HashSet::new();
        for w in owners.windows(2) {
            seen.insert(&w[0]);
            assert!(
                !seen.contains(&w[1]),
                "{}'s sequencer went back to {} (ping-pong): {owners:?}",
                logs[i].0,
                w[1]
            );
        }
    }
    // A moved sequencer runs on its new node: recovered there at a newer epoch (in proxy
    // mode through n1, which forwarded the client's requests).
    for &i in &moved {
        let (name, slot) = &logs[i];
        let owner = cluster.owner_of(*slot);
        // ZLOG.OPEN's fields are numbers, and text for the lease (its mode and policy).
        let open_reply: BTreeMap<String, redis::Value> = redis::cmd("ZLOG.OPEN")
            .arg(name)
            .query(&mut conn(cluster.port_of(&owner)))
            .unwrap();
        let number = |field: &str| -> i64 { redis::from_redis_value(&open_reply[field]).unwrap() };
        assert!(
            number("epoch") >= 2 && number("tail") > 0,
            "{name} on {owner}: {open_reply:?}"
        );
    }

    // Back-off: each node's decisions that moved something are at least WAIT + 1 ticks apart.
    let log: Vec<String> = redis::cmd("POLICY")
        .arg("LOG")
        .arg(500)
        .query(&mut conn(n1))
        .unwrap();
    let mut decisions: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in log
        .iter()
        .filter(|l| l.contains("event=balance") && l.contains(") to n"))
    {
        let node = line.rsplit("node=").next().unwrap_or("").to_string();
        let tick = line
            .split("tick ")
            .nth(1)
            .and_then(|t| t.split(':').next())
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("a tick number in {line}"));
        decisions.entry(node).or_default().push(tick);
    }
    eprintln!("{mode} mode: ticks of each node's moves: {decisions:?}");
    assert!(
        !decisions.is_empty(),
        "no balance decision in the central log: {log:#?}"
    );
    for (node, ticks) in &mut decisions {
        ticks.sort_unstable();
        for w in ticks.windows(2) {
            assert!(
                w[1] - w[0] > WAIT,
                "{node} moved again {} ticks after a move (back-off {WAIT}): {ticks:?}",
                w[1] - w[0]
            );
        }
    }

    // The appends: none lost, none at a shared position.
    for (i, (name, _)) in logs.iter().enumerate() {
        let mine: Vec<&Acked> = acked.iter().filter(|a| a.log == i).collect();
        assert!(!mine.is_empty(), "{name}: no append acknowledged");
        check(open(name), name, &mine);
    }
}

#[test]
fn the_balancer_moves_sequencers_off_a_hot_node_in_client_mode() {
    balance_sequencers("seqbalc", "client");
}

#[test]
fn the_balancer_moves_sequencers_off_a_hot_node_in_proxy_mode() {
    balance_sequencers("seqbalp", "proxy");
}
