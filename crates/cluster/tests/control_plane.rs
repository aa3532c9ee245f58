//! The control plane against a real etcd on loopback: bootstrap, compare-and-swap under
//! contention, membership by lease, watches, and an etcd outage.

#![cfg(feature = "etcd")]

use cluster::testing::Etcd;
use cluster::{ClusterConfig, ClusterError, ControlPlane, Member, NodeId};
use slots::{SlotRange, SLOTS};
use std::time::{Duration, Instant};

fn id(s: &str) -> NodeId {
    NodeId::new(s).unwrap()
}

fn member(name: &str, port: u16) -> Member {
    Member {
        id: id(name),
        addr: format!("127.0.0.1:{port}"),
        joined_ms: cluster::control::now_ms(),
    }
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_node_takes_every_slot_and_later_ones_see_its_map() {
    let etcd = Etcd::start();
    let plane = plane(&etcd, "boot").await;
    assert!(plane.slot_map().await.unwrap().is_none());
    let first = plane.bootstrap(&id("a")).await.unwrap();
    assert_eq!(first.value.slot_count(&id("a")), usize::from(SLOTS));
    let second = plane.bootstrap(&id("b")).await.unwrap();
    assert_eq!(second, first, "a second bootstrap keeps the existing map");
    // Clusters under other names are separate.
    let other = self::plane(&etcd, "other").await;
    assert!(other.slot_map().await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_compare_and_swap_loses_and_concurrent_updates_all_apply() {
    let etcd = Etcd::start();
    let plane = plane(&etcd, "cas").await;
    let start = plane.bootstrap(&id("a")).await.unwrap();

    let moved = start
        .value
        .assign(SlotRange::new(0, 99).unwrap(), &id("b"))
        .unwrap();
    let won = plane
        .compare_and_swap(start.revision, &moved)
        .await
        .unwrap();
    assert!(won.is_ok());
    // A second writer that computed its change from the same old revision loses and is
    // shown the current map.
    let rival = start
        .value
        .assign(SlotRange::new(0, 99).unwrap(), &id("c"))
        .unwrap();
    let lost = plane
        .compare_and_swap(start.revision, &rival)
        .await
        .unwrap();
    let current = lost.expect_err("a stale revision must not win");
    assert_eq!(current.value.owner(50), Some(&id("b")));

    // Eight writers at once, each moving its own range: every change lands, none is lost.
    let mut tasks = Vec::new();
    for i in 0..8u16 {
        let plane = plane.clone();
        tasks.push(tokio::spawn(async move {
            let range = SlotRange::new(1000 + i * 10, 1009 + i * 10).unwrap();
            let to = NodeId::new(&format!("n{i}")).unwrap();
            plane.update(|map| map.assign(range, &to)).await
        }));
    }
    for t in tasks {
        t.await.unwrap().expect("each update applies after retries");
    }
    let end = plane.slot_map().await.unwrap().unwrap();
    for i in 0..8u16 {
        assert_eq!(
            end.value.owner(1000 + i * 10).map(NodeId::as_str),
            Some(format!("n{i}").as_str())
        );
    }
    end.value.validate().unwrap();
    assert!(end.value.unassigned().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_map_is_never_written() {
    let etcd = Etcd::start();
    let plane = plane(&etcd, "invalid").await;
    let start = plane.bootstrap(&id("a")).await.unwrap();
    let mut broken = start.value.clone();
    broken
        .owners
        .insert(id("b"), vec![SlotRange::new(5, 5).unwrap()]);
    let err = plane
        .compare_and_swap(start.revision, &broken)
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::Map(_)), "{err}");
    assert_eq!(plane.slot_map().await.unwrap().unwrap(), start);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_come_and_go_with_their_lease() {
    let etcd = Etcd::start();
    let plane = plane(&etcd, "members").await;
    let watch = plane.watch().await.unwrap();
    let ttl = Duration::from_secs(2);

    let a = plane.join(member("a", 7001), ttl).await.unwrap();
    let b = plane.join(member("b", 7002), ttl).await.unwrap();
    let seen = watch
        .wait_for(Duration::from_secs(5), |v| v.members.len() == 2)
        .await
        .expect("the watch sees both members");
    assert_eq!(seen.members[&id("b")].addr, "127.0.0.1:7002");

    // Kept alive well past the TTL.
    tokio::time::sleep(ttl * 2).await;
    assert_eq!(plane.members().await.unwrap().len(), 2);

    // Leaving removes the record at once.
    b.leave().await.unwrap();
    watch
        .wait_for(Duration::from_secs(2), |v| {
            !v.members.contains_key(&id("b"))
        })
        .await
        .expect("b is gone right after leaving");

    // A node that stops renewing (a crash) disappears within its TTL.
    let dropped_at = Instant::now();
    drop(a);
    watch
        .wait_for(Duration::from_secs(8), |v| v.members.is_empty())
        .await
        .expect("a crashed member disappears within its TTL");
    let gone_after = dropped_at.elapsed();
    assert!(gone_after >= Duration::from_millis(500), "{gone_after:?}");
}

/// `cluster::expiry`: a member whose keep-alive stopped (a crash) is proven gone once its
/// lease ran out, and its record deleted then (the lease revoked) rather than when etcd's
/// revoke loop, which wakes every 500 ms, comes round; a member that keeps renewing is
/// never taken for gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_ran_out_is_proven_gone_and_a_live_one_is_not() {
    use cluster::expiry::{confirm_gone, member_lease, Outcome};
    let etcd = Etcd::start();
    let plane = plane(&etcd, "expiry").await;
    let ttl = Duration::from_secs(2);

    let _live = plane.join(member("live", 7001), ttl).await.unwrap();
    let outcome = confirm_gone(&plane, &id("live"), ttl * 2).await.unwrap();
    assert_eq!(outcome, Outcome::Alive);
    assert!(member_lease(&plane, &id("live")).await.unwrap().is_some());

    // A crashed member's lease is proven run out within tens of milliseconds of its end,
    // and revoked; etcd's own revocation comes anywhere in the 500 ms after the end, so a
    // trial now and then finds it revoked already: a few trials, and at least one must be
    // this node's revocation (each lost with odds of about 1 in 15).
    let mut revoked = 0;
    for trial in 0..4 {
        let name = format!("dead{trial}");
        let dead = plane.join(member(&name, 7002), ttl).await.unwrap();
        drop(dead);
        let outcome = confirm_gone(&plane, &id(&name), ttl * 2).await.unwrap();
        assert!(
            matches!(outcome, Outcome::Revoked | Outcome::Gone),
            "{outcome:?}"
        );
        assert!(
            member_lease(&plane, &id(&name)).await.unwrap().is_none(),
            "the record is gone with the lease"
        );
        if outcome == Outcome::Revoked {
            revoked += 1;
            break;
        }
    }
    assert_eq!(revoked, 1, "etcd revoked the lease first in every trial");
    // A member without a record is gone.
    let outcome = confirm_gone(&plane, &id("never"), ttl).await.unwrap();
    assert_eq!(outcome, Outcome::Gone);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_id_cannot_join_twice() {
    let etcd = Etcd::start();
    let plane = plane(&etcd, "dup").await;
    let ttl = Duration::from_secs(2);
    let _first = plane.join(member("a", 7001), ttl).await.unwrap();
    let err = plane.join(member("a", 7009), ttl).await.err().unwrap();
    assert!(matches!(err, ClusterError::MemberExists(_)), "{err}");
    // The live one is untouched.
    assert_eq!(
        plane.members().await.unwrap()[&id("a")].addr,
        "127.0.0.1:7001"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_rejoins_once_its_old_lease_lapses() {
    let etcd = Etcd::start();
    let plane = plane(&etcd, "restart").await;
    let ttl = Duration::from_secs(2);
    let old = plane.join(member("a", 7001), ttl).await.unwrap();
    drop(old); // killed: its record stays until the lease lapses
    let again = plane.join(member("a", 7001), ttl).await;
    assert!(again.is_ok(), "{:?}", again.err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_outage_keeps_the_last_view_and_refuses_changes_then_recovers() {
    let mut etcd = Etcd::start();
    let plane = plane(&etcd, "outage").await;
    let map = plane.bootstrap(&id("a")).await.unwrap();
    let watch = plane.watch().await.unwrap();
    let _member = plane
        .join(member("a", 7001), Duration::from_secs(5))
        .await
        .unwrap();
    watch
        .wait_for(Duration::from_secs(5), |v| v.members.len() == 1)
        .await
        .unwrap();

    etcd.kill();
    let down = watch
        .wait_for(Duration::from_secs(10), |v| !v.connected)
        .await
        .expect("the watch notices the outage");
    assert_eq!(down.slot_map.as_ref(), Some(&map), "the last map is kept");

    let started = Instant::now();
    let err = plane
        .update(|m| m.assign(SlotRange::new(0, 0).unwrap(), &id("b")))
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::Unreachable { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a refused change answers within the timeout bound, took {:?}",
        started.elapsed()
    );

    etcd.restart();
    watch
        .wait_for(Duration::from_secs(20), |v| v.connected)
        .await
        .expect("the watch reconnects without a restart");
    // Changes work again and reach the watch.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match plane
            .update(|m| m.assign(SlotRange::new(0, 0).unwrap(), &id("b")))
            .await
        {
            Ok(_) => break,
            Err(e) if Instant::now() > deadline => panic!("etcd never came back: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    let after = watch
        .wait_for(Duration::from_secs(5), |v| {
            v.slot_map
                .as_ref()
                .is_some_and(|m| m.value.owner(0) == Some(&id("b")))
        })
        .await
        .expect("the change made after the outage reaches the watch");
    assert!(after.members.contains_key(&id("a")), "membership survived");
}
