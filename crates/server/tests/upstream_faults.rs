//! A tier in front of an upstream that freezes, closes, lies about reply sizes, breaks in the
//! middle of a write or is down: every client call gets an error within a bound (the upstream
//! timeouts, set small here), the breaker then fails requests at once, INFO never waits, a
//! broken MSET is applied whole or not at all, and service comes back with the upstream.

mod common;

use common::{request, RawClient, TestServer};
use server::{Backend, Config};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);
const OP_TIMEOUT: Duration = Duration::from_millis(500);
/// Safety bound for one client call: far above the timeouts, far below "hangs".
const CALL_BOUND: Duration = Duration::from_secs(5);

const FORWARD: u8 = 0;
/// Swallows requests: the upstream seems alive but never answers.
const FREEZE: u8 = 1;
/// Answers anything with the header of a 2 GB bulk, and nothing after it.
const POISON: u8 = 2;
/// Forwards `budget` more request bytes, then cuts the connection.
const CUT: u8 = 3;

/// A TCP proxy in front of a real upper tier whose behaviour the test switches.
struct Proxy {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    budget: Arc<AtomicI64>,
}

impl Proxy {
    fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(AtomicU8::new(FORWARD));
        let budget = Arc::new(AtomicI64::new(0));
        let (m, b) = (mode.clone(), budget.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(up) = TcpStream::connect(upstream) else {
                    continue;
                };
                let (m, b) = (m.clone(), b.clone());
                let (client2, up2) = (client.try_clone().unwrap(), up.try_clone().unwrap());
                std::thread::spawn(move || pump_requests(client, up, &m, &b));
                std::thread::spawn(move || pump_replies(up2, client2));
            }
        });
        Proxy { addr, mode, budget }
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }
}

fn pump_requests(mut client: TcpStream, mut up: TcpStream, mode: &AtomicU8, budget: &AtomicI64) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let ok = match mode.load(Ordering::SeqCst) {
            FORWARD => up.write_all(&buf[..n]).is_ok(),
            FREEZE => true,
            POISON => client.write_all(b"$2000000000\r\n").is_ok(),
            _ => {
                let left = budget.fetch_sub(n as i64, Ordering::SeqCst);
                let send = left.clamp(0, n as i64) as usize;
                let _ = up.write_all(&buf[..send]);
                if left <= n as i64 {
                    std::thread::sleep(Duration::from_millis(50));
                    false
                } else {
                    true
                }
            }
        };
        if !ok {
            break;
        }
    }
    let _ = up.shutdown(Shutdown::Both);
    let _ = client.shutdown(Shutdown::Both);
}

fn pump_replies(mut up: TcpStream, mut client: TcpStream) {
    let _ = std::io::copy(&mut up, &mut client);
    let _ = client.shutdown(Shutdown::Both);
}

fn tier_config(url: String) -> Config {
    let mut config = Config::new(Backend::Upstream { url });
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.upstream_connect_timeout = CONNECT_TIMEOUT;
    config.upstream_timeout = OP_TIMEOUT;
    config
}

/// Upper tier, the proxy in front of it, and the lower tier using the proxy as upstream.
fn proxied_tiers() -> (tempfile::TempDir, TestServer, Proxy, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let upper = TestServer::rocks(dir.path(), |_| {});
    let proxy = Proxy::start(upper.addr);
    let lower = TestServer::start(tier_config(proxy.url()));
    (dir, upper, proxy, lower)
}

/// Sends one request and returns its first reply line and how long it took.
fn call(raw: &mut RawClient, args: &[&[u8]]) -> (String, Duration) {
    let started = Instant::now();
    raw.send(&request(args));
    let line = raw.line();
    let took = started.elapsed();
    let shown: Vec<_> = args
        .iter()
        .map(|a| String::from_utf8_lossy(&a[..a.len().min(16)]))
        .collect();
    assert!(took < CALL_BOUND, "{shown:?} took {took:?}: {line}");
    (line, took)
}

/// The INFO text, read whole.
fn info(raw: &mut RawClient) -> String {
    let (header, _) = call(raw, &[b"INFO"]);
    let len: usize = header[1..header.len() - 2].parse().unwrap();
    String::from_utf8(raw.read_exact_len(len + 2)).unwrap()
}

#[test]
fn a_bad_upstream_at_start_is_an_error_within_a_bound() {
    // Each fake accepts (or refuses) and misbehaves; connections are held open.
    fn fake(behaviour: fn(TcpStream) -> Option<TcpStream>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for socket in listener.incoming().flatten() {
                held.extend(behaviour(socket));
            }
        });
        url
    }
    let silent = fake(Some);
    let poison = fake(|mut s| {
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf);
        let _ = s.write_all(b"$2000000000\r\n");
        Some(s)
    });
    let closing = fake(|_| None);
    let refused = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("redis://{}", listener.local_addr().unwrap())
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for (url, expect) in [
        (silent, "no reply within"),
        (poison, "2000000000"),
        (closing, "c"), // "connection closed" or "connection reset"
        (refused, "refused"),
    ] {
        let started = Instant::now();
        let config = tier_config(url.clone());
        let bound = runtime.block_on(async {
            tokio::time::timeout(CALL_BOUND, server::Server::bind(config)).await
        });
        let err = match bound {
            Err(_) => panic!("start-up in front of {url} did not finish within {CALL_BOUND:?}"),
            Ok(Ok(_)) => panic!("start-up in front of {url} succeeded"),
            Ok(Err(e)) => format!("{e:#}"),
        };
        eprintln!("{url}: {err} after {:?}", started.elapsed());
        assert!(err.contains("cannot reach upstream"), "{err}");
        assert!(err.to_lowercase().contains(expect), "{expect}: {err}");
    }
}

#[test]
fn a_frozen_upstream_costs_a_bounded_wait_then_fails_fast_and_recovers() {
    let (_dir, upper, proxy, lower) = proxied_tiers();
    let mut raw = lower.raw();
    assert_eq!(call(&mut raw, &[b"SET", b"cached", b"1"]).0, "+OK\r\n");
    assert_eq!(call(&mut raw, &[b"SET", b"hot", b"1"]).0, "+OK\r\n");
    let mut far = upper.raw();
    assert_eq!(call(&mut far, &[b"SET", b"above", b"2"]).0, "+OK\r\n");

    proxy.set(FREEZE);
    let attempts: [&[&[u8]]; 6] = [
        &[b"SET", b"k", b"v"],
        &[b"GET", b"above"],
        &[b"MSET", b"x", b"1", b"y", b"2"],
        &[b"DEL", b"cached"],
        &[b"EXISTS", b"nope"],
        &[b"DBSIZE"],
    ];
    let mut fast = 0;
    for args in attempts {
        let (line, _) = call(&mut raw, args);
        assert!(
            line.starts_with("-ERR store error: upstream"),
            "{args:?}: {line}"
        );
        fast += usize::from(line.contains("failing fast"));
    }
    assert!(fast >= 1, "the breaker opened after five failures");
    // While the breaker is open, errors come at once and say why.
    let (line, _) = call(&mut raw, &[b"GET", b"above"]);
    assert!(line.contains("failing fast"), "{line}");
    // INFO does not wait on the upstream and shows its state; cached keys are still served.
    let text = info(&mut raw);
    assert!(text.contains("upstream_state:failing"), "{text}");
    assert!(text.contains("upstream_timeouts:"), "{text}");
    let (line, _) = call(&mut raw, &[b"GET", b"hot"]);
    assert_eq!(line, "$1\r\n", "a cache hit needs no upstream");
    assert_eq!(raw.line(), "1\r\n");

    proxy.set(FORWARD);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (line, _) = call(&mut raw, &[b"GET", b"above"]);
        if line == "$1\r\n" {
            assert_eq!(raw.line(), "2\r\n");
            break;
        }
        assert!(Instant::now() < deadline, "never recovered: {line}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(info(&mut raw).contains("upstream_state:ok"));
    // Nothing the frozen upstream swallowed was applied.
    assert_eq!(call(&mut far, &[b"EXISTS", b"k", b"x", b"y"]).0, ":0\r\n");
}

#[test]
fn an_announced_huge_bulk_is_refused_not_awaited() {
    let (_dir, _upper, proxy, lower) = proxied_tiers();
    let mut raw = lower.raw();
    proxy.set(POISON);
    for args in [
        &[&b"GET"[..], b"a"][..],
        &[b"SET", b"a", b"1"],
        &[b"DBSIZE"],
    ] {
        let (line, _) = call(&mut raw, args);
        assert!(
            line.contains("2000000000") || line.contains("failing fast"),
            "{args:?}: {line}"
        );
    }
    proxy.set(FORWARD);
}

#[test]
fn mset_through_a_broken_upstream_is_all_or_nothing() {
    let (_dir, upper, proxy, lower) = proxied_tiers();
    let mut raw = lower.raw();
    assert_eq!(call(&mut raw, &[b"PING"]).0, "+PONG\r\n");
    let value = vec![b'v'; 1 << 20];
    // The connection breaks after one and a half values have reached the upstream.
    proxy.budget.store(3 << 19, Ordering::SeqCst);
    proxy.set(CUT);
    let (line, _) = call(
        &mut raw,
        &[b"MSET", b"m1", &value, b"m2", &value, b"m3", &value],
    );
    assert!(line.starts_with("-ERR store error: upstream"), "{line}");
    proxy.set(FORWARD);
    let mut far = upper.raw();
    assert_eq!(
        call(&mut far, &[b"EXISTS", b"m1", b"m2", b"m3"]).0,
        ":0\r\n",
        "no pair of a failed MSET may be applied"
    );
    for key in ["m1", "m2", "m3"] {
        assert!(!lower.db.is_cached(key.as_bytes()));
    }
    // The same MSET through a healthy upstream is applied whole.
    let (line, _) = call(
        &mut raw,
        &[b"MSET", b"m1", &value, b"m2", &value, b"m3", &value],
    );
    assert_eq!(line, "+OK\r\n");
    assert_eq!(
        call(&mut far, &[b"EXISTS", b"m1", b"m2", b"m3"]).0,
        ":3\r\n"
    );
}

#[test]
fn a_down_upstream_fails_within_the_bound_and_info_still_answers() {
    let dir = tempfile::tempdir().unwrap();
    let upper = TestServer::rocks(dir.path(), |_| {});
    let lower = TestServer::start(tier_config(upper.url()));
    let mut raw = lower.raw();
    assert_eq!(call(&mut raw, &[b"SET", b"k", b"v"]).0, "+OK\r\n");
    upper.shutdown().unwrap();
    let mut saw_fast = false;
    for i in 0..8 {
        let key = format!("missing{i}");
        let (line, _) = call(&mut raw, &[b"GET", key.as_bytes()]);
        assert!(line.starts_with("-ERR store error: upstream"), "{line}");
        saw_fast |= line.contains("failing fast");
    }
    assert!(saw_fast, "the breaker opened");
    let (line, _) = call(&mut raw, &[b"SET", b"k2", b"v"]);
    assert!(line.starts_with("-ERR store error: upstream"), "{line}");
    let text = info(&mut raw);
    assert!(text.contains("upstream_state:failing"), "{text}");
}
