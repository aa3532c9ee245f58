//! A live server's per-request hooks follow the running policy version: `POLICY LOAD`,
//! `USE` and `ROLLBACK` of a version with hooks put its hooks in charge of the cache, and a
//! version without hooks gives the cache back its built-in algorithm.

mod common;

use common::Serve;
use std::collections::HashMap;

fn stats(con: &mut redis::Connection) -> HashMap<String, redis::Value> {
    let pairs: Vec<(String, redis::Value)> = redis::cmd("CACHE").arg("STATS").query(con).unwrap();
    pairs.into_iter().collect()
}

fn objects(con: &mut redis::Connection) -> i64 {
    match stats(con).get("objects") {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("objects: {other:?}"),
    }
}

fn hooks(con: &mut redis::Connection) -> Option<String> {
    stats(con).get("hooks").map(|v| match v {
        redis::Value::Data(b) => String::from_utf8_lossy(b).into_owned(),
        redis::Value::Status(s) => s.clone(),
        other => panic!("hooks: {other:?}"),
    })
}

/// Reads a small and a large key (stored before); returns how many the cache holds after.
fn read_both(con: &mut redis::Connection) -> i64 {
    let small: Option<String> = redis::cmd("GET").arg("small").query(con).unwrap();
    let large: Option<String> = redis::cmd("GET").arg("large").query(con).unwrap();
    assert_eq!(small.map(|v| v.len()), Some(100));
    assert_eq!(large.map(|v| v.len()), Some(10_000));
    objects(con)
}

fn policy(con: &mut redis::Connection, args: &[&str]) -> String {
    let reply: redis::Value = redis::cmd("POLICY").arg(args).query(con).unwrap();
    format!("{reply:?}")
}

#[test]
fn policy_load_use_and_rollback_swap_the_hooks_of_a_live_cache() {
    let repo = common::repo();
    let source = |name: &str| std::fs::read_to_string(repo.join(name)).unwrap();
    let server = Serve::start(&["--max-keys", "100", "--policy", "policies/hooks/lru.lua"]);
    let mut con = server.client();
    let _: () = redis::cmd("SET")
        .arg("small")
        .arg("s".repeat(100))
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("large")
        .arg("l".repeat(10_000))
        .query(&mut con)
        .unwrap();
    assert_eq!(hooks(&mut con).as_deref(), Some("running"));
    // LRU hooks admit everything.
    assert_eq!(read_both(&mut con), 2);

    // Size-aware admission: the large object bypasses the cache from now on.
    policy(
        &mut con,
        &[
            "LOAD",
            "sizes",
            &source("policies/hooks/size_admission.lua"),
        ],
    );
    assert_eq!(hooks(&mut con).as_deref(), Some("running"));
    assert_eq!(
        read_both(&mut con),
        1,
        "size_admission.lua refuses the large key"
    );
    assert_eq!(read_both(&mut con), 1);

    // Back to the LRU hooks: everything is admitted again.
    policy(&mut con, &["ROLLBACK"]);
    assert_eq!(hooks(&mut con).as_deref(), Some("running"));
    assert_eq!(read_both(&mut con), 2);

    // USE of the stored admission version swaps it in again.
    policy(&mut con, &["USE", "sizes"]);
    assert_eq!(read_both(&mut con), 1);

    // A version without hooks: the built-in algorithm decides, no hooks field.
    policy(
        &mut con,
        &["LOAD", "plain", "function howmuch() return 0 end"],
    );
    assert_eq!(hooks(&mut con), None);
    assert_eq!(read_both(&mut con), 2);
    match stats(&mut con).get("algorithm") {
        Some(redis::Value::Data(b)) => assert_eq!(b, b"lru"),
        other => panic!("algorithm: {other:?}"),
    }
    // The journal says what happened.
    let log = policy(&mut con, &["LOG", "50"]);
    assert!(log.contains("per-request hooks decide"), "{log}");
    assert!(log.contains("no per-request hooks"), "{log}");
}

/// A hook that never ends is stopped by the budget in a live server as in replay, whether it
/// loops itself or is straight-line code reaching a loop through a metamethod (straight-line
/// hooks otherwise run without the count hook); LRU decides after, and the status says why.
#[test]
fn hooks_without_end_are_stopped_by_the_budget_in_a_live_server() {
    let server = Serve::start(&[
        "--max-keys",
        "100",
        "--policy",
        "policies/hooks/lru.lua",
        "--policy-instructions",
        "200000",
    ]);
    let mut con = server.client();
    let spin = "function() while true do end end";
    let cases = [
        (
            "loop",
            "function on_hit(o) while true do end end".to_string(),
        ),
        (
            "recursion",
            "function on_hit(o) return on_hit(o) end".to_string(),
        ),
        (
            "metamethod",
            format!(
                "m = setmetatable({{}}, {{__index = {spin}}})\nfunction on_hit(o) return m.x end"
            ),
        ),
        (
            "metatable_later",
            format!(
                "function on_insert(o) m = m or setmetatable({{}}, {{__index = {spin}}}) end\n\
                 function on_hit(o) return m.x end"
            ),
        ),
    ];
    for (name, source) in &cases {
        policy(&mut con, &["LOAD", name, source]);
        assert_eq!(hooks(&mut con).as_deref(), Some("running"), "{name}");
        let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
        for _ in 0..2 {
            let v: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
            assert_eq!(v.as_deref(), Some("v"), "{name}");
        }
        let status = hooks(&mut con).unwrap_or_default();
        assert!(
            status.contains("failed, LRU decides")
                && status.contains("instruction budget of 200000"),
            "{name}: {status}"
        );
    }
}
