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
        // A window at a steady size: the newest tick holds the window's mean.
        last_objects: mean_objects,
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
    // confidence=0: the hysteresis alone (the noise term has its own test).
    let mut p = shipped_switch(&[
        ("dwell", 5.0),
        ("margin", 0.1),
        ("cost", 0.0),
        ("confidence", 0.0),
    ]);
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

/// Calls the switch with candidates `a` and `b` (`a` active when `active_a`) and the real
/// cache's own figures `real`.
fn ask_real(
    p: &mut SwitchPolicy,
    tick: u64,
    (a, b): (&WindowFigures, &WindowFigures),
    active_a: bool,
    real: &WindowFigures,
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
    let current = Candidate {
        name: if active_a { "a" } else { "b" },
        active: true,
        sample: 1.0,
        figures: real,
    };
    p.choose(tick as f64, tick, &cands, &current).unwrap()
}

#[test]
fn a_switch_to_a_larger_cache_is_charged_the_warm_up_it_cost_last_time() {
    let mut p = shipped_switch(&[("dwell", 1.0), ("cost", 0.0)]);
    let small_bad = figures(0.5, 0.5, 100.0, 0.0);
    let big_good = figures(0.1, 0.1, 1100.0, 0.0);
    // The first switch to a larger cache is free: it is how the warm-up is learned.
    assert_eq!(
        ask_real(&mut p, 5, (&small_bad, &big_good), true, &small_bad).as_deref(),
        Some("b")
    );
    // A full window on the larger cache before anything else, whatever the figures say.
    let small_good = figures(0.01, 0.01, 100.0, 0.0);
    let warming = figures(0.3, 0.5, 700.0, 0.0);
    for tick in 6..15 {
        assert_eq!(
            ask_real(&mut p, tick, (&small_good, &big_good), false, &warming),
            None,
            "tick {tick}"
        );
    }
    // A window after the switch the real cache missed 200 more than b's shadow, for the
    // 1000 objects it lacked: 0.2 misses per lacking object.
    assert_eq!(
        ask_real(&mut p, 15, (&small_good, &big_good), false, &warming).as_deref(),
        Some("a"),
        "going back to the smaller cache costs no warm-up"
    );
    // Now b leads by 500 - 300 - 50 (margin) = 150 misses a window, beyond the noise
    // (sqrt(800)): it saves 15 misses a tick, against a warm-up charge of 0.2 x 1000 = 200.
    // It must have saved that much (a lead is expected to last as long again) before the
    // switch pays: 14 ticks.
    let big_better = figures(0.3, 0.3, 1100.0, 0.0);
    for tick in 16..28 {
        assert_eq!(
            ask_real(&mut p, tick, (&small_bad, &big_better), true, &small_bad),
            None,
            "tick {tick}"
        );
    }
    // A tick where a does better takes back what b would have lost (29.1), not all of it.
    assert_eq!(
        ask_real(&mut p, 28, (&small_good, &big_better), true, &small_good),
        None
    );
    for tick in 29..32 {
        assert_eq!(
            ask_real(&mut p, tick, (&small_bad, &big_better), true, &small_bad),
            None,
            "tick {tick}"
        );
    }
    assert_eq!(
        ask_real(&mut p, 32, (&small_bad, &big_better), true, &small_bad).as_deref(),
        Some("b")
    );
    let (lines, _) = p.drain_logs();
    let last = &lines.last().unwrap().message;
    assert!(last.contains("warm-up charge 200.0000"), "{last}");
}

#[test]
fn a_lead_within_the_noise_of_the_window_keeps_the_active_one() {
    // Misses are counts: 3 against 1 in a window is a lead beyond the 10% margin but within
    // the noise (1 x sqrt(3 + 1)); 12 against 2 is not.
    let mut p = shipped_switch(&[("dwell", 1.0), ("cost", 0.0)]);
    let few = |misses: f64| WindowFigures {
        misses,
        miss_ratio: misses / 1000.0,
        prev_miss_ratio: misses / 1000.0,
        ..figures(0.0, 0.0, 100.0, 0.0)
    };
    assert_eq!(ask(&mut p, 5, &few(3.0), &few(1.0), true), None);
    assert_eq!(
        ask(&mut p, 6, &few(12.0), &few(2.0), true).as_deref(),
        Some("b")
    );
    // confidence=0 turns the noise term off.
    let mut p = shipped_switch(&[("dwell", 1.0), ("cost", 0.0), ("confidence", 0.0)]);
    assert_eq!(
        ask(&mut p, 5, &few(3.0), &few(1.0), true).as_deref(),
        Some("b")
    );
}

#[test]
fn a_tie_goes_to_the_least_memory_and_is_no_reason_to_move() {
    // cost=0: fewest misses first, then the least memory, then the preference order.
    let mut p = shipped_switch(&[("dwell", 1.0), ("cost", 0.0)]);
    let missing = figures(0.3, 0.3, 100.0, 0.0);
    let big = figures(0.0, 0.0, 4000.0, 0.0);
    let small = figures(0.0, 0.0, 200.0, 0.0);
    let cands = [
        Candidate {
            name: "a",
            active: true,
            sample: 1.0,
            figures: &missing,
        },
        Candidate {
            name: "big",
            active: false,
            sample: 1.0,
            figures: &big,
        },
        Candidate {
            name: "small",
            active: false,
            sample: 1.0,
            figures: &small,
        },
    ];
    assert_eq!(
        p.choose(5.0, 5, &cands, &cands[0]).unwrap().as_deref(),
        Some("small")
    );
    // An active candidate that ties on misses keeps the real cache, from a larger candidate
    // and from a smaller one alike (a quiet window is no evidence that less will do).
    let mut p = shipped_switch(&[("dwell", 1.0), ("cost", 0.0)]);
    let mid = figures(0.0, 0.0, 1000.0, 0.0);
    assert_eq!(ask(&mut p, 5, &mid, &big, true), None);
    assert_eq!(ask(&mut p, 6, &mid, &small, true), None);
}

#[test]
fn a_switch_hands_the_real_cache_over_at_the_new_candidates_capacity() {
    // `tight` caps the cache at 5 objects; fixed.lua only evicts, so it relies on the
    // capacity it started with. After a switch from the one to the other the real cache
    // must not keep the 5-object cap of the candidate that left.
    let reqs = stream(&[(20_000, 0, 500)]);
    let dir = std::env::temp_dir().join(format!("adapt-handover-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tight = dir.join("tight.lua");
    std::fs::write(
        &tight,
        "function when() return true end\nfunction howmuch() return {capacity = 5} end",
    )
    .unwrap();
    let specs = vec![
        ShadowSpec::parse(&tight.display().to_string()).unwrap(),
        spec("fixed.lua", "n=1000"),
    ];
    let force = SwitchPolicy::load(
        "force",
        "=force.lua",
        "function switch(c, cur) if tick == 10 then return 'fixed:n=1000' end end",
        &Params::new(),
        Limits::default(),
    )
    .unwrap();
    let mut adaptive =
        Adaptive::new(specs, Some(force), None, ShadowLimits::default(), false).unwrap();
    let r = replay_with(&reqs, &mut adaptive);
    let report = adaptive.report();
    assert_eq!(report.switches, 1);
    let fixed = report.candidates[1].shadow;
    // The fixed shadow holds every key and misses each about once; the real cache does the
    // same after its first 10 s under the 5-object cap.
    assert!(fixed.misses < 600.0, "{fixed:?}");
    assert!(r.peak_cache_objects > 400, "{}", r.peak_cache_objects);
    assert!(r.misses < 3_000, "{}", r.misses);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn memory_is_weighed_in_a_fixed_unit_not_the_windows_largest() {
    // a misses 50 holding 100 objects, b misses nothing holding 1000. Against a unit of
    // 10,000 objects b's memory costs 0.1 x 1000 x 0.1 = 10 misses and a's 1: b wins (51 vs
    // 10). Measured against the window's largest candidate (1000, as the switch once did), b's
    // memory would cost 100 and a would stay, though the whole run's objective favours b.
    let a = WindowFigures {
        misses: 50.0,
        miss_ratio: 0.05,
        prev_miss_ratio: 0.05,
        ..figures(0.0, 0.0, 100.0, 0.0)
    };
    let b = figures(0.0, 0.0, 1000.0, 0.0);
    let mut p = shipped_switch(&[("dwell", 1.0), ("cost", 0.1), ("ref", 10_000.0)]);
    assert_eq!(ask(&mut p, 5, &a, &b, true).as_deref(), Some("b"));
    // Without `ref` the unit is the largest mean size seen so far (a running maximum): a
    // candidate that once held 10,000 objects keeps the unit there after its window shrinks.
    let mut p = shipped_switch(&[("dwell", 10.0), ("cost", 0.1)]);
    let big_once = figures(1.0, 1.0, 10_000.0, 0.0);
    let big_now = figures(1.0, 1.0, 500.0, 0.0);
    fn three<'a>(
        a: &'a WindowFigures,
        b: &'a WindowFigures,
        c: &'a WindowFigures,
    ) -> [Candidate<'a>; 3] {
        [("a", a, true), ("b", b, false), ("c", c, false)].map(|(name, f, active)| Candidate {
            name,
            active,
            sample: 1.0,
            figures: f,
        })
    }
    let early = three(&a, &b, &big_once);
    assert_eq!(p.choose(5.0, 5, &early, &early[0]).unwrap(), None, "dwell");
    let later = three(&a, &b, &big_now);
    assert_eq!(
        p.choose(10.0, 10, &later, &later[0]).unwrap().as_deref(),
        Some("b")
    );
}

#[test]
fn back_charges_a_switch_down_the_warm_up_of_coming_back() {
    // `history`: a first missed 2,000 objects in ticks 1-4, while b's shadow was still cold
    // (one tick of figures, below `warm`), so a has missed more than b over the run.
    let learn = |p: &mut SwitchPolicy, history: bool| {
        let small_bad = figures(0.5, 0.5, 100.0, 0.0);
        if history {
            let cold = WindowFigures {
                ticks: 1,
                ..figures(0.0, 0.0, 1100.0, 0.0)
            };
            for tick in 1..5 {
                assert_eq!(
                    ask_real(p, tick, (&small_bad, &cold), true, &small_bad),
                    None
                );
            }
        }
        // As in the warm-up test: a free first switch up from a (100 objects) to b (1100),
        // then a window whose real cache misses 200 more than b's shadow for the 1000 objects
        // it lacked: 0.2 misses per object.
        let big_good = figures(0.1, 0.1, 1100.0, 0.0);
        assert_eq!(
            ask_real(p, 5, (&small_bad, &big_good), true, &small_bad).as_deref(),
            Some("b")
        );
        let small_good = figures(0.01, 0.01, 100.0, 0.0);
        let warming = figures(0.3, 0.5, 700.0, 0.0);
        for tick in 6..15 {
            assert_eq!(
                ask_real(p, tick, (&small_good, &big_good), false, &warming),
                None
            );
        }
        (small_good, big_good, warming)
    };
    // back=0: going down is free.
    let mut p = shipped_switch(&[("dwell", 1.0), ("cost", 0.0), ("back", 0.0)]);
    let (small_good, big_good, warming) = learn(&mut p, true);
    assert_eq!(
        ask_real(&mut p, 15, (&small_good, &big_good), false, &warming).as_deref(),
        Some("a")
    );
    // back=1 (the default), a having missed more than b so far: dropping 600 objects (the
    // real cache's 700 down to a's 100) is charged the way back, 0.2 x 600 = 120 misses. a
    // leads by 100 - 10 - 10 (margin) = 80 a window, 8 a tick: it takes 15 ticks to save
    // that much.
    let mut p = shipped_switch(&[("dwell", 1.0), ("cost", 0.0)]);
    let (small_good, big_good, warming) = learn(&mut p, true);
    let mut switched = None;
    for tick in 15..40 {
        if ask_real(&mut p, tick, (&small_good, &big_good), false, &warming).is_some() {
            switched = Some(tick);
            break;
        }
    }
    assert!(matches!(switched, Some(28..=30)), "{switched:?}");
    let (lines, _) = p.drain_logs();
    let last = &lines.last().unwrap().message;
    assert!(last.contains("warm-up charge 120.0000"), "{last}");
    // Without that history a has missed less than b so far (about 60 against 110): nothing
    // says the real cache would have to come back, and the switch down is free.
    let mut p = shipped_switch(&[("dwell", 1.0), ("cost", 0.0)]);
    let (small_good, big_good, warming) = learn(&mut p, false);
    assert_eq!(
        ask_real(&mut p, 15, (&small_good, &big_good), false, &warming).as_deref(),
        Some("a")
    );
    let (lines, _) = p.drain_logs();
    let last = &lines.last().unwrap().message;
    assert!(last.contains("warm-up charge 0.0000"), "{last}");
}

/// The shipped switch with numeric `params` and `size=SIZE`.
fn shipped_switch_sized(params: &[(&str, f64)], size: &str) -> SwitchPolicy {
    let mut all: Params = params
        .iter()
        .map(|(k, v)| (k.to_string(), policy::Scalar::Number(*v)))
        .collect();
    all.insert("size".to_string(), policy::Scalar::Str(size.to_string()));
    SwitchPolicy::load_file(
        std::path::Path::new(&policy("switch.lua")),
        &all,
        Limits::default(),
    )
    .unwrap()
}

#[test]
fn memory_is_weighed_at_what_a_candidate_holds_now_not_its_window_mean() {
    // Both miss nothing. a has held 100 objects all window; b's window mean is 300 (it held
    // 500 until it shrank) but it holds 20 now, which is what the real cache would hold after
    // a switch. Weighed at the newest tick (the default) b takes over; weighed at the
    // window's mean (size=mean, the switch before) a stays, and a candidate whose cache
    // shrank keeps being charged for what it no longer holds for a whole window.
    let a = WindowFigures {
        last_objects: 100.0,
        ..figures(0.0, 0.0, 100.0, 0.0)
    };
    let b = WindowFigures {
        last_objects: 20.0,
        ..figures(0.0, 0.0, 300.0, 0.0)
    };
    let params = [("dwell", 1.0), ("cost", 0.1), ("ref", 1000.0)];
    let mut p = shipped_switch(&params);
    assert_eq!(ask(&mut p, 5, &a, &b, true).as_deref(), Some("b"));
    let (lines, _) = p.drain_logs();
    assert!(lines[0].message.contains("less memory"), "{lines:?}");
    let mut p = shipped_switch_sized(&params, "mean");
    assert_eq!(ask(&mut p, 5, &a, &b, true), None);
}

#[test]
fn a_sustained_tie_moves_to_the_smaller_candidate_and_a_short_one_does_not() {
    // cost=0: a and b miss as much, b holds half as much.
    let a = figures(0.005, 0.005, 100.0, 0.0);
    let b = figures(0.005, 0.005, 50.0, 0.0);
    let worse = figures(0.008, 0.008, 50.0, 0.0);
    // By default a tie is no reason to move, however long it lasts.
    let mut p = shipped_switch(&[("dwell", 1.0), ("cost", 0.0)]);
    for tick in 5..100 {
        assert_eq!(ask(&mut p, tick, &a, &b, true), None, "tick {tick}");
    }
    // settle=3: a tie that lasts 3 ticks moves the real cache to the smaller candidate; a
    // tick where b misses more starts the count again.
    let mut p = shipped_switch(&[("dwell", 1.0), ("cost", 0.0), ("settle", 3.0)]);
    assert_eq!(ask(&mut p, 5, &a, &b, true), None);
    assert_eq!(ask(&mut p, 6, &a, &b, true), None);
    assert_eq!(ask(&mut p, 7, &a, &worse, true), None, "b missed more");
    assert_eq!(ask(&mut p, 8, &a, &b, true), None);
    assert_eq!(ask(&mut p, 9, &a, &b, true), None);
    assert_eq!(ask(&mut p, 10, &a, &b, true).as_deref(), Some("b"));
    let (lines, _) = p.drain_logs();
    assert!(
        lines[0]
            .message
            .contains("less memory for as few misses for 3 ticks"),
        "{lines:?}"
    );
    // The dwell still holds after such a switch, and the count starts again from the new
    // active candidate: a tie with a larger one never moves back.
    for tick in 11..30 {
        assert_eq!(ask(&mut p, tick, &a, &b, false), None, "tick {tick}");
    }
}
