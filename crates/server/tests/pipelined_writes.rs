//! Pipelined SETs: the connection writes a pipeline's plain SETs to the store together (one
//! batch) instead of one by one. Every SET still gets its own reply in order, a command after
//! them sees them, and the key count stays exact.

mod common;

use common::TestServer;
use redis::Value;
use server::metrics::Stats;

fn server() -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |_| {});
    (dir, server)
}

fn ok() -> Value {
    Value::Okay
}

fn bulk(text: &str) -> Value {
    Value::Data(text.as_bytes().to_vec())
}

/// A mixed pipeline: plain SETs around SETs with options, reads and deletes; each reply is
/// the one the requests would get one at a time.
#[test]
fn pipelined_sets_answer_in_order_and_are_seen_by_what_follows() {
    let (_dir, server) = server();
    let mut c = server.client();
    #[rustfmt::skip]
    let replies: Vec<Value> = redis::pipe()
        .cmd("SET").arg("a").arg("1")
        .cmd("SET").arg("b").arg("2")
        .cmd("GET").arg("a")
        .cmd("SET").arg("a").arg("x").arg("NX")
        .cmd("SET").arg("c").arg("3")
        .cmd("DEL").arg("b")
        .cmd("GET").arg("b")
        .cmd("SET").arg("a").arg("4")
        .cmd("SET").arg("a").arg("5")
        .cmd("SET").arg("e").arg("6")
        .cmd("MGET").arg("a").arg("c").arg("e")
        .cmd("DBSIZE")
        .query(&mut c)
        .unwrap();
    let expected = vec![
        ok(),
        ok(),
        bulk("1"),
        Value::Nil,
        ok(),
        Value::Int(1),
        Value::Nil,
        ok(),
        ok(),
        ok(),
        Value::Bulk(vec![bulk("5"), bulk("3"), bulk("6")]),
        Value::Int(3),
    ];
    for (i, (got, want)) in replies.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "reply {i}");
    }
}

/// The error reply of a request in the middle of a run keeps its place (the redis crate turns
/// the first error of a pipeline into the query's error, so this reads raw replies).
#[test]
fn an_error_between_pipelined_sets_keeps_its_place() {
    let (_dir, server) = server();
    let mut raw = server.raw();
    let mut out = Vec::new();
    out.extend(common::request(&[b"SET", b"k1", b"v1"]));
    out.extend(common::request(&[b"SET", b"k2"]));
    out.extend(common::request(&[b"SET", b"k3", b"v3"]));
    out.extend(common::request(&[b"GET", b"k3"]));
    raw.send(&out);
    let mut line = || raw.line().trim_end().to_string();
    assert_eq!(line(), "+OK");
    assert!(line().starts_with("-ERR"), "the bad SET's error, second");
    assert_eq!(line(), "+OK");
    assert_eq!(line(), "$2");
    assert_eq!(line(), "v3");
}

/// The point of the change: the SETs of one pipeline reach the store as far fewer writes than
/// there are SETs (one when they arrive in one read), and repeated or new keys in one batch
/// still count right in DBSIZE.
#[test]
fn a_pipeline_of_sets_is_written_to_the_store_together() {
    let (_dir, server) = server();
    let mut c = server.client();
    let _: () = redis::cmd("SET").arg("old").arg("0").query(&mut c).unwrap();
    let before = Stats::read(&server.db.stats().store_writes);
    let mut pipe = redis::pipe();
    for i in 0..64 {
        pipe.cmd("SET").arg(format!("k{}", i % 16)).arg(i);
    }
    pipe.cmd("SET").arg("old").arg("1");
    let replies: Vec<Value> = pipe.query(&mut c).unwrap();
    assert!(replies.iter().all(|r| *r == Value::Okay), "{replies:?}");
    let writes = Stats::read(&server.db.stats().store_writes) - before;
    assert!(
        (1..65).contains(&writes),
        "65 pipelined SETs took {writes} store writes"
    );
    let size: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(size, 17, "k0..k15 once each, and old");
    let values: Vec<String> = redis::cmd("MGET")
        .arg(&["k0", "k15", "old"])
        .query(&mut c)
        .unwrap();
    assert_eq!(
        values,
        vec!["48", "63", "1"],
        "the last write of each key wins"
    );
}

/// A pipeline of reads longer than the keys the connection reads ahead at once
/// (`server::db::READ_AHEAD`), of present, missing and just rewritten keys: each reply is the
/// one the request would get alone (the read-ahead is only a hint).
#[test]
fn a_long_pipeline_of_reads_answers_each_as_alone() {
    let (_dir, server) = server();
    let mut c = server.client();
    let mut model = std::collections::HashMap::new();
    let mut pipe = redis::pipe();
    for i in 0..10 {
        pipe.cmd("SET").arg(format!("k{i}")).arg(format!("v{i}"));
        model.insert(format!("k{i}"), format!("v{i}"));
    }
    let _: Vec<Value> = pipe.query(&mut c).unwrap();
    let (mut pipe, mut expected) = (redis::pipe(), Vec::new());
    for i in 0..(4 * server::db::READ_AHEAD + 3) {
        let key = format!("k{}", i % 10);
        match i % 4 {
            1 => {
                pipe.cmd("GET").arg(format!("missing{i}"));
                expected.push(Value::Nil);
            }
            2 => {
                pipe.cmd("SET").arg(&key).arg(format!("w{i}"));
                model.insert(key, format!("w{i}"));
                expected.push(ok());
            }
            _ => {
                pipe.cmd("GET").arg(&key);
                expected.push(bulk(&model[&key]));
            }
        }
    }
    let replies: Vec<Value> = pipe.query(&mut c).unwrap();
    assert_eq!(replies, expected);
}
