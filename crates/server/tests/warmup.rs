//! Warm-up on restart (seed 001) against a real server on loopback with a real Redis client:
//! a workload writes keys and keeps reading a hot subset; the server restarts (cleanly, or is
//! killed with SIGKILL after a persist); then the first read of every hot key is counted as a
//! hit or a miss, with and without `--warmup`. Also: a client write during the fill wins, and
//! the store's read latency reaches the Prometheus endpoint.
//!
//! The SIGKILL case needs the server in another process: the test re-executes this binary
//! with `MANTLE_WARMUP_CHILD_DIR` set, which makes [`server_process_for_sigkill_test`] run
//! `server::serve` (the entry point of `mantle serve`) instead of returning at once.

mod common;

use common::TestServer;
use server::warmup::WarmupSpec;
use server::{Backend, Config, Fsync};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD_DIR: &str = "MANTLE_WARMUP_CHILD_DIR";
/// Keys written by the workload.
const KEYS: usize = 2_000;
/// The hot subset it keeps reading, and how often.
const HOT: usize = 200;
const HOT_ROUNDS: usize = 5;

fn key(i: usize) -> String {
    format!("obj:{i:05}")
}

/// Hot keys are spread over the key space (every tenth key), so key order and heat differ.
fn hot_keys() -> Vec<String> {
    (0..HOT).map(|i| key(i * (KEYS / HOT))).collect()
}

fn configure(config: &mut Config, warmup: Option<&str>) {
    config.max_keys = Some(10_000);
    config.warmup = warmup.map(|w| w.parse::<WarmupSpec>().unwrap());
    config.warmup_persist = Duration::from_millis(100);
}

/// Writes every key, then reads the hot ones `HOT_ROUNDS` times.
fn run_workload(con: &mut redis::Connection) {
    for i in 0..KEYS {
        let _: () = redis::cmd("SET")
            .arg(key(i))
            .arg(format!("value-{i}"))
            .query(con)
            .unwrap();
    }
    for _ in 0..HOT_ROUNDS {
        for k in hot_keys() {
            let v: String = redis::cmd("GET").arg(&k).query(con).unwrap();
            assert!(v.starts_with("value-"));
        }
    }
}

/// Accesses `run_workload` makes.
const WORKLOAD_ACCESSES: usize = KEYS + HOT * HOT_ROUNDS;

/// Accesses the monitor recorded, checked against those it reports skipping.
fn recorded_accesses(con: &mut redis::Connection) -> usize {
    let recorded: usize = info_field(con, "warmup", "warmup_accesses")
        .parse()
        .unwrap();
    let skipped: usize = info_field(con, "warmup", "warmup_unrecorded")
        .parse()
        .unwrap();
    assert_eq!(recorded + skipped, WORKLOAD_ACCESSES);
    recorded
}

/// A field of `INFO section`.
fn info_field(con: &mut redis::Connection, section: &str, name: &str) -> String {
    let text: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in INFO {section}: {text}"))
        .trim()
        .to_string()
}

/// Waits (bounded) until the background fill reports done.
fn wait_for_warmup(con: &mut redis::Connection) {
    for _ in 0..2_000 {
        if info_field(con, "warmup", "warmup_done") == "1" {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("warm-up did not finish");
}

/// Hit ratio of the first read of each hot key, from CACHE STATS before and after.
fn first_reads_hit_ratio(con: &mut redis::Connection) -> f64 {
    let counters = |con: &mut redis::Connection| {
        let stats: Vec<redis::Value> = redis::cmd("CACHE").arg("STATS").query(con).unwrap();
        let mut hits = None;
        let mut misses = None;
        for pair in stats.chunks(2) {
            if let [redis::Value::Data(name), redis::Value::Int(n)] = pair {
                match name.as_slice() {
                    b"hits" => hits = Some(*n),
                    b"misses" => misses = Some(*n),
                    _ => {}
                }
            }
        }
        (hits.unwrap(), misses.unwrap())
    };
    let (h0, m0) = counters(con);
    for (i, k) in hot_keys().iter().enumerate() {
        let v: String = redis::cmd("GET").arg(k).query(con).unwrap();
        assert_eq!(v, format!("value-{}", i * (KEYS / HOT)));
    }
    let (h1, m1) = counters(con);
    let (hits, misses) = (h1 - h0, m1 - m0);
    assert_eq!(hits + misses, HOT as i64);
    hits as f64 / HOT as f64
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Restarts on copies of `dir` without and with `--warmup spec`; returns both hit ratios.
fn cold_and_warm(dir: &Path, spec: &str) -> (f64, f64) {
    let cold_dir = dir.with_extension("cold");
    let warm_dir = dir.with_extension("warm");
    copy_dir(dir, &cold_dir);
    copy_dir(dir, &warm_dir);

    let cold = TestServer::rocks(&cold_dir, |c| configure(c, None));
    let cold_ratio = first_reads_hit_ratio(&mut cold.client());
    cold.shutdown().unwrap();

    let warm = TestServer::rocks(&warm_dir, |c| configure(c, Some(spec)));
    let mut con = warm.client();
    wait_for_warmup(&mut con);
    assert_eq!(
        info_field(&mut con, "warmup", "warmup_total"),
        HOT.to_string()
    );
    assert_eq!(
        info_field(&mut con, "warmup", "warmup_loaded"),
        HOT.to_string()
    );
    let warm_ratio = first_reads_hit_ratio(&mut con);
    warm.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&cold_dir);
    let _ = std::fs::remove_dir_all(&warm_dir);
    println!(
        "{spec}: first-read hit ratio after restart: cold {cold_ratio:.3}, warm {warm_ratio:.3}"
    );
    (cold_ratio, warm_ratio)
}

#[test]
fn warm_up_after_a_clean_restart_hits_where_a_cold_start_misses() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = TestServer::rocks(&data, |c| configure(c, None));
    let mut con = first.client();
    run_workload(&mut con);
    // The monitor may skip an access whose shard is busy (with the persister), never more.
    let recorded = recorded_accesses(&mut con);
    let tracked: usize = info_field(&mut con, "warmup", "warmup_tracked_keys")
        .parse()
        .unwrap();
    assert!(tracked <= KEYS && tracked + (WORKLOAD_ACCESSES - recorded) >= KEYS);
    first.shutdown().unwrap(); // persists the record

    for spec in [format!("lastk:{HOT}"), format!("topk:{HOT}")] {
        let (cold, warm) = cold_and_warm(&data, &spec);
        assert!(cold < 0.1, "{spec}: cold start hit ratio {cold}");
        assert!(warm > 0.9, "{spec}: warm start hit ratio {warm}");
    }
}

#[test]
fn a_client_write_during_the_fill_wins_and_the_fill_never_evicts() {
    let dir = tempfile::tempdir().unwrap();
    let first = TestServer::rocks(dir.path(), |c| configure(c, None));
    run_workload(&mut first.client());
    first.shutdown().unwrap();

    // A write racing the fill: whichever comes first, the client's value is what is read.
    let server = TestServer::rocks(dir.path(), |c| configure(c, Some(&format!("lastk:{HOT}"))));
    let mut con = server.client();
    let hot = hot_keys();
    let _: () = redis::cmd("SET")
        .arg(&hot[HOT / 2])
        .arg("written-during-warm-up")
        .query(&mut con)
        .unwrap();
    wait_for_warmup(&mut con);
    let value: String = redis::cmd("GET")
        .arg(&hot[HOT / 2])
        .query(&mut con)
        .unwrap();
    assert_eq!(value, "written-during-warm-up");
    server.shutdown().unwrap();

    // Room for only half the hot set: the fill loads the longest prefix of the ranking that
    // fits (`cache::warmup::LoadBudget`, replay's rule), i.e. the half read last, whatever
    // the keys' order (the hot keys read last sort last).
    let server = TestServer::rocks(dir.path(), |c| {
        configure(c, Some(&format!("lastk:{HOT}")));
        c.max_keys = Some(HOT as u64 / 2);
    });
    let mut con = server.client();
    wait_for_warmup(&mut con);
    let field = |con: &mut redis::Connection, name: &str| -> u64 {
        info_field(con, "warmup", name).parse().unwrap()
    };
    assert_eq!(field(&mut con, "warmup_loaded"), HOT as u64 / 2);
    assert_eq!(field(&mut con, "warmup_skipped"), HOT as u64 / 2);
    assert_eq!(info_field(&mut con, "stats", "evicted_keys"), "0");
    let db = server.db.clone();
    assert!(hot[HOT / 2..].iter().all(|k| db.is_cached(k.as_bytes())));
    assert!(!hot[..HOT / 2].iter().any(|k| db.is_cached(k.as_bytes())));
}

/// The shared rule's other half: an object that does not fit ends the fill, even when
/// smaller, lower-ranked keys after it would fit (replay:
/// `sim::warmup::tests::warm_up_loads_the_longest_prefix_of_the_ranking_that_fits`).
#[test]
fn the_fill_stops_at_the_first_ranked_key_that_does_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let small = "v".repeat(10);
    let big = "B".repeat(1 << 20);
    let limit = |c: &mut Config| c.maxmemory = Some(64 << 10);
    let first = TestServer::rocks(dir.path(), |c| {
        configure(c, None);
        limit(c);
    });
    let mut con = first.client();
    // Last-K ranks d, c, b, a; c is larger than the whole cache.
    for (key, value) in [("a", &small), ("b", &small), ("c", &big), ("d", &small)] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query(&mut con)
            .unwrap();
    }
    first.shutdown().unwrap();

    let server = TestServer::rocks(dir.path(), |c| {
        configure(c, Some("lastk:4"));
        limit(c);
    });
    let mut con = server.client();
    wait_for_warmup(&mut con);
    assert_eq!(info_field(&mut con, "warmup", "warmup_loaded"), "1");
    assert_eq!(info_field(&mut con, "warmup", "warmup_skipped"), "3");
    let db = server.db.clone();
    let cached: Vec<bool> = ["a", "b", "c", "d"]
        .iter()
        .map(|k| db.is_cached(k.as_bytes()))
        .collect();
    assert_eq!(cached, [false, false, false, true]);
}

#[test]
fn a_k_given_as_a_share_of_the_cache_fills_only_that_share() {
    let dir = tempfile::tempdir().unwrap();
    let first = TestServer::rocks(dir.path(), |c| configure(c, None));
    run_workload(&mut first.client());
    first.shutdown().unwrap();

    // 25% of a 400-key cache: 100 of the recorded keys, and INFO says how K was given.
    let server = TestServer::rocks(dir.path(), |c| {
        configure(c, Some("lastk:25%"));
        c.max_keys = Some(400);
    });
    let mut con = server.client();
    wait_for_warmup(&mut con);
    let loaded: u64 = info_field(&mut con, "warmup", "warmup_loaded")
        .parse()
        .unwrap();
    assert_eq!(loaded, 100);
    assert_eq!(info_field(&mut con, "warmup", "warmup_k"), "25%");
    assert_eq!(info_field(&mut con, "stats", "evicted_keys"), "0");
}

#[test]
fn store_read_latency_is_exported() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |c| {
        configure(c, None);
        c.max_keys = Some(1);
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    });
    let mut con = server.client();
    for k in ["a", "b"] {
        let _: () = redis::cmd("SET").arg(k).arg("v").query(&mut con).unwrap();
    }
    // Capacity 1: "a" was evicted by "b", so reading it goes to the store.
    let _: String = redis::cmd("GET").arg("a").query(&mut con).unwrap();
    let metrics = scrape(server.metrics_addr.unwrap());
    assert!(
        metrics.contains("# TYPE mantle_store_read_seconds histogram"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mantle_store_read_seconds_count 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mantle_store_read_seconds_bucket{le=\"+Inf\"} 1\n"),
        "{metrics}"
    );
}

fn scrape(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).unwrap();
    body
}

#[test]
fn warm_up_after_sigkill_loads_what_was_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["server_process_for_sigkill_test", "--exact", "--nocapture"])
        .env(CHILD_DIR, &data)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("serving on") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "child exited");
    }
    let addr = line.split_whitespace().nth(3).unwrap().to_string();
    let mut con = redis::Client::open(format!("redis://{addr}"))
        .unwrap()
        .get_connection()
        .unwrap();
    run_workload(&mut con);
    // Wait for a persist that includes the whole workload, then kill without warning.
    let accesses = recorded_accesses(&mut con).to_string();
    let mut persisted = false;
    for _ in 0..1_000 {
        if info_field(&mut con, "warmup", "warmup_persisted_accesses") == accesses {
            persisted = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(persisted, "the record was not persisted");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let (cold, warm) = cold_and_warm(&data, &format!("lastk:{HOT}"));
    assert!(cold < 0.1, "cold start hit ratio {cold}");
    assert!(warm > 0.9, "warm start hit ratio {warm}");
}

/// Not a test of its own: the server process of the SIGKILL test (returns at once otherwise).
#[test]
fn server_process_for_sigkill_test() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let mut config = Config::new(Backend::RocksDb {
        data_dir: dir.into(),
        fsync: Fsync::EverySec,
    });
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.threads = 2;
    configure(&mut config, None);
    server::serve(config).unwrap();
}

/// Issue 25 item 4: GETs of missing multi-megabyte keys made the monitor keep each key whole
/// (300 × 4 MB: 1.2 GB), its persist a 1.2 GB write batch RocksDB aborted on, and the restart
/// fail. Long keys are now not tracked; the record stays small and the restart works.
#[test]
fn missing_huge_keys_are_not_tracked_and_the_restart_works() {
    let dir = tempfile::tempdir().unwrap();
    let first = TestServer::rocks(dir.path(), |c| configure(c, None));
    let mut con = first.client();
    for i in 0..40u8 {
        let mut huge = vec![b'k'; 1 << 20];
        huge[0] = i;
        let v: Option<Vec<u8>> = redis::cmd("GET").arg(huge).query(&mut con).unwrap();
        assert!(v.is_none());
    }
    let _: () = redis::cmd("SET")
        .arg("small")
        .arg("v")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        info_field(&mut con, "warmup", "warmup_untracked_long_keys"),
        "40"
    );
    assert_eq!(info_field(&mut con, "warmup", "warmup_tracked_keys"), "1");
    first.shutdown().unwrap();

    let second = TestServer::rocks(dir.path(), |c| configure(c, Some("lastk:10")));
    let mut con = second.client();
    wait_for_warmup(&mut con);
    assert_eq!(info_field(&mut con, "warmup", "warmup_tracked_keys"), "1");
    assert_eq!(info_field(&mut con, "warmup", "warmup_loaded"), "1");
    second.shutdown().unwrap();
}
