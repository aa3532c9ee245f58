//! The replay's CSV outputs: the per-tick metrics time series (`--metrics-out`) and the
//! shadows' per-tick window figures (`--shadow-out`). CSV is a simulator output only, so
//! this is the one place that writes it: the server, which hosts shadows too, links no
//! CSV writer.

use crate::replay::TickRow;
use adapt::adaptive::ShadowRow;
use anyhow::Context;
use serde::Serialize;
use std::io::Write;
use std::path::Path;

/// `--metrics-out FILE.csv` of `replay` and `replay --server`: errors name the flag and file.
pub fn write_file(path: &Path, rows: &[TickRow]) -> anyhow::Result<()> {
    write_to("--metrics-out", path, rows)
}

/// `--shadow-out FILE.csv`: one row per candidate and tick; errors name the flag and file.
pub fn write_shadow_file(path: &Path, rows: &[ShadowRow]) -> anyhow::Result<()> {
    write_to("--shadow-out", path, rows)
}

fn write_to<R: Serialize>(flag: &str, path: &Path, rows: &[R]) -> anyhow::Result<()> {
    let file = std::fs::File::create(path)
        .with_context(|| format!("{flag}: cannot create {}", path.display()))?;
    write_rows(std::io::BufWriter::new(file), rows)
        .with_context(|| format!("{flag}: writing {}", path.display()))
}

/// Writes a header and one row per tick (nothing for an empty series).
pub fn write_ticks<W: Write>(out: W, rows: &[TickRow]) -> csv::Result<()> {
    write_rows(out, rows)
}

/// Writes a header (the row type's field names) and one line per row.
pub fn write_rows<W: Write, R: Serialize>(out: W, rows: &[R]) -> csv::Result<()> {
    let mut writer = csv::Writer::from_writer(out);
    for row in rows {
        writer.serialize(row)?;
    }
    writer.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadow_rows_are_written_with_a_header_naming_their_fields() {
        let row = ShadowRow {
            tick: 3,
            time: 1.5,
            candidate: "lru".into(),
            active: true,
            lookups: 10.0,
            misses: 4.0,
            miss_ratio: 0.4,
            mean_objects: 2.0,
            peak_objects: 3.0,
            mean_bytes: 20.0,
            evictions: 1.0,
            decisions: 2,
            errors: 0,
        };
        let mut out = Vec::new();
        write_rows(&mut out, &[row]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let mut lines = text.lines();
        let header = lines.next().unwrap();
        assert!(
            header.starts_with("tick,time,candidate,active,"),
            "{header}"
        );
        assert_eq!(
            lines.next(),
            Some("3,1.5,lru,true,10.0,4.0,0.4,2.0,3.0,20.0,1.0,2,0")
        );
        assert_eq!(lines.next(), None);
    }
}
