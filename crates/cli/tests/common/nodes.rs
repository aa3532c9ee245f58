//! Scaffolding of the tests that run a cluster as real processes: `mantle serve` children
//! killed when dropped (even when a test fails), the flags that make one a node of a
//! cluster on a private etcd (`cluster::testing::Etcd`), `mantle cluster` calls, the slot
//! map as the admin command prints it, and polling with a deadline.

use cluster::testing::Etcd;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long [`serve`] waits for a node's port to listen.
const LISTEN_WITHIN: Duration = Duration::from_secs(30);

/// A child process, killed and reaped when dropped.
pub struct Proc(pub Child);

impl Proc {
    /// Sends `sig` (`-STOP`, `-CONT`, ...) to the process.
    pub fn signal(&self, sig: &str) {
        signal(self.0.id(), sig);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends `sig` to process `pid` with kill(1).
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Starts `mantle serve ARGS --listen 127.0.0.1:PORT` with its stderr in `log` (what a
/// failing test shows), without waiting for it to listen.
pub fn spawn_serve(args: &[&str], port: u16, log: &Path) -> Proc {
    let child = Command::new(env!("CARGO_BIN_EXE_mantle"))
        .arg("serve")
        .args(args)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("a log file"))
        .spawn()
        .expect("mantle serve starts");
    Proc(child)
}

/// [`spawn_serve`], then waits until its port accepts connections.
pub fn serve(args: &[&str], port: u16, log: &Path) -> Proc {
    let proc = spawn_serve(args, port, log);
    let deadline = Instant::now() + LISTEN_WITHIN;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "port {port} never listened: {}",
            log_tail(log)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    proc
}

/// The flags that make `mantle serve` node `id` of cluster `name` on `etcd`, with a short
/// lease (2 s) so failures are noticed within a test.
pub fn node_flags(etcd: &Etcd, name: &str, id: &str) -> Vec<String> {
    [
        "--cluster",
        &etcd.address(),
        "--cluster-name",
        name,
        "--node-id",
        id,
        "--cluster-ttl",
        "2s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Polls `ok` every 100 ms; fails the test naming `what` after `within`.
pub fn wait_until(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `mantle cluster --etcd ETCD --name NAME ARGS`.
pub fn admin(etcd: &Etcd, name: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mantle"))
        .args(["cluster", "--etcd", &etcd.address(), "--name", name])
        .args(args)
        .output()
        .unwrap()
}

/// [`admin`] that must succeed; its stdout.
pub fn admin_ok(etcd: &Etcd, name: &str, args: &[&str]) -> String {
    let out = admin(etcd, name, args);
    assert!(
        out.status.success(),
        "mantle cluster {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The slot ranges `id` owns, as `mantle cluster status --json` prints the slot map.
pub fn owned(etcd: &Etcd, name: &str, id: &str) -> Vec<(u16, u16)> {
    let status: serde_json::Value =
        serde_json::from_str(&admin_ok(etcd, name, &["status", "--json"])).unwrap();
    status["slot_map"]["owners"][id]
        .as_array()
        .map(|ranges| {
            ranges
                .iter()
                .map(|r| {
                    (
                        r["start"].as_u64().unwrap() as u16,
                        r["end"].as_u64().unwrap() as u16,
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The first `n` keys `k0`, `k1`, ... whose slots fall in `ranges`.
pub fn keys_in(ranges: &[(u16, u16)], n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("k{i}"))
        .filter(|k| {
            let slot = slots::key_slot(k.as_bytes());
            ranges.iter().any(|&(a, b)| (a..=b).contains(&slot))
        })
        .take(n)
        .collect()
}

/// The last 20 lines of a node's log.
pub fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
