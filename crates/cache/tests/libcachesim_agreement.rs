//! Agreement with libCacheSim 0.3.5: replays the two sample traces libCacheSim ships with
//! every built-in algorithm at 1% and 10% of the working set in bytes, the way libCacheSim's
//! simulator does (every request is a lookup that inserts on a miss), and compares the miss
//! ratio with the one `bench/libcachesim/reference.py` recorded from libCacheSim itself in
//! `bench/libcachesim/reference.json`.
//!
//! The traces are read with Mantle's own readers (`mantle-trace`), with the format and CSV
//! column spec libCacheSim was given. They are looked for in `../shared/traces` beside the
//! repository, or in `$MANTLE_TRACES_DIR` (a git worktree elsewhere).
//!
//! Deterministic algorithms must agree within [`TOLERANCE`]; Random and Hyperbolic sample
//! victims with a random generator, neither libCacheSim's nor reproducible between its own
//! runs, and get the measured tolerance of [`tolerance`] (see docs/cache.md).

use cache::{Algorithm, Cache, Capacity};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use trace::{CsvSpec, Format, ReadOptions};

const TOLERANCE: f64 = 0.002;

/// Names in reference.json that are not built-in algorithms (yet): listed here so that a
/// reference entry can never be skipped silently.
const NOT_BUILT_IN: &[&str] = &["clockpro"];

/// The largest miss-ratio difference accepted for `algorithm`. Random draws its victims, in
/// libCacheSim, as the newest object of a random non-empty hash bucket with a clock-seeded
/// generator; here uniformly with a fixed seed. Measured: libCacheSim's own runs spread by up
/// to 0.0015 (five runs each), ours is up to 0.0043 below libCacheSim's on twitter_cluster52
/// (0.0003 on cloudPhysicsIO), a bias of libCacheSim's draw not reproduced here. Hyperbolic
/// evicts the worst of 64 draws, which averages the draws out: within 0.0002, inside the
/// deterministic tolerance (docs/cache.md).
fn tolerance(algorithm: Algorithm) -> f64 {
    match algorithm {
        Algorithm::Random => 0.006,
        _ => TOLERANCE,
    }
}

fn traces_dir() -> PathBuf {
    match std::env::var_os("MANTLE_TRACES_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/traces"
        )),
    }
}

fn reference_path() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/libcachesim/reference.json"
    ))
}

/// `(object id, size)` of every request, read as libCacheSim was told to read the trace:
/// `format` is `oracleGeneral` or `csv:<column spec>` (as recorded in reference.json).
fn load(path: &Path, format: &str) -> Vec<(u64, u32)> {
    let (format, options) = match format.strip_prefix("csv:") {
        Some(spec) => {
            let spec: CsvSpec = spec.parse().unwrap_or_else(|e| panic!("{format}: {e}"));
            let options = ReadOptions {
                csv: Some(spec),
                ..ReadOptions::default()
            };
            (Format::Csv, options)
        }
        None => {
            assert_eq!(format, "oracleGeneral");
            (Format::OracleGeneral, ReadOptions::default())
        }
    };
    let mut reader = trace::open(path, Some(format), &options)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut requests = Vec::new();
    while let Some(req) = reader
        .next_request()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    {
        requests.push((req.key, req.size));
    }
    requests
}

/// Working set as libCacheSim's `cal_working_set_size`: distinct objects and the sum of their
/// sizes (sizes never change within these traces).
fn working_set(requests: &[(u64, u32)]) -> (u64, u64) {
    let mut sizes: HashMap<u64, u32> = HashMap::new();
    for &(id, size) in requests {
        sizes.entry(id).or_insert(size);
    }
    (
        sizes.len() as u64,
        sizes.values().map(|&s| u64::from(s)).sum(),
    )
}

/// Misses of one replay.
fn replay(algorithm: Algorithm, cache_bytes: u64, requests: &[(u64, u32)]) -> u64 {
    let mut cache = Cache::new(algorithm, Capacity::bytes(cache_bytes));
    let mut misses = 0u64;
    for &(id, size) in requests {
        if !cache.access(id, size) {
            misses += 1;
        }
        assert!(cache.bytes() <= cache_bytes, "capacity exceeded");
    }
    misses
}

#[test]
fn miss_ratios_match_libcachesim() {
    let traces = traces_dir();
    if !traces.join("libcachesim").is_dir() {
        eprintln!(
            "SKIPPED: {} is absent; the libCacheSim agreement check needs the shared traces",
            traces.display()
        );
        return;
    }
    let text = std::fs::read_to_string(reference_path()).expect("read reference.json");
    let reference: Value = serde_json::from_str(&text).expect("parse reference.json");
    assert_eq!(reference["libcachesim_version"], "0.3.5");

    let mut loaded: HashMap<String, Vec<(u64, u32)>> = HashMap::new();
    for trace in reference["traces"].as_array().expect("traces") {
        let name = trace["trace"].as_str().unwrap().to_string();
        let path = traces.join("libcachesim").join(&name);
        let requests = load(&path, trace["format"].as_str().expect("format"));
        assert_eq!(
            Some(requests.len() as u64),
            trace["requests"].as_u64(),
            "{name}"
        );
        let (objects, bytes) = working_set(&requests);
        assert_eq!(
            Some(objects),
            trace["working_set_objects"].as_u64(),
            "{name}"
        );
        assert_eq!(Some(bytes), trace["working_set_bytes"].as_u64(), "{name}");
        loaded.insert(name, requests);
    }

    let mut failures = Vec::new();
    let results = reference["results"].as_array().expect("results");
    // Every built-in algorithm is checked on every trace at both sizes.
    let mut checked: HashMap<(String, Algorithm), usize> = HashMap::new();
    for result in results {
        let name = result["trace"].as_str().unwrap();
        let alg_name = result["algorithm"].as_str().unwrap();
        let Ok(algorithm) = alg_name.parse::<Algorithm>() else {
            assert!(
                NOT_BUILT_IN.contains(&alg_name),
                "{alg_name} is in reference.json but neither built in nor in NOT_BUILT_IN"
            );
            continue;
        };
        assert!(
            !NOT_BUILT_IN.contains(&alg_name),
            "{alg_name} is built in now"
        );
        let fraction = result["fraction"].as_f64().unwrap();
        let cache_bytes = result["cache_bytes"].as_u64().unwrap();
        let Some(theirs) = result["miss_ratio"].as_f64() else {
            println!(
                "{name:34} {algorithm:10} {fraction:>5}  libCacheSim did not finish in {} s: nothing to compare",
                result["timed_out_s"]
            );
            *checked.entry((name.to_string(), algorithm)).or_default() += 1;
            continue;
        };
        let requests = &loaded[name];

        // libCacheSim sizes a cache given as a fraction as int(fraction * working set bytes).
        let (_, wss_bytes) = working_set(requests);
        assert_eq!(
            (fraction * wss_bytes as f64) as u64,
            cache_bytes,
            "{name} {fraction}"
        );

        let misses = replay(algorithm, cache_bytes, requests);
        let ours = misses as f64 / requests.len() as f64;
        let diff = (ours - theirs).abs();
        let their_misses = (theirs * requests.len() as f64).round() as u64;
        let verdict = if misses == their_misses {
            "exact"
        } else {
            "close"
        };
        println!(
            "{name:34} {algorithm:10} {fraction:>5} {cache_bytes:>10} B  ours {ours:.6}  libCacheSim {theirs:.6}  {verdict} ({misses} vs {their_misses} misses)"
        );
        *checked.entry((name.to_string(), algorithm)).or_default() += 1;
        if diff > tolerance(algorithm) {
            failures.push(format!(
                "{name} {algorithm} {fraction}: ours {ours} vs {theirs}"
            ));
        }
    }
    for name in loaded.keys() {
        for algorithm in Algorithm::ALL {
            assert_eq!(
                checked.get(&(name.clone(), algorithm)),
                Some(&2),
                "{name} {algorithm}: reference.json must hold both sizes"
            );
        }
    }
    assert!(
        failures.is_empty(),
        "disagreements:\n{}",
        failures.join("\n")
    );
}
