//! What the CLI integration tests share: running the built `mantle` from the repository
//! root and reading its JSON; [`nodes`] starts and drives the cluster tests' processes.

#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub mod nodes;

/// Runs `mantle ARGS` in the repository root.
pub fn mantle(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mantle"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("mantle runs")
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The one JSON object a successful run printed.
pub fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "mantle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
}

/// The parity tests' trace, in the ParSplice format: 4,000 requests 0.01 s apart over 40 s;
/// keys come from a basin of 90 that moves by 60 every 8 s (so old keys go cold and fans
/// form); a key's first request writes it (so a live server's store holds everything a GET
/// asks for, as replay's back-end model does), later ones read it, with one write in twenty.
pub fn parity_trace(dir: &Path, name: &str) -> String {
    use std::io::Write;
    let path = dir.join(name);
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    writeln!(out, "timestamp_s,op,key").unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..4_000u64 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let r = state >> 33;
        let key = (i / 800) * 60 + r % 90;
        let op = if seen.insert(key) || r.is_multiple_of(20) {
            "PUT"
        } else {
            "GET"
        };
        writeln!(out, "{:.2},{op},{key}", i as f64 * 0.01).unwrap();
    }
    out.flush().unwrap();
    path.to_str().unwrap().to_string()
}

/// A `mantle serve` child on a kernel-chosen loopback port, killed when dropped (even when a
/// test fails).
pub struct Serve {
    pub child: std::process::Child,
    pub addr: String,
    _dir: tempfile::TempDir,
}

impl Serve {
    /// Starts `mantle serve --listen 127.0.0.1:0 --data-dir TMP ARGS` in the repository root
    /// and waits for the line that names its address.
    pub fn start<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Serve {
        Self::start_with_env(args, &[])
    }

    /// [`Serve::start`] with these environment variables set for the server.
    pub fn start_with_env<S: AsRef<std::ffi::OsStr>>(args: &[S], env: &[(&str, &str)]) -> Serve {
        use std::io::{BufRead, BufReader};
        use std::process::Stdio;
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_mantle"))
            .envs(env.iter().copied())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .current_dir(repo())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mantle serve starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let addr = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(rest) = line.strip_prefix("mantle: serving on ") {
                        break rest.split_whitespace().next().unwrap().to_string();
                    }
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("mantle serve exited before listening");
                }
            }
        };
        std::thread::spawn(move || lines.for_each(drop));
        Serve {
            child,
            addr,
            _dir: dir,
        }
    }

    pub fn client(&self) -> redis::Connection {
        redis::Client::open(format!("redis://{}", self.addr))
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
