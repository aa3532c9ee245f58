//! Replay with classes (`--classes`) and with a restart and warm-up (`--restart-at`,
//! `--warmup`), on small generated traces.

use cache::classes::ClassSet;
use cache::{Algorithm, Capacity};
use sim::{replay, BackendSpec, ReplayConfig, ReplayReport, Strategy, WarmupConfig, WarmupSpec};
use trace::{Op, Request};

fn run(config: &ReplayConfig, reqs: &[Request]) -> ReplayReport {
    let mut it = reqs.iter().copied();
    replay(config, None, || Ok::<_, ()>(it.next())).unwrap()
}

/// A skewed random stream over `keys` keys (deterministic).
fn stream(n: usize, keys: u64, seed: u64) -> Vec<Request> {
    let mut x = seed;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x % 1_000_000) as f64 / 1e6;
            let key = ((u * u * u) * keys as f64) as u64;
            Request {
                time: i as f64 / 100.0,
                key,
                size: 100 + (key % 7) as u32 * 50,
                op: if i % 10 == 0 { Op::Put } else { Op::Get },
                offset: key * 4096,
            }
        })
        .collect()
}

const HEADER: &str = "IO class id,IO class name,Eviction priority,Allocation\n";

fn classes(body: &str) -> ClassSet {
    ClassSet::parse(&format!("{HEADER}{body}"), "test").unwrap()
}

#[test]
fn one_class_behaves_exactly_like_the_plain_cache() {
    let reqs = stream(30_000, 5_000, 7);
    for algorithm in Algorithm::ALL {
        for capacity in [Capacity::objects(300), Capacity::bytes(40_000)] {
            let plain = ReplayConfig {
                algorithm,
                capacity,
                backend: BackendSpec::None,
                ..ReplayConfig::default()
            };
            let classed = ReplayConfig {
                classes: Some(classes("0,unclassified,7,1\n")),
                ..plain.clone()
            };
            let (a, b) = (run(&plain, &reqs), run(&classed, &reqs));
            assert_eq!(
                (a.hits, a.misses),
                (b.hits, b.misses),
                "{algorithm} {capacity:?}"
            );
            assert_eq!(a.evictions, b.evictions, "{algorithm} {capacity:?}");
            assert!(a.classes.is_none());
            let c = &b.classes.as_ref().unwrap()[0];
            assert_eq!((c.stats.hits, c.stats.misses), (b.hits, b.misses));
            assert_eq!(c.stats.objects, b.final_cache_objects);
        }
    }
}

#[test]
fn hard_pinned_keys_survive_any_pressure_in_replay() {
    // Keys whose decimal rendering starts with 7 are hard-pinned, up to 10% of the cache.
    let reqs = stream(50_000, 20_000, 3);
    let config = ReplayConfig {
        capacity: Capacity::objects(500),
        backend: BackendSpec::None,
        classes: Some(classes(
            "0,unclassified,100,1\n1,key_prefix:7&done,,0.1\n2,size:ge:300,200,0.5\n",
        )),
        ..ReplayConfig::default()
    };
    let r = run(&config, &reqs);
    let cs = r.classes.as_ref().unwrap();
    let pinned = &cs[1];
    assert_eq!(pinned.pinning, "hard");
    assert_eq!(pinned.stats.evictions, 0);
    assert_eq!(pinned.stats.objects, 50, "filled to its 10% cap and kept");
    assert!(
        pinned.stats.refused > 0,
        "further pinned keys were refused, not swapped in"
    );
    assert!(cs[2].stats.objects <= 250, "class 2 within its 50% cap");
    assert!(cs[0].stats.evictions + cs[2].stats.evictions == r.evictions);
    assert!(r.peak_cache_objects <= 500);
}

#[test]
fn restart_with_last_k_loads_k_and_converges_before_on_demand() {
    // A loop over 400 keys in a 500-object LRU cache: always-warm hits everything after the
    // first pass; a cold restart misses a whole pass; Last-K with K = 400 misses nothing.
    let reqs: Vec<Request> = (0..20_000u64)
        .map(|i| Request {
            time: i as f64,
            key: 1_000 + (i % 400) * 3,
            size: 1,
            op: Op::Get,
            offset: 0,
        })
        .collect();
    let base = |spec: Option<WarmupSpec>| ReplayConfig {
        capacity: Capacity::objects(500),
        backend: BackendSpec::None,
        warmup: Some(WarmupConfig {
            restart_at: 10_000,
            spec,
            window_lookups: 100,
            ..WarmupConfig::default()
        }),
        ..ReplayConfig::default()
    };
    let last_k = WarmupSpec {
        strategy: Strategy::LastK,
        k: 400,
        period: None,
        share_ppm: None,
    };
    let r = run(&base(Some(last_k)), &reqs);
    let w = r.warmup.as_ref().unwrap();
    assert_eq!(w.strategy.as_deref(), Some("lastk"));
    assert_eq!(w.loaded_objects, 400);
    assert_eq!(w.bulk_load_reads, 400);
    assert_eq!(w.convergence_requests, Some(0));
    assert_eq!(w.convergence_requests_loose, Some(0));
    assert_eq!(w.ondemand_convergence_requests, Some(400));
    assert_eq!(w.backend_reads_during_warmup, 400, "the bulk load only");
    assert_eq!(w.ondemand_backend_reads_during_warmup, 400, "one cold pass");
    assert_eq!(w.warmup_time_improvement, Some(1.0));
    assert_eq!(w.hit_ratio_after_restart, Some(1.0));
    // 400 cold misses before the restart, none after, plus the bulk load.
    assert_eq!(r.misses, 400);
    assert_eq!(r.backend.reads, 800);

    let cold = run(&base(None), &reqs);
    let w = cold.warmup.as_ref().unwrap();
    assert_eq!((w.strategy.clone(), w.loaded_objects), (None, 0));
    assert_eq!(w.convergence_requests, Some(400));
    assert_eq!(w.ondemand_convergence_requests, Some(400));
    assert_eq!(cold.misses, 800);

    // Top-K with a K smaller than the loop still loads exactly K.
    let top = WarmupSpec {
        strategy: Strategy::TopK,
        k: 123,
        period: None,
        share_ppm: None,
    };
    let r = run(&base(Some(top)), &reqs);
    assert_eq!(r.warmup.as_ref().unwrap().loaded_objects, 123);

    // K as a share of the cache: `lastk:100%` loads all 400 recent keys (they fit the 500
    // slots); `lastk:50%` stops at half the cache, 250 objects.
    for (spec, loaded) in [("lastk:100%", 400), ("lastk:50%", 250), ("topk:10%", 50)] {
        let r = run(&base(Some(spec.parse().unwrap())), &reqs);
        let w = r.warmup.as_ref().unwrap();
        assert_eq!(w.loaded_objects, loaded, "{spec}");
        assert_eq!((w.k, w.k_share.is_some()), (None, true), "{spec}");
    }
}

#[test]
fn a_warm_up_better_than_the_always_warm_cache_has_converged_at_the_restart() {
    // A hot set of 50 keys, then a scan of 100 cold keys just before the restart that flushes
    // it from the always-warm 100-object LRU cache; after the restart only the hot set is
    // read. Top-K reloads the hot set and hits from the first lookup, *better* than the
    // always-warm cache, which misses each hot key once, as on-demand does. One-sided, that is
    // converged at once: the warm-up is 100% shorter, not slower nor a tie.
    let at = |i: usize, key: u64| Request {
        time: i as f64,
        key,
        size: 1,
        op: Op::Get,
        offset: 0,
    };
    let mut reqs: Vec<Request> = (0..5_000).map(|i| at(i, (i % 50) as u64)).collect();
    reqs.extend((0..100).map(|i| at(5_000 + i, 1_000 + i as u64)));
    let restart = reqs.len() as u64;
    reqs.extend((0..5_000).map(|i| at(5_100 + i, (i % 50) as u64)));
    let config = ReplayConfig {
        capacity: Capacity::objects(100),
        backend: BackendSpec::None,
        warmup: Some(WarmupConfig {
            restart_at: restart,
            spec: Some("topk:50".parse().unwrap()),
            window_lookups: 100,
            ..WarmupConfig::default()
        }),
        ..ReplayConfig::default()
    };
    let r = run(&config, &reqs);
    let w = r.warmup.as_ref().unwrap();
    assert_eq!(w.loaded_objects, 50);
    assert_eq!(
        w.excess_misses, -50,
        "the always-warm cache misses the hot set once"
    );
    assert_eq!(w.ondemand_excess_misses, 0);
    // (Judged two-sided per window, the first window, 100% against 50%, was "not converged".)
    assert_eq!(w.convergence_requests, Some(0));
    assert_eq!(w.convergence_requests_loose, Some(0));
    // On-demand misses as often as the always-warm cache: converged at once as well.
    assert_eq!(w.ondemand_convergence_requests, Some(0));
    assert_eq!(w.ondemand_convergence_seconds_loose, Some(0.0));
}
