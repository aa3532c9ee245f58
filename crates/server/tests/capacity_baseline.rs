//! The configured capacity is the baseline (issue 29 item 2): after a sizing policy shrank
//! the cache, a rollback to "no management" gives back `--max-keys` (or the last `CONFIG SET`),
//! and a `CONFIG SET` of the capacity survives a restart with the same flags. The cluster
//! case (etcd) is `crates/cli/tests/cluster_capacity.rs`.

mod common;

use common::TestServer;
use std::path::Path;

const SIZING: &str = "function howmuch() return {capacity = 246} end";

fn server(dir: &Path, max_keys: u64) -> TestServer {
    TestServer::rocks(dir, |c| {
        c.max_keys = Some(max_keys);
        c.manual_tick = true;
        c.policy_echo = false;
    })
}

fn max_keys(con: &mut redis::Connection) -> String {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("max-keys")
        .query(con)
        .unwrap();
    pair[1].clone()
}

/// Loads the sizing policy, runs one tick, checks it took effect, rolls back to none.
fn shrink_then_roll_back(con: &mut redis::Connection) {
    let _: i64 = redis::cmd("POLICY")
        .arg("LOAD")
        .arg("sizing")
        .arg(SIZING)
        .query(con)
        .unwrap();
    let _: redis::Value = redis::cmd("POLICY")
        .arg("TICK")
        .arg(1.0)
        .query(con)
        .unwrap();
    assert_eq!(max_keys(con), "246");
    let back: String = redis::cmd("POLICY").arg("ROLLBACK").query(con).unwrap();
    assert_eq!(back, "no management");
}

fn log_lines(con: &mut redis::Connection) -> Vec<String> {
    redis::cmd("POLICY").arg("LOG").arg(50).query(con).unwrap()
}

#[test]
fn a_rollback_to_no_management_restores_the_configured_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let node = server(dir.path(), 5000);
    let mut con = node.client();
    shrink_then_roll_back(&mut con);
    assert_eq!(max_keys(&mut con), "5000");
    let lines = log_lines(&mut con);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("event=capacity") && l.contains("restored the configured")),
        "{lines:#?}"
    );
}

#[test]
fn config_set_capacity_is_the_new_baseline_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let node = server(dir.path(), 5000);
    let mut con = node.client();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("max-keys")
        .arg(7000)
        .query(&mut con)
        .unwrap();
    shrink_then_roll_back(&mut con);
    assert_eq!(max_keys(&mut con), "7000");
    drop(con);
    node.shutdown().unwrap();

    // Same flags: the CONFIG SET holds.
    let node = server(dir.path(), 5000);
    assert_eq!(max_keys(&mut node.client()), "7000");
    node.shutdown().unwrap();

    // Other capacity flags: the operator asked for them, they win.
    let node = server(dir.path(), 100);
    assert_eq!(max_keys(&mut node.client()), "100");
}

/// A `CONFIG SET` that names no capacity leaves the size a running policy chose alone (the
/// baseline is only what the cache returns to without a policy).
#[test]
fn config_set_of_another_parameter_keeps_the_policys_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let node = server(dir.path(), 5000);
    let mut con = node.client();
    let _: i64 = redis::cmd("POLICY")
        .arg("LOAD")
        .arg("sizing")
        .arg(SIZING)
        .query(&mut con)
        .unwrap();
    let _: redis::Value = redis::cmd("POLICY")
        .arg("TICK")
        .arg(1.0)
        .query(&mut con)
        .unwrap();
    assert_eq!(max_keys(&mut con), "246");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-max-len")
        .arg(10)
        .query(&mut con)
        .unwrap();
    assert_eq!(max_keys(&mut con), "246");
}
