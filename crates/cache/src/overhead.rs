//! How much memory the cache spends per cached object on its own bookkeeping, computed from
//! the real types so the documented numbers cannot drift from the code.
//!
//! Per cached object the cache holds one slab node (key, size, two queue links, algorithm
//! bits) and one index bucket (a 4-byte slot plus hashbrown's 1 control byte). The key is
//! stored once, in the node; "overhead" is everything except those 8 key bytes. Index buckets
//! are shared out at the table's load factor, which hashbrown keeps between 7/16 (just after
//! doubling) and 7/8; the slab grows by an eighth at a time, so at most 1/8 of its nodes are
//! spare. S3-FIFO's ghost entries are metadata for objects *not* cached and are accounted
//! separately (see `docs/cache.md`).

use crate::store::{Node, Slot};
use core::mem::size_of;

/// Bytes of a key (kept once per object, in its slab node).
pub const KEY_BYTES: usize = size_of::<u64>();

/// Bytes of one slab node, key included.
pub const NODE_BYTES: usize = size_of::<Node>();

/// Bytes of one index bucket: the slot it stores plus hashbrown's control byte.
pub const INDEX_BUCKET_BYTES: usize = size_of::<Slot>() + 1;

/// hashbrown's maximum load factor (7/8); it doubles the table when it would exceed it.
pub const INDEX_MAX_LOAD: f64 = 7.0 / 8.0;

/// The lowest load factor of a table that has grown (just after doubling).
pub const INDEX_MIN_LOAD: f64 = INDEX_MAX_LOAD / 2.0;

/// The most spare slab capacity, as a fraction of the nodes in use (growth is by 1/8).
pub const SLAB_MAX_SPARE: f64 = 1.0 / 8.0;

/// Metadata bytes per cached object beyond its key with a full table and no spare slab.
pub fn per_object_best() -> f64 {
    (NODE_BYTES - KEY_BYTES) as f64 + INDEX_BUCKET_BYTES as f64 / INDEX_MAX_LOAD
}

/// Metadata bytes per cached object beyond its key in the worst case: a table that just
/// doubled and a slab with its largest spare margin (the spare nodes' keys count as overhead).
pub fn per_object_worst() -> f64 {
    NODE_BYTES as f64 * (1.0 + SLAB_MAX_SPARE) - KEY_BYTES as f64
        + INDEX_BUCKET_BYTES as f64 / INDEX_MIN_LOAD
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Cache, Capacity};

    #[test]
    fn node_is_24_bytes() {
        assert_eq!(NODE_BYTES, 24, "key 8 + size 4 + prev 4 + next 4 + meta 4");
    }

    #[test]
    fn structural_overhead_is_at_most_32_bytes() {
        assert!(per_object_best() <= per_object_worst());
        assert!(per_object_worst() <= 32.0, "worst {}", per_object_worst());
    }

    #[test]
    fn measured_overhead_is_at_most_32_bytes() {
        for n in [1_000u64, 4_097, 57_344, 100_000, 262_143] {
            for alg in [Algorithm::Lru, Algorithm::Sieve] {
                let mut cache = Cache::new(alg, Capacity::objects(n));
                for key in 0..n * 3 {
                    cache.access(key.wrapping_mul(0x9e37_79b9_7f4a_7c15), 100);
                }
                assert_eq!(cache.len(), n);
                let per_object = cache.metadata_bytes() as f64 / n as f64 - KEY_BYTES as f64;
                assert!(
                    per_object <= per_object_worst(),
                    "{alg} with {n} objects: {per_object:.1} bytes per object"
                );
            }
        }
    }
}
