//! A generator of seed 004's mixed workload: small files and file-system metadata accessed at
//! random (Postmark) running concurrently with large sequential checkpoint writes and reads
//! (IOR's loop: write a checkpoint and two small data sets, then read all three back).
//!
//! It exists to evaluate cache hints by class: under LRU the checkpoint stream flushes the
//! small files out of a cache a tenth of the working set; with classes that fence the
//! checkpoint off, the small files and metadata stay. The output is an MSR Cambridge block
//! trace (`Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`), so every reader
//! option (`--rw-ops`, `--expand-blocks`) and offset/size class rule applies.
//!
//! Layout of the simulated volume (byte offsets):
//! * metadata (inodes, directories, bitmaps): 4 KiB blocks in `[0, metadata_bytes)`;
//! * small files: `files` files of log-uniform sizes in `[small_min, small_max]`, laid out
//!   from 1 GiB (each read or rewritten whole, one I/O);
//! * checkpoint area from 1 TiB: the checkpoint file then the two data sets, written and
//!   read in `io_size` sequential I/Os.

use std::io::{self, BufWriter, Write};
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};

use crate::{Op, Request};

/// Where the small files start (1 GiB) and the checkpoint area starts (1 TiB): class files
/// can tell the streams apart by offset.
pub const SMALL_FILES_BASE: u64 = 1 << 30;
pub const CHECKPOINT_BASE: u64 = 1 << 40;
const METADATA_BLOCK: u64 = 4096;
/// IOR's data sets are 8 MiB each.
const DATA_SET_BYTES: u64 = 8 << 20;
/// FILETIME of 2015-01-01 (the seed's year), and one request per millisecond.
const START_FILETIME: u64 = 130_645_440_000_000_000;
const TICKS_PER_REQUEST: u64 = 10_000;

/// Knobs of the mixed workload. `Default` is a laptop-sized version of seed 004's setup.
#[derive(Clone, Debug, PartialEq)]
pub struct MixedParams {
    pub seed: u64,
    pub requests: u64,
    /// Small files (Postmark's file set).
    pub files: u64,
    pub small_min: u32,
    pub small_max: u32,
    pub metadata_bytes: u64,
    /// Bytes of the checkpoint file (IOR wrote 20 GB).
    pub checkpoint_bytes: u64,
    /// Size of each sequential checkpoint I/O.
    pub io_size: u32,
    /// Share of requests from the random small-file/metadata stream (the rest is IOR).
    pub small_share: f64,
    /// Share of the random stream that goes to metadata rather than file data.
    pub metadata_share: f64,
    /// Share of small-file and metadata requests that are writes.
    pub write_share: f64,
    /// Zipf exponent of file and metadata popularity.
    pub skew: f64,
}

impl Default for MixedParams {
    fn default() -> Self {
        MixedParams {
            seed: 1,
            requests: 400_000,
            files: 20_000,
            small_min: 1024,
            small_max: 1 << 20,
            metadata_bytes: 64 << 20,
            checkpoint_bytes: 2 << 30,
            io_size: 1 << 20,
            small_share: 0.7,
            metadata_share: 0.3,
            write_share: 0.2,
            skew: 0.9,
        }
    }
}

impl MixedParams {
    pub fn validate(&self) -> Result<(), String> {
        let share = |name: &str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(format!("{name} must be in [0, 1], got {v}"))
            }
        };
        share("small share", self.small_share)?;
        share("metadata share", self.metadata_share)?;
        share("write share", self.write_share)?;
        if self.files == 0 || self.requests == 0 {
            return Err("files and requests must be > 0".to_string());
        }
        if self.small_min == 0 || self.small_min > self.small_max {
            return Err(format!(
                "small file sizes must satisfy 0 < min <= max, got {}..{}",
                self.small_min, self.small_max
            ));
        }
        if self.io_size == 0 || self.checkpoint_bytes < u64::from(self.io_size) {
            return Err("the checkpoint must hold at least one I/O of io_size > 0".to_string());
        }
        if self.metadata_bytes < METADATA_BLOCK || self.metadata_bytes >= SMALL_FILES_BASE {
            return Err("metadata must be between 4 KiB and 1 GiB".to_string());
        }
        if !(self.skew > 0.0 && self.skew.is_finite()) {
            return Err(format!("skew must be > 0, got {}", self.skew));
        }
        Ok(())
    }
}

/// One phase of IOR's loop: `(first byte, bytes, write?)`.
fn ior_phases(p: &MixedParams) -> [(u64, u64, bool); 6] {
    let ckpt = CHECKPOINT_BASE;
    let ds1 = ckpt + p.checkpoint_bytes.div_ceil(1 << 20) * (1 << 20);
    let ds2 = ds1 + DATA_SET_BYTES;
    [
        (ckpt, p.checkpoint_bytes, true),
        (ds1, DATA_SET_BYTES, true),
        (ds2, DATA_SET_BYTES, true),
        (ckpt, p.checkpoint_bytes, false),
        (ds1, DATA_SET_BYTES, false),
        (ds2, DATA_SET_BYTES, false),
    ]
}

/// The deterministic request stream.
pub struct MixedGen {
    params: MixedParams,
    rng: ChaCha8Rng,
    file_offset: Vec<u64>,
    file_size: Vec<u32>,
    file_pick: Zipf<f64>,
    meta_pick: Zipf<f64>,
    /// Popularity rank -> file/metadata block (a permutation, so hot files are scattered).
    file_rank: Vec<u32>,
    meta_rank: Vec<u32>,
    phases: [(u64, u64, bool); 6],
    phase: usize,
    phase_pos: u64,
    emitted: u64,
}

impl MixedGen {
    pub fn new(params: MixedParams) -> Result<MixedGen, String> {
        params.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
        let (lo, hi) = (
            f64::from(params.small_min).ln(),
            f64::from(params.small_max).ln(),
        );
        let mut file_offset = Vec::with_capacity(params.files as usize);
        let mut file_size = Vec::with_capacity(params.files as usize);
        let mut next = SMALL_FILES_BASE;
        for _ in 0..params.files {
            let size = rng.gen_range(lo..=hi).exp().round() as u32;
            let size = size.clamp(params.small_min, params.small_max);
            file_offset.push(next);
            file_size.push(size);
            // Files start on 4 KiB boundaries, like a file system's blocks.
            next += u64::from(size).div_ceil(METADATA_BLOCK) * METADATA_BLOCK;
        }
        if next >= CHECKPOINT_BASE {
            return Err("the small files do not fit below the checkpoint area (1 TiB)".into());
        }
        let blocks = params.metadata_bytes / METADATA_BLOCK;
        let shuffled = |n: u64, rng: &mut ChaCha8Rng| {
            let mut v: Vec<u32> = (0..n as u32).collect();
            for i in (1..v.len()).rev() {
                let j = rng.gen_range(0..=i);
                v.swap(i, j);
            }
            v
        };
        let file_rank = shuffled(params.files, &mut rng);
        let meta_rank = shuffled(blocks, &mut rng);
        let zipf = |n: u64| Zipf::new(n, params.skew).map_err(|e| format!("zipf: {e}"));
        Ok(MixedGen {
            file_pick: zipf(params.files)?,
            meta_pick: zipf(blocks)?,
            phases: ior_phases(&params),
            params,
            rng,
            file_offset,
            file_size,
            file_rank,
            meta_rank,
            phase: 0,
            phase_pos: 0,
            emitted: 0,
        })
    }

    /// Bytes the trace can touch: metadata, every small file, checkpoint and data sets.
    pub fn address_bytes(&self) -> u64 {
        self.params.metadata_bytes
            + self.file_size.iter().map(|&s| u64::from(s)).sum::<u64>()
            + self.params.checkpoint_bytes
            + 2 * DATA_SET_BYTES
    }

    fn random_io(&mut self) -> (u64, u32, bool) {
        let write = self.rng.gen_bool(self.params.write_share);
        if self.rng.gen_bool(self.params.metadata_share) {
            let rank = self.meta_pick.sample(&mut self.rng) as usize - 1;
            let block = u64::from(self.meta_rank[rank]);
            (block * METADATA_BLOCK, METADATA_BLOCK as u32, write)
        } else {
            let rank = self.file_pick.sample(&mut self.rng) as usize - 1;
            let file = self.file_rank[rank] as usize;
            (self.file_offset[file], self.file_size[file], write)
        }
    }

    fn ior_io(&mut self) -> (u64, u32, bool) {
        let (start, bytes, write) = self.phases[self.phase];
        let len = (bytes - self.phase_pos).min(u64::from(self.params.io_size));
        let io = (start + self.phase_pos, len as u32, write);
        self.phase_pos += len;
        if self.phase_pos >= bytes {
            self.phase_pos = 0;
            self.phase = (self.phase + 1) % self.phases.len();
        }
        io
    }
}

/// One generated I/O, in the terms of the MSR format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MixedIo {
    pub filetime: u64,
    pub offset: u64,
    pub size: u32,
    pub write: bool,
}

impl MixedIo {
    /// The request the MSR reader makes of this I/O with `rw_ops` (key = byte offset).
    pub fn request(&self) -> Request {
        Request {
            time: (self.filetime / 10_000_000) as f64 - 11_644_473_600.0
                + (self.filetime % 10_000_000) as f64 / 1e7,
            key: self.offset,
            size: self.size,
            op: if self.write { Op::Put } else { Op::Get },
            offset: self.offset,
        }
    }
}

impl Iterator for MixedGen {
    type Item = MixedIo;

    fn next(&mut self) -> Option<MixedIo> {
        if self.emitted >= self.params.requests {
            return None;
        }
        let filetime = START_FILETIME + self.emitted * TICKS_PER_REQUEST;
        self.emitted += 1;
        let (offset, size, write) = if self.rng.gen_bool(self.params.small_share) {
            self.random_io()
        } else {
            self.ior_io()
        };
        Some(MixedIo {
            filetime,
            offset,
            size,
            write,
        })
    }
}

/// What was written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MixedSummary {
    pub requests: u64,
    pub reads: u64,
    pub writes: u64,
    pub checkpoint_ios: u64,
    pub address_bytes: u64,
}

/// Writes the trace as MSR Cambridge CSV.
pub fn write_csv<W: Write>(params: &MixedParams, out: W) -> io::Result<MixedSummary> {
    let gen = MixedGen::new(params.clone()).map_err(io::Error::other)?;
    let mut summary = MixedSummary {
        address_bytes: gen.address_bytes(),
        ..MixedSummary::default()
    };
    let mut out = BufWriter::new(out);
    for io in gen {
        summary.requests += 1;
        if io.write {
            summary.writes += 1;
        } else {
            summary.reads += 1;
        }
        if io.offset >= CHECKPOINT_BASE {
            summary.checkpoint_ios += 1;
        }
        let kind = if io.write { "Write" } else { "Read" };
        writeln!(
            out,
            "{},mixed,0,{kind},{},{},0",
            io.filetime, io.offset, io.size
        )?;
    }
    out.flush()?;
    Ok(summary)
}

/// Writes the trace to `path` (zstd-compressed when it ends in `.zst`). Errors name the file.
pub fn write_file(params: &MixedParams, path: &Path) -> io::Result<MixedSummary> {
    super::to_file(path, |out| write_csv(params, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> MixedParams {
        MixedParams {
            requests: 20_000,
            files: 500,
            checkpoint_bytes: 64 << 20,
            ..MixedParams::default()
        }
    }

    #[test]
    fn deterministic_per_seed() {
        let a: Vec<MixedIo> = MixedGen::new(small()).unwrap().collect();
        let b: Vec<MixedIo> = MixedGen::new(small()).unwrap().collect();
        assert_eq!(a, b);
        let c: Vec<MixedIo> = MixedGen::new(MixedParams { seed: 2, ..small() })
            .unwrap()
            .collect();
        assert_ne!(a, c);
        assert_eq!(a.len(), 20_000);
    }

    #[test]
    fn streams_have_the_documented_shape() {
        let ios: Vec<MixedIo> = MixedGen::new(small()).unwrap().collect();
        let ior: Vec<&MixedIo> = ios.iter().filter(|i| i.offset >= CHECKPOINT_BASE).collect();
        let share = ior.len() as f64 / ios.len() as f64;
        assert!((share - 0.3).abs() < 0.02, "IOR share {share}");
        // IOR is sequential: each I/O follows the previous one within a phase.
        let first = ior[0];
        assert_eq!(
            (first.offset, first.size, first.write),
            (CHECKPOINT_BASE, 1 << 20, true)
        );
        assert_eq!(ior[1].offset, CHECKPOINT_BASE + (1 << 20));
        // The first read of the checkpoint comes after it and both data sets were written.
        let writes_before_read = ior.iter().take_while(|i| i.write).count() as u64;
        assert_eq!(writes_before_read, 64 + 2 * 8);
        for io in ios.iter().filter(|i| i.offset < CHECKPOINT_BASE) {
            if io.offset < SMALL_FILES_BASE {
                assert_eq!((io.size, io.offset % 4096), (4096, 0));
            } else {
                assert!((1024..=1 << 20).contains(&io.size));
            }
        }
    }

    #[test]
    fn writes_msr_csv_the_reader_reads_back() {
        let mut out = Vec::new();
        let summary = write_csv(&small(), &mut out).unwrap();
        assert_eq!(summary.requests, 20_000);
        assert_eq!(summary.reads + summary.writes, 20_000);
        let text = String::from_utf8(out).unwrap();
        let first = text.lines().next().unwrap();
        assert!(
            first.ends_with(",0") && first.contains(",mixed,0,"),
            "{first}"
        );
        let expect: Vec<Request> = MixedGen::new(small())
            .unwrap()
            .map(|i| i.request())
            .collect();
        let dir = std::env::temp_dir().join(format!("mantle-mixed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mixed.csv");
        std::fs::write(&path, &text).unwrap();
        let options = crate::ReadOptions {
            rw_ops: true,
            ..crate::ReadOptions::default()
        };
        let mut reader = crate::open(&path, None, &options).unwrap();
        let mut got = Vec::new();
        while let Some(r) = reader.next_request().unwrap() {
            got.push(r);
        }
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(got.len(), expect.len());
        for (g, e) in got.iter().zip(&expect) {
            assert_eq!(
                (g.key, g.size, g.op, g.offset),
                (e.key, e.size, e.op, e.offset)
            );
            assert!((g.time - e.time).abs() < 1e-6);
        }
    }

    #[test]
    fn rejects_bad_parameters() {
        for bad in [
            MixedParams {
                small_share: 1.5,
                ..small()
            },
            MixedParams {
                files: 0,
                ..small()
            },
            MixedParams {
                small_min: 10,
                small_max: 5,
                ..small()
            },
            MixedParams {
                checkpoint_bytes: 10,
                ..small()
            },
            MixedParams {
                skew: 0.0,
                ..small()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
