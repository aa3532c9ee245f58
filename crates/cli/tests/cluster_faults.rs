//! Smaller cluster faults (issue 25, items 15 and 17), each against real processes: what
//! `CLUSTER INFO` says while etcd is down, a node started before its etcd, `move` from a
//! source killed under it, a request arriving on a forwarding link, and proxy links to a
//! node that restarted.

mod common;

use cluster::testing::{free_port, Etcd};
use common::nodes::{admin, keys_in, node_flags, owned, spawn_serve, wait_until, Proc};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One request on `conn`, its reply as text (a bulk string's contents, or the status / error
/// line with its sign).
fn call_on(conn: &mut TcpStream, args: &[&str]) -> String {
    try_call_on(conn, args).unwrap()
}

fn try_call_on(conn: &mut TcpStream, args: &[&str]) -> std::io::Result<String> {
    let mut buf = format!("*{}\r\n", args.len());
    for a in args {
        buf.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    conn.write_all(buf.as_bytes())?;
    conn.set_read_timeout(Some(Duration::from_secs(15)))?;
    let mut input = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    input.read_line(&mut line)?;
    let line = line.trim_end().to_string();
    if let Some(len) = line.strip_prefix('$').or_else(|| line.strip_prefix('=')) {
        let len: i64 = len.parse().unwrap();
        if len < 0 {
            return Ok("(nil)".into());
        }
        let mut body = vec![0; len as usize + 2];
        std::io::Read::read_exact(&mut input, &mut body)?;
        return Ok(String::from_utf8_lossy(&body[..len as usize]).into_owned());
    }
    Ok(line)
}

/// One request on a fresh connection; "" when the node does not answer (not listening yet,
/// or still joining its cluster past the read timeout: callers poll).
fn call(port: u16, args: &[&str]) -> String {
    match TcpStream::connect(("127.0.0.1", port)) {
        Ok(mut conn) => try_call_on(&mut conn, args).unwrap_or_default(),
        Err(_) => String::new(),
    }
}

fn key_in(ranges: &[(u16, u16)]) -> String {
    keys_in(ranges, 1).remove(0)
}

/// Data nodes (each its own `--data-dir` under `root`), `extra` flags appended.
fn data_node(id: &str, etcd: &Etcd, name: &str, root: &Path, port: u16, extra: &[&str]) -> Proc {
    let data = root.join(id);
    let mut args = vec!["--data-dir".to_string(), data.to_str().unwrap().into()];
    args.extend(node_flags(etcd, name, id));
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let proc = spawn_serve(&args, port, &root.join(format!("{id}.log")));
    wait_until("the node to answer", Duration::from_secs(30), || {
        call(port, &["PING"]) == "+PONG"
    });
    proc
}

fn two_nodes(name: &str, extra: &[&str]) -> (Etcd, tempfile::TempDir, Vec<(Proc, u16)>) {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let nodes: Vec<(Proc, u16)> = ["n1", "n2"]
        .iter()
        .map(|id| {
            let port = free_port();
            (data_node(id, &etcd, name, root.path(), port, extra), port)
        })
        .collect();
    wait_until("two members", Duration::from_secs(20), || {
        call(nodes[0].1, &["CLUSTER", "INFO"]).contains("cluster_known_nodes:2")
    });
    let out = admin(&etcd, name, &["rebalance"]);
    assert!(out.status.success(), "{out:?}");
    for (_, port) in &nodes {
        wait_until("the balanced map", Duration::from_secs(20), || {
            call(*port, &["CLUSTER", "INFO"]).contains("cluster_size:2")
        });
    }
    (etcd, root, nodes)
}

/// Nodes with their own data keep serving every slot while etcd is down, and say so:
/// `cluster_state:ok` with `cluster_etcd_connected:0` (it said `fail`).
#[test]
fn cluster_info_stays_ok_while_etcd_is_down_and_every_slot_is_served() {
    let (mut etcd, _root, nodes) = two_nodes("info", &[]);
    etcd.kill();
    for (_, port) in &nodes {
        wait_until("etcd to be seen down", Duration::from_secs(20), || {
            call(*port, &["CLUSTER", "INFO"]).contains("cluster_etcd_connected:0")
        });
        let info = call(*port, &["CLUSTER", "INFO"]);
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_lease_confirmed:1"), "{info}");
    }
}

/// A node started while its etcd is down waits for it (and says so) instead of exiting.
#[test]
fn a_node_started_before_its_etcd_waits_for_it() {
    let mut etcd = Etcd::start();
    etcd.kill();
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let data = root.path().join("n1");
    let address = etcd.address();
    let log = root.path().join("n1.log");
    let mut node = spawn_serve(
        &[
            "--data-dir",
            data.to_str().unwrap(),
            "--cluster",
            &address,
            "--cluster-name",
            "late",
            "--node-id",
            "n1",
        ],
        port,
        &log,
    );
    wait_until("the retry to be logged", Duration::from_secs(20), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("retrying for up to 30s")
    });
    assert!(
        node.0.try_wait().unwrap().is_none(),
        "the node exited: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    etcd.restart();
    wait_until("the node to join", Duration::from_secs(30), || {
        call(port, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
    });
}

/// `move` from a source killed just before (its lease not yet lapsed) ends with a clear
/// error once the source is gone, instead of waiting forever.
#[test]
fn move_from_a_killed_source_fails_clearly() {
    let (etcd, _root, mut nodes) = two_nodes("gone", &[]);
    let (a, b) = owned(&etcd, "gone", "n1")[0];
    let range = format!("{a}-{}", b.min(a + 99));
    let (mut n1, _) = nodes.remove(0);
    let _ = n1.0.kill();
    let _ = n1.0.wait();
    let mut mv = Command::new(env!("CARGO_BIN_EXE_mantle"))
        .args(["cluster", "--etcd", &etcd.address(), "--name", "gone"])
        .args(["move", &range, "--to", "n2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = mv.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = mv.kill();
            panic!("`mantle cluster move` from a killed source still waiting after 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut mv.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("n1 is no longer a member") || stderr.contains("not a live member"),
        "{stderr}"
    );
}

/// A request that arrives on another node's forwarding link (`CLUSTER FORWARDED`) for a slot
/// this node does not serve is redirected, never forwarded on: two nodes that each think the
/// other owns a slot cannot pass it back and forth.
#[test]
fn a_forwarded_request_is_never_forwarded_again() {
    let (etcd, _root, nodes) = two_nodes("fwd", &["--cluster-mode", "proxy"]);
    let key = key_in(&owned(&etcd, "fwd", "n2"));
    let n1 = nodes[0].1;
    // A plain client of n1 is served through n2.
    assert_eq!(call(n1, &["SET", &key, "v"]), "+OK");
    assert_eq!(call(n1, &["GET", &key]), "v");
    let mut link = TcpStream::connect(("127.0.0.1", n1)).unwrap();
    assert_eq!(call_on(&mut link, &["CLUSTER", "FORWARDED"]), "+OK");
    let reply = call_on(&mut link, &["GET", &key]);
    assert!(
        reply.starts_with("-MOVED ") && reply.ends_with(&format!(":{}", nodes[1].1)),
        "{reply}"
    );
}

/// Writes `requests` to `conn` in one go and reads their replies in order (as in `call_on`).
fn pipeline(conn: &mut TcpStream, requests: &[Vec<String>]) -> Vec<String> {
    let mut buf = String::new();
    for args in requests {
        buf.push_str(&format!("*{}\r\n", args.len()));
        for a in args {
            buf.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
    }
    conn.write_all(buf.as_bytes()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut input = BufReader::new(conn.try_clone().unwrap());
    let mut replies = Vec::new();
    for _ in requests {
        let mut line = String::new();
        input.read_line(&mut line).unwrap();
        let line = line.trim_end().to_string();
        let reply = match line.strip_prefix('$') {
            Some(len) if len.parse::<i64>().unwrap() < 0 => "(nil)".to_string(),
            Some(len) => {
                let mut body = vec![0; len.parse::<usize>().unwrap() + 2];
                std::io::Read::read_exact(&mut input, &mut body).unwrap();
                String::from_utf8_lossy(&body[..body.len() - 2]).into_owned()
            }
            None => line,
        };
        replies.push(reply);
    }
    replies
}

/// A pipeline sent to a proxy node mixing its own keys, another node's (forwarded in units
/// of consecutive requests) and requests with no key gets every reply in request order:
/// forwarded runs of several lengths, broken by local answers, errors among the relayed
/// replies, and a unit cut by the end of what one read brought.
#[test]
fn a_pipeline_mixing_local_and_forwarded_keys_is_answered_in_order() {
    let (etcd, _root, nodes) = two_nodes("order", &["--cluster-mode", "proxy"]);
    let n1 = nodes[0].1;
    let local = keys_in(&owned(&etcd, "order", "n1"), 8);
    let remote = keys_in(&owned(&etcd, "order", "n2"), 8);
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut conn = TcpStream::connect(("127.0.0.1", n1)).unwrap();
    let mut requests = Vec::new();
    for (i, key) in local.iter().chain(&remote).enumerate() {
        requests.push(words(&["SET", key, &format!("v{i}")]));
    }
    let set = pipeline(&mut conn, &requests);
    assert!(set.iter().all(|r| r == "+OK"), "{set:?}");
    // Runs of 1, 2, 3 and 5 forwarded requests between local ones, an error from the owner
    // (INCR of a non-number) inside a run, and a run at the very end.
    let (mut requests, mut expected) = (Vec::new(), Vec::new());
    let (mut l, mut r) = (0, 0);
    for run in [1, 2, 3, 5, 1, 4] {
        requests.push(words(&["GET", &local[l % 8]]));
        expected.push(format!("v{}", l % 8));
        requests.push(words(&["PING"]));
        expected.push("+PONG".to_string());
        l += 1;
        for j in 0..run {
            if j == 1 {
                requests.push(words(&["INCR", &remote[r % 8]]));
                expected.push("-ERR value is not an integer or out of range".to_string());
            }
            requests.push(words(&["GET", &remote[r % 8]]));
            expected.push(format!("v{}", 8 + r % 8));
            r += 1;
        }
    }
    for round in 0..20 {
        let got = pipeline(&mut conn, &requests);
        assert_eq!(got, expected, "round {round}");
    }
}

/// The link writes a forwarded read's replies to the client's socket itself when nothing is
/// queued before them (`cluster::proxy::Direct`). A client that does not read while a large
/// reply comes (its socket fills: the rest is handed back to its own task) still gets every
/// byte, in order with the local answer behind it; a client that leaves while its replies
/// are being written costs nobody else a byte (a new connection, likely on the same
/// descriptor, gets only its own replies).
#[test]
fn forwarded_replies_survive_a_slow_reader_and_a_client_that_leaves() {
    let (etcd, _root, nodes) = two_nodes("direct", &["--cluster-mode", "proxy"]);
    let n1 = nodes[0].1;
    let remote = key_in(&owned(&etcd, "direct", "n2"));
    let big: String = (0..2_000_000)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let mut conn = TcpStream::connect(("127.0.0.1", n1)).unwrap();
    assert_eq!(call_on(&mut conn, &["SET", &remote, &big]), "+OK");
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    for round in 0..3 {
        let mut slow = TcpStream::connect(("127.0.0.1", n1)).unwrap();
        let requests = [words(&["GET", &remote]), words(&["PING"])];
        let mut buf = String::new();
        for args in &requests {
            buf.push_str(&format!("*{}\r\n", args.len()));
            for a in args {
                buf.push_str(&format!("${}\r\n{a}\r\n", a.len()));
            }
        }
        slow.write_all(buf.as_bytes()).unwrap();
        // Not read for a while: the 2 MB reply fills the socket.
        std::thread::sleep(Duration::from_millis(300));
        let mut input = BufReader::new(slow.try_clone().unwrap());
        slow.set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        let mut line = String::new();
        input.read_line(&mut line).unwrap();
        assert_eq!(line, format!("${}\r\n", big.len()), "round {round}");
        let mut body = vec![0; big.len() + 2];
        std::io::Read::read_exact(&mut input, &mut body).unwrap();
        assert!(
            body[..big.len()] == *big.as_bytes(),
            "round {round}: the value intact"
        );
        line.clear();
        input.read_line(&mut line).unwrap();
        assert_eq!(
            line, "+PONG\r\n",
            "round {round}: the local answer after it"
        );
    }
    for round in 0..20 {
        let mut leaving = TcpStream::connect(("127.0.0.1", n1)).unwrap();
        leaving
            .write_all(format!("*2\r\n$3\r\nGET\r\n${}\r\n{remote}\r\n", remote.len()).as_bytes())
            .unwrap();
        drop(leaving);
        let mut next = TcpStream::connect(("127.0.0.1", n1)).unwrap();
        let got = pipeline(&mut next, &[words(&["PING"]), words(&["ECHO", "mine"])]);
        assert_eq!(got, ["+PONG", "mine"], "round {round}");
    }
    assert_eq!(call(n1, &["GET", &remote]).len(), big.len());
}

/// A proxy node's pooled links to a node that restarted (same address) open again: the
/// first request after the restart is served, not failed with "connection lost".
#[test]
fn proxy_links_to_a_restarted_node_reconnect() {
    let (etcd, root, mut nodes) = two_nodes("restart", &["--cluster-mode", "proxy"]);
    let key = key_in(&owned(&etcd, "restart", "n2"));
    let n1 = nodes[0].1;
    for i in 0..4 {
        // Through both pooled links.
        let mut conn = TcpStream::connect(("127.0.0.1", n1)).unwrap();
        assert_eq!(call_on(&mut conn, &["SET", &key, &i.to_string()]), "+OK");
    }
    let (mut n2, n2_port) = nodes.remove(1);
    let _ = n2.0.kill();
    let _ = n2.0.wait();
    let _n2 = data_node(
        "n2",
        &etcd,
        "restart",
        root.path(),
        n2_port,
        &["--cluster-mode", "proxy"],
    );
    wait_until(
        "n2 to serve its slots again",
        Duration::from_secs(30),
        || {
            call(n1, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
                && call(n2_port, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
        },
    );
    for _ in 0..4 {
        let mut conn = TcpStream::connect(("127.0.0.1", n1)).unwrap();
        assert_eq!(call_on(&mut conn, &["GET", &key]), "3");
    }
}

/// Proxied load through n1 while n2 restarts (issue 29.3): clients on long-lived connections
/// keep writing and reading keys of both nodes; once both nodes say `cluster_state:ok` again,
/// no request fails (stale pooled links are found dead before a request is written on them
/// and opened again), and every value read back is the one last written.
#[test]
fn proxied_load_has_no_errors_once_a_restarted_node_is_back() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let (etcd, root, mut nodes) = two_nodes("load", &["--cluster-mode", "proxy"]);
    let n1 = nodes[0].1;
    let remote = owned(&etcd, "load", "n2");
    let stop = Arc::new(AtomicBool::new(false));
    // Requests sent, by when they were sent, and how they ended (None: fine).
    type Log = Vec<(Instant, Option<String>)>;
    let log: Arc<Mutex<Log>> = Arc::default();
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (stop, log) = (Arc::clone(&stop), Arc::clone(&log));
            // One slot of n2 for all, a key each (the hash tag picks the slot).
            let key = format!("{{{}}}-{c}", key_in(&remote));
            std::thread::spawn(move || {
                let mut conn: Option<TcpStream> = None;
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let at = Instant::now();
                    let link = match &mut conn {
                        Some(c) => c,
                        None => match TcpStream::connect(("127.0.0.1", n1)) {
                            Ok(c) => conn.insert(c),
                            Err(e) => {
                                log.lock().unwrap().push((at, Some(e.to_string())));
                                continue;
                            }
                        },
                    };
                    i += 1;
                    let value = format!("{c}:{i}");
                    let set = call_on(link, &["SET", &key, &value]);
                    let get = call_on(link, &["GET", &key]);
                    let failed = if set != "+OK" {
                        Some(format!("SET {key}: {set}"))
                    } else if get != value {
                        Some(format!("GET {key}: {get}, expected {value}"))
                    } else {
                        None
                    };
                    log.lock().unwrap().push((at, failed));
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let (mut n2, n2_port) = nodes.remove(1);
    let _ = n2.0.kill();
    let _ = n2.0.wait();
    std::thread::sleep(Duration::from_millis(300));
    let _n2 = data_node(
        "n2",
        &etcd,
        "load",
        root.path(),
        n2_port,
        &["--cluster-mode", "proxy"],
    );
    wait_until(
        "n2 to serve its slots again",
        Duration::from_secs(30),
        || {
            call(n1, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
                && call(n2_port, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
        },
    );
    let ok_at = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    let log = log.lock().unwrap();
    let after: Vec<_> = log.iter().filter(|(at, _)| *at > ok_at).collect();
    let errors: Vec<_> = after.iter().filter_map(|(_, e)| e.as_ref()).collect();
    assert!(
        errors.is_empty(),
        "{} of {} proxied requests failed after cluster_state:ok, first: {}",
        errors.len(),
        after.len(),
        errors[0]
    );
    assert!(
        after.len() >= 20,
        "only {} requests after the restart",
        after.len()
    );
}

/// A small trace of gets and puts (no timestamps: replayed as fast as possible).
fn small_trace(dir: &Path) -> String {
    let path = dir.join("small.csv");
    let out = Command::new(env!("CARGO_BIN_EXE_mantle"))
        .args(["gen", "parsplice", "--seed", "5", "--duration", "2m", "-o"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    path.to_str().unwrap().to_string()
}

fn replay_server(trace: &str, port: u16, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mantle"))
        .args([
            "replay", "--trace", trace, "--speed", "0", "--quiet", "--json",
        ])
        .args(["--server", &format!("127.0.0.1:{port}")])
        .args(extra)
        .output()
        .unwrap()
}

/// `replay --server` against one node of a cluster (issue 29.4): in client mode it follows
/// `-MOVED` (no request fails), in proxy mode every request lands on the entry node; either
/// way the counters are the cluster's, with each node's figures beside them.
#[test]
fn replay_against_a_cluster_follows_redirects_and_counts_every_node() {
    for mode in ["client", "proxy"] {
        let name = format!("replay-{mode}");
        let (_etcd, root, nodes) = two_nodes(&name, &["--cluster-mode", mode]);
        let trace = small_trace(root.path());
        let out = replay_server(&trace, nodes[0].1, &[]);
        assert!(
            out.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["errors"], 0, "{mode}: {}", json["first_error"]);
        let per_node = json["nodes"].as_array().expect("a nodes array");
        assert_eq!(per_node.len(), 2, "{mode}: {per_node:?}");
        let lookups = |v: &serde_json::Value| v["lookups"].as_u64().unwrap();
        assert!(
            per_node.iter().all(|n| lookups(n) > 0),
            "{mode}: {per_node:?}"
        );
        let summed: u64 = per_node.iter().map(lookups).sum();
        let total = json["hits"].as_u64().unwrap() + json["misses"].as_u64().unwrap();
        assert_eq!(summed, total, "{mode}: the totals are the nodes' sum");
    }
}

/// A run whose requests fail beyond `--max-errors` (default 1%) exits non-zero with one line
/// naming the count and the first error, instead of printing a report as if all went well.
#[test]
fn replay_fails_when_too_many_requests_fail() {
    let (_etcd, root, mut nodes) = two_nodes("failing", &["--cluster-mode", "proxy"]);
    let trace = small_trace(root.path());
    // Half the slots' owner is gone: the entry node answers their requests with an error.
    let (mut n2, _) = nodes.remove(1);
    let _ = n2.0.kill();
    let _ = n2.0.wait();
    let out = replay_server(&trace, nodes[0].1, &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.trim_end();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.contains("requests failed") && line.contains("--max-errors 1%"),
        "{line}"
    );
    assert!(line.contains("proxy: "), "the first error is named: {line}");
    assert!(out.stdout.is_empty(), "no report for a failed run");
    let tolerant = replay_server(&trace, nodes[0].1, &["--max-errors", "100"]);
    assert!(tolerant.status.success(), "{tolerant:?}");
}
