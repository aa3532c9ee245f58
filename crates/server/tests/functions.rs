//! Redis 7 functions and scripts against a real server: FUNCTION LOAD|LIST|DELETE|DUMP|
//! RESTORE|FLUSH|ROLLBACK|VERSIONS|STATS|KILL, FCALL/FCALL_RO, EVAL/EVALSHA/SCRIPT, Redis's
//! Lua ↔ reply rules, versions kept across a restart, the shipped libraries in functions/,
//! and hostile functions (loops, memory, huge replies, string bombs, undeclared keys,
//! disallowed commands): each gets an error reply and the server keeps serving.

mod common;

use common::TestServer;
use redis::{Connection, RedisResult, Value};
use std::time::{Duration, Instant};

fn server() -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |_| {});
    (dir, server)
}

fn load(con: &mut Connection, code: &str) -> RedisResult<String> {
    redis::cmd("FUNCTION").arg("LOAD").arg(code).query(con)
}

fn load_replace(con: &mut Connection, code: &str) -> RedisResult<String> {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(code)
        .query(con)
}

fn fcall<T: redis::FromRedisValue>(
    con: &mut Connection,
    name: &str,
    keys: &[&str],
    args: &[&str],
) -> RedisResult<T> {
    redis::cmd("FCALL")
        .arg(name)
        .arg(keys.len())
        .arg(keys)
        .arg(args)
        .query(con)
}

fn error_of<T: std::fmt::Debug>(result: RedisResult<T>) -> String {
    let e = result.expect_err("expected an error reply");
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

fn shipped(name: &str) -> String {
    let path = format!("{}/../../functions/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const ECHO_LIB: &str = "#!lua name=mylib
redis.register_function('echo_args', function(keys, args) return {keys[1], args[1]} end)
redis.register_function{function_name='get_it', callback=function(keys) return redis.call('GET', keys[1]) end, flags={'no-writes'}, description='reads'}
redis.register_function('set_it', function(keys, args) return redis.call('SET', keys[1], args[1]) end)";

#[test]
fn load_list_call_and_delete_like_redis() {
    let (_dir, server) = server();
    let mut con = server.client();
    assert_eq!(load(&mut con, ECHO_LIB).unwrap(), "mylib");
    assert_eq!(
        error_of(load(&mut con, ECHO_LIB)),
        "ERR Library 'mylib' already exists"
    );
    assert_eq!(
        error_of(load(&mut con, "return 1")),
        "ERR Missing library metadata"
    );
    assert!(error_of(load(&mut con, "#!lua name=empty\nlocal x = 1"))
        .contains("No functions registered"));
    assert!(error_of(load(
        &mut con,
        "#!lua name=other\nredis.register_function('echo_args', function() return 1 end)"
    ))
    .contains("Function echo_args already exists"));
    assert!(error_of(load(&mut con, "#!lua name=bad\nthis is not lua")).contains("ERR"));

    let echoed: Vec<String> = fcall(&mut con, "echo_args", &["k"], &["a"]).unwrap();
    assert_eq!(echoed, ["k", "a"]);
    let _: () = fcall(&mut con, "set_it", &["k"], &["v"]).unwrap();
    let got: String = fcall(&mut con, "get_it", &["k"], &[]).unwrap();
    assert_eq!(got, "v");
    let got: String = redis::cmd("FCALL_RO")
        .arg("get_it")
        .arg(1)
        .arg("k")
        .query(&mut con)
        .unwrap();
    assert_eq!(got, "v");
    assert!(error_of(
        redis::cmd("FCALL_RO")
            .arg("set_it")
            .arg(1)
            .arg("k")
            .arg("x")
            .query::<Value>(&mut con)
    )
    .contains("write flag"));
    assert_eq!(
        error_of(fcall::<Value>(&mut con, "nope", &[], &[])),
        "ERR Function not found"
    );
    assert!(error_of(
        redis::cmd("FCALL")
            .arg("echo_args")
            .arg(5)
            .arg("k")
            .query::<Value>(&mut con)
    )
    .contains("greater than number of args"));

    // LIST: Redis's shape, plus the version.
    let listed: Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("WITHCODE")
        .query(&mut con)
        .unwrap();
    let text = format!("{listed:?}");
    for field in [
        "library_name",
        "mylib",
        "engine",
        "LUA",
        "functions",
        "get_it",
        "no-writes",
        "reads",
        "version",
        "library_code",
    ] {
        assert!(text.contains(field), "{field} missing from {text}");
    }
    let none: Vec<Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg("zz*")
        .query(&mut con)
        .unwrap();
    assert!(none.is_empty());

    let stats: Value = redis::cmd("FUNCTION").arg("STATS").query(&mut con).unwrap();
    let text = format!("{stats:?}");
    assert!(text.contains("libraries_count") && text.contains("functions_count"));

    let _: () = redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg("mylib")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        error_of(fcall::<Value>(&mut con, "echo_args", &["k"], &["a"])),
        "ERR Function not found"
    );
    assert_eq!(
        error_of(
            redis::cmd("FUNCTION")
                .arg("DELETE")
                .arg("mylib")
                .query::<()>(&mut con)
        ),
        "ERR Library not found"
    );
}

#[test]
fn lua_values_and_replies_convert_as_in_redis() {
    let (_dir, server) = server();
    let mut con = server.client();
    let code = "#!lua name=conv
redis.register_function('conv', function(keys, args)
  local what = args[1]
  if what == 'int' then return 7 end
  if what == 'float' then return 3.99 end
  if what == 'true' then return true end
  if what == 'false' then return false end
  if what == 'nil' then return nil end
  if what == 'status' then return redis.status_reply('FINE') end
  if what == 'error' then return redis.error_reply('MYERR custom') end
  if what == 'raise' then error('boom') end
  if what == 'array' then return {1, 'two', nil, 'lost'} end
  if what == 'missing' then return redis.call('GET', keys[1]) == false end
  if what == 'pcall' then
    local r = redis.pcall('NOSUCHCOMMAND')
    return r.err ~= nil
  end
  if what == 'call_error' then return redis.call('NOSUCHCOMMAND') end
  if what == 'set_reply' then return redis.call('SET', keys[1], 'v') end
  if what == 'log' then redis.log(redis.LOG_WARNING, 'hello from a function'); return 1 end
end)";
    load(&mut con, code).unwrap();
    let call = |con: &mut Connection, what: &str| -> RedisResult<Value> {
        fcall(con, "conv", &["k"], &[what])
    };
    assert_eq!(call(&mut con, "int").unwrap(), Value::Int(7));
    assert_eq!(call(&mut con, "float").unwrap(), Value::Int(3));
    assert_eq!(call(&mut con, "true").unwrap(), Value::Int(1));
    assert_eq!(call(&mut con, "false").unwrap(), Value::Nil);
    assert_eq!(call(&mut con, "nil").unwrap(), Value::Nil);
    assert_eq!(
        call(&mut con, "status").unwrap(),
        Value::Status("FINE".into())
    );
    assert_eq!(error_of(call(&mut con, "error")), "MYERR custom");
    assert!(error_of(call(&mut con, "raise")).contains("boom"));
    assert_eq!(
        call(&mut con, "array").unwrap(),
        Value::Bulk(vec![Value::Int(1), Value::Data(b"two".to_vec())])
    );
    assert_eq!(call(&mut con, "missing").unwrap(), Value::Int(1));
    assert_eq!(call(&mut con, "pcall").unwrap(), Value::Int(1));
    assert!(error_of(call(&mut con, "call_error")).contains("unknown command"));
    assert_eq!(call(&mut con, "set_reply").unwrap(), Value::Okay);
    assert_eq!(call(&mut con, "log").unwrap(), Value::Int(1));
}

#[test]
fn versions_roll_back_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let version_lib = |n: u32| {
        format!("#!lua name=ver\nredis.register_function('version', function() return {n} end)")
    };
    {
        let server = TestServer::rocks(dir.path(), |_| {});
        let mut con = server.client();
        for n in 1..=3 {
            load_replace(&mut con, &version_lib(n)).unwrap();
        }
        let v: i64 = fcall(&mut con, "version", &[], &[]).unwrap();
        assert_eq!(v, 3);
        let active: i64 = redis::cmd("FUNCTION")
            .arg("ROLLBACK")
            .arg("ver")
            .query(&mut con)
            .unwrap();
        assert_eq!(active, 2);
        let v: i64 = fcall(&mut con, "version", &[], &[]).unwrap();
        assert_eq!(v, 2);
        let versions: Value = redis::cmd("FUNCTION")
            .arg("VERSIONS")
            .arg("ver")
            .query(&mut con)
            .unwrap();
        let text = format!("{versions:?}");
        assert!(
            text.contains("ver@1") && text.contains("ver@2") && !text.contains("ver@3"),
            "{text}"
        );
        server.shutdown().unwrap();
    }
    let server = TestServer::rocks(dir.path(), |_| {});
    let mut con = server.client();
    let v: i64 = fcall(&mut con, "version", &[], &[]).unwrap();
    assert_eq!(v, 2, "the rolled-back version is active after a restart");
    // A new version after a rollback gets a number never used before.
    load_replace(&mut con, &version_lib(9)).unwrap();
    let listed: Value = redis::cmd("FUNCTION").arg("LIST").query(&mut con).unwrap();
    assert!(format!("{listed:?}").contains("int(4)"), "{listed:?}");
    let _: () = redis::cmd("FUNCTION")
        .arg("ROLLBACK")
        .arg("ver")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("FUNCTION")
        .arg("ROLLBACK")
        .arg("ver")
        .query(&mut con)
        .unwrap();
    assert!(error_of(
        redis::cmd("FUNCTION")
            .arg("ROLLBACK")
            .arg("ver")
            .query::<Value>(&mut con)
    )
    .contains("no earlier version"));
}

#[test]
fn dump_restore_and_flush() {
    let (_dir, server) = server();
    let mut con = server.client();
    load(&mut con, ECHO_LIB).unwrap();
    let payload: Vec<u8> = redis::cmd("FUNCTION").arg("DUMP").query(&mut con).unwrap();
    let _: () = redis::cmd("FUNCTION").arg("FLUSH").query(&mut con).unwrap();
    assert_eq!(
        error_of(fcall::<Value>(&mut con, "echo_args", &["k"], &["a"])),
        "ERR Function not found"
    );
    let mut damaged = payload.clone();
    let last = damaged.len() - 2;
    damaged[last] ^= 1;
    assert_eq!(
        error_of(
            redis::cmd("FUNCTION")
                .arg("RESTORE")
                .arg(damaged)
                .query::<()>(&mut con)
        ),
        "ERR payload version or checksum are wrong"
    );
    let _: () = redis::cmd("FUNCTION")
        .arg("RESTORE")
        .arg(&payload)
        .query(&mut con)
        .unwrap();
    let echoed: Vec<String> = fcall(&mut con, "echo_args", &["k"], &["a"]).unwrap();
    assert_eq!(echoed, ["k", "a"]);
    assert!(error_of(
        redis::cmd("FUNCTION")
            .arg("RESTORE")
            .arg(&payload)
            .query::<()>(&mut con)
    )
    .contains("already exists"));
    let _: () = redis::cmd("FUNCTION")
        .arg("RESTORE")
        .arg(&payload)
        .arg("REPLACE")
        .query(&mut con)
        .unwrap();
}

#[test]
fn eval_evalsha_and_the_script_cache() {
    let (_dir, server) = server();
    let mut con = server.client();
    let script = "return {KEYS[1], ARGV[1], redis.call('SET', KEYS[1], ARGV[1])}";
    let reply: Value = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("k")
        .arg("v")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        reply,
        Value::Bulk(vec![
            Value::Data(b"k".to_vec()),
            Value::Data(b"v".to_vec()),
            Value::Okay
        ])
    );
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return redis.call('GET', KEYS[1])")
        .query(&mut con)
        .unwrap();
    assert_eq!(sha.len(), 40);
    let got: String = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(1)
        .arg("k")
        .query(&mut con)
        .unwrap();
    assert_eq!(got, "v");
    let exists: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha)
        .arg("0000000000000000000000000000000000000000")
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, [1, 0]);
    // What clients' script helpers do: EVALSHA, then EVAL on NOSCRIPT, then EVALSHA works.
    let shout = "return ARGV[1] .. '!'";
    let eval_sha = |con: &mut Connection, sha: &str| -> RedisResult<String> {
        redis::cmd("EVALSHA").arg(sha).arg(0).arg("hi").query(con)
    };
    let sha: String = {
        let reply: Value = redis::cmd("EVAL")
            .arg(shout)
            .arg(0)
            .arg("hi")
            .query(&mut con)
            .unwrap();
        assert_eq!(reply, Value::Data(b"hi!".to_vec()));
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(shout)
            .query(&mut con)
            .unwrap()
    };
    assert_eq!(eval_sha(&mut con, &sha).unwrap(), "hi!");
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
    assert!(error_of(
        redis::cmd("EVALSHA")
            .arg(&sha)
            .arg(0)
            .query::<Value>(&mut con)
    )
    .starts_with("NOSCRIPT"));
    assert!(error_of(
        redis::cmd("EVAL_RO")
            .arg("return redis.call('SET', KEYS[1], 'x')")
            .arg(1)
            .arg("k")
            .query::<Value>(&mut con)
    )
    .contains("Write commands are not allowed from read-only scripts"));
    assert!(error_of(
        redis::cmd("EVAL")
            .arg("#!lua flags=no-writes\nreturn redis.call('SET', KEYS[1], 'x')")
            .arg(1)
            .arg("k")
            .query::<Value>(&mut con)
    )
    .contains("Write commands are not allowed"));
    assert!(error_of(
        redis::cmd("EVAL")
            .arg("x = 1")
            .arg(0)
            .query::<Value>(&mut con)
    )
    .contains("readonly table"));
}

#[test]
fn writes_a_function_makes_are_durable_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let server = TestServer::rocks(dir.path(), |_| {});
        let mut con = server.client();
        load(&mut con, ECHO_LIB).unwrap();
        let _: () = fcall(&mut con, "set_it", &["durable"], &["yes"]).unwrap();
        assert!(
            !store::Storage::has_undurable_writes(server.db.store()),
            "the FCALL reply left before its write was committed"
        );
        server.shutdown().unwrap();
    }
    let server = TestServer::rocks(dir.path(), |_| {});
    let mut con = server.client();
    let got: String = redis::cmd("GET").arg("durable").query(&mut con).unwrap();
    assert_eq!(got, "yes");
}

/// Each hostile function gets an error reply, in bounded time, and the server still serves.
#[test]
fn hostile_functions_are_stopped_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |config| {
        config.function_limits.instructions = 20_000_000;
        config.function_limits.memory_bytes = 16 << 20;
        config.function_limits.time_limit = Duration::from_secs(2);
        config.client_output_limit = 1 << 20;
    });
    let mut con = server.client();
    let code = "#!lua name=hostile
redis.register_function('loop', function() while true do end end)
redis.register_function('pcall_loop', function() while true do pcall(function() while true do end end) end end)
redis.register_function('memory', function() local t = {} for i = 1, 1e9 do t[i] = i end end)
redis.register_function('bomb', function() local s = 'x' while true do s = s .. s end end)
redis.register_function('rep', function() return string.rep('x', 1e12) end)
redis.register_function('huge', function() local t = {} for i = 1, 200000 do t[i] = 'xxxxxxxxxx' end return t end)
redis.register_function('deep', function() local t = {} t[1] = t return t end)
redis.register_function('undeclared', function(keys) return redis.call('SET', 'not-declared', 1) end)
redis.register_function('undeclared_read', function(keys) return redis.call('MGET', keys[1], 'other') end)
redis.register_function('nested', function() return redis.call('FCALL', 'loop', 0) end)
redis.register_function('manage', function() return redis.call('FUNCTION', 'FLUSH') end)
redis.register_function('script', function() return redis.call('EVAL', 'return 1', 0) end)
redis.register_function('badarg', function() return redis.call('GET', {}) end)
redis.register_function('caught', function(keys)
  local ok, e = pcall(function() return redis.call('NOSUCHCOMMAND') end)
  local r = redis.pcall('SET', 'not-declared', 1)
  return {ok and 1 or 0, type(e) == 'table' and e.err or tostring(e), r.err}
end)
redis.register_function('global', function() leaked = 1 end)
redis.register_function('os', function() return os.time() end)";
    load(&mut con, code).unwrap();
    for (name, expected) in [
        ("loop", "instruction budget"),
        ("pcall_loop", "instruction budget"),
        ("memory", "memory"),
        ("bomb", ""),
        ("rep", ""),
        ("huge", "reply size limit"),
        ("deep", "nested deeper"),
        ("undeclared", "not declared in KEYS"),
        ("undeclared_read", "not declared in KEYS"),
        ("nested", "not allowed from script"),
        ("manage", "not allowed from script"),
        ("script", "not allowed from script"),
        ("badarg", "must be strings or integers"),
        ("global", "readonly table"),
        ("os", "os"),
    ] {
        let started = Instant::now();
        let error = error_of(fcall::<Value>(&mut con, name, &["k"], &[]));
        assert!(
            error.contains(expected),
            "{name}: expected '{expected}' in {error}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{name} took {:?}",
            started.elapsed()
        );
        let pong: String = redis::cmd("PING").query(&mut con).unwrap();
        assert_eq!(pong, "PONG", "after {name}");
    }
    let caught: Vec<Value> = fcall(&mut con, "caught", &["k"], &[]).unwrap();
    assert_eq!(caught[0], Value::Int(0));
    assert!(format!("{:?}", caught[1]).contains("unknown command"));
    assert!(format!("{:?}", caught[2]).contains("not declared in KEYS"));
    let exists: i64 = redis::cmd("EXISTS")
        .arg("not-declared")
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, 0, "an undeclared key was written");
}

/// A function's read-modify-write is atomic against plain commands of other clients: a slow
/// increment in Lua (GET, work, SET) and INCR on the same key from many connections at once
/// lose no update.
#[test]
fn a_function_read_modify_write_never_interleaves_with_plain_writes() {
    let (_dir, server) = server();
    let mut con = server.client();
    load(
        &mut con,
        "#!lua name=counter
redis.register_function('slow_incr', function(keys)
  local n = tonumber(redis.call('GET', keys[1]) or '0')
  local spin = 0
  for i = 1, 20000 do spin = spin + i end
  return redis.call('SET', keys[1], tostring(n + 1))
end)",
    )
    .unwrap();
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 150;
    let url = server.url();
    let workers: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                for _ in 0..ROUNDS {
                    if i % 2 == 0 {
                        let _: String = fcall(&mut con, "slow_incr", &["n"], &[]).unwrap();
                    } else {
                        let _: i64 = redis::cmd("INCR").arg("n").query(&mut con).unwrap();
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let n: i64 = redis::cmd("GET").arg("n").query(&mut con).unwrap();
    assert_eq!(n, (CLIENTS * ROUNDS) as i64, "an update was lost");
}

/// A function stopped by its limits leaves none of its writes; one that fails on its own
/// keeps those made before the error (as in Redis).
#[test]
fn a_stopped_function_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |config| {
        config.function_limits.instructions = 5_000_000;
    });
    let mut con = server.client();
    load(
        &mut con,
        "#!lua name=halfway
redis.register_function('set_then_loop', function(keys)
  redis.call('SET', keys[1], 'half')
  while true do end
end)
redis.register_function('set_then_fail', function(keys)
  redis.call('SET', keys[1], 'kept')
  error('failed on purpose')
end)",
    )
    .unwrap();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("before")
        .query(&mut con)
        .unwrap();
    let error = error_of(fcall::<Value>(&mut con, "set_then_loop", &["k"], &[]));
    assert!(error.contains("instruction budget"), "{error}");
    let value: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(value, "before", "a stopped function's write was applied");
    let error = error_of(fcall::<Value>(&mut con, "set_then_fail", &["k"], &[]));
    assert!(error.contains("failed on purpose"), "{error}");
    let value: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(value, "kept");
}

/// FCALL and EVAL queued in MULTI run inside EXEC's transaction (its keys are locked with
/// the rest) instead of waiting for locks EXEC holds; FLUSHALL there is refused, not hung.
#[test]
fn functions_inside_exec_run_in_its_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |config| config.enable_flush = true);
    let mut con = server.client();
    load(
        &mut con,
        "#!lua name=inc\nredis.register_function('inc', function(keys) return redis.call('INCR', keys[1]) end)",
    )
    .unwrap();
    let (a, b, c, d): (i64, i64, i64, String) = redis::pipe()
        .atomic()
        .incr("n", 1)
        .cmd("FCALL")
        .arg("inc")
        .arg(1)
        .arg("n")
        .cmd("EVAL")
        .arg("return redis.call('INCR', KEYS[1])")
        .arg(1)
        .arg("n")
        .cmd("TYPE")
        .arg("n")
        .query(&mut con)
        .unwrap();
    assert_eq!((a, b, c, d.as_str()), (1, 2, 3, "string"));
    // The redis crate reports an error entry of EXEC's array as the pipeline's error.
    let error = error_of(
        redis::pipe()
            .atomic()
            .incr("n", 1)
            .cmd("FLUSHALL")
            .query::<Vec<Value>>(&mut con),
    );
    assert!(error.contains("cannot run inside MULTI"), "{error}");
    // The other commands of the transaction applied, as in Redis.
    let n: i64 = redis::cmd("GET").arg("n").query(&mut con).unwrap();
    assert_eq!(n, 4);
}

#[test]
fn function_kill_stops_a_running_function_and_others_keep_being_served() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |config| {
        config.function_limits.instructions = u64::MAX / 2;
        config.function_limits.time_limit = Duration::from_secs(600);
    });
    let mut con = server.client();
    load(
        &mut con,
        "#!lua name=spin\nredis.register_function('spin', function() while true do end end)",
    )
    .unwrap();
    let mut other = server.client();
    assert_eq!(
        error_of(redis::cmd("FUNCTION").arg("KILL").query::<()>(&mut other)),
        "NOTBUSY No scripts in execution right now."
    );
    let caller = std::thread::spawn({
        let mut con = server.client();
        move || error_of(fcall::<Value>(&mut con, "spin", &[], &[]))
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats: Value = redis::cmd("FUNCTION")
            .arg("STATS")
            .query(&mut other)
            .unwrap();
        if format!("{stats:?}").contains("duration_ms") {
            break;
        }
        assert!(Instant::now() < deadline, "the function never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Plain commands are served while it runs.
    let _: () = redis::cmd("SET")
        .arg("a")
        .arg("b")
        .query(&mut other)
        .unwrap();
    let _: () = redis::cmd("FUNCTION")
        .arg("KILL")
        .query(&mut other)
        .unwrap();
    let error = caller.join().unwrap();
    assert!(error.contains("killed"), "{error}");
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn the_shipped_rate_limiter_limits() {
    let (_dir, server) = server();
    let mut con = server.client();
    assert_eq!(
        load(&mut con, &shipped("ratelimit.lua")).unwrap(),
        "ratelimit"
    );
    // Capacity 3, one token per second, all at t = 1,000,000 ms.
    let take = |con: &mut Connection, now: u64| -> Vec<i64> {
        fcall(con, "rl_take", &["bucket"], &["3", "1", &now.to_string()]).unwrap()
    };
    for left in [2, 1, 0] {
        assert_eq!(take(&mut con, 1_000_000), [1, left, 0]);
    }
    assert_eq!(take(&mut con, 1_000_000), [0, 0, 1000]);
    // Half a second later: still nothing; a second later: one token.
    assert_eq!(take(&mut con, 1_000_500)[0], 0);
    assert_eq!(take(&mut con, 1_001_500), [1, 0, 0]);
    let tokens: i64 = redis::cmd("FCALL_RO")
        .arg("rl_peek")
        .arg(1)
        .arg("bucket")
        .arg("3")
        .arg("1")
        .arg("1003500")
        .query(&mut con)
        .unwrap();
    assert_eq!(tokens, 2);
    assert!(error_of(fcall::<Value>(
        &mut con,
        "rl_take",
        &["bucket"],
        &["x", "1", "0"]
    ))
    .contains("capacity must be"));
}

#[test]
fn the_shipped_write_once_object_keeps_the_zlog_contract() {
    let (_dir, server) = server();
    let mut con = server.client();
    assert_eq!(
        load(&mut con, &shipped("writeonce.lua")).unwrap(),
        "writeonce"
    );
    let (epoch, maxpos) = ("{log}:epoch", "{log}:maxpos");
    let pos = |n: u32| format!("{{log}}:pos:{n}");
    let write = |con: &mut Connection, e: &str, n: u32, data: &str| -> RedisResult<Value> {
        fcall(
            con,
            "wo_write",
            &[&pos(n), epoch, maxpos],
            &[e, &n.to_string(), data],
        )
    };
    let read = |con: &mut Connection, e: &str, n: u32| -> RedisResult<String> {
        redis::cmd("FCALL_RO")
            .arg("wo_read")
            .arg(2)
            .arg(pos(n))
            .arg(epoch)
            .arg(e)
            .query(con)
    };
    assert_eq!(write(&mut con, "0", 0, "a").unwrap(), Value::Okay);
    assert_eq!(
        error_of(write(&mut con, "0", 0, "b")),
        "EROFS position already written"
    );
    assert_eq!(read(&mut con, "0", 0).unwrap(), "a");
    assert_eq!(
        error_of(read(&mut con, "0", 1)),
        "ERANGE position not written"
    );
    let fill = |con: &mut Connection, e: &str, n: u32| -> RedisResult<Value> {
        fcall(
            con,
            "wo_fill",
            &[&pos(n), epoch, maxpos],
            &[e, &n.to_string()],
        )
    };
    assert_eq!(fill(&mut con, "0", 1).unwrap(), Value::Okay);
    assert_eq!(
        fill(&mut con, "0", 1).unwrap(),
        Value::Okay,
        "fill is idempotent"
    );
    assert_eq!(
        error_of(fill(&mut con, "0", 0)),
        "EROFS position holds data"
    );
    assert_eq!(
        error_of(read(&mut con, "0", 1)),
        "ENODATA position was filled"
    );
    // Seal at epoch 2: the highest position so far comes back; older epochs are refused.
    let sealed: i64 = fcall(&mut con, "wo_seal", &[epoch, maxpos], &["2"]).unwrap();
    assert_eq!(sealed, 1);
    assert!(error_of(fcall::<Value>(
        &mut con,
        "wo_seal",
        &[epoch, maxpos],
        &["2"]
    ))
    .starts_with("ESTALE"));
    assert!(error_of(write(&mut con, "1", 5, "late")).starts_with("ESTALE"));
    assert!(error_of(read(&mut con, "1", 0)).starts_with("ESTALE"));
    assert_eq!(write(&mut con, "2", 5, "c").unwrap(), Value::Okay);
    let current: i64 = redis::cmd("FCALL_RO")
        .arg("wo_epoch")
        .arg(1)
        .arg(epoch)
        .query(&mut con)
        .unwrap();
    assert_eq!(current, 2);
    let sealed: i64 = fcall(&mut con, "wo_seal", &[epoch, maxpos], &["3"]).unwrap();
    assert_eq!(sealed, 5);
}
