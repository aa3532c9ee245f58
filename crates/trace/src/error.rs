//! The one error type of trace reading.
//!
//! Every variant renders as a single line that names the file and, where it applies, the line
//! number or byte offset and what the reader expected, so `mantle` can print it as is.

use std::path::{Path, PathBuf};

/// Why a trace could not be opened or read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read, or its compressed data is corrupt.
    // The I/O error is part of the one-line message, so it is not also exposed as the
    // error's source (callers that print the chain would repeat it).
    #[error("{}: {what}: {cause}", path.display())]
    Io {
        path: PathBuf,
        what: String,
        cause: std::io::Error,
    },
    /// A text record did not parse.
    #[error("{}:{line}: {msg}", path.display())]
    Line {
        path: PathBuf,
        line: u64,
        msg: String,
    },
    /// A binary record was cut short or carried an impossible value.
    #[error("{}: byte offset {offset}{}: {msg}", path.display(), decompressed_note(*.decompressed))]
    Record {
        path: PathBuf,
        offset: u64,
        decompressed: bool,
        msg: String,
    },
    /// The format could not be determined, or the file does not have the shape it requires.
    #[error("{}: {msg}", path.display())]
    Format { path: PathBuf, msg: String },
    /// A format name (`--format`) that no reader has.
    #[error("unknown trace format `{name}`; expected one of: {}", crate::Format::ALL.iter().map(|f| f.name()).collect::<Vec<_>>().join(", "))]
    UnknownFormat { name: String },
    /// A CSV column spec (`time-col=...,obj-id-col=...`) that does not parse.
    #[error("bad CSV column spec `{spec}`: {msg}")]
    BadSpec { spec: String, msg: String },
}

fn decompressed_note(decompressed: bool) -> &'static str {
    if decompressed {
        " of the decompressed data"
    } else {
        ""
    }
}

impl TraceError {
    pub(crate) fn io(path: &Path, what: impl Into<String>, source: std::io::Error) -> Self {
        TraceError::Io {
            path: path.to_path_buf(),
            what: what.into(),
            cause: source,
        }
    }

    pub(crate) fn format(path: &Path, msg: impl Into<String>) -> Self {
        TraceError::Format {
            path: path.to_path_buf(),
            msg: msg.into(),
        }
    }
}
