//! Broken and hostile clients: each gets an error or a closed connection, and the server keeps
//! serving everyone else.

mod common;

use common::{request, RawClient, Rng, TestServer};
use std::io::Write;
use std::time::Duration;

fn server_with(tweak: impl FnOnce(&mut server::Config)) -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), tweak);
    (dir, server)
}

/// The server still answers a well-behaved client.
fn assert_alive(server: &TestServer) {
    let mut raw = server.raw();
    raw.send(b"*1\r\n$4\r\nPING\r\n");
    assert_eq!(raw.line(), "+PONG\r\n");
}

#[test]
fn malformed_frames_get_a_protocol_error_and_a_close() {
    let (_dir, server) = server_with(|_| {});
    for bad in [
        &b"*2\r\n:1\r\n:2\r\n"[..],
        b"*1\r\n$abc\r\n",
        b"*1\r\n$-5\r\n",
        b"*-x\r\n",
        b"*1\r\n$3\r\nGETXX",
        b"*99999999999999999999999999\r\n",
    ] {
        let mut raw = server.raw();
        raw.send(bad);
        let line = raw.line();
        assert!(
            line.starts_with("-ERR Protocol error"),
            "{bad:?} -> {line:?}"
        );
        assert!(raw.is_closed(), "{bad:?} left the connection open");
    }
    assert_alive(&server);
}

#[test]
fn oversized_bulk_lengths_are_refused_before_any_allocation() {
    let (_dir, server) = server_with(|config| config.proto_max_bulk_len = 1024 * 1024);
    let mut raw = server.raw();
    // Declares 1 TiB: refused from the header alone, nothing allocated.
    raw.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1099511627776\r\n");
    assert_eq!(raw.line(), "-ERR Protocol error: invalid bulk length\r\n");
    assert!(raw.is_closed());
    // Exactly at the limit is fine.
    let value = vec![b'x'; 1024 * 1024];
    let mut raw = server.raw();
    raw.send(&request(&[b"SET", b"big", &value]));
    assert_eq!(raw.line(), "+OK\r\n");
    let mut c = server.client();
    let got: Vec<u8> = redis::Commands::get(&mut c, "big").unwrap();
    assert_eq!(got.len(), value.len());
    // The limit can be raised at run time.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("proto-max-bulk-len")
        .arg("2MiB")
        .query(&mut c)
        .unwrap();
    let mut raw = server.raw();
    raw.send(&request(&[b"SET", b"bigger", &vec![b'y'; 1536 * 1024]]));
    assert_eq!(raw.line(), "+OK\r\n");
}

#[test]
fn half_frames_and_vanishing_clients_do_not_disturb_others() {
    let (_dir, server) = server_with(|_| {});
    let mut halves = Vec::new();
    for cut in [1, 3, 9, 14, 20] {
        let mut raw = server.raw();
        raw.send(&request(&[b"SET", b"key", b"a value"])[..cut]);
        halves.push(raw);
    }
    assert_alive(&server);
    // A half frame completed later is served normally.
    let full = request(&[b"SET", b"key", b"a value"]);
    let mut raw = server.raw();
    raw.send(&full[..10]);
    std::thread::sleep(Duration::from_millis(50));
    raw.send(&full[10..]);
    assert_eq!(raw.line(), "+OK\r\n");
    // The half-frame clients vanish mid-request.
    drop(halves);
    // A client that sends a request and leaves before reading the reply.
    {
        let mut raw = server.raw();
        raw.send(&request(&[b"SET", b"gone", b"1"]));
    }
    assert_alive(&server);
    let mut c = server.client();
    let v: String = redis::Commands::get(&mut c, "key").unwrap();
    assert_eq!(v, "a value");
}

#[test]
fn thousands_of_pipelined_commands_are_all_answered_in_order() {
    let (_dir, server) = server_with(|_| {});
    let mut raw = server.raw();
    let n = 5_000;
    let mut batch = Vec::new();
    for i in 0..n {
        batch.extend(request(&[
            b"SET",
            format!("p{i}").as_bytes(),
            format!("{i}").as_bytes(),
        ]));
        batch.extend(request(&[b"GET", format!("p{i}").as_bytes()]));
    }
    // Written from another thread: the replies (which we only read afterwards) would
    // otherwise fill both socket buffers and deadlock the test itself.
    let mut writer = raw.stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || writer.write_all(&batch).unwrap());
    for i in 0..n {
        assert_eq!(raw.line(), "+OK\r\n", "SET #{i}");
        let value = format!("{i}");
        assert_eq!(raw.line(), format!("${}\r\n", value.len()));
        assert_eq!(raw.line(), format!("{value}\r\n"));
    }
    sender.join().unwrap();
    // Inline commands pipeline too.
    raw.send(b"PING\r\nPING\r\nECHO hi\r\n");
    assert_eq!(raw.line(), "+PONG\r\n");
    assert_eq!(raw.line(), "+PONG\r\n");
    assert_eq!(raw.line(), "$2\r\n");
    assert_eq!(raw.line(), "hi\r\n");
}

#[test]
fn random_bytes_never_take_the_server_down() {
    let (_dir, server) = server_with(|config| config.proto_max_bulk_len = 1024 * 1024);
    let mut rng = Rng(0x6d616e746c65);
    for round in 0..200 {
        let mut raw = RawClient::connect(server.addr);
        raw.stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let len = 1 + (rng.next() % 4096) as usize;
        let mut junk = rng.bytes(len);
        // Half the rounds start like a request, to get past the first byte.
        if round % 2 == 0 {
            junk.splice(0..0, b"*3\r\n$3\r\nSET\r\n".iter().copied());
        }
        let _ = raw.stream.write_all(&junk);
        // Whatever the server answers, it must not hang the test or crash.
        let _ = raw.read_exact_len(1);
    }
    assert_alive(&server);
    let stats = server.db.stats();
    assert!(server::metrics::Stats::read(&stats.protocol_errors) > 0);
}

#[test]
fn maxclients_rejects_the_extra_client_only() {
    let (_dir, server) = server_with(|config| config.maxclients = 3);
    let mut held: Vec<RawClient> = (0..3).map(|_| server.raw()).collect();
    for raw in &mut held {
        raw.send(b"PING\r\n");
        assert_eq!(raw.line(), "+PONG\r\n");
    }
    let mut extra = server.raw();
    assert_eq!(extra.line(), "-ERR max number of clients reached\r\n");
    assert!(extra.is_closed());
    // The clients already connected are unaffected; once one leaves, a new one gets in.
    held[0].send(b"PING\r\n");
    assert_eq!(held[0].line(), "+PONG\r\n");
    drop(held.pop());
    let mut again = None;
    for _ in 0..100 {
        let mut raw = server.raw();
        raw.send(b"PING\r\n");
        if raw.line() == "+PONG\r\n" {
            again = Some(raw);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(again.is_some(), "a freed slot is reused");
}

#[test]
fn an_endless_inline_line_is_cut_off() {
    let (_dir, server) = server_with(|_| {});
    let mut raw = server.raw();
    let _ = raw.stream.write_all(&vec![b'a'; 70 * 1024]);
    assert_eq!(
        raw.line(),
        "-ERR Protocol error: too big inline request\r\n"
    );
    assert!(raw.is_closed());
    assert_alive(&server);
}
