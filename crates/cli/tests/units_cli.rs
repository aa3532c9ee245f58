//! `replay` and `serve` read sizes and durations with one grammar (crates/units): the same
//! inputs are accepted, and the same are refused with a message that names the flag.
//!
//! Each run stops right after parsing (neither a trace nor a data directory is given), so
//! a value clap accepted shows as a complaint about the missing argument, and a refused one
//! as clap's "invalid value ... for '--flag'" with the grammar's reason.

mod common;

use common::mantle;

/// The reason a value was refused, or `None` when the flag took it.
fn refusal(args: &[&str], flag: &str) -> Option<String> {
    let out = mantle(args);
    assert!(!out.status.success(), "{args:?} ran with nothing to run on");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !stderr.contains("invalid value") {
        return None;
    }
    assert!(
        stderr.contains(&format!("for '{flag}")),
        "{args:?}: {stderr}"
    );
    let reason = stderr.lines().find(|l| l.contains("invalid value"))?;
    // `mantle: invalid value 'X' for '--flag <NAME>': REASON (see 'mantle CMD --help')`
    let reason = reason.split_once(">': ").map_or(reason, |(_, r)| r);
    Some(
        reason
            .split(" (see 'mantle")
            .next()
            .unwrap_or(reason)
            .to_string(),
    )
}

#[test]
fn replay_and_serve_take_the_same_sizes() {
    for (input, accepted) in [
        ("4096", true),
        ("64MiB", true),
        ("1.5GiB", true),
        ("0.5GB", true),
        ("2 kb", true),
        ("1TB", true),
        ("0.5", false),
        ("0.5B", false),
        ("1e6", false),
        ("5k", false),
        ("-1", false),
        ("12 parsecs", false),
        ("1.0000001KB", false),
    ] {
        // `--flag=VALUE`, so that `-1` reaches the parser instead of reading as a flag.
        let replay = refusal(
            &["replay", &format!("--policy-memory={input}")],
            "--policy-memory",
        );
        let serve = refusal(&["serve", &format!("--maxmemory={input}")], "--maxmemory");
        assert_eq!(replay.is_none(), accepted, "replay {input}: {replay:?}");
        assert_eq!(replay, serve, "{input}");
    }
}

#[test]
fn replay_and_serve_take_the_same_durations() {
    // Within the server's bounds (1ms to 24h); a bare number is a tick's only special case
    // (requests or seconds? replay asks for a unit), so it is not compared here.
    for (input, accepted) in [
        ("100ms", true),
        ("2s", true),
        ("1.5s", true),
        ("1m", true),
        ("1min", true),
        ("24h", true),
        ("0s", false),
        ("-1s", false),
        ("1e3ms", false),
        ("1h 30m", false),
        ("soon", false),
    ] {
        let replay = refusal(&["replay", &format!("--tick={input}")], "--tick").map(|r| {
            r.trim_start_matches("invalid tick: ")
                .split(" (expected")
                .next()
                .unwrap_or_default()
                .to_string()
        });
        let serve = refusal(&["serve", &format!("--tick={input}")], "--tick");
        assert_eq!(replay.is_none(), accepted, "replay {input}: {replay:?}");
        assert_eq!(replay, serve, "{input}");
    }
}
