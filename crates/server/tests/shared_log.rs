//! The shared log's storage contract and sequencer, from a client: every rule of the
//! contract crossed once (second write, stale epoch, seal only newer and its max position,
//! fill idempotent and never over data, trim and its bound), then a randomized run of
//! concurrent writers, fillers, trimmers and sealers whose every acknowledged outcome is
//! checked against the contract afterwards.

mod common;

use common::{Rng, TestServer};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

fn server() -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |_| {});
    (dir, server)
}

/// The reply as text: `OK`, the bulk, `nil`, an integer, or the error's code and message.
fn ask(conn: &mut redis::Connection, args: &[&str]) -> String {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    match cmd.query::<redis::Value>(conn) {
        Ok(redis::Value::Okay) => "OK".into(),
        Ok(redis::Value::Status(s)) => s,
        Ok(redis::Value::Data(d)) => String::from_utf8_lossy(&d).into_owned(),
        Ok(redis::Value::Nil) => "nil".into(),
        Ok(redis::Value::Int(n)) => n.to_string(),
        Ok(other) => format!("{other:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
    }
}

#[test]
fn every_rule_of_the_storage_contract() {
    let (_dir, server) = server();
    let mut c = server.client();
    let c = &mut c;
    // A fresh object: nothing written, max position -1.
    assert_eq!(ask(c, &["ZLOG.READ", "o", "0", "3"]), "nil");
    assert_eq!(ask(c, &["ZLOG.WRITE", "o", "0", "3", "three"]), "OK");
    assert_eq!(ask(c, &["ZLOG.READ", "o", "0", "3"]), "three");
    // A second write is refused, even with the same bytes.
    assert!(ask(c, &["ZLOG.WRITE", "o", "0", "3", "three"]).starts_with("WRITTEN"));
    assert!(ask(c, &["ZLOG.WRITE", "o", "0", "3", "other"]).starts_with("WRITTEN"));
    // Fill: refused over data, idempotent over a hole.
    assert!(ask(c, &["ZLOG.FILL", "o", "0", "3"]).starts_with("WRITTEN"));
    assert_eq!(ask(c, &["ZLOG.FILL", "o", "0", "5"]), "OK");
    assert_eq!(ask(c, &["ZLOG.FILL", "o", "0", "5"]), "OK");
    assert!(ask(c, &["ZLOG.READ", "o", "0", "5"]).starts_with("FILLED"));
    assert!(ask(c, &["ZLOG.WRITE", "o", "0", "5", "late"]).starts_with("FILLED"));
    // Seal: only a newer epoch; it returns the highest position touched (5, the fill).
    assert_eq!(ask(c, &["ZLOG.SEAL", "o", "2"]), "5");
    assert!(ask(c, &["ZLOG.SEAL", "o", "2"]).starts_with("STALE"));
    assert!(ask(c, &["ZLOG.SEAL", "o", "1"]).starts_with("STALE"));
    assert_eq!(ask(c, &["ZLOG.SEAL", "o", "3"]), "5");
    // Every request with an older epoch is refused, naming the sealed one.
    for request in [
        &["ZLOG.WRITE", "o", "2", "7", "x"][..],
        &["ZLOG.READ", "o", "2", "3"],
        &["ZLOG.FILL", "o", "2", "8"],
        &["ZLOG.TRIM", "o", "2", "3"],
        &["ZLOG.TRIMTO", "o", "2", "3"],
    ] {
        assert_eq!(
            ask(c, request),
            "STALE epoch is older than the sealed 3",
            "{request:?}"
        );
    }
    // The current (or a newer) epoch is admitted.
    assert_eq!(ask(c, &["ZLOG.WRITE", "o", "3", "9", "nine"]), "OK");
    assert_eq!(ask(c, &["ZLOG.READ", "o", "4", "9"]), "nine");
    // Trim one position, then everything below 9.
    assert_eq!(ask(c, &["ZLOG.TRIM", "o", "3", "3"]), "OK");
    assert!(ask(c, &["ZLOG.READ", "o", "3", "3"]).starts_with("TRIMMED"));
    assert_eq!(ask(c, &["ZLOG.TRIMTO", "o", "3", "9"]), "OK");
    assert!(ask(c, &["ZLOG.READ", "o", "3", "5"]).starts_with("TRIMMED"));
    assert!(ask(c, &["ZLOG.WRITE", "o", "3", "8", "x"]).starts_with("TRIMMED"));
    assert_eq!(ask(c, &["ZLOG.READ", "o", "3", "9"]), "nine");
    // The entries below the horizon are gone from the store, not just hidden.
    assert_eq!(ask(c, &["EXISTS", "{o}#3"]), "0");
    assert_eq!(ask(c, &["EXISTS", "{o}#9"]), "1");
    // A trim span is bounded per call.
    let far = (9 + 65_537).to_string();
    assert!(ask(c, &["ZLOG.TRIMTO", "o", "3", &far]).contains("at most 65536"));
    // A key that is not a log object is not taken over.
    assert_eq!(ask(c, &["SET", "plain", "value"]), "OK");
    assert!(ask(c, &["ZLOG.WRITE", "plain", "0", "0", "x"]).starts_with("STALE"));
    assert!(ask(c, &["ZLOG.WRITE", "a}b", "0", "0", "x"]).contains("hash tag"));
}

#[test]
fn the_sequencer_hands_out_positions_once_per_epoch() {
    let (_dir, server) = server();
    let mut c = server.client();
    let c = &mut c;
    assert!(ask(c, &["ZLOG.NEXT", "log"]).starts_with("NOSEQ"));
    assert!(ask(c, &["ZLOG.TAIL", "log"]).starts_with("NOSEQ"));
    assert_eq!(ask(c, &["ZLOG.INIT", "log", "1", "10"]), "OK");
    assert_eq!(ask(c, &["ZLOG.NEXT", "log"]), "bulk(int(1), int(10))");
    assert_eq!(ask(c, &["ZLOG.NEXT", "log", "5"]), "bulk(int(1), int(11))");
    assert_eq!(ask(c, &["ZLOG.TAIL", "log"]), "bulk(int(1), int(16))");
    assert!(ask(c, &["ZLOG.INIT", "log", "1", "0"]).starts_with("STALE"));
    assert!(ask(c, &["ZLOG.NEXT", "log", "0"]).contains("count must be"));
    assert!(ask(c, &["ZLOG.NEXT", "log", "2000000"]).contains("count must be"));
    let open = ask(c, &["ZLOG.OPEN", "log"]);
    assert!(
        open.contains("replicas") && open.contains("int(2)"),
        "{open}"
    );
}

/// One acknowledged outcome: what, where, at which epoch, and when (for ordering checks).
#[derive(Debug, Clone)]
struct Done {
    op: &'static str,
    obj: usize,
    pos: u64,
    epoch: u64,
    reply: String,
    data: String,
    start: Instant,
    end: Instant,
}

#[test]
fn the_contract_holds_under_concurrent_writers_fillers_and_sealers() {
    let (_dir, server) = server();
    const OBJECTS: usize = 2;
    const POSITIONS: u64 = 24;
    const THREADS: u64 = 4;
    const OPS: usize = 300;
    let epoch = Arc::new(AtomicU64::new(0));
    let history = Arc::new(Mutex::new(Vec::<Done>::new()));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let mut c = server.client();
            let epoch = Arc::clone(&epoch);
            let history = Arc::clone(&history);
            std::thread::spawn(move || {
                let mut rng = Rng(0x5eed + t);
                for i in 0..OPS {
                    let obj = (rng.next() % OBJECTS as u64) as usize;
                    let name = format!("obj{obj}");
                    let pos = rng.next() % POSITIONS;
                    // Mostly the current epoch, sometimes an older one.
                    let now = epoch.load(Ordering::SeqCst);
                    let e = now.saturating_sub(rng.next() % 4 / 3);
                    let data = format!("t{t}-{i}");
                    let (op, args): (&'static str, Vec<String>) = match rng.next() % 16 {
                        0..=7 => ("write", vec![e.to_string(), pos.to_string(), data.clone()]),
                        8..=10 => ("fill", vec![e.to_string(), pos.to_string()]),
                        11 => ("trim", vec![e.to_string(), pos.to_string()]),
                        12..=13 => ("read", vec![e.to_string(), pos.to_string()]),
                        _ => {
                            let next = epoch.fetch_add(1, Ordering::SeqCst) + 1;
                            ("seal", vec![next.to_string()])
                        }
                    };
                    let command = format!("ZLOG.{}", op.to_uppercase());
                    let mut words = vec![command.as_str(), name.as_str()];
                    words.extend(args.iter().map(String::as_str));
                    let start = Instant::now();
                    let reply = ask(&mut c, &words);
                    let end = Instant::now();
                    let e = if op == "seal" {
                        args[0].parse().unwrap()
                    } else {
                        e
                    };
                    history.lock().unwrap().push(Done {
                        op,
                        obj,
                        pos,
                        epoch: e,
                        reply,
                        data,
                        start,
                        end,
                    });
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let history = history.lock().unwrap().clone();
    let ok = |d: &&Done| d.reply == "OK";

    // Per position: at most one write acknowledged, and never both a write and a fill.
    let mut writes: HashMap<(usize, u64), Vec<&Done>> = HashMap::new();
    let mut fills: HashMap<(usize, u64), usize> = HashMap::new();
    for d in history.iter().filter(ok) {
        match d.op {
            "write" => writes.entry((d.obj, d.pos)).or_default().push(d),
            "fill" => *fills.entry((d.obj, d.pos)).or_default() += 1,
            _ => {}
        }
    }
    for (at, ws) in &writes {
        assert_eq!(ws.len(), 1, "two writes acknowledged at {at:?}: {ws:?}");
        assert!(
            !fills.contains_key(at),
            "a write and a fill acknowledged at {at:?}"
        );
    }
    // A read never returns data other than the acknowledged write's.
    for d in history.iter().filter(|d| d.op == "read") {
        if d.reply.starts_with('t') {
            let w = writes.get(&(d.obj, d.pos)).map(|ws| ws[0]);
            assert_eq!(w.map(|w| w.data.as_str()), Some(d.reply.as_str()), "{d:?}");
        }
    }
    // Seals: each epoch installed once per object, and ordered against the other requests.
    let seals: Vec<&Done> = history
        .iter()
        .filter(|d| d.op == "seal" && !d.reply.starts_with("STALE"))
        .collect();
    let mut installed: HashMap<(usize, u64), usize> = HashMap::new();
    for s in &seals {
        *installed.entry((s.obj, s.epoch)).or_default() += 1;
        let max: i64 = s.reply.parse().expect("a seal replies a position");
        for d in history.iter().filter(|d| d.obj == s.obj && d.reply == "OK") {
            if d.op == "seal" {
                continue;
            }
            // Admitted after the seal finished: its epoch must not be older.
            if d.start > s.end {
                assert!(d.epoch >= s.epoch, "stale {d:?} admitted after {s:?}");
            }
            // Done before the seal started: the seal saw its position.
            if d.end < s.start && d.op != "read" {
                assert!(d.pos as i64 <= max, "{d:?} missing from {s:?}");
            }
        }
    }
    assert!(installed.values().all(|&n| n == 1), "an epoch sealed twice");
    assert!(!seals.is_empty() && !writes.is_empty() && !fills.is_empty());
    let stale = history
        .iter()
        .filter(|d| d.reply.starts_with("STALE"))
        .count();
    assert!(stale > 0, "the run never crossed a stale epoch");

    // The final state agrees with the acknowledged history.
    let mut c = server.client();
    let last = epoch.load(Ordering::SeqCst).to_string();
    for ((obj, pos), ws) in &writes {
        let trimmed = history
            .iter()
            .any(|d| d.op == "trim" && d.reply == "OK" && d.obj == *obj && d.pos == *pos);
        let read = ask(
            &mut c,
            &["ZLOG.READ", &format!("obj{obj}"), &last, &pos.to_string()],
        );
        if trimmed {
            assert!(read.starts_with("TRIMMED"), "{read}");
        } else {
            assert_eq!(read, ws[0].data);
        }
    }
}
