//! `mantle analyze --report` leads with the sizing recommendation: on a generated trace the
//! page's first section shows the smallest no-miss LRU size and the sizes for reuse miss
//! ratios of 0.01%, 0.1% and 1% (the numbers `--json` gives, which the analyze crate checks
//! against a brute-force LRU), the reuse-age quantiles, and only then the regime switch.

mod common;

use common::{json_of, mantle};

#[test]
fn the_report_leads_with_the_sizing_recommendation() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("gen.csv");
    let report = dir.path().join("report.html");
    let (trace_s, report_s) = (trace.to_str().unwrap(), report.to_str().unwrap());
    let out = mantle(&[
        "gen",
        "parsplice",
        "--seed",
        "7",
        "--duration",
        "1h",
        "-o",
        trace_s,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let a = json_of(&mantle(&["analyze", "--trace", trace_s, "--json"]));
    let out = mantle(&["analyze", "--trace", trace_s, "--report", report_s]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&report).unwrap();

    let lead = html
        .find("Sizing recommendation")
        .expect("a sizing section");
    let summary = html.find(">Summary<").expect("a summary section");
    assert!(lead < summary, "the recommendation comes first");
    let section = &html[lead..summary];

    let no_miss = a["mrc"]["no_miss_size"].as_u64().unwrap();
    assert!(
        section.contains(&format!("no reuse misses: {no_miss} objects")),
        "{section}"
    );
    let sizing = a["mrc"]["sizing"].as_array().unwrap();
    let targets: Vec<f64> = sizing
        .iter()
        .map(|s| s["reuse_miss_ratio"].as_f64().unwrap())
        .collect();
    assert_eq!(targets, [0.0001, 0.001, 0.01]);
    let mut sizes = Vec::new();
    for (s, shown) in sizing.iter().zip(["0.01%", "0.1%", "1%"]) {
        let size = s["cache_size"].as_u64().unwrap();
        sizes.push(size);
        assert!(
            section.contains(&format!("<td>{shown}</td><td>{size}</td>")),
            "{shown} -> {size} not in {section}"
        );
    }
    // Looser targets need no larger caches, and none more than the no-miss size.
    assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{sizes:?}");
    assert!(sizes[0] <= no_miss, "{sizes:?} vs {no_miss}");
    let p99 = a["reuse"]["p99_s"].as_f64().unwrap();
    assert!(section.contains("reuse age"), "{section}");
    assert!(section.contains(&format!("<td>{p99:.0}</td>")), "{section}");
    if let Some(size) = a["regimes"]["suggested_cache_size"].as_u64() {
        let switch = section
            .find("Regime switch")
            .expect("the regime switch after them");
        assert!(switch > section.find("reuse age").unwrap());
        assert!(section.contains(&format!("cache of {size} objects")));
    }
    assert!(html.contains("(log-log)"), "the MRC is on log axes");
}
