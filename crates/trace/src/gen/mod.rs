//! Synthetic workload generators (`mantle gen ...`).
//!
//! Generators exist so that demos, tests and policy experiments can run on traces with a known
//! shape without shipping real logs. One module per generator; each is a deterministic
//! iterator of [`crate::Request`]s for a given seed plus a CSV writer.

pub mod hotspot;
pub mod mixed;
pub mod parsplice;
pub mod phases;

pub use parsplice::{ParspliceGen, ParspliceParams, ParspliceSummary};

use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::{Op, Request};

/// Creates `path` and hands `write` its writer, zstd-compressed when the name ends in `.zst`
/// (the stream is finished before returning). Errors name the file.
pub(crate) fn to_file<T>(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<T>,
) -> io::Result<T> {
    let with_path = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let mut file = std::fs::File::create(path).map_err(with_path)?;
    if path.extension().is_some_and(|ext| ext == "zst") {
        let mut encoder = zstd::Encoder::new(file, 3).map_err(with_path)?;
        let out = write(&mut encoder).map_err(with_path)?;
        encoder.finish().map_err(with_path)?;
        Ok(out)
    } else {
        write(&mut file).map_err(with_path)
    }
}

/// Writes `requests` as `timestamp_s,op,key` CSV rows (the ParSplice layout the key-value
/// generators share) and returns how many there were.
pub(crate) fn write_requests<W: Write>(
    requests: impl Iterator<Item = Request>,
    out: W,
) -> io::Result<u64> {
    let mut out = BufWriter::new(out);
    writeln!(out, "timestamp_s,op,key")?;
    let mut n = 0;
    for r in requests {
        let op = if r.op == Op::Put { "PUT" } else { "GET" };
        writeln!(out, "{:.3},{op},{}", r.time, r.key)?;
        n += 1;
    }
    out.flush()?;
    Ok(n)
}
