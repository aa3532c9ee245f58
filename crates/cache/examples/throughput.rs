//! Measures how fast the cache replays a trace held in memory, libCacheSim style (lookup,
//! insert on miss), so the cost of the cache itself can be compared with libCacheSim's
//! simulator. Trace parsing is excluded; the end-to-end comparison lives in `bench/`.
//!
//! Usage: cargo run --release -p mantle-cache --example throughput -- TRACE ALGORITHM FRACTION [RUNS]
//! TRACE is any trace Mantle reads (format detected); FRACTION of the working set in bytes.

use cache::{Algorithm, Cache, Capacity};
use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

fn load(path: &Path) -> Vec<(u64, u32)> {
    let fail = |e: trace::TraceError| -> ! {
        eprintln!("{e}");
        std::process::exit(1)
    };
    let mut reader =
        trace::open(path, None, &trace::ReadOptions::default()).unwrap_or_else(|e| fail(e));
    let mut requests = Vec::new();
    while let Some(req) = reader.next_request().unwrap_or_else(|e| fail(e)) {
        requests.push((req.key, req.size));
    }
    requests
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: throughput TRACE ALGORITHM FRACTION [RUNS]");
        std::process::exit(2);
    }
    let path = Path::new(&args[1]);
    let algorithm: Algorithm = args[2].parse().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let fraction: f64 = args[3].parse().expect("FRACTION is a number");
    let runs: usize = args
        .get(4)
        .map_or(7, |r| r.parse().expect("RUNS is a number"));
    let requests = load(path);
    let mut seen = HashSet::new();
    let wss: u64 = requests
        .iter()
        .filter(|(id, _)| seen.insert(*id))
        .map(|&(_, s)| u64::from(s))
        .sum();
    let cache_bytes = (fraction * wss as f64) as u64;
    let mut best = f64::MAX;
    for _ in 0..runs {
        let mut cache = Cache::new(algorithm, Capacity::bytes(cache_bytes));
        let start = Instant::now();
        let mut misses = 0u64;
        for &(id, size) in &requests {
            misses += u64::from(!cache.access(id, size));
        }
        let secs = start.elapsed().as_secs_f64();
        best = best.min(secs);
        // Second pass, untimed: the slab and index are sized by the peak population.
        let mut peak = 0;
        let mut probe = Cache::new(algorithm, Capacity::bytes(cache_bytes));
        for &(id, size) in &requests {
            probe.access(id, size);
            peak = peak.max(probe.len());
        }
        eprintln!(
            "{algorithm} {cache_bytes} B: miss ratio {:.6}, {:.3} ms, metadata {} B, {} objects now, peak {peak} ({:.1} B per peak object beyond the key)",
            misses as f64 / requests.len() as f64,
            secs * 1e3,
            cache.metadata_bytes(),
            cache.len(),
            cache.metadata_bytes() as f64 / peak as f64 - 8.0
        );
    }
    println!(
        "{} requests, best {:.3} ms, {:.2} M requests/s",
        requests.len(),
        best * 1e3,
        requests.len() as f64 / best / 1e6
    );
}
