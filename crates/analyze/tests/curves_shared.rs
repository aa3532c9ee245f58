//! The sampled curves' error against the exact ones on the real traces of `../shared/traces`
//! (skipped with a message when absent): mean absolute error over 20 log-spaced sizes from
//! 0.1% to 100% of the working set, per algorithm, at libCacheSim's default rate 0.01 and at
//! 0.1, printed beside the times (bench/RESULTS.md, "Miss-ratio curves of any algorithm").
//! libCacheSim reports an MAE of 0.24% for LRU and 0.48% for ARC. The bound pinned here is the
//! one measured with headroom; times are printed, never asserted.

use analyze::curves::{mean_absolute_error, miss_ratio_curves, CurveOptions, Method, Unit};
use cache::Algorithm;
use std::path::PathBuf;

/// `shared/traces` beside the repository (as in CI) or beside the directory holding it (a
/// worktree under `wt/`), or `$MANTLE_SHARED_TRACES`.
fn shared(file: &str) -> Option<PathBuf> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::env::var_os("MANTLE_SHARED_TRACES")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            repo.join("../shared/traces"),
            repo.join("../../shared/traces"),
        ])
        .map(|dir| dir.join(file))
        .find(|p| p.exists())
}

fn measure(file: &str, unit: Unit, rates: &[(f64, f64)]) {
    let Some(path) = shared(file) else {
        eprintln!("skipping: shared/traces/{file} is absent");
        return;
    };
    let open = || trace::open(&path, None, &trace::ReadOptions::default());
    let base = CurveOptions {
        algorithms: Algorithm::ALL
            .into_iter()
            .filter(|a| !a.is_offline())
            .collect(),
        unit,
        jobs: 2,
        ..CurveOptions::default()
    };
    let exact = miss_ratio_curves(&open, &base).unwrap();
    eprintln!("{file} ({unit:?}): exact {:.2} s", exact.wall_seconds);
    let mut over = Vec::new();
    for &(rate, bound) in rates {
        let sampled = miss_ratio_curves(
            &open,
            &CurveOptions {
                method: Method::Sampled(rate),
                ..base.clone()
            },
        )
        .unwrap();
        let mut line = format!("  rate {rate}: {:.2} s;", sampled.wall_seconds);
        for (e, s) in exact.curves.iter().zip(&sampled.curves) {
            let mae = mean_absolute_error(e, s).unwrap();
            line.push_str(&format!(
                " {} ({}) {:.2}%",
                e.algorithm,
                s.method,
                100.0 * mae
            ));
            if mae >= bound_for(&e.algorithm.to_string(), rate, bound) {
                over.push(format!("{} at rate {rate}: MAE {mae:.4}", e.algorithm));
            }
        }
        eprintln!("{line}");
    }
    assert!(over.is_empty(), "{file}: {}", over.join("; "));
}

/// The MAE bound of a sampled curve. Measured (2026-11-27) above the common bound: LIRS keeps
/// 1% of the cache as its HIR set, which a miniature cache of `size × rate` objects rounds to
/// almost nothing (cloudPhysicsIO in bytes: 5.3% at 0.01, 3.3% at 0.1); LFU and LFUDA rank by
/// counts that a 1% key sample cuts a hundredfold, so ties decide at the small sizes (OLTP at
/// 0.01: 8.5% and 7.9%; at 0.1 within the common bound). W-TinyLFU's window is 1% of the
/// cache, as LIRS's HIR set (cloudPhysicsIO in bytes: 5.1% at 0.01, 3.4% at 0.1). LHD's
/// clock counts accesses, so a miniature cache sees its objects 1/rate times younger and
/// reconfigures 1/rate times later in the trace (OLTP at 0.1: 3.06%, at 0.01 4.48%).
fn bound_for(algorithm: &str, rate: f64, common: f64) -> f64 {
    match algorithm {
        "lirs" | "wtinylfu" => common.max(0.06),
        "lfu" | "lfuda" if rate < 0.1 => common.max(0.10),
        "lhd" => common.max(0.04),
        _ => common,
    }
}

#[test]
fn oltp_in_objects() {
    measure(
        "arc/OLTP.lis.zst",
        Unit::Objects,
        &[(0.01, 0.06), (0.1, 0.03)],
    );
}

#[test]
fn cloudphysics_in_bytes() {
    measure(
        "libcachesim/cloudPhysicsIO.oracleGeneral.bin",
        Unit::Bytes,
        &[(0.01, 0.06), (0.1, 0.03)],
    );
}
