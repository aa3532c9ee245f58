//! `mantle serve`'s HTTP flags as a user types them: `--metrics-listen` still serves
//! `/metrics` (the old name of `--http`), and `--http-admin` without a password is one clear
//! error line, not a server with an open admin page.

use cluster::testing::free_port;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn metrics_listen_is_still_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let http = free_port();
    let _server = Guard(
        Command::new(env!("CARGO_BIN_EXE_mantle"))
            .args(["serve", "--data-dir"])
            .arg(dir.path())
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--metrics-listen", &format!("127.0.0.1:{http}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let answer = loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", http)) {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            break out;
        }
        assert!(Instant::now() < deadline, "no HTTP listener on {http}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("mantle_commands_total "), "{answer}");
}

#[test]
fn http_admin_without_a_password_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mantle"))
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args([
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--http-admin",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--http-admin needs --requirepass"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // And without --http, clap names what is missing.
    let out = Command::new(env!("CARGO_BIN_EXE_mantle"))
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args(["--requirepass", "pw", "--http-admin"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--http"));
}
