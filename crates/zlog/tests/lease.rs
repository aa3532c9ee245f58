//! The lease policy live (issue 27 item 4): a server in process, the policy switched at run
//! time with the policy commands — from round trips to a quota, to a delay and back — while a
//! client appends; every acknowledged append readable, no position acknowledged twice, and
//! every position below the tail written or filled once the client released its lease.

use server::{Backend, Config, Fsync, Server};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zlog::{Entry, Log};

fn start() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(Backend::RocksDb {
        data_dir: dir.path().to_path_buf(),
        fsync: Fsync::EverySec,
    });
    config.listen = "127.0.0.1:0".parse().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let server = Server::bind(config).await.unwrap();
            tx.send(server.local_addr()).unwrap();
            server.run(std::future::pending::<()>()).await.unwrap();
        });
    });
    let addr = rx.recv().unwrap();
    (dir, format!("redis://{addr}"))
}

fn policy_file(name: &str) -> String {
    let path = format!(
        "{}/../../policies/zlog/{name}.lua",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn raw(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// `ZLOG.OPEN`'s text and integer fields.
fn open_fields(conn: &mut redis::Connection, log: &str) -> Vec<(String, redis::Value)> {
    let value: redis::Value = redis::cmd("ZLOG.OPEN").arg(log).query(conn).unwrap();
    let redis::Value::Bulk(items) = value else {
        panic!("{value:?}")
    };
    items
        .chunks(2)
        .map(|kv| {
            let name = match &kv[0] {
                redis::Value::Status(s) => s.clone(),
                redis::Value::Data(d) => String::from_utf8_lossy(d).into_owned(),
                other => panic!("{other:?}"),
            };
            (name, kv[1].clone())
        })
        .collect()
}

fn lease_mode(conn: &mut redis::Connection, log: &str) -> (String, i64) {
    let fields = open_fields(conn, log);
    let get = |name: &str| fields.iter().find(|(k, _)| k == name).unwrap().1.clone();
    let mode = match get("lease") {
        redis::Value::Data(d) => String::from_utf8(d).unwrap(),
        other => panic!("{other:?}"),
    };
    let value = match get("lease_value") {
        redis::Value::Int(n) => n,
        other => panic!("{other:?}"),
    };
    (mode, value)
}

/// Waits until the sequencer hands out `mode` (the lease thread decides every 100 ms).
fn wait_for_mode(conn: &mut redis::Connection, log: &str, mode: &str) {
    let until = Instant::now() + Duration::from_secs(10);
    while lease_mode(conn, log).0 != mode {
        assert!(Instant::now() < until, "the lease never became {mode}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_lease_policy_switched_at_run_time_loses_and_repeats_nothing() {
    let (_dir, url) = start();
    let mut admin = raw(&url);
    let mut setup = Log::open(&url, "events").unwrap();
    setup.append(b"setup").unwrap();
    wait_for_mode(&mut admin, "events", "roundtrip");

    let stop = Arc::new(AtomicBool::new(false));
    let appender = {
        let (url, stop) = (url.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut log = Log::open(&url, "events").unwrap();
            let mut acked = Vec::new();
            let mut most_held = 0;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let data = format!("entry {i}");
                acked.push((log.append(data.as_bytes()).unwrap(), data));
                most_held = most_held.max(log.held());
                i += 1;
            }
            log.release().unwrap();
            assert_eq!(log.held(), 0);
            (acked, most_held)
        })
    };
    let load = |admin: &mut redis::Connection, name: &str| {
        let _: redis::Value = redis::cmd("POLICY")
            .arg("LOAD")
            .arg(name)
            .arg(policy_file(name))
            .query(admin)
            .unwrap();
    };
    std::thread::sleep(Duration::from_millis(200));
    load(&mut admin, "quota");
    wait_for_mode(&mut admin, "events", "quota");
    assert_eq!(lease_mode(&mut admin, "events"), ("quota".into(), 100));
    std::thread::sleep(Duration::from_millis(300));
    load(&mut admin, "delay");
    wait_for_mode(&mut admin, "events", "delay");
    std::thread::sleep(Duration::from_millis(300));
    // Back to round trips: a version already in the registry, activated again.
    let _: redis::Value = redis::cmd("POLICY")
        .arg("LOAD")
        .arg("roundtrip")
        .arg(policy_file("roundtrip"))
        .query(&mut admin)
        .unwrap();
    wait_for_mode(&mut admin, "events", "roundtrip");
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let (acked, most_held) = appender.join().unwrap();
    assert!(
        most_held >= 50,
        "the client never held a quota: {most_held}"
    );

    let mut seen = HashSet::new();
    for (pos, _) in &acked {
        assert!(seen.insert(*pos), "position {pos} acknowledged twice");
    }
    let mut reader = Log::open(&url, "events").unwrap();
    for (pos, data) in &acked {
        assert_eq!(
            reader.read(*pos).unwrap(),
            Entry::Data(data.clone().into_bytes()),
            "position {pos}"
        );
    }
    // Positions the client held and did not use were filled: no hole below the tail.
    let tail = reader.tail().unwrap();
    let mut filled = 0;
    for pos in 0..tail {
        match reader.read(pos).unwrap() {
            Entry::Data(_) => {}
            Entry::Filled => filled += 1,
            other => panic!("position {pos} below the tail {tail} is {other:?}"),
        }
    }
    assert_eq!(acked.len() as u64 + 1 + filled, tail);
    eprintln!(
        "{} appends, {filled} held positions filled, tail {tail}, most held {most_held}",
        acked.len()
    );
}

#[test]
fn a_misbehaving_lease_policy_means_round_trips_and_is_reported() {
    let (_dir, url) = start();
    let mut admin = raw(&url);
    let mut log = Log::open(&url, "bad").unwrap();
    log.append(b"x").unwrap();
    let _: redis::Value = redis::cmd("POLICY")
        .arg("LOAD")
        .arg("quota")
        .arg(policy_file("quota"))
        .query(&mut admin)
        .unwrap();
    wait_for_mode(&mut admin, "bad", "quota");
    let _: redis::Value = redis::cmd("POLICY")
        .arg("LOAD")
        .arg("broken")
        .arg("function lease(log) return {mode = 'quota', n = 'many'} end")
        .query(&mut admin)
        .unwrap();
    wait_for_mode(&mut admin, "bad", "roundtrip");
    let fields = open_fields(&mut admin, "bad");
    let get = |name: &str| fields.iter().find(|(k, _)| k == name).unwrap().1.clone();
    assert_eq!(get("lease_failures"), redis::Value::Int(1));
    let redis::Value::Data(error) = get("lease_error") else {
        panic!()
    };
    let error = String::from_utf8(error).unwrap();
    assert!(
        error.starts_with("broken@1: lease(): n must be a number, got string"),
        "{error}"
    );
    // Appends go on, one round trip each.
    let a = log.append(b"a").unwrap();
    let b = log.append(b"b").unwrap();
    assert_eq!(log.held(), 0);
    assert!(b > a);
}
