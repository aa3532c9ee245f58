//! Cost of policy ticks: the fan-detection policy over a 1M-event series (plain Lua scan,
//! native cold scan, native incremental), and the fixed per-tick overhead of the engine.

use std::collections::VecDeque;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use policy::{Limits, Metrics, Params, PolicyEngine, TickInput, TimeSeries};

/// A bounded access log. Filled from the real ParSplice trace when `../shared/traces` is
/// present (the workload dscache.lua is for), else with synthetic fans of the same shape.
struct Log {
    events: VecDeque<(f64, u64)>,
    /// Events not yet in the log, replayed by `slide`.
    pending: VecDeque<(f64, u64)>,
    recorded: u64,
    /// Report `recorded()`, enabling incremental scans.
    incremental: bool,
}

impl Log {
    fn new(n: usize, incremental: bool) -> Log {
        let mut all = parsplice().unwrap_or_else(|| synthetic_fans(n + 100_000));
        let pending = all.split_off(n.min(all.len()));
        Log {
            recorded: all.len() as u64,
            events: all.into(),
            pending: pending.into(),
            incremental,
        }
    }

    /// Records `n` more events and drops as many of the oldest.
    fn slide(&mut self, n: usize) {
        for _ in 0..n {
            let Some(e) = self.pending.pop_front() else {
                return;
            };
            self.events.push_back(e);
            self.events.pop_front();
            self.recorded += 1;
        }
    }
}

fn parsplice() -> Option<Vec<(f64, u64)>> {
    use std::io::BufRead;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/traces/parsplice/scale-workers-1-71538_rank4_workmanager_getput.csv.zst"
    );
    let file = std::fs::File::open(path).ok()?;
    let reader = std::io::BufReader::new(zstd::Decoder::new(file).ok()?);
    let mut ids = std::collections::HashMap::new();
    let mut events = Vec::new();
    for line in reader.lines().skip(1) {
        let line = line.ok()?;
        let mut f = line.split(',');
        let t: f64 = f.next()?.parse().ok()?;
        let key = f.nth(1)?.to_string();
        let next = ids.len() as u64;
        events.push((t, *ids.entry(key).or_insert(next)));
    }
    Some(events)
}

/// Fans of 50..550 keys, each read at random 20 times per key, bottom re-read at the end.
fn synthetic_fans(n: usize) -> Vec<(f64, u64)> {
    let (mut events, mut base, mut x) = (Vec::with_capacity(n), 0u64, 0x2545f4914f6cdd1du64);
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    while events.len() < n {
        let h = 50 + rand() % 500;
        for j in 0..h {
            events.push((events.len() as f64 * 0.01, base + j));
        }
        for _ in 0..20 * h {
            events.push((events.len() as f64 * 0.01, base + rand() % h));
        }
        events.push((events.len() as f64 * 0.01, base));
        base += h;
    }
    events.truncate(n);
    events
}

impl TimeSeries for Log {
    fn len(&self) -> usize {
        self.events.len()
    }
    fn get(&self, i: usize) -> (f64, u64) {
        self.events[i]
    }
    fn recorded(&self) -> Option<u64> {
        self.incremental.then_some(self.recorded)
    }
}

fn engine(file: &str) -> PolicyEngine {
    let path = format!("{}/../../policies/{file}", env!("CARGO_MANIFEST_DIR"));
    let mut e = PolicyEngine::new(Limits::default());
    e.load_file(path.as_ref()).expect("policy loads");
    e
}

fn tick(e: &mut PolicyEngine, servers: &[Metrics], params: &Params, series: &dyn TimeSeries) {
    let out = e.tick(&TickInput {
        now: 1.0,
        tick: 1,
        whoami: 0,
        servers,
        params,
        timeseries: series,
    });
    assert!(out.error.is_none(), "{:?}", out.error);
}

fn dscache(c: &mut Criterion) {
    let servers = [Metrics::default()];
    let mut group = c.benchmark_group("dscache_1M");
    group.sample_size(10);

    let cold = Log::new(1_000_000, false);
    let lua_scan: Params = [policy::parse_param("scan=lua").unwrap()]
        .into_iter()
        .collect();
    let mut e = engine("dscache.lua");
    group.bench_function("plain_lua_scan", |b| {
        b.iter(|| tick(&mut e, &servers, &lua_scan, &cold))
    });
    let mut e = engine("dscache.lua");
    group.bench_function("native_full_scan", |b| {
        b.iter(|| tick(&mut e, &servers, &Params::new(), &cold))
    });
    let mut warm = Log::new(1_000_000, true);
    let mut e = engine("dscache.lua");
    tick(&mut e, &servers, &Params::new(), &warm);
    group.bench_function("native_incremental_1000_new_events", |b| {
        b.iter_batched(
            || (),
            |()| {
                warm.slide(1000);
                tick(&mut e, &servers, &Params::new(), &warm)
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn overhead(c: &mut Criterion) {
    let servers = [Metrics {
        cachesize: 10.0,
        ..Metrics::default()
    }];
    let empty = Log::new(0, true);
    let mut e = PolicyEngine::new(Limits::default());
    e.load("trivial", "function when() return false end")
        .unwrap();
    c.bench_function("trivial_policy_tick", |b| {
        b.iter(|| tick(&mut e, &servers, &Params::new(), &empty))
    });
    let mut e = engine("fixed.lua");
    let p: Params = [policy::parse_param("n=5").unwrap()].into_iter().collect();
    c.bench_function("fixed_policy_tick", |b| {
        b.iter(|| tick(&mut e, &servers, &p, &empty))
    });
}

criterion_group!(benches, dscache, overhead);
criterion_main!(benches);
