//! Behaviour of the replay loop on small hand-made traces: request semantics, metrics,
//! ticks and the application of controller actions.

use cache::Capacity;
use sim::{
    replay, Action, BackendSpec, Controller, ControllerSummary, ReplayConfig, ReplayReport, Tick,
    TickContext, TickDecision,
};
use trace::{Op, Request};

fn req(time: f64, op: Op, key: u64, size: u32) -> Request {
    Request {
        time,
        key,
        size,
        op,
        offset: 0,
    }
}

fn run(config: &ReplayConfig, reqs: &[Request], ctl: Option<&mut dyn Controller>) -> ReplayReport {
    let mut it = reqs.iter().copied();
    replay(config, ctl, || Ok::<_, ()>(it.next())).unwrap()
}

fn objects(n: u64) -> Capacity {
    Capacity {
        objects: Some(n),
        bytes: None,
    }
}

#[test]
fn gets_miss_then_hit_puts_write_through_deletes_remove() {
    let reqs = [
        req(0.0, Op::Get, 1, 10),    // miss, back-end read, insert
        req(1.0, Op::Get, 1, 10),    // hit
        req(2.0, Op::Put, 2, 20),    // write-through, insert
        req(3.0, Op::Get, 2, 20),    // hit thanks to the put
        req(4.0, Op::Delete, 1, 10), // removed, back-end write
        req(5.0, Op::Get, 1, 10),    // miss again
        req(6.0, Op::Access, 3, 30), // access: lookup that inserts on miss
    ];
    let config = ReplayConfig {
        capacity: objects(100),
        backend: BackendSpec::None,
        ..ReplayConfig::default()
    };
    let r = run(&config, &reqs, None);
    assert_eq!(r.requests, 7);
    assert_eq!((r.gets, r.puts, r.deletes, r.accesses), (4, 1, 1, 1));
    assert_eq!((r.hits, r.misses), (2, 3));
    assert!((r.miss_ratio - 3.0 / 5.0).abs() < 1e-12);
    // Misses were 10 + 10 + 30 bytes of 10 + 10 + 20 + 10 + 30 looked up.
    assert!((r.byte_miss_ratio.unwrap() - 50.0 / 80.0).abs() < 1e-12);
    assert_eq!((r.backend.reads, r.backend.writes), (3, 2));
    assert_eq!(r.peak_cache_objects, 3);
    assert_eq!(r.final_cache_objects, 3);
    assert_eq!(r.duration_seconds, Some(6.0));
    assert!(r.policy.is_none());
}

#[test]
fn capacity_bounds_the_cache_and_means_are_weighted_as_documented() {
    // Keys 1..=4 each accessed once, capacity 2 objects, one request per second.
    let reqs: Vec<_> = (1..=4).map(|k| req(k as f64, Op::Access, k, 1)).collect();
    let config = ReplayConfig {
        capacity: objects(2),
        backend: BackendSpec::None,
        ..ReplayConfig::default()
    };
    let r = run(&config, &reqs, None);
    assert_eq!(r.peak_cache_objects, 2);
    assert_eq!(r.evictions, 2);
    // Sizes after each request: 1, 2, 2, 2.
    assert!((r.mean_cache_objects - 7.0 / 4.0).abs() < 1e-12);
    // Between t=1..4 the cache held 1 object for 1 s and 2 objects for 2 s.
    assert!((r.time_mean_cache_objects.unwrap() - 5.0 / 3.0).abs() < 1e-12);
}

#[test]
fn a_trace_without_timestamps_has_no_time_figures() {
    let reqs: Vec<_> = (0..10).map(|k| req(0.0, Op::Access, k % 3, 1)).collect();
    let config = ReplayConfig {
        capacity: objects(10),
        ..ReplayConfig::default()
    };
    let r = run(&config, &reqs, None);
    assert_eq!(r.time_mean_cache_objects, None);
    assert_eq!(r.duration_seconds, None);
    assert_eq!(r.backend.peak_rate, None);
    assert_eq!(r.backend.p99_read_latency_ms, None);
    assert_eq!(r.backend.reads, 3);
}

/// Evicts down to `target` objects at every tick (or, with `as_capacity`, sets the capacity
/// to it) and records what it saw.
struct Shrinker {
    target: u64,
    seen: Vec<(u64, f64, f64, usize)>,
    fail_on_tick: Option<u64>,
    as_capacity: bool,
}

impl Controller for Shrinker {
    fn tick(&mut self, ctx: &TickContext<'_>) -> TickDecision {
        self.seen.push((
            ctx.tick,
            ctx.now,
            ctx.metrics.cachesize,
            ctx.access_log.len(),
        ));
        if Some(ctx.tick) == self.fail_on_tick {
            return TickDecision {
                action: Action::None,
                error: Some("boom".into()),
            };
        }
        let action = if self.as_capacity {
            Action::SetCapacity(self.target)
        } else {
            Action::Evict((ctx.metrics.cachesize as u64).saturating_sub(self.target))
        };
        TickDecision {
            action,
            error: None,
        }
    }
    fn summary(&self) -> ControllerSummary {
        ControllerSummary {
            name: "shrinker".into(),
            ..ControllerSummary::default()
        }
    }
}

#[test]
fn ticks_run_on_trace_time_and_actions_apply_before_the_next_request() {
    // Ten distinct keys at t = 0.0, 0.5, ..., 4.5; a tick every second.
    let reqs: Vec<_> = (0..10)
        .map(|k| req(k as f64 * 0.5, Op::Get, k, 1))
        .collect();
    let config = ReplayConfig {
        capacity: objects(100),
        backend: BackendSpec::None,
        tick: Tick::Seconds(1.0),
        record_ticks: true,
        ..ReplayConfig::default()
    };
    let mut ctl = Shrinker {
        target: 1,
        seen: vec![],
        fail_on_tick: Some(3),
        as_capacity: false,
    };
    let r = run(&config, &reqs, Some(&mut ctl));
    // Ticks at t = 1, 2, 3, 4 (each before the request at that time), plus the closing row.
    let times: Vec<f64> = ctl.seen.iter().map(|s| s.1).collect();
    assert_eq!(times, vec![1.0, 2.0, 3.0, 4.0]);
    // Before the first tick two keys were cached; afterwards the cache is held at 1 + the
    // keys inserted since the last tick (2 per second).
    assert_eq!(ctl.seen[0].2, 2.0);
    assert_eq!(ctl.seen[1].2, 3.0);
    // Tick 3 failed: no action, so the cache grew to 5 by tick 4.
    assert_eq!(ctl.seen[3].2, 5.0);
    assert_eq!(ctl.seen[3].3, 8, "access log holds every get so far");
    let policy = r.policy.unwrap();
    assert_eq!(policy.name, "shrinker");
    assert_eq!((policy.actions, policy.errors), (3, 1));
    assert_eq!(r.ticks.len(), 5);
    assert_eq!(r.ticks[0].action, "evict:1");
    assert!(r.ticks[2].policy_error);
    assert_eq!(r.ticks[2].action, "");
    let rows: u64 = r.ticks.iter().map(|t| t.requests).sum();
    assert_eq!(rows, 10, "every request falls in exactly one tick row");
}

#[test]
fn ticks_by_operation_count() {
    let reqs: Vec<_> = (0..10).map(|k| req(0.0, Op::Get, k, 1)).collect();
    let config = ReplayConfig {
        capacity: objects(100),
        tick: Tick::Ops(4),
        ..ReplayConfig::default()
    };
    let mut ctl = Shrinker {
        target: 2,
        seen: vec![],
        fail_on_tick: None,
        as_capacity: false,
    };
    let r = run(&config, &reqs, Some(&mut ctl));
    let sizes: Vec<f64> = ctl.seen.iter().map(|s| s.2).collect();
    assert_eq!(sizes, vec![4.0, 6.0]);
    assert_eq!(r.final_cache_objects, 4);
}

#[test]
fn tick_parsing() {
    assert_eq!("1s".parse(), Ok(Tick::Seconds(1.0)));
    assert_eq!("200ms".parse(), Ok(Tick::Seconds(0.2)));
    assert_eq!("1000ops".parse(), Ok(Tick::Ops(1000)));
    assert!("0ops".parse::<Tick>().is_err());
    assert!("soon".parse::<Tick>().unwrap_err().contains("soon"));
}

#[test]
fn a_capacity_action_holds_for_later_requests() {
    let reqs: Vec<_> = (0..10).map(|k| req(k as f64, Op::Get, k, 1)).collect();
    let config = ReplayConfig {
        capacity: Capacity::default(),
        backend: BackendSpec::None,
        tick: Tick::Seconds(3.0),
        record_ticks: true,
        ..ReplayConfig::default()
    };
    let mut ctl = Shrinker {
        target: 2,
        seen: vec![],
        fail_on_tick: None,
        as_capacity: true,
    };
    let r = run(&config, &reqs, Some(&mut ctl));
    assert_eq!(
        r.peak_cache_objects, 3,
        "unlimited until the first tick at t=3"
    );
    assert_eq!(r.final_cache_objects, 2);
    assert_eq!(r.ticks[0].action, "capacity:2");
    assert_eq!(r.ticks[0].capacity_objects, Some(2));
}
