//! Streaming readers for the cache trace formats Mantle replays.
//!
//! Every reader turns a file (optionally compressed, or a single-file tar archive) into a
//! stream of [`Request`]s in constant memory. Readers are selected by [`Format`], which is
//! auto-detected from the file name and content unless the user names one:
//!
//! ```no_run
//! use std::path::Path;
//! let mut reader = trace::open(Path::new("t.oracleGeneral.bin.zst"), None, &trace::ReadOptions::default())?;
//! while let Some(req) = reader.next_request()? {
//!     let _ = (req.key, req.size);
//! }
//! # Ok::<(), trace::TraceError>(())
//! ```

mod block;
mod detect;
mod error;
mod format;
mod formats;
pub mod gen;
mod input;
mod options;
mod parse;
mod request;
mod source;

use std::path::Path;

pub use error::TraceError;
pub use format::Format;
pub use options::{CsvSpec, ReadOptions};
pub use parse::hash_key;
pub use request::{Op, Request};

/// A source of requests. Readers are single-pass and hold only a bounded buffer.
pub trait TraceReader: Send {
    /// The next request, `Ok(None)` at the end of the trace, or an error naming the file and
    /// the line or byte offset that could not be read.
    fn next_request(&mut self) -> Result<Option<Request>, TraceError>;

    /// `(bytes of the file read so far, file size)` — compressed bytes for compressed
    /// files — for progress reports; `None` if the reader cannot tell.
    fn progress(&self) -> Option<(u64, u64)> {
        None
    }
}

impl<R: TraceReader + ?Sized> TraceReader for Box<R> {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        (**self).next_request()
    }

    fn progress(&self) -> Option<(u64, u64)> {
        (**self).progress()
    }
}

/// Opens the trace at `path` for reading as `format`, or as the format detected from its
/// name and content when `format` is `None`. Compression (zstd, gzip, xz, bzip2) and a
/// single-file tar archive are unwrapped by their magic bytes.
pub fn open(
    path: &Path,
    format: Option<Format>,
    opts: &ReadOptions,
) -> Result<Box<dyn TraceReader>, TraceError> {
    if opts.block_size == 0 {
        return Err(TraceError::format(
            path,
            "block size must be at least 1 byte",
        ));
    }
    let source = source::Source::open(path)?;
    let format = match format {
        Some(f) => f,
        None => detected(&source)?,
    };
    formats::open_reader(format, source, opts)
}

/// The format [`open`] would pick for `path` without `--format`.
pub fn detect(path: &Path) -> Result<Format, TraceError> {
    detected(&source::Source::open(path)?)
}

fn detected(source: &source::Source) -> Result<Format, TraceError> {
    if source.head.is_empty() {
        return Err(TraceError::format(
            &source.path,
            "trace is empty, so its format cannot be detected; pass --format",
        ));
    }
    detect::detect_format(&source.content_name, &source.head).ok_or_else(|| {
        TraceError::format(
            &source.path,
            format!(
                "cannot tell the trace format from its name or content; pass --format (one of: {})",
                Format::ALL.map(Format::name).join(", ")
            ),
        )
    })
}
