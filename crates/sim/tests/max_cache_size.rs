//! `--max-cache-size`: a ceiling no starting size and no policy can lift. Before it, a policy's
//! `{capacity=N}` replaced `--cache-size` outright, so every size of a sweep ran at whatever
//! size the policy chose; these tests fail on that behaviour.

use cache::Capacity;
use sim::{
    replay, Action, BackendSpec, Controller, ControllerSummary, ReplayConfig, ReplayReport, Tick,
    TickContext, TickDecision,
};
use trace::{Op, Request};

/// Asks for a fixed (large) capacity at every tick, as dscache2 does when it sizes from the
/// working set.
struct AsksFor(u64);

impl Controller for AsksFor {
    fn tick(&mut self, _: &TickContext<'_>) -> TickDecision {
        TickDecision {
            action: Action::SetCapacity(self.0),
            error: None,
        }
    }
    fn summary(&self) -> ControllerSummary {
        ControllerSummary::default()
    }
}

/// 20,000 gets over 5,000 keys, one per 10 ms: the cache would grow to all of them.
fn trace() -> Vec<Request> {
    (0..20_000u64)
        .map(|i| Request {
            time: i as f64 * 0.01,
            key: (i * 7919) % 5_000,
            size: 100,
            op: Op::Get,
            offset: 0,
        })
        .collect()
}

fn run(config: &ReplayConfig, ctl: Option<&mut dyn Controller>) -> ReplayReport {
    let reqs = trace();
    let mut it = reqs.iter().copied();
    replay(config, ctl, || Ok::<_, ()>(it.next())).unwrap()
}

fn config(capacity: Capacity, max: Capacity) -> ReplayConfig {
    ReplayConfig {
        capacity,
        max_capacity: max,
        backend: BackendSpec::None,
        tick: Tick::Seconds(1.0),
        record_ticks: true,
        ..ReplayConfig::default()
    }
}

#[test]
fn a_policy_asking_for_more_is_cut_to_the_ceiling_and_counted() {
    let cfg = config(Capacity::objects(143), Capacity::objects(300));
    let r = run(&cfg, Some(&mut AsksFor(1_000_000)));
    assert!(r.peak_cache_objects <= 300, "peak {}", r.peak_cache_objects);
    assert_eq!(r.peak_cache_objects, 300);
    let asked = r.ticks.iter().filter(|t| !t.action.is_empty()).count() as u64;
    assert!(asked > 100);
    assert_eq!(r.capacity_clamps, Some(asked));
    assert!(r
        .ticks
        .iter()
        .any(|t| t.action == "capacity:1000000 clamped:300" && t.capacity_objects == Some(300)));
    // Without the ceiling the same policy grows the cache to every key (the old behaviour).
    let free = run(
        &config(Capacity::objects(143), Capacity::default()),
        Some(&mut AsksFor(1_000_000)),
    );
    assert_eq!(free.peak_cache_objects, 5_000);
    assert_eq!(free.capacity_clamps, None);
}

#[test]
fn a_policy_asking_for_less_is_obeyed() {
    let cfg = config(Capacity::objects(143), Capacity::objects(300));
    let r = run(&cfg, Some(&mut AsksFor(50)));
    assert!(r.peak_cache_objects <= 143);
    assert_eq!(r.final_cache_objects, 50);
    assert_eq!(r.capacity_clamps, Some(0));
}

#[test]
fn the_ceiling_bounds_an_unlimited_start_and_a_byte_limit() {
    // Unlimited start, no policy: the ceiling is the size.
    let r = run(&config(Capacity::default(), Capacity::objects(200)), None);
    assert_eq!(r.peak_cache_objects, 200);
    // A byte ceiling holds under a policy that sets objects only.
    let r = run(
        &config(Capacity::default(), Capacity::bytes(25_000)),
        Some(&mut AsksFor(1_000_000)),
    );
    assert_eq!(r.peak_cache_bytes, 25_000);
    assert_eq!(r.peak_cache_objects, 250);
    // A starting size above the ceiling starts at the ceiling.
    let r = run(
        &config(Capacity::objects(4_000), Capacity::objects(100)),
        None,
    );
    assert_eq!(r.peak_cache_objects, 100);
}
