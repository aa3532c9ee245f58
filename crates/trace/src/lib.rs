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

mod archive;
mod block;
mod compression;
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

/// A boxed byte stream that may move to another thread with its reader.
pub(crate) type Stream = Box<dyn std::io::Read + Send>;

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

    /// Whether requests carry the trace's own clock. Formats without one (txt, arc, lirs, raw
    /// key arrays, csv without a time column) report every request at time 0, so time-based
    /// ticks can never fire on them.
    fn has_timestamps(&self) -> bool {
        true
    }

    /// At most how many requests the trace holds, when the reader knows it before reading
    /// them (fixed-size records in an uncompressed file: the file's size over the record's);
    /// also a bound on the distinct objects, which a replay sizes its cache's index for.
    fn requests_bound(&self) -> Option<u64> {
        None
    }

    /// Appends up to `max` requests to `out`; fewer only at the end of the trace. One call
    /// through `dyn TraceReader` then reads a whole batch with static calls, which is what
    /// [`Batched`] uses to take the per-request indirection off the replay's hot loop.
    fn next_batch(&mut self, out: &mut Vec<Request>, max: usize) -> Result<(), TraceError> {
        for _ in 0..max {
            match self.next_request()? {
                Some(r) => out.push(r),
                None => break,
            }
        }
        Ok(())
    }
}

impl<R: TraceReader + ?Sized> TraceReader for Box<R> {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        (**self).next_request()
    }

    fn next_batch(&mut self, out: &mut Vec<Request>, max: usize) -> Result<(), TraceError> {
        (**self).next_batch(out, max)
    }

    fn progress(&self) -> Option<(u64, u64)> {
        (**self).progress()
    }

    fn has_timestamps(&self) -> bool {
        (**self).has_timestamps()
    }

    fn requests_bound(&self) -> Option<u64> {
        (**self).requests_bound()
    }
}

/// A reader that fetches requests a batch at a time (a bounded buffer of
/// [`Batched::BATCH`] requests) and hands them out one by one.
pub struct Batched<R> {
    reader: R,
    buf: Vec<Request>,
    pos: usize,
}

impl<R: TraceReader> Batched<R> {
    pub const BATCH: usize = 1024;

    pub fn new(reader: R) -> Batched<R> {
        Batched {
            reader,
            buf: Vec::with_capacity(Self::BATCH),
            pos: 0,
        }
    }

    /// The next request, like [`TraceReader::next_request`].
    #[inline]
    pub fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            self.reader.next_batch(&mut self.buf, Self::BATCH)?;
            if self.buf.is_empty() {
                return Ok(None);
            }
        }
        let r = self.buf[self.pos];
        self.pos += 1;
        Ok(Some(r))
    }

    /// The wrapped reader's [`TraceReader::progress`] (it runs up to one batch ahead).
    pub fn progress(&self) -> Option<(u64, u64)> {
        self.reader.progress()
    }

    /// The wrapped reader's [`TraceReader::has_timestamps`].
    pub fn has_timestamps(&self) -> bool {
        self.reader.has_timestamps()
    }

    /// The wrapped reader's [`TraceReader::requests_bound`].
    pub fn requests_bound(&self) -> Option<u64> {
        self.reader.requests_bound()
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

#[cfg(test)]
mod batched_tests {
    use super::*;

    /// Yields keys 0..n, then ends.
    struct Counting {
        next: u64,
        n: u64,
    }

    impl TraceReader for Counting {
        fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
            if self.next == self.n {
                return Ok(None);
            }
            self.next += 1;
            Ok(Some(Request {
                key: self.next - 1,
                ..Request::default()
            }))
        }
    }

    #[test]
    fn batches_hand_out_every_request_once_in_order_across_boundaries() {
        for n in [0, 1, 1023, 1024, 1025, 2500] {
            let inner: Box<dyn TraceReader> = Box::new(Counting { next: 0, n });
            let mut b = Batched::new(inner);
            let mut keys = Vec::new();
            while let Some(r) = b.next_request().unwrap() {
                keys.push(r.key);
            }
            assert_eq!(keys, (0..n).collect::<Vec<_>>(), "n = {n}");
            assert!(b.next_request().unwrap().is_none(), "stays at the end");
        }
    }
}
