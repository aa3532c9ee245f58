//! Bounds a hostile or careless client runs into: replies larger than `--client-output-limit`,
//! HELLO options that must all hold before any applies, password guessing, idle scrapers on
//! the metrics endpoint, start-up flags out of range, and many clients together passing
//! `--maxmemory-clients`. Each returns an error (or a closed
//! connection) within a bound, and the server keeps serving.

mod common;

use common::{request, RawClient, TestServer};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn server_with(tweak: impl FnOnce(&mut server::Config)) -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), tweak);
    (dir, server)
}

fn ping(raw: &mut RawClient) {
    raw.send(&request(&[b"PING"]));
    assert_eq!(raw.line(), "+PONG\r\n");
}

fn info_field(raw: &mut RawClient, name: &str) -> String {
    raw.send(&request(&[b"INFO", b"clients", b"stats"]));
    let header = raw.line();
    let len: usize = header[1..header.len() - 2].parse().unwrap();
    let body = String::from_utf8(raw.read_exact_len(len + 2)).unwrap();
    body.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {body}"))
        .to_string()
}

#[test]
fn a_short_mget_cannot_make_a_huge_reply() {
    // The input: 4,000 times a 1 MiB key is a 36 KB request asking for 4 GiB.
    // (Without the server-wide bound, which with its default would refuse this first.)
    let (_dir, server) = server_with(|config| config.maxmemory_clients = 0);
    let mut raw = server.raw();
    raw.send(&request(&[b"SET", b"big", &vec![b'x'; 1 << 20]]));
    assert_eq!(raw.line(), "+OK\r\n");
    let mut args: Vec<&[u8]> = vec![b"MGET"];
    args.extend(std::iter::repeat_n(&b"big"[..], 4000));
    raw.send(&request(&args));
    let line = raw.line();
    assert!(
        line.starts_with("-ERR reply of") && line.contains("client-output-limit"),
        "{line}"
    );
    ping(&mut raw);
    assert_eq!(info_field(&mut raw, "client_output_limit_rejections"), "1");
}

#[test]
fn every_reply_is_held_to_the_output_limit() {
    let (_dir, server) = server_with(|config| {
        config.client_output_limit = 3 << 20;
        config.max_keys = Some(2); // most values come from the store, not the cache
    });
    let mut raw = server.raw();
    let value = vec![b'v'; 1 << 20];
    for i in 0..8 {
        raw.send(&request(&[b"SET", format!("k{i}").as_bytes(), &value]));
        assert_eq!(raw.line(), "+OK\r\n");
    }
    // Within the limit: answered.
    raw.send(&request(&[b"MGET", b"k0", b"k1", b"missing"]));
    assert_eq!(raw.line(), "*3\r\n");
    let rest = 2 * ((1 << 20) + 12) + 5;
    assert_eq!(raw.read_exact_len(rest).len(), rest);
    // Distinct keys read from the store, and one key repeated: refused either way.
    for keys in [
        (0..8).map(|i| format!("k{i}")).collect::<Vec<_>>(),
        vec!["k7".to_string(); 50],
    ] {
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(keys.iter().map(|k| k.as_bytes()));
        raw.send(&request(&args));
        let line = raw.line();
        assert!(line.contains("client-output-limit"), "{line}");
    }
    // A single value over the limit (the limit is below proto-max-bulk-len here).
    raw.send(&request(&[b"SET", b"huge", &vec![b'h'; 4 << 20]]));
    assert_eq!(raw.line(), "+OK\r\n");
    raw.send(&request(&[b"GET", b"huge"]));
    assert!(raw.line().contains("client-output-limit"));
    // Many big GETs pipelined are fine: each reply is within the limit, and pending replies
    // are written out as they pile up rather than buffered whole.
    let mut pipeline = Vec::new();
    for _ in 0..20 {
        pipeline.extend(request(&[b"GET", b"k1"]));
    }
    raw.send(&pipeline);
    for _ in 0..20 {
        assert_eq!(raw.line(), format!("${}\r\n", 1 << 20));
        assert_eq!(raw.read_exact_len((1 << 20) + 2).len(), (1 << 20) + 2);
    }
    ping(&mut raw);
    assert_eq!(info_field(&mut raw, "client_output_limit_rejections"), "3");
}

#[test]
fn hello_is_all_or_nothing() {
    let (_dir, server) = server_with(|config| config.requirepass = Some("pw".into()));
    let mut raw = server.raw();
    // A bad option after a good AUTH: nothing is applied, the connection stays a stranger.
    for bad in [
        &[
            &b"HELLO"[..],
            b"3",
            b"AUTH",
            b"default",
            b"pw",
            b"SETNAME",
            b"a b",
        ][..],
        &[
            b"HELLO", b"3", b"AUTH", b"default", b"pw", b"SETNAME", b"x\n",
        ],
        &[b"HELLO", b"4", b"AUTH", b"default", b"pw"],
        &[b"HELLO", b"3", b"AUTH", b"default", b"pw", b"BOGUS"],
    ] {
        raw.send(&request(bad));
        let line = raw.line();
        assert!(line.starts_with('-'), "{line}");
        raw.send(&request(&[b"GET", b"k"]));
        assert_eq!(raw.line(), "-NOAUTH Authentication required.\r\n");
    }
    raw.send(&request(&[
        b"HELLO", b"2", b"AUTH", b"default", b"pw", b"SETNAME", b"ok",
    ]));
    assert_eq!(raw.line(), "*14\r\n");
}

#[test]
fn password_guessing_is_slowed_and_then_disconnected() {
    let (_dir, server) = server_with(|config| config.requirepass = Some("pw".into()));
    let mut raw = server.raw();
    let started = Instant::now();
    for attempt in 1..=10 {
        raw.send(&request(&[b"AUTH", format!("guess{attempt}").as_bytes()]));
        let line = raw.line();
        if attempt < 10 {
            assert!(line.starts_with("-WRONGPASS"), "{attempt}: {line}");
        } else {
            assert!(line.contains("too many failed authentication"), "{line}");
        }
    }
    assert!(raw.is_closed(), "closed after the tenth wrong password");
    // Not a performance assert: the delays are the feature (0.1 s per failure and growing).
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // A HELLO with a wrong password counts the same way; the right one still works.
    let mut raw = server.raw();
    raw.send(&request(&[b"HELLO", b"3", b"AUTH", b"default", b"nope"]));
    assert!(raw.line().starts_with("-WRONGPASS"));
    raw.send(&request(&[b"AUTH", b"pw"]));
    assert_eq!(raw.line(), "+OK\r\n");
    assert_eq!(info_field(&mut raw, "auth_failures"), "11");
}

#[test]
fn idle_scrapers_cannot_take_the_metrics_endpoint() {
    let (_dir, server) = server_with(|config| {
        config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    });
    let addr = server.metrics_addr.unwrap();
    // Connections that never send a request hold every slot...
    let idle: Vec<TcpStream> = (0..server::http::MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // ...and further ones are turned away at once instead of piling up.
    for _ in 0..20 {
        let mut extra = TcpStream::connect(addr).unwrap();
        extra
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        let mut answer = String::new();
        extra.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    }
    drop(idle);
    // Once they are gone, scraping works again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        if answer.starts_with("HTTP/1.1 200") {
            assert!(answer.contains("mantle_auth_failures_total 0"), "{answer}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "metrics never came back: {answer:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn thread_counts_out_of_range_are_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    for threads in [1025, 100_000, usize::MAX] {
        let mut config = server::Config::new(server::Backend::RocksDb {
            data_dir: dir.path().to_path_buf(),
            fsync: server::Fsync::No,
        });
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.threads = threads;
        // `serve` would run until a signal if it started; bound the wait.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(server::serve(config).map_err(|e| format!("{e:#}")));
        });
        let result = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("serve neither failed nor returned");
        let err = result.unwrap_err();
        assert!(err.contains(&format!("--threads {threads}")), "{err}");
    }
}

fn info_number(raw: &mut RawClient, name: &str) -> u64 {
    info_field(raw, name).trim().parse().unwrap()
}

/// Issue 25 item 5: limits were per connection only; several clients each asking for a reply
/// within `--client-output-limit` and never reading it made the server abort. Now the reply
/// that would take all clients past `--maxmemory-clients` is refused, the connection usable.
#[test]
fn unread_replies_of_many_clients_are_held_to_one_total() {
    let (_dir, server) = server_with(|config| {
        config.maxmemory_clients = 24 << 20;
        config.max_keys = Some(10);
    });
    let mut setup = server.raw();
    setup.send(&request(&[b"SET", b"big", &vec![b'x'; 256 << 10]]));
    assert_eq!(setup.line(), "+OK\r\n");
    let mut mget: Vec<&[u8]> = vec![b"MGET"];
    mget.extend(std::iter::repeat_n(&b"big"[..], 64)); // a 16 MiB reply
    let mget = request(&mget);

    let mut hoarder = server.raw();
    hoarder.send(&mget);
    // Its reply is queued (and mostly unsent: the hoarder does not read).
    let deadline = Instant::now() + Duration::from_secs(20);
    while info_number(&mut setup, "clients_memory") < 16 << 20 {
        assert!(
            Instant::now() < deadline,
            "the first reply was never queued"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut second = server.raw();
    second.send(&mget);
    let line = second.line();
    assert!(
        line.starts_with("-ERR client memory limit reached") && line.contains("maxmemory-clients"),
        "{line}"
    );
    ping(&mut second);
    assert!(info_number(&mut setup, "client_memory_refusals") >= 1);
    // The hoarder still gets its whole reply.
    assert_eq!(hoarder.line(), "*64\r\n");
    for _ in 0..64 {
        assert_eq!(hoarder.line(), format!("${}\r\n", 256 << 10));
        assert_eq!(
            hoarder.read_exact_len((256 << 10) + 2).len(),
            (256 << 10) + 2
        );
    }
    ping(&mut hoarder);
    // Nothing held is left over once replies are read and connections close.
    drop((hoarder, second));
    let deadline = Instant::now() + Duration::from_secs(20);
    while info_number(&mut setup, "clients_memory") > 1 << 20 {
        assert!(
            Instant::now() < deadline,
            "client memory was not given back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 25 item 5: eight clients each streaming a 500 MB SET made the server abort. The
/// connection whose input would take all clients past `--maxmemory-clients` is closed with an
/// error; the others go on.
#[test]
fn streamed_requests_of_many_clients_are_held_to_one_total() {
    let (_dir, server) = server_with(|config| config.maxmemory_clients = 24 << 20);
    let header = |len: usize| format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${len}\r\n").into_bytes();
    let value_len = 10 << 20;
    let mut first = server.raw();
    first.send(&header(value_len));
    first.send(&vec![b'a'; value_len - 1]);
    let mut setup = server.raw();
    let deadline = Instant::now() + Duration::from_secs(20);
    while info_number(&mut setup, "clients_memory") < 10 << 20 {
        assert!(
            Instant::now() < deadline,
            "the first request was never buffered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A second stream of the same size passes the total: refused, connection closed.
    let mut second = TcpStream::connect(server.addr).unwrap();
    second
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut writer = second.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(&header(value_len));
        let chunk = vec![b'b'; 1 << 20];
        for _ in 0..10 {
            if writer.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let mut reply = String::new();
    let _ = second.read_to_string(&mut reply);
    sender.join().unwrap();
    assert!(
        reply.starts_with("-ERR client memory limit reached")
            && reply.contains("closing the connection"),
        "{reply}"
    );
    assert!(info_number(&mut setup, "client_memory_refusals") >= 1);
    // The first client finishes its request as if nothing happened.
    first.send(b"a\r\n");
    assert_eq!(first.line(), "+OK\r\n");
    let mut get = server.client();
    let value: Vec<u8> = redis::cmd("GET").arg("k").query(&mut get).unwrap();
    assert_eq!(value.len(), value_len);
}

/// With the total at the bound, a new client was the one whose first buffers passed it, and
/// was closed while the client holding the memory went on (the memory soak caught a `PING`
/// refused so). A connection's first buffers are granted; its growth past them is not.
#[test]
fn a_new_client_is_served_with_the_total_at_the_bound() {
    let (_dir, server) = server_with(|config| config.maxmemory_clients = 64 << 20);
    let mut setup = server.raw();
    setup.send(&request(&[b"SET", b"big", &vec![b'x'; 256 << 10]]));
    assert_eq!(setup.line(), "+OK\r\n");
    // A 16 MiB reply the hoarder never reads: its output buffer stays as it is.
    let mut mget: Vec<&[u8]> = vec![b"MGET"];
    mget.extend(std::iter::repeat_n(&b"big"[..], 64));
    let mut hoarder = server.raw();
    hoarder.send(&request(&mget));
    let deadline = Instant::now() + Duration::from_secs(20);
    while info_number(&mut setup, "clients_memory") < 16 << 20 {
        assert!(Instant::now() < deadline, "the reply was never queued");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The clients now hold more than the bound (lowering it takes nothing back).
    let bound = info_number(&mut setup, "clients_memory") / 2;
    setup.send(&request(&[
        b"CONFIG",
        b"SET",
        b"maxmemory-clients",
        bound.to_string().as_bytes(),
    ]));
    assert_eq!(setup.line(), "+OK\r\n");

    for _ in 0..3 {
        let mut fresh = server.raw();
        ping(&mut fresh);
        fresh.send(&request(&[b"SET", b"small", b"value"]));
        assert_eq!(fresh.line(), "+OK\r\n");
    }
    // Growth past the first buffers is still refused.
    let mut grower = TcpStream::connect(server.addr).unwrap();
    grower
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let _ = grower.write_all(&request(&[b"SET", b"g", &vec![b'g'; 1 << 20]]));
    let mut reply = String::new();
    let _ = grower.read_to_string(&mut reply);
    assert!(
        reply.starts_with("-ERR client memory limit reached")
            && reply.contains("closing the connection"),
        "{reply}"
    );
    // With the hoarder gone and the bound lifted the same growth is served.
    drop(hoarder);
    setup.send(&request(&[b"CONFIG", b"SET", b"maxmemory-clients", b"0"]));
    assert_eq!(setup.line(), "+OK\r\n");
    let mut grower = server.raw();
    grower.send(&request(&[b"SET", b"g", &vec![b'g'; 1 << 20]]));
    assert_eq!(grower.line(), "+OK\r\n");
}

/// The server-wide bound is a CONFIG parameter like Redis's.
#[test]
fn maxmemory_clients_is_read_and_set_by_config() {
    let (_dir, server) = server_with(|_| {});
    let mut c = server.client();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-clients")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, ["maxmemory-clients", "2147483648"]);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-clients")
        .arg("64MiB")
        .query(&mut c)
        .unwrap();
    let mut raw = server.raw();
    assert_eq!(info_number(&mut raw, "maxmemory_clients"), 64 << 20);
}

/// Issue 25, low: `CACHE RESIZE 18446744073709551615` made INFO show a capacity of -1, `CONFIG
/// SET maxmemory 18446744073709551615` read back as 0, and `CONFIG SET` took a parameter
/// twice. Capacities are range-checked where they are parsed (one rule for the flags, CONFIG
/// and CACHE RESIZE), and duplicates are refused as Redis refuses them.
#[test]
fn capacities_out_of_range_and_duplicate_parameters_are_refused() {
    let (_dir, server) = server_with(|config| config.max_keys = Some(100));
    let mut c = server.client();
    let huge = u64::MAX.to_string();
    let err = redis::cmd("CACHE")
        .arg("RESIZE")
        .arg(&huge)
        .query::<i64>(&mut c)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("above the largest supported capacity"),
        "{err}"
    );
    for name in ["maxmemory", "max-keys"] {
        let err = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(&huge)
            .query::<()>(&mut c)
            .unwrap_err();
        assert!(
            err.to_string().contains("9007199254740992"),
            "{name}: {err}"
        );
    }
    let err = redis::cmd("CONFIG")
        .arg("SET")
        .arg("max-keys")
        .arg("5")
        .arg("MAX-KEYS")
        .arg("6")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("duplicate parameter"), "{err}");
    // Nothing of a refused CONFIG SET applies; the largest capacity reads back as itself.
    let keys: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("max-keys")
        .query(&mut c)
        .unwrap();
    assert_eq!(keys[1], "100");
    let top = (1u64 << 53).to_string();
    let _: i64 = redis::cmd("CACHE")
        .arg("RESIZE")
        .arg(&top)
        .query(&mut c)
        .unwrap();
    let info: String = redis::cmd("INFO").arg("cache").query(&mut c).unwrap();
    assert!(
        info.contains(&format!("cache_capacity_objects:{top}")),
        "{info}"
    );
    let mut bad = server::Config::new(server::Backend::RocksDb {
        data_dir: std::path::PathBuf::from("/nonexistent"),
        fsync: server::Fsync::No,
    });
    bad.maxmemory = Some(u64::MAX);
    let err = bad.validate().unwrap_err();
    assert!(
        err.contains("--maxmemory 18446744073709551615 is above"),
        "{err}"
    );
}
