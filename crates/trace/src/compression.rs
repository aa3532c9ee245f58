//! The compression layers a trace may come in (zstd, gzip, xz, bzip2, told by magic bytes)
//! and the most memory each decoder may demand. A few kilobytes of header can ask a decoder
//! for gigabytes (an xz dictionary, a zstd window); the caps below refuse that with an error
//! naming the file instead of letting the demand through.

use std::io::{self, Read};

use crate::Stream;

/// The largest zstd window accepted: 2^27 bytes, zstd's own default limit (files made with
/// `zstd --long=31` or `--ultra -22` ask for more).
pub(crate) const ZSTD_WINDOW_LOG_MAX: u32 = 27;

/// The largest xz dictionary accepted, 128 MiB, the zstd window's size (`xz -9` uses 64 MiB).
pub(crate) const XZ_DICT_MAX: u64 = 128 << 20;

/// What liblzma may allocate for one xz stream: the dictionary plus the decoder's own state,
/// which is well under a mebibyte.
const XZ_MEMLIMIT: u64 = XZ_DICT_MAX + (1 << 20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Compression {
    Zstd,
    Gzip,
    Xz,
    Bzip2,
}

impl Compression {
    pub(crate) fn from_magic(head: &[u8]) -> Option<Self> {
        if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Some(Compression::Zstd)
        } else if head.starts_with(&[0x1f, 0x8b]) {
            Some(Compression::Gzip)
        } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
            Some(Compression::Xz)
        } else if head.len() >= 4 && head.starts_with(b"BZh") && (b'1'..=b'9').contains(&head[3]) {
            Some(Compression::Bzip2)
        } else {
            None
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Compression::Zstd => "zstd",
            Compression::Gzip => "gzip",
            Compression::Xz => "xz",
            Compression::Bzip2 => "bzip2",
        }
    }

    /// A decoder over `inner` that refuses memory demands beyond the caps above. gzip's
    /// window (32 KiB) and bzip2's block (900 kB) are fixed by their formats, so they need
    /// no cap of their own.
    pub(crate) fn decoder(self, inner: Stream) -> io::Result<Stream> {
        Ok(match self {
            Compression::Zstd => {
                let mut d = zstd::stream::read::Decoder::new(inner)?;
                d.window_log_max(ZSTD_WINDOW_LOG_MAX)?;
                Box::new(Capped {
                    inner: d,
                    kind: self,
                })
            }
            // Multi-member gzip files (concatenated `gzip` outputs) are one stream to `gunzip`.
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(inner)),
            Compression::Xz => {
                let stream = liblzma::stream::Stream::new_stream_decoder(
                    XZ_MEMLIMIT,
                    liblzma::stream::CONCATENATED,
                )
                .map_err(io::Error::from)?;
                let d = liblzma::read::XzDecoder::new_stream(inner, stream);
                Box::new(Capped {
                    inner: d,
                    kind: self,
                })
            }
            Compression::Bzip2 => Box::new(bzip2::read::MultiBzDecoder::new(inner)),
        })
    }
}

/// A decoder whose "needs too much memory" error is replaced by one that names the cap.
struct Capped<R> {
    inner: R,
    kind: Compression,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).map_err(|e| match self.kind {
            Compression::Xz if is_xz_memlimit(&e) => io::Error::other(format!(
                "the xz stream needs a dictionary larger than the {} MiB limit; \
                 recompress it with xz -9 or a smaller preset",
                XZ_DICT_MAX >> 20
            )),
            Compression::Zstd if is_zstd_window(&e) => io::Error::other(format!(
                "the zstd frame needs a window larger than the {} MiB limit; \
                 recompress it without --long or --ultra",
                (1u64 << ZSTD_WINDOW_LOG_MAX) >> 20
            )),
            _ => e,
        })
    }
}

fn is_xz_memlimit(e: &io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<liblzma::stream::Error>())
        .is_some_and(|le| matches!(le, liblzma::stream::Error::MemLimit))
}

/// zstd reports a window over the limit as a bare message (ZSTD_error_frameParameter_windowTooLarge).
fn is_zstd_window(e: &io::Error) -> bool {
    e.to_string().contains("Frame requires too much memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_compression_magic() {
        assert_eq!(
            Compression::from_magic(&[0x28, 0xb5, 0x2f, 0xfd, 0]),
            Some(Compression::Zstd)
        );
        assert_eq!(
            Compression::from_magic(&[0x1f, 0x8b, 8]),
            Some(Compression::Gzip)
        );
        assert_eq!(
            Compression::from_magic(b"\xfd7zXZ\x00\x00"),
            Some(Compression::Xz)
        );
        assert_eq!(
            Compression::from_magic(b"BZh91AY"),
            Some(Compression::Bzip2)
        );
        assert_eq!(Compression::from_magic(b"BZhx"), None);
        assert_eq!(Compression::from_magic(b"1,2,3\n"), None);
    }
}
