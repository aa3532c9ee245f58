//! `--tick manual` and the access series on a real server over loopback: a tick runs only when
//! `POLICY TICK` asks, at the time it names; the shipped series policies (`decay.lua`,
//! `dscache.lua`) read what GETs and SETs recorded and size the cache, unchanged.

mod common;

use common::TestServer;
use redis::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

fn shipped(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../policies")
        .join(name)
}

fn manual(dir: &std::path::Path, policy: Option<&str>) -> TestServer {
    TestServer::rocks(dir, |c| {
        c.max_keys = Some(1_000);
        c.manual_tick = true;
        c.policy_echo = false;
        c.policy = policy.map(shipped);
    })
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::Data(d)) => String::from_utf8_lossy(d).into_owned(),
        Some(Value::Int(n)) => n.to_string(),
        Some(Value::Status(s)) => s.clone(),
        Some(Value::Nil) | None => String::new(),
        other => format!("{other:?}"),
    }
}

fn tick(c: &mut redis::Connection, now: f64) -> HashMap<String, Value> {
    redis::cmd("POLICY").arg("TICK").arg(now).query(c).unwrap()
}

fn clock(c: &mut redis::Connection, now: f64) {
    let _: () = redis::cmd("POLICY").arg("CLOCK").arg(now).query(c).unwrap();
}

fn set(c: &mut redis::Connection, key: &str) {
    let _: () = redis::cmd("SET").arg(key).arg("v").query(c).unwrap();
}

fn get(c: &mut redis::Connection, key: &str) {
    let _: Option<Vec<u8>> = redis::cmd("GET").arg(key).query(c).unwrap();
}

#[test]
fn a_manual_server_ticks_only_when_asked_and_replies_after_the_tick() {
    let dir = tempfile::tempdir().unwrap();
    let server = manual(dir.path(), Some("fixed.lua"));
    let mut c = server.client();
    let _: () = redis::cmd("POLICY")
        .arg("PARAM")
        .arg("n")
        .arg("5")
        .query(&mut c)
        .unwrap();
    for k in 0..20 {
        set(&mut c, &format!("k{k}"));
    }
    // No wall-clock tick ever comes: the cache stays over the policy's limit.
    std::thread::sleep(Duration::from_millis(1_500));
    let status: HashMap<String, Value> = redis::cmd("POLICY").arg("STATUS").query(&mut c).unwrap();
    assert_eq!(text(status.get("ticks")), "0");
    let reply = tick(&mut c, 100.0);
    assert_eq!(text(reply.get("tick")), "1");
    assert_eq!(text(reply.get("now")), "100");
    assert_eq!(text(reply.get("action")), "evict:15");
    // The reply comes after the action was applied.
    assert_eq!(text(reply.get("cache_objects")), "5");
    assert_eq!(text(reply.get("evictions")), "15");
    let again = tick(&mut c, 101.0);
    assert_eq!(text(again.get("tick")), "2");
    assert_eq!(text(again.get("action")), "");
    server.shutdown().unwrap();
}

#[test]
fn wall_clock_servers_refuse_manual_ticks_and_clock_changes() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |c| c.policy_echo = false);
    let mut c = server.client();
    let err = redis::cmd("POLICY")
        .arg("TICK")
        .query::<Value>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("--tick manual"), "{err}");
    let err = redis::cmd("POLICY")
        .arg("CLOCK")
        .arg(5)
        .query::<Value>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("--tick manual"), "{err}");
    server.shutdown().unwrap();
}

#[test]
fn decay_counts_the_keys_accessed_within_its_history_and_evicts_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let server = manual(dir.path(), Some("decay.lua"));
    let mut c = server.client();
    // 30 keys written at t=0, then 8 of them read at t=50: with a 10 s history only those 8
    // are alive at t=55.
    clock(&mut c, 0.0);
    for k in 0..30 {
        set(&mut c, &format!("k{k}"));
    }
    clock(&mut c, 50.0);
    for k in 0..8 {
        get(&mut c, &format!("k{k}"));
    }
    let reply = tick(&mut c, 55.0);
    assert_eq!(text(reply.get("series_events")), "38");
    assert_eq!(text(reply.get("series_keys")), "30");
    assert_eq!(text(reply.get("action")), "evict:22");
    assert_eq!(text(reply.get("cache_objects")), "8");
    server.shutdown().unwrap();
}

#[test]
fn dscache_sizes_the_cache_to_the_tallest_fan_of_the_served_accesses() {
    let dir = tempfile::tempdir().unwrap();
    let server = manual(dir.path(), Some("dscache.lua"));
    let mut c = server.client();
    // Two fans, each a basin read up its keys and back to its first: keys 0..39 (height 39),
    // then keys 40..59 (height 19). Target: ceil(39 * 1.5) + 2 = 61 objects.
    let basins = (0..40).chain([0]).chain(40..60).chain([40]);
    for (t, k) in basins.enumerate() {
        clock(&mut c, t as f64);
        set(&mut c, &format!("k{k}"));
    }
    let reply = tick(&mut c, 60.0);
    assert_eq!(text(reply.get("action")), "capacity:61");
    assert_eq!(text(reply.get("capacity_objects")), "61");
    server.shutdown().unwrap();
}

#[test]
fn a_zero_series_limit_hands_policies_an_empty_series() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |c| {
        c.manual_tick = true;
        c.policy_echo = false;
        c.timeseries = 0;
        c.policy = Some(shipped("dscache.lua"));
    });
    let mut c = server.client();
    for k in 0..60 {
        set(&mut c, &format!("k{k}"));
    }
    let reply = tick(&mut c, 1.0);
    assert_eq!(text(reply.get("series_events")), "0");
    assert_eq!(text(reply.get("action")), "");
    server.shutdown().unwrap();
}
