//! Sweeps that mean something, through the real binary: `analyze --mrc` for every algorithm
//! (each exact point is `replay`'s miss ratio at that size), `compare --setup` and `--fixed`
//! with any algorithm and size form, and `--max-cache-size` holding a policy down.

mod common;

use common::{json_of, mantle, parity_trace};
use serde_json::Value;

fn stderr_of(args: &[&str]) -> String {
    let out = mantle(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn replay_miss_ratio(trace: &str, size: &str, eviction: &str) -> f64 {
    let args = [
        "replay",
        "--trace",
        trace,
        "--cache-size",
        size,
        "--eviction",
        eviction,
        "--backend",
        "none",
        "--json",
        "--quiet",
    ];
    json_of(&mantle(&args))["miss_ratio"].as_f64().unwrap()
}

#[test]
fn analyze_mrc_of_every_algorithm_equals_replay_at_each_size() {
    let dir = tempfile::tempdir().unwrap();
    let trace = parity_trace(dir.path(), "t.csv");
    let report = dir.path().join("a.html");
    let out = mantle(&[
        "analyze",
        "--trace",
        &trace,
        "--mrc",
        "all",
        "--mrc-sizes",
        "10,50%,100",
        "--json",
        "--report",
        report.to_str().unwrap(),
    ]);
    let a = json_of(&out);
    let curves = a["curves"]["curves"].as_array().unwrap();
    assert!(curves.len() >= 5, "every algorithm: {curves:?}");
    for curve in curves {
        let alg = curve["algorithm"].as_str().unwrap();
        assert_eq!(curve["method"], "exact");
        let sizes: Vec<u64> = curve["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["cache_size"].as_u64().unwrap())
            .collect();
        assert_eq!(sizes.len(), 3, "10, 100 and half the working set");
        for p in curve["points"].as_array().unwrap() {
            let size = p["cache_size"].as_u64().unwrap().to_string();
            let want = replay_miss_ratio(&trace, &size, alg);
            assert_eq!(p["miss_ratio"].as_f64().unwrap(), want, "{alg} at {size}");
        }
    }
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("Miss-ratio curves") && html.contains("log scale"));
    // Sampled, in bytes, and the summary names each curve.
    let out = mantle(&[
        "analyze",
        "--trace",
        &trace,
        "--mrc",
        "lru,s3fifo",
        "--mrc-method",
        "sampled",
        "--mrc-sample-rate",
        "0.5",
        "--mrc-unit",
        "bytes",
        "--mrc-points",
        "4",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("MRC lru (miniature at rate 0.5"), "{text}");
    assert!(text.contains("MRC s3fifo (miniature at rate 0.5"), "{text}");
}

#[test]
fn analyze_mrc_errors_name_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let trace = parity_trace(dir.path(), "t.csv");
    let err = stderr_of(&["analyze", "--trace", &trace, "--mrc", "lru,nosuch"]);
    assert!(
        err.contains("for '--mrc") && err.contains("'nosuch'"),
        "{err}"
    );
    let err = stderr_of(&[
        "analyze",
        "--trace",
        &trace,
        "--mrc",
        "lru",
        "--mrc-sizes",
        "64MiB",
    ]);
    assert!(err.contains("--mrc-sizes: 67108864B is bytes"), "{err}");
    let err = stderr_of(&[
        "analyze",
        "--trace",
        &trace,
        "--mrc",
        "lru",
        "--mrc-method",
        "sampled",
        "--mrc-sample-rate",
        "0",
    ]);
    assert!(err.contains("--mrc-sample-rate: 0 is not a rate"), "{err}");
    let err = stderr_of(&["analyze", "--trace", &trace, "--mrc-points", "5"]);
    assert!(err.contains("--mrc"), "{err}");
}

fn run_of<'a>(compare: &'a Value, label: &str) -> &'a Value {
    compare["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["label"] == label)
        .unwrap_or_else(|| panic!("no run {label}: {compare}"))
}

#[test]
fn compare_setups_take_any_algorithm_size_and_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let trace = parity_trace(dir.path(), "t.csv");
    let c = json_of(&mantle(&[
        "compare",
        "--trace",
        &trace,
        "--no-baseline",
        "--fixed",
        "10%",
        "--setup",
        "s3fifo:10%",
        "--setup",
        "fifo:20",
        "--setup",
        "clock:5:max=8:policy=policies/dscache2.lua",
        "--backend",
        "none",
        "--json",
    ]));
    assert_eq!(c["runs"].as_array().unwrap().len(), 4);
    for (label, size, alg) in [
        ("lru 10%", "10%", "lru"),
        ("s3fifo 10%", "10%", "s3fifo"),
        ("fifo 20", "20", "fifo"),
    ] {
        let r = &run_of(&c, label)["result"];
        assert_eq!(
            r["miss_ratio"].as_f64().unwrap(),
            replay_miss_ratio(&trace, size, alg),
            "{label}"
        );
    }
    // dscache2 asks for far more than the ceilings: a setup's own, and --max-cache-size.
    let own = &run_of(&c, "clock 5 max 8 dscache2.lua")["result"];
    assert_eq!(own["peak_cache_objects"].as_u64().unwrap(), 8);
    assert!(own["capacity_clamps"].as_u64().unwrap() > 0);
    let c = json_of(&mantle(&[
        "compare",
        "--trace",
        &trace,
        "--setup",
        "sieve:5:policy=policies/dscache2.lua",
        "--max-cache-size",
        "30",
        "--json",
    ]));
    let capped = &run_of(&c, "sieve 5 dscache2.lua")["result"];
    assert_eq!(capped["peak_cache_objects"].as_u64().unwrap(), 30);
    assert!(capped["capacity_clamps"].as_u64().unwrap() > 0);
    // The baseline stays unlimited.
    let baseline = &run_of(&c, "no management")["result"];
    assert!(baseline["peak_cache_objects"].as_u64().unwrap() > 30);
    assert!(baseline["capacity_clamps"].is_null());
}

#[test]
fn compare_setup_errors_name_the_flag_and_the_bad_part() {
    let dir = tempfile::tempdir().unwrap();
    let trace = parity_trace(dir.path(), "t.csv");
    for (setup, part) in [
        ("nosuch:10%", "unknown eviction algorithm 'nosuch'"),
        ("lru:10x", "invalid cache size '10x'"),
        ("lru", "expected ALG:SIZE"),
        ("lru:10:max=big", "max=big: invalid cache size 'big'"),
        ("lru:10:polcy=x.lua", "unexpected 'polcy=x.lua'"),
    ] {
        let err = stderr_of(&["compare", "--trace", &trace, "--setup", setup]);
        assert!(
            err.contains(&format!("--setup {setup}: {part}")),
            "{setup}: {err}"
        );
    }
    let err = stderr_of(&["compare", "--trace", &trace, "--fixed", "1e3"]);
    assert!(err.contains("for '--fixed"), "{err}");
}

#[test]
fn replay_max_cache_size_holds_a_policy_down() {
    let dir = tempfile::tempdir().unwrap();
    let trace = parity_trace(dir.path(), "t.csv");
    let args = |max: Option<&str>| {
        let mut a = vec![
            "replay",
            "--trace",
            &trace,
            "--cache-size",
            "5",
            "--policy",
            "policies/dscache2.lua",
            "--json",
            "--quiet",
        ];
        if let Some(m) = max {
            a.extend(["--max-cache-size", m]);
        }
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let run = |max| {
        let a = args(max);
        json_of(&mantle(&a.iter().map(String::as_str).collect::<Vec<_>>()))
    };
    // Without a ceiling --cache-size is only where the policy starts.
    let free = run(None);
    assert!(free["peak_cache_objects"].as_u64().unwrap() > 30);
    assert!(free["capacity_clamps"].is_null());
    let capped = run(Some("30"));
    assert_eq!(capped["peak_cache_objects"].as_u64().unwrap(), 30);
    assert!(capped["capacity_clamps"].as_u64().unwrap() > 0);
    let err = stderr_of(&[
        "replay",
        "--trace",
        &trace,
        "--cache-size",
        "5",
        "--max-cache-size",
        "lots",
    ]);
    assert!(err.contains("for '--max-cache-size"), "{err}");
}

/// `compare --setup ALG:SIZE:policy=FILE` runs the hooks the file defines, as `replay
/// --policy` does: the same miss ratio, and another than the setup's algorithm alone.
#[test]
fn compare_setups_run_a_policys_hooks_as_replay_does() {
    let dir = tempfile::tempdir().unwrap();
    let trace = parity_trace(dir.path(), "t.csv");
    let c = json_of(&mantle(&[
        "compare",
        "--trace",
        &trace,
        "--no-baseline",
        "--setup",
        "lru:20:policy=policies/hooks/arc.lua",
        "--setup",
        "lru:20",
        "--backend",
        "none",
        "--json",
    ]));
    let hooked = run_of(&c, "lru 20 arc.lua")["result"]["miss_ratio"]
        .as_f64()
        .unwrap();
    let replayed = json_of(&mantle(&[
        "replay",
        "--trace",
        &trace,
        "--cache-size",
        "20",
        "--policy",
        "policies/hooks/arc.lua",
        "--backend",
        "none",
        "--json",
        "--quiet",
    ]))["miss_ratio"]
        .as_f64()
        .unwrap();
    assert_eq!(hooked, replayed);
    let lru = run_of(&c, "lru 20")["result"]["miss_ratio"]
        .as_f64()
        .unwrap();
    assert_ne!(hooked, lru, "the ARC hooks decide, not the setup's LRU");
}
