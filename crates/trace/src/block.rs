//! How one block I/O becomes requests, shared by the block-trace readers.
//!
//! By default an I/O is one request for the object at its start (libCacheSim's convention
//! for `vscsi` and `oracleGeneral`: object = start block, size = I/O length); with
//! `expand_blocks` it is one request per `block_size` block it touches. Traces of many
//! volumes put the volume into the key with [`volume_key`].

use crate::options::too_many_requests;
use crate::parse::hash_key;
use crate::{Op, ReadOptions, Request};

/// One I/O as a block-trace reader parsed it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockIo {
    pub time: f64,
    /// Volume (disk, LUN); 0 for single-volume traces.
    pub volume: u64,
    /// The key of the whole I/O under the format's convention (LBN for vscsi, byte offset
    /// for the CSV block traces).
    pub key: u64,
    /// Start, in bytes.
    pub offset: u64,
    /// Length, in bytes.
    pub len: u64,
    pub write: bool,
}

/// Combines a volume number and a per-volume key into one id. Volume 0 keeps the key as is;
/// small volumes go into the top 16 bits of keys below 2^48; anything else is hashed.
#[inline]
pub(crate) fn volume_key(volume: u64, key: u64) -> u64 {
    if volume == 0 {
        key
    } else if volume < (1 << 16) && key < (1 << 48) {
        (volume << 48) | key
    } else {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&volume.to_le_bytes());
        bytes[8..].copy_from_slice(&key.to_le_bytes());
        hash_key(&bytes)
    }
}

/// Turns [`BlockIo`]s into requests, remembering the rest of an expanded I/O.
pub(crate) struct BlockEmitter {
    block_size: u64,
    expand: bool,
    rw_ops: bool,
    /// The most blocks one expanded I/O may touch.
    max_blocks: u64,
    /// The next block of the I/O being expanded and how many are left to hand out (a count,
    /// not an end, so the last block of the offset space needs no end past it).
    next: u64,
    left: u64,
    volume: u64,
    time: f64,
    op: Op,
}

impl BlockEmitter {
    pub(crate) fn new(opts: &ReadOptions) -> Self {
        BlockEmitter {
            block_size: u64::from(opts.block_size.max(1)),
            expand: opts.expand_blocks,
            rw_ops: opts.rw_ops,
            max_blocks: opts.max_record_requests,
            next: 0,
            left: 0,
            volume: 0,
            time: 0.0,
            op: Op::Access,
        }
    }

    fn op(&self, write: bool) -> Op {
        match (self.rw_ops, write) {
            (false, _) => Op::Access,
            (true, false) => Op::Get,
            (true, true) => Op::Put,
        }
    }

    /// The next block of an I/O being expanded, if any is left.
    #[inline]
    pub(crate) fn pending(&mut self) -> Option<Request> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let block = self.next;
        self.next = self.next.wrapping_add(1);
        Some(Request {
            time: self.time,
            key: volume_key(self.volume, block),
            size: self.block_size as u32,
            op: self.op,
            offset: block.saturating_mul(self.block_size),
        })
    }

    /// The first (or only) request of `io`; with expansion the rest follow from
    /// [`BlockEmitter::pending`]. A zero-length I/O still touches the block it starts in.
    /// An expanded I/O touching more than `max_record_requests` blocks is an error.
    #[inline]
    pub(crate) fn start(&mut self, io: BlockIo) -> Result<Request, String> {
        let op = self.op(io.write);
        if !self.expand {
            return Ok(Request {
                time: io.time,
                key: volume_key(io.volume, io.key),
                size: u32::try_from(io.len).unwrap_or(u32::MAX),
                op,
                offset: io.offset,
            });
        }
        let first = io.offset / self.block_size;
        let last = io.offset.saturating_add(io.len.max(1) - 1) / self.block_size;
        // `last - first + 1` without overflow: at most u64::MAX blocks when both ends are
        // extreme, which the limit refuses anyway.
        let blocks = (last - first).saturating_add(1);
        if blocks > self.max_blocks {
            return Err(too_many_requests(
                &format!(
                    "an I/O of {} bytes at offset {} expanded into {}-byte blocks",
                    io.len, io.offset, self.block_size
                ),
                blocks,
                self.max_blocks,
            ));
        }
        self.next = first;
        self.left = blocks;
        self.volume = io.volume;
        self.time = io.time;
        self.op = op;
        // `first <= last`, so there is at least one block.
        Ok(self.pending().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(offset: u64, len: u64, write: bool) -> BlockIo {
        BlockIo {
            time: 1.5,
            volume: 0,
            key: offset,
            offset,
            len,
            write,
        }
    }

    #[test]
    fn whole_io_is_one_request() {
        let mut e = BlockEmitter::new(&ReadOptions::default());
        let r = e.start(io(4096, 8192, true)).unwrap();
        assert_eq!(
            (r.key, r.size, r.offset, r.op),
            (4096, 8192, 4096, Op::Access)
        );
        assert!(e.pending().is_none());
    }

    #[test]
    fn expansion_covers_partial_blocks() {
        let opts = ReadOptions {
            expand_blocks: true,
            rw_ops: true,
            ..ReadOptions::default()
        };
        let mut e = BlockEmitter::new(&opts);
        // Bytes 1000..2100 touch blocks 1, 2, 3, 4 of 512 bytes.
        let mut keys = vec![e.start(io(1000, 1100, false)).unwrap().key];
        while let Some(r) = e.pending() {
            assert_eq!((r.size, r.op, r.time), (512, Op::Get, 1.5));
            keys.push(r.key);
        }
        assert_eq!(keys, [1, 2, 3, 4]);
        let r = e.start(io(1024, 0, true)).unwrap();
        assert_eq!((r.key, r.op, r.offset), (2, Op::Put, 1024));
        assert!(e.pending().is_none());
    }

    #[test]
    fn expansion_beyond_the_limit_is_refused() {
        let opts = ReadOptions {
            expand_blocks: true,
            max_record_requests: 4,
            ..ReadOptions::default()
        };
        let mut e = BlockEmitter::new(&opts);
        // Four blocks are allowed, five are not.
        assert!(e.start(io(0, 4 * 512, false)).is_ok());
        while e.pending().is_some() {}
        let err = e.start(io(0, 4 * 512 + 1, false)).unwrap_err();
        assert!(
            err.contains("5 requests") && err.contains("limit of 4"),
            "{err}"
        );
        assert!(
            e.pending().is_none(),
            "a refused I/O leaves nothing pending"
        );
        // The largest I/O anywhere in the offset space: no overflow, one clear error.
        let err = e.start(io(0, u64::MAX, false)).unwrap_err();
        assert!(err.contains("limit of 4"), "{err}");
        let mut bytes = BlockEmitter::new(&ReadOptions {
            block_size: 1,
            ..opts
        });
        let err = bytes.start(io(0, u64::MAX, false)).unwrap_err();
        assert!(err.contains(&format!("{} requests", u64::MAX)), "{err}");
        // The very last block of the offset space is still one request.
        let r = bytes.start(io(u64::MAX, 1, false)).unwrap();
        assert_eq!(r.key, u64::MAX);
        assert!(bytes.pending().is_none());
    }

    #[test]
    fn volumes_separate_keys() {
        assert_eq!(volume_key(0, 77), 77);
        assert_eq!(volume_key(3, 77), (3 << 48) | 77);
        assert_ne!(volume_key(1 << 20, 77), volume_key(1 << 21, 77));
        assert_ne!(volume_key(1, 1 << 50), 1 << 50);
    }
}
