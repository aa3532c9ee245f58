//! A private etcd for tests (feature `testing`): one member on loopback, random ports, a
//! temp data dir, killed when the guard drops. Needs the `etcd` binary (Debian's
//! etcd-server, installed by scripts/setup.sh; `MANTLE_ETCD` names another).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Etcd {
    child: Option<Child>,
    pub client_port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
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
    pub fn start() -> Etcd {
        let mut etcd = Etcd {
            child: None,
            client_port: free_port(),
            peer_port: free_port(),
            dir: tempfile::tempdir().expect("a temp dir"),
        };
        etcd.spawn();
        etcd
    }

    pub fn address(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.client_port)
    }

    fn spawn(&mut self) {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
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
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts");
        self.child = Some(child);
        self.wait_healthy();
    }

    fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.client_port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("etcd did not listen on {} within 20 s", self.client_port);
    }

    /// Kills etcd (SIGKILL) and keeps its data for [`Etcd::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same ports and data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}
