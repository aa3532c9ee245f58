//! Shadows and the switch policy in replay: an unsampled shadow's figures equal a real
//! cache's on the same stream (exactly), the shipped switch policy's guard rails, switching on
//! a trace whose regime changes, and the memory cap.

use adapt::shadow::ShadowLimits;
use adapt::{Adaptive, Candidate, ShadowSpec, SwitchPolicy, WindowFigures};
use policy::{Limits, Params};
use sim::policy_driver::PolicyController;
use sim::{ReplayConfig, ReplayReport, Tick};
use trace::{Op, Request};

fn policy(name: &str) -> String {
    format!("{}/../../policies/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A deterministic stream: `phases` of (requests, hot key range); keys drawn from the hot
/// range with a skew, 10% puts, one request per 10 ms.
fn stream(phases: &[(u64, u64, u64)]) -> Vec<Request> {
    stream_skewed(phases, 2.0)
}

/// `stream` with keys drawn as `base + u^skew * range`, u uniform in [0, 1).
fn stream_skewed(phases: &[(u64, u64, u64)], skew: f64) -> Vec<Request> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut out = Vec::new();
    for &(n, base, range) in phases {
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            let key = base + (u.powf(skew) * range as f64) as u64;
            let op = if x.is_multiple_of(10) {
                Op::Put
            } else {
                Op::Get
            };
            out.push(Request {
                time: out.len() as f64 * 0.01,
                key,
                size: 100 + (key % 7) as u32 * 10,
                op,
                offset: 0,
            });
        }
    }
    out
}

fn config() -> ReplayConfig {
    ReplayConfig {
        tick: Tick::Seconds(1.0),
        ..ReplayConfig::default()
    }
}

fn replay_with(reqs: &[Request], controller: &mut dyn sim::Controller) -> ReplayReport {
    let mut it = reqs.iter().copied();
    sim::replay(&config(), Some(controller), || Ok::<_, ()>(it.next())).unwrap()
}

fn spec(file: &str, params: &str) -> ShadowSpec {
    let text = if params.is_empty() {
        policy(file)
    } else {
        format!("{}:{params}", policy(file))
    };
    ShadowSpec::parse(&text).unwrap()
}

#[test]
fn an_unsampled_shadow_equals_a_real_cache_on_the_same_stream() {
    let reqs = stream(&[(20_000, 0, 2_000), (20_000, 5_000, 500), (20_000, 0, 8_000)]);
    let cases = [
        ("fixed.lua", "n=300"),
        ("multipolicy.lua", "n=200,absorb=1000"),
        ("dscache.lua", ""),
        ("decay.lua", "history=5"),
    ];
    let specs: Vec<ShadowSpec> = cases.iter().map(|(f, p)| spec(f, p)).collect();
    let mut adaptive =
        Adaptive::new(specs.clone(), None, None, ShadowLimits::default(), false).unwrap();
    let unmanaged = replay_with(&reqs, &mut adaptive);
    let report = adaptive.report();
    assert_eq!(unmanaged.policy.as_ref().unwrap().actions, 0);
    for (spec, candidate) in specs.iter().zip(&report.candidates) {
        let mut real =
            PolicyController::from_file(&spec.path, spec.params.clone(), Limits::default(), false)
                .unwrap();
        let r = replay_with(&reqs, &mut real);
        let s = candidate.shadow;
        assert!(r.policy.as_ref().unwrap().actions > 0, "{}", spec.name);
        assert_eq!(s.lookups, (r.gets + r.accesses) as f64, "{}", spec.name);
        assert_eq!(s.hits, r.hits as f64, "{}", spec.name);
        assert_eq!(s.misses, r.misses as f64, "{}", spec.name);
        assert_eq!(s.miss_ratio, r.miss_ratio, "{}", spec.name);
        assert_eq!(s.evictions, r.evictions as f64, "{}", spec.name);
        assert_eq!(s.peak_objects, r.peak_cache_objects as f64, "{}", spec.name);
        assert_eq!(s.peak_bytes, r.peak_cache_bytes as f64, "{}", spec.name);
        assert!(
            (s.mean_objects - r.mean_cache_objects).abs() < 1e-9,
            "{}",
            spec.name
        );
        assert!(
            (s.mean_bytes - r.mean_cache_bytes).abs() < 1e-6,
            "{}",
            spec.name
        );
        assert_eq!(
            s.decisions,
            r.policy.as_ref().unwrap().actions,
            "{}",
            spec.name
        );
        assert_eq!(s.errors, 0);
    }
}

#[test]
fn a_sampled_shadow_estimates_the_miss_ratio_and_size() {
    let reqs = stream_skewed(&[(100_000, 0, 50_000)], 1.3);
    let full = spec("fixed.lua", "n=5000");
    let sampled = spec("fixed.lua", "n=5000,sample=0.1,label=sampled");
    let mut adaptive = Adaptive::new(
        vec![full, sampled],
        None,
        None,
        ShadowLimits::default(),
        false,
    )
    .unwrap();
    replay_with(&reqs, &mut adaptive);
    let report = adaptive.report();
    let (f, s) = (report.candidates[0].shadow, report.candidates[1].shadow);
    assert!((f.miss_ratio - s.miss_ratio).abs() < 0.03, "{f:?} {s:?}");
    assert!(
        (f.mean_objects - s.mean_objects).abs() / f.mean_objects < 0.1,
        "{f:?} {s:?}"
    );
    // The sample holds about a tenth of the entries.
    let held = |c: &adapt::CandidateReport| c.shadow.peak_objects * c.sample;
    assert!(held(&report.candidates[1]) < held(&report.candidates[0]) / 5.0);
}

#[test]
fn the_memory_cap_bounds_a_shadow_whatever_its_policy_asks() {
    // An unmanaged cache over 50k distinct keys, capped at 1000 entries.
    let reqs = stream(&[(50_000, 0, 1 << 40)]);
    let dir = std::env::temp_dir().join(format!("adapt-cap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("grow.lua");
    std::fs::write(&file, "function howmuch() return {capacity = 1e12} end").unwrap();
    let limits = ShadowLimits {
        max_objects: 1_000,
        ..ShadowLimits::default()
    };
    let specs = vec![ShadowSpec::parse(&file.display().to_string()).unwrap()];
    let mut adaptive = Adaptive::new(specs, None, None, limits, false).unwrap();
    replay_with(&reqs, &mut adaptive);
    let shadow = &adaptive.shadows()[0];
    assert!(shadow.cache().len() <= 1_000);
    let report = adaptive.report();
    let t = report.candidates[0].shadow;
    assert!(t.peak_objects <= 1_000.0, "{t:?}");
    assert!(t.capped_ticks > 0, "{t:?}");
    // The cache's metadata is bounded by the entries it may hold (not the keys it saw).
    assert!(t.metadata_bytes < 1_000 * 200, "{t:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn figures(miss_ratio: f64, prev: f64, mean_objects: f64, evictions: f64) -> WindowFigures {
    WindowFigures {
        ticks: 10,
        lookups: 1000.0,
        misses: miss_ratio * 1000.0,
        hits: (1.0 - miss_ratio) * 1000.0,
        miss_ratio,
        hit_ratio: 1.0 - miss_ratio,
        prev_miss_ratio: prev,
        mean_objects,
        evictions,
        ..WindowFigures::default()
    }
}

fn shipped_switch(params: &[(&str, f64)]) -> SwitchPolicy {
    let params: Params = params
        .iter()
        .map(|(k, v)| (k.to_string(), policy::Scalar::Number(*v)))
        .collect();
    SwitchPolicy::load_file(
        std::path::Path::new(&policy("switch.lua")),
        &params,
        Limits::default(),
    )
    .unwrap()
}

/// Calls the switch with candidates `a` (active) and `b`.
fn ask(
    p: &mut SwitchPolicy,
    tick: u64,
    a: &WindowFigures,
    b: &WindowFigures,
    active_a: bool,
) -> Option<String> {
    let cands = [
        Candidate {
            name: "a",
            active: active_a,
            sample: 1.0,
            figures: a,
        },
        Candidate {
            name: "b",
            active: !active_a,
            sample: 1.0,
            figures: b,
        },
    ];
    let current = cands[if active_a { 0 } else { 1 }];
    p.choose(tick as f64, tick, &cands, &current).unwrap()
}

#[test]
fn the_shipped_switch_keeps_its_guard_rails() {
    let mut p = shipped_switch(&[("dwell", 5.0), ("margin", 0.1), ("cost", 0.0)]);
    let bad = figures(0.5, 0.5, 100.0, 0.0);
    let good = figures(0.1, 0.1, 100.0, 0.0);
    // Dwell: nothing before tick 5, then the better candidate.
    for tick in 1..5 {
        assert_eq!(ask(&mut p, tick, &bad, &good, true), None, "tick {tick}");
    }
    assert_eq!(ask(&mut p, 5, &bad, &good, true).as_deref(), Some("b"));
    let (lines, _) = p.drain_logs();
    assert!(lines[0].message.contains("no progress"), "{lines:?}");
    // b is active now; a turns better at once: dwell holds b for 5 ticks.
    for tick in 6..10 {
        assert_eq!(ask(&mut p, tick, &good, &bad, false), None, "tick {tick}");
    }
    assert_eq!(ask(&mut p, 10, &good, &bad, false).as_deref(), Some("a"));
    // Hysteresis: a challenger better by less than the margin does not win.
    let slightly = figures(0.46, 0.46, 100.0, 0.0);
    assert_eq!(ask(&mut p, 20, &bad, &slightly, true), None);
    let enough = figures(0.44, 0.44, 100.0, 0.0);
    assert_eq!(ask(&mut p, 21, &bad, &enough, true).as_deref(), Some("b"));
}

#[test]
fn ties_go_to_the_preferred_candidate_and_thrashing_is_named() {
    let mut p = shipped_switch(&[("dwell", 1.0), ("margin", 0.01), ("cost", 0.0)]);
    let active = figures(0.6, 0.4, 100.0, 600.0);
    let later_but_equal = figures(0.199, 0.199, 100.0, 0.0);
    let earlier = figures(0.2, 0.2, 100.0, 0.0);
    // Two challengers tie (within `tie`): the earlier one in preference order wins, and the
    // active cache evicting as much as it misses is named as thrashing.
    let cands = [
        Candidate {
            name: "a",
            active: true,
            sample: 1.0,
            figures: &active,
        },
        Candidate {
            name: "b",
            active: false,
            sample: 1.0,
            figures: &earlier,
        },
        Candidate {
            name: "c",
            active: false,
            sample: 1.0,
            figures: &later_but_equal,
        },
    ];
    assert_eq!(
        p.choose(5.0, 5, &cands, &cands[0]).unwrap().as_deref(),
        Some("b")
    );
    let (lines, _) = p.drain_logs();
    assert!(lines[0].message.contains("thrashing"), "{lines:?}");
}

#[test]
fn replay_switches_when_the_regime_changes() {
    // A small hot set, then a large one: fixed:n=100 is right at first, fixed:n=3000 later.
    let reqs = stream(&[(30_000, 0, 80), (60_000, 10_000, 2_500)]);
    let specs = vec![spec("fixed.lua", "n=100"), spec("fixed.lua", "n=3000")];
    let switch = shipped_switch(&[("dwell", 3.0), ("cost", 0.05)]);
    let mut adaptive =
        Adaptive::new(specs, Some(switch), None, ShadowLimits::default(), false).unwrap();
    let r = replay_with(&reqs, &mut adaptive);
    let report = adaptive.report();
    let versions: Vec<_> = report
        .timeline
        .iter()
        .map(|s| s.version.clone().unwrap())
        .collect();
    assert_eq!(versions[0], "fixed:n=100", "{report:#?}");
    assert!(
        versions.contains(&"fixed:n=3000".to_string()),
        "{report:#?}"
    );
    let to_big = report
        .timeline
        .iter()
        .find(|s| s.version.as_deref() == Some("fixed:n=3000"))
        .unwrap();
    // The regime changes at 300 s of trace time.
    assert!(to_big.from_time >= 300.0, "{to_big:?}");
    assert!(
        to_big.reason.contains("switch to fixed:n=3000"),
        "{to_big:?}"
    );
    assert!(r.peak_cache_objects > 100 && r.peak_cache_objects <= 3000 + 100);
    assert_eq!(report.switch_errors, 0);
}
