//! The keyspace and admin commands through a real client library (`redis` crate) against a
//! real server: TYPE, UNLINK, TOUCH, TIME, MEMORY USAGE, SCAN, KEYS, FLUSHDB/FLUSHALL,
//! CLIENT LIST|HELP|INFO, SLOWLOG, LATENCY, INFO commandstats|latencystats, the per-command
//! histograms on /metrics and /api/commands, and `maxmemory-policy`'s Redis names.

mod common;

use common::TestServer;
use redis::Commands;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

fn server(tweak: impl FnOnce(&mut server::Config)) -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), tweak);
    (dir, server)
}

fn error_of<T: redis::FromRedisValue + std::fmt::Debug>(result: redis::RedisResult<T>) -> String {
    match result {
        Err(e) => e.to_string(),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

#[test]
fn type_unlink_touch_time_and_memory_usage() {
    let (_dir, server) = server(|_| {});
    let mut c = server.client();
    let _: () = c.set("k", "value").unwrap();
    let _: () = c.set("j", "v").unwrap();
    let kind: String = redis::cmd("TYPE").arg("k").query(&mut c).unwrap();
    assert_eq!(kind, "string");
    let kind: String = redis::cmd("TYPE").arg("nope").query(&mut c).unwrap();
    assert_eq!(kind, "none");

    // TOUCH counts the keys that exist, a key named twice twice; a key only in the store
    // is read back into the cache.
    server.db.forget_cached(&["j".into()]);
    assert!(!server.db.is_cached(b"j"));
    let n: i64 = redis::cmd("TOUCH")
        .arg(&["k", "j", "nope", "k"])
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 3);
    assert!(server.db.is_cached(b"j"));

    // MEMORY USAGE: key + value + the per-object overhead, cached or not.
    let info: String = redis::cmd("INFO").arg("cache").query(&mut c).unwrap();
    let overhead: i64 = info
        .lines()
        .find_map(|l| l.strip_prefix("cache_object_overhead_bytes:"))
        .expect("cache_object_overhead_bytes in INFO cache")
        .trim()
        .parse()
        .unwrap();
    let usage: i64 = redis::cmd("MEMORY")
        .arg(&["USAGE", "k"])
        .query(&mut c)
        .unwrap();
    assert_eq!(usage, 1 + 5 + overhead);
    server.db.forget_cached(&["k".into()]);
    let usage: i64 = redis::cmd("MEMORY")
        .arg(&["usage", "k", "SAMPLES", "5"])
        .query(&mut c)
        .unwrap();
    assert_eq!(usage, 1 + 5 + overhead, "the same when only stored");
    assert!(!server.db.is_cached(b"k"), "MEMORY USAGE is not an access");
    let none: Option<i64> = redis::cmd("MEMORY")
        .arg(&["USAGE", "nope"])
        .query(&mut c)
        .unwrap();
    assert_eq!(none, None);
    let help: Vec<String> = redis::cmd("MEMORY").arg("HELP").query(&mut c).unwrap();
    assert!(help.iter().any(|l| l.starts_with("USAGE")), "{help:?}");

    // UNLINK deletes as DEL does.
    let n: i64 = redis::cmd("UNLINK")
        .arg(&["k", "nope", "j"])
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 2);
    let exists: i64 = redis::cmd("EXISTS").arg(&["k", "j"]).query(&mut c).unwrap();
    assert_eq!(exists, 0);

    let (secs, micros): (String, String) = redis::cmd("TIME").query(&mut c).unwrap();
    let secs: u64 = secs.parse().unwrap();
    let micros: u64 = micros.parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(secs.abs_diff(now) <= 2 && micros < 1_000_000);
}

/// Calls SCAN from `cursor`; the next cursor and the keys.
fn scan(c: &mut redis::Connection, cursor: &str, extra: &[&str]) -> (String, Vec<String>) {
    redis::cmd("SCAN").arg(cursor).arg(extra).query(c).unwrap()
}

#[test]
fn scan_returns_every_key_once_across_writes_with_bounded_pages() {
    let (_dir, server) = server(|_| {});
    let mut c = server.client();
    let original: Vec<String> = (0..500).map(|i| format!("user:{i}")).collect();
    for chunk in original.chunks(100) {
        let pairs: Vec<(&str, &str)> = chunk.iter().map(|k| (k.as_str(), "v")).collect();
        let _: () = c.mset(&pairs).unwrap();
    }
    let mut seen: Vec<String> = Vec::new();
    let mut cursor = "0".to_string();
    let mut calls = 0;
    loop {
        let (next, keys) = scan(&mut c, &cursor, &["COUNT", "7"]);
        assert!(keys.len() <= 7, "COUNT bounds a page: {}", keys.len());
        seen.extend(keys);
        // Writes while the walk goes on: new keys, and a deleted one that was never met.
        let _: () = c.set(format!("new:{calls}"), "v").unwrap();
        if calls == 3 {
            let _: i64 = c.del("user:499").unwrap();
        }
        calls += 1;
        // A retried call (its reply lost) gets its page again; the walk goes on after.
        if calls == 5 {
            let (again, _) = scan(&mut c, &cursor, &["COUNT", "7"]);
            assert_eq!(again, next);
        }
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    assert!(calls >= 500 / 7, "{calls} calls");
    for key in original.iter().filter(|k| *k != "user:499") {
        assert_eq!(
            seen.iter().filter(|s| *s == key).count(),
            1,
            "{key} was not returned exactly once"
        );
    }
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "a key was returned twice");

    // MATCH and TYPE filter what a page returns; COUNT past the cap is cut to it.
    let mut matched = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let (next, keys) = scan(
            &mut c,
            &cursor,
            &["MATCH", "user:4?", "COUNT", "1000000", "TYPE", "string"],
        );
        matched.extend(keys);
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    matched.sort();
    let expected: Vec<String> = (40..50).map(|i| format!("user:{i}")).collect();
    assert_eq!(matched, expected);
    let (_, hashes) = scan(&mut c, "0", &["TYPE", "hash", "COUNT", "10000"]);
    assert!(hashes.is_empty());

    // Cursors this server never handed out, and bad arguments, are errors.
    let unknown = error_of(
        redis::cmd("SCAN")
            .arg("987654321")
            .query::<redis::Value>(&mut c),
    );
    assert!(unknown.contains("start again from 0"), "{unknown}");
    let bad = error_of(redis::cmd("SCAN").arg("x").query::<redis::Value>(&mut c));
    assert!(bad.contains("invalid cursor"), "{bad}");
    let bad = error_of(
        redis::cmd("SCAN")
            .arg(&["0", "COUNT", "0"])
            .query::<redis::Value>(&mut c),
    );
    assert!(bad.contains("syntax error"), "{bad}");

    // redis-rs's own iterator (cursor parsed as an integer) walks it too.
    let all: Vec<String> = c.scan_match("new:*").unwrap().collect();
    assert_eq!(all.len(), calls);
}

#[test]
fn keys_matches_with_the_glob_and_refuses_past_its_limit() {
    let (_dir, server) = server(|_| {});
    let mut c = server.client();
    let _: () = c.mset(&[("a1", "v"), ("a2", "v"), ("b1", "v")]).unwrap();
    let _: () = redis::cmd("SET")
        .arg(&["gone", "v", "PX", "1"])
        .query(&mut c)
        .unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let mut keys: Vec<String> = c.keys("a*").unwrap();
    keys.sort();
    assert_eq!(keys, ["a1", "a2"]);
    let mut keys: Vec<String> = c.keys("*").unwrap();
    keys.sort();
    assert_eq!(keys, ["a1", "a2", "b1"], "the expired key is not listed");

    // One key past the limit: refused before any walk, naming the limit and SCAN.
    let limit = 100_000;
    let mut i = 0;
    while i <= limit {
        let pairs: Vec<(String, &str)> = (i..(i + 5000).min(limit + 1))
            .map(|k| (format!("bulk:{k}"), "v"))
            .collect();
        i += pairs.len();
        let _: () = c.mset(&pairs).unwrap();
    }
    let error = error_of(c.keys::<_, Vec<String>>("bulk:1"));
    assert!(
        error.contains("at most 100000 keys") && error.contains("SCAN"),
        "{error}"
    );
}

#[test]
fn flush_is_refused_without_enable_flush() {
    let (_dir, server) = server(|_| {});
    let mut c = server.client();
    let _: () = c.set("k", "v").unwrap();
    for command in ["FLUSHDB", "FLUSHALL"] {
        let error = error_of(redis::cmd(command).query::<String>(&mut c));
        assert!(error.contains("--enable-flush"), "{error}");
    }
    let value: String = c.get("k").unwrap();
    assert_eq!(value, "v");
}

#[test]
fn flush_with_enable_flush_empties_store_and_cache_durably() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |c| c.enable_flush = true);
    let mut c = server.client();
    for i in 0..100 {
        let _: () = c.set(format!("k{i}"), "v").unwrap();
    }
    let ok: String = redis::cmd("FLUSHALL").arg("ASYNC").query(&mut c).unwrap();
    assert_eq!(ok, "OK");
    let size: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(size, 0);
    let value: Option<String> = c.get("k1").unwrap();
    assert_eq!(value, None);
    assert!(!server.db.is_cached(b"k2"));
    let _: () = c.set("after", "v").unwrap();
    let ok: String = redis::cmd("FLUSHDB").query(&mut c).unwrap();
    assert_eq!(ok, "OK");
    let bad = error_of(redis::cmd("FLUSHDB").arg("LATER").query::<String>(&mut c));
    assert!(bad.contains("syntax error"), "{bad}");
    let _: () = c.set("kept", "v").unwrap();
    drop(c);
    server.shutdown().unwrap();
    // After a restart: only what was written after the flush.
    let server = TestServer::rocks(dir.path(), |_| {});
    let mut c = server.client();
    let keys: Vec<String> = c.keys("*").unwrap();
    assert_eq!(keys, ["kept"]);
}

#[test]
fn client_list_help_and_info() {
    let (_dir, server) = server(|_| {});
    let mut a = server.client();
    let mut b = server.client();
    let _: () = redis::cmd("CLIENT")
        .arg(&["SETNAME", "worker-a"])
        .query(&mut a)
        .unwrap();
    let _: Option<String> = b.get("k").unwrap();
    let b_id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut b).unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut a).unwrap();
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 2, "{list}");
    let a_line = lines.iter().find(|l| l.contains("name=worker-a")).unwrap();
    assert!(a_line.contains(" cmd=client "), "{a_line}");
    assert!(
        a_line.contains(&format!("laddr={}", server.addr)),
        "{a_line}"
    );
    let b_line = lines
        .iter()
        .find(|l| l.starts_with(&format!("id={b_id} ")))
        .unwrap();
    assert!(b_line.contains(" cmd=client "), "{b_line}");
    let only_b: String = redis::cmd("CLIENT")
        .arg(&["LIST", "ID", &b_id.to_string()])
        .query(&mut a)
        .unwrap();
    assert_eq!(only_b.lines().count(), 1);
    assert!(only_b.starts_with(&format!("id={b_id} ")), "{only_b}");
    let replicas: String = redis::cmd("CLIENT")
        .arg(&["LIST", "TYPE", "replica"])
        .query(&mut a)
        .unwrap();
    assert_eq!(replicas, "");

    let info: String = redis::cmd("CLIENT").arg("INFO").query(&mut a).unwrap();
    assert!(
        info.contains("name=worker-a") && info.contains("resp=2"),
        "{info}"
    );

    // CLIENT HELP lists the subcommands (it used to answer "unknown subcommand 'HELP'").
    let help: Vec<String> = redis::cmd("CLIENT").arg("HELP").query(&mut a).unwrap();
    for sub in [
        "GETNAME", "ID", "INFO", "LIST", "SETINFO", "SETNAME", "HELP",
    ] {
        assert!(
            help.iter().any(|l| l.starts_with(sub)),
            "no {sub} in {help:?}"
        );
    }
    drop(b);
    let mut left = 2;
    for _ in 0..100 {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut a).unwrap();
        left = list.lines().count();
        if left == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(left, 1, "a closed connection leaves the list");
}

#[test]
fn slowlog_keeps_the_slow_commands_newest_first_within_its_length() {
    let (_dir, server) = server(|_| {});
    let mut c = server.client();
    let threshold: HashMap<String, String> = redis::cmd("CONFIG")
        .arg(&["GET", "slowlog-*"])
        .query(&mut c)
        .unwrap();
    assert_eq!(threshold["slowlog-log-slower-than"], "10000");
    assert_eq!(threshold["slowlog-max-len"], "128");
    let _: () = redis::cmd("CONFIG")
        .arg(&[
            "SET",
            "slowlog-log-slower-than",
            "0",
            "slowlog-max-len",
            "3",
        ])
        .query(&mut c)
        .unwrap();
    for i in 0..5 {
        let _: () = c.set(format!("k{i}"), "v").unwrap();
    }
    type Entry = (i64, i64, i64, Vec<String>, String, String);
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg(&["GET", "2"])
        .query(&mut c)
        .unwrap();
    let entries: Vec<Entry> = entries
        .iter()
        .map(|e| redis::from_redis_value(e).unwrap())
        .collect();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].3, ["SET", "k4", "v"]);
    assert_eq!(entries[1].3, ["SET", "k3", "v"]);
    assert!(entries[0].0 > entries[1].0, "newest first");
    let len: i64 = redis::cmd("SLOWLOG").arg("LEN").query(&mut c).unwrap();
    assert_eq!(len, 3, "bounded by slowlog-max-len");
    let all: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg(&["GET", "-1"])
        .query(&mut c)
        .unwrap();
    assert_eq!(all.len(), 3);
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query(&mut c).unwrap();
    // Off: nothing more is logged (the RESET itself ran before the log was emptied).
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "slowlog-log-slower-than", "-1"])
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query(&mut c).unwrap();
    let _: () = c.set("x", "v").unwrap();
    let len: i64 = redis::cmd("SLOWLOG").arg("LEN").query(&mut c).unwrap();
    assert_eq!(len, 0);
    let bad = error_of(
        redis::cmd("CONFIG")
            .arg(&["SET", "slowlog-max-len", "100000000"])
            .query::<String>(&mut c),
    );
    assert!(bad.contains("between 0 and 10000"), "{bad}");
}

#[test]
fn pipelined_commands_are_each_recorded_once_with_their_own_arguments() {
    // A pipeline's commands share clock readings (each starts where the one before ended):
    // every one is still counted, slow-logged and named by its own request.
    let (_dir, server) = server(|_| {});
    let mut c = server.client();
    let _: () = redis::cmd("CONFIG")
        .arg(&[
            "SET",
            "slowlog-log-slower-than",
            "0",
            "slowlog-max-len",
            "100",
        ])
        .query(&mut c)
        .unwrap();
    let _: () = c.set("present", "v").unwrap();
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query(&mut c).unwrap();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    let mut pipe = redis::pipe();
    for i in 0..20 {
        pipe.cmd("GET").arg(format!("k{i}"));
        pipe.cmd("EXISTS").arg("present");
    }
    let _: Vec<redis::Value> = pipe.query(&mut c).unwrap();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    for prefix in ["cmdstat_get:calls=20,", "cmdstat_exists:calls=20,"] {
        assert!(
            stats.lines().any(|l| l.starts_with(prefix)),
            "{prefix} {stats}"
        );
    }
    type Entry = (i64, i64, i64, Vec<String>, String, String);
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg(&["GET", "-1"])
        .query(&mut c)
        .unwrap();
    let mut logged: Vec<Vec<String>> = entries
        .iter()
        .map(|e| redis::from_redis_value::<Entry>(e).unwrap().3)
        .collect();
    // Newest first; SLOWLOG RESET (logged once it emptied the log) and CONFIG RESETSTAT ran
    // before the pipeline, INFO after it.
    logged.reverse();
    let expected: Vec<Vec<String>> = (0..20)
        .flat_map(|i| {
            [
                vec!["GET".to_string(), format!("k{i}")],
                vec!["EXISTS".to_string(), "present".to_string()],
            ]
        })
        .collect();
    assert_eq!(logged.len(), expected.len() + 3, "{logged:?}");
    assert_eq!(logged[2..logged.len() - 1], expected[..]);
}

fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    raw.split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string()
}

#[test]
fn per_command_latency_in_info_latency_metrics_and_the_dashboard_api() {
    let (_dir, server) = server(|c| c.metrics_listen = Some("127.0.0.1:0".parse().unwrap()));
    let mut c = server.client();
    for i in 0..50 {
        let _: () = c.set(format!("k{i}"), "v").unwrap();
        let _: Option<String> = c.get(format!("k{i}")).unwrap();
    }
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    assert!(
        !info.contains("cmdstat_"),
        "not in a plain INFO, as in Redis"
    );
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    let get_line = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_get:"))
        .unwrap_or_else(|| panic!("{stats}"));
    assert!(
        get_line.starts_with("cmdstat_get:calls=50,usec="),
        "{get_line}"
    );
    assert!(get_line.contains(",usec_per_call="), "{get_line}");
    let latency: String = redis::cmd("INFO")
        .arg("latencystats")
        .query(&mut c)
        .unwrap();
    let line = latency
        .lines()
        .find(|l| l.starts_with("latency_percentiles_usec_get:"))
        .unwrap_or_else(|| panic!("{latency}"));
    let fields: Vec<&str> = line.split_once(':').unwrap().1.split(',').collect();
    assert_eq!(fields.len(), 3, "{line}");
    for (field, name) in fields.iter().zip(["p50=", "p99=", "p99.9="]) {
        assert!(field.starts_with(name), "{line}");
        field[name.len()..].parse::<f64>().unwrap();
    }
    assert!(
        latency.contains("latency_percentiles_usec_set:"),
        "{latency}"
    );
    let everything: String = redis::cmd("INFO").arg("everything").query(&mut c).unwrap();
    assert!(everything.contains("# Latencystats") && everything.contains("# Commandstats"));

    // LATENCY HISTOGRAM: calls and cumulative power-of-two buckets, as Redis 7 (RESP2 maps
    // are flat arrays).
    let histogram: Vec<redis::Value> = redis::cmd("LATENCY")
        .arg(&["HISTOGRAM", "get"])
        .query(&mut c)
        .unwrap();
    assert_eq!(histogram.len(), 2, "{histogram:?}");
    let redis::Value::Bulk(ref body) = histogram[1] else {
        panic!("{histogram:?}")
    };
    assert_eq!(body[1], redis::Value::Int(50), "{body:?}");
    let redis::Value::Bulk(ref buckets) = body[3] else {
        panic!("{body:?}")
    };
    assert_eq!(buckets.last(), Some(&redis::Value::Int(50)), "{buckets:?}");
    // LATENCY LATEST: nothing recorded while latency-monitor-threshold is 0 (the default).
    let latest: Vec<redis::Value> = redis::cmd("LATENCY").arg("LATEST").query(&mut c).unwrap();
    assert!(latest.is_empty(), "{latest:?}");

    let metrics_addr = server.metrics_addr.unwrap();
    let metrics = http_get(metrics_addr, "/metrics");
    assert!(
        metrics.contains("mantle_command_duration_seconds_count{command=\"get\"} 50"),
        "{metrics}"
    );
    let api: serde_json::Value =
        serde_json::from_str(&http_get(metrics_addr, "/api/commands")).unwrap();
    let rows = api["commands"].as_array().unwrap();
    let get = rows.iter().find(|r| r["name"] == "get").unwrap();
    assert_eq!(get["calls"], 50);
    assert!(get["p99_us"].as_u64().unwrap() >= get["p50_us"].as_u64().unwrap());

    // CONFIG RESETSTAT starts the figures again.
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    assert!(!stats.contains("cmdstat_get:"), "{stats}");
}

#[test]
fn maxmemory_policy_speaks_redis_names() {
    let (_dir, server) = server(|_| {});
    let mut c = server.client();
    let get_policy = |c: &mut redis::Connection| -> String {
        let pairs: HashMap<String, String> = redis::cmd("CONFIG")
            .arg(&["GET", "maxmemory-policy"])
            .query(c)
            .unwrap();
        pairs["maxmemory-policy"].clone()
    };
    assert_eq!(get_policy(&mut c), "allkeys-lru");
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory-policy", "allkeys-lru"])
        .query(&mut c)
        .unwrap();
    let _: () = c.set("k", "v").unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory-policy", "s3fifo"])
        .query(&mut c)
        .unwrap();
    assert_eq!(get_policy(&mut c), "s3fifo");
    let info: String = redis::cmd("INFO").arg("memory").query(&mut c).unwrap();
    assert!(info.contains("maxmemory_policy:s3fifo"), "{info}");
    let value: String = c.get("k").unwrap();
    assert_eq!(value, "v", "the store still has what the old cache held");
    let error = error_of(
        redis::cmd("CONFIG")
            .arg(&["SET", "maxmemory-policy", "allkeys-random"])
            .query::<String>(&mut c),
    );
    assert!(
        error.contains("'allkeys-random' has no equivalent in Mantle; accepted: allkeys-lru, lru"),
        "{error}"
    );
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory-policy", "ALLKEYS-LRU"])
        .query(&mut c)
        .unwrap();
    assert_eq!(get_policy(&mut c), "allkeys-lru");
}

#[test]
fn commands_are_declared_with_their_flags_and_keys() {
    let (_dir, server) = server(|_| {});
    let mut c = server.client();
    let info: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg(&[
            "INFO", "type", "unlink", "touch", "scan", "keys", "flushall", "memory",
        ])
        .query(&mut c)
        .unwrap();
    assert_eq!(info.len(), 7);
    assert!(info.iter().all(|v| *v != redis::Value::Nil), "{info:?}");
}
