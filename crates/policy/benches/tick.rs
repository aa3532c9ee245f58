//! Cost of policy ticks: the fan-detection policy over a 1M-event series (plain Lua scan,
//! native cold scan, native incremental), and the fixed per-tick overhead of the engine.
//!
//! Times are the benchmark thread's time **on the CPU** (`CLOCK_THREAD_CPUTIME_ID`), not wall
//! time: the project's machine is shared by several builds at once, and wall time there
//! measures the queue for the cores as much as the tick (a run at load 12 on 2 cores doubled
//! the trivial tick and quintupled the Lua scan).

use std::collections::VecDeque;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Bencher, Criterion};
use policy::{Limits, Metrics, Params, PolicyEngine, TickInput, TimeSeries};

/// A bounded access log. Filled from the real ParSplice trace when `../shared/traces` is
/// present (the workload dscache.lua is for), else with synthetic fans of the same shape.
struct Log {
    events: VecDeque<(f64, u64)>,
    /// Events not yet in the log, replayed by `slide`.
    pending: VecDeque<(f64, u64)>,
    /// Time from the first event to one past the last: an event dropped from the log comes
    /// back this much later at the end of `pending`, so the series never runs dry (criterion
    /// runs the incremental tick thousands of times) and its clock never goes backwards.
    span: f64,
    recorded: u64,
    /// Report `recorded()`, enabling incremental scans.
    incremental: bool,
}

impl Log {
    fn new(n: usize, incremental: bool) -> Log {
        let mut all = parsplice().unwrap_or_else(|| synthetic_fans(n + 100_000));
        let span = match (all.first(), all.last()) {
            (Some(first), Some(last)) => last.0 - first.0 + 1.0,
            _ => 1.0,
        };
        let pending = all.split_off(n.min(all.len()));
        Log {
            span,
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
            if let Some((t, key)) = self.events.pop_front() {
                self.pending.push_back((t + self.span, key));
            }
            self.recorded += 1;
        }
    }
}

fn parsplice() -> Option<Vec<(f64, u64)>> {
    use std::io::BufRead;
    const TRACE: &str =
        "shared/traces/parsplice/scale-workers-1-71538_rank4_workmanager_getput.csv.zst";
    // `shared/` sits beside the repository (CI, /work/main) or beside the directory that holds
    // it (a worktree under wt/); the two data sets time differently, so say which is used.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(file) = ["..", "../.."]
        .iter()
        .find_map(|up| std::fs::File::open(root.join(up).join(TRACE)).ok())
    else {
        eprintln!("dscache_1M: ParSplice trace not found; using synthetic fans");
        return None;
    };
    eprintln!("dscache_1M: the first 1M events of the ParSplice trace");
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

/// The calling thread's time on the CPU so far.
fn on_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Times `iters` runs of `f` in CPU time.
fn time_on_cpu(b: &mut Bencher, mut f: impl FnMut()) {
    b.iter_custom(|iters| {
        let start = on_cpu();
        for _ in 0..iters {
            f();
        }
        on_cpu() - start
    });
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
        time_on_cpu(b, || tick(&mut e, &servers, &lua_scan, &cold))
    });
    let mut e = engine("dscache.lua");
    group.bench_function("native_full_scan", |b| {
        time_on_cpu(b, || tick(&mut e, &servers, &Params::new(), &cold))
    });
    let mut warm = Log::new(1_000_000, true);
    let mut e = engine("dscache.lua");
    tick(&mut e, &servers, &Params::new(), &warm);
    group.bench_function("native_incremental_1000_new_events", |b| {
        time_on_cpu(b, || {
            warm.slide(1000);
            tick(&mut e, &servers, &Params::new(), &warm)
        })
    });
    // The same scan read as one table per fan (`timeseries():fans()`), as before
    // `:fansummary()`.
    let tables: Params = [policy::parse_param("scan=fans").unwrap()]
        .into_iter()
        .collect();
    let mut e = engine("dscache.lua");
    tick(&mut e, &servers, &tables, &warm);
    group.bench_function("fan_tables_incremental_1000_new_events", |b| {
        time_on_cpu(b, || {
            warm.slide(1000);
            tick(&mut e, &servers, &tables, &warm)
        })
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
        time_on_cpu(b, || tick(&mut e, &servers, &Params::new(), &empty))
    });
    let mut e = engine("fixed.lua");
    let p: Params = [policy::parse_param("n=5").unwrap()].into_iter().collect();
    c.bench_function("fixed_policy_tick", |b| {
        time_on_cpu(b, || tick(&mut e, &servers, &p, &empty))
    });
}

/// Criterion writes its reports under the workspace's (ignored) target directory whatever the
/// working directory: `$CRITERION_HOME`, else `$CARGO_TARGET_DIR/criterion`, else
/// `<workspace>/target/criterion`. Its own fallback, `./target/criterion`, resolves to
/// `crates/policy/target/` (untracked, not ignored) when `cargo metadata` cannot run.
fn config() -> Criterion {
    let dir = std::env::var_os("CRITERION_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR").map(|t| std::path::Path::new(&t).join("criterion"))
        })
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/criterion")
        });
    Criterion::default().output_directory(&dir)
}

criterion_group! {
    name = benches;
    config = config();
    targets = dscache, overhead
}
criterion_main!(benches);
