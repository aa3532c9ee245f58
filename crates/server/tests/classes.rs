//! `--classes` on a real server over loopback: `SET ... HINT` objects land in the class whose
//! `hint:` rule names them, a hard-pinned class is never evicted (by pressure, by a policy's
//! eviction or a resize) and holds its cap by refusing, and INFO and CACHE STATS report each
//! class.

mod common;

use common::TestServer;
use redis::Value;
use std::collections::HashMap;

const CLASSES: &str = "IO class id,IO class name,Eviction priority,Allocation
0,unclassified,5,1
1,hint:keep&done,,0.5
2,key_prefix:tmp:&done,9,0
";

fn start(dir: &std::path::Path) -> TestServer {
    TestServer::rocks(dir, |c| {
        c.max_keys = Some(10);
        c.policy_echo = false;
        c.classes = Some(cache::classes::ClassSet::parse(CLASSES, "test classes").unwrap());
    })
}

fn stats(c: &mut redis::Connection) -> HashMap<String, i64> {
    let pairs: HashMap<String, Value> = redis::cmd("CACHE").arg("STATS").query(c).unwrap();
    pairs
        .into_iter()
        .filter_map(|(k, v)| match v {
            Value::Int(n) => Some((k, n)),
            _ => None,
        })
        .collect()
}

#[test]
fn hard_pinned_hints_are_never_evicted_and_hold_their_cap() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = server.client();
    for k in 0..6 {
        let _: () = redis::cmd("SET")
            .arg(format!("pinned{k}"))
            .arg("v")
            .arg("HINT")
            .arg("keep")
            .query(&mut c)
            .unwrap();
    }
    for k in 0..30 {
        let _: () = redis::cmd("SET")
            .arg(format!("plain{k}"))
            .arg("v")
            .query(&mut c)
            .unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg("tmp:x")
        .arg("v")
        .query(&mut c)
        .unwrap();
    // The sixth pinned object is over the class's cap (half of 10): refused, yet stored.
    for k in 0..5 {
        assert!(server.db.is_cached(format!("pinned{k}").as_bytes()));
    }
    assert!(!server.db.is_cached(b"pinned5"));
    let v: Option<String> = redis::cmd("GET").arg("pinned5").query(&mut c).unwrap();
    assert_eq!(v.as_deref(), Some("v"));
    assert!(!server.db.is_cached(b"tmp:x"), "allocation 0: never cached");
    // A policy-sized eviction and a resize take everything but the pinned class.
    assert_eq!(server.db.evict(100), 5);
    let _: i64 = redis::cmd("CACHE")
        .arg("RESIZE")
        .arg("1")
        .query(&mut c)
        .unwrap();
    for k in 0..5 {
        assert!(server.db.is_cached(format!("pinned{k}").as_bytes()));
    }
    let s = stats(&mut c);
    assert_eq!(s["class_1_objects"], 5);
    assert_eq!(s["class_1_evictions"], 0);
    assert!(s["class_1_refused"] >= 1, "{s:?}");
    assert_eq!(s["class_2_bypassed"], 1);
    assert!(s["class_0_evictions"] >= 25, "{s:?}");
    let info: String = redis::cmd("INFO").arg("classes").query(&mut c).unwrap();
    assert!(info.contains("# Classes"), "{info}");
    assert!(
        info.contains("class_1:rule=hint:keep&done,priority=none,pinning=hard"),
        "{info}"
    );
    server.shutdown().unwrap();
}

/// Issue 25 item 10: clients inventing HINT names used to fill the name table, after which
/// `SET ... HINT keep` failed "too many cache classes" although `keep` is in `--classes`.
#[test]
fn fresh_hint_names_cannot_crowd_out_the_names_classes_match() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = server.client();
    let mut pipe = redis::pipe();
    let invented = server::hints::MAX_CLASSES + 6;
    for k in 0..invented {
        pipe.cmd("SET")
            .arg(format!("fresh{k}"))
            .arg("v")
            .arg("HINT")
            .arg(format!("name{k}"))
            .ignore();
    }
    let () = pipe.query(&mut c).unwrap();
    let _: () = redis::cmd("SET")
        .arg("pinned")
        .arg("v")
        .arg("HINT")
        .arg("keep")
        .query(&mut c)
        .unwrap();
    assert_eq!(server.db.cached_class(b"pinned").as_deref(), Some("keep"));
    assert_eq!(stats(&mut c)["class_1_objects"], 1);
    // Past the bound a fresh name is stored as no hint (the write itself succeeds).
    let v: Option<String> = redis::cmd("GET")
        .arg(format!("fresh{}", invented - 1))
        .query(&mut c)
        .unwrap();
    assert_eq!(v.as_deref(), Some("v"));
    let info: String = redis::cmd("INFO").arg("stats").query(&mut c).unwrap();
    // `keep` is reserved, so clients got MAX_CLASSES - 1 names and 7 were dropped.
    assert!(info.contains("hint_names_dropped:7"), "{info}");
    server.shutdown().unwrap();
}
