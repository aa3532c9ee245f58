//! Shadows and the switch policy on a real server over loopback (`POLICY SHADOW`, `POLICY
//! SWITCH`, see docs/adaptive.md "In the server"): a shadow fed the live access stream counts
//! what the real cache counts, a sampled one estimates it, bounds hold against greedy and
//! hostile shadows, and the switch policy's choice becomes active through the registry.

mod common;

use common::TestServer;
use redis::Value;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn manual(dir: &std::path::Path, tweak: impl FnOnce(&mut server::Config)) -> TestServer {
    TestServer::rocks(dir, |c| {
        c.max_keys = Some(1_000);
        c.manual_tick = true;
        c.policy_echo = false;
        tweak(c);
    })
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::Data(d)) => String::from_utf8_lossy(d).into_owned(),
        Some(Value::Int(n)) => n.to_string(),
        Some(Value::Status(s)) => s.clone(),
        Some(Value::Nil) | None => String::new(),
        other => format!("{other:?}"),
    }
}

fn num(m: &HashMap<String, Value>, k: &str) -> f64 {
    let t = text(m.get(k));
    t.parse()
        .unwrap_or_else(|_| panic!("{k} = {t:?} is not a number in {m:?}"))
}

fn policy(c: &mut redis::Connection, args: &[&str]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd("POLICY");
    for a in args {
        cmd.arg(*a);
    }
    cmd.query(c)
}

fn ok(c: &mut redis::Connection, args: &[&str]) -> Value {
    policy(c, args).unwrap_or_else(|e| panic!("POLICY {args:?}: {e}"))
}

fn err(c: &mut redis::Connection, args: &[&str]) -> String {
    match policy(c, args) {
        Err(e) => e.to_string(),
        Ok(v) => panic!("POLICY {args:?} should fail, got {v:?}"),
    }
}

fn status(c: &mut redis::Connection, name: &str) -> HashMap<String, Value> {
    redis::cmd("POLICY")
        .arg("SHADOW")
        .arg("STATUS")
        .arg(name)
        .query(c)
        .unwrap()
}

fn tick(c: &mut redis::Connection, now: f64) -> HashMap<String, Value> {
    redis::cmd("POLICY").arg("TICK").arg(now).query(c).unwrap()
}

fn log(c: &mut redis::Connection) -> Vec<String> {
    redis::cmd("POLICY").arg("LOG").arg(500).query(c).unwrap()
}

fn load(c: &mut redis::Connection, name: &str, source: &str) {
    ok(c, &["LOAD", name, source, "AUTHOR", "test"]);
}

/// A policy that keeps the cache at `n` objects (what policies/fixed.lua does with params.n).
fn keep(n: u64) -> String {
    format!(
        "function when() return servers[whoami].cachesize > {n} end\n\
         function howmuch() return servers[whoami].cachesize - {n} end"
    )
}

const FIXED: &str = include_str!("../../../policies/fixed.lua");

/// A deterministic stream over `keys` keys that moves through the key space: the first access
/// of a key writes it (so every GET finds it in the store), later ones read it, with a write in
/// twenty and a DEL in fifty. `per_tick` requests between ticks, `ticks` ticks.
struct Stream {
    state: u64,
    seen: std::collections::HashSet<u64>,
    keys: u64,
    i: u64,
}

impl Stream {
    fn new(keys: u64) -> Stream {
        Stream {
            state: 0x9E37_79B9_7F4A_7C15,
            seen: Default::default(),
            keys,
            i: 0,
        }
    }

    /// Sends `n` requests pipelined in one batch (one connection keeps their order).
    fn send(&mut self, c: &mut redis::Connection, n: u64) {
        let mut pipe = redis::pipe();
        for _ in 0..n {
            self.state = self
                .state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let r = self.state >> 33;
            // A hot basin of a fifth of the keys that drifts along the key space.
            let key = (self.i / 500 * 7 + r % (self.keys / 5)) % self.keys;
            self.i += 1;
            let name = format!("key:{key}");
            if self.seen.insert(key) || r.is_multiple_of(20) {
                pipe.cmd("SET").arg(&name).arg("value").ignore();
            } else if r.is_multiple_of(51) {
                pipe.cmd("DEL").arg(&name).ignore();
                self.seen.remove(&key);
            } else {
                pipe.cmd("GET").arg(&name).ignore();
            }
        }
        let () = pipe.query(c).unwrap();
    }
}

fn cache_stats(c: &mut redis::Connection) -> HashMap<String, Value> {
    redis::cmd("CACHE").arg("STATS").query(c).unwrap()
}

#[test]
fn an_unsampled_shadow_of_the_running_policy_counts_exactly_the_real_caches_hits_and_misses() {
    let dir = tempfile::tempdir().unwrap();
    let server = manual(dir.path(), |_| {});
    let mut c = server.client();
    load(&mut c, "fixed", FIXED);
    ok(&mut c, &["PARAM", "n", "60"]);
    assert_eq!(
        text(Some(&ok(&mut c, &["SHADOW", "ADD", "fixed"]))),
        "fixed@1"
    );
    // The same policy with other params and the same with its own label: both run beside it.
    ok(&mut c, &["SHADOW", "ADD", "fixed@1", "n=30"]);
    let before = cache_stats(&mut c);
    let mut stream = Stream::new(400);
    for t in 1..=30 {
        stream.send(&mut c, 200);
        tick(&mut c, t as f64);
    }
    let after = cache_stats(&mut c);
    let delta = |k: &str| num(&after, k) - num(&before, k);
    let shadow = status(&mut c, "fixed@1");
    assert_eq!(text(shadow.get("role")), "shadow");
    assert_eq!(text(shadow.get("active")), "1");
    assert!(delta("misses") > 300.0, "the stream must miss: {after:?}");
    assert!(num(&after, "evictions") > 500.0, "and evict: {after:?}");
    assert_eq!(num(&shadow, "total_hits"), delta("hits"), "{shadow:?}");
    assert_eq!(num(&shadow, "total_misses"), delta("misses"), "{shadow:?}");
    assert_eq!(num(&shadow, "ticks"), 30.0);
    assert_eq!(num(&shadow, "total_errors"), 0.0);
    assert!(num(&shadow, "total_decisions") > 0.0);
    assert!(num(&shadow, "peak_objects") <= 60.0 + 200.0);
    // The smaller cache misses more; it is not what runs.
    let small = status(&mut c, "fixed@1:n=30");
    assert_eq!(text(small.get("active")), "0");
    assert!(num(&small, "total_misses") > num(&shadow, "total_misses"));

    // Every candidate, the real cache first; INFO and the log show them too.
    let all: Vec<HashMap<String, Value>> = redis::cmd("POLICY")
        .arg("SHADOW")
        .arg("STATUS")
        .query(&mut c)
        .unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(text(all[0].get("role")), "active");
    assert_eq!(text(all[0].get("name")), "fixed@1");
    assert_eq!(num(&all[0], "hit_ratio"), num(&shadow, "hit_ratio"));
    let info: String = redis::cmd("INFO").arg("shadows").query(&mut c).unwrap();
    assert!(info.contains("# Shadows"), "{info}");
    assert!(info.contains("shadow_count:2"), "{info}");
    assert!(info.contains("active:name=fixed@1,"), "{info}");
    assert!(info.contains("shadow_1:name=fixed@1:n=30,"), "{info}");
    let lines = log(&mut c);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("shadow fixed@1:n=30, last 10 ticks: hit_ratio=")),
        "{lines:#?}"
    );
    let list: Vec<String> = redis::cmd("POLICY")
        .arg("SHADOW")
        .arg("LIST")
        .query(&mut c)
        .unwrap();
    assert_eq!(list.len(), 2);
    assert!(list[0].starts_with("fixed@1 policy=fixed@1"), "{list:?}");
    assert!(list[0].ends_with(" active"), "{list:?}");
    server.shutdown().unwrap();
}

#[test]
fn a_sampled_shadow_estimates_the_real_caches_figures() {
    let dir = tempfile::tempdir().unwrap();
    let server = manual(dir.path(), |_| {});
    let mut c = server.client();
    load(&mut c, "fixed", FIXED);
    ok(&mut c, &["PARAM", "n", "3200"]);
    ok(&mut c, &["SHADOW", "ADD", "fixed", "sample=0.25"]);
    let before = cache_stats(&mut c);
    // Which keys fall in the sample depends on the server's per-process hash seed, so the
    // estimate's error is random: with 8,000 keys it exceeded 0.05 in 4 of 100 runs (mean
    // 0.018). With four times the keys and requests (SHARDS' error shrinks as more keys are
    // sampled) 60 runs gave a mean of 0.004 and at most 0.011, far inside the bound.
    let mut stream = Stream::new(32_000);
    for t in 1..=20 {
        stream.send(&mut c, 8_000);
        tick(&mut c, t as f64);
    }
    let after = cache_stats(&mut c);
    let (hits, misses) = (
        num(&after, "hits") - num(&before, "hits"),
        num(&after, "misses") - num(&before, "misses"),
    );
    let real = misses / (hits + misses);
    let s = status(&mut c, "fixed@1");
    assert_eq!(num(&s, "sample"), 0.25);
    let lookups = num(&s, "total_lookups");
    let estimate = num(&s, "total_misses") / lookups;
    // Scaled to the whole key space: about as many lookups, about the same miss ratio.
    assert!(
        (lookups / (hits + misses) - 1.0).abs() < 0.1,
        "lookups {lookups} vs {}",
        hits + misses
    );
    assert!(
        (estimate - real).abs() < 0.05,
        "miss ratio: shadow {estimate}, real {real}"
    );
    assert!(
        real > 0.1 && real < 0.9,
        "the stream must hit and miss: {real}"
    );
    // Its cache holds about a quarter of the entries; its sizes are scaled back up.
    assert!(num(&s, "objects") < 300.0, "{s:?}");
    assert!(
        (700.0..=1_000.0).contains(&num(&s, "peak_objects")),
        "{s:?}"
    );
    server.shutdown().unwrap();
}

#[test]
fn drop_frees_a_shadow_and_the_request_path_stops_feeding() {
    let dir = tempfile::tempdir().unwrap();
    let server = manual(dir.path(), |_| {});
    let mut c = server.client();
    load(&mut c, "fixed", FIXED);
    ok(
        &mut c,
        &["SHADOW", "ADD", "fixed", "sample=0.5", "label=half"],
    );
    assert!((0..1000u64).any(|k| server.db.shadow_feed().wants(k)));
    Stream::new(100).send(&mut c, 300);
    tick(&mut c, 1.0);
    assert!(num(&status(&mut c, "half"), "objects") > 0.0);
    ok(&mut c, &["SHADOW", "DROP", "half"]);
    assert!(!(0..1000u64).any(|k| server.db.shadow_feed().wants(k)));
    assert!(err(&mut c, &["SHADOW", "STATUS", "half"]).contains("no shadow named 'half'"));
    assert!(err(&mut c, &["SHADOW", "DROP", "half"]).contains("no shadow named 'half'"));
    let info: String = redis::cmd("INFO").arg("shadows").query(&mut c).unwrap();
    assert!(info.contains("shadow_count:0"), "{info}");
    assert!(!info.contains("shadow_0:"), "{info}");
    assert!(log(&mut c)
        .iter()
        .any(|l| l.contains("shadow half dropped")));
    server.shutdown().unwrap();
}

#[test]
fn bad_shadows_are_refused_with_the_reason_and_the_count_and_memory_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let server = manual(dir.path(), |_| {});
    let mut c = server.client();
    load(&mut c, "fixed", FIXED);
    for (args, expect) in [
        (vec!["SHADOW", "ADD", "nosuch"], "no policy named 'nosuch'"),
        (
            vec!["SHADOW", "ADD", "fixed@7"],
            "no policy version fixed@7",
        ),
        (vec!["SHADOW", "ADD", "fixed@x"], "invalid policy version"),
        (
            vec!["SHADOW", "ADD", "fixed", "n"],
            "not of the form key=value",
        ),
        (vec!["SHADOW", "ADD", "fixed", "sample=2"], "sample=2"),
        (
            vec!["SHADOW", "ADD", "fixed", "max_objects=0"],
            "max_objects=0",
        ),
        (
            vec!["SHADOW", "ADD", "fixed", "max_objects=9000000"],
            "shadow memory",
        ),
        (vec!["SHADOW", "DANCE"], "Try ADD, LIST, STATUS or DROP"),
        (
            vec!["SWITCH", "LOAD", "x = 1"],
            "switch(candidates, current)",
        ),
    ] {
        let e = err(&mut c, &args);
        assert!(e.contains(expect), "{args:?}: {e}");
    }
    for i in 0..8 {
        ok(&mut c, &["SHADOW", "ADD", "fixed", &format!("n={i}")]);
        if i == 0 {
            assert!(err(&mut c, &["SHADOW", "ADD", "fixed", "n=0"]).contains("already named"));
        }
    }
    assert!(err(&mut c, &["SHADOW", "ADD", "fixed", "n=9"]).contains("too many shadows: at most 8"));
    for i in 0..8 {
        ok(&mut c, &["SHADOW", "DROP", &format!("fixed@1:n={i}")]);
    }
    // The memory cap holds whatever the policy asks: 10 entries for a stream of 100 keys.
    ok(&mut c, &["SHADOW", "ADD", "fixed", "max_objects=10"]);
    let mut stream = Stream::new(100);
    for t in 1..=3 {
        stream.send(&mut c, 200);
        tick(&mut c, t as f64);
    }
    let s = status(&mut c, "fixed@1");
    assert_eq!(num(&s, "objects"), 10.0, "{s:?}");
    assert_eq!(num(&s, "max_objects"), 10.0);
    assert!(num(&s, "capped_ticks") > 0.0, "{s:?}");
    server.shutdown().unwrap();
}

#[test]
fn a_hostile_shadow_is_contained_like_the_live_policy() {
    let dir = tempfile::tempdir().unwrap();
    let server = manual(dir.path(), |c| {
        c.policy_limits.instructions = 2_000_000;
    });
    let mut c = server.client();
    load(&mut c, "fixed", FIXED);
    ok(&mut c, &["PARAM", "n", "50"]);
    load(&mut c, "spin", "function when() while true do end end");
    load(&mut c, "boom", "function when() error('boom') end");
    load(
        &mut c,
        "hog",
        "function when() local t = {} for i = 1, 1e9 do t[i] = i end end",
    );
    ok(&mut c, &["USE", "fixed"]);
    for p in ["spin", "boom", "hog"] {
        ok(&mut c, &["SHADOW", "ADD", p]);
    }
    let mut stream = Stream::new(200);
    let started = Instant::now();
    for t in 1..=5 {
        stream.send(&mut c, 100);
        let reply = tick(&mut c, t as f64);
        assert_eq!(
            text(reply.get("error")),
            "",
            "the live policy keeps working"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(60));
    for p in ["spin@1", "boom@1", "hog@1"] {
        let s = status(&mut c, p);
        assert!(num(&s, "total_errors") >= 1.0, "{p}: {s:?}");
        assert!(num(&s, "total_lookups") > 0.0, "{p} keeps serving: {s:?}");
    }
    let active: HashMap<String, Value> = redis::cmd("POLICY").arg("STATUS").query(&mut c).unwrap();
    assert_eq!(text(active.get("active")), "fixed@1");
    assert_eq!(text(active.get("errors")), "0");
    let lines = log(&mut c);
    for p in ["spin@1", "boom@1"] {
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&format!("shadow {p} failed"))),
            "{p}: {lines:#?}"
        );
    }
    assert!(lines.iter().any(|l| l.contains("boom")));
    server.shutdown().unwrap();
}

/// The `key:value` lines of a `/metrics` scrape.
fn scrape(addr: std::net::SocketAddr) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn the_switch_policy_activates_the_better_candidate_through_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let server = manual(dir.path(), |c| {
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    });
    let mut c = server.client();
    // Candidates in preference order: `small` runs first; `big` and `big2` hold the whole
    // working set and tie, so the earlier one, `big`, is the one to win.
    load(&mut c, "big", &keep(300));
    load(&mut c, "big2", &keep(310));
    load(&mut c, "small", &keep(15));
    for p in ["small", "big", "big2"] {
        ok(&mut c, &["SHADOW", "ADD", p]);
    }
    let switch = include_str!("../../../policies/switch.lua");
    ok(&mut c, &["SWITCH", "LOAD", "dwell=4", "warm=2", switch]);
    let mut stream = Stream::new(400);
    let mut switched_at = Vec::new();
    for t in 1..=20 {
        stream.send(&mut c, 150);
        tick(&mut c, t as f64);
        let s: HashMap<String, Value> = redis::cmd("POLICY").arg("STATUS").query(&mut c).unwrap();
        let active = text(s.get("active"));
        if switched_at.last().map(|(_, a): &(u64, String)| a.as_str()) != Some(active.as_str()) {
            switched_at.push((t, active));
        }
    }
    // small from the start, then big once, at or after the dwell, and never back (hysteresis).
    assert_eq!(switched_at.len(), 2, "{switched_at:?}");
    assert_eq!(switched_at[0].1, "small@1");
    assert_eq!(switched_at[1].1, "big@1");
    assert!(switched_at[1].0 >= 4, "dwell: {switched_at:?}");
    let lines = log(&mut c);
    let line = lines
        .iter()
        .find(|l| l.contains("switched"))
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert!(line.contains("from small@1 to big@1"), "{line}");
    assert!(line.contains("thrashing"), "{line}");
    // Through the registry: the previous version is one ROLLBACK away.
    let s: HashMap<String, Value> = redis::cmd("POLICY").arg("STATUS").query(&mut c).unwrap();
    assert_eq!(text(s.get("previous")), "small@1");
    let sw: HashMap<String, Value> = redis::cmd("POLICY")
        .arg("SWITCH")
        .arg("STATUS")
        .query(&mut c)
        .unwrap();
    assert_eq!(text(sw.get("switches")), "1");
    assert_eq!(text(sw.get("calls")), "20");
    let metrics = scrape(server.metrics_addr.unwrap());
    assert!(metrics.contains("mantle_switches_total 1"), "{metrics}");
    assert!(
        metrics.contains("mantle_shadow_hit_ratio{candidate=\"big@1\",role=\"shadow\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mantle_shadow_misses{candidate=\"big@1\",role=\"active\"}"),
        "{metrics}"
    );
    ok(&mut c, &["SWITCH", "OFF"]);
    let sw: HashMap<String, Value> = redis::cmd("POLICY")
        .arg("SWITCH")
        .arg("STATUS")
        .query(&mut c)
        .unwrap();
    assert_eq!(text(sw.get("loaded")), "0");
    server.shutdown().unwrap();
}

/// `INFO shadows` as `field -> value`.
fn info_shadows(c: &mut redis::Connection) -> HashMap<String, String> {
    let info: String = redis::cmd("INFO").arg("shadows").query(c).unwrap();
    info.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// One `k=v` of an `INFO shadows` candidate line.
fn part<'a>(line: &'a str, key: &str) -> &'a str {
    line.split(',')
        .find_map(|kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}

/// Polls `check` every 50 ms until it returns something, for at most `bound` (a safety bound,
/// not a performance figure: a loaded machine only makes it take longer).
fn within<T>(bound: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "not within {bound:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn on_wall_ticks_shadows_fill_their_windows_and_the_switch_policy_switches_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |c| {
        c.max_keys = Some(1_000);
        c.tick = Duration::from_millis(200);
        c.policy_echo = false;
    });
    let mut c = server.client();
    load(&mut c, "big", &keep(300));
    load(&mut c, "small", &keep(15));
    for p in ["small", "big"] {
        ok(&mut c, &["SHADOW", "ADD", p]);
    }
    let switch = include_str!("../../../policies/switch.lua");
    // cost=0: fewest misses wins. At full speed the window holds tens of thousands of lookups,
    // and the default memory charge per lookup would rightly favour the small cache's figures.
    ok(
        &mut c,
        &["SWITCH", "LOAD", "dwell=3", "warm=2", "cost=0", switch],
    );
    // Traffic from its own connection for as long as the test looks, at whatever rate the
    // machine gives it: every wall tick sees some of it.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let stop = stop.clone();
        let mut c = server.client();
        std::thread::spawn(move || {
            let mut stream = Stream::new(400);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                stream.send(&mut c, 100);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let bound = Duration::from_secs(60);
    // The shadows' windows fill on the server's own clock: no POLICY TICK is ever sent.
    within(bound, "both shadows report a full window", || {
        let info = info_shadows(&mut c);
        let full = |k: &str| {
            info.get(k)
                .is_some_and(|l| part(l, "window_ticks").parse::<u64>().unwrap() >= 2)
        };
        (info.get("shadow_count").map(String::as_str) == Some("2")
            && full("shadow_0")
            && full("shadow_1"))
        .then_some(())
    });
    let big = status(&mut c, "big@1");
    assert!(num(&big, "ticks") >= 2.0, "{big:?}");
    assert!(num(&big, "total_hits") > 0.0, "{big:?}");
    // The switch policy moves the server from small to big through the registry.
    let deadline = Instant::now() + bound;
    loop {
        let s: HashMap<String, Value> = redis::cmd("POLICY").arg("STATUS").query(&mut c).unwrap();
        if text(s.get("active")) == "big@1" {
            break;
        }
        if Instant::now() > deadline {
            let lines = log(&mut c);
            panic!(
                "big@1 not active within {bound:?}: {s:?}\n{:#?}\n{lines:#?}",
                info_shadows(&mut c)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    traffic.join().unwrap();
    let s: HashMap<String, Value> = redis::cmd("POLICY").arg("STATUS").query(&mut c).unwrap();
    assert_eq!(text(s.get("previous")), "small@1", "{s:?}");
    let lines = log(&mut c);
    let line = lines
        .iter()
        .find(|l| l.contains("switched"))
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert!(line.contains("from small@1 to big@1"), "{line}");
    assert!(
        line.contains("switch to big@1 (score"),
        "the reason: {line}"
    );
    let info = info_shadows(&mut c);
    assert!(info["switches"].parse::<u64>().unwrap() >= 1, "{info:?}");
    assert!(
        info["switch_calls"].parse::<u64>().unwrap() >= 3,
        "{info:?}"
    );
    assert!(info["last_switch"].ends_with(": big@1"), "{info:?}");
    assert_eq!(part(&info["active"], "name"), "big@1", "{info:?}");
    server.shutdown().unwrap();
}
