//! Which readers carry the trace's clock: replay picks a request-count tick for those that
//! do not (a time tick would never fire on them), so the answer must match the format.

use std::path::Path;
use trace::{Format, ReadOptions};

fn has_timestamps(file: &str, format: Format, opts: &ReadOptions) -> bool {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(file);
    trace::open(&path, Some(format), opts)
        .expect("fixture opens")
        .has_timestamps()
}

#[test]
fn only_formats_with_a_clock_say_they_have_timestamps() {
    let plain = ReadOptions::default();
    for (file, format) in [
        ("small.txt", Format::Txt),
        ("small.lis.zst", Format::Arc),
        ("small_lirs.trace.gz", Format::Lirs),
        ("small.bin32be", Format::Bin32Be),
        ("small.bin64be.xz", Format::Bin64Be),
    ] {
        assert!(!has_timestamps(file, format, &plain), "{file}");
    }
    for (file, format) in [
        ("small.oracleGeneral.bin", Format::OracleGeneral),
        ("small_getput.csv", Format::Parsplice),
        ("small_twitter.csv", Format::Twitter),
        ("small_msr.csv", Format::Msr),
    ] {
        assert!(has_timestamps(file, format, &plain), "{file}");
    }
    // csv: only with a time column.
    let with_time = ReadOptions {
        csv: Some("time-col=1,obj-id-col=2".parse().unwrap()),
        ..ReadOptions::default()
    };
    let without = ReadOptions {
        csv: Some("obj-id-col=2".parse().unwrap()),
        ..ReadOptions::default()
    };
    assert!(has_timestamps("small_spec.csv", Format::Csv, &with_time));
    assert!(!has_timestamps("small_spec.csv", Format::Csv, &without));
}
