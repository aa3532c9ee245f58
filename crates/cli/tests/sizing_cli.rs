//! The second-generation sizing policies against the smallest fixed LRU cache with no reuse
//! misses, run through `mantle` as docs/reproduce-parsplice.md does: on the real ParSplice
//! log (when ../shared/traces is present, or $MANTLE_SHARED_TRACES) and on generated traces
//! under five initial conditions, with no policy parameter.

mod common;

use common::{json_of, mantle, repo};

use serde_json::Value;
use std::path::{Path, PathBuf};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mantle-sizing-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn real_log() -> Option<PathBuf> {
    let dir = std::env::var_os("MANTLE_SHARED_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/traces"));
    let log = dir.join("parsplice/scale-workers-1-71538_rank4_workmanager_getput.csv.zst");
    if log.is_file() {
        Some(log)
    } else {
        eprintln!("skipping: {} is absent", log.display());
        None
    }
}

/// The smallest LRU cache without reuse misses, as `mantle analyze` finds it.
fn no_miss_size(trace: &Path) -> u64 {
    let a = json_of(&mantle(&[
        "analyze",
        "--trace",
        trace.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(a["mrc"]["method"], "exact");
    a["mrc"]["no_miss_size"]
        .as_u64()
        .expect("the trace has reuses")
}

fn fixed(trace: &Path, size: u64) -> (u64, f64) {
    let r = json_of(&mantle(&[
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--cache-size",
        &size.to_string(),
        "--json",
    ]));
    (
        r["misses"].as_u64().unwrap(),
        r["mean_cache_objects"].as_f64().unwrap(),
    )
}

struct Outcome {
    lru_mean: f64,
    dscache2: Value,
    multipolicy2: Value,
}

fn compare(trace: &Path, nomiss: u64) -> Outcome {
    let v = json_of(&mantle(&[
        "compare",
        "--trace",
        trace.to_str().unwrap(),
        "--no-baseline",
        "--fixed",
        &nomiss.to_string(),
        "--policy",
        "policies/dscache2.lua",
        "--policy",
        "policies/multipolicy2.lua",
        "--json",
    ]));
    let run = |i: usize| v["runs"][i]["result"].clone();
    let lru = run(0);
    assert_eq!(lru["misses"], 0, "{trace:?}: LRU {nomiss} misses");
    Outcome {
        lru_mean: lru["mean_cache_objects"].as_f64().unwrap(),
        dscache2: run(1),
        multipolicy2: run(2),
    }
}

/// dscache2's promise: at most 0.01% misses, and at most `ratio` of the no-miss LRU's mean.
fn assert_dscache2(trace: &Path, o: &Outcome, ratio: f64) {
    let d = &o.dscache2;
    assert_eq!(d["policy"]["errors"], 0);
    let miss = d["miss_ratio"].as_f64().unwrap();
    assert!(miss <= 1e-4, "{trace:?}: dscache2 miss ratio {miss}");
    let r = d["mean_cache_objects"].as_f64().unwrap() / o.lru_mean;
    assert!(
        r <= ratio,
        "{trace:?}: dscache2 keeps {r:.3}x of the no-miss LRU"
    );
}

/// No fixed LRU size has both no more misses and no larger mean than multipolicy2. An LRU
/// cache's misses never grow with its size and its mean never shrinks, so the smallest size
/// with no more misses (found by bisection) decides.
fn assert_undominated(trace: &Path, o: &Outcome, nomiss: u64) {
    let m = &o.multipolicy2;
    assert_eq!(m["policy"]["errors"], 0);
    let misses = m["misses"].as_u64().unwrap();
    let mean = m["mean_cache_objects"].as_f64().unwrap();
    let (mut lo, mut hi) = (1, nomiss);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if fixed(trace, mid).0 <= misses {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let (_, lru_mean) = fixed(trace, lo);
    assert!(
        lru_mean > mean,
        "{trace:?}: LRU {lo} (mean {lru_mean}) dominates multipolicy2 ({misses} misses, mean {mean})"
    );
}

#[test]
fn sizing_policies_on_the_real_parsplice_log() {
    let Some(log) = real_log() else {
        return;
    };
    let nomiss = no_miss_size(&log);
    assert_eq!(nomiss, 6367);
    let o = compare(&log, nomiss);
    // Measured: 0.556x with no misses; the goal of 0.5x is not reached.
    assert_dscache2(&log, &o, 0.6);
    assert_undominated(&log, &o, nomiss);
}

#[test]
fn sizing_policies_under_other_initial_conditions() {
    let dir = temp_dir("gen");
    for (name, extra) in [
        ("calibration", &["--duration", "2h"][..]),
        ("workers-112", &["--duration", "2h", "--workers", "112"][..]),
        (
            "growth-0.1",
            &["--duration", "2h", "--growth-rate", "0.1"][..],
        ),
        (
            "workers-56-temp-2",
            &["--duration", "2h", "--workers", "56", "--temperature", "2"][..],
        ),
        ("duration-4h", &["--duration", "4h"][..]),
    ] {
        let trace = dir.join(format!("{name}.csv.zst"));
        let mut args = vec!["gen", "parsplice", "--seed", "3"];
        args.extend(extra);
        args.extend(["-o", trace.to_str().unwrap()]);
        let out = mantle(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let nomiss = no_miss_size(&trace);
        let o = compare(&trace, nomiss);
        // Measured: 0.37x to 0.71x (docs/reproduce-parsplice.md); the goal is 0.5x.
        assert_dscache2(&trace, &o, 0.75);
        assert_undominated(&trace, &o, nomiss);
    }
    std::fs::remove_dir_all(dir).ok();
}
