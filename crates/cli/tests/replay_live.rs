//! `mantle replay --server` against a real `mantle serve` (ephemeral loopback port, temporary
//! data directory): the replay's own counts, the server's counters and the simulated replay of
//! the same trace must agree, writes must reach the store, and failures must be one clean line.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn mantle(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mantle"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("mantle runs")
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "mantle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
}

/// A failure must be one line on stderr, exit status 1, and never a panic.
fn assert_clean_failure(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains(needle), "expected '{needle}' in: {stderr}");
}

/// A `mantle serve` child process, stopped when dropped.
struct Server {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut child = Command::new(env!("CARGO_BIN_EXE_mantle"))
            .args(["serve", "--listen", "127.0.0.1:0", "--threads", "2"])
            .arg("--data-dir")
            .arg(&data)
            .args(extra)
            .current_dir(repo())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mantle serve starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let addr = loop {
            let line = match lines.next() {
                Some(Ok(line)) => line,
                _ => {
                    let _ = child.kill();
                    panic!("mantle serve exited before listening");
                }
            };
            if let Some(rest) = line.strip_prefix("mantle: serving on ") {
                break rest.split_whitespace().next().unwrap().to_string();
            }
        };
        // Keep draining its log so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Server {
            child,
            addr,
            _dir: dir,
        }
    }

    fn client(&self) -> redis::Connection {
        redis::Client::open(format!("redis://{}", self.addr))
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A small generated ParSplice trace (gets and puts, with timestamps) in `dir`.
fn parsplice_trace(dir: &Path) -> String {
    let path = dir.join("ps.csv");
    let path = path.to_str().unwrap();
    let out = mantle(&[
        "gen",
        "parsplice",
        "--seed",
        "5",
        "--duration",
        "10m",
        "-o",
        path,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    path.to_string()
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("`{key}` is not a count in {v}"))
}

/// Within 1% (or 2) of each other: the live replay pipelines requests, so a fill's insertion
/// may land a few requests later than the simulator's, which can move an eviction.
fn close(live: u64, simulated: u64) -> bool {
    live.abs_diff(simulated) <= (simulated / 100).max(2)
}

/// The invariants every live replay must satisfy, whatever the trace.
fn assert_consistent(live: &Value) {
    let lookups = u(live, "gets") + u(live, "accesses");
    assert_eq!(
        u(live, "requests"),
        lookups + u(live, "puts") + u(live, "deletes")
    );
    // The server counted exactly the replay's lookups (it is the only client).
    assert_eq!(u(live, "hits") + u(live, "misses"), lookups, "{live}");
    let backend = &live["backend"];
    // Every cache miss is one store read; every SET or DEL (fills included) one store write.
    assert_eq!(u(backend, "reads"), u(live, "misses"), "{live}");
    assert_eq!(
        u(backend, "writes"),
        u(live, "puts") + u(live, "deletes") + u(live, "nil_replies"),
        "{live}"
    );
    assert_eq!(u(live, "errors"), 0, "{live}");
    assert!(u(live, "peak_cache_objects") >= u(live, "final_cache_objects"));
    let mean = live["mean_cache_objects"].as_f64().unwrap();
    assert!(mean >= 0.0 && mean <= u(live, "peak_cache_objects") as f64);
    for key in [
        "requests",
        "gets",
        "puts",
        "hits",
        "misses",
        "miss_ratio",
        "byte_miss_ratio",
        "peak_cache_objects",
        "mean_cache_objects",
        "time_mean_cache_objects",
        "peak_cache_bytes",
        "mean_cache_bytes",
        "backend",
        "policy",
        "wall_seconds",
        "requests_per_second",
    ] {
        assert!(live.get(key).is_some(), "`{key}` missing from {live}");
    }
    for key in [
        "reads",
        "writes",
        "peak_rate",
        "overload_seconds",
        "p99_read_latency_ms",
    ] {
        assert!(backend.get(key).is_some(), "`backend.{key}` missing");
    }
    assert!(live["byte_miss_ratio"].is_null());
    assert!(backend["overload_seconds"].is_null());
}

#[test]
fn parsplice_replay_agrees_with_the_server_and_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let trace = parsplice_trace(dir.path());
    let server = Server::start(&["--max-keys", "10"]);

    let live = json_of(&mantle(&[
        "replay",
        "--trace",
        &trace,
        "--server",
        &server.addr,
        "--speed",
        "0",
        "--json",
        "--quiet",
    ]));
    let sim = json_of(&mantle(&[
        "replay",
        "--trace",
        &trace,
        "--cache-size",
        "10",
        "--backend",
        "none",
        "--json",
    ]));
    assert_consistent(&live);
    for key in ["requests", "gets", "puts", "deletes", "accesses"] {
        assert_eq!(live[key], sim[key], "{key}");
    }
    // Every key of the simulator's JSON is in the live one (docs/replay.md, "Output").
    for key in sim.as_object().unwrap().keys() {
        assert!(live.get(key).is_some(), "the live JSON lacks `{key}`");
    }
    for key in [
        "algorithm",
        "cache_size",
        "capacity_objects",
        "capacity_bytes",
    ] {
        assert_eq!(live[key], sim[key], "{key}");
    }
    assert!(
        u(&sim, "misses") > 0,
        "the test wants a cache under pressure"
    );
    assert!(
        close(u(&live, "misses"), u(&sim, "misses")),
        "live {} vs simulated {} misses",
        live["misses"],
        sim["misses"]
    );
    assert!(close(u(&live, "evictions"), u(&sim, "evictions")));
    assert_eq!(u(&live, "peak_cache_objects"), 10);
    // ParSplice puts every key before reading it: nothing is ever missing from the store.
    assert_eq!(u(&live, "nil_replies"), 0);
    assert_eq!(live["backend"]["writes"], sim["backend"]["writes"]);
    assert!(live["policy"].is_null());

    // Every put reached the store: its key count is the number of distinct keys put.
    let keys: u64 = redis::cmd("DBSIZE").query(&mut server.client()).unwrap();
    assert_eq!(keys, u(&live, "puts"), "the generator puts each key once");
}

#[test]
fn lookups_of_missing_keys_fill_the_store_once_each() {
    let server = Server::start(&["--max-keys", "50"]);
    let trace = "crates/trace/tests/fixtures/small.oracleGeneral.bin";
    let live = json_of(&mantle(&[
        "replay",
        "--trace",
        trace,
        "--server",
        &server.addr,
        "--speed",
        "0",
        "--json",
        "--quiet",
    ]));
    let sim = json_of(&mantle(&[
        "replay",
        "--trace",
        trace,
        "--cache-size",
        "50",
        "--json",
    ]));
    assert_consistent(&live);
    let distinct: u64 = redis::cmd("DBSIZE").query(&mut server.client()).unwrap();
    // The first lookup of each key finds nothing and stores it; no key is filled twice.
    assert_eq!(u(&live, "nil_replies"), distinct);
    assert_eq!(u(&live, "fills"), distinct);
    assert_eq!(u(&live["backend"], "fill_writes"), distinct);
    assert!(close(u(&live, "misses"), u(&sim, "misses")));
    assert!(u(&live, "peak_cache_bytes") > 0);

    // Replayed again on the warm server: nothing is missing any more.
    let again = json_of(&mantle(&[
        "replay",
        "--trace",
        trace,
        "--server",
        &server.addr,
        "--speed",
        "0",
        "--json",
        "--quiet",
    ]));
    assert_consistent(&again);
    assert_eq!(u(&again, "nil_replies"), 0);
    assert_eq!(u(&again["backend"], "writes"), 0);
}

#[test]
fn max_requests_and_the_active_policy_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let trace = parsplice_trace(dir.path());
    let server = Server::start(&["--policy", "policies/fixed.lua", "--tick", "100ms"]);
    let live = json_of(&mantle(&[
        "replay",
        "--trace",
        &trace,
        "--server",
        &server.addr,
        "--speed",
        "0",
        "--max-requests",
        "1000",
        "--json",
        "--quiet",
    ]));
    assert_consistent(&live);
    assert_eq!(u(&live, "requests"), 1000);
    assert_eq!(live["policy"]["name"], "fixed");
    assert_eq!(live["policy"]["version"], 1);
    assert_eq!(live["policy"]["errors"], 0);
}

#[test]
fn failures_are_one_clean_line() {
    let trace = "crates/trace/tests/fixtures/small.oracleGeneral.bin";
    // A port nobody listens on: bind one, then free it.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap().to_string();
    drop(free);
    assert_clean_failure(
        &mantle(&["replay", "--trace", trace, "--server", &addr]),
        "cannot reach the server",
    );

    let server = Server::start(&["--requirepass", "sesame"]);
    let base = ["replay", "--trace", trace, "--server", &server.addr];
    assert_clean_failure(&mantle(&base), "add --password");
    let wrong: Vec<&str> = base.iter().copied().chain(["--password", "x"]).collect();
    assert_clean_failure(&mantle(&wrong), "refused the password");
    let right: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--password", "sesame", "--speed", "0", "--json"])
        .collect();
    assert_consistent(&json_of(&mantle(&right)));

    assert_clean_failure(
        &mantle(&[
            "replay",
            "--trace",
            trace,
            "--cache-size",
            "10",
            "--speed",
            "2",
        ]),
        "--speed goes with --server",
    );
    assert_clean_failure(
        &mantle(&[
            "replay",
            "--trace",
            trace,
            "--server",
            &server.addr,
            "--speed=-0.5",
        ]),
        "--speed must be",
    );
}
