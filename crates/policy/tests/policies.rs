//! The shipped policies behave as their headers say, on synthetic metrics and series, and
//! `dscache.lua` meets its targets on the real ParSplice trace.

mod common;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{BufRead, BufReader};

use common::*;
use policy::{Action, Metrics, Params, PolicyEngine, TimeSeries, VecSeries};

#[test]
fn fixed_evicts_down_to_n() {
    let mut e = engine("fixed", &shipped("fixed.lua"));
    let p = params(&[("n", "100")]);
    let none = VecSeries::default();
    let out = tick_on(&mut e, &[metrics(150.0)], &p, &none);
    assert_eq!(out.decision.action, Action::Evict(50));
    let out = tick_on(&mut e, &[metrics(80.0)], &p, &none);
    assert_eq!(
        (out.decision.when, out.decision.action),
        (Some(false), Action::None)
    );
    // Default n = 100000.
    assert_eq!(tick(&mut e, 100_001.0).decision.action, Action::Evict(1));
    assert_eq!(tick(&mut e, 99_999.0).decision.action, Action::None);
}

#[test]
fn multipolicy_is_unlimited_until_the_burst_is_absorbed() {
    let mut e = engine("multipolicy", &shipped("multipolicy.lua"));
    let p = params(&[("n", "10"), ("absorb", "100")]);
    let none = VecSeries::default();
    let at = |e: &mut PolicyEngine, size: f64| tick_on(e, &[metrics(size)], &p, &none);
    assert_eq!(
        at(&mut e, 50.0).decision.action,
        Action::None,
        "burst not absorbed yet"
    );
    assert_eq!(at(&mut e, 99.0).decision.action, Action::None);
    assert_eq!(at(&mut e, 150.0).decision.action, Action::Evict(140));
    assert_eq!(
        at(&mut e, 50.0).decision.action,
        Action::Evict(40),
        "constrained now"
    );
    assert_eq!(at(&mut e, 5.0).decision.action, Action::None);
    // The absorbed flag is policy state: it survives a reload.
    e.replace(&shipped("multipolicy.lua")).unwrap();
    assert_eq!(at(&mut e, 60.0).decision.action, Action::Evict(50));
}

#[test]
fn decay_keeps_only_keys_accessed_within_the_history() {
    let mut e = engine("decay", &shipped("decay.lua"));
    // Keys 0..5 long ago, keys 7, 8, 9 (and 8 again) in the last 10 seconds.
    let mut events: Vec<(f64, u64)> = (0..5).map(|k| (k as f64, k)).collect();
    events.extend([(95.0, 7), (96.0, 8), (99.0, 9), (100.0, 8)]);
    let series = VecSeries::new(events);
    let out = tick_at(&mut e, 100.0, &[metrics(10.0)], &Params::new(), &series);
    assert!(out.error.is_none(), "{:?}", out.error);
    assert_eq!(out.decision.action, Action::Evict(7), "10 cached, 3 alive");
    let p = params(&[("history", "2")]);
    let out = tick_at(&mut e, 100.0, &[metrics(10.0)], &p, &series);
    assert_eq!(
        out.decision.action,
        Action::Evict(8),
        "only 9 and 8 are alive"
    );
    let out = tick_at(&mut e, 100.0, &[metrics(3.0)], &Params::new(), &series);
    assert_eq!(out.decision.when, Some(false));
}

#[test]
fn greedyspill_sends_half_the_load_to_an_idle_neighbour() {
    let mut e = engine("greedyspill", &shipped("greedyspill.lua"));
    assert!(e.is_ceph_dialect());
    let loads = |ls: &[f64]| -> Vec<Metrics> {
        ls.iter()
            .map(|&load| Metrics {
                load,
                ..Metrics::default()
            })
            .collect()
    };
    let none = VecSeries::default();
    let run = |e: &mut PolicyEngine, whoami: usize, servers: &[Metrics]| {
        let input = policy::TickInput {
            now: 0.0,
            tick: 1,
            whoami,
            servers,
            params: &Params::new(),
            timeseries: &none,
        };
        let out = e.tick(&input);
        assert!(out.error.is_none(), "{:?}", out.error);
        out.decision.targets
    };
    assert_eq!(run(&mut e, 0, &loads(&[4.0, 0.0, 0.0])), vec![(1, 2.0)]);
    assert_eq!(run(&mut e, 1, &loads(&[4.0, 6.0, 0.0])), vec![(2, 3.0)]);
    assert!(
        run(&mut e, 0, &loads(&[4.0, 1.0, 0.0])).is_empty(),
        "neighbour busy"
    );
    assert!(
        run(&mut e, 2, &loads(&[0.0, 0.0, 5.0])).is_empty(),
        "no right neighbour"
    );
    assert!(
        run(&mut e, 0, &loads(&[0.0, 0.0])).is_empty(),
        "nothing to shed"
    );
}

/// Fans of the given heights, oldest first: each fan reads ids `base..base+height` at random.
fn synthetic_fans(heights: &[u64]) -> VecSeries {
    let mut series = VecSeries::default();
    let (mut base, mut t, mut x) = (0u64, 0.0, 0x9e3779b97f4a7c15u64);
    for &h in heights {
        for j in 0..h {
            series.push(t, base + j); // first access, in order: dense ids
            t += 0.01;
        }
        for _ in 0..(20 * h) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            series.push(t, base + x % h);
            t += 0.01;
        }
        // The fan's bottom is re-read at its end so the backward scan sees the whole fan.
        series.push(t, base);
        base += h;
    }
    series
}

#[test]
fn dscache_sizes_the_cache_to_the_tallest_fan() {
    let mut e = engine("dscache", &shipped("dscache.lua"));
    let series = synthetic_fans(&[50, 400, 120]);
    let out = tick_on(&mut e, &[metrics(570.0)], &Params::new(), &series);
    assert!(out.error.is_none(), "{:?}", out.error);
    // Tallest fan: ids 50..450, height 399 → ceil(399 * 1.5) + 2.
    assert_eq!(out.decision.action, Action::SetCapacity(601));
    // Once that capacity is in force there is nothing to do.
    let applied = Metrics {
        cachesize: 570.0,
        capacity: 601.0,
        ..Metrics::default()
    };
    let out = tick_on(&mut e, &[applied], &Params::new(), &series);
    assert_eq!(
        (out.decision.when, out.decision.action),
        (Some(false), Action::None)
    );
    // Without a fan boundary there is no basis for sizing.
    let one = VecSeries::new(vec![(0.0, 3), (1.0, 4)]);
    let out = tick_on(&mut e, &[metrics(2.0)], &Params::new(), &one);
    assert_eq!(out.decision.when, Some(true), "two ids rising are two fans");
    let flat = VecSeries::new(vec![(0.0, 3), (1.0, 3)]);
    let out = tick_on(&mut e, &[metrics(2.0)], &Params::new(), &flat);
    assert_eq!(out.decision.when, Some(false));
}

#[test]
fn dscache_plain_lua_scan_agrees_with_the_native_one() {
    let series = synthetic_fans(&[30, 200, 90, 260, 10]);
    let mut native = engine("dscache", &shipped("dscache.lua"));
    let mut lua = engine("dscache", &shipped("dscache.lua"));
    let a = tick_on(&mut native, &[metrics(0.0)], &Params::new(), &series);
    let b = tick_on(
        &mut lua,
        &[metrics(0.0)],
        &params(&[("scan", "lua")]),
        &series,
    );
    assert!(
        a.error.is_none() && b.error.is_none(),
        "{:?} {:?}",
        a.error,
        b.error
    );
    assert_eq!(a.decision, b.decision);
    assert_eq!(a.decision.action, Action::SetCapacity(391));
}

/// A bounded access log, as a host keeps one.
struct Ring {
    events: VecDeque<(f64, u64)>,
    limit: usize,
    recorded: u64,
}

impl TimeSeries for Ring {
    fn len(&self) -> usize {
        self.events.len()
    }
    fn get(&self, i: usize) -> (f64, u64) {
        self.events[i]
    }
    fn recorded(&self) -> Option<u64> {
        Some(self.recorded)
    }
}

/// Just enough LRU for the test: a recency stamp per key, ordered by stamp.
#[derive(Default)]
struct Lru {
    stamp_of: HashMap<u64, u64>,
    by_stamp: BTreeMap<u64, u64>,
    clock: u64,
}

impl Lru {
    fn touch(&mut self, key: u64) -> bool {
        self.clock += 1;
        let hit = match self.stamp_of.insert(key, self.clock) {
            Some(old) => {
                self.by_stamp.remove(&old);
                true
            }
            None => false,
        };
        self.by_stamp.insert(self.clock, key);
        hit
    }
    fn shrink_to(&mut self, capacity: usize) {
        while self.stamp_of.len() > capacity {
            let (_, key) = self.by_stamp.pop_first().unwrap();
            self.stamp_of.remove(&key);
        }
    }
}

#[test]
fn dscache_on_the_parsplice_trace_saves_memory_without_misses() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/traces/parsplice/scale-workers-1-71538_rank4_workmanager_getput.csv.zst"
    );
    let Ok(file) = std::fs::File::open(path) else {
        println!("skipping: ParSplice trace not found at {path}");
        return;
    };
    let reader = BufReader::new(zstd::Decoder::new(file).unwrap());
    let mut ids: HashMap<u64, u64> = HashMap::new();
    let mut engine = engine("dscache", &shipped("dscache.lua"));
    let mut log = Ring {
        events: VecDeque::new(),
        limit: 1_000_000,
        recorded: 0,
    };
    let mut lru = Lru::default();
    let mut capacity = usize::MAX;
    let (mut gets, mut misses, mut requests) = (0u64, 0u64, 0u64);
    let (mut size_sum, mut unlimited_sum) = (0u128, 0u128);
    let mut last_second = None;
    for line in reader.lines().skip(1) {
        let line = line.unwrap();
        let mut fields = line.split(',');
        let (t, op, key) = (fields.next(), fields.next(), fields.next());
        let t: f64 = t.unwrap().parse().unwrap();
        let key: u64 = key.unwrap().parse().unwrap();
        if last_second.is_some_and(|s| s != t) {
            let m = Metrics {
                cachesize: lru.stamp_of.len() as f64,
                capacity: if capacity == usize::MAX {
                    f64::INFINITY
                } else {
                    capacity as f64
                },
                ..Metrics::default()
            };
            let out = tick_at(&mut engine, t, &[m], &Params::new(), &log);
            assert!(out.error.is_none(), "{:?}", out.error);
            match out.decision.action {
                Action::SetCapacity(n) => capacity = n as usize,
                Action::Evict(n) => panic!("dscache only sets capacity, asked to evict {n}"),
                Action::None => {}
            }
            lru.shrink_to(capacity);
        }
        last_second = Some(t);
        let next = ids.len() as u64;
        let id = *ids.entry(key).or_insert(next);
        log.events.push_back((t, id));
        log.recorded += 1;
        if log.events.len() > log.limit {
            log.events.pop_front();
        }
        let hit = lru.touch(id);
        if op == Some("GET") {
            gets += 1;
            misses += u64::from(!hit);
        }
        lru.shrink_to(capacity);
        requests += 1;
        size_sum += lru.stamp_of.len() as u128;
        unlimited_sum += ids.len() as u128;
    }
    let miss_ratio = misses as f64 / gets as f64;
    let relative = size_sum as f64 / unlimited_sum as f64;
    println!(
        "dscache on ParSplice: {requests} requests, miss ratio {:.4}%, mean cache {:.0} objects = {relative:.3}x unlimited ({:.0}), {} ticks",
        miss_ratio * 100.0,
        size_sum as f64 / requests as f64,
        unlimited_sum as f64 / requests as f64,
        engine.stats().ticks
    );
    assert_eq!(requests, 1_091_758);
    assert!(miss_ratio <= 0.001, "miss ratio {miss_ratio}");
    assert!(relative <= 0.3, "mean cache size {relative}x of unlimited");
}

/// Random accesses (xorshift, fixed seed): ids drift upwards with noise, an old id returns
/// now and then (a fan spanning most of the window), and with `step_back` the clock steps
/// back a little now and then, as some hosts' clocks do.
fn random_accesses(n: usize, seed: u64, step_back: bool) -> Vec<(f64, u64)> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|i| {
            let r = next();
            let id = if r % 991 == 0 {
                r % 7
            } else {
                i as u64 / 8 + r % (1 + seed * 37 % 300)
            };
            let jitter = if step_back && next() % 40 == 0 {
                -2.0
            } else {
                0.0
            };
            (i as f64 * 0.05 + jitter, id)
        })
        .collect()
}

/// Runs every engine tick by tick over `events` in a sliding window (chunks of random size),
/// feeding each tick's decision back as the capacity, and asserts that they all decide alike.
fn decide_alike(engines: &mut [(&str, PolicyEngine, Params)], events: &[(f64, u64)], seed: u64) {
    let mut series = VecSeries::default();
    let (mut x, mut i, mut capacity, mut tick) = (seed | 1, 0, f64::INFINITY, 0);
    while i < events.len() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let chunk = 1 + (x % 900) as usize;
        for &(t, id) in &events[i..(i + chunk).min(events.len())] {
            series.push(t, id);
        }
        i += chunk;
        if series.len() > 4000 {
            series.drop_oldest(series.len() - 4000);
        }
        tick += 1;
        let now = series.events().last().unwrap().0;
        let servers = [Metrics {
            cachesize: (x >> 20) as f64 % 3000.0,
            capacity,
            ..Metrics::default()
        }];
        let mut first = None;
        for (name, engine, params) in engines.iter_mut() {
            let out = tick_at(engine, now, &servers, params, &series);
            assert!(out.error.is_none(), "{name} tick {tick}: {:?}", out.error);
            match &first {
                None => first = Some((name.to_string(), out.decision)),
                Some((first_name, d)) => assert_eq!(
                    &out.decision, d,
                    "seed {seed} tick {tick}: {name} decided otherwise than {first_name}"
                ),
            }
        }
        if let Some((_, d)) = first {
            if let Action::SetCapacity(n) = d.action {
                capacity = n as f64;
            }
        }
    }
}

#[test]
fn native_scans_decide_like_the_plain_lua_ones_on_random_streams() {
    for seed in [3u64, 17, 101, 4242] {
        let step_back = seed % 2 == 1;
        let events = random_accesses(25_000, seed, step_back);
        let mut dscache: Vec<(&str, PolicyEngine, Params)> = ["native", "fans", "lua"]
            .into_iter()
            .map(|scan| {
                (
                    scan,
                    engine("dscache", &shipped("dscache.lua")),
                    params(&[("scan", scan)]),
                )
            })
            .collect();
        decide_alike(&mut dscache, &events, seed);
        let mut decay: Vec<(&str, PolicyEngine, Params)> = ["native", "lua"]
            .into_iter()
            .map(|scan| {
                (
                    scan,
                    engine("decay", &shipped("decay.lua")),
                    params(&[("scan", scan), ("history", "7")]),
                )
            })
            .collect();
        decide_alike(&mut decay, &events, seed);
    }
}
