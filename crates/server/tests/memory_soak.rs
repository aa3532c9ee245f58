//! Memory soak: a server process under stated limits is driven for a bounded time by many
//! clients sending hostile sizes at once — huge `MGET` replies never read, large `SET`s
//! streamed, GETs of missing large keys (the warm-up monitor), fresh `HINT` names — and its
//! resident memory (`VmRSS` in `/proc/<pid>/status`) must stay under [`RSS_BOUND`] while it
//! keeps answering. Each of these inputs alone took the server past a gigabyte (or to an
//! abort) before the server-wide client memory bound, the monitor's key cap and the bounded
//! HINT table (issue 25, items 4, 5 and 10).
//!
//! The server must be a separate process for its RSS to be its own, so this test binary
//! re-executes itself (as `crash.rs` does): with `MANTLE_SOAK_CHILD_DIR` set it is the server.

use server::{Backend, Config, Fsync};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CHILD_DIR: &str = "MANTLE_SOAK_CHILD_DIR";
/// How long the hostile load runs.
const SOAK: Duration = Duration::from_secs(20);
/// The limits the server runs under.
const MAXMEMORY: u64 = 64 << 20;
const MAXMEMORY_CLIENTS: u64 = 64 << 20;
/// What the server may hold resident: the cache (64 MiB plus per-object overhead), clients
/// (64 MiB), the warm-up monitor (at most 100,000 keys of 16 bytes), RocksDB's
/// memtables and block cache, and the allocator's slack. Before the bounds the same load
/// passed 1 GiB within seconds.
const RSS_BOUND: u64 = 448 << 20;

fn main() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        child(Path::new(&dir));
        return;
    }
    let outcome = std::panic::catch_unwind(soak);
    match outcome {
        Ok(()) => println!("test hostile_sizes_keep_the_server_under_its_rss_bound ... ok"),
        Err(_) => {
            println!("test hostile_sizes_keep_the_server_under_its_rss_bound ... FAILED");
            std::process::exit(1);
        }
    }
}

fn child(dir: &Path) {
    let mut config = Config::new(Backend::RocksDb {
        data_dir: dir.to_path_buf(),
        fsync: Fsync::No,
    });
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.maxmemory = Some(MAXMEMORY);
    config.maxmemory_clients = MAXMEMORY_CLIENTS;
    config.threads = 2;
    config.warmup_persist = Duration::from_secs(1);
    if let Err(e) = server::serve(config) {
        eprintln!("soak server failed: {e:#}");
        std::process::exit(2);
    }
}

fn request(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// Reads one reply line.
fn line(stream: &mut TcpStream) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => line.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&line).into_owned()
}

fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Kills the server if the test fails before its clean shutdown.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn soak() {
    let dir = tempfile::tempdir().unwrap();
    let mut guard = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .env(CHILD_DIR, dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let process = &mut guard.0;
    let mut stderr = BufReader::new(process.stderr.take().unwrap());
    let mut first = String::new();
    while !first.contains("serving on") {
        first.clear();
        if stderr.read_line(&mut first).unwrap() == 0 {
            break;
        }
    }
    let addr: SocketAddr = first
        .split_whitespace()
        .skip_while(|w| *w != "on")
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("server did not report its address: {first:?}"));
    let log = Arc::new(Mutex::new(String::new()));
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let mut log = sink.lock().unwrap();
            if log.len() < 1 << 20 {
                log.push_str(&line);
                log.push('\n');
            }
        }
    });

    let mut setup = connect(addr);
    setup
        .write_all(&request(&[b"SET", b"big", &vec![b'x'; 64 << 10]]))
        .unwrap();
    assert_eq!(line(&mut setup), "+OK\r\n");

    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));
    let mut drivers = Vec::new();
    // Hoarders: 16 MiB MGET replies, never read; a new connection every half second.
    for _ in 0..6 {
        let stop = stop.clone();
        drivers.push(std::thread::spawn(move || {
            let mut mget: Vec<&[u8]> = vec![b"MGET"];
            mget.extend(std::iter::repeat_n(&b"big"[..], 256));
            let mget = request(&mget);
            let mut held = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut s) = TcpStream::connect(addr) {
                    let _ = s.write_all(&mget);
                    held.push(s);
                }
                if held.len() > 8 {
                    held.remove(0);
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }));
    }
    // Streamers: SETs declaring 400 MB, streamed until the server closes the connection.
    for _ in 0..4 {
        let (stop, refused) = (stop.clone(), refused.clone());
        drivers.push(std::thread::spawn(move || {
            let chunk = vec![b's'; 1 << 20];
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut s) = TcpStream::connect(addr) else {
                    continue;
                };
                let _ = s.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\ns\r\n$400000000\r\n");
                let mut sent = 0;
                while sent < 128 && !stop.load(Ordering::Relaxed) {
                    if s.write_all(&chunk).is_err() {
                        refused.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    sent += 1;
                }
            }
        }));
    }
    // Missing large keys (each a fresh 1 MiB key) and fresh HINT names.
    for worker in 0..2u64 {
        let stop = stop.clone();
        drivers.push(std::thread::spawn(move || {
            let mut s = connect(addr);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let mut key = vec![b'm'; 1 << 20];
                key[..16].copy_from_slice(&(worker << 48 | i).to_le_bytes().repeat(2));
                if s.write_all(&request(&[b"GET", &key])).is_err() {
                    s = connect(addr);
                    continue;
                }
                let _ = line(&mut s);
                let name = format!("fresh-{worker}-{i}");
                let _ = s.write_all(&request(&[b"SET", b"h", b"v", b"HINT", name.as_bytes()]));
                let _ = line(&mut s);
                i += 1;
            }
        }));
    }

    // Probe: the server answers a fresh client, and its RSS, throughout.
    let pid = process.id();
    let started = Instant::now();
    let mut peak = 0;
    let mut probes = 0;
    while started.elapsed() < SOAK {
        if let Ok(Some(status)) = process.try_wait() {
            panic!(
                "the server exited ({status}) under the load:\n{}",
                log.lock().unwrap()
            );
        }
        peak = peak.max(rss_bytes(pid).unwrap_or(0));
        assert!(
            peak < RSS_BOUND,
            "server RSS {peak} bytes passed the bound {RSS_BOUND} after {:?}",
            started.elapsed()
        );
        let mut probe = connect(addr);
        probe.write_all(&request(&[b"PING"])).unwrap();
        assert_eq!(
            line(&mut probe),
            "+PONG\r\n",
            "the server stopped answering"
        );
        probes += 1;
        std::thread::sleep(Duration::from_millis(250));
    }
    stop.store(true, Ordering::Relaxed);
    for driver in drivers {
        driver.join().unwrap();
    }

    let mut check = connect(addr);
    check.write_all(&request(&[b"INFO", b"stats"])).unwrap();
    let header = line(&mut check);
    let len: usize = header[1..header.len() - 2].parse().unwrap();
    let mut body = vec![0; len + 2];
    check.read_exact(&mut body).unwrap();
    let info = String::from_utf8_lossy(&body).into_owned();
    let stat = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {info}"))
    };
    println!(
        "soak: {probes} probes answered, peak RSS {} MiB (bound {} MiB), {} client memory \
         refusals, {} streams cut, {} HINT names dropped",
        peak >> 20,
        RSS_BOUND >> 20,
        stat("client_memory_refusals"),
        refused.load(Ordering::Relaxed),
        stat("hint_names_dropped"),
    );
    assert!(stat("client_memory_refusals") > 0, "{info}");
    assert!(
        log.lock().unwrap().contains("client memory limit reached"),
        "the operator was not told: {}",
        log.lock().unwrap()
    );
    // SAFETY: `pid` is our child, not yet waited for, so it cannot have been reused.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let status = process.wait().unwrap();
    assert!(status.success(), "shutdown after the soak: {status}");
}
