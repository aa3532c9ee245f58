//! The analysis of the real ParSplice log agrees with the counts published for it.

use std::path::Path;

use analyze::{analyze, AnalyzeOptions};

const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces");

#[test]
fn real_parsplice_log_matches_its_provenance() {
    let path =
        Path::new(TRACES).join("parsplice/scale-workers-1-71538_rank4_workmanager_getput.csv.zst");
    if !path.exists() {
        eprintln!("skipping: {} is absent", path.display());
        return;
    }
    let mut reader = trace::open(&path, None, &trace::ReadOptions::default()).unwrap();
    let requests = std::iter::from_fn(|| reader.next_request().unwrap());
    let a = analyze(requests, AnalyzeOptions::default());
    assert_eq!(a.requests, 1_091_758);
    assert_eq!(a.gets, 1_034_063);
    assert_eq!(a.puts, 57_695);
    assert_eq!(a.unique_keys, 57_695);
    assert_eq!(a.mrc.method, "exact");
    // Seed 000: the read rate falls over the run while the key space grows.
    assert!(a.peak_read_rate > 10.0 * a.final_read_rate);
    assert!(a.fans.count > 50, "fans {}", a.fans.count);
    let switch = a.regimes.suggested_cache_size.unwrap();
    assert!(
        switch > 1000 && switch < a.unique_keys / 2,
        "switch size {switch}"
    );
}
