//! Minimal readers for the two libCacheSim sample traces, shared by the agreement test and the
//! throughput example. They load `(object id, size)` pairs into memory so that replays time
//! the cache alone; malformed input stops with the file and record that is wrong.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// oracleGeneral: headerless 24-byte little-endian records
/// `{u32 time; u64 id; u32 size; i64 next_access}`.
pub fn read_oracle_general(path: &Path) -> Vec<(u64, u32)> {
    let mut reader = BufReader::new(File::open(path).expect("open oracleGeneral trace"));
    let mut requests = Vec::new();
    let mut record = [0u8; 24];
    let mut offset = 0u64;
    loop {
        match reader.read_exact(&mut record) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => panic!("{}: offset {offset}: {e}", path.display()),
        }
        let id = u64::from_le_bytes(record[4..12].try_into().unwrap());
        let size = u32::from_le_bytes(record[12..16].try_into().unwrap());
        requests.push((id, size));
        offset += 24;
    }
    assert_eq!(
        offset,
        std::fs::metadata(path).unwrap().len(),
        "{}: truncated record at offset {offset}",
        path.display()
    );
    requests
}

/// Twitter CSV: a `#` header line, then `time, id, size, next_access`.
pub fn read_twitter_csv(path: &Path) -> Vec<(u64, u32)> {
    let reader = BufReader::new(File::open(path).expect("open csv trace"));
    let mut requests = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line.unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), n + 1));
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut fields = line.split(',').map(str::trim);
        let _time = fields.next();
        let parse = |field: Option<&str>, what: &str| -> u64 {
            field
                .and_then(|f| f.parse().ok())
                .unwrap_or_else(|| panic!("{}:{}: bad {what} in {line:?}", path.display(), n + 1))
        };
        let id = parse(fields.next(), "object id");
        let size = parse(fields.next(), "object size");
        requests.push((id, u32::try_from(size).expect("size fits in u32")));
    }
    requests
}
