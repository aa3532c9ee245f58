//! Buffered access to a trace's bytes as fixed-size records or as lines, without allocating
//! per record. Every reader sits on one [`Input`], which also knows where it is (line
//! number, byte offset) so errors can say so.

use std::io::{self, Read};
use std::path::PathBuf;

use crate::source::{Progress, Source};
use crate::Stream;
use crate::TraceError;

/// Read granularity: big enough that the per-call cost of `read` and of the decoders
/// vanishes, small enough that the kernel's copy lands in a buffer that stays cached and
/// that few of its pages are first touched (faulted in) during a replay. 64 KiB read a
/// 2.7 MB oracleGeneral file in about 60% of the time 256 KiB took (bench/RESULTS.md).
/// It is the sniffed head's length, so that the head is the buffer's first fill.
const CHUNK: usize = crate::source::SNIFF_LEN;
/// The longest text line accepted; the buffer grows up to this and no further.
const MAX_LINE: usize = 16 * 1024 * 1024;

pub(crate) struct Input {
    stream: Stream,
    buf: Vec<u8>,
    /// First unread byte in `buf`.
    pos: usize,
    /// End of valid data in `buf`.
    end: usize,
    /// Stream offset of `buf[0]`.
    base: u64,
    eof: bool,
    /// Number of the line last returned by [`Input::line`] (1-based).
    line_no: u64,
    /// Offset of the start of the record or line last returned.
    last_start: u64,
    path: PathBuf,
    decompressed: bool,
    progress: Progress,
}

impl Input {
    /// Reads `source` from its first byte: the sniffed head, then its stream.
    pub(crate) fn new(source: Source) -> Self {
        // The head was read, and its pages first touched, when the file was opened: as the
        // first chunk of the buffer it is neither copied again nor is a fresh buffer's every
        // page first touched (a page fault each) by the replay's first reads.
        let mut buf = source.head;
        let end = buf.len();
        buf.resize(end.max(CHUNK), 0);
        Input {
            stream: source.stream,
            buf,
            pos: 0,
            end,
            base: 0,
            eof: false,
            line_no: 0,
            last_start: 0,
            path: source.path,
            decompressed: source.decompressed,
            progress: source.progress,
        }
    }

    /// `(bytes of the file read, file size)`.
    pub(crate) fn progress(&self) -> (u64, u64) {
        self.progress.get()
    }

    /// How many `record`-byte records the file holds at most, when its size says so: only
    /// for a file read as it is (a decompressed size is unknown up front).
    pub(crate) fn records_bound(&self, record: usize) -> Option<u64> {
        let (_, total) = self.progress.get();
        (!self.decompressed).then(|| total / record as u64)
    }

    /// Moves unread bytes to the front and reads more after them; sets `eof` when the stream
    /// has nothing more.
    fn refill(&mut self) -> Result<(), TraceError> {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.end == self.buf.len() || self.eof {
            return Ok(());
        }
        loop {
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let offset = self.base + self.end as u64;
                    let what = if self.decompressed {
                        format!(
                            "cannot decompress at byte offset {offset} of the decompressed data"
                        )
                    } else {
                        format!("cannot read at byte offset {offset}")
                    };
                    return Err(TraceError::io(&self.path, what, e));
                }
            }
        }
    }

    /// The next `n` bytes (`n` at most a chunk), or `None` at a clean end of the data.
    /// A partial record at the end is an error naming its offset.
    #[inline]
    pub(crate) fn record(&mut self, n: usize) -> Result<Option<&[u8]>, TraceError> {
        if self.end - self.pos < n {
            while self.end - self.pos < n && !self.eof {
                self.refill()?;
            }
            if self.end - self.pos < n {
                if self.pos == self.end {
                    return Ok(None);
                }
                let found = self.end - self.pos;
                self.last_start = self.base + self.pos as u64;
                return Err(self.record_error(format!(
                    "truncated record: expected {n} bytes, found only {found} before the end of the data"
                )));
            }
        }
        let start = self.pos;
        self.pos += n;
        self.last_start = self.base + start as u64;
        Ok(Some(&self.buf[start..start + n]))
    }

    /// Fixed-size record as an array reference, for readers whose layout is fixed.
    #[inline]
    pub(crate) fn array<const N: usize>(&mut self) -> Result<Option<&[u8; N]>, TraceError> {
        Ok(self.record(N)?.and_then(|r| r.first_chunk::<N>()))
    }

    /// Up to `max` whole `N`-byte records in one slice (at least one unless the data ended),
    /// marked as read: a batch decoder walks them without a bounds check per record. Errors
    /// as [`Input::record`] does (a partial record at the end names its offset).
    #[inline]
    pub(crate) fn records<const N: usize>(&mut self, max: usize) -> Result<&[u8], TraceError> {
        if self.end - self.pos < N {
            // One record through the checked path: refills, and reports a truncated end.
            if self.record(N)?.is_none() {
                return Ok(&[]);
            }
            self.pos -= N;
        }
        let n = ((self.end - self.pos) / N).min(max.max(1));
        let start = self.pos;
        self.pos += n * N;
        self.last_start = self.base + (self.pos - N) as u64;
        Ok(&self.buf[start..start + n * N])
    }

    /// The unread bytes, at least `want` of them (`want` at most a chunk) unless the data
    /// ends sooner. For readers that parse a line where it lies, terminator included, and then
    /// step past it with [`Input::advance_line`]; they can read whole words without running
    /// off the end of a line slice.
    #[inline]
    pub(crate) fn peek(&mut self, want: usize) -> Result<&[u8], TraceError> {
        while self.end - self.pos < want && !self.eof {
            self.refill()?;
        }
        Ok(&self.buf[self.pos..self.end])
    }

    /// Marks the first `len` bytes of [`Input::peek`], one whole line with its `\n`, as read:
    /// the line count and error positions then stand as if [`Input::line`] had returned it.
    #[inline]
    pub(crate) fn advance_line(&mut self, len: usize) {
        debug_assert!(len <= self.end - self.pos);
        self.line_no += 1;
        self.last_start = self.base + self.pos as u64;
        self.pos += len;
    }

    /// The next line without its line terminator (`\n` or `\r\n`), or `None` at the end.
    #[inline]
    pub(crate) fn line(&mut self) -> Result<Option<&[u8]>, TraceError> {
        let mut scanned = 0;
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.pos + scanned..self.end]) {
                let start = self.pos;
                let newline = start + scanned + i;
                self.pos = newline + 1;
                return Ok(Some(self.finish_line(start, newline)));
            }
            scanned = self.end - self.pos;
            if self.eof {
                if scanned == 0 {
                    return Ok(None);
                }
                let start = self.pos;
                self.pos = self.end;
                return Ok(Some(self.finish_line(start, self.end)));
            }
            if self.pos == 0 && self.end == self.buf.len() {
                if self.buf.len() >= MAX_LINE {
                    self.line_no += 1;
                    return Err(self.line_error(format!(
                        "line longer than {} MiB; is this a text trace?",
                        MAX_LINE >> 20
                    )));
                }
                let grown = (self.buf.len() * 2).min(MAX_LINE);
                self.buf.resize(grown, 0);
            }
            self.refill()?;
        }
    }

    fn finish_line(&mut self, start: usize, mut end: usize) -> &[u8] {
        self.line_no += 1;
        self.last_start = self.base + start as u64;
        if end > start && self.buf[end - 1] == b'\r' {
            end -= 1;
        }
        &self.buf[start..end]
    }

    /// Number of the line last returned (1-based).
    #[cfg(test)]
    pub(crate) fn line_no(&self) -> u64 {
        self.line_no
    }

    /// An error about the line last returned.
    pub(crate) fn line_error(&self, msg: String) -> TraceError {
        TraceError::Line {
            path: self.path.clone(),
            line: self.line_no,
            msg,
        }
    }

    /// An error about the record last returned (or the partial one at the end).
    pub(crate) fn record_error(&self, msg: String) -> TraceError {
        TraceError::Record {
            path: self.path.clone(),
            offset: self.last_start,
            decompressed: self.decompressed,
            msg,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// A stream that hands out at most `step` bytes per read, to exercise refills.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn input(stream: Stream) -> Input {
        Input::new(Source {
            path: PathBuf::from("mem.trace"),
            stream,
            head: Vec::new(),
            content_name: String::new(),
            decompressed: false,
            progress: Progress::for_tests(Arc::new(AtomicU64::new(0)), 0),
        })
    }

    #[test]
    fn lines_split_across_reads_and_crlf() {
        let data = b"alpha\r\nbeta\n\ngamma".to_vec();
        let mut inp = input(Box::new(Trickle {
            data,
            at: 0,
            step: 3,
        }));
        let mut got = Vec::new();
        while let Some(l) = inp.line().unwrap() {
            got.push(String::from_utf8(l.to_vec()).unwrap());
        }
        assert_eq!(got, ["alpha", "beta", "", "gamma"]);
        assert_eq!(inp.line_no(), 4);
    }

    #[test]
    fn peeked_lines_count_like_returned_ones() {
        let data = b"one\ntwo\nthree".to_vec();
        let mut inp = input(Box::new(Trickle {
            data,
            at: 0,
            step: 2,
        }));
        assert_eq!(inp.peek(6).unwrap(), b"one\ntw");
        inp.advance_line(4);
        assert_eq!(inp.line().unwrap().unwrap(), b"two");
        assert_eq!(inp.peek(100).unwrap(), b"three");
        inp.advance_line(5);
        assert_eq!(inp.line_no(), 3);
        assert!(inp.line().unwrap().is_none());
        let err = inp.line_error("bad".into()).to_string();
        assert_eq!(err, "mem.trace:3: bad");
    }

    #[test]
    fn long_line_grows_the_buffer() {
        let mut data = vec![b'x'; CHUNK * 3];
        data.extend_from_slice(b"\nend\n");
        let mut inp = input(Box::new(Cursor::new(data)));
        assert_eq!(inp.line().unwrap().unwrap().len(), CHUNK * 3);
        assert_eq!(inp.line().unwrap().unwrap(), b"end");
        assert!(inp.line().unwrap().is_none());
    }

    #[test]
    fn records_and_truncation() {
        let data: Vec<u8> = (0..10u8).collect();
        let mut inp = input(Box::new(Trickle {
            data,
            at: 0,
            step: 3,
        }));
        assert_eq!(inp.array::<4>().unwrap().unwrap(), &[0, 1, 2, 3]);
        assert_eq!(inp.array::<4>().unwrap().unwrap(), &[4, 5, 6, 7]);
        let err = inp.array::<4>().unwrap_err().to_string();
        assert_eq!(
            err,
            "mem.trace: byte offset 8: truncated record: expected 4 bytes, found only 2 before the end of the data"
        );
    }

    /// The sniffed head starts the buffer: content longer than the head, plain or
    /// decompressed, reads back every line once and in order, with the right line numbers.
    #[test]
    fn the_head_and_the_stream_after_it_read_as_one() {
        let text: String = (0..30_000).map(|i| format!("line {i}\n")).collect();
        assert!(text.len() > 3 * crate::source::SNIFF_LEN);
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("t.txt");
        std::fs::write(&plain, &text).unwrap();
        let packed = dir.path().join("t.txt.zst");
        std::fs::write(&packed, zstd::encode_all(text.as_bytes(), 1).unwrap()).unwrap();
        for path in [&plain, &packed] {
            let source = Source::open(path).unwrap();
            assert_eq!(source.head, text.as_bytes()[..crate::source::SNIFF_LEN]);
            let mut inp = Input::new(source);
            let mut got = String::new();
            while let Some(l) = inp.line().unwrap() {
                got.push_str(std::str::from_utf8(l).unwrap());
                got.push('\n');
            }
            assert_eq!(got, text, "{}", path.display());
            assert_eq!(inp.line_no(), 30_000);
        }
    }

    #[test]
    fn clean_end_is_none() {
        let mut inp = input(Box::new(Cursor::new(vec![1u8; 8])));
        assert!(inp.array::<4>().unwrap().is_some());
        assert!(inp.array::<4>().unwrap().is_some());
        assert!(inp.array::<4>().unwrap().is_none());
    }
}
