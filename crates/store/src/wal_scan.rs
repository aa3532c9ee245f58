//! A read-only check of RocksDB's write-ahead log files before the store opens them.
//!
//! RocksDB's default recovery replays the log up to the first damaged record and silently
//! drops the rest; a damaged stretch made of zeros is even skipped without a word. So the
//! server reads the logs itself first: it checks every record's checksum and that sequence
//! numbers follow on from one batch to the next, and tells damage in the middle (records
//! that were acknowledged are lost) from a torn tail (the last writes before a power loss,
//! never acknowledged with `--fsync always`). See `docs/server.md`, "Durability".
//!
//! Format (RocksDB `db/log_format.h`, legacy records): 32 KiB blocks; each record has a 7-byte
//! header (masked CRC32C of type and payload, u16 length, u8 type) and is FULL, or FIRST,
//! MIDDLE.., LAST fragments of one logical record, a write batch whose first 12 bytes are its
//! sequence number (u64) and entry count (u32). A block's last < 7 bytes are zero padding.

use crc::{Crc, CRC_32_ISCSI};
use std::path::{Path, PathBuf};

const BLOCK: usize = 32 * 1024;
const HEADER: usize = 7;
const BATCH_HEADER: usize = 12;

/// A stretch of a log file that holds no valid record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub file: PathBuf,
    pub start: u64,
    pub end: u64,
}

/// What the scan found in all the log files, in log order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WalScan {
    /// Damaged stretches followed by valid records: acknowledged writes may be lost.
    pub damage: Vec<Damage>,
    /// Bytes of a damaged or incomplete tail (nothing valid after it): a torn last write.
    pub torn_tail_bytes: u64,
    /// Writes (sequence numbers) missing between valid batches.
    pub gap_writes: u64,
    /// Writes logged after the first damage (what stopping at the damage would drop).
    pub writes_after_damage: u64,
    /// One past the last sequence number logged.
    pub end_sequence: u64,
    pub files: usize,
}

impl WalScan {
    pub fn is_damaged(&self) -> bool {
        !self.damage.is_empty() || self.gap_writes > 0
    }

    /// One line naming the damage, for the start-up error and the log.
    pub fn describe(&self) -> String {
        let mut text = String::new();
        if let Some(first) = self.damage.first() {
            text.push_str(&format!(
                "{} is damaged at bytes {}..{}",
                first.file.display(),
                first.start,
                first.end
            ));
            let more = self.damage.len() - 1;
            if more > 0 {
                text.push_str(&format!(" (and {more} more damaged stretches)"));
            }
        } else {
            text.push_str("a write-ahead log misses records");
        }
        text.push_str(&format!(
            "; {} logged writes lie after the damage, {} are missing inside it",
            self.writes_after_damage, self.gap_writes
        ));
        text
    }
}

/// Scans every `*.log` file of `dir` in log-number order.
pub fn scan(dir: &Path) -> std::io::Result<WalScan> {
    let mut files: Vec<(u64, PathBuf)> = Vec::new();
    if dir.is_dir() {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let number = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".log"))
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(number) = number {
                files.push((number, path));
            }
        }
    }
    files.sort();
    let mut state = ScanState::default();
    for (_, path) in &files {
        let bytes = std::fs::read(path)?;
        state.file(path, &bytes);
    }
    Ok(state.finish(files.len()))
}

#[derive(Default)]
struct ScanState {
    result: WalScan,
    /// Damage seen but not yet followed by a valid batch (it may be a torn tail).
    pending: Vec<Damage>,
    /// One past the last sequence number of the previous valid batch.
    next_sequence: Option<u64>,
    damaged_since: bool,
}

impl ScanState {
    fn file(&mut self, path: &Path, bytes: &[u8]) {
        let mut fragments: Vec<u8> = Vec::new();
        let mut in_fragment = false;
        let mut offset = 0usize;
        while offset < bytes.len() {
            let block_end = (offset / BLOCK + 1) * BLOCK;
            let left = block_end.min(bytes.len()) - offset;
            if left < HEADER {
                // Zero padding at the end of a block, or a file cut inside a header.
                if block_end > bytes.len() || bytes[offset..block_end].iter().any(|&b| b != 0) {
                    self.damage(path, offset, offset + left);
                }
                offset += left;
                continue;
            }
            let header = &bytes[offset..offset + HEADER];
            let length = u16::from_le_bytes([header[4], header[5]]) as usize;
            let kind = header[6];
            let payload_end = offset + HEADER + length;
            let valid = (1..=4).contains(&kind)
                && payload_end <= block_end.min(bytes.len())
                && checksum_matches(header, &bytes[offset + HEADER..payload_end]);
            if !valid {
                // RocksDB drops the rest of the block after a bad record; so does the scan.
                let end = block_end.min(bytes.len());
                self.damage(path, offset, end);
                in_fragment = false;
                fragments.clear();
                offset = end;
                continue;
            }
            let payload = &bytes[offset + HEADER..payload_end];
            match kind {
                1 => {
                    if in_fragment {
                        self.damage(path, offset, offset);
                    }
                    in_fragment = false;
                    self.batch(payload);
                }
                2 => {
                    fragments.clear();
                    fragments.extend_from_slice(payload);
                    in_fragment = true;
                }
                3 if in_fragment => fragments.extend_from_slice(payload),
                4 if in_fragment => {
                    fragments.extend_from_slice(payload);
                    in_fragment = false;
                    let batch = std::mem::take(&mut fragments);
                    self.batch(&batch);
                }
                _ => self.damage(path, offset, payload_end),
            }
            offset = payload_end;
        }
        if in_fragment {
            self.damage(path, bytes.len(), bytes.len());
        }
    }

    fn damage(&mut self, path: &Path, start: usize, end: usize) {
        match self.pending.last_mut() {
            Some(last) if last.file == path && last.end == start as u64 => last.end = end as u64,
            _ => self.pending.push(Damage {
                file: path.to_path_buf(),
                start: start as u64,
                end: end as u64,
            }),
        }
    }

    fn batch(&mut self, batch: &[u8]) {
        if batch.len() < BATCH_HEADER {
            return;
        }
        let sequence = u64::from_le_bytes(batch[..8].try_into().unwrap_or([0; 8]));
        let count = u64::from(u32::from_le_bytes(
            batch[8..12].try_into().unwrap_or([0; 4]),
        ));
        if !self.pending.is_empty() {
            self.damaged_since = true;
            self.result.damage.append(&mut self.pending);
        }
        if let Some(expected) = self.next_sequence {
            if sequence > expected {
                self.result.gap_writes += sequence - expected;
                self.damaged_since = true;
            }
        }
        if self.damaged_since {
            self.result.writes_after_damage += count;
        }
        let end = sequence + count;
        self.next_sequence = Some(self.next_sequence.map_or(end, |n| n.max(end)));
    }

    fn finish(mut self, files: usize) -> WalScan {
        self.result.torn_tail_bytes = self.pending.iter().map(|d| d.end - d.start).sum();
        self.result.end_sequence = self.next_sequence.unwrap_or(0);
        self.result.files = files;
        self.result
    }
}

fn checksum_matches(header: &[u8], payload: &[u8]) -> bool {
    let stored = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let crc = record_crc(&header[6..7], payload);
    unmask(stored) == crc
}

/// RocksDB stores checksums masked, so a checksum of data holding checksums stays useful.
fn unmask(masked: u32) -> u32 {
    let rot = masked.wrapping_sub(0xa282_ead8);
    rot.rotate_left(15)
}

/// CRC-32C (Castagnoli; `CRC_32_ISCSI` in the `crc` catalogue), RocksDB's record checksum.
const CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

/// The checksum of a record: CRC-32C of its type byte, then its payload.
fn record_crc(kind: &[u8], payload: &[u8]) -> u32 {
    let mut digest = CRC32C.digest();
    digest.update(kind);
    digest.update(payload);
    digest.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(CRC32C.checksum(b"123456789"), 0xE306_9283);
        assert_eq!(record_crc(b"1", b"23456789"), 0xE306_9283);
    }

    /// A log file of `batches` one-write batches, fragmented across blocks as RocksDB does.
    fn log_file(batches: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for seq in 1..=batches {
            let mut payload = seq.to_le_bytes().to_vec();
            payload.extend_from_slice(&1u32.to_le_bytes());
            payload.extend_from_slice(&[7u8; 100]);
            let mut rest = payload.as_slice();
            let mut first = true;
            loop {
                let left = BLOCK - out.len() % BLOCK;
                if left < HEADER {
                    out.resize(out.len() + left, 0);
                    continue;
                }
                let n = rest.len().min(left - HEADER);
                let last = n == rest.len();
                let kind = match (first, last) {
                    (true, true) => 1,
                    (true, false) => 2,
                    (false, false) => 3,
                    (false, true) => 4,
                };
                let crc = record_crc(&[kind], &rest[..n]);
                let masked = crc.rotate_right(15).wrapping_add(0xa282_ead8);
                out.extend_from_slice(&masked.to_le_bytes());
                out.extend_from_slice(&(n as u16).to_le_bytes());
                out.push(kind);
                out.extend_from_slice(&rest[..n]);
                rest = &rest[n..];
                first = false;
                if last {
                    break;
                }
            }
        }
        out
    }

    fn scan_bytes(bytes: &[u8]) -> WalScan {
        let mut state = ScanState::default();
        state.file(Path::new("000001.log"), bytes);
        state.finish(1)
    }

    #[test]
    fn clean_and_torn_logs_are_not_damaged() {
        let clean = log_file(1000);
        let scan = scan_bytes(&clean);
        assert!(!scan.is_damaged(), "{scan:?}");
        assert_eq!(scan.end_sequence, 1001);
        let torn = scan_bytes(&clean[..clean.len() - 50]);
        assert!(!torn.is_damaged(), "{torn:?}");
        assert!(torn.torn_tail_bytes > 0);
        let mut zero_tail = clean.clone();
        zero_tail.extend_from_slice(&[0; 4096]);
        assert!(!scan_bytes(&zero_tail).is_damaged());
    }

    #[test]
    fn damage_in_the_middle_is_found_whatever_the_bytes() {
        let clean = log_file(1000);
        for (start, fill) in [(40_000usize, 0u8), (50_001, 0xff), (12_345, 0x5a)] {
            let mut bytes = clean.clone();
            bytes[start..start + 4096].fill(fill);
            let scan = scan_bytes(&bytes);
            assert!(scan.is_damaged(), "start {start} fill {fill}: {scan:?}");
            assert!(scan.gap_writes > 0 && scan.writes_after_damage > 0);
            assert!(scan.describe().contains("000001.log is damaged at bytes"));
        }
    }
}
