//! `mantle replay --shadow ... --switch` and `mantle compare --shadow ... --switch` run as a
//! user runs them: the JSON report's `adaptive` object (timeline, candidates), the
//! `--shadow-out` CSV, and one-line errors for bad shadows and switch policies.

mod common;

use common::{json_of, mantle, repo};
use std::path::PathBuf;

/// A `timestamp_s,op,key` trace whose regime changes at 300 s: 20 hot keys, then 2,000.
fn regime_trace(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mantle-shadow-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("regimes.csv");
    let mut text = String::from("timestamp_s,op,key\n");
    let mut x: u64 = 12345;
    for i in 0..60_000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let range = if i < 30_000 { 20 } else { 2_000 };
        let key = 1_000 * u64::from(i >= 30_000) + (x >> 33) % range;
        text.push_str(&format!("{},GET,{}\n", i / 100, key));
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn policy(name: &str) -> String {
    repo().join("policies").join(name).display().to_string()
}

#[test]
fn replay_reports_the_switches_and_every_shadow() {
    let trace = regime_trace("replay");
    let csv = trace.with_file_name("shadows.csv");
    let html = trace.with_file_name("report.html");
    let out = mantle(&[
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--cache-size",
        "unlimited",
        "--quiet",
        "--json",
        "--shadow",
        &format!("{}:n=30", policy("fixed.lua")),
        "--shadow",
        &format!("{}:n=2500", policy("fixed.lua")),
        "--shadow",
        &format!("{}:n=2500,sample=0.5,label=half", policy("fixed.lua")),
        "--switch",
        &policy("switch.lua"),
        "--switch-param",
        "dwell=3",
        "--shadow-out",
        csv.to_str().unwrap(),
        "--report",
        html.to_str().unwrap(),
    ]);
    let v = json_of(&out);
    let a = &v["adaptive"];
    assert_eq!(a["switch_policy"], "switch");
    let timeline = a["timeline"].as_array().unwrap();
    assert_eq!(timeline[0]["version"], "fixed:n=30");
    assert_eq!(timeline[0]["from_time"], 0.0);
    let big = timeline
        .iter()
        .find(|s| s["version"] == "fixed:n=2500" || s["version"] == "half")
        .unwrap_or_else(|| panic!("no switch to the big cache: {a:#}"));
    assert!(big["from_time"].as_f64().unwrap() >= 300.0, "{big}");
    let reason = big["reason"].as_str().unwrap();
    assert!(
        reason.contains("switch to") && reason.contains("thrashing"),
        "{reason}"
    );
    let cands = a["candidates"].as_array().unwrap();
    assert_eq!(cands.len(), 3);
    assert_eq!(cands[2]["name"], "half");
    assert_eq!(cands[2]["sample"], 0.5);
    assert!(cands[1]["shadow"]["miss_ratio"].as_f64().unwrap() < 0.1);
    assert_eq!(v["policy"]["name"], "switch (adaptive)");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("Switch policy switch: "),
        "no switch paragraph"
    );
    assert!(page.contains("active: fixed:n=30 from 0 s, "));
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert!(rows.starts_with("tick,time,candidate,active,"), "{rows}");
    // One row per candidate per tick (600 s, 1 s ticks).
    assert!(rows.lines().count() >= 3 * 599, "{}", rows.lines().count());
    let _ = std::fs::remove_dir_all(trace.parent().unwrap());
}

#[test]
fn compare_adds_the_adaptive_setup_beside_each_candidate_alone() {
    let trace = regime_trace("compare");
    let out = mantle(&[
        "compare",
        "--trace",
        trace.to_str().unwrap(),
        "--no-baseline",
        "--json",
        "--jobs",
        "1",
        "--shadow",
        &format!("{}:n=30", policy("fixed.lua")),
        "--shadow",
        &format!("{}:n=2500", policy("fixed.lua")),
        "--switch",
        &policy("switch.lua"),
    ]);
    let v = json_of(&out);
    let runs = v["runs"].as_array().unwrap();
    let labels: Vec<&str> = runs.iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(
        labels,
        ["fixed.lua n=30", "fixed.lua n=2500", "adaptive (switch)"]
    );
    assert!(runs[2]["adaptive"]["switches"].as_u64().unwrap() >= 1);
    let _ = std::fs::remove_dir_all(trace.parent().unwrap());
}

#[test]
fn bad_shadows_and_switch_policies_fail_with_one_line() {
    let trace = regime_trace("errors");
    let t = trace.to_str().unwrap();
    let no_switch = trace.with_file_name("noswitch.lua");
    std::fs::write(&no_switch, "function when() return false end").unwrap();
    let fixed = policy("fixed.lua");
    let switch = policy("switch.lua");
    let oversampled = format!("{fixed}:sample=3");
    let no_switch = no_switch.to_str().unwrap();
    let cases: [(Vec<&str>, &str); 4] = [
        (
            vec!["--shadow", "/nonexistent.lua"],
            "--shadow /nonexistent.lua",
        ),
        (vec!["--shadow", &oversampled], "sample=3"),
        (
            vec!["--shadow", &fixed, "--switch", no_switch],
            "switch(candidates, current)",
        ),
        (
            vec!["--shadow", &fixed, "--shadow", &fixed, "--switch", &switch],
            "label=NAME",
        ),
    ];
    for (args, expect) in cases {
        let mut all = vec!["replay", "--trace", t, "--cache-size", "100", "--quiet"];
        all.extend(args.iter().copied());
        let out = mantle(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{all:?}");
        assert!(err.contains(expect), "{all:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let _ = std::fs::remove_dir_all(trace.parent().unwrap());
}

#[test]
fn gen_phases_writes_a_regime_change_a_switch_can_follow() {
    // A hot set of 20 keys for 60 s, then 1,500 new keys for 60 s, twice: the switch must
    // take the large cache in the large stretches and leave it in the hot ones.
    let dir = std::env::temp_dir().join(format!("mantle-gen-phases-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("a.csv"), dir.join("b.csv"));
    for path in [&a, &b] {
        let out = mantle(&[
            "gen",
            "phases",
            "--seed",
            "3",
            "--rate",
            "100",
            "--repeat",
            "2",
            "--phase",
            "60,20",
            "--phase",
            "60,1500,fresh",
            "-o",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("wrote 24000 requests"));
    }
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    let (small, big) = (policy("fixed.lua:n=50"), policy("fixed.lua:n=2000"));
    let switch = policy("switch.lua");
    let versions = |back: Option<&str>| -> Vec<String> {
        let mut args = vec![
            "replay",
            "--trace",
            a.to_str().unwrap(),
            "--cache-size",
            "unlimited",
            "--json",
            "--shadow",
            &small,
            "--shadow",
            &big,
            "--switch",
            &switch,
            "--switch-param",
            "cost=0.1",
            "--switch-param",
            "ref=2000",
        ];
        if let Some(back) = back {
            args.extend(["--switch-param", back]);
        }
        let out = mantle(&args);
        assert!(out.status.success(), "{out:?}");
        let v = json_of(&out);
        v["adaptive"]["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["version"].as_str().unwrap().to_string())
            .collect()
    };
    // With switches down free (back=0) the switch follows every change.
    let free = versions(Some("back=0"));
    assert!(free.len() >= 3, "{free:?}");
    assert_eq!(free[..3], ["fixed:n=50", "fixed:n=2000", "fixed:n=50"]);
    // By default a switch down to the small cache, which has missed more so far, is charged
    // the way back: re-reading 1,500 keys costs more than a 60 s hot stretch saves at this
    // weight (about 600 misses' worth), so the real cache stays large after the first change.
    assert_eq!(versions(None), ["fixed:n=50", "fixed:n=2000"]);
    // A malformed phase is one line naming it.
    let out = mantle(&[
        "gen",
        "phases",
        "--phase",
        "10,many",
        "-o",
        a.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("phase '10,many'") && err.contains("KEYS"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
