//! What a sick store does to the server, against the real server and a real RocksDB:
//! a full disk (a small tmpfs, in every `--fsync` mode), a process with few file descriptors
//! flooded with clients, and a damaged write-ahead log. See docs/server.md, "Limits and
//! failure behaviour".
//!
//! The disk-full test mounts a tmpfs and so needs root (as in CI); elsewhere it says SKIPPED.
//! The descriptor test runs the server in a child process (this test binary re-executed with
//! `MANTLE_FD_CHILD_DIR` set) under a low `RLIMIT_NOFILE`.

mod common;

use common::{request, RawClient, TestServer};
use server::{Backend, Config, Fsync, WalRecovery};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Disk full

/// A tmpfs mounted for one test, unmounted on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(size: &str, test: &str) -> Option<Tmpfs> {
        let dir = std::env::temp_dir().join(format!("mantle-tmpfs-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("SKIPPED {test}: cannot mount a tmpfs here (needs root, as in CI)");
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(Tmpfs { dir })
    }

    fn free_bytes(&self) -> u64 {
        let path = std::ffi::CString::new(self.dir.to_str().unwrap()).unwrap();
        // SAFETY: statvfs writes only into the zeroed struct passed.
        let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut stat) }, 0);
        stat.f_bavail as u64 * stat.f_frsize as u64
    }

    /// Fills all but `leave` bytes with a file the test removes to free the space.
    fn fill(&self, leave: u64) -> PathBuf {
        use std::os::unix::io::AsRawFd;
        let path = self.dir.join("filler");
        let file = std::fs::File::create(&path).unwrap();
        let size = self.free_bytes().saturating_sub(leave) as libc::off_t;
        // SAFETY: fallocate on a file descriptor this function owns.
        assert_eq!(unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size) }, 0);
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rocks_config(dir: &Path, fsync: Fsync) -> Config {
    let mut config = Config::new(Backend::RocksDb {
        data_dir: dir.to_path_buf(),
        fsync,
    });
    config.listen = "127.0.0.1:0".parse().unwrap();
    config
}

/// One reply, whole: a status/error/integer line, or a bulk string's header and body.
fn reply(client: &mut RawClient) -> String {
    let line = client.line();
    if let Some(len) = line.strip_prefix('$') {
        let len: i64 = len.trim().parse().unwrap();
        if len >= 0 {
            let body = client.read_exact_len(len as usize + 2);
            return format!("{line}{}", String::from_utf8_lossy(&body));
        }
    }
    line
}

fn ask(client: &mut RawClient, args: &[&[u8]]) -> String {
    client.send(&request(args));
    reply(client)
}

/// A command of plain words, e.g. `"INFO server"`.
fn say(client: &mut RawClient, words: &str) -> String {
    let args: Vec<&[u8]> = words.split(' ').map(str::as_bytes).collect();
    ask(client, &args)
}

const VALUE_LEN: usize = 2000;

fn value_of(key: &str) -> Vec<u8> {
    key.bytes().cycle().take(VALUE_LEN).collect()
}

/// Writes distinct keys from several clients until each has been refused once; returns the
/// keys acknowledged and the keys refused. Every refusal must be an error reply naming the
/// cause (never a closed connection).
fn write_until_refused(server: &TestServer, tag: &str) -> (Vec<String>, Vec<String>) {
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let addr = server.addr;
            let tag = tag.to_string();
            std::thread::spawn(move || {
                let mut client = RawClient::connect(addr);
                let (mut acked, mut refused) = (Vec::new(), Vec::new());
                for i in 0..200_000 {
                    let key = format!("{tag}:{t}:{i}");
                    let answer = ask(&mut client, &[b"SET", key.as_bytes(), &value_of(&key)]);
                    if answer == "+OK\r\n" {
                        acked.push(key);
                        continue;
                    }
                    assert!(
                        answer.starts_with("-MISCONF ") && answer.contains("No space left"),
                        "a refused write gets an error naming the cause, got {answer:?}"
                    );
                    refused.push(key);
                    break;
                }
                assert_eq!(refused.len(), 1, "the disk never filled");
                assert_eq!(say(&mut client, "PING"), "+PONG\r\n");
                (acked, refused)
            })
        })
        .collect();
    let mut acked = Vec::new();
    let mut refused = Vec::new();
    for thread in threads {
        let (a, r) = thread.join().expect("writer failed");
        acked.extend(a);
        refused.extend(r);
    }
    (acked, refused)
}

fn assert_all_present(client: &mut RawClient, keys: &[String]) {
    for key in keys {
        let answer = ask(client, &[b"GET", key.as_bytes()]);
        let expected = format!(
            "${VALUE_LEN}\r\n{}\r\n",
            String::from_utf8_lossy(&value_of(key))
        );
        assert_eq!(
            answer, expected,
            "acknowledged key {key} is missing or wrong"
        );
    }
}

#[test]
fn disk_full_is_an_error_reply_not_a_crash_and_no_acknowledged_write_is_lost() {
    // Room for RocksDB's recovery (it waits for space for one memtable flush, 64 MiB).
    let Some(tmpfs) = Tmpfs::mount(
        "100m",
        "disk_full_is_an_error_reply_not_a_crash_and_no_acknowledged_write_is_lost",
    ) else {
        return;
    };
    for fsync in [Fsync::No, Fsync::EverySec, Fsync::Always] {
        let mode = fsync.as_str();
        let data = tmpfs.dir.join(mode);
        let server = TestServer::start(rocks_config(&data, fsync));
        let filler = tmpfs.fill(3 << 20);
        let (acked, refused) = write_until_refused(&server, mode);
        assert!(!acked.is_empty());

        // While the disk is full nothing is shown that could still be lost. A refused write
        // may be shown only when it is durable after all: its log record reached the OS
        // before the failure (through another connection's flush), and the error reply only
        // means "not acknowledged". Such a write must then survive the restart below.
        let mut client = server.raw();
        let mut shown = Vec::new();
        for key in &refused {
            let answer = ask(&mut client, &[b"GET", key.as_bytes()]);
            if answer.starts_with('$') && answer != "$-1\r\n" {
                let expected = format!(
                    "${VALUE_LEN}\r\n{}\r\n",
                    String::from_utf8_lossy(&value_of(key))
                );
                assert_eq!(answer, expected, "{mode}: refused write {key} shown wrong");
                shown.push(key.clone());
                continue;
            }
            assert!(
                answer == "$-1\r\n" || answer.starts_with("-MISCONF "),
                "{mode}: GET {key} of a refused write -> {answer:.60}"
            );
        }
        let dbsize = say(&mut client, "DBSIZE");
        assert!(
            dbsize == format!(":{}\r\n", acked.len() + shown.len())
                || dbsize.starts_with("-MISCONF "),
            "{mode}: DBSIZE counts a write that is neither acknowledged nor shown: {dbsize:?} \
             for {} acknowledged and {} shown",
            acked.len(),
            shown.len()
        );
        eprintln!(
            "{mode}: {} writes acknowledged, {} refused ({} of them durable and shown)",
            acked.len(),
            refused.len(),
            shown.len()
        );
        let info = say(&mut client, "INFO server");
        assert!(info.contains("store_status:failed"), "{mode}: {info}");
        assert!(info.contains("store_last_error:"), "{mode}: {info}");

        // Space returns. RocksDB recovers by itself from most out-of-space errors (writes
        // resume within seconds, without a restart); one it classes as hard needs a restart.
        // Either way every acknowledged write is kept.
        std::fs::remove_file(filler).unwrap();
        let freed = Instant::now();
        let resumed = loop {
            let answer = say(&mut client, "SET after space");
            if answer == "+OK\r\n" {
                break true;
            }
            assert!(
                answer.starts_with("-MISCONF "),
                "{mode}: while failed, writes are refused: {answer}"
            );
            if freed.elapsed() > Duration::from_secs(30) {
                break false;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        eprintln!(
            "{mode}: {} {:?} after space returned",
            if resumed {
                "writes resumed"
            } else {
                "still refusing writes"
            },
            freed.elapsed()
        );
        if resumed {
            let info = say(&mut client, "INFO server");
            assert!(info.contains("store_status:ok"), "{mode}: {info}");
            assert_all_present(&mut client, &acked);
            assert_all_present(&mut client, &shown);
        }
        drop(client);
        let shutdown = server.shutdown();
        assert!(
            !resumed || shutdown.is_ok(),
            "{mode}: clean shutdown after recovery: {shutdown:?}"
        );

        // Every acknowledged write survived, and the restarted store takes writes.
        let server = TestServer::start(rocks_config(&data, fsync));
        let mut client = server.raw();
        assert_all_present(&mut client, &acked);
        assert_all_present(&mut client, &shown);
        assert_eq!(say(&mut client, "SET after restart"), "+OK\r\n", "{mode}");
        drop(client);
        server.shutdown().unwrap();
        std::fs::remove_dir_all(&data).unwrap();
    }
}

/// A full disk at start is one clear error naming the data dir and the free space, never an
/// abort: RocksDB writes its own log while opening, and the distribution's librocksdb aborts
/// when that log is written again after a failed write. Space back, the same store opens with
/// its data.
#[test]
fn a_full_disk_at_start_is_a_clear_error_and_the_store_opens_once_space_returns() {
    let Some(tmpfs) = Tmpfs::mount(
        "8m",
        "a_full_disk_at_start_is_a_clear_error_and_the_store_opens_once_space_returns",
    ) else {
        return;
    };
    let data = tmpfs.dir.join("data");
    let server = TestServer::start(rocks_config(&data, Fsync::Always));
    let mut client = server.raw();
    assert_eq!(say(&mut client, "SET kept before"), "+OK\r\n");
    drop(client);
    server.shutdown().unwrap();

    for leave in [0, 64 << 10] {
        let filler = tmpfs.fill(leave);
        let error = start_error(rocks_config(&data, Fsync::Always))
            .unwrap_or_else(|| panic!("started with {leave} bytes free"));
        assert!(
            error.contains(&format!("refusing to open the store in {}", data.display()))
                && error.contains("bytes free")
                && error.contains("free some space"),
            "{error}"
        );
        std::fs::remove_file(filler).unwrap();
    }

    let server = TestServer::start(rocks_config(&data, Fsync::Always));
    let mut client = server.raw();
    assert_eq!(say(&mut client, "GET kept"), "$6\r\nbefore\r\n");
    drop(client);
    server.shutdown().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Descriptor exhaustion

const FD_CHILD_DIR: &str = "MANTLE_FD_CHILD_DIR";
/// The child's open-file limit, soft and hard (so it cannot raise it).
const FD_LIMIT: u64 = 256;

/// The server process of the descriptor test; does nothing in a normal run.
#[test]
fn fd_child_server() {
    let Some(dir) = std::env::var_os(FD_CHILD_DIR) else {
        return;
    };
    let mut config = rocks_config(Path::new(&dir), Fsync::No);
    config.maxmemory = Some(1 << 20);
    config.warmup_track = 0;
    if let Err(e) = server::serve(config) {
        eprintln!("child server failed: {e:#}");
        std::process::exit(1);
    }
}

/// Kills the child server however the test ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn clients_cannot_take_the_descriptors_the_store_needs() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let mut child_command = Command::new(std::env::current_exe().unwrap());
    child_command
        .args([
            "--exact",
            "fd_child_server",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(FD_CHILD_DIR, dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only setrlimit runs between fork and exec.
    unsafe {
        child_command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: FD_LIMIT as libc::rlim_t,
                rlim_max: FD_LIMIT as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = Child(child_command.spawn().unwrap());
    let stderr = BufReader::new(child.0.stderr.take().unwrap());
    let mut lines = stderr.lines();
    let mut warning = String::new();
    let addr = loop {
        let line = lines.next().expect("child exited before serving").unwrap();
        if line.contains("--maxclients") {
            warning = line.clone();
        }
        if let Some(rest) = line.strip_prefix("mantle: serving on ") {
            break rest.split(' ').next().unwrap().parse().unwrap();
        }
    };
    std::thread::spawn(move || lines.for_each(drop)); // keep draining the child's stderr
    assert!(
        warning.contains("lowered to") && warning.contains(&FD_LIMIT.to_string()),
        "the lowered client limit is announced at start: {warning:?}"
    );

    // More clients than descriptors: the extra ones are told, and nobody hangs.
    let mut accepted = Vec::new();
    let mut rejected = 0;
    for _ in 0..FD_LIMIT + 50 {
        let mut client = RawClient::connect(addr);
        match say(&mut client, "PING").as_str() {
            "+PONG\r\n" => accepted.push(client),
            "-ERR max number of clients reached\r\n" => rejected += 1,
            other => panic!("a client beyond the limit got {other:?}"),
        }
    }
    assert!(rejected > 0, "{} clients accepted", accepted.len());
    let info = say(&mut accepted[0], "INFO clients");
    assert!(
        info.contains(&format!("maxclients:{}", accepted.len())),
        "{info}"
    );

    // The store still opens files while every client slot is taken: enough data for RocksDB
    // to switch to a new log and flush a memtable to a new table file.
    let value = vec![b'v'; 1 << 20];
    for i in 0..80 {
        let key = format!("big:{i}");
        let answer = ask(&mut accepted[0], &[b"SET", key.as_bytes(), &value]);
        assert_eq!(answer, "+OK\r\n", "SET {key} with every client slot taken");
    }
    drop(accepted);
    let mut client = RawClient::connect(addr);
    let deadline = Instant::now() + Duration::from_secs(10);
    // The closed connections leave the server's count as their tasks notice.
    let answer = loop {
        let answer = say(&mut client, "SET after flood");
        if answer == "+OK\r\n" || Instant::now() > deadline {
            break answer;
        }
        client = RawClient::connect(addr);
    };
    assert_eq!(answer, "+OK\r\n");
    assert_eq!(say(&mut client, "DBSIZE"), ":81\r\n");
}

// ---------------------------------------------------------------------------------------------
// A damaged write-ahead log

const LOGGED_KEYS: usize = 3000;

/// A data dir whose log holds `LOGGED_KEYS` writes (`k0`, `k1`, ... in order), one log record
/// each, closed cleanly (RocksDB keeps them in the log: nothing was flushed to a table file).
/// One SET per round trip: a pipeline's SETs would share records (one batch per pipeline).
fn logged_data_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut config = rocks_config(dir.path(), Fsync::No);
    config.warmup_track = 0;
    let server = TestServer::start(config);
    let mut client = server.client();
    for i in 0..LOGGED_KEYS {
        redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(vec![b'x'; 100])
            .query::<()>(&mut client)
            .unwrap();
    }
    drop(client);
    server.shutdown().unwrap();
    dir
}

fn largest_log(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .expect("no write-ahead log")
}

fn copy_dir(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, to.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    to
}

/// The error of starting a server on `config`, if it fails to start.
fn start_error(config: Config) -> Option<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(server::Server::bind(config))
        .err()
        .map(|e| format!("{e:#}"))
}

fn present_keys(server: &TestServer) -> Vec<bool> {
    let mut client = server.client();
    let mut pipe = redis::pipe();
    for i in 0..LOGGED_KEYS {
        pipe.cmd("EXISTS").arg(format!("k{i}"));
    }
    pipe.query(&mut client).unwrap()
}

#[test]
fn a_damaged_wal_stops_the_start_unless_a_recovery_mode_accepts_the_loss() {
    let original = logged_data_dir();
    let log_len = std::fs::metadata(largest_log(original.path()))
        .unwrap()
        .len() as usize;
    // Damage of different kinds and places, each 4 KiB.
    for (at, fill) in [(0.5, 0x00u8), (0.25, 0xA5), (0.8, 0xFF)] {
        let case = format!("{} bytes of {fill:#04x} at {at}", 4096);
        let damaged = copy_dir(original.path());
        let log = largest_log(damaged.path());
        let mut bytes = std::fs::read(&log).unwrap();
        let start = (log_len as f64 * at) as usize;
        bytes[start..start + 4096].fill(fill);
        std::fs::write(&log, &bytes).unwrap();

        let error = start_error(rocks_config(damaged.path(), Fsync::No))
            .unwrap_or_else(|| panic!("{case}: the server started on a damaged log"));
        let file_name = log.file_name().unwrap().to_str().unwrap();
        assert!(
            error.contains(file_name) && error.contains("--wal-recovery point-in-time"),
            "{case}: the error names the file and the way out: {error}"
        );
        assert!(!error.contains('\n'), "one line: {error}");
        assert_eq!(
            bytes,
            std::fs::read(&log).unwrap(),
            "{case}: refusing changed the log"
        );

        let mut kept = Vec::new();
        for mode in [WalRecovery::PointInTime, WalRecovery::SkipCorrupted] {
            let copy = copy_dir(damaged.path());
            let mut config = rocks_config(copy.path(), Fsync::No);
            config.wal_recovery = mode;
            let server = TestServer::start(config);
            let present = present_keys(&server);
            let count = present.iter().filter(|&&p| p).count();
            assert!(
                count > 0 && count < LOGGED_KEYS,
                "{case} {mode:?}: {count} keys"
            );
            let info = say(&mut server.raw(), "INFO server");
            let report = info
                .lines()
                .find(|l| l.starts_with("store_wal_recovery:"))
                .unwrap_or_else(|| panic!("{case} {mode:?}: no loss report in INFO: {info}"));
            let lost: usize = report
                .split(": ")
                .last()
                .and_then(|tail| tail.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{case}: unreadable report {report}"));
            // Lost writes are the missing keys, plus any of the server's own bookkeeping
            // writes logged after them.
            let missing = LOGGED_KEYS - count;
            assert!(
                (missing..missing + 8).contains(&lost),
                "{case} {mode:?}: {missing} keys missing: {report}"
            );
            if mode == WalRecovery::PointInTime {
                // Everything before the damage, nothing after.
                assert!(present[..count].iter().all(|&p| p), "{case}: not a prefix");
            }
            kept.push(count);
            server.shutdown().unwrap();
        }
        assert!(
            kept[1] > kept[0],
            "{case}: skip-corrupted keeps the writes after the damage: {kept:?}"
        );
    }
}

#[test]
fn a_torn_wal_tail_is_dropped_without_refusing_to_start() {
    let original = logged_data_dir();
    for cut in [1usize, 20, 90] {
        let torn = copy_dir(original.path());
        let log = largest_log(torn.path());
        let len = std::fs::metadata(&log).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
        file.set_len(len - cut as u64).unwrap();
        let server = TestServer::start(rocks_config(torn.path(), Fsync::No));
        let count = present_keys(&server).iter().filter(|&&p| p).count();
        assert!(
            count >= LOGGED_KEYS - 1,
            "cut {cut}: only the torn last write may go: {count}"
        );
        server.shutdown().unwrap();
    }
}
