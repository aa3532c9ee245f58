//! `--upstream` with `--state-dir` in front of a real `redis-server` (random port, temp dir):
//! the policy registry and the warm-up record survive a restart of Mantle, so the policy is
//! active again and `--warmup` refills the hot set from Redis before clients ask for it.
//! Skipped (with a message) where `redis-server` is not installed.

mod common;

use common::{redis_tool, TestServer};
use server::warmup::WarmupSpec;
use server::{Backend, Config};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const KEYS: usize = 2_000;
const HOT: usize = 200;

fn key(i: usize) -> String {
    format!("obj:{i:05}")
}

fn hot_keys() -> Vec<String> {
    (0..HOT).map(|i| key(i * (KEYS / HOT))).collect()
}

/// A `redis-server` on a free loopback port that keeps nothing on disk; killed on drop.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    fn start(program: &Path, dir: &Path) -> Redis {
        std::fs::create_dir_all(dir).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(program)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting redis-server");
        let redis = Redis { child, port };
        for _ in 0..500 {
            if let Ok(mut con) = redis::Client::open(redis.url()).and_then(|c| c.get_connection()) {
                if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                    return redis;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server did not start on port {port}");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn mantle(upstream: &str, state_dir: Option<&Path>, warmup: Option<&str>) -> Config {
    let mut config = Config::new(Backend::Upstream {
        url: upstream.to_string(),
    });
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.state_dir = state_dir.map(Path::to_path_buf);
    config.max_keys = Some(10_000);
    config.warmup = warmup.map(|w| w.parse::<WarmupSpec>().unwrap());
    config.warmup_persist = Duration::from_millis(100);
    config.policy_echo = false;
    config
}

fn field(pairs: &[redis::Value], name: &str) -> Option<String> {
    pairs.chunks(2).find_map(|pair| match pair {
        [redis::Value::Data(k), v] if k == name.as_bytes() => Some(match v {
            redis::Value::Data(d) => String::from_utf8_lossy(d).into_owned(),
            redis::Value::Int(n) => n.to_string(),
            redis::Value::Status(s) => s.clone(),
            other => format!("{other:?}"),
        }),
        _ => None,
    })
}

fn active_policy(con: &mut redis::Connection) -> String {
    let status: Vec<redis::Value> = redis::cmd("POLICY").arg("STATUS").query(con).unwrap();
    field(&status, "active").unwrap()
}

fn info_field(con: &mut redis::Connection, section: &str, name: &str) -> String {
    let text: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in INFO {section}: {text}"))
        .trim()
        .to_string()
}

fn cache_counters(con: &mut redis::Connection) -> (i64, i64) {
    let stats: Vec<redis::Value> = redis::cmd("CACHE").arg("STATS").query(con).unwrap();
    let n = |name| field(&stats, name).unwrap().parse::<i64>().unwrap();
    (n("hits"), n("misses"))
}

/// Hit ratio of the first read of every hot key.
fn first_reads_hit_ratio(con: &mut redis::Connection) -> f64 {
    let (h0, m0) = cache_counters(con);
    for (i, k) in hot_keys().iter().enumerate() {
        let v: String = redis::cmd("GET").arg(k).query(con).unwrap();
        assert_eq!(v, format!("value-{}", i * (KEYS / HOT)));
    }
    let (h1, m1) = cache_counters(con);
    assert_eq!((h1 - h0) + (m1 - m0), HOT as i64);
    (h1 - h0) as f64 / HOT as f64
}

const POLICY: &str = "function howmuch() return {} end";

#[test]
fn a_restart_in_front_of_redis_keeps_the_policy_and_warms_the_hot_set() {
    let Some(program) = redis_tool("redis-server", "upstream_state") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let redis = Redis::start(&program, &dir.path().join("redis"));
    let state = dir.path().join("state");
    let spec = format!("lastk:{HOT}");

    let first = TestServer::start(mantle(&redis.url(), Some(&state), None));
    let mut con = first.client();
    let version: i64 = redis::cmd("POLICY")
        .arg("LOAD")
        .arg("keepall")
        .arg(POLICY)
        .query(&mut con)
        .unwrap();
    assert_eq!(version, 1);
    for i in 0..KEYS {
        let _: () = redis::cmd("SET")
            .arg(key(i))
            .arg(format!("value-{i}"))
            .query(&mut con)
            .unwrap();
    }
    for _ in 0..5 {
        for k in hot_keys() {
            let _: String = redis::cmd("GET").arg(&k).query(&mut con).unwrap();
        }
    }
    drop(con);
    first.shutdown().unwrap(); // persists the warm-up record in the state dir

    // Without the state dir a restart is cold, as before: the control.
    let cold = TestServer::start(mantle(&redis.url(), None, None));
    let mut con = cold.client();
    assert_eq!(active_policy(&mut con), "");
    let cold_ratio = first_reads_hit_ratio(&mut con);
    drop(con);
    cold.shutdown().unwrap();

    let warm = TestServer::start(mantle(&redis.url(), Some(&state), Some(&spec)));
    let mut con = warm.client();
    assert_eq!(active_policy(&mut con), "keepall@1");
    for _ in 0..2_000 {
        if info_field(&mut con, "warmup", "warmup_done") == "1" {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(info_field(&mut con, "warmup", "warmup_done"), "1");
    assert_eq!(
        info_field(&mut con, "warmup", "warmup_loaded"),
        HOT.to_string()
    );
    let warm_ratio = first_reads_hit_ratio(&mut con);
    println!(
        "in front of redis-server, first reads of {HOT} hot keys after a restart: hit ratio \
         cold {cold_ratio:.3}, with --state-dir and --warmup {spec} {warm_ratio:.3}"
    );
    assert!(cold_ratio < 0.1, "cold restart hit ratio {cold_ratio}");
    assert!(warm_ratio > 0.95, "warm restart hit ratio {warm_ratio}");
    drop(con);
    warm.shutdown().unwrap();
}

#[test]
fn warmup_in_front_of_an_upstream_without_a_state_dir_names_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = TestServer::rocks(dir.path(), |_| {});
    let config = mantle(&upstream.url(), None, Some("lastk:10"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = runtime
        .block_on(server::Server::bind(config))
        .err()
        .expect("--warmup without a place for its record must be refused");
    let text = format!("{err:#}");
    assert!(text.contains("--state-dir"), "{text}");
}

#[test]
fn a_state_dir_with_the_embedded_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(Backend::RocksDb {
        data_dir: dir.path().join("data"),
        fsync: server::Fsync::EverySec,
    });
    config.state_dir = Some(dir.path().join("state"));
    let err = config.validate().unwrap_err();
    assert!(err.contains("--state-dir"), "{err}");
}
