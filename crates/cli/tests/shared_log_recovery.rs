//! The shared log on a live 3-node cluster (real `mantle serve --cluster --log-node`
//! processes, a private etcd), under concurrent appenders through the typed client
//! (`crates/zlog`): `kill -9` of the node running the log's sequencer, and separately of a
//! node holding only storage. Afterwards: no position acknowledged twice, every acknowledged
//! append readable with its bytes, and no hole except filled ones. The time from the kill to
//! the first append served by the new sequencer is printed (measured, not asserted) with
//! where it went (the dead node's lease running out in etcd, its record deleted, the
//! successor's view dropping it); that it came before the dead node's slots were reassigned
//! (the sequencer takeover of docs/shared-log.md, not the data failover) is asserted.

mod common;

use cluster::testing::{free_port, Etcd};
use common::nodes::{admin_ok, node_flags, serve, wait_until, Proc};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zlog::{Entry, Log};

const LOG: &str = "orders";
const APPENDERS: usize = 3;

fn conn(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection()
        .unwrap()
}

fn cluster_info(port: u16) -> String {
    redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut conn(port))
        .unwrap_or_default()
}

/// The port of the node owning `slot`, from CLUSTER SLOTS on `port`.
fn owner(port: u16, slot: u16) -> u16 {
    owner_if_any(port, slot).expect("every slot owned")
}

/// The port of the node owning `slot`, if CLUSTER SLOTS on `port` names one.
fn owner_if_any(port: u16, slot: u16) -> Option<u16> {
    let Ok(reply) = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query::<Vec<redis::Value>>(&mut conn(port))
    else {
        return None;
    };
    let ranges: Vec<(u16, u16, (String, u16))> = reply
        .into_iter()
        .map(|range| {
            let redis::Value::Bulk(items) = range else {
                panic!("a slot range")
            };
            let int = |v: &redis::Value| match v {
                redis::Value::Int(n) => *n,
                other => panic!("{other:?}"),
            };
            let redis::Value::Bulk(node) = &items[2] else {
                panic!("a node")
            };
            let host = match &node[0] {
                redis::Value::Data(d) => String::from_utf8_lossy(d).into_owned(),
                other => panic!("{other:?}"),
            };
            (
                int(&items[0]) as u16,
                int(&items[1]) as u16,
                (host, int(&node[1]) as u16),
            )
        })
        .collect();
    ranges
        .iter()
        .find(|(a, b, _)| (*a..=*b).contains(&slot))
        .map(|(_, _, (_, port))| *port)
}

struct Cluster {
    etcd: Etcd,
    name: String,
    _root: tempfile::TempDir,
    nodes: Vec<(Option<Proc>, u16)>,
}

const IDS: [&str; 3] = ["n1", "n2", "n3"];

impl Cluster {
    fn start(name: &str) -> Cluster {
        let etcd = Etcd::start();
        let root = tempfile::tempdir().unwrap();
        let nodes: Vec<(Option<Proc>, u16)> = IDS
            .iter()
            .map(|id| {
                let port = free_port();
                let dir = root.path().join(id);
                let mut args = vec![
                    "--data-dir".to_string(),
                    dir.to_str().unwrap().to_string(),
                    "--log-node".to_string(),
                    "--log-replicas".to_string(),
                    "2".to_string(),
                ];
                args.extend(node_flags(&etcd, name, id));
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let log = root.path().join(format!("{id}.log"));
                (Some(serve(&args, port, Path::new(&log))), port)
            })
            .collect();
        let ports: Vec<u16> = nodes.iter().map(|(_, p)| *p).collect();
        wait_until("three members", Duration::from_secs(20), || {
            cluster_info(ports[0]).contains("cluster_known_nodes:3")
        });
        admin_ok(&etcd, name, &["rebalance"]);
        for port in &ports {
            wait_until("the balanced map", Duration::from_secs(20), || {
                cluster_info(*port).contains("cluster_size:3")
            });
        }
        Cluster {
            etcd,
            name: name.to_string(),
            _root: root,
            nodes,
        }
    }

    fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|(proc, _)| proc.is_some())
            .map(|(_, p)| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// The node id of the node on `port`.
    fn id(&self, port: u16) -> &'static str {
        IDS[self.nodes.iter().position(|(_, p)| *p == port).unwrap()]
    }

    fn kill(&mut self, port: u16) -> Instant {
        let (proc, _) = self
            .nodes
            .iter_mut()
            .find(|(_, p)| *p == port)
            .expect("a node on that port");
        let proc = proc.take().expect("alive");
        proc.signal("-KILL");
        let killed = Instant::now();
        drop(proc);
        killed
    }
}

/// When the steps of a takeover happened, seen from outside: the dead node's lease running
/// out in etcd (between two times: etcd answers a time to live in whole seconds, so the
/// moment is where its answers turn from 1 to 0, plus a second), its record deleted (the
/// lease revoked), and the successor's view dropping the node (it serves the sequencer
/// from then on).
#[derive(Debug, Default)]
struct Lapse {
    ran_out: Option<(Instant, Instant)>,
    deleted: Option<Instant>,
    successor_saw: Option<Instant>,
}

/// Watches `victim`'s lease in etcd and `successor`'s view of the members (every 5 ms)
/// until both saw it go, or 20 s.
fn watch_lapse(cluster: &Cluster, victim: &str, successor: u16) -> std::thread::JoinHandle<Lapse> {
    let config = cluster::ClusterConfig::new(&cluster.etcd.address(), &cluster.name).unwrap();
    let victim = cluster::NodeId::new(victim).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let plane = runtime
            .block_on(cluster::ControlPlane::connect(config))
            .unwrap();
        let lease = runtime
            .block_on(cluster::expiry::member_lease(&plane, &victim))
            .unwrap()
            .expect("the victim is a member");
        let mut successor = conn(successor);
        let mut lapse = Lapse::default();
        // The last answer of 1 (sent), and the first 0 after it (received).
        let (mut last_one, mut zero_after): (Option<Instant>, Option<Instant>) = (None, None);
        let stop = Instant::now() + Duration::from_secs(20);
        while Instant::now() < stop && (lapse.deleted.is_none() || lapse.successor_saw.is_none()) {
            let sent = Instant::now();
            let ttl = runtime.block_on(cluster::expiry::lease_ttl(&plane, lease));
            let received = Instant::now();
            match ttl {
                Ok(ttl) if ttl > 0 => (last_one, zero_after) = (Some(sent), None),
                Ok(0) => {
                    zero_after.get_or_insert(received);
                }
                Ok(_) => {
                    lapse.deleted.get_or_insert(received);
                }
                Err(_) => {}
            }
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut successor)
                .unwrap_or_default();
            if info.contains("cluster_known_nodes:2") {
                lapse.successor_saw.get_or_insert(Instant::now());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if let (Some(one), Some(zero)) = (last_one, zero_after) {
            lapse.ran_out = Some((one + Duration::from_secs(1), zero + Duration::from_secs(1)));
        }
        lapse
    })
}

/// One acknowledged append.
#[derive(Debug, Clone)]
struct Acked {
    pos: u64,
    data: Vec<u8>,
    epoch: u64,
    at: Instant,
}

/// Appenders run until `stop`; what each had acknowledged.
fn appenders(urls: &[String], stop: &Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<Vec<Acked>>> {
    (0..APPENDERS)
        .map(|t| {
            let urls = urls.to_vec();
            let stop = Arc::clone(stop);
            std::thread::spawn(move || {
                let mut log = Log::open_cluster(&urls, LOG).unwrap();
                let mut acked = Vec::new();
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    let data = format!("c{t}-{i}").into_bytes();
                    match log.append(&data) {
                        Ok(pos) => acked.push(Acked {
                            pos,
                            data,
                            epoch: log.epoch(),
                            at: Instant::now(),
                        }),
                        Err(e) => panic!("appender {t}: {e}"),
                    }
                    i += 1;
                }
                acked
            })
        })
        .collect()
}

/// Kills the node on `victim` while appenders run, then checks the log. Returns the time
/// from the kill to the first append at a newer epoch (if the sequencer moved).
fn kill_under_appenders(
    cluster: &mut Cluster,
    victim: u16,
    progress: &Mutex<Option<Instant>>,
) -> Vec<Acked> {
    let stop = Arc::new(AtomicBool::new(false));
    let urls = cluster.urls();
    let threads = appenders(&urls, &stop);
    std::thread::sleep(Duration::from_millis(800));
    *progress.lock().unwrap() = Some(cluster.kill(victim));
    // Long enough for the failover (TTL 2 s plus the grace) and appends after it.
    std::thread::sleep(Duration::from_secs(12));
    stop.store(true, Ordering::SeqCst);
    threads
        .into_iter()
        .flat_map(|t| t.join().expect("an appender panicked"))
        .collect()
}

/// No position acknowledged twice; every acknowledged append reads back; every other
/// position below the tail is data (an unacknowledged append finished by a reader) or filled.
fn check(urls: &[String], acked: &[Acked]) {
    let mut by_pos: HashMap<u64, &Acked> = HashMap::new();
    for a in acked {
        assert!(
            by_pos.insert(a.pos, a).is_none(),
            "position {} acknowledged twice",
            a.pos
        );
    }
    let mut log = Log::open_cluster(urls, LOG).unwrap();
    let tail = log.tail().unwrap();
    assert!(
        by_pos.keys().all(|&p| p < tail),
        "an acked position past the tail"
    );
    let mut filled = 0;
    for pos in 0..tail {
        let entry = match log.read(pos).unwrap() {
            Entry::NotWritten => match log.fill(pos) {
                Ok(()) => Entry::Filled,
                Err(zlog::Error::Written) => log.read(pos).unwrap(),
                Err(e) => panic!("fill {pos}: {e}"),
            },
            entry => entry,
        };
        match (&entry, by_pos.get(&pos)) {
            (Entry::Data(d), Some(a)) => assert_eq!(d, &a.data, "position {pos}"),
            (Entry::Data(_), None) => {}
            (Entry::Filled, None) => filled += 1,
            (other, acked) => panic!("position {pos}: {other:?}, acknowledged {acked:?}"),
        }
    }
    eprintln!(
        "{} appends acknowledged, tail {tail}, {filled} holes filled",
        acked.len()
    );
}

#[test]
fn killing_the_sequencers_node_loses_no_acknowledged_append() {
    let mut cluster = Cluster::start("zlogseq");
    let urls = cluster.urls();
    let log = Log::open_cluster(&urls, LOG).unwrap();
    let layout = log.layout().clone();
    drop(log);
    let any = cluster.nodes[0].1;
    // The layout puts the two replicas of every stripe on distinct nodes.
    for stripe in 0..layout.stripes() {
        let a = owner(any, layout.slot(stripe, 0));
        let b = owner(any, layout.slot(stripe, 1));
        assert_ne!(a, b, "stripe {stripe}'s replicas share a node");
    }
    let log_slot = slots::key_slot(LOG.as_bytes());
    let sequencer = owner(any, log_slot);
    let survivor = cluster
        .nodes
        .iter()
        .map(|(_, p)| *p)
        .find(|p| *p != sequencer)
        .unwrap();
    // When the data failover gives the log's slot to a survivor.
    let reassigned = {
        let stop = Instant::now() + Duration::from_secs(30);
        std::thread::spawn(move || loop {
            match owner_if_any(survivor, log_slot) {
                Some(port) if port != sequencer => return Some(Instant::now()),
                _ if Instant::now() > stop => return None,
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        })
    };
    let victim = cluster.id(sequencer);
    let survivors: Vec<cluster::NodeId> = IDS
        .iter()
        .filter(|id| **id != victim)
        .map(|id| cluster::NodeId::new(id).unwrap())
        .collect();
    let successor = cluster::successor::successor(log_slot, &survivors).unwrap();
    let successor_port =
        cluster.nodes[IDS.iter().position(|id| *id == successor.as_str()).unwrap()].1;
    let lapse = watch_lapse(&cluster, victim, successor_port);
    let killed = Mutex::new(None);
    let acked = kill_under_appenders(&mut cluster, sequencer, &killed);
    let killed = killed.lock().unwrap().unwrap();
    let reassigned = reassigned.join().unwrap().expect("the slot reassigned");
    let lapse = lapse.join().unwrap();
    let before = acked
        .iter()
        .filter(|a| a.at < killed)
        .map(|a| a.epoch)
        .max();
    let first_new = acked
        .iter()
        .filter(|a| a.at > killed && Some(a.epoch) > before)
        .map(|a| a.at)
        .min()
        .expect("appends served by a new sequencer after the kill");
    eprintln!(
        "kill -9 of the sequencer's node -> first append by the new sequencer: {:?} \
         (membership TTL 2 s); the slot itself reassigned after {:?}",
        first_new - killed,
        reassigned - killed
    );
    let since = |t: Option<Instant>| {
        t.map_or("never".to_string(), |t| {
            format!("{:.3} s", t.saturating_duration_since(killed).as_secs_f64())
        })
    };
    eprintln!(
        "takeover timeline after the kill: lease ran out in etcd between {} and {}; \
         record deleted {}; successor ({successor}) saw it go {}; first append by the new \
         sequencer {}",
        since(lapse.ran_out.map(|r| r.0)),
        since(lapse.ran_out.map(|r| r.1)),
        since(lapse.deleted),
        since(lapse.successor_saw),
        since(Some(first_new)),
    );
    assert!(
        first_new < reassigned,
        "appends resumed only with the data failover: no sequencer takeover"
    );
    check(&cluster.urls(), &acked);
}

#[test]
fn killing_a_storage_node_loses_no_acknowledged_append() {
    let mut cluster = Cluster::start("zlogsto");
    let any = cluster.nodes[0].1;
    let sequencer = owner(any, slots::key_slot(LOG.as_bytes()));
    let storage = cluster
        .nodes
        .iter()
        .map(|(_, p)| *p)
        .find(|p| *p != sequencer)
        .unwrap();
    let killed = Mutex::new(None);
    let acked = kill_under_appenders(&mut cluster, storage, &killed);
    let killed = killed.lock().unwrap().unwrap();
    assert!(
        acked.iter().any(|a| a.at > killed),
        "no append succeeded after the storage node died"
    );
    check(&cluster.urls(), &acked);
}
