//! Every count a trace states is bounded: a record standing for many requests (an `arc`
//! block range, a `cachelib` op_count, a block I/O expanded into blocks) past
//! `max_record_requests` is an error naming the file and line or offset, and decompressors
//! and the tar unwrapper refuse resource demands beyond their documented caps. The hostile
//! inputs are a few bytes each, made here.

use std::io::Write;
use std::path::{Path, PathBuf};

use trace::{Format, ReadOptions, TraceError};

fn scratch(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).expect("write scratch file");
    path
}

/// Reads `path` to the end: the requests read, or the error with how many came before it.
fn read_all(
    path: &Path,
    format: Option<Format>,
    opts: &ReadOptions,
) -> Result<u64, (u64, TraceError)> {
    let mut reader = trace::open(path, format, opts).map_err(|e| (0, e))?;
    let mut n = 0;
    loop {
        match reader.next_request() {
            Ok(Some(_)) => n += 1,
            Ok(None) => return Ok(n),
            Err(e) => return Err((n, e)),
        }
    }
}

fn refused(path: &Path, format: Option<Format>, opts: &ReadOptions) -> String {
    match read_all(path, format, opts) {
        Ok(n) => panic!("{} read cleanly ({n} requests)", path.display()),
        Err((_, e)) => {
            let text = e.to_string();
            assert!(!text.contains('\n'), "multi-line error: {text}");
            text
        }
    }
}

fn limited(max: u64) -> ReadOptions {
    ReadOptions {
        max_record_requests: max,
        ..ReadOptions::default()
    }
}

#[test]
fn the_27_byte_arc_trace_is_an_error_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = scratch(&dir, "bomb.lis", b"0 18446744073709551615 0 1\n");
    let err = refused(&path, None, &ReadOptions::default());
    let want = format!(
        "{}:1: a block range of 18446744073709551615 pages",
        path.display()
    );
    assert!(err.starts_with(&want), "{err}");
    assert!(err.contains("limit of 1048576") && err.contains("--max-record-requests"));
    // One range under the limit is every page of it; one over is refused before any.
    let path = scratch(&dir, "two.lis", b"10 4 0 1\n20 5 0 2\n");
    match read_all(&path, None, &limited(4)) {
        Err((4, e)) => assert!(e.to_string().contains("two.lis:2:"), "{e}"),
        other => panic!("expected 4 requests then an error at line 2, got {other:?}"),
    }
    assert_eq!(read_all(&path, None, &limited(5)).unwrap(), 9);
}

#[test]
fn a_cachelib_op_count_past_the_limit_is_an_error_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = scratch(
        &dir,
        "bomb.csv",
        b"op_time,key,key_size,op,op_count,size\n1,7,1,GET,3,10\n2,8,1,GET,18446744073709551615,10\n",
    );
    let err = refused(&path, Some(Format::Cachelib), &ReadOptions::default());
    assert!(
        err.starts_with(&format!(
            "{}:3: op_count 18446744073709551615",
            path.display()
        )),
        "{err}"
    );
    assert!(err.contains("limit of 1048576"), "{err}");
    match read_all(&path, Some(Format::Cachelib), &limited(3)) {
        Err((3, _)) => {}
        other => panic!("expected the 3 copies of line 2 first, got {other:?}"),
    }
}

#[test]
fn an_expanded_block_io_past_the_limit_is_an_error_in_every_block_reader() {
    let dir = tempfile::tempdir().unwrap();
    let expand = ReadOptions {
        expand_blocks: true,
        ..ReadOptions::default()
    };
    let huge = u64::MAX;
    let text_cases = [
        (
            "msr.csv",
            Format::Msr,
            format!("128166372003061629,hm,1,Read,0,{huge},100\n"),
        ),
        // Offsets and sizes in sectors.
        (
            "cbs.csv",
            Format::TencentCbs,
            format!("1538323200,0,{},0,1\n", huge / 512),
        ),
        (
            "systor.csv",
            Format::Systor,
            format!("Timestamp,Response,IOType,LUN,Offset,Size\n1.5,0.1,R,0,0,{huge}\n"),
        ),
    ];
    for (name, format, body) in text_cases {
        let path = scratch(&dir, name, body.as_bytes());
        let err = refused(&path, Some(format), &expand);
        assert!(err.contains("limit of 1048576"), "{name}: {err}");
        let line = if format == Format::Systor { 2 } else { 1 };
        assert!(
            err.starts_with(&format!("{}:{line}: an I/O of", path.display())),
            "{name}: {err}"
        );
        // Without expansion the same I/O is one request.
        assert_eq!(
            read_all(&path, Some(format), &ReadOptions::default()).unwrap(),
            1
        );
    }
    // vscsi v1: one 4 GiB I/O is 8,388,608 blocks of 512 bytes.
    let mut rec = [0u8; 32];
    rec[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    rec[14..16].copy_from_slice(&0x0100u16.to_le_bytes());
    let path = scratch(&dir, "one.vscsi", &rec);
    let err = refused(&path, Some(Format::Vscsi), &expand);
    assert!(
        err.starts_with(&format!("{}: byte offset 0: an I/O of", path.display())),
        "{err}"
    );
    assert!(err.contains("8388608 requests"), "{err}");
}

/// A 512-byte ustar header for a member `name` of `size` bytes and type `kind` (with a
/// valid checksum).
fn tar_header(name: &str, size: u64, kind: u8) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..107].copy_from_slice(b"0000644");
    h[108..115].copy_from_slice(b"0000000");
    h[116..123].copy_from_slice(b"0000000");
    if size < 8u64.pow(11) {
        h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    } else {
        // GNU base-256: the high bit of the first byte, then the size big-endian.
        h[124] = 0x80;
        h[128..136].copy_from_slice(&size.to_be_bytes());
    }
    h[136..148].copy_from_slice(b"00000000000\0");
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

fn padded(data: &[u8]) -> Vec<u8> {
    let mut v = data.to_vec();
    v.resize(data.len().div_ceil(512) * 512, 0);
    v
}

/// An archive of one metadata member of `meta_len` bytes (type `kind`), then `trace.lis`.
fn archive_with(kind: u8, meta: &[u8]) -> Vec<u8> {
    let body = b"1 2 0 1\n";
    let mut tar = tar_header("././@LongLink", meta.len() as u64, kind).to_vec();
    tar.extend(padded(meta));
    tar.extend(tar_header("trace.lis", body.len() as u64, b'0'));
    tar.extend(padded(body));
    tar.extend([0u8; 1024]);
    tar
}

#[test]
fn tar_long_names_and_pax_headers_past_the_cap_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    // A long name under the cap names the member (so `.lis` detection works).
    let mut name = "d/".repeat(1000);
    name.push_str("bomb.lis\0");
    let path = scratch(&dir, "ok.tar", &archive_with(b'L', name.as_bytes()));
    assert_eq!(read_all(&path, None, &ReadOptions::default()).unwrap(), 2);
    for (kind, what) in [
        (b'L', "GNU long name"),
        (b'K', "GNU long link name"),
        (b'x', "pax header"),
        (b'g', "pax header"),
    ] {
        let meta = vec![b'a'; 64 * 1024 + 1];
        let path = scratch(&dir, "big.tar", &archive_with(kind, &meta));
        let err = refused(&path, Some(Format::Arc), &ReadOptions::default());
        assert_eq!(
            err,
            format!(
                "{}: cannot unpack the tar archive: tar member is a {what} of 65537 bytes, \
                 more than the 65536-byte limit",
                path.display()
            )
        );
    }
    // The archive: a long name claiming 8 GiB, compressed, is refused from its header
    // (the old reader buffered the whole "name").
    let mut member = tar_header("././@LongLink", 8 << 30, b'L').to_vec();
    member.extend([0u8; 4096]);
    let path = scratch(
        &dir,
        "bomb.tar.zst",
        &zstd::encode_all(member.as_slice(), 3).unwrap(),
    );
    let err = refused(&path, None, &ReadOptions::default());
    assert!(err.contains("GNU long name of 8589934592 bytes"), "{err}");
}

#[test]
fn a_tar_member_size_beyond_u64_blocks_is_an_error_not_a_wrap() {
    let dir = tempfile::tempdir().unwrap();
    // A directory entry (type 5, skipped) whose base-256 size is u64::MAX.
    let h = tar_header("dir/", u64::MAX, b'5');
    let path = scratch(&dir, "wrap.tar", &h);
    let err = refused(&path, Some(Format::Arc), &ReadOptions::default());
    assert!(err.contains("is impossible"), "{err}");
}

/// IEEE CRC-32, as the xz block header's check uses.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// `data` as xz, with the LZMA2 dictionary size in its block header set to the encoding
/// `props` (dict = (2 | props & 1) << (props / 2 + 11); 40 is 4 GiB - 1) and the header's
/// CRC recomputed. Decoding with a larger dictionary than the encoder used is valid.
fn xz_with_dict(data: &[u8], props: u8) -> Vec<u8> {
    let mut enc = liblzma::write::XzEncoder::new(Vec::new(), 1);
    enc.write_all(data).unwrap();
    let mut xz = enc.finish().unwrap();
    let start = 12; // after the stream header
    let size = (usize::from(xz[start]) + 1) * 4;
    let flags = xz[start + 1];
    assert_eq!(flags & 0x03, 0, "one filter");
    let mut at = start + 2;
    for present in [flags & 0x40 != 0, flags & 0x80 != 0] {
        if present {
            while xz[at] & 0x80 != 0 {
                at += 1;
            }
            at += 1;
        }
    }
    assert_eq!(
        &xz[at..at + 2],
        &[0x21, 0x01],
        "LZMA2 with one property byte"
    );
    xz[at + 2] = props;
    let crc = crc32(&xz[start..start + size - 4]);
    xz[start + size - 4..start + size].copy_from_slice(&crc.to_le_bytes());
    xz
}

#[test]
fn an_xz_dictionary_past_the_cap_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let body: Vec<u8> = (0..1000)
        .flat_map(|k| format!("{k}\n").into_bytes())
        .collect();
    // 128 MiB (props 30) is the cap and reads; 256 MiB (32) and 4 GiB (40) are refused.
    let path = scratch(&dir, "at_cap.txt.xz", &xz_with_dict(&body, 30));
    assert_eq!(
        read_all(&path, None, &ReadOptions::default()).unwrap(),
        1000
    );
    for props in [32, 40] {
        let path = scratch(&dir, "bomb.txt.xz", &xz_with_dict(&body, props));
        let err = refused(&path, Some(Format::Txt), &ReadOptions::default());
        assert!(
            err.starts_with(&path.display().to_string()),
            "names the file: {err}"
        );
        assert!(
            err.contains("needs a dictionary larger than the 128 MiB limit"),
            "{err}"
        );
    }
}

#[test]
fn a_zstd_window_past_the_cap_is_refused_naming_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let body: Vec<u8> = (0..1000)
        .flat_map(|k| format!("{k}\n").into_bytes())
        .collect();
    // A frame declaring a 256 MiB window (window log 28) without a content size.
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    enc.include_contentsize(false).unwrap();
    enc.long_distance_matching(true).unwrap();
    enc.window_log(28).unwrap();
    enc.write_all(&body).unwrap();
    let path = scratch(&dir, "wide.txt.zst", &enc.finish().unwrap());
    let err = refused(&path, Some(Format::Txt), &ReadOptions::default());
    assert!(
        err.starts_with(&path.display().to_string()) && err.contains("128 MiB limit"),
        "{err}"
    );
}
