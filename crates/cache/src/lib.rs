//! The cache Mantle manages: objects with sizes, a capacity in bytes and/or objects that can
//! change at run time, pluggable eviction algorithms, and an access log for policies.
//!
//! API CONTRACT (stub; the implementation replaces the bodies, the signatures are what
//! `crates/sim` and later crates rely on).

use std::str::FromStr;

/// Eviction algorithm names accepted on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    Lru,
    Fifo,
    Clock,
    Sieve,
    S3Fifo,
}

impl FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "lru" => Ok(Algorithm::Lru),
            "fifo" => Ok(Algorithm::Fifo),
            "clock" => Ok(Algorithm::Clock),
            "sieve" => Ok(Algorithm::Sieve),
            "s3fifo" | "s3-fifo" => Ok(Algorithm::S3Fifo),
            other => Err(format!(
                "unknown eviction algorithm '{other}' (expected lru, fifo, clock, sieve or s3fifo)"
            )),
        }
    }
}

/// Limits of the cache. `None` means unlimited in that dimension; both may be set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capacity {
    pub bytes: Option<u64>,
    pub objects: Option<u64>,
}

pub struct Cache {
    _private: (),
}

impl Cache {
    pub fn new(_algorithm: Algorithm, _capacity: Capacity) -> Cache {
        todo!()
    }
    /// Looks `key` up; a hit updates the algorithm's state. Never inserts.
    pub fn get(&mut self, _key: u64) -> bool {
        todo!()
    }
    /// Inserts `key` (or updates its size if present), evicting as the algorithm decides until
    /// it fits. Returns false when the object cannot be cached (larger than the capacity).
    pub fn insert(&mut self, _key: u64, _size: u32) -> bool {
        todo!()
    }
    /// Removes `key` if cached (not counted as an eviction).
    pub fn remove(&mut self, _key: u64) -> bool {
        todo!()
    }
    pub fn contains(&self, _key: u64) -> bool {
        todo!()
    }
    /// Evicts up to `n` objects chosen by the algorithm; returns how many were evicted.
    pub fn evict(&mut self, _n: u64) -> u64 {
        todo!()
    }
    /// Changes the target capacity, evicting at once down to it; returns objects evicted.
    pub fn set_capacity(&mut self, _capacity: Capacity) -> u64 {
        todo!()
    }
    pub fn capacity(&self) -> Capacity {
        todo!()
    }
    /// Objects cached now.
    pub fn len(&self) -> u64 {
        todo!()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes cached now (sum of object sizes).
    pub fn bytes(&self) -> u64 {
        todo!()
    }
    /// Objects evicted so far (by capacity pressure, `evict` or `set_capacity`).
    pub fn evictions(&self) -> u64 {
        todo!()
    }
}

/// The recent accesses, oldest first, as `(time, keyid)` pairs where `keyid` is a dense id
/// given to each key in order of first appearance. Bounded: keeps the newest `limit` events.
pub struct AccessLog {
    _private: (),
}

impl AccessLog {
    pub fn new(_limit: usize) -> AccessLog {
        todo!()
    }
    pub fn record(&mut self, _time: f64, _key: u64) {
        todo!()
    }
    pub fn len(&self) -> usize {
        todo!()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `i = 0` is the oldest retained event.
    pub fn get(&self, _i: usize) -> (f64, u64) {
        todo!()
    }
}
