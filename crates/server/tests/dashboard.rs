//! The `--http` side on a real server: `/api/state` (the dashboard's JSON), `/metrics`, the
//! page's static files, and the admin actions with their password checks, over loopback
//! HTTP/1.1 as a browser or a scraper sends it.

mod common;

use common::TestServer;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

fn get(addr: SocketAddr, path: &str) -> Answer {
    http(addr, "GET", path, &[], "")
}

fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
    let mut all = vec![("Content-Type", "application/json")];
    all.extend_from_slice(headers);
    http(addr, "POST", path, &all, &body.to_string())
}

fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn state_json_carries_live_samples_policy_and_no_classes_or_cluster_alone() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |c| {
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        c.max_keys = Some(50);
    });
    let http_addr = server.metrics_addr.unwrap();
    let mut c = server.client();
    let mut last = 0;
    eventually("samples showing the traffic", || {
        for i in 0..200 {
            let _: () = redis::cmd("SET")
                .arg(format!("k{i}"))
                .arg("v")
                .query(&mut c)
                .unwrap();
            let _: Option<String> = redis::cmd("GET")
                .arg(format!("k{}", i / 2))
                .query(&mut c)
                .unwrap();
        }
        let state = get(http_addr, &format!("/api/state?after={last}")).json();
        let samples = state["samples"].as_array().unwrap();
        if let Some(s) = samples.last() {
            last = s["seq"].as_u64().unwrap();
        }
        samples.iter().any(|s| {
            s["requests_per_s"].as_f64().unwrap() > 0.0
                && s["hit_ratio"].as_f64().is_some()
                && s["evictions_per_s"].as_f64().unwrap() > 0.0
        })
    });
    let state = get(http_addr, "/api/state").json();
    assert_eq!(state["server"]["admin"], false);
    assert_eq!(state["server"]["backend"], "rocksdb");
    assert_eq!(state["cache"]["capacity_objects"], 50);
    assert!(state["cache"]["objects"].as_u64().unwrap() <= 50);
    let sample = &state["samples"][0];
    for key in [
        "seq",
        "t_ms",
        "requests_per_s",
        "hits_per_s",
        "misses_per_s",
        "hit_ratio",
        "objects",
        "bytes",
        "capacity_objects",
        "capacity_bytes",
        "evictions_per_s",
        "store_reads_per_s",
        "policy_ticks",
        "policy_actions",
    ] {
        assert!(sample.get(key).is_some(), "sample lacks {key}: {sample}");
    }
    // Only newer samples are sent again.
    let seqs: Vec<u64> = state["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    let newest = *seqs.last().unwrap();
    let later = get(http_addr, &format!("/api/state?after={newest}")).json();
    assert!(later["samples"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["seq"].as_u64().unwrap() > newest));
    assert_eq!(state["classes"], Value::Array(vec![]));
    assert_eq!(state["cluster"], Value::Null);
    assert_eq!(state["policy"]["active"], "");
    assert!(
        state["policy"]["status"]["ticks"].is_u64(),
        "{}",
        state["policy"]
    );

    // A policy loaded with the POLICY command shows in the state's status and log.
    let source = "function when() return false end";
    let _: i64 = redis::cmd("POLICY")
        .arg("LOAD")
        .arg("quiet")
        .arg(source)
        .query(&mut c)
        .unwrap();
    let _: String = redis::cmd("POLICY")
        .arg("PARAM")
        .arg("n")
        .arg("7")
        .query(&mut c)
        .unwrap();
    eventually("the policy in the state", || {
        let state = get(http_addr, "/api/state?after=1000000").json();
        let log = state["policy"]["log"].as_array().unwrap();
        state["policy"]["active"] == "quiet@1"
            && state["policy"]["params"]["n"] == "7"
            && log
                .iter()
                .any(|e| e["kind"] == "loaded" && e["policy"] == "quiet@1")
    });
}

#[test]
fn metrics_page_and_errors_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |c| {
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    });
    let addr = server.metrics_addr.unwrap();
    let metrics = get(addr, "/metrics");
    assert_eq!(metrics.status, 200, "{}", metrics.head);
    assert!(
        metrics
            .head
            .to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{}",
        metrics.head
    );
    for line in [
        "# TYPE mantle_commands counter",
        "mantle_commands_total ",
        "mantle_cache_capacity_bytes ",
        "mantle_policy_active_version{policy=\"\"} 0",
        "# TYPE mantle_store_read_seconds histogram",
        "# EOF",
    ] {
        assert!(
            metrics.body.contains(line),
            "no {line:?} in\n{}",
            metrics.body
        );
    }
    let page = get(addr, "/");
    assert_eq!(page.status, 200);
    assert!(page.head.contains("text/html"), "{}", page.head);
    assert!(
        page.body.contains("<script src=\"app.js\">"),
        "{}",
        page.body
    );
    let script = get(addr, "/app.js");
    assert!(script.head.contains("javascript") && script.body.contains("api/state"));
    assert!(get(addr, "/style.css").head.contains("text/css"));
    let missing = get(addr, "/nope");
    assert_eq!(missing.status, 404);
    assert!(missing.body.contains("/metrics"));
    assert_eq!(http(addr, "DELETE", "/metrics", &[], "").status, 405);
    // Read-only: the admin routes answer 403 and say how to enable them.
    let refused = post(addr, "/api/admin/rollback", &[], &serde_json::json!({}));
    assert_eq!(refused.status, 403);
    assert!(refused.json()["error"]
        .as_str()
        .unwrap()
        .contains("--http-admin"));
    // Garbage is answered with an error, never a crash.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"\x00\x01garbage\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert_eq!(get(addr, "/metrics").status, 200);
}

#[test]
fn admin_actions_need_the_password_and_go_through_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |c| {
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        c.requirepass = Some("s3cret".into());
        c.http_admin = true;
    });
    let addr = server.metrics_addr.unwrap();
    let v1 = serde_json::json!({"name": "web", "source": "function when() return false end"});
    let v2 =
        serde_json::json!({"name": "web", "source": "-- v2\nfunction when() return false end"});

    let none = post(addr, "/api/admin/push", &[], &v1);
    assert_eq!(none.status, 401);
    let wrong = post(
        addr,
        "/api/admin/push",
        &[("X-Mantle-Password", "guess")],
        &v1,
    );
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.json()["error"], "wrong password");
    let wrong_basic = post(
        addr,
        "/api/admin/push",
        &[("Authorization", "Basic b3BzOmd1ZXNz")],
        &v1,
    );
    assert_eq!(wrong_basic.status, 401);
    assert!(get(addr, "/metrics")
        .body
        .contains("mantle_auth_failures_total 2\n"));

    // ops:s3cret
    let basic = ("Authorization", "Basic b3BzOnMzY3JldA==");
    let pushed = post(addr, "/api/admin/push", &[basic], &v1);
    assert_eq!(pushed.status, 200, "{}", pushed.body);
    assert_eq!(pushed.json()["ok"], 1);
    let header = ("X-Mantle-Password", "s3cret");
    assert_eq!(
        post(addr, "/api/admin/push", &[header], &v2).json()["ok"],
        2
    );
    let param = post(
        addr,
        "/api/admin/param",
        &[header],
        &serde_json::json!({"key": "n", "value": "12"}),
    );
    assert_eq!(param.status, 200, "{}", param.body);
    // The engine's own checks answer through the page too.
    let bad = post(
        addr,
        "/api/admin/push",
        &[header],
        &serde_json::json!({"name": "web", "source": "this is not lua"}),
    );
    assert_eq!(bad.status, 400);
    assert!(
        bad.json()["error"]
            .as_str()
            .unwrap()
            .contains("policy rejected"),
        "{}",
        bad.body
    );
    let unknown = post(
        addr,
        "/api/admin/use",
        &[header],
        &serde_json::json!({"name": "nope"}),
    );
    assert_eq!(unknown.status, 400);

    // The same registry and log as the POLICY commands.
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: String = redis::cmd("AUTH").arg("s3cret").query(&mut c).unwrap();
    let log: Vec<String> = redis::cmd("POLICY")
        .arg("LOG")
        .arg(50)
        .query(&mut c)
        .unwrap();
    assert!(
        log.iter()
            .any(|l| l.contains("event=loaded policy=web@1")
                && l.contains("stored by dashboard (ops)")),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("event=param") && l.contains("n=12")),
        "{log:#?}"
    );
    let state = get(addr, "/api/state").json();
    assert_eq!(state["server"]["admin"], true);
    assert_eq!(state["policy"]["active"], "web@2");
    assert_eq!(state["policy"]["params"]["n"], "12");

    let rolled = post(
        addr,
        "/api/admin/rollback",
        &[header],
        &serde_json::json!({}),
    );
    assert_eq!(rolled.json()["ok"], "web@1");
    assert_eq!(
        post(
            addr,
            "/api/admin/use",
            &[header],
            &serde_json::json!({"name": "web", "version": 2})
        )
        .json()["ok"],
        2
    );
    let state = get(addr, "/api/state").json();
    assert_eq!(state["policy"]["active"], "web@2");
    let events: Vec<&str> = state["policy"]["log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(events.contains(&"rolled_back"), "{events:?}");
}

#[test]
fn http_admin_needs_http_and_a_password() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = server::Config::new(server::Backend::RocksDb {
        data_dir: dir.path().to_path_buf(),
        fsync: server::Fsync::EverySec,
    });
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.http_admin = true;
    config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let error = runtime
        .block_on(server::Server::bind(config.clone()))
        .err()
        .unwrap();
    assert!(
        error
            .to_string()
            .contains("--http-admin needs --requirepass"),
        "{error}"
    );
    config.metrics_listen = None;
    config.requirepass = Some("pw".into());
    let error = runtime
        .block_on(server::Server::bind(config))
        .err()
        .unwrap();
    assert!(
        error.to_string().contains("--http-admin needs --http"),
        "{error}"
    );
}

#[test]
fn state_json_lists_each_class_with_its_counters() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |c| {
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        c.max_keys = Some(10);
        c.policy_echo = false;
        c.classes = Some(
            cache::classes::ClassSet::parse(
                "IO class id,IO class name,Eviction priority,Allocation\n\
                 0,unclassified,5,1\n\
                 1,hint:keep&done,,0.5\n",
                "test classes",
            )
            .unwrap(),
        );
    });
    let http_addr = server.metrics_addr.unwrap();
    let mut c = server.client();
    for i in 0..3 {
        let _: () = redis::cmd("SET")
            .arg(format!("pinned{i}"))
            .arg("v")
            .arg("HINT")
            .arg("keep")
            .query(&mut c)
            .unwrap();
        let _: Option<String> = redis::cmd("GET")
            .arg(format!("pinned{i}"))
            .query(&mut c)
            .unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("v")
        .query(&mut c)
        .unwrap();
    let state = get(http_addr, "/api/state").json();
    let rows = state["classes"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{}", state["classes"]);
    let keep = rows
        .iter()
        .find(|r| r["name"].as_str().unwrap().contains("keep"))
        .unwrap_or_else(|| panic!("no hint:keep row in {}", state["classes"]));
    assert_eq!(keep["objects"], 3, "{keep}");
    assert_eq!(keep["hits"], 3, "{keep}");
    assert_eq!(keep["hit_ratio"], 1.0, "{keep}");
    let other = rows.iter().find(|r| !std::ptr::eq(*r, keep)).unwrap();
    assert_eq!(other["objects"], 1, "{other}");
}
