//! MULTI / EXEC / DISCARD / WATCH from clients: the `redis` crate's atomic pipeline (what
//! redis-py's default `pipeline()` sends), raw scripts, the queue's bound, atomicity under
//! concurrent clients, WATCH against another connection, and durability across a restart.

mod common;

use common::{request, RawClient, TestServer};
use redis::Commands;

fn server() -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |_| {});
    (dir, server)
}

/// Sends `requests` in one write and reads one line-level reply per expected line.
fn script(client: &mut RawClient, requests: &[&[&str]]) {
    let mut bytes = Vec::new();
    for args in requests {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        bytes.extend(request(&args));
    }
    client.send(&bytes);
}

#[test]
fn an_atomic_pipeline_applies_and_answers_every_command() {
    let (_dir, server) = server();
    let mut con = server.client();
    let (set, incr, value): (String, i64, String) = redis::pipe()
        .atomic()
        .set("a", "1")
        .incr("n", 5)
        .get("a")
        .query(&mut con)
        .unwrap();
    assert_eq!((set.as_str(), incr, value.as_str()), ("OK", 5, "1"));
}

#[test]
fn queue_time_errors_abort_and_runtime_errors_are_entries() {
    let (_dir, server) = server();
    let mut raw = server.raw();
    script(
        &mut raw,
        &[
            &["MULTI"],
            &["SET", "k", "v"],
            &["NOSUCH"],
            &["EXEC"],
            &["GET", "k"],
        ],
    );
    assert_eq!(raw.line(), "+OK\r\n");
    assert_eq!(raw.line(), "+QUEUED\r\n");
    assert!(raw.line().starts_with("-ERR unknown command 'NOSUCH'"));
    assert_eq!(
        raw.line(),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(
        raw.line(),
        "$-1\r\n",
        "nothing of the aborted transaction applied"
    );

    script(
        &mut raw,
        &[
            &["MULTI"],
            &["SET", "k", "text"],
            &["INCR", "k"],
            &["SET", "j", "1"],
            &["EXEC"],
        ],
    );
    for _ in 0..4 {
        let line = raw.line();
        assert!(line == "+OK\r\n" || line == "+QUEUED\r\n", "{line}");
    }
    assert_eq!(raw.line(), "*3\r\n");
    assert_eq!(raw.line(), "+OK\r\n");
    assert_eq!(
        raw.line(),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(raw.line(), "+OK\r\n");

    script(
        &mut raw,
        &[
            &["EXEC"],
            &["DISCARD"],
            &["MULTI"],
            &["MULTI"],
            &["WATCH", "x"],
        ],
    );
    assert_eq!(raw.line(), "-ERR EXEC without MULTI\r\n");
    assert_eq!(raw.line(), "-ERR DISCARD without MULTI\r\n");
    assert_eq!(raw.line(), "+OK\r\n");
    assert_eq!(raw.line(), "-ERR MULTI calls can not be nested\r\n");
    assert_eq!(raw.line(), "-ERR WATCH inside MULTI is not allowed\r\n");
    script(&mut raw, &[&["DISCARD"]]);
    assert_eq!(raw.line(), "+OK\r\n");
}

#[test]
fn a_watched_key_changed_by_another_client_aborts_exec() {
    let (_dir, server) = server();
    let mut watcher = server.client();
    let mut other = server.client();
    let _: () = watcher.set("w", "1").unwrap();
    let _: () = redis::cmd("WATCH").arg("w").query(&mut watcher).unwrap();
    let _: () = other.set("w", "2").unwrap();
    let result: Option<(String,)> = redis::pipe()
        .atomic()
        .set("w", "3")
        .query(&mut watcher)
        .unwrap();
    assert_eq!(result, None, "EXEC must answer a null array");
    let value: String = watcher.get("w").unwrap();
    assert_eq!(value, "2");

    // Unchanged: it runs (and EXEC unwatched, so the next transaction runs too).
    let _: () = redis::cmd("WATCH").arg("w").query(&mut watcher).unwrap();
    let ran: Option<(String,)> = redis::pipe()
        .atomic()
        .set("w", "4")
        .query(&mut watcher)
        .unwrap();
    assert_eq!(ran, Some(("OK".to_string(),)));
}

#[test]
fn a_flush_by_another_client_aborts_exec_watching_a_key_it_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |c| c.enable_flush = true);
    let mut watcher = server.client();
    let mut other = server.client();
    for flush in ["FLUSHALL", "FLUSHDB"] {
        let _: () = watcher.set("w", "1").unwrap();
        let _: () = redis::cmd("WATCH").arg("w").query(&mut watcher).unwrap();
        let _: () = redis::cmd(flush).query(&mut other).unwrap();
        let result: Option<(String,)> = redis::pipe()
            .atomic()
            .set("w", "2")
            .query(&mut watcher)
            .unwrap();
        assert_eq!(
            result, None,
            "{flush} deleted a watched key: EXEC must abort"
        );
        let value: Option<String> = watcher.get("w").unwrap();
        assert_eq!(value, None, "the aborted transaction wrote nothing");
    }
    // As in Redis 7, a watched key that did not exist is not changed by a flush.
    let _: () = redis::cmd("WATCH")
        .arg("absent")
        .query(&mut watcher)
        .unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut other).unwrap();
    let ran: Option<(String,)> = redis::pipe()
        .atomic()
        .set("absent", "3")
        .query(&mut watcher)
        .unwrap();
    assert_eq!(ran, Some(("OK".to_string(),)));
}

#[test]
fn the_queue_is_bounded() {
    let (_dir, server) = server();
    let mut raw = server.raw();
    let limit = 100_000;
    let mut bytes = request(&[b"MULTI"]);
    for _ in 0..=limit {
        bytes.extend(request(&[b"PING"]));
    }
    bytes.extend(request(&[b"EXEC"]));
    raw.send(&bytes);
    assert_eq!(raw.line(), "+OK\r\n");
    for i in 0..limit {
        assert_eq!(raw.line(), "+QUEUED\r\n", "request {i}");
    }
    let refused = raw.line();
    assert!(
        refused.starts_with("-ERR a transaction queues at most 100000 commands"),
        "{refused}"
    );
    assert_eq!(
        raw.line(),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
}

#[test]
fn concurrent_transactions_never_interleave() {
    let (_dir, server) = server();
    let url = server.url();
    let writers: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                for _ in 0..200 {
                    let _: (i64, i64) = redis::pipe()
                        .atomic()
                        .incr("a", 1)
                        .incr("b", 1)
                        .query(&mut con)
                        .unwrap();
                }
            })
        })
        .collect();
    let mut reader = server.client();
    for _ in 0..200 {
        let ((a, b),): ((Option<i64>, Option<i64>),) = redis::pipe()
            .atomic()
            .cmd("MGET")
            .arg("a")
            .arg("b")
            .query(&mut reader)
            .unwrap();
        assert_eq!(a, b, "a reader saw half a transaction");
    }
    for writer in writers {
        writer.join().unwrap();
    }
    let total: (i64, i64) = redis::cmd("MGET")
        .arg("a")
        .arg("b")
        .query(&mut reader)
        .unwrap();
    assert_eq!(total, (600, 600), "no increment lost");
}

#[test]
fn an_acknowledged_exec_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let server = TestServer::rocks(dir.path(), |_| {});
        let mut con = server.client();
        let _: (String, i64, i64) = redis::pipe()
            .atomic()
            .set("s", "v")
            .incr("n", 7)
            .expire("s", 1000)
            .query(&mut con)
            .unwrap();
        server.shutdown().unwrap();
    }
    let server = TestServer::rocks(dir.path(), |_| {});
    let mut con = server.client();
    let (s, n): (String, i64) = redis::cmd("MGET")
        .arg("s")
        .arg("n")
        .query(&mut con)
        .unwrap();
    assert_eq!((s.as_str(), n), ("v", 7));
    let ttl: i64 = con.ttl("s").unwrap();
    assert!(ttl > 990 && ttl <= 1000, "{ttl}");
}
