//! Unwrapping a tar archive to its first regular file. Members before it are skipped in
//! constant memory; the only ones read into memory are the metadata members that describe
//! the next one (GNU long names and links, pax headers), and those are capped so an archive
//! cannot make the reader hold gigabytes of "name".

use std::io::{self, Read};

use crate::Stream;

/// The largest GNU long name/link or pax header member read. Linux paths stop at 4 KiB; pax
/// records are a handful of `key=value` lines.
pub(crate) const MAX_TAR_METADATA: u64 = 64 * 1024;

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// What a metadata member is, for the error; `None` for members that carry file data.
fn metadata_kind(kind: tar::EntryType) -> Option<&'static str> {
    if kind.is_gnu_longname() {
        Some("GNU long name")
    } else if kind.is_gnu_longlink() {
        Some("GNU long link name")
    } else if kind.is_pax_local_extensions() || kind.is_pax_global_extensions() {
        Some("pax header")
    } else {
        None
    }
}

/// Positions `stream` at the content of the archive's first regular file and returns that
/// file's name. Archives with several files are read as their first file only.
pub(crate) fn first_tar_member(mut stream: Stream) -> io::Result<(String, Stream)> {
    let mut long_name: Option<String> = None;
    loop {
        let mut block = [0u8; 512];
        match stream.read_exact(&mut block) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Err(invalid("tar archive holds no regular file".into()))
            }
            Err(e) => return Err(e),
        }
        if block.iter().all(|b| *b == 0) {
            return Err(invalid("tar archive holds no regular file".into()));
        }
        let header = tar::Header::from_byte_slice(&block);
        let size = header.entry_size()?;
        let kind = header.entry_type();
        if kind.is_file() {
            let name = long_name
                .take()
                .unwrap_or_else(|| String::from_utf8_lossy(&header.path_bytes()).into_owned());
            let base = name.rsplit('/').next().unwrap_or(&name).to_string();
            return Ok((base, Box::new(stream.take(size))));
        }
        if let Some(what) = metadata_kind(kind) {
            if size > MAX_TAR_METADATA {
                return Err(invalid(format!(
                    "tar member is a {what} of {size} bytes, more than the {MAX_TAR_METADATA}-byte limit"
                )));
            }
        }
        let padded = size
            .checked_next_multiple_of(512)
            .ok_or_else(|| invalid(format!("tar member size {size} is impossible")))?;
        if kind.is_gnu_longname() {
            let mut raw = Vec::new();
            (&mut stream).take(padded).read_to_end(&mut raw)?;
            raw.truncate(size as usize);
            let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
            long_name = Some(String::from_utf8_lossy(&raw[..end]).into_owned());
        } else {
            io::copy(&mut (&mut stream).take(padded), &mut io::sink())?;
        }
    }
}
