//! Opening a trace file as a plain byte stream: transparent decompression (zstd, gzip, xz,
//! bzip2, recognised by magic bytes, not by name), unwrapping of single-file tar archives,
//! and a byte counter on the file itself for progress reports.

use std::fs::File;
use std::io::{self, Cursor, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::archive::first_tar_member;
use crate::compression::Compression;
use crate::{Stream, TraceError};

/// How many leading bytes of the decompressed stream format detection may look at: a
/// reader's first buffer-full (`input::CHUNK`, which is defined from this), so that the head
/// becomes that buffer as it is.
pub(crate) const SNIFF_LEN: usize = 64 * 1024;

/// Nesting bound for compression and archive layers (e.g. tar inside gzip is two).
const MAX_LAYERS: usize = 4;

/// A trace file opened down to its content.
pub(crate) struct Source {
    /// The file as given, for error messages.
    pub path: PathBuf,
    /// The content after `head`.
    pub stream: Stream,
    /// The first bytes of the content (at most [`SNIFF_LEN`]), for format detection; a
    /// reader's [`crate::input::Input`] starts with them as its buffer.
    pub head: Vec<u8>,
    /// The name that describes the content: the tar member's name if there was an archive,
    /// else the file name without its compression suffixes.
    pub content_name: String,
    /// Whether the content went through a decompressor (byte offsets are then offsets in
    /// the decompressed data).
    pub decompressed: bool,
    /// Bytes of the file read so far, shared with the counting wrapper under the decoders.
    pub progress: Progress,
}

/// How far through the file (compressed bytes) reading has got.
#[derive(Clone, Debug)]
pub(crate) struct Progress {
    read: Arc<AtomicU64>,
    total: u64,
}

impl Progress {
    pub(crate) fn get(&self) -> (u64, u64) {
        (self.read.load(Ordering::Relaxed), self.total)
    }
}

#[cfg(test)]
impl Progress {
    pub(crate) fn for_tests(read: Arc<AtomicU64>, total: u64) -> Self {
        Progress { read, total }
    }
}

struct Counting<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Suffixes that name a compression or archive layer, stripped from the content name.
const LAYER_SUFFIXES: [&str; 8] = [
    ".zst", ".zstd", ".gz", ".xz", ".bz2", ".tgz", ".tar", ".lzma",
];

fn strip_layer_suffix(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    for suffix in LAYER_SUFFIXES {
        if lower.ends_with(suffix) && lower.len() > suffix.len() {
            return name[..name.len() - suffix.len()].to_string();
        }
    }
    name.to_string()
}

/// Reads up to `n` bytes from the front of `stream`: them, and the stream after them.
fn read_head(mut stream: Stream, n: usize) -> io::Result<(Vec<u8>, Stream)> {
    let mut head = Vec::with_capacity(n.min(SNIFF_LEN));
    (&mut stream).take(n as u64).read_to_end(&mut head)?;
    Ok((head, stream))
}

/// Reads up to `n` bytes from the front of `stream` and returns them with a stream that still
/// starts at the first byte.
fn peek(stream: Stream, n: usize) -> io::Result<(Vec<u8>, Stream)> {
    let (head, rest) = read_head(stream, n)?;
    let rewound: Stream = Box::new(Cursor::new(head.clone()).chain(rest));
    Ok((head, rewound))
}

fn is_tar(head: &[u8]) -> bool {
    head.len() >= 262 && &head[257..262] == b"ustar"
}

impl Source {
    /// Opens `path` and peels off compression and archive layers.
    pub(crate) fn open(path: &Path) -> Result<Source, TraceError> {
        let file = File::open(path).map_err(|e| TraceError::io(path, "cannot open", e))?;
        let meta = file
            .metadata()
            .map_err(|e| TraceError::io(path, "cannot stat", e))?;
        if meta.is_dir() {
            return Err(TraceError::format(
                path,
                "is a directory, expected a trace file",
            ));
        }
        let read = Arc::new(AtomicU64::new(0));
        let progress = Progress {
            read: Arc::clone(&read),
            total: meta.len(),
        };
        let mut stream: Stream = Box::new(Counting { inner: file, read });
        let mut content_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut decompressed = false;
        for _ in 0..MAX_LAYERS {
            let (head, rewound) =
                peek(stream, 512).map_err(|e| read_error(path, decompressed, e))?;
            stream = rewound;
            if let Some(kind) = Compression::from_magic(&head) {
                stream = kind.decoder(stream).map_err(|e| {
                    TraceError::io(path, format!("cannot start {} decoder", kind.name()), e)
                })?;
                decompressed = true;
                content_name = strip_layer_suffix(&content_name);
            } else if is_tar(&head) {
                let (name, member) = first_tar_member(stream)
                    .map_err(|e| TraceError::io(path, "cannot unpack the tar archive", e))?;
                stream = member;
                content_name = name;
            } else {
                break;
            }
        }
        let (head, stream) =
            read_head(stream, SNIFF_LEN).map_err(|e| read_error(path, decompressed, e))?;
        Ok(Source {
            path: path.to_path_buf(),
            stream,
            head,
            content_name,
            decompressed,
            progress,
        })
    }
}

fn read_error(path: &Path, decompressed: bool, e: io::Error) -> TraceError {
    let what = if decompressed {
        "cannot decompress"
    } else {
        "cannot read"
    };
    TraceError::io(path, what, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_one_layer_suffix() {
        assert_eq!(strip_layer_suffix("OLTP.lis.zst"), "OLTP.lis");
        assert_eq!(strip_layer_suffix("a.TAR.GZ"), "a.TAR");
        assert_eq!(strip_layer_suffix("x.tgz"), "x");
        assert_eq!(strip_layer_suffix("plain.csv"), "plain.csv");
    }

    #[test]
    fn peek_does_not_consume() {
        let data: Stream = Box::new(Cursor::new(b"hello world".to_vec()));
        let (head, mut rest) = peek(data, 5).unwrap();
        assert_eq!(head, b"hello");
        let mut all = String::new();
        rest.read_to_string(&mut all).unwrap();
        assert_eq!(all, "hello world");
    }
}
