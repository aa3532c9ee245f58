//! A hostile policy on a real server: policies that try to run outside their instruction
//! budget, hold the policy thread, flood the log, or overflow what the host keeps for them;
//! a server killed while a policy is wedged; a broken stderr. In every case the server keeps
//! answering, the policy is stopped and rolled back, and the operator has a way out.
//!
//! Tests that kill or signal the server run it as a separate process: this test binary
//! re-executes itself with `HOSTILE_CHILD_DIR` set, and its `child_server` test is then the
//! server (`server::serve`, the entry point of `mantle serve`).

mod common;

use common::TestServer;
use server::{Backend, Config, Fsync};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CHILD_DIR: &str = "HOSTILE_CHILD_DIR";
/// `spin`: a budget and time limit so large only an interrupt stops a loop.
const CHILD_LIMITS: &str = "HOSTILE_CHILD_LIMITS";
const CHILD_NO_POLICY: &str = "HOSTILE_CHILD_NO_POLICY";

const GOOD: &str = "function howmuch()\n  return {capacity = 500}\nend\n";
const SPIN: &str = "function when()\n  while true do end\nend\n";

/// Polls `check` until it holds; panics with `what` after a generous deadline.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A client whose replies must come within 30 s: a policy command that hangs fails the test.
fn client(addr: SocketAddr) -> redis::Connection {
    let c = redis::Client::open(format!("redis://{addr}"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(10))
        .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c
}

fn status(c: &mut redis::Connection) -> std::collections::HashMap<String, String> {
    let raw: std::collections::HashMap<String, redis::Value> =
        redis::cmd("POLICY").arg("STATUS").query(c).unwrap();
    raw.into_iter()
        .map(|(k, v)| {
            let v = match v {
                redis::Value::Data(d) => String::from_utf8_lossy(&d).into_owned(),
                redis::Value::Int(n) => n.to_string(),
                other => format!("{other:?}"),
            };
            (k, v)
        })
        .collect()
}

fn load(c: &mut redis::Connection, name: &str, source: &str) -> redis::RedisResult<i64> {
    redis::cmd("POLICY")
        .arg("LOAD")
        .arg(name)
        .arg(source)
        .query(c)
}

fn log(c: &mut redis::Connection) -> Vec<String> {
    redis::cmd("POLICY").arg("LOG").arg(500).query(c).unwrap()
}

fn in_process(dir: &Path, limits: policy::Limits) -> TestServer {
    TestServer::rocks(dir, |c| {
        c.max_keys = Some(1_000);
        c.tick = Duration::from_millis(30);
        c.policy_echo = false;
        c.policy_limits = limits;
    })
}

fn small_limits() -> policy::Limits {
    policy::Limits {
        instructions: 2_000_000,
        time_limit: Duration::from_millis(500),
        memory_bytes: 32 << 20,
        ..policy::Limits::default()
    }
}

#[test]
fn unmetered_policy_code_is_stopped_and_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = in_process(dir.path(), small_limits());
    let mut c = client(server.addr);
    assert_eq!(load(&mut c, "good", GOOD).unwrap(), 1);
    let hostile = [
        "function when()\n  xpcall(function() while true do end end, function() while true do end end)\nend",
        "function when()\n  local s = string.rep('a', 50000)\n  return s:find('.-.-.-.-.-.-b') ~= nil\nend",
        "function when()\n  while true do string.rep('', math.maxinteger) end\nend",
        "function when()\n  table.move({}, 1, math.maxinteger - 1, 1)\nend",
        "function when()\n  setmetatable({}, {__gc = function() while true do end end})\n  collectgarbage()\nend",
    ];
    for (i, source) in hostile.iter().enumerate() {
        let version = load(&mut c, "hostile", source).unwrap();
        assert_eq!(version, i as i64 + 1);
        eventually(&format!("hostile@{version} rolled back"), || {
            status(&mut c)["active"] == "good@1"
        });
        let events = log(&mut c).join("\n");
        assert!(
            events.contains(&format!("event=rolled_back policy=hostile@{version}")),
            "{events}"
        );
    }
    let s = status(&mut c);
    assert!(
        s["fallbacks"].parse::<u64>().unwrap() >= hostile.len() as u64,
        "{s:?}"
    );
}

/// Limits no loop reaches: the stand-in for work below the instruction hook (a C function
/// the budget does not see), which nothing but abandoning the engine's thread ends.
fn spin_limits() -> policy::Limits {
    policy::Limits {
        instructions: u64::MAX / 2,
        time_limit: Duration::from_secs(3_600),
        ..policy::Limits::default()
    }
}

/// What the engine is busy with, per `POLICY STATUS`.
fn busy(c: &mut redis::Connection) -> (String, u64) {
    let s = status(c);
    (s["busy_with"].clone(), s["busy_ms"].parse().unwrap())
}

/// A wedged tick holds only the engine's thread: the commands that need no Lua state answer
/// while it still runs (each answer is read while `busy_with` still names the tick; a
/// command that waited for the tick would hang into the client's read timeout), a request
/// that needs the engine is refused with the way out, and `POLICY ROLLBACK` abandons the
/// wedged engine, takes effect, and leaves a working engine behind.
#[test]
fn a_wedged_tick_never_blocks_the_policy_commands() {
    let dir = tempfile::tempdir().unwrap();
    let server = in_process(dir.path(), spin_limits());
    let mut c = client(server.addr);
    assert_eq!(load(&mut c, "good", GOOD).unwrap(), 1);
    assert_eq!(load(&mut c, "spin", SPIN).unwrap(), 1);
    eventually("the spinning tick counted as wedged", || {
        let (what, ms) = busy(&mut c);
        what == "a tick of spin@1" && ms >= 2_000
    });

    let events = log(&mut c).join("\n");
    assert!(events.contains("event=activated policy=spin@1"), "{events}");
    let list: Vec<String> = redis::cmd("POLICY").arg("LIST").query(&mut c).unwrap();
    assert_eq!(list.len(), 2, "{list:?}");
    assert!(
        list[1].starts_with("spin@1 ") && list[1].ends_with(" active"),
        "{list:?}"
    );
    let source: String = redis::cmd("POLICY")
        .arg("SHOW")
        .arg("spin")
        .query(&mut c)
        .unwrap();
    assert_eq!(source, SPIN);
    let ok: String = redis::cmd("POLICY")
        .arg("PARAM")
        .arg("n")
        .arg("5")
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    assert_eq!(status(&mut c)["params"], "n=5");
    let refused = load(&mut c, "other", GOOD).unwrap_err().to_string();
    assert!(
        refused.contains("wedged") && refused.contains("POLICY ROLLBACK"),
        "{refused}"
    );
    assert_eq!(
        busy(&mut c).0,
        "a tick of spin@1",
        "all of it answered mid-tick"
    );

    let reinstated: String = redis::cmd("POLICY").arg("ROLLBACK").query(&mut c).unwrap();
    assert_eq!(reinstated, "good@1");
    let s = status(&mut c);
    assert_eq!(s["active"], "good@1", "{s:?}");
    assert_eq!(
        s["params"], "n=5",
        "the new engine read the parameter: {s:?}"
    );
    let events = log(&mut c).join("\n");
    assert!(events.contains("event=abandoned policy=spin@1"), "{events}");
    assert!(
        events.contains("event=quarantined policy=spin@1"),
        "{events}"
    );
    assert!(
        !events.contains("event=rolled_back policy=good@1"),
        "one rollback, not two: {events}"
    );
    // The new engine serves what needs it.
    assert_eq!(
        load(&mut c, "good", "function when() return false end").unwrap(),
        2
    );
    assert_eq!(status(&mut c)["active"], "good@2");
    let stack_after: i64 = redis::cmd("POLICY")
        .arg("ROLLBACK")
        .query::<String>(&mut c)
        .map(|s| (s == "good@1") as i64)
        .unwrap();
    assert_eq!(stack_after, 1);
}

#[test]
fn policy_param_is_bounded_in_size_and_count() {
    let dir = tempfile::tempdir().unwrap();
    let server = in_process(dir.path(), policy::Limits::default());
    let mut c = client(server.addr);
    let big = "v".repeat(1 << 20);
    let err = redis::cmd("POLICY")
        .arg("PARAM")
        .arg("k")
        .arg(&big)
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(
        err.to_string().contains("policy parameter too large"),
        "{err}"
    );
    for i in 0..policy::Limits::MAX_PARAMS {
        let _: () = redis::cmd("POLICY")
            .arg("PARAM")
            .arg(format!("p{i}"))
            .arg("v".repeat(policy::Limits::MAX_PARAM_VALUE_BYTES))
            .query(&mut c)
            .unwrap();
    }
    let err = redis::cmd("POLICY")
        .arg("PARAM")
        .arg("one_more")
        .arg(1)
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(
        err.to_string().contains("too many policy parameters"),
        "{err}"
    );
    // A policy source is bounded too.
    let huge = format!("-- {}\n{GOOD}", "x".repeat(1 << 20));
    let err = load(&mut c, "huge", &huge).unwrap_err();
    assert!(
        err.to_string().contains("at most 1048576 accepted"),
        "{err}"
    );
    // Changing an existing one is still allowed, and every policy still loads.
    let _: () = redis::cmd("POLICY")
        .arg("PARAM")
        .arg("p0")
        .arg(2)
        .query(&mut c)
        .unwrap();
    assert_eq!(load(&mut c, "good", GOOD).unwrap(), 1);
}

/// Peak resident memory of this process (the in-process server), from /proc.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[test]
fn a_log_flood_costs_the_host_a_bounded_amount_of_memory() {
    let dir = tempfile::tempdir().unwrap();
    let server = in_process(
        dir.path(),
        policy::Limits {
            memory_bytes: 64 << 20,
            ..policy::Limits::default()
        },
    );
    let mut c = client(server.addr);
    let before = peak_rss_bytes();
    // 100 lines of 4 MiB a tick: 400 MiB a tick if lines were copied whole.
    let flood = "local big = string.rep('x', 4 << 20)\nfunction when()\n  for i = 1, 100 do log(2, big) end\n  return false\nend";
    load(&mut c, "flood", flood).unwrap();
    eventually("several ticks", || {
        status(&mut c)["ticks"].parse::<u64>().unwrap() >= 5
    });
    let s = status(&mut c);
    assert_eq!(s["active"], "flood@1", "{s:?}");
    let events = log(&mut c);
    let lines: Vec<&String> = events
        .iter()
        .filter(|e| e.contains("policy=flood@1"))
        .collect();
    assert!(!lines.is_empty());
    for line in &lines {
        assert!(
            line.len() < 1_300,
            "a log line is bounded: {} bytes",
            line.len()
        );
    }
    if let (Some(before), Some(after)) = (before, peak_rss_bytes()) {
        // The policy's own 64 MiB, plus bounded copies; never whole lines.
        let grown = after.saturating_sub(before);
        assert!(grown < 200 << 20, "peak memory grew by {grown} bytes");
    }
}

#[test]
fn capacities_outside_the_valid_range_are_policy_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = in_process(dir.path(), policy::Limits::default());
    let mut c = client(server.addr);
    let stats = |c: &mut redis::Connection| -> String {
        let raw: std::collections::HashMap<String, redis::Value> =
            redis::cmd("CACHE").arg("STATS").query(c).unwrap();
        match raw.get("capacity_objects") {
            Some(redis::Value::Int(n)) => n.to_string(),
            Some(redis::Value::Data(d)) => String::from_utf8_lossy(d).into_owned(),
            other => format!("{other:?}"),
        }
    };
    let start = stats(&mut c);
    for (n, value) in ["0", "1e300", "-5", "math.huge"].iter().enumerate() {
        let source = format!("function howmuch()\n  return {{capacity = {value}}}\nend\n");
        load(&mut c, "cap", &source).unwrap();
        eventually(&format!("capacity={value} reported as an error"), || {
            status(&mut c)["last_error"].contains(&format!("cap@{}", n + 1))
        });
        let error = status(&mut c)["last_error"].clone();
        assert!(
            error.contains("howmuch() capacity must be"),
            "{value}: {error}"
        );
        let now = stats(&mut c);
        assert_eq!(now, start, "capacity={value} changed the cache to {now}");
        assert!(!now.starts_with('-'));
    }
}

// ---- Tests with a server process of their own. ----

/// The server process, when this binary was started as one.
#[test]
fn child_server() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let mut config = Config::new(Backend::RocksDb {
        data_dir: Path::new(&dir).to_path_buf(),
        fsync: Fsync::EverySec,
    });
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.max_keys = Some(1_000);
    config.threads = 2;
    config.tick = Duration::from_millis(50);
    if std::env::var(CHILD_LIMITS).as_deref() == Ok("spin") {
        config.policy_limits = policy::Limits {
            instructions: u64::MAX / 2,
            time_limit: Duration::from_secs(3_600),
            ..policy::Limits::default()
        };
    }
    config.no_policy = std::env::var_os(CHILD_NO_POLICY).is_some();
    if let Err(e) = server::serve(config) {
        let _ = std::io::Write::write_fmt(
            &mut std::io::stderr(),
            format_args!("child server failed: {e:#}\n"),
        );
        std::process::exit(2);
    }
}

struct ChildServer {
    process: Child,
    addr: SocketAddr,
    /// Everything the child printed on stderr after its address, when still read.
    log: Arc<Mutex<String>>,
    stderr: Option<BufReader<std::process::ChildStderr>>,
}

impl ChildServer {
    fn start(dir: &Path, env: &[(&str, &str)]) -> ChildServer {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([
                "child_server",
                "--exact",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_DIR, dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut process = command.spawn().unwrap();
        let mut stderr = BufReader::new(process.stderr.take().unwrap());
        let mut first = String::new();
        let mut seen = String::new();
        while !first.contains("serving on") {
            first.clear();
            if stderr.read_line(&mut first).unwrap() == 0 {
                let _ = process.kill();
                panic!("child server did not start: {seen}");
            }
            seen.push_str(&first);
        }
        let addr = first
            .split_whitespace()
            .skip_while(|w| *w != "on")
            .nth(1)
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("child did not report its address: {first:?}"));
        ChildServer {
            process,
            addr,
            log: Arc::new(Mutex::new(seen)),
            stderr: Some(stderr),
        }
    }

    /// Keeps reading stderr on a thread (so the child never blocks on it).
    fn drain_stderr(&mut self) {
        let stderr = self.stderr.take().unwrap();
        let sink = self.log.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits for the process to exit, up to `limit`; `None` if it did not.
    fn wait_for_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.process.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn sigterm(&self) {
        let pid = self.process.id() as libc::pid_t;
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

#[test]
fn sigterm_exits_promptly_while_a_policy_spins() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = ChildServer::start(dir.path(), &[(CHILD_LIMITS, "spin")]);
    child.drain_stderr();
    let mut c = client(child.addr);
    load(&mut c, "spin", SPIN).unwrap();
    eventually("the spinning tick started", || {
        child.log().contains("a tick has run for")
    });
    child.sigterm();
    let exit = child.wait_for_exit(Duration::from_secs(30));
    let exit = exit.unwrap_or_else(|| panic!("SIGTERM did not stop the server: {}", child.log()));
    assert!(exit.success(), "{exit:?}: {}", child.log());
    assert!(child.log().contains("shut down cleanly"), "{}", child.log());
}

#[test]
fn a_version_wedged_when_the_server_dies_is_quarantined_and_no_policy_starts_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = ChildServer::start(dir.path(), &[(CHILD_LIMITS, "spin")]);
    child.drain_stderr();
    let mut c = client(child.addr);
    assert_eq!(load(&mut c, "good", GOOD).unwrap(), 1);
    load(&mut c, "spin", SPIN).unwrap();
    eventually("the watchdog recorded the wedge", || {
        child.log().contains("recorded as wedged")
    });
    child.process.kill().unwrap(); // SIGKILL, as an operator would
    child.process.wait().unwrap();

    // Restarted with the same limits: the wedged version is not run again.
    let mut child = ChildServer::start(dir.path(), &[(CHILD_LIMITS, "spin")]);
    child.drain_stderr();
    let mut c = client(child.addr);
    let s = status(&mut c);
    assert_eq!(s["active"], "good@1", "{s:?}");
    let events = log(&mut c).join("\n");
    assert!(
        events.contains("event=quarantined policy=spin@1"),
        "{events}"
    );
    assert!(events.contains("POLICY USE spin 1"), "{events}");
    // The registry still has it.
    let source: String = redis::cmd("POLICY")
        .arg("SHOW")
        .arg("spin")
        .query(&mut c)
        .unwrap();
    assert_eq!(source, SPIN);
    drop(c);
    child.sigterm();
    assert!(child.wait_for_exit(Duration::from_secs(30)).is_some());

    // --no-policy: nothing runs, the registry is untouched, an operator can resume.
    let mut child = ChildServer::start(dir.path(), &[(CHILD_NO_POLICY, "1")]);
    child.drain_stderr();
    let mut c = client(child.addr);
    let s = status(&mut c);
    assert_eq!(s["active"], "", "{s:?}");
    assert_eq!(s["suspended"], "good@1", "{s:?}");
    let events = log(&mut c).join("\n");
    assert!(events.contains("event=suspended policy=good@1"), "{events}");
    let v: i64 = redis::cmd("POLICY")
        .arg("USE")
        .arg("good")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, 1);
    let s = status(&mut c);
    assert_eq!(
        (s["active"].as_str(), s["suspended"].as_str()),
        ("good@1", "")
    );
}

#[test]
fn a_closed_stderr_does_not_stop_the_policy_engine() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = ChildServer::start(dir.path(), &[]);
    // The log reader goes away: every later write to stderr fails with EPIPE.
    drop(child.stderr.take());
    let mut c = client(child.addr);
    let chatty = "function when()\n  log(2, 'tick', tick)\n  return false\nend";
    assert_eq!(load(&mut c, "chatty", chatty).unwrap(), 1);
    let ticks = |c: &mut redis::Connection| status(c)["ticks"].parse::<u64>().unwrap();
    let first = ticks(&mut c);
    eventually("the engine keeps ticking", || ticks(&mut c) >= first + 5);
    // Every POLICY command still reaches the engine.
    assert_eq!(load(&mut c, "good", GOOD).unwrap(), 1);
    assert_eq!(status(&mut c)["active"], "good@1");
    assert!(!log(&mut c).is_empty());
    assert!(
        child.process.try_wait().unwrap().is_none(),
        "the server is running"
    );
    // Its last words ("shut down cleanly") go nowhere, and it still exits cleanly.
    child.sigterm();
    let exit = child
        .wait_for_exit(Duration::from_secs(30))
        .expect("SIGTERM stops the server");
    assert!(exit.success(), "{exit:?}");
}
