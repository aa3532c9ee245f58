//! The small traces in `tests/fixtures/` (one or two per format, used by the docs' examples)
//! are generated here, and every one must read back, with its format auto-detected, as
//! exactly the requests that produced it.
//!
//! Regenerate them with `MANTLE_WRITE_FIXTURES=1 cargo test -p mantle-trace --test fixtures`.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

use trace::{hash_key, CsvSpec, Format, Op, ReadOptions, Request};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
/// Requests per fixture (before any expansion).
const N: usize = 300;
/// Distinct objects the requests are drawn from.
const OBJECTS: u64 = 60;

/// A deterministic skewed stream of object indexes (low indexes are hot).
fn objects() -> Vec<u64> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..N)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            (OBJECTS as f64 * u * u) as u64
        })
        .collect()
}

/// A time stamp on a quarter-second grid (exact in binary floating point).
fn quarter(i: usize) -> f64 {
    i as f64 * 0.25
}

fn req(time: f64, key: u64, size: u32, op: Op, offset: u64) -> Request {
    Request {
        time,
        key,
        size,
        op,
        offset,
    }
}

/// Op of request `i` for an object: first sight is a write, a few deletes, else reads.
fn kv_op(seen: &mut HashMap<u64, ()>, obj: u64, i: usize) -> Op {
    if seen.insert(obj, ()).is_none() {
        Op::Put
    } else if i.is_multiple_of(37) {
        Op::Delete
    } else {
        Op::Get
    }
}

struct Fixture {
    file: &'static str,
    /// The format detection must find; `None` if it must be named.
    detected: Option<Format>,
    format: Format,
    opts: ReadOptions,
    /// Uncompressed content; the file is compressed as its name says.
    content: Vec<u8>,
    expected: Vec<Request>,
}

fn fixture(
    file: &'static str,
    format: Format,
    content: Vec<u8>,
    expected: Vec<Request>,
) -> Fixture {
    Fixture {
        file,
        detected: Some(format),
        format,
        opts: ReadOptions::default(),
        content,
        expected,
    }
}

fn oracle_records(objs: &[u64]) -> (Vec<u8>, Vec<Request>) {
    let mut next = vec![-1i64; objs.len()];
    let mut last: HashMap<u64, usize> = HashMap::new();
    for (i, o) in objs.iter().enumerate().rev() {
        if let Some(&j) = last.get(o) {
            next[i] = j as i64;
        }
        last.insert(*o, i);
    }
    let mut bytes = Vec::new();
    let mut expected = Vec::new();
    for (i, &o) in objs.iter().enumerate() {
        let (time, key, size) = (1_000 + i as u32 / 10, 5_000 + o, 512 * (1 + (o % 8) as u32));
        bytes.extend_from_slice(&time.to_le_bytes());
        bytes.extend_from_slice(&key.to_le_bytes());
        bytes.extend_from_slice(&size.to_le_bytes());
        bytes.extend_from_slice(&next[i].to_le_bytes());
        expected.push(req(f64::from(time), key, size, Op::Access, 0));
    }
    (bytes, expected)
}

fn lcs_file(records: &[u8], expected: &[Request]) -> Vec<u8> {
    const MAGIC: u64 = 0x1234_5678_9abc_def0;
    let mut header = vec![0u8; 8192];
    header[..8].copy_from_slice(&MAGIC.to_le_bytes());
    header[8..16].copy_from_slice(&1u64.to_le_bytes());
    let mut sizes: HashMap<u64, u32> = HashMap::new();
    for r in expected {
        sizes.insert(r.key, r.size);
    }
    let stat = [
        1i64,
        expected.len() as i64,
        sizes.len() as i64,
        expected.iter().map(|r| i64::from(r.size)).sum(),
        sizes.values().map(|s| i64::from(*s)).sum(),
        expected[0].time as i64,
        expected[expected.len() - 1].time as i64,
    ];
    for (i, v) in stat.iter().enumerate() {
        header[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_le_bytes());
    }
    header[8184..].copy_from_slice(&MAGIC.to_le_bytes());
    header.extend_from_slice(records);
    header
}

fn all_fixtures() -> Vec<Fixture> {
    let objs = objects();
    let mut out = Vec::new();

    let (records, expected) = oracle_records(&objs);
    out.push(fixture(
        "small.oracleGeneral.bin",
        Format::OracleGeneral,
        records.clone(),
        expected.clone(),
    ));
    out.push(fixture(
        "small.lcs",
        Format::Lcs,
        lcs_file(&records, &expected),
        expected,
    ));

    // csv in libCacheSim's twitter_cluster52 layout (recognised without a spec).
    let mut text = String::from("# time, object, size, next_access_vtime\n");
    let mut expected = Vec::new();
    for (i, &o) in objs.iter().enumerate() {
        let (t, key, size) = (i / 5, 9_000_000_000 + o * 7919, 40 + (o * 13 % 200) as u32);
        text += &format!("{t}, {key}, {size}, -1\n");
        expected.push(req(t as f64, key, size, Op::Access, 0));
    }
    out.push(fixture(
        "small_cluster.csv",
        Format::Csv,
        text.into_bytes(),
        expected,
    ));

    // csv described by a column spec: `key;op;size;time`.
    let mut text = String::from("key;op;size;time\n");
    let mut expected = Vec::new();
    let mut seen = HashMap::new();
    for (i, &o) in objs.iter().enumerate() {
        let key = format!("obj-{o}");
        let op = kv_op(&mut seen, o, i);
        let name = match op {
            Op::Put => "set",
            Op::Delete => "delete",
            _ => "get",
        };
        let size = 100 + o as u32;
        text += &format!("{key};{name};{size};{}\n", quarter(i));
        expected.push(req(quarter(i), hash_key(key.as_bytes()), size, op, 0));
    }
    out.push(Fixture {
        opts: ReadOptions {
            csv: Some(
                "obj-id-col=1,op-col=2,obj-size-col=3,time-col=4,delimiter=;,has-header=true"
                    .parse::<CsvSpec>()
                    .unwrap(),
            ),
            ..ReadOptions::default()
        },
        ..fixture("small_spec.csv", Format::Csv, text.into_bytes(), expected)
    });

    // txt: string keys, hashed.
    let mut text = String::new();
    let mut expected = Vec::new();
    for &o in &objs {
        let key = format!("user:{o}");
        text += &key;
        text.push('\n');
        expected.push(req(0.0, hash_key(key.as_bytes()), 1, Op::Access, 0));
    }
    out.push(fixture(
        "small.txt",
        Format::Txt,
        text.into_bytes(),
        expected,
    ));

    // vscsi version 1.
    let mut bytes = Vec::new();
    let mut expected = Vec::new();
    for (i, &o) in objs.iter().enumerate() {
        let (lbn, len) = (100_000 + o * 16, 4096 * (1 + (o % 4) as u32));
        let cmd: u16 = if o.is_multiple_of(3) { 0x2a } else { 0x28 };
        let ts_us = 5_000_000_000u64 + i as u64 * 250_000;
        bytes.extend_from_slice(&(i as u32).to_le_bytes());
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&cmd.to_le_bytes());
        bytes.extend_from_slice(&0x0100u16.to_le_bytes());
        bytes.extend_from_slice(&lbn.to_le_bytes());
        bytes.extend_from_slice(&ts_us.to_le_bytes());
        expected.push(req(ts_us as f64 / 1e6, lbn, len, Op::Access, lbn * 512));
    }
    out.push(fixture("small.vscsi", Format::Vscsi, bytes, expected));

    // msr: FILETIME, host, disk, Read/Write, offset, size, response.
    let mut text = String::new();
    let mut expected = Vec::new();
    for (i, &o) in objs.iter().enumerate() {
        let unix = 1_172_164_929 + i as u64 / 4;
        let ticks = (unix + 11_644_473_600) * 10_000_000 + (i as u64 % 4) * 2_500_000;
        let (offset, size) = (o * 65_536, 4096 * (1 + o % 3));
        let kind = if o.is_multiple_of(2) { "Read" } else { "Write" };
        text += &format!("{ticks},src1,0,{kind},{offset},{size},{}\n", 100 + i);
        let time = unix as f64 + (i % 4) as f64 * 0.25;
        expected.push(req(time, offset, size as u32, Op::Access, offset));
    }
    out.push(fixture(
        "small_msr.csv",
        Format::Msr,
        text.into_bytes(),
        expected,
    ));

    // arc: `start count 0 reqno`, zstd-compressed.
    let mut text = String::new();
    let mut expected = Vec::new();
    for (i, &o) in objs.iter().take(N / 2).enumerate() {
        let (start, count) = (o * 8, 1 + o % 4);
        text += &format!("{start} {count} 0 {i}\n");
        for page in start..start + count {
            expected.push(req(0.0, page, 512, Op::Access, page * 512));
        }
    }
    out.push(fixture(
        "small.lis.zst",
        Format::Arc,
        text.into_bytes(),
        expected,
    ));

    // lirs: block numbers with `*` markers, gzip-compressed.
    let mut text = String::new();
    let mut expected = Vec::new();
    for (i, &o) in objs.iter().enumerate() {
        if i.is_multiple_of(50) {
            text += "*\n";
        }
        text += &format!("{}\n", o + 1);
        expected.push(req(0.0, o + 1, 1, Op::Access, 0));
    }
    out.push(fixture(
        "small_lirs.trace.gz",
        Format::Lirs,
        text.into_bytes(),
        expected,
    ));

    // parsplice: a raw semanticPerf log in a tar.gz, and the derived CSV.
    let mut log = String::new();
    let mut derived = String::from("timestamp_s,op,key\n");
    let mut expected = Vec::new();
    let mut seen = HashMap::new();
    for (i, &o) in objs.iter().enumerate() {
        let (t, key) = (
            1_504_318_813 + i as u64 / 20,
            14_045_287_823_504_495_930u64.wrapping_add(o * 1_000_003),
        );
        if seen.insert(o, ()).is_none() {
            log += &format!("{t},DBMemoryPut,0,{key}\n{t},DBMemoryPutUnique,0,{key}\n{t},DBMemoryMRUPut,0,{key}\n");
            derived += &format!("{t},PUT,{key}\n");
            expected.push(req(t as f64, key, 1, Op::Put, 0));
        }
        log += &format!("{t},DBMemoryGet,0,{key}\n{t},DBMemoryMRUGet,0,{key}\n");
        derived += &format!("{t},GET,{key}\n");
        expected.push(req(t as f64, key, 1, Op::Get, 0));
    }
    out.push(fixture(
        "small_semanticPerf.4.tar.gz",
        Format::Parsplice,
        log.into_bytes(),
        expected.clone(),
    ));
    out.push(fixture(
        "small_getput.csv",
        Format::Parsplice,
        derived.into_bytes(),
        expected,
    ));

    // twitter: key,key_size,value_size,client,op,ttl.
    let mut text = String::new();
    let mut expected = Vec::new();
    let mut seen = HashMap::new();
    for (i, &o) in objs.iter().enumerate() {
        let key = format!("tw:{o}:k");
        let op = kv_op(&mut seen, o, i);
        let name = match op {
            Op::Put => {
                if o.is_multiple_of(2) {
                    "set"
                } else {
                    "add"
                }
            }
            Op::Delete => "delete",
            _ => {
                if i.is_multiple_of(5) {
                    "gets"
                } else {
                    "get"
                }
            }
        };
        let value = 20 + (o * 7 % 300) as u32;
        text += &format!(
            "{},{key},{},{value},{},{name},3600\n",
            i / 10,
            key.len(),
            o % 5
        );
        expected.push(req(
            (i / 10) as f64,
            hash_key(key.as_bytes()),
            key.len() as u32 + value,
            op,
            0,
        ));
    }
    out.push(fixture(
        "small_twitter.csv",
        Format::Twitter,
        text.into_bytes(),
        expected,
    ));

    // cachelib kvcache: op_count expands rows.
    let mut text =
        String::from("op_time,key,key_size,op,op_count,size,cache_hits,ttl,usecase,sub_usecase\n");
    let mut expected = Vec::new();
    let mut seen = HashMap::new();
    for (i, &o) in objs.iter().take(N / 2).enumerate() {
        let key = format!("k{:015x}", o.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 4);
        let op = kv_op(&mut seen, o, i);
        let (name, count) = match op {
            Op::Put => (
                if i.is_multiple_of(2) {
                    "SET"
                } else {
                    "SET_LEASE"
                },
                1,
            ),
            Op::Delete => ("DELETE", 1),
            _ => (
                if i.is_multiple_of(3) {
                    "GET_LEASE"
                } else {
                    "GET"
                },
                1 + (i as u64 % 3),
            ),
        };
        let (ksize, vsize) = (16, 50 + o as u32);
        text += &format!(
            "{},{key},{ksize},{name},{count},{vsize},0,0,1,1\n",
            604_038_471 + i / 10
        );
        for _ in 0..count {
            expected.push(req(
                (604_038_471 + i / 10) as f64,
                hash_key(key.as_bytes()),
                ksize + vsize,
                op,
                0,
            ));
        }
    }
    out.push(fixture(
        "small_kvcache.csv",
        Format::Cachelib,
        text.into_bytes(),
        expected,
    ));

    // cachelib block_chunk (Tectonic).
    let mut text = String::from("op_time,block_id,block_id_size,io_size,io_offset,user_name,user_namespace,op_name,op_count,host_name,rs_shard_id\n");
    let mut expected = Vec::new();
    let mut seen = HashMap::new();
    for (i, &o) in objs.iter().take(N / 2).enumerate() {
        let id = format!("{:016x}-{:016x}", o * 31, o * 17 + 3);
        let (name, op) = if seen.insert(o, ()).is_none() {
            ("putChunk.Permanent", Op::Put)
        } else {
            ("getChunkData.NotInitialized", Op::Get)
        };
        let (size, offset) = (1_048_576 * (1 + o as u32 % 8), (o % 4) * 4096);
        text += &format!(
            "{},{id},40,{size},{offset},1,2,{name},1,3,0\n",
            1_702_511_878 + i
        );
        expected.push(req(
            (1_702_511_878 + i) as f64,
            hash_key(id.as_bytes()),
            size,
            op,
            offset,
        ));
    }
    out.push(fixture(
        "small_block_chunk.csv",
        Format::Cachelib,
        text.into_bytes(),
        expected,
    ));

    // tencent-cbs: sectors, several volumes, bzip2-compressed.
    let mut text = String::new();
    let mut expected = Vec::new();
    for (i, &o) in objs.iter().enumerate() {
        let (volume, sector, sectors) = (1000 + o % 3, o * 64, 8 * (1 + o % 4));
        let io = o % 2;
        text += &format!(
            "{},{sector},{sectors},{io},{volume}\n",
            1_538_323_200 + i / 10
        );
        let key = (volume << 48) | (sector * 512);
        expected.push(req(
            (1_538_323_200 + i / 10) as f64,
            key,
            (sectors * 512) as u32,
            Op::Access,
            sector * 512,
        ));
    }
    out.push(fixture(
        "small_tencent_cbs.csv.bz2",
        Format::TencentCbs,
        text.into_bytes(),
        expected,
    ));

    // tencent-photo, xz-compressed.
    let mut text = String::new();
    let mut expected = Vec::new();
    for (i, &o) in objs.iter().enumerate() {
        let id = format!("{:040x}", u128::from(o) * 0x1234_5678_9abc_def1);
        let (fmt, spec, bytes) = (
            if o.is_multiple_of(2) { "0" } else { "5" },
            ["a", "b", "m"][o as usize % 3],
            10_000 + o * 111,
        );
        let (mi, s) = (i / 60, i % 60);
        text += &format!("2016020116{mi:02}{s:02} {id} {fmt} {spec} {bytes} 1 PHONE 0\n");
        let mut joined = id.clone().into_bytes();
        joined.push(0);
        joined.extend_from_slice(fmt.as_bytes());
        joined.push(0);
        joined.extend_from_slice(spec.as_bytes());
        // 2016-02-01 16:00:00 UTC.
        let time = (1_454_342_400 + mi * 60 + s) as f64;
        expected.push(req(time, hash_key(&joined), bytes as u32, Op::Access, 0));
    }
    out.push(fixture(
        "small_tencent_photo.log.xz",
        Format::TencentPhoto,
        text.into_bytes(),
        expected,
    ));

    // systor: header, fractional times, LUN 0, gzip-compressed.
    let mut text = String::from("Timestamp,Response,IOType,LUN,Offset,Size\n");
    let mut expected = Vec::new();
    for (i, &o) in objs.iter().enumerate() {
        let t = 1_456_095_145.0 + quarter(i);
        let (offset, size) = (o * 131_072, 4096 * (1 + o % 8));
        let kind = if o.is_multiple_of(4) { "W" } else { "R" };
        text += &format!("{t:.6},0.000806,{kind},0,{offset},{size}\n");
        expected.push(req(t, offset, size as u32, Op::Access, offset));
    }
    out.push(fixture(
        "small_systor.csv.gz",
        Format::Systor,
        text.into_bytes(),
        expected,
    ));

    // Raw key arrays.
    let mut be32 = Vec::new();
    let mut be64 = Vec::new();
    let mut expected32 = Vec::new();
    let mut expected64 = Vec::new();
    for &o in &objs {
        let k32 = 0x0800_0000u32 + o as u32 * 512;
        let k64 = o.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        be32.extend_from_slice(&k32.to_be_bytes());
        be64.extend_from_slice(&k64.to_be_bytes());
        expected32.push(req(0.0, u64::from(k32), 1, Op::Access, 0));
        expected64.push(req(0.0, k64, 1, Op::Access, 0));
    }
    out.push(fixture("small.bin32be", Format::Bin32Be, be32, expected32));
    out.push(fixture(
        "small.bin64be.xz",
        Format::Bin64Be,
        be64,
        expected64,
    ));
    out
}

/// The file's bytes: `content` compressed (or archived) as the name's suffix says.
fn encode(file: &str, content: &[u8]) -> Vec<u8> {
    if let Some(inner) = file.strip_suffix(".tar.gz") {
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_ustar();
        header
            .set_path(inner.rsplit_once("small_").map_or(inner, |(_, n)| n))
            .unwrap();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(1_504_400_000);
        header.set_cksum();
        builder.append(&header, content).unwrap();
        let tarball = builder.into_inner().unwrap();
        return encode("x.gz", &tarball);
    }
    if file.ends_with(".gz") {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(content).unwrap();
        e.finish().unwrap()
    } else if file.ends_with(".zst") {
        zstd::encode_all(content, 19).unwrap()
    } else if file.ends_with(".xz") {
        let mut e = liblzma::write::XzEncoder::new(Vec::new(), 6);
        e.write_all(content).unwrap();
        e.finish().unwrap()
    } else if file.ends_with(".bz2") {
        let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::best());
        e.write_all(content).unwrap();
        e.finish().unwrap()
    } else {
        content.to_vec()
    }
}

#[test]
fn fixtures_read_back_exactly() {
    let write = std::env::var_os("MANTLE_WRITE_FIXTURES").is_some();
    for f in all_fixtures() {
        let path = PathBuf::from(FIXTURES).join(f.file);
        if write {
            std::fs::create_dir_all(FIXTURES).unwrap();
            std::fs::write(&path, encode(f.file, &f.content)).unwrap();
        }
        if let Some(format) = f.detected {
            assert_eq!(
                trace::detect(&path).unwrap_or_else(|e| panic!("{e}")),
                format,
                "{}",
                f.file
            );
        }
        let named = if f.opts.csv.is_some() {
            Some(f.format)
        } else {
            None
        };
        let mut reader = trace::open(&path, named, &f.opts).unwrap_or_else(|e| panic!("{e}"));
        let mut got = Vec::new();
        while let Some(r) = reader.next_request().unwrap_or_else(|e| panic!("{e}")) {
            got.push(r);
        }
        if let Some(i) = (0..got.len().min(f.expected.len())).find(|&i| got[i] != f.expected[i]) {
            panic!(
                "{}: request {i} is {:?}, expected {:?}",
                f.file, got[i], f.expected[i]
            );
        }
        assert_eq!(got.len(), f.expected.len(), "{}", f.file);
        let (read, total) = reader.progress().expect("file readers report progress");
        assert_eq!(read, total, "{}: progress ends at the file size", f.file);
    }
}

#[test]
fn every_format_has_a_fixture() {
    let covered: Vec<Format> = all_fixtures().iter().map(|f| f.format).collect();
    for f in Format::ALL {
        if !matches!(f, Format::Bin32Le | Format::Bin64Le) {
            assert!(covered.contains(&f), "no fixture for {f}");
        }
    }
}

#[test]
fn block_expansion_on_a_fixture() {
    let path = PathBuf::from(FIXTURES).join("small_msr.csv");
    let opts = ReadOptions {
        expand_blocks: true,
        block_size: 4096,
        rw_ops: true,
        ..ReadOptions::default()
    };
    let mut reader = trace::open(&path, None, &opts).unwrap();
    let (mut n, mut reads, mut writes) = (0u64, 0u64, 0u64);
    while let Some(r) = reader.next_request().unwrap() {
        n += 1;
        assert_eq!(r.size, 4096);
        assert_eq!(r.offset, r.key * 4096);
        match r.op {
            Op::Get => reads += 1,
            Op::Put => writes += 1,
            other => panic!("block op {other:?}"),
        }
    }
    // Each I/O of 4096 * (1 + o % 3) bytes at a 64 KiB-aligned offset covers 1 + o % 3 blocks.
    let want: u64 = objects().iter().map(|o| 1 + o % 3).sum();
    assert_eq!(n, want);
    let want_writes: u64 = objects()
        .iter()
        .filter(|o| *o % 2 == 1)
        .map(|o| 1 + o % 3)
        .sum();
    assert_eq!((reads + writes, writes), (want, want_writes));
}
