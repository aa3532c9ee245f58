//! The same seeded random command sequence against a real `redis-server` and a Mantle server,
//! replies compared one by one: the string, expiry and transaction commands must answer as
//! Redis does. Expiry readings (TTL, PTTL, EXPIRETIME, PEXPIRETIME) may differ by a second's
//! worth, since each server reads its own clock. Skipped when redis-server is not installed.
//! Replay a failure with `MANTLE_DIFF_SEED=<seed>`.

mod common;

use common::{redis_tool, request, Rng, TestServer};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One reply, exactly as sent.
#[derive(Clone, Debug, PartialEq)]
enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

struct Client {
    reader: BufReader<TcpStream>,
}

impl Client {
    fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Client {
            reader: BufReader::new(stream),
        }
    }

    fn call(&mut self, args: &[Vec<u8>]) -> Reply {
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        self.reader.get_mut().write_all(&request(&args)).unwrap();
        self.read()
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        line.trim_end_matches("\r\n").to_string()
    }

    fn read(&mut self) -> Reply {
        let line = self.line();
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" => Reply::Simple(rest.into()),
            "-" => Reply::Error(rest.into()),
            ":" => Reply::Int(rest.parse().unwrap()),
            "$" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return Reply::Bulk(None);
                }
                let mut data = vec![0; n as usize + 2];
                self.reader.read_exact(&mut data).unwrap();
                data.truncate(n as usize);
                Reply::Bulk(Some(data))
            }
            "*" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return Reply::Array(None);
                }
                Reply::Array(Some((0..n).map(|_| self.read()).collect()))
            }
            other => panic!("unexpected reply type {other:?} in {line:?}"),
        }
    }
}

/// A redis-server on a free port with no persistence, killed on drop.
struct RedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    fn start(binary: &std::path::Path) -> RedisServer {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        RedisServer {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How two replies to a request may differ.
#[derive(Clone, Copy, PartialEq)]
enum Tolerance {
    Exact,
    /// An expiry reading in seconds (1) or milliseconds (1000).
    Clock(i64),
}

fn same(a: &Reply, b: &Reply, tolerance: Tolerance) -> bool {
    match (a, b, tolerance) {
        (Reply::Int(x), Reply::Int(y), Tolerance::Clock(slack)) if *x >= 0 && *y >= 0 => {
            (x - y).abs() <= slack
        }
        _ => a == b,
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The random workload: a few keys, so commands collide; values that are numbers, floats,
/// text, empty, or at the edges of the integer range.
struct Workload {
    rng: Rng,
    /// Inside MULTI: queued so far (to end the transaction after a few).
    queued: Option<usize>,
    /// After WATCH: commands left to send before MULTI.
    watching: Option<usize>,
}

impl Workload {
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.rng.next() % items.len() as u64) as usize]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.rng.next() % 100 < percent
    }

    /// A key: `k*` for everything; `f*` only ever holds small numbers, so INCRBYFLOAT's
    /// results stay exact in binary (Redis computes in long double, Mantle in f64).
    fn key(&mut self) -> String {
        self.pick(&["k0", "k1", "k2", "k3", "k4"]).to_string()
    }

    fn float_key(&mut self) -> String {
        self.pick(&["f0", "f1"]).to_string()
    }

    fn value(&mut self) -> String {
        self.pick(&[
            "0",
            "1",
            "-7",
            "42",
            "abc",
            "",
            "01",
            "+5",
            " 3",
            "1.5",
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775806",
            "hello world",
        ])
        .to_string()
    }

    fn int(&mut self) -> String {
        self.pick(&[
            "1",
            "-1",
            "0",
            "5",
            "100",
            "-100",
            "x",
            "1.5",
            "9223372036854775807",
            "-9223372036854775808",
            "",
        ])
        .to_string()
    }

    /// A relative expiry amount: never small enough to run out during the test.
    fn ttl(&mut self) -> String {
        self.pick(&[
            "100",
            "200",
            "0",
            "-1",
            "-100",
            "abc",
            "9223372036854775807",
        ])
        .to_string()
    }

    fn unix_time(&mut self, millis: bool) -> String {
        let now = now_secs();
        let secs = match self.rng.next() % 4 {
            0 => now + 300,
            1 => now.saturating_sub(300), // in the past: deletes the key
            2 => now + 1000,
            _ => 1,
        };
        if millis {
            (secs * 1000).to_string()
        } else {
            secs.to_string()
        }
    }

    /// NX / XX for a relative expiry: GT and LT would compare two relative times set in the
    /// same millisecond on one server and not on the other (a race, not a difference).
    fn relative_expire_flag(&mut self) -> Vec<String> {
        match self.rng.next() % 4 {
            0 => vec!["NX".into()],
            1 => vec!["XX".into()],
            2 => vec!["NX".into(), "XX".into()],
            _ => vec![],
        }
    }

    fn expire_flag(&mut self) -> Vec<String> {
        match self.rng.next() % 8 {
            0 => vec!["NX".into()],
            1 => vec!["XX".into()],
            2 => vec!["GT".into()],
            3 => vec!["LT".into()],
            4 => vec!["NX".into(), "GT".into()],
            5 => vec!["GT".into(), "LT".into()],
            6 => vec!["XX".into(), "LT".into()],
            _ => vec![],
        }
    }

    /// The next request and how its reply may differ.
    fn next(&mut self) -> (Vec<String>, Tolerance) {
        if let Some(n) = self.queued {
            if n > (self.rng.next() % 5) as usize {
                self.queued = None;
                let end = if self.chance(85) { "EXEC" } else { "DISCARD" };
                return (vec![end.into()], Tolerance::Clock(1000));
            }
            self.queued = Some(n + 1);
            if self.chance(5) {
                return (vec!["NOSUCHCMD".into(), "x".into()], Tolerance::Exact);
            }
            if self.chance(5) {
                return (vec!["INCR".into()], Tolerance::Exact); // wrong arity: EXECABORT
            }
            if self.chance(3) {
                return (vec!["MULTI".into()], Tolerance::Exact);
            }
            if self.chance(3) {
                return (vec!["WATCH".into(), self.key()], Tolerance::Exact);
            }
        } else if let Some(left) = self.watching {
            self.watching = left.checked_sub(1);
            if left == 0 {
                self.queued = Some(0);
                return (vec!["MULTI".into()], Tolerance::Exact);
            }
        } else if self.chance(4) {
            if self.chance(40) {
                // WATCH first; the commands before MULTI may change the key.
                self.watching = Some((self.rng.next() % 3) as usize);
                return (vec!["WATCH".into(), self.key()], Tolerance::Exact);
            }
            self.queued = Some(0);
            return (vec!["MULTI".into()], Tolerance::Exact);
        } else if self.chance(1) {
            let lone = self.pick(&["EXEC", "DISCARD", "UNWATCH"]);
            return (vec![lone.into()], Tolerance::Exact);
        }
        self.command()
    }

    fn command(&mut self) -> (Vec<String>, Tolerance) {
        let k = self.key();
        let exact = |args: Vec<String>| (args, Tolerance::Exact);
        let s = |x: &str| x.to_string();
        match self.rng.next() % 36 {
            0 | 1 => {
                let mut args = vec![s("SET"), k, self.value()];
                match self.rng.next() % 6 {
                    0 => args.extend([s("EX"), self.pick(&["100", "0", "-5"]).into()]),
                    1 => args.extend([s("PX"), s("100000")]),
                    2 => args.push(s("NX")),
                    3 => args.push(s("XX")),
                    4 => args.extend([s("EXAT"), self.unix_time(false)]),
                    _ => {}
                }
                exact(args)
            }
            2 => exact(vec![s("GET"), k]),
            3 => {
                let j = self.key();
                exact(vec![s("DEL"), k, j])
            }
            4 => {
                let j = self.key();
                exact(vec![s("EXISTS"), k, j])
            }
            5 => {
                let (j, f) = (self.key(), self.float_key());
                exact(vec![s("MGET"), k, j, f])
            }
            6 => {
                let (j, v, w) = (self.key(), self.value(), self.value());
                exact(vec![s("MSET"), k, v, j, w])
            }
            7 => {
                let (j, v, w) = (self.key(), self.value(), self.value());
                exact(vec![s("MSETNX"), k, v, j, w])
            }
            8 => exact(vec![s("INCR"), k]),
            9 => exact(vec![s("DECR"), k]),
            10 => exact(vec![s("INCRBY"), k, self.int()]),
            11 => exact(vec![s("DECRBY"), k, self.int()]),
            12 => {
                let f = self.float_key();
                let delta = self.pick(&["1.5", "-0.25", "3", "abc", "1e2", "-10"]);
                exact(vec![s("INCRBYFLOAT"), f, delta.into()])
            }
            13 => {
                let f = self.float_key();
                let value = self.pick(&["1.5", "10", "abc", "-3", "0"]);
                exact(vec![s("SET"), f, value.into()])
            }
            14 => exact(vec![s("APPEND"), k, self.value()]),
            15 => exact(vec![s("STRLEN"), k]),
            16 => {
                let (a, b) = (
                    self.pick(&["0", "1", "-1", "-3", "5", "-100"]),
                    self.pick(&["0", "2", "-1", "-2", "100", "-100"]),
                );
                exact(vec![s("GETRANGE"), k, a.into(), b.into()])
            }
            17 => {
                let offset = self.pick(&["0", "1", "3", "10", "-1", "536870912", "x"]);
                let value = self.pick(&["", "Z", "xyz"]);
                exact(vec![s("SETRANGE"), k, offset.into(), value.into()])
            }
            18 => exact(vec![s("SETNX"), k, self.value()]),
            19 => exact(vec![s("SETEX"), k, self.ttl(), self.value()]),
            20 => {
                let ms = self.pick(&["100000", "0", "-1", "x"]);
                exact(vec![s("PSETEX"), k, ms.into(), self.value()])
            }
            21 => exact(vec![s("GETSET"), k, self.value()]),
            22 => exact(vec![s("GETDEL"), k]),
            23 => {
                let mut args = vec![s("GETEX"), k];
                match self.rng.next() % 6 {
                    0 => args.extend([s("EX"), self.ttl()]),
                    1 => args.extend([s("PX"), s("100000")]),
                    2 => args.push(s("PERSIST")),
                    3 => args.extend([s("EXAT"), self.unix_time(false)]),
                    4 => args.extend([s("EX"), s("100"), s("PERSIST")]),
                    _ => {}
                }
                exact(args)
            }
            24 | 25 => {
                let mut args = vec![s("EXPIRE"), k, self.ttl()];
                args.extend(self.relative_expire_flag());
                exact(args)
            }
            26 => {
                let mut args = vec![s("PEXPIRE"), k, s("150000")];
                args.extend(self.relative_expire_flag());
                exact(args)
            }
            27 => {
                let mut args = vec![s("EXPIREAT"), k, self.unix_time(false)];
                args.extend(self.expire_flag());
                exact(args)
            }
            28 => exact(vec![s("PEXPIREAT"), k, self.unix_time(true)]),
            29 => exact(vec![s("PERSIST"), k]),
            30 => (vec![s("TTL"), k], Tolerance::Clock(1)),
            31 => (vec![s("PTTL"), k], Tolerance::Clock(1000)),
            32 => (vec![s("EXPIRETIME"), k], Tolerance::Clock(1)),
            33 => (vec![s("PEXPIRETIME"), k], Tolerance::Clock(1000)),
            34 => exact(vec![s("INCRBY"), self.float_key(), s("2")]),
            _ => exact(vec![s("EXPIRE"), self.float_key(), s("100")]),
        }
    }
}

/// Runs `commands` requests of seed `seed`; the first difference, described.
fn run(seed: u64, commands: usize, redis: &RedisServer, mantle: &TestServer) -> Result<(), String> {
    let mut theirs = Client::connect(redis.port);
    let mut ours = Client::connect(mantle.addr.port());
    let flush = vec![b"FLUSHALL".to_vec()];
    assert_eq!(theirs.call(&flush), Reply::Simple("OK".into()));
    // Mantle's keyspace starts empty: a fresh server per seed.
    let mut workload = Workload {
        rng: Rng(seed),
        queued: None,
        watching: None,
    };
    let mut history: Vec<String> = Vec::new();
    for i in 0..commands {
        let (args, tolerance) = workload.next();
        let line = args.join(" ");
        history.push(line.clone());
        let args: Vec<Vec<u8>> = args.into_iter().map(String::into_bytes).collect();
        let expected = theirs.call(&args);
        let got = ours.call(&args);
        let agree = match (&expected, &got) {
            // EXEC's array holds expiry readings too: compare its entries with the slack.
            (Reply::Array(Some(a)), Reply::Array(Some(b))) if a.len() == b.len() => {
                a.iter().zip(b).all(|(x, y)| same(x, y, tolerance))
            }
            _ => same(&expected, &got, tolerance),
        };
        if !agree {
            let start = history.len().saturating_sub(12);
            return Err(format!(
                "seed {seed}: command {i} `{line}` differs\n  redis:  {expected:?}\n  mantle: {got:?}\n\
                 the commands before it:\n  {}",
                history[start..].join("\n  ")
            ));
        }
    }
    Ok(())
}

#[test]
fn mantle_answers_as_redis_server_does() {
    let Some(binary) = redis_tool("redis-server", "mantle_answers_as_redis_server_does") else {
        return;
    };
    let redis = RedisServer::start(&binary);
    let seeds: Vec<u64> = match std::env::var("MANTLE_DIFF_SEED") {
        Ok(seed) => vec![seed.parse().expect("MANTLE_DIFF_SEED is a number")],
        Err(_) => (1..=6).collect(),
    };
    // Every seed runs, so one failure shows every seed's first difference.
    let mut failures = Vec::new();
    for seed in seeds {
        let dir = tempfile::tempdir().unwrap();
        let mantle = TestServer::rocks(dir.path(), |_| {});
        if let Err(difference) = run(seed, 3000, &redis, &mantle) {
            failures.push(difference);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
