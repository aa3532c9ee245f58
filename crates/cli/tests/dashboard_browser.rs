//! The dashboard in a real browser: Debian's `chromium`, headless, loads the page of a live
//! `mantle serve --http` under load (in a two-node cluster on a private etcd when etcd is
//! installed), while a policy version is pushed through the page's admin API. The DOM it
//! dumps must show that the charts received data (each canvas counts the points it drew),
//! the command latency panel the load's GET and SET,
//! the pushed version in the policy log and, in a cluster, both nodes with their slots. A
//! screenshot is written to `$CARGO_TARGET_TMPDIR/dashboard/dashboard.png` (and copied to
//! `$MANTLE_DASHBOARD_SCREENSHOT` when set: that is how docs/img/dashboard.png is made).
//!
//! Skipped, saying so, only when chromium is not installed (scripts/setup.sh installs it;
//! `MANTLE_CHROMIUM` names another binary). Every process is killed at the end, also when
//! an assertion fails, and every wait is bounded.

use cluster::testing::free_port;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PASSWORD: &str = "dash-pw";
/// The flags that let Chromium run as root on a closed network (../shared/research notes).
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
];

/// Kills the process when dropped (test failure included).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn chromium() -> Option<PathBuf> {
    let candidates: Vec<PathBuf> = match std::env::var_os("MANTLE_CHROMIUM") {
        Some(path) => vec![path.into()],
        None => vec!["chromium".into(), "chromium-browser".into()],
    };
    candidates.into_iter().find(|path| {
        Command::new(path)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

fn has_etcd() -> bool {
    let etcd = std::env::var_os("MANTLE_ETCD").unwrap_or_else(|| "etcd".into());
    Command::new(etcd)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn http(port: u16, method: &str, path: &str, extra: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

fn eventually(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs chromium with `args` on `url`, killed after `limit`; returns its stdout.
fn run_chromium(binary: &Path, profile: &Path, args: &[&str], url: &str) -> String {
    let mut child = Guard(
        Command::new(binary)
            .args(CHROMIUM_FLAGS)
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(args)
            .arg(url)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium starts"),
    );
    let mut stdout = child.0.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            assert!(status.success(), "chromium failed: {status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "chromium did not finish within 90 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.join().unwrap()
}

/// The number in `attr="N"` on the element whose tag starts with `start`.
fn counter(dom: &str, start: &str, attr: &str) -> u64 {
    let at = dom
        .find(start)
        .unwrap_or_else(|| panic!("no {start} in the DOM"));
    let tag = &dom[at..at + dom[at..].find('>').unwrap()];
    let key = format!("{attr}=\"");
    let value = &tag[tag
        .find(&key)
        .unwrap_or_else(|| panic!("no {attr} in {tag}"))
        + key.len()..];
    value[..value.find('"').unwrap()].parse().unwrap()
}

#[test]
fn dashboard_in_headless_chromium_under_load() {
    let Some(browser) = chromium() else {
        println!(
            "skipping dashboard_in_headless_chromium_under_load: chromium not found \
             (scripts/setup.sh installs Debian's chromium; MANTLE_CHROMIUM names another)"
        );
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let clustered = has_etcd();
    let etcd = clustered.then(cluster::testing::Etcd::start);
    let (port, http_port) = (free_port(), free_port());
    let spawn = |id: &str, port: u16, http: Option<u16>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mantle"));
        command
            .args(["serve", "--data-dir"])
            .arg(root.path().join(id))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args([
                "--requirepass",
                PASSWORD,
                "--max-keys",
                "2000",
                "--tick",
                "250ms",
            ])
            .args(["--policy", "policies/fixed.lua"])
            .current_dir(common_repo())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(http) = http {
            command.args(["--http", &format!("127.0.0.1:{http}"), "--http-admin"]);
        }
        if let Some(etcd) = &etcd {
            command.args(["--cluster", &etcd.address(), "--cluster-name", "dash"]);
            command.args(["--node-id", id]);
        }
        Guard(command.spawn().expect("mantle serve starts"))
    };
    let _a = spawn("node-a", port, Some(http_port));
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{port}/");
    // Answering PING means started: joined the cluster, listening for HTTP.
    eventually("the first node answering", Duration::from_secs(30), || {
        redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection())
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    });
    // The first node owns every slot; the second joins after it, with none.
    let _b = clustered.then(|| spawn("node-b", free_port(), None));

    // Load: sets and gets on a key space larger than the policy's limit, so the cache
    // fills, the policy evicts and the back-end is read.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        let url = url.clone();
        std::thread::spawn(move || {
            let client = redis::Client::open(url).unwrap();
            let mut c = client.get_connection().unwrap();
            let mut i: u64 = 0;
            while !stop.load(Ordering::Relaxed) {
                i = i
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let key = format!("key:{}", (i >> 33) % 3000);
                let _: redis::RedisResult<()> =
                    redis::cmd("SET").arg(&key).arg("value").query(&mut c);
                let _: redis::RedisResult<Option<String>> = redis::cmd("GET")
                    .arg(format!("key:{}", (i >> 17) % 3000))
                    .query(&mut c);
            }
        })
    };
    let finish = || stop.store(true, Ordering::Relaxed);
    struct Stop<F: Fn()>(F);
    impl<F: Fn()> Drop for Stop<F> {
        fn drop(&mut self) {
            (self.0)()
        }
    }
    let _stop = Stop(finish);

    // First a sizing version, whose capacity change is a marker of its own kind.
    let auth = format!("Content-Type: application/json\r\nX-Mantle-Password: {PASSWORD}\r\n");
    let sizing = "function howmuch() return {capacity = 5000} end";
    let body = serde_json::json!({"name": "browser_size", "source": sizing}).to_string();
    assert_eq!(
        http(http_port, "POST", "/api/admin/push", &auth, &body).0,
        200
    );
    eventually("a capacity event", Duration::from_secs(30), || {
        let (_, state) = http(http_port, "GET", "/api/state", "", "");
        state.contains("\"kind\":\"capacity\"")
    });
    // A push through the page's admin API, during the load: fixed.lua keeps 500 objects.
    let source = std::fs::read_to_string(common_repo().join("policies/fixed.lua")).unwrap();
    let body = serde_json::json!({"name": "browser_push", "source": source}).to_string();
    let (status, answer) = http(http_port, "POST", "/api/admin/push", &auth, &body);
    assert_eq!(status, 200, "{answer}");
    let param = serde_json::json!({"key": "n", "value": "500"}).to_string();
    assert_eq!(
        http(http_port, "POST", "/api/admin/param", &auth, &param).0,
        200
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, state) = http(http_port, "GET", "/api/state", "", "");
        let state: serde_json::Value = serde_json::from_str(&state).unwrap();
        let busy = state["samples"].as_array().unwrap().iter().any(|s| {
            s["requests_per_s"].as_f64().unwrap() > 0.0
                && s["evictions_per_s"].as_f64().unwrap() > 0.0
        });
        let nodes = state["cluster"]["nodes"].as_array().map_or(0, Vec::len);
        if busy && (!clustered || nodes == 2) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no samples with traffic and evictions{}: {state}",
            if clustered { " and two nodes" } else { "" }
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let page = format!("http://127.0.0.1:{http_port}/");
    let profile = root.path().join("chromium-profile");
    let dom = run_chromium(
        &browser,
        &profile,
        &["--virtual-time-budget=5000", "--dump-dom"],
        &page,
    );
    let points = counter(&dom, "<body", "data-points");
    assert!(points > 0, "the page received no samples:\n{dom}");
    for chart in [
        "chart-rate",
        "chart-hit",
        "chart-size",
        "chart-evict",
        "chart-store",
    ] {
        let drawn = counter(&dom, &format!("<canvas id=\"{chart}\""), "data-points");
        assert!(drawn > 0, "{chart} drew nothing");
    }
    // The command latency panel lists the load's commands with their percentiles.
    let rows = counter(&dom, "<table id=\"commands\"", "data-rows");
    assert!(rows >= 2, "the command latency panel shows {rows} commands");
    let panel = &dom[dom.find("<table id=\"commands\"").unwrap()..];
    let panel = &panel[..panel.find("</table>").unwrap()];
    for command in ["<td>get</td>", "<td>set</td>"] {
        assert!(
            panel.contains(command),
            "no {command} in the panel:\n{panel}"
        );
    }
    let log_at = dom.find("id=\"policy-log\"").expect("the policy log table");
    assert!(
        dom[log_at..].contains("browser_push@1"),
        "the push is not in the policy log:\n{}",
        &dom[log_at..]
    );
    assert!(
        dom.contains("<span id=\"policy-active\" class=\"tag\">browser_push@1</span>"),
        "{dom}"
    );
    check_markers(&dom);
    assert_eq!(counter(&dom, "<table id=\"policy-log\"", "data-hidden"), 0);
    assert!(log_rows(&dom).iter().any(|class| class == "info"), "{dom}");

    // The log's level filter: after a tick that fails, `?log=error` shows only the error.
    let failing = "local calls = 0\nfunction howmuch()\n  calls = calls + 1\n  \
                   if calls == 1 then error('browser test: one failing tick') end\n  \
                   return {}\nend\n";
    let body = serde_json::json!({"name": "browser_fail", "source": failing}).to_string();
    let (status, answer) = http(http_port, "POST", "/api/admin/push", &auth, &body);
    assert_eq!(status, 200, "{answer}");
    eventually(
        "an error in the policy log",
        Duration::from_secs(30),
        || {
            let (_, state) = http(http_port, "GET", "/api/state", "", "");
            state.contains("\"level\":\"error\"")
        },
    );
    let errors_only = run_chromium(
        &browser,
        &profile,
        &["--virtual-time-budget=5000", "--dump-dom"],
        &format!("{page}?log=error"),
    );
    let rows = log_rows(&errors_only);
    assert!(!rows.is_empty(), "no error row:\n{errors_only}");
    assert!(rows.iter().all(|class| class == "error"), "{rows:?}");
    assert!(counter(&errors_only, "<table id=\"policy-log\"", "data-hidden") > 0);
    assert!(errors_only.contains("<select id=\"log-level\""));
    if clustered {
        let cluster_at = dom.find("id=\"cluster-card\"").unwrap();
        let tag_start = dom[..cluster_at].rfind('<').unwrap();
        let tag = &dom[tag_start..cluster_at + dom[cluster_at..].find('>').unwrap()];
        assert!(!tag.contains("hidden"), "the cluster card is hidden: {tag}");
        let card = &dom[cluster_at..];
        assert!(
            card.contains("node-a (this node)") && card.contains("node-b"),
            "{card}"
        );
        assert!(card.contains("0-16383"), "{card}");
    } else {
        println!("etcd not found: the dashboard was tested on a node without a cluster");
    }

    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    std::fs::create_dir_all(&out_dir).unwrap();
    let shot = out_dir.join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    run_chromium(
        &browser,
        &profile,
        &[
            "--virtual-time-budget=5000",
            "--window-size=1280,1400",
            &format!("--screenshot={}", shot.display()),
        ],
        &page,
    );
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    println!("screenshot: {}", shot.display());
    if let Some(copy) = std::env::var_os("MANTLE_DASHBOARD_SCREENSHOT") {
        std::fs::copy(&shot, &copy).unwrap();
        println!("copied to {}", PathBuf::from(copy).display());
    }
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
}

/// The classes of the policy log's rows, in the order shown.
fn log_rows(dom: &str) -> Vec<String> {
    let at = dom.find("id=\"policy-log\"").expect("the policy log table");
    let table = &dom[at..at + dom[at..].find("</table>").unwrap()];
    let body = &table[table.find("<tbody>").unwrap()..];
    body.match_indices("<tr")
        .map(|(i, _)| {
            let tag = &body[i..i + body[i..].find('>').unwrap()];
            tag.split("class=\"").nth(1).map_or(String::new(), |rest| {
                rest[..rest.find('"').unwrap()].to_string()
            })
        })
        .collect()
}

/// Capacity events and version changes are drawn as different kinds of marker, in different
/// colours, and every kind drawn has its entry in the legend.
fn check_markers(dom: &str) {
    let at = dom.find("<canvas id=\"chart-size\"").unwrap();
    let tag = &dom[at..at + dom[at..].find('>').unwrap()];
    let drawn = tag
        .split("data-markers=\"")
        .nth(1)
        .map(|rest| &rest[..rest.find('"').unwrap()])
        .unwrap_or_else(|| panic!("no markers drawn: {tag}"));
    let colours: std::collections::BTreeMap<&str, &str> = drawn
        .split(';')
        .filter_map(|pair| pair.split_once('='))
        .collect();
    let (Some(capacity), Some(change)) = (colours.get("capacity"), colours.get("change")) else {
        panic!("expected capacity and change markers: {drawn}");
    };
    assert_ne!(capacity, change, "{drawn}");
    for kind in colours.keys() {
        assert!(
            dom.contains(&format!("<li data-kind=\"{kind}\">")),
            "no legend entry for {kind} markers"
        );
    }
}

fn common_repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
