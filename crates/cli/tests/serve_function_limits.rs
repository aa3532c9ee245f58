//! `mantle serve`'s limits for functions and policies: `--function-instructions`,
//! `--function-memory`, `--function-time-limit` (defaulting to the `--policy-*` ones). A
//! lowered budget stops a function the default lets finish, with an error reply, and the
//! server keeps serving; a value out of range is refused naming its flag.

mod common;

use common::{mantle, Serve};
use redis::Connection;

/// About 6M Lua instructions: well inside the default budget of 200M.
const LIBRARY: &str = "#!lua name=work
redis.register_function('count', function()
  local n = 0
  for i = 1, 2000000 do n = n + 1 end
  return n
end)
redis.register_function('grow', function()
  local t = {}
  for i = 1, 200000 do t[i] = tostring(i) end
  return #t
end)";

fn call(con: &mut Connection, name: &str) -> Result<i64, String> {
    redis::cmd("FCALL")
        .arg(name)
        .arg(0)
        .query(con)
        .map_err(|e| e.to_string())
}

fn loaded(serve: &Serve) -> Connection {
    let mut con = serve.client();
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(LIBRARY)
        .query(&mut con)
        .unwrap();
    con
}

#[test]
fn lowered_function_limits_stop_what_the_defaults_allow() {
    let defaults = Serve::start::<&str>(&[]);
    let mut con = loaded(&defaults);
    assert_eq!(call(&mut con, "count"), Ok(2_000_000));
    assert_eq!(call(&mut con, "grow"), Ok(200_000));

    let tight = Serve::start(&["--function-instructions", "1000000"]);
    let mut con = loaded(&tight);
    let error = call(&mut con, "count").unwrap_err();
    assert!(error.contains("instruction budget"), "{error}");
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");

    let slow = Serve::start(&["--function-time-limit", "1ms"]);
    let mut con = loaded(&slow);
    let error = call(&mut con, "count").unwrap_err();
    assert!(error.contains("time limit"), "{error}");

    let small = Serve::start(&["--function-memory", "4MiB"]);
    let mut con = loaded(&small);
    let error = call(&mut con, "grow").unwrap_err();
    assert!(error.contains("memory"), "{error}");
    assert_eq!(call(&mut con, "count"), Ok(2_000_000), "still serving");

    // The policy's limits are the functions' defaults.
    let inherited = Serve::start(&["--policy-instructions", "1000000"]);
    let mut con = loaded(&inherited);
    let error = call(&mut con, "count").unwrap_err();
    assert!(error.contains("instruction budget"), "{error}");
}

#[test]
fn an_out_of_range_limit_is_refused_naming_its_flag() {
    for flag in ["--function-instructions", "--policy-instructions"] {
        let out = mantle(&["serve", "--data-dir", "/nonexistent", flag, "0"]);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(flag), "{stderr}");
    }
    let out = mantle(&[
        "serve",
        "--data-dir",
        "/nonexistent",
        "--function-time-limit",
        "0s",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--function-time-limit"), "{stderr}");
}
