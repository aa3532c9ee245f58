//! `mantle replay` and `mantle compare` on hostile input and flags, run as a user would:
//! clocks that cannot be ticked, traces without timestamps, ambiguous sizes, bad flags on
//! every subcommand, and the progress bar next to `--json`.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `mantle` with a safety bound: a run that has not ended after a minute is killed and
/// the test fails (instead of hanging the suite).
fn mantle(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mantle"))
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mantle runs");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().ok();
            child.wait().ok();
            panic!("mantle {args:?} did not finish within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// One line on stderr starting with `mantle:`, the given exit status, no panic.
fn assert_one_line(out: &Output, code: i32, needles: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.starts_with("mantle: "), "{err}");
    for needle in needles {
        assert!(err.contains(needle), "expected '{needle}' in: {err}");
    }
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "mantle failed: {}", stderr(out));
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
}

struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new() -> Scratch {
        Scratch(tempfile::tempdir().expect("temp dir"))
    }
    fn file(&self, name: &str, text: &str) -> String {
        let path = self.0.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    }
}

/// A trace without timestamps: `n` keys over 613 distinct ones, one per line.
fn timeless_trace(s: &Scratch, n: u64) -> String {
    let keys: String = (1..=n).map(|i| format!("{}\n", (i * 7) % 613)).collect();
    s.file("keys.txt", &keys)
}

#[test]
fn timestamps_the_clock_cannot_tick_end_in_one_line_not_a_loop() {
    let s = Scratch::new();
    // Issue 11 item 10 as reported, and the same class: a time beyond exact seconds, a
    // negative time, a tick finer than the clock resolves.
    for (name, body, extra, needle) in [
        (
            "far.csv",
            "0,GET,1\n100000000000000000000,GET,2\n",
            &[][..],
            "far.csv:2: expected a time in seconds from 0 to 2^53",
        ),
        (
            "neg.csv",
            "0,GET,1\n-5,GET,2\n",
            &[],
            "neg.csv:2: expected a time in seconds from 0 to 2^53",
        ),
        (
            "fine.csv",
            "1000000000,GET,1\n1000000001,GET,2\n",
            &["--tick", "1ns"][..],
            "fine.csv: request 1 (time 1000000000 s): a 0.000000001 s tick is finer than",
        ),
    ] {
        let path = s.file(name, body);
        let mut args = vec![
            "replay",
            "--trace",
            &path,
            "--format",
            "parsplice",
            "--cache-size",
            "10",
            "--policy",
            "policies/decay.lua",
        ];
        args.extend_from_slice(extra);
        assert_one_line(&mantle(&args), 1, &[needle]);
        let mut args = vec![
            "compare",
            "--trace",
            &path,
            "--format",
            "parsplice",
            "--policy",
            "policies/decay.lua",
        ];
        args.extend_from_slice(extra);
        let out = mantle(&args);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{}", stderr(&out));
    }
}

#[test]
fn a_trace_without_timestamps_ticks_on_requests() {
    let s = Scratch::new();
    let trace = timeless_trace(&s, 5000);
    let policy = ["--policy", "policies/decay.lua"];
    let out = mantle(
        &[
            &["replay", "--trace", &trace, "--cache-size", "100", "--json"][..],
            &policy,
        ]
        .concat(),
    );
    let v = json_of(&out);
    assert_eq!(v["policy"]["ticks"], 5, "5000 requests, a tick every 1000");
    let err = stderr(&out);
    assert!(
        err.contains("has no timestamps; ticking every 1000 requests (choose with --tick Nops)"),
        "{err}"
    );
    // An explicit request-count tick is taken as given, silently.
    let out = mantle(
        &[
            &[
                "replay",
                "--trace",
                &trace,
                "--cache-size",
                "100",
                "--json",
                "--tick",
                "500ops",
            ][..],
            &policy,
        ]
        .concat(),
    );
    assert_eq!(json_of(&out)["policy"]["ticks"], 10);
    assert_eq!(stderr(&out), "");
    // A time tick the trace cannot honour is refused, naming the fix.
    let out = mantle(
        &[
            &[
                "replay",
                "--trace",
                &trace,
                "--cache-size",
                "100",
                "--tick",
                "1s",
            ][..],
            &policy,
        ]
        .concat(),
    );
    assert_one_line(
        &out,
        1,
        &["--tick 1s", "has no timestamps", "--tick 1000ops"],
    );

    // compare, with a report: the policy runs there too.
    let report = s.0.path().join("cmp.html");
    let out = mantle(&[
        "compare",
        "--trace",
        &trace,
        "--fixed",
        "100",
        "--policy",
        "policies/decay.lua",
        "--json",
        "--report",
        report.to_str().unwrap(),
    ]);
    let v = json_of(&out);
    let decay = &v["runs"][2]["result"];
    assert_eq!(decay["policy"]["ticks"], 5, "{v}");
    assert!(stderr(&out).contains("ticking every 1000 requests"));
    assert!(std::fs::read_to_string(report)
        .unwrap()
        .contains("decay.lua"));
    let out = mantle(&[
        "compare",
        "--trace",
        &trace,
        "--policy",
        "policies/decay.lua",
        "--tick",
        "2s",
    ]);
    assert_one_line(&out, 1, &["--tick 2s", "--tick 1000ops"]);
}

#[test]
fn a_policy_that_never_runs_says_so() {
    let s = Scratch::new();
    let trace = s.file("short.csv", "timestamp_s,op,key\n0,GET,1\n0.5,GET,2\n");
    let out = mantle(&[
        "replay",
        "--trace",
        &trace,
        "--cache-size",
        "10",
        "--policy",
        "policies/decay.lua",
        "--json",
    ]);
    assert_eq!(json_of(&out)["policy"]["ticks"], 0);
    assert!(
        stderr(&out).contains(
            "warning: policy decay never ran: the trace spans 0.5 s, less than one --tick 1s"
        ),
        "{}",
        stderr(&out)
    );
    let out = mantle(&[
        "replay",
        "--trace",
        &trace,
        "--cache-size",
        "10",
        "--policy",
        "policies/decay.lua",
        "--quiet",
    ]);
    assert!(out.status.success());
    assert_eq!(stderr(&out), "", "--quiet silences the warning");
}

#[test]
fn sizes_are_never_ambiguous_or_silently_rounded() {
    let s = Scratch::new();
    let trace = timeless_trace(&s, 10);
    for (flag, value, needle) in [
        ("--cache-size", "1e3", "exponents are not accepted"),
        ("--cache-size", "0.5", "a number of objects must be whole"),
        ("--cache-size", "10x", "unknown unit 'x'"),
        ("--cache-size", "0.5B", "not a whole number of bytes"),
        ("--policy-memory", "1e6", "exponents are not accepted"),
        ("--policy-memory", "0.5", "a number of bytes must be whole"),
    ] {
        let mut args = vec!["replay", "--trace", &trace, flag, value];
        if flag != "--cache-size" {
            args.extend(["--cache-size", "10"]);
        }
        let out = mantle(&args);
        assert_one_line(&out, 2, &[flag, &format!("'{value}'"), needle]);
    }
    let out = mantle(&[
        "replay",
        "--trace",
        &trace,
        "--cache-size",
        "10",
        "--restart-at",
        "5",
        "--region",
        "1e3",
    ]);
    assert_one_line(&out, 1, &["--region", "exponents are not accepted"]);
    // The documented forms still work.
    for value in ["1000", "292272B", "64MiB", "1GB", "1.5KiB", "10%"] {
        let out = mantle(&["replay", "--trace", &trace, "--cache-size", value, "--json"]);
        json_of(&out);
    }
}

#[test]
fn a_param_without_a_policy_is_refused() {
    let s = Scratch::new();
    let trace = timeless_trace(&s, 10);
    let out = mantle(&[
        "replay",
        "--trace",
        &trace,
        "--cache-size",
        "10",
        "--param",
        "n=5",
    ]);
    assert_one_line(&out, 2, &["--policy"]);
    // The same class: every flag that only means something with another is refused alone.
    for (flag, value, needs) in [
        ("--policy-instructions", "1000", "--policy"),
        ("--policy-memory", "1MiB", "--policy"),
        ("--timeseries", "10", "--policy"),
        ("--region", "keys", "--restart-at"),
        ("--warmup-window", "100", "--restart-at"),
        ("--monitor-limit", "100", "--restart-at"),
        ("--warmup-seed", "3", "--warmup"),
    ] {
        let out = mantle(&[
            "replay",
            "--trace",
            &trace,
            "--cache-size",
            "10",
            flag,
            value,
        ]);
        assert_one_line(&out, 2, &[needs]);
    }
    // Their defaults alone do not count as given.
    let out = mantle(&["replay", "--trace", &trace, "--cache-size", "10", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn bad_flags_end_in_one_line_on_every_subcommand() {
    for args in [
        &["replay", "--bogus"][..],
        &["replay", "--trace", "t", "--cache-size", "10x"],
        &[
            "replay",
            "--trace",
            "t",
            "--server",
            "127.0.0.1:1",
            "--eviction",
            "fifo",
        ],
        &["replay", "--trace", "t"],
        &["replay", "--trace", "t", "--cahce-size", "1"],
        &["compare", "--bogus"],
        &["analyze", "--trace", "t", "--window", "soon"],
        &["gen", "parsplice", "--bogus"],
        &["serve", "--bogus"],
        &["policy", "--bogus"],
        &["frobnicate"],
    ] {
        let out = mantle(args);
        assert_one_line(&out, 2, &["(see 'mantle "]);
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    let out = mantle(&["replay", "--cahce-size", "1"]);
    assert!(stderr(&out).contains("a similar argument exists: '--cache-size'"));
    // Help and version still print as usual, on stdout, with status 0.
    for args in [&["--help"][..], &["replay", "--help"], &["--version"]] {
        let out = mantle(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stdout.is_empty());
    }
}

#[test]
fn progress_shows_the_share_done_and_keeps_json_clean() {
    let s = Scratch::new();
    let trace = timeless_trace(&s, 200_000);
    let out = mantle(&[
        "replay",
        "--trace",
        &trace,
        "--cache-size",
        "100",
        "--json",
        "--progress",
    ]);
    let v = json_of(&out);
    assert_eq!(v["requests"], 200_000);
    let err = stderr(&out);
    assert!(err.contains("replay keys.txt"), "{err}");
    assert!(err.contains("100%"), "{err}");
    assert!(err.contains("200000 requests"), "{err}");
    assert!(err.contains("eta"), "{err}");
    // Not a terminal and not asked for: nothing on stderr. --quiet: nothing either.
    for extra in [&[][..], &["--quiet"]] {
        let out = mantle(
            &[
                &["replay", "--trace", &trace, "--cache-size", "100", "--json"][..],
                extra,
            ]
            .concat(),
        );
        json_of(&out);
        assert_eq!(stderr(&out), "", "{extra:?}");
    }
}

/// `mantle replay ... | head -1`: when the reader goes away the run ends as Unix filters do
/// (killed by SIGPIPE, nothing on stderr), never with a panic about printing to stdout.
#[test]
#[cfg(unix)]
fn a_reader_that_goes_away_ends_the_run_quietly() {
    use std::os::unix::process::ExitStatusExt;
    const SIGPIPE: i32 = 13; // the same number on every Linux and BSD
    let s = Scratch::new();
    let trace = timeless_trace(&s, 2000);
    for args in [
        &["replay", "--trace", &trace, "--cache-size", "100"][..],
        &["replay", "--trace", &trace, "--cache-size", "100", "--json"][..],
        &["analyze", "--trace", &trace][..],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mantle"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mantle runs");
        // Closing the read end before the child prints makes its first write fail.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("output");
        assert!(
            !stderr(&out).contains("panicked"),
            "{args:?} panicked: {}",
            stderr(&out)
        );
        assert_eq!(
            out.status.signal(),
            Some(SIGPIPE),
            "{args:?}: {:?} {}",
            out.status,
            stderr(&out)
        );
    }
}

#[test]
fn tiny_traces_that_state_endless_work_end_in_one_line() {
    let s = Scratch::new();
    let arc = s.file("bomb.lis", "0 18446744073709551615 0 1\n");
    let cachelib = s.file(
        "bomb.csv",
        "op_time,key,key_size,op,op_count,size\n1,7,1,GET,18446744073709551615,10\n",
    );
    for (trace, at) in [
        (&arc, format!("{arc}:1: a block range")),
        (&cachelib, format!("{cachelib}:2: op_count")),
    ] {
        for sub in [&["replay", "--cache-size", "100"][..], &["analyze"]] {
            let mut args = sub.to_vec();
            args.extend(["--trace", trace]);
            let out = mantle(&args);
            assert_one_line(&out, 1, &[&at, "limit of 1048576", "--max-record-requests"]);
        }
    }
    // The flag moves the limit both ways.
    let ranges = s.file("ranges.lis", "0 3 0 1\n100 4 0 2\n");
    let out = mantle(&[
        "replay",
        "--trace",
        &ranges,
        "--cache-size",
        "10",
        "--max-record-requests",
        "3",
    ]);
    assert_one_line(&out, 1, &[&format!("{ranges}:2:"), "limit of 3"]);
    let out = mantle(&[
        "replay",
        "--trace",
        &ranges,
        "--cache-size",
        "10",
        "--max-record-requests",
        "4",
        "--json",
    ]);
    assert_eq!(json_of(&out)["requests"], 7);
}
