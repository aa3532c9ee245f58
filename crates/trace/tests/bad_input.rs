//! Bad input never panics: each case ends in one `TraceError` line that names the file and
//! the line or byte offset, and says what was expected.

use std::io::Write;
use std::path::{Path, PathBuf};

use trace::{CsvSpec, Format, ReadOptions, TraceError};

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        Scratch {
            dir: tempfile::tempdir().expect("temporary directory"),
        }
    }

    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes).expect("write scratch file");
        path
    }
}

/// Reads `path` to the end and returns the error it stops with (and how many requests
/// came before it).
fn first_error(path: &Path, format: Option<Format>, opts: &ReadOptions) -> (usize, TraceError) {
    let mut reader = match trace::open(path, format, opts) {
        Ok(r) => r,
        Err(e) => return (0, e),
    };
    let mut n = 0;
    loop {
        match reader.next_request() {
            Ok(Some(_)) => n += 1,
            Ok(None) => panic!("{} read cleanly ({n} requests)", path.display()),
            Err(e) => return (n, e),
        }
    }
}

fn one_line(e: &TraceError, path: &Path) -> String {
    let text = e.to_string();
    assert!(!text.contains('\n'), "multi-line error: {text}");
    assert!(
        text.contains(&path.display().to_string()),
        "no file name: {text}"
    );
    text
}

#[test]
fn truncated_binary_record_names_its_offset() {
    let s = Scratch::new();
    let mut bytes = vec![0u8; 24 * 3];
    for (i, rec) in bytes.chunks_mut(24).enumerate() {
        rec[4] = i as u8 + 1; // key
        rec[12] = 1; // size
    }
    bytes.extend_from_slice(&[7; 10]);
    let path = s.file("cut.oracleGeneral.bin", &bytes);
    let (n, e) = first_error(&path, None, &ReadOptions::default());
    assert_eq!(n, 3);
    let text = one_line(&e, &path);
    assert!(
        text.ends_with(
            ": byte offset 72: truncated record: expected 24 bytes, found only 10 before the end of the data"
        ),
        "{text}"
    );
    assert!(matches!(e, TraceError::Record { offset: 72, .. }));
}

#[test]
fn truncated_record_inside_compressed_data() {
    let s = Scratch::new();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&[1u8; 8 * 2 + 3]).unwrap();
    let path = s.file("keys.bin64be.gz", &gz.finish().unwrap());
    let (n, e) = first_error(&path, None, &ReadOptions::default());
    assert_eq!(n, 2);
    let text = one_line(&e, &path);
    assert!(
        text.contains("byte offset 16 of the decompressed data"),
        "{text}"
    );
    assert!(text.contains("expected 8 bytes, found only 3"), "{text}");
}

#[test]
fn malformed_csv_line_names_line_and_field() {
    let s = Scratch::new();
    let path = s.file(
        "tw.csv",
        b"0,a,3,10,1,get,0\n1,b,3,10,1,set,0\n2,c,3,ten,1,get,0\n3,d,3,10,1,get,0\n",
    );
    let (n, e) = first_error(&path, None, &ReadOptions::default());
    assert_eq!(n, 2);
    let text = one_line(&e, &path);
    assert!(
        text.ends_with("tw.csv:3: expected a value size in field 4, found `ten`"),
        "{text}"
    );
    assert!(matches!(e, TraceError::Line { line: 3, .. }));
}

#[test]
fn csv_line_with_too_few_fields() {
    let s = Scratch::new();
    let path = s.file("spec.csv", b"t,key,size\n1,k1,10\n2,k2\n");
    let opts = ReadOptions {
        csv: Some("time-col=1,obj-id-col=2,obj-size-col=3".parse().unwrap()),
        ..ReadOptions::default()
    };
    let (n, e) = first_error(&path, Some(Format::Csv), &opts);
    assert_eq!(n, 1);
    let text = one_line(&e, &path);
    assert!(
        text.contains("spec.csv:3: expected at least 3 `,`-separated fields, found 2"),
        "{text}"
    );
}

#[test]
fn unknown_op_in_block_trace() {
    let s = Scratch::new();
    let path = s.file(
        "msr.csv",
        b"128166385295514663,hm,0,Write,4096,512,1\n128166385295514663,hm,0,Trim,4096,512,1\n",
    );
    let (n, e) = first_error(&path, Some(Format::Msr), &ReadOptions::default());
    assert_eq!(n, 1);
    let text = one_line(&e, &path);
    assert!(
        text.contains("msr.csv:2: expected `Read` or `Write` in field 4, found `Trim`"),
        "{text}"
    );
}

#[test]
fn unknown_format_name() {
    let e = "parquet".parse::<Format>().unwrap_err();
    let text = e.to_string();
    assert!(
        text.starts_with(
            "unknown trace format `parquet`; expected one of: oracleGeneral, lcs, csv"
        ),
        "{text}"
    );
}

#[test]
fn undetectable_format_asks_for_format() {
    let s = Scratch::new();
    let path = s.file("mystery.dat", &[0, 1, 2, 3, 0, 0, 0, 9, 200, 100]);
    let e = trace::detect(&path).unwrap_err();
    let text = one_line(&e, &path);
    assert!(text.contains("cannot tell the trace format"), "{text}");
    assert!(text.contains("pass --format"), "{text}");
    let empty = s.file("empty.csv", b"");
    assert!(trace::open(&empty, None, &ReadOptions::default())
        .err()
        .is_some_and(|e| e.to_string().contains("trace is empty")));
    // Named explicitly, an empty trace is simply empty.
    let mut r = trace::open(&empty, Some(Format::Txt), &ReadOptions::default()).unwrap();
    assert!(r.next_request().unwrap().is_none());
}

#[test]
fn unreadable_files() {
    let s = Scratch::new();
    let missing = s.dir.path().join("nope.csv");
    let (_, e) = first_error(&missing, None, &ReadOptions::default());
    let text = one_line(&e, &missing);
    assert!(text.contains("cannot open"), "{text}");
    assert!(matches!(e, TraceError::Io { .. }));
    let dir = s.dir.path().to_path_buf();
    let (_, e) = first_error(&dir, Some(Format::Txt), &ReadOptions::default());
    assert!(one_line(&e, &dir).contains("is a directory"));
}

#[test]
fn corrupt_compressed_data() {
    let s = Scratch::new();
    let mut bytes = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];
    bytes.extend_from_slice(&[0xff; 64]);
    let path = s.file("broken.txt.gz", &bytes);
    let (_, e) = first_error(&path, Some(Format::Txt), &ReadOptions::default());
    let text = one_line(&e, &path);
    assert!(text.contains("cannot decompress"), "{text}");
}

#[test]
fn lcs_header_checks() {
    let s = Scratch::new();
    let short = s.file("short.lcs", &0x1234_5678_9abc_def0u64.to_le_bytes());
    let (_, e) = first_error(&short, None, &ReadOptions::default());
    assert!(one_line(&e, &short).contains("truncated lcs header: expected 8192 bytes"));

    let mut header = vec![0u8; 8192];
    header[..8].copy_from_slice(&0x1234_5678_9abc_def0u64.to_le_bytes());
    header[8] = 1;
    let path = s.file("badend.lcs", &header);
    let (_, e) = first_error(&path, None, &ReadOptions::default());
    assert!(
        one_line(&e, &path).contains("not an lcs trace: header magic"),
        "{e}"
    );

    header[8184..].copy_from_slice(&0x1234_5678_9abc_def0u64.to_le_bytes());
    header[8] = 42;
    let path = s.file("v42.lcs", &header);
    let (_, e) = first_error(&path, None, &ReadOptions::default());
    assert!(
        one_line(&e, &path).contains("unsupported lcs version 42"),
        "{e}"
    );
}

#[test]
fn tar_without_a_file() {
    let s = Scratch::new();
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Directory);
    header.set_path("dir/").unwrap();
    header.set_size(0);
    header.set_cksum();
    builder.append(&header, &[][..]).unwrap();
    let path = s.file("nothing.tar", &builder.into_inner().unwrap());
    let (_, e) = first_error(&path, Some(Format::Txt), &ReadOptions::default());
    assert!(
        one_line(&e, &path).contains("tar archive holds no regular file"),
        "{e}"
    );
}

#[test]
fn bad_parsplice_event_and_bad_lirs_line() {
    let s = Scratch::new();
    let path = s.file(
        "semanticPerf.4",
        b"1,DBMemoryGet,0,5\n1,DBMemoryMRUGet,0,5\n2,DBMemoryFly,0,5\n",
    );
    let (n, e) = first_error(&path, None, &ReadOptions::default());
    assert_eq!(n, 1);
    assert!(
        one_line(&e, &path).contains("semanticPerf.4:3: unknown event `DBMemoryFly`"),
        "{e}"
    );
    let path = s.file("x.trace", b"1\n*\n2\nthree\n");
    let (n, e) = first_error(&path, Some(Format::Lirs), &ReadOptions::default());
    assert_eq!(n, 2);
    assert!(
        one_line(&e, &path).contains("x.trace:4: expected a block number or `*`, found `three`"),
        "{e}"
    );
}

#[test]
fn bad_options() {
    let e = "obj-id-col=0".parse::<CsvSpec>().unwrap_err();
    assert!(matches!(e, TraceError::BadSpec { .. }));
    let s = Scratch::new();
    let path = s.file("k.txt", b"1\n");
    let opts = ReadOptions {
        block_size: 0,
        ..ReadOptions::default()
    };
    let e = trace::open(&path, None, &opts)
        .err()
        .expect("block size 0 is refused");
    assert!(one_line(&e, &path).contains("block size must be at least 1 byte"));
    let path = s.file("nospec.csv", b"a;b\n1;2\n");
    let e = trace::open(&path, None, &ReadOptions::default())
        .err()
        .expect("csv without spec");
    assert!(one_line(&e, &path).contains("csv needs a column spec"));
}

/// Every text format with a time field rejects negative, non-finite and unrepresentable
/// times (at or above 2^53 s, where whole seconds merge) at their line, rather than handing
/// the replay a clock it cannot tick on.
#[test]
fn out_of_range_times_are_rejected_in_every_timed_text_format() {
    let s = Scratch::new();
    let csv = ReadOptions {
        csv: Some("time-col=1,obj-id-col=2,obj-size-col=3".parse().unwrap()),
        ..ReadOptions::default()
    };
    let plain = ReadOptions::default();
    // (file name, format, options, a good line, the line template with TIME in it)
    let cases: [(&str, Format, &ReadOptions, &str, &str); 6] = [
        ("t.csv", Format::Csv, &csv, "0,1,10", "TIME,2,10"),
        ("p.csv", Format::Parsplice, &plain, "0,GET,1", "TIME,GET,2"),
        (
            "tw.csv",
            Format::Twitter,
            &plain,
            "0,k,1,2,c,get,0",
            "TIME,k,1,2,c,get,0",
        ),
        (
            "sy.csv",
            Format::Systor,
            &plain,
            "0,0.1,R,1,4096,512",
            "TIME,0.1,R,1,4096,512",
        ),
        (
            "cbs.csv",
            Format::TencentCbs,
            &plain,
            "0,8,1,0,1",
            "TIME,8,1,0,1",
        ),
        (
            "kv.csv",
            Format::Cachelib,
            &plain,
            "0,k,1,GET,1,10,0,u,s,0",
            "TIME,k,1,GET,1,10,0,u,s,0",
        ),
    ];
    for (name, format, opts, good, template) in cases {
        for time in ["100000000000000000000", "9007199254740992", "-5", "1e300"] {
            let header = match format {
                Format::Cachelib => {
                    "op_time,key,key_size,op,op_count,size,cache_hits,usecase,sub_usecase,ttl\n"
                }
                _ => "",
            };
            let body = format!("{header}{good}\n{}\n", template.replace("TIME", time));
            let path = s.file(name, body.as_bytes());
            let (n, e) = first_error(&path, Some(format), opts);
            assert_eq!(n, 1, "{name} {time}: {e}");
            let text = one_line(&e, &path);
            let line = if header.is_empty() { 2 } else { 3 };
            assert!(
                text.contains(&format!("{name}:{line}:"))
                    && text.contains("a time in seconds from 0 to 2^53")
                    && text.contains(time),
                "{name} {time}: {text}"
            );
        }
    }
}

#[test]
fn a_txt_line_with_several_fields_is_not_one_key() {
    let s = Scratch::new();
    let path = s.file("keys.txt", b"1\nabc\n1 2 -5\n");
    let (n, e) = first_error(&path, Some(Format::Txt), &ReadOptions::default());
    assert_eq!(n, 2);
    let text = one_line(&e, &path);
    assert!(
        text.contains("keys.txt:3: expected one key per line, found 3 fields in `1 2 -5`"),
        "{text}"
    );
}

#[test]
fn object_sizes_that_overflow_are_rejected_not_wrapped() {
    let s = Scratch::new();
    let path = s.file(
        "tw.csv",
        b"0,k,1,2,c,get,0\n1,k,18446744073709551615,2,c,get,0\n",
    );
    let (n, e) = first_error(&path, Some(Format::Twitter), &ReadOptions::default());
    assert_eq!(n, 1);
    let text = one_line(&e, &path);
    assert!(
        text.contains("tw.csv:2: expected a value size below 4 GiB"),
        "{text}"
    );
}

#[test]
fn an_lcs_object_of_4_gib_or_more_is_an_error_not_clamped() {
    let s = Scratch::new();
    let mut bytes = vec![0u8; 8192];
    let magic = 0x1234_5678_9abc_def0u64.to_le_bytes();
    bytes[..8].copy_from_slice(&magic);
    bytes[8..16].copy_from_slice(&3u64.to_le_bytes());
    bytes[8184..].copy_from_slice(&magic);
    // Two v3 records (36 bytes: time u32, key u64, size u64, op, ...): 10 bytes, then 2^32.
    for (key, size) in [(1u64, 10u64), (2, 1 << 32)] {
        let mut rec = vec![0u8; 36];
        rec[4..12].copy_from_slice(&key.to_le_bytes());
        rec[12..20].copy_from_slice(&size.to_le_bytes());
        bytes.extend_from_slice(&rec);
    }
    let path = s.file("big.lcs", &bytes);
    let (n, e) = first_error(&path, Some(Format::Lcs), &ReadOptions::default());
    assert_eq!(n, 1);
    let text = one_line(&e, &path);
    assert!(
        text.contains("byte offset 8228: object size 4294967296 is 4 GiB or more"),
        "{text}"
    );
}
