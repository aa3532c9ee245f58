//! Time ticks on hostile clocks: far-apart, huge, backwards and non-finite timestamps must
//! cost O(1) ticks per request and end in a report or a clock error, never a loop.

use std::sync::mpsc;
use std::time::Duration;

use cache::Capacity;
use sim::{
    replay, BackendSpec, Controller, ControllerSummary, ReplayConfig, ReplayError, ReplayReport,
    Tick, TickContext, TickDecision, MAX_EMPTY_TICKS,
};
use trace::{Op, Request};

/// Records the time of every tick.
#[derive(Default)]
struct Recorder {
    times: Vec<f64>,
}

impl Controller for Recorder {
    fn needs_access_log(&self) -> bool {
        false
    }
    fn tick(&mut self, ctx: &TickContext<'_>) -> TickDecision {
        self.times.push(ctx.now);
        TickDecision::default()
    }
    fn summary(&self) -> ControllerSummary {
        ControllerSummary::default()
    }
}

type Outcome = (Result<ReplayReport, ReplayError<()>>, Vec<f64>);

/// Replays requests at `times` with `tick` in a thread, failing (instead of hanging the
/// suite) if it has not finished within a generous bound.
fn replay_times(times: &[f64], tick: Tick) -> Outcome {
    replay_times_with(times, tick, true)
}

/// [`replay_times`], `watched` by a controller and metrics rows or by nothing (the loop
/// compiled without ticks).
fn replay_times_with(times: &[f64], tick: Tick, watched: bool) -> Outcome {
    let reqs: Vec<Request> = times
        .iter()
        .enumerate()
        .map(|(i, &time)| Request {
            time,
            key: i as u64,
            size: 1,
            op: Op::Get,
            offset: 0,
        })
        .collect();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let config = ReplayConfig {
            capacity: Capacity::objects(10),
            backend: BackendSpec::None,
            tick,
            record_ticks: watched,
            ..ReplayConfig::default()
        };
        let mut ctl = Recorder::default();
        let mut it = reqs.into_iter();
        let controller: Option<&mut dyn Controller> = if watched { Some(&mut ctl) } else { None };
        let result = replay(&config, controller, || Ok::<_, ()>(it.next()));
        let _ = tx.send((result, ctl.times));
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the replay did not finish: tick scheduling loops")
}

fn clock_error(outcome: &Outcome) -> (u64, String) {
    match &outcome.0 {
        Err(ReplayError::Clock {
            request, reason, ..
        }) => (*request, reason.clone()),
        other => panic!("expected a clock error, got {other:?}"),
    }
}

#[test]
fn a_time_beyond_exact_seconds_is_a_clock_error_not_a_loop() {
    // The input of issue 11 item 10: 1 s ticks from 0 to 1e20 s.
    for later in [1e20, 1e17, 9.1e15] {
        let outcome = replay_times(&[0.0, later], Tick::Seconds(1.0));
        let (request, reason) = clock_error(&outcome);
        assert_eq!(request, 2, "{later}");
        assert!(reason.contains("tick is finer than"), "{reason}");
        let text = match outcome.0 {
            Err(e @ ReplayError::Clock { .. }) => e.map_source(|()| "").to_string(),
            _ => unreachable!(),
        };
        assert!(text.starts_with("request 2 (time "), "{text}");
    }
}

#[test]
fn a_tick_finer_than_the_clock_resolution_is_a_clock_error() {
    // At 1e9 s an f64 resolves about 1.2e-7 s, so 1 ns boundaries cannot be told apart:
    // the first request already says so.
    let outcome = replay_times(&[1e9, 1e9 + 1.0], Tick::Seconds(1e-9));
    assert_eq!(clock_error(&outcome).0, 1);
    // A tick the clock resolves near the start but not after a jump fails at the jump.
    let outcome = replay_times(&[0.0, 1.0, 1e9], Tick::Seconds(1e-7));
    assert_eq!(clock_error(&outcome).0, 3);
}

#[test]
fn non_finite_times_are_clock_errors() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        for tick in [Tick::Seconds(1.0), Tick::Ops(1)] {
            let outcome = replay_times(&[0.0, 1.0, bad], tick);
            let (request, reason) = clock_error(&outcome);
            assert_eq!(request, 3);
            assert!(reason.contains("finite"), "{reason}");
        }
    }
}

#[test]
fn a_long_gap_runs_bounded_empty_ticks_then_one_for_the_rest() {
    let (result, times) = replay_times(&[0.0, 1e15, 1e15 + 0.5, 1e15 + 2.0], Tick::Seconds(1.0));
    let report = result.unwrap();
    let n = MAX_EMPTY_TICKS as usize;
    assert_eq!(
        times.len(),
        n + 1 + 2,
        "1000 empty ticks, one collapsed, two more"
    );
    assert_eq!(times[..3], [1.0, 2.0, 3.0]);
    assert_eq!(times[n - 1], n as f64);
    assert_eq!(times[n..], [1e15, 1e15 + 1.0, 1e15 + 2.0]);
    // Every request is counted in exactly one metrics row.
    assert_eq!(report.ticks.iter().map(|t| t.requests).sum::<u64>(), 4);
    assert_eq!(report.duration_seconds, Some(1e15 + 2.0));
}

#[test]
fn backwards_time_never_ticks_twice_at_one_boundary() {
    let (result, times) = replay_times(&[10.0, 5.0, 13.5, 3.0, 14.0, 12.0], Tick::Seconds(1.0));
    result.unwrap();
    assert_eq!(times, [11.0, 12.0, 13.0, 14.0]);
}

#[test]
fn negative_and_fractional_origins_tick_on_their_own_grid() {
    let (result, times) = replay_times(&[-2.5, -1.0, 0.75], Tick::Seconds(1.5));
    result.unwrap();
    assert_eq!(times, [-1.0, 0.5]);
}

/// The loop nobody watches skips every clock check for a request at the previous request's
/// time: it must refuse the same request for the same reason (the first request lays the tick
/// grid, so a tick too fine for it fails there), and integrate the same time-weighted means
/// over repeated and backwards times.
#[test]
fn the_unwatched_loop_refuses_and_integrates_like_the_watched_one() {
    let cases: [(&[f64], Tick); 7] = [
        (&[1e9, 1e9, 1e9 + 1.0], Tick::Seconds(1e-9)),
        (&[0.0, 1.0, 1.0, 1e9], Tick::Seconds(1e-7)),
        (&[0.0, 0.0, f64::NAN], Tick::Seconds(1.0)),
        (&[3.0, 3.0, f64::INFINITY], Tick::Ops(1)),
        (&[f64::NEG_INFINITY, 1.0], Tick::Seconds(1.0)),
        (&[0.0, 0.0, 1e20], Tick::Seconds(1.0)),
        (
            &[
                10.0, 10.0, 5.0, 5.0, 13.5, 3.0, 10.0, 14.0, 14.0, 12.0, 20.25,
            ],
            Tick::Seconds(1.0),
        ),
    ];
    for (times, tick) in cases {
        let watched = replay_times_with(times, tick, true).0;
        let unwatched = replay_times_with(times, tick, false).0;
        match (watched, unwatched) {
            (Ok(a), Ok(b)) => {
                let means = |r: &ReplayReport| {
                    (
                        r.requests,
                        r.duration_seconds,
                        r.time_mean_cache_objects,
                        r.time_mean_cache_bytes,
                        r.mean_cache_objects,
                        r.misses,
                    )
                };
                assert!(a.time_mean_cache_objects.is_some(), "{times:?}");
                assert_eq!(means(&a), means(&b), "{times:?}");
            }
            (Err(a), Err(b)) => {
                let text = |e: ReplayError<()>| e.map_source(|()| "").to_string();
                assert_eq!(text(a), text(b), "{times:?}");
            }
            (a, b) => panic!("{times:?}: watched {a:?}, unwatched {b:?}"),
        }
    }
}
