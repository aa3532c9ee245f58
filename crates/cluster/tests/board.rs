//! The metrics board in a real etcd on loopback: every node reads every node's latest
//! record, a silent node's record goes with its lease, and two nodes declaring migrations of
//! the same slots at once cannot both succeed (the balancer's guarantee that no slot is
//! given twice).

#![cfg(feature = "etcd")]

use cluster::board::Board;
use cluster::testing::Etcd;
use cluster::{ClusterConfig, ControlPlane, NodeId, SlotMap};
use slots::SlotRange;
use std::time::{Duration, Instant};

async fn plane(etcd: &Etcd, name: &str) -> ControlPlane {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match ControlPlane::connect(ClusterConfig::new(&etcd.address(), name).unwrap()).await {
            Ok(plane) => return plane,
            Err(e) if Instant::now() > deadline => panic!("etcd never answered: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn id(s: &str) -> NodeId {
    NodeId::new(s).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_reads_every_record_and_a_silent_node_drops_off() {
    let etcd = Etcd::start();
    let a = Board::open(plane(&etcd, "b").await, id("a"), Duration::from_secs(1));
    let b = Board::open(plane(&etcd, "b").await, id("b"), Duration::from_secs(1));
    a.publish(b"a1".to_vec()).await.unwrap();
    b.publish(b"b1".to_vec()).await.unwrap();
    a.publish(b"a2".to_vec()).await.unwrap();
    let seen = b.read().await.unwrap();
    assert_eq!(seen.get(&id("a")).map(Vec::as_slice), Some(&b"a2"[..]));
    assert_eq!(seen.get(&id("b")).map(Vec::as_slice), Some(&b"b1"[..]));
    // Another cluster's board is apart.
    let other = Board::open(plane(&etcd, "other").await, id("a"), Duration::from_secs(1));
    assert!(other.read().await.unwrap().is_empty());
    // Kept alive while the node lives, even without publishing...
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(a.read().await.unwrap().len(), 2);
    // ...gone within the TTL once it is not.
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.read().await.unwrap().contains_key(&id("b")) {
        assert!(Instant::now() < deadline, "b's record outlived its lease");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_decisions_on_the_same_slots_cannot_both_be_declared() {
    let etcd = Etcd::start();
    let p = plane(&etcd, "m").await;
    let (n1, n2, n3) = (id("n1"), id("n2"), id("n3"));
    p.update(|_| Ok(SlotMap::all_to(&n1))).await.unwrap();
    let range = SlotRange::new(10, 20).unwrap();
    let mut tasks = Vec::new();
    for to in [n2.clone(), n3.clone()] {
        let (p, from) = (plane(&etcd, "m").await, n1.clone());
        tasks.push(tokio::spawn(async move {
            p.update(|map| map.begin_migration(range, &from, &to)).await
        }));
    }
    let mut ok = 0;
    for t in tasks {
        if t.await.unwrap().is_ok() {
            ok += 1;
        }
    }
    assert_eq!(ok, 1, "exactly one of the two decisions is declared");
    let map = p.slot_map().await.unwrap().unwrap().value;
    assert_eq!(map.migrations.len(), 1);
    map.validate().unwrap();
}
