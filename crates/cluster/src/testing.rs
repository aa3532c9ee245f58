//! A private etcd for tests (feature `testing`): one member on loopback, random ports, a
//! temp data dir, killed when the guard drops. Needs the `etcd` binary (Debian's
//! etcd-server, installed by scripts/setup.sh; `MANTLE_ETCD` names another).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long one etcd start may take before it is retried: a loaded 2-core CI machine running
/// a test binary's tests in parallel has been seen to need more than the usual second.
const START_BOUND: Duration = Duration::from_secs(30);
const START_ATTEMPTS: usize = 3;

pub struct Etcd {
    child: Option<Child>,
    pub client_port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
}

/// A loopback port for a process the test starts later (etcd, a cluster node that must come
/// back on the same address). Asking the kernel for port 0 and closing it is racy: the port
/// comes from the ephemeral range, so any outgoing connection the tests open meanwhile may
/// take it, and two tests of one binary may be handed the same one. These ports come from
/// below Linux's ephemeral range (32768+), never twice in one process, and are checked free.
pub fn free_port() -> u16 {
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    if NEXT.load(Ordering::Relaxed) == u32::MAX {
        // Each process starts at its own place so two test processes rarely meet.
        let start = (RandomState::new().hash_one(std::process::id()) % u64::from(SPAN)) as u32;
        let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    }
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {LOW}..{}", LOW + SPAN);
}

fn etcd_binary() -> PathBuf {
    let path = std::env::var_os("MANTLE_ETCD").map_or_else(|| PathBuf::from("etcd"), PathBuf::from);
    let found = Command::new(&path)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "etcd not found ({}): run scripts/setup.sh, which installs Debian's etcd-server",
        path.display()
    );
    path
}

impl Etcd {
    /// Starts etcd, on fresh ports if an attempt does not come up (a port taken meanwhile,
    /// a slow machine); panics with etcd's own log when none does.
    pub fn start() -> Etcd {
        let mut etcd = Etcd {
            child: None,
            client_port: free_port(),
            peer_port: free_port(),
            dir: tempfile::tempdir().expect("a temp dir"),
        };
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            match etcd.spawn() {
                Ok(()) => return etcd,
                Err(why) => failures.push(why),
            }
            etcd.kill();
            etcd.client_port = free_port();
            etcd.peer_port = free_port();
        }
        panic!("etcd did not start:\n{}", failures.join("\n"));
    }

    pub fn address(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.client_port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    fn spawn(&mut self) -> Result<(), String> {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.log_path()).expect("etcd's log file");
        let child = Command::new(etcd_binary())
            .args(["--name", "t1", "--data-dir"])
            .arg(self.dir.path().join("etcd"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("t1={peer}")])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        self.child = Some(child);
        self.wait_listening()
    }

    fn wait_listening(&mut self) -> Result<(), String> {
        let started = Instant::now();
        while started.elapsed() < START_BOUND {
            if std::net::TcpStream::connect(("127.0.0.1", self.client_port)).is_ok() {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(self.failure(&format!("exited ({status})")));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(self.failure(&format!("not listening after {START_BOUND:?}")))
    }

    fn failure(&self, what: &str) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "etcd on client port {} / peer port {} {what}; its log ends:\n{}",
            self.client_port,
            self.peer_port,
            tail.join("\n")
        )
    }

    /// The etcd process's id (to stop and continue it: an etcd stall), `None` when killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills etcd (SIGKILL) and keeps its data for [`Etcd::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Writes `value` under the raw etcd `key` behind every node's back (what a damaged or
    /// hand-edited record looks like to them).
    #[cfg(feature = "etcd")]
    pub fn put(&self, key: &str, value: &[u8]) {
        let (key, value) = (key.to_string(), value.to_vec());
        self.with_client(|mut client| async move { client.put(key, value, None).await.map(drop) });
    }

    /// The raw etcd keys under `prefix`, sorted.
    #[cfg(feature = "etcd")]
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let prefix = prefix.to_string();
        self.with_client(|mut client| async move {
            let options = etcd_client::GetOptions::new()
                .with_prefix()
                .with_keys_only();
            let resp = client.get(prefix, Some(options)).await?;
            Ok(resp
                .kvs()
                .iter()
                .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
                .collect())
        })
    }

    #[cfg(feature = "etcd")]
    fn with_client<T, F: std::future::Future<Output = Result<T, etcd_client::Error>>>(
        &self,
        call: impl FnOnce(etcd_client::Client) -> F,
    ) -> T {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a test runtime");
        let endpoint = format!("127.0.0.1:{}", self.client_port);
        runtime
            .block_on(async move {
                let client = etcd_client::Client::connect([endpoint], None).await?;
                call(client).await
            })
            .expect("the test's etcd answers")
    }

    /// Starts etcd again on the same ports and data.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(why) = self.spawn() {
            panic!("etcd did not come back: {why}");
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}
