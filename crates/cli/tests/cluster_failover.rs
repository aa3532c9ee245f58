//! A pure cache tier (three `mantle serve --cluster --upstream` nodes in front of one
//! upstream) survives a node's SIGKILL: once its lease lapses, one survivor wins the etcd
//! transaction that gives its slots to the survivors, every slot is served again, reads come
//! through from the upstream, and the central log says what happened.

mod common;

use cluster::testing::free_port;
use cluster::testing::Etcd;
use common::nodes::{admin_ok, log_tail, node_flags, owned, serve, wait_until, Proc};
use std::path::Path;
use std::time::{Duration, Instant};

/// The cluster every test here runs.
const NAME: &str = "tier";

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

fn admin(etcd: &Etcd, args: &[&str]) {
    admin_ok(etcd, NAME, args);
}

fn node(id: &str, etcd: &Etcd, upstream: u16, root: &Path) -> (Proc, u16) {
    let port = free_port();
    let mut args = vec![
        "--upstream".to_string(),
        format!("redis://127.0.0.1:{upstream}"),
    ];
    args.extend(node_flags(etcd, NAME, id));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let proc = serve(&args, port, &root.join(format!("{id}.log")));
    (proc, port)
}

#[test]
fn a_killed_cache_tier_nodes_slots_go_to_the_survivors() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let upstream_port = free_port();
    let data = root.path().join("upstream");
    let _upstream = serve(
        &["--data-dir", data.to_str().unwrap()],
        upstream_port,
        &root.path().join("upstream.log"),
    );
    let mut nodes: Vec<(Proc, u16)> = ["n1", "n2", "n3"]
        .iter()
        .map(|id| node(id, &etcd, upstream_port, root.path()))
        .collect();
    let ports: Vec<u16> = nodes.iter().map(|(_, p)| *p).collect();
    wait_until("three members", Duration::from_secs(10), || {
        cluster_info(ports[0]).contains("cluster_known_nodes:3")
    });
    admin(&etcd, &["rebalance"]);
    for port in &ports {
        wait_until("the new map", Duration::from_secs(10), || {
            cluster_info(*port).contains("cluster_size:3")
        });
    }
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    let mut client = redis::cluster::ClusterClient::new(urls)
        .unwrap()
        .get_connection()
        .unwrap();
    for i in 0..300 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .query(&mut client)
            .unwrap();
    }

    let killed = Instant::now();
    let (mut n2, _) = nodes.remove(1);
    let _ = n2.0.kill();
    let _ = n2.0.wait();
    let survivors = [ports[0], ports[2]];
    wait_until(
        "the survivors to serve every slot",
        Duration::from_secs(20),
        || {
            survivors.iter().all(|p| {
                let info = cluster_info(*p);
                info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_assigned:16384")
                    && info.contains("cluster_size:2")
            })
        },
    );
    eprintln!(
        "every slot served again {:?} after the SIGKILL",
        killed.elapsed()
    );

    // A fresh cluster client finds every key, through the upstream where the dead node
    // had them cached, and writes land on every slot.
    let urls: Vec<String> = survivors
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    let mut client = redis::cluster::ClusterClient::new(urls)
        .unwrap()
        .get_connection()
        .unwrap();
    for i in 0..300 {
        let v: i64 = redis::cmd("GET")
            .arg(format!("k{i}"))
            .query(&mut client)
            .unwrap();
        assert_eq!(v, i);
    }
    for i in 0..300 {
        let _: () = redis::cmd("SET")
            .arg(format!("after{i}"))
            .arg(i)
            .query(&mut client)
            .unwrap();
    }
    let log: Vec<String> = redis::cmd("POLICY")
        .arg("LOG")
        .arg(100)
        .query(&mut conn(survivors[1]))
        .unwrap();
    let reassigned = log
        .iter()
        .filter(|l| l.contains("event=slots_reassigned"))
        .count();
    assert_eq!(reassigned, 1, "exactly one survivor reassigned: {log:#?}");
}

/// A cache-tier node stopped (SIGSTOP) long enough for its slots to be taken over, and whose
/// keys were rewritten meanwhile through the survivors, must not serve what it had cached when
/// it is back and owns those slots again.
#[test]
fn a_returning_cache_tier_node_serves_no_stale_cached_value() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let upstream_port = free_port();
    let data = root.path().join("upstream");
    let _upstream = serve(
        &["--data-dir", data.to_str().unwrap()],
        upstream_port,
        &root.path().join("upstream.log"),
    );
    let mut nodes: Vec<(Proc, u16)> = ["n1", "n2", "n3"]
        .iter()
        .map(|id| node(id, &etcd, upstream_port, root.path()))
        .collect();
    let ports: Vec<u16> = nodes.iter().map(|(_, p)| *p).collect();
    wait_until("three members", Duration::from_secs(10), || {
        cluster_info(ports[0]).contains("cluster_known_nodes:3")
    });
    admin(&etcd, &["rebalance"]);
    for port in &ports {
        wait_until("the new map", Duration::from_secs(10), || {
            cluster_info(*port).contains("cluster_size:3")
        });
    }
    // n2's keys, written (and so cached) through n2 itself.
    let n2_ranges = owned(&etcd, NAME, "n2");
    let mut n2 = conn(ports[1]);
    let keys: Vec<String> = (0..3000)
        .map(|i| format!("k{i}"))
        .filter(|k| {
            let slot = slots::key_slot(k.as_bytes());
            n2_ranges.iter().any(|&(a, b)| (a..=b).contains(&slot))
        })
        .collect();
    assert!(keys.len() > 100, "{}", keys.len());
    for k in &keys {
        let _: () = redis::cmd("SET").arg(k).arg("old").query(&mut n2).unwrap();
    }

    let (stopped, _) = nodes.remove(1);
    stopped.signal("-STOP");
    let survivors = [ports[0], ports[2]];
    wait_until(
        "the survivors to take n2's slots",
        Duration::from_secs(30),
        || {
            survivors.iter().all(|p| {
                let info = cluster_info(*p);
                info.contains("cluster_slots_assigned:16384") && info.contains("cluster_size:2")
            })
        },
    );
    let urls: Vec<String> = survivors
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    let mut client = redis::cluster::ClusterClient::new(urls)
        .unwrap()
        .get_connection()
        .unwrap();
    for k in &keys {
        let _: () = redis::cmd("SET")
            .arg(k)
            .arg("new")
            .query(&mut client)
            .unwrap();
    }

    stopped.signal("-CONT");
    let back_by = Instant::now() + Duration::from_secs(30);
    while !cluster_info(ports[0]).contains("cluster_known_nodes:3") {
        assert!(
            Instant::now() < back_by,
            "n2 was not a member again within 30 s; its log ends:\n{}",
            log_tail(&root.path().join("n2.log"))
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_until(
        "n2 to see it lost its slots",
        Duration::from_secs(30),
        || !cluster_info(ports[1]).contains("cluster_size:3"),
    );
    // Give n2 back part of its old slots (the survivor owning the first of them moves it).
    let (a, b) = n2_ranges[0];
    let (from, (c, d)) = ["n1", "n3"]
        .iter()
        .flat_map(|id| owned(&etcd, NAME, id).into_iter().map(move |r| (*id, r)))
        .find(|&(_, (c, d))| c <= b && d >= a)
        .expect("a survivor owns part of n2's old slots");
    let _ = from;
    let (lo, hi) = (a.max(c), b.min(d));
    admin(&etcd, &["move", &format!("{lo}-{hi}"), "--to", "n2"]);
    let back: Vec<&String> = keys
        .iter()
        .filter(|k| (lo..=hi).contains(&slots::key_slot(k.as_bytes())))
        .collect();
    assert!(!back.is_empty());
    wait_until(
        "n2 to serve the range again",
        Duration::from_secs(10),
        || {
            redis::cmd("GET")
                .arg(back[0].as_str())
                .query::<Option<String>>(&mut conn(ports[1]))
                .is_ok()
        },
    );
    let mut n2 = conn(ports[1]);
    for k in back {
        let v: Option<String> = redis::cmd("GET").arg(k.as_str()).query(&mut n2).unwrap();
        assert_eq!(v.as_deref(), Some("new"), "{k}: a stale cached value");
    }
    drop(stopped);
}
