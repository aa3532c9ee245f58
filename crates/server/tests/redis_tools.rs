//! The distribution's own Redis tools against Mantle, unchanged: `redis-cli` and
//! `redis-benchmark`. Skipped with a message when they are not installed.

mod common;

use common::{redis_tool, TestServer};
use std::process::Command;

fn server() -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::rocks(dir.path(), |_| {});
    (dir, server)
}

fn cli(tool: &std::path::Path, server: &TestServer, args: &[&str]) -> String {
    let output = Command::new(tool)
        .arg("-p")
        .arg(server.addr.port().to_string())
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn redis_cli_works_unchanged() {
    let Some(tool) = redis_tool("redis-cli", "redis_cli_works_unchanged") else {
        return;
    };
    let (_dir, server) = server();
    assert_eq!(cli(&tool, &server, &["PING"]), "PONG\n");
    assert_eq!(
        cli(&tool, &server, &["SET", "greeting", "hello world"]),
        "OK\n"
    );
    assert_eq!(cli(&tool, &server, &["GET", "greeting"]), "hello world\n");
    assert_eq!(cli(&tool, &server, &["DBSIZE"]), "1\n");
    assert!(cli(&tool, &server, &["INFO", "cache"]).contains("cache_objects:1"));
    // RESP3 mode of redis-cli.
    assert_eq!(
        cli(&tool, &server, &["-3", "GET", "greeting"]),
        "hello world\n"
    );
    // Unknown commands come back as errors, printed by redis-cli as such.
    assert!(cli(&tool, &server, &["FLUSHX"]).contains("ERR unknown command"));
    // Commands piped in, as an operator would.
    let mut child = Command::new(&tool)
        .arg("-p")
        .arg(server.addr.port().to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"SET a 1\nGET a\nEXISTS a greeting\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "OK\n1\n2\n");
}

/// Functions and scripts managed with redis-cli as docs/functions.md shows: the library read
/// from a file with `-x`, listed, versioned, called, deleted.
#[test]
fn redis_cli_loads_lists_calls_and_deletes_functions() {
    let Some(tool) = redis_tool(
        "redis-cli",
        "redis_cli_loads_lists_calls_and_deletes_functions",
    ) else {
        return;
    };
    let (_dir, server) = server();
    let library = format!(
        "{}/../../functions/ratelimit.lua",
        env!("CARGO_MANIFEST_DIR")
    );
    let load = |replace: bool| {
        let mut command = Command::new(&tool);
        command
            .arg("-p")
            .arg(server.addr.port().to_string())
            .args(["-x", "FUNCTION", "LOAD"]);
        if replace {
            command.arg("REPLACE");
        }
        let output = command
            .stdin(std::fs::File::open(&library).unwrap())
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    assert_eq!(load(false), "ratelimit\n");
    assert!(load(false).contains("already exists"));
    assert_eq!(load(true), "ratelimit\n");
    let listed = cli(
        &tool,
        &server,
        &["FUNCTION", "LIST", "LIBRARYNAME", "rate*"],
    );
    assert!(
        listed.contains("rl_take") && listed.contains("rl_peek"),
        "{listed}"
    );
    let versions = cli(&tool, &server, &["FUNCTION", "VERSIONS", "ratelimit"]);
    assert!(versions.contains("ratelimit@2"), "{versions}");
    assert_eq!(
        cli(
            &tool,
            &server,
            &[
                "FCALL",
                "rl_take",
                "1",
                "api:alice",
                "10",
                "5",
                "1700000000000"
            ]
        ),
        "1\n9\n0\n"
    );
    assert_eq!(
        cli(&tool, &server, &["FUNCTION", "ROLLBACK", "ratelimit"]),
        "1\n"
    );
    assert_eq!(
        cli(
            &tool,
            &server,
            &[
                "EVAL",
                "return redis.call('SET', KEYS[1], ARGV[1])",
                "1",
                "k",
                "v"
            ]
        ),
        "OK\n"
    );
    assert_eq!(
        cli(&tool, &server, &["FUNCTION", "DELETE", "ratelimit"]),
        "OK\n"
    );
    assert!(cli(
        &tool,
        &server,
        &["FCALL", "rl_take", "1", "a", "1", "1", "1"]
    )
    .contains("Function not found"));
}

#[test]
fn redis_benchmark_runs_get_and_set() {
    let Some(tool) = redis_tool("redis-benchmark", "redis_benchmark_runs_get_and_set") else {
        return;
    };
    let (_dir, server) = server();
    for pipeline in ["1", "16"] {
        let output = Command::new(&tool)
            .args(["-p", &server.addr.port().to_string()])
            .args([
                "-t", "set,get", "-n", "2000", "-c", "10", "-r", "1000", "-q", "-P", pipeline,
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{output:?}");
        assert!(text.contains("SET:") && text.contains("GET:"), "{text}");
    }
    let mut c = server.client();
    let size: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert!(
        size > 0 && size <= 1000,
        "keys written by redis-benchmark: {size}"
    );
}
