//! Writes the per-tick metrics time series as CSV (`--metrics-out`).

use crate::replay::TickRow;
use anyhow::Context;
use std::io::Write;
use std::path::Path;

/// `--metrics-out FILE.csv` of `replay` and `replay --server`: errors name the flag and file.
pub fn write_file(path: &Path, rows: &[TickRow]) -> anyhow::Result<()> {
    let file = std::fs::File::create(path)
        .with_context(|| format!("--metrics-out: cannot create {}", path.display()))?;
    write_ticks(std::io::BufWriter::new(file), rows)
        .with_context(|| format!("--metrics-out: writing {}", path.display()))
}

/// Writes a header and one row per tick (nothing for an empty series).
pub fn write_ticks<W: Write>(out: W, rows: &[TickRow]) -> csv::Result<()> {
    let mut writer = csv::Writer::from_writer(out);
    for row in rows {
        writer.serialize(row)?;
    }
    writer.flush()?;
    Ok(())
}
