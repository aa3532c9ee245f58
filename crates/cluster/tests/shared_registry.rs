//! The policy registry and the central log in a real etcd on loopback: versions pushed
//! from several nodes at once are all kept under distinct numbers, the activation stack is a
//! compare-and-swap, the log is one ordered, bounded sequence whatever the number of
//! writers, and the registry's watch sees every push.

#![cfg(feature = "etcd")]

use cluster::testing::Etcd;
use cluster::{
    CentralLog, ClusterConfig, ControlPlane, Level, LogEntry, LogKind, NodeId, PolicyStore,
    SwapRefused, Versioned,
};
use std::collections::BTreeSet;
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
async fn concurrent_pushes_from_three_nodes_keep_every_version() {
    let etcd = Etcd::start();
    let mut pushers = Vec::new();
    for node in 0..3 {
        let store = PolicyStore::new(plane(&etcd, "reg").await);
        pushers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for i in 0..15 {
                let source = format!("node {node} push {i}");
                let n = store
                    .add_version("p", |n| (format!("{n}:{source}").into_bytes(), Vec::new()))
                    .await
                    .unwrap();
                got.push(n);
            }
            got
        }));
    }
    let mut numbers = BTreeSet::new();
    for pusher in pushers {
        for n in pusher.await.unwrap() {
            assert!(numbers.insert(n), "version {n} given out twice");
        }
    }
    assert_eq!(numbers, (1..=45).collect::<BTreeSet<u32>>());
    let store = PolicyStore::new(plane(&etcd, "reg").await);
    let all = store.versions().await.unwrap();
    assert_eq!(all.len(), 45, "every pushed version is stored");
    for (i, record) in all.iter().enumerate() {
        let text = String::from_utf8_lossy(record);
        assert!(text.starts_with(&format!("{}:", i + 1)), "{text}");
    }
    assert_eq!(store.latest("p").await.unwrap().unwrap().0, 45);
    assert!(store.latest("q").await.unwrap().is_none());
    assert!(store.version("p", 46).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_activation_stack_is_a_compare_and_swap_and_the_watch_sees_it() {
    let etcd = Etcd::start();
    let store = PolicyStore::new(plane(&etcd, "act").await);
    let watch = store.watch().await.unwrap();
    let mut changes = watch.subscribe();
    let empty = store.active().await.unwrap();
    assert_eq!((empty.value, empty.revision), (None, 0));
    let first = store
        .swap_active(0, b"[a@1]".to_vec(), None)
        .await
        .unwrap()
        .unwrap();
    let stale = store.swap_active(0, b"[b@1]".to_vec(), None).await.unwrap();
    let Err(SwapRefused::Changed(now)) = stale else {
        panic!("a second writer from the same revision loses: {stale:?}");
    };
    assert_eq!(now.value.as_deref(), Some(&b"[a@1]"[..]));
    assert_eq!(now.revision, first);
    store
        .swap_active(first, b"[a@1,b@1]".to_vec(), None)
        .await
        .unwrap()
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(5),
        changes.wait_for(|s| s.revision >= first && s.connected),
    )
    .await
    .expect("the watch reports the push")
    .unwrap();
    store.set_param("target", b"5".to_vec()).await.unwrap();
    assert_eq!(
        store.params().await.unwrap(),
        vec![("target".to_string(), b"5".to_vec())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_central_log_is_one_bounded_sequence_for_all_writers() {
    let etcd = Etcd::start();
    let capacity = 25;
    let mut writers = Vec::new();
    for node in ["a", "b", "c"] {
        let log = CentralLog::new(plane(&etcd, "log").await, id(node), capacity);
        writers.push(tokio::spawn(async move {
            for i in 0..12 {
                let entry = LogEntry::new(Level::Info, LogKind::Activated, "p@1", &format!("{i}"));
                log.append(&[entry]).await.unwrap();
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let log = CentralLog::new(plane(&etcd, "log").await, id("d"), capacity);
    let all = log.tail(1_000).await.unwrap();
    assert_eq!(all.len() as u64, capacity, "trimmed to the last {capacity}");
    let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (12..=36).collect::<Vec<u64>>(),
        "one gap-free sequence"
    );
    assert_eq!(log.tail(2).await.unwrap(), all[all.len() - 2..].to_vec());
    let nodes: BTreeSet<&str> = all.iter().map(|e| e.node.as_str()).collect();
    assert_eq!(nodes, ["a", "b", "c"].into_iter().collect());

    // The queue writes in the background and flushes on demand.
    let queue = log.clone().queue();
    let entry = LogEntry::migration_begun("0-99", &id("a"), &id("b"));
    assert!(queue.push(entry));
    assert!(queue.flush(Duration::from_secs(5)).await);
    let last = log.tail(1).await.unwrap().pop().unwrap();
    assert_eq!(
        (last.seq, last.kind.as_str(), last.node.as_str()),
        (37, "migration_begun", "d")
    );
    assert!(last
        .line()
        .contains("event=migration_begun policy=- msg=\"slots 0-99 from a to b\" node=d"));
}

/// Pruning deletes a version's record and listing in one transaction that fails when the
/// activation stack changed since the caller read it (another node may have activated one
/// of the versions it chose), and a pruned version is not served from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_is_refused_when_the_stack_changed_and_forgets_the_versions() {
    let etcd = Etcd::start();
    let store = PolicyStore::new(plane(&etcd, "prune").await);
    for i in 1..=5u32 {
        let n = store
            .add_version("p", |n| {
                (
                    format!("src {n}").into_bytes(),
                    format!("meta {i}").into_bytes(),
                )
            })
            .await
            .unwrap();
        assert_eq!(n, i);
    }
    let listed = store.listings().await.unwrap();
    assert_eq!(listed.len(), 5);
    assert_eq!(listed[0], ("p".to_string(), 1, Some(b"meta 1".to_vec())));
    let seen = store
        .swap_active(0, b"[p@5]".to_vec(), None)
        .await
        .unwrap()
        .unwrap();
    let changed = store
        .swap_active(seen, b"[p@1]".to_vec(), None)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !store.prune("p", &[1, 2], seen).await.unwrap(),
        "stack changed since"
    );
    assert_eq!(store.numbers("p").await.unwrap(), [1, 2, 3, 4, 5]);
    assert!(store.prune("p", &[2, 3], changed).await.unwrap());
    assert_eq!(store.numbers("p").await.unwrap(), [1, 4, 5]);
    assert_eq!(
        store.listings().await.unwrap().len(),
        3,
        "listings pruned too"
    );
    assert!(
        store.version("p", 2).await.unwrap().is_none(),
        "not served from the cache"
    );
    // Numbers are never given out twice, even after pruning the newest's neighbours.
    let next = store
        .add_version("p", |n| (n.to_string().into_bytes(), Vec::new()))
        .await
        .unwrap();
    assert_eq!(next, 6);
}

/// The race between a prune on one node and `POLICY USE` of the pruned version on another:
/// the user has read version 2 (it is in its cache, as the watch leaves it), the pruner
/// deletes it (the stack it compares has not changed yet), and the user's swap must then be
/// refused, naming the version, instead of leaving a stack that points at nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activating_a_version_pruned_meanwhile_is_refused_and_names_it() {
    let etcd = Etcd::start();
    let user = PolicyStore::new(plane(&etcd, "race").await);
    let pruner = PolicyStore::new(plane(&etcd, "race").await);
    for _ in 0..3 {
        user.add_version("p", |n| (format!("src {n}").into_bytes(), Vec::new()))
            .await
            .unwrap();
    }
    let seen = user
        .swap_active(0, b"[p@3]".to_vec(), Some(("p", 3)))
        .await
        .unwrap()
        .unwrap();
    // `POLICY USE p@2` on the user's node has read the version...
    assert_eq!(user.version("p", 2).await.unwrap().unwrap(), b"src 2");
    // ...when the pruner, seeing the stack still at `seen`, deletes it.
    assert!(pruner.prune("p", &[1, 2], seen).await.unwrap());
    let refused = user
        .swap_active(seen, b"[p@3,p@2]".to_vec(), Some(("p", 2)))
        .await
        .unwrap();
    assert_eq!(
        refused,
        Err(SwapRefused::Missing {
            name: "p".into(),
            version: 2
        })
    );
    assert_eq!(
        user.active().await.unwrap(),
        Versioned {
            value: Some(b"[p@3]".to_vec()),
            revision: seen
        },
        "the stack still points at a version that exists"
    );
    assert!(
        user.version("p", 2).await.unwrap().is_none(),
        "the refused version is not served from the cache any more"
    );
    // A stack that changed meanwhile is reported as before, with the version present.
    let stale = user
        .swap_active(0, b"[p@3]".to_vec(), Some(("p", 3)))
        .await
        .unwrap();
    assert!(
        matches!(&stale, Err(SwapRefused::Changed(now)) if now.revision == seen),
        "{stale:?}"
    );
    // And the version that exists is activated.
    user.swap_active(seen, b"[p@3,p@3]".to_vec(), Some(("p", 3)))
        .await
        .unwrap()
        .unwrap();
}

/// The repair path: a record is deleted only if nobody rewrote it since it was read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_is_dropped_only_if_unchanged() {
    let etcd = Etcd::start();
    let store = PolicyStore::new(plane(&etcd, "drop").await);
    store.set_param("x", b"null".to_vec()).await.unwrap();
    let (raw, revision) = store.record("param/x").await.unwrap().unwrap();
    assert_eq!(raw, b"null");
    store.set_param("x", b"1".to_vec()).await.unwrap();
    assert!(!store
        .delete_if_unchanged("param/x", revision, &[])
        .await
        .unwrap());
    let (_, now) = store.record("param/x").await.unwrap().unwrap();
    assert!(store
        .delete_if_unchanged("param/x", now, &[])
        .await
        .unwrap());
    assert!(store.record("param/x").await.unwrap().is_none());
    assert!(store.records("param/").await.unwrap().is_empty());
}
