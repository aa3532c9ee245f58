//! Writes the per-tick metrics time series as CSV (`--metrics-out`).

use crate::replay::TickRow;
use std::io::Write;

/// Writes a header and one row per tick (nothing for an empty series).
pub fn write_ticks<W: Write>(out: W, rows: &[TickRow]) -> csv::Result<()> {
    let mut writer = csv::Writer::from_writer(out);
    for row in rows {
        writer.serialize(row)?;
    }
    writer.flush()?;
    Ok(())
}
