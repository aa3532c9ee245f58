//! RocksDB's memory inside the server's `--maxmemory`: its memtables and its block cache get
//! one budget, carved out of the memory the operator gave the server, so the cache and the
//! store together stay within it.
//!
//! The `rocksdb` crate (0.20.1) does not expose RocksDB's `WriteBufferManager` charged to the
//! block cache, so the two parts are bounded separately: `db_write_buffer_size` caps the
//! memtables of every column family together (RocksDB flushes the largest when their sum
//! reaches it), and one LRU block cache, shared by both families, holds data blocks and the
//! tables' index and filter blocks (which otherwise live outside any cache, growing with the
//! number of table files).

/// Bytes RocksDB may use for memtables and for its block cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryBudget {
    /// All memtables together (the one filling and the one flushing, every column family).
    pub memtables: usize,
    pub block_cache: usize,
}

/// The share of `--maxmemory` RocksDB takes: a sixteenth, within these bounds.
const SHARE_DIVISOR: u64 = 16;
const MIN_SHARE: u64 = 16 << 20;
const MAX_SHARE: u64 = 128 << 20;

/// Most memtable bytes, whatever the share: behind a cache the memtables hold a second copy
/// of recent writes, and beyond two 24 MiB memtables a larger one buys little write
/// throughput (bench/RESULTS.md, issue 30).
const MAX_MEMTABLES: u64 = 48 << 20;

impl MemoryBudget {
    /// RocksDB's budget for a server given `maxmemory` bytes (`None`: no byte limit, which
    /// gets the budget of the default 256 MiB).
    pub fn for_maxmemory(maxmemory: Option<u64>) -> MemoryBudget {
        let share = maxmemory
            .unwrap_or(256 << 20)
            .div_ceil(SHARE_DIVISOR)
            .clamp(MIN_SHARE, MAX_SHARE);
        let memtables = (share / 4 * 3).min(MAX_MEMTABLES);
        MemoryBudget {
            memtables: memtables as usize,
            block_cache: (share - memtables) as usize,
        }
    }

    pub fn total(&self) -> u64 {
        (self.memtables + self.block_cache) as u64
    }

    /// Bytes of one memtable of the data: RocksDB keeps up to two (one filling, one being
    /// flushed), and the registry's family writes next to nothing.
    pub fn write_buffer(&self) -> usize {
        self.memtables / 2
    }
}

impl Default for MemoryBudget {
    fn default() -> MemoryBudget {
        MemoryBudget::for_maxmemory(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_is_a_sixteenth_within_bounds_and_memtables_are_capped() {
        let mib = 1 << 20;
        let default = MemoryBudget::for_maxmemory(Some(256 * mib));
        assert_eq!(default, MemoryBudget::default());
        assert_eq!(
            (default.memtables, default.block_cache),
            (12 << 20, 4 << 20)
        );
        assert_eq!(default.write_buffer(), 6 << 20);
        let small = MemoryBudget::for_maxmemory(Some(mib));
        assert_eq!(small.total(), MIN_SHARE, "never below the minimum");
        let big = MemoryBudget::for_maxmemory(Some(64 << 30));
        assert_eq!(big.total(), MAX_SHARE);
        assert_eq!(big.memtables as u64, MAX_MEMTABLES);
        let mid = MemoryBudget::for_maxmemory(Some(1 << 30));
        assert_eq!(mid.total(), 64 * mib);
        assert_eq!(mid.memtables, 48 << 20);
    }
}
