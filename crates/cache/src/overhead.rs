//! How much memory the cache spends per cached object on its own bookkeeping, computed from
//! the real types so the documented numbers cannot drift from the code.
//!
//! Per cached object the cache holds one slab node (key, size, two queue links, and the
//! index chain link whose top 4 bits carry a ghost mark and the algorithm's state) and a share of the index's
//! bucket array (4-byte heads). The key is stored once, in the node; "overhead" is everything
//! except those 8 key bytes. The bucket array doubles when the population would exceed it,
//! so it holds between 1 and 2 buckets per object; the slab grows by an eighth at a time, so
//! at most 1/8 of its nodes are spare. Neither depends on how much the cache churns: deleting
//! unlinks, there are no tombstones. Ghost entries (S3-FIFO's, ARC's) are metadata for
//! objects *not* cached and are accounted separately (see `docs/cache.md`).

use crate::slab::Node;
use crate::Packing;
use core::mem::size_of;

/// Bytes of a key (kept once per object, in its slab node).
pub const KEY_BYTES: usize = size_of::<u64>();

/// Bytes of one slab node, key included.
pub const NODE_BYTES: usize = size_of::<Node>();

/// Bytes of one index bucket (the slot at the head of its chain).
pub const BUCKET_BYTES: usize = size_of::<u32>();

/// Most buckets per stored object (just after the array doubled) with [`Packing::Fast`].
pub const MAX_BUCKETS_PER_OBJECT: f64 = 2.0;

/// Fewest buckets per stored object (the array is about to double) with [`Packing::Fast`].
pub const MIN_BUCKETS_PER_OBJECT: f64 = 1.0;

/// The most spare slab capacity, as a fraction of the nodes in use, with [`Packing::Fast`]
/// (growth is by 1/8).
pub const SLAB_MAX_SPARE: f64 = 1.0 / 8.0;

/// Most buckets per stored object with `packing` (just after the array doubled).
pub fn max_buckets_per_object(packing: Packing) -> f64 {
    2.0 / f64::from(1u32 << packing.load_shift())
}

/// Fewest buckets per stored object with `packing` (the array is about to double).
pub fn min_buckets_per_object(packing: Packing) -> f64 {
    1.0 / f64::from(1u32 << packing.load_shift())
}

/// The most spare slab capacity with `packing`, as a fraction of the nodes in use.
pub fn slab_max_spare(packing: Packing) -> f64 {
    1.0 / f64::from(1u32 << packing.growth_shift())
}

/// Metadata bytes per cached object beyond its key with a full bucket array and no spare
/// slab.
pub fn per_object_best() -> f64 {
    per_object_best_packed(Packing::Fast)
}

/// Metadata bytes per cached object beyond its key in the worst case: a bucket array that
/// just doubled and a slab with its largest spare margin (spare nodes' keys count as
/// overhead).
pub fn per_object_worst() -> f64 {
    per_object_worst_packed(Packing::Fast)
}

/// [`per_object_best`] for a cache packed as `packing`.
pub fn per_object_best_packed(packing: Packing) -> f64 {
    (NODE_BYTES - KEY_BYTES) as f64 + BUCKET_BYTES as f64 * min_buckets_per_object(packing)
}

/// [`per_object_worst`] for a cache packed as `packing`.
pub fn per_object_worst_packed(packing: Packing) -> f64 {
    NODE_BYTES as f64 * (1.0 + slab_max_spare(packing)) - KEY_BYTES as f64
        + BUCKET_BYTES as f64 * max_buckets_per_object(packing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Cache, Capacity};

    #[test]
    fn node_is_24_bytes() {
        assert_eq!(
            NODE_BYTES, 24,
            "key 8 + size 4 + prev 4 + next 4 + chain/meta 4"
        );
    }

    #[test]
    fn structural_overhead_is_at_most_32_bytes() {
        assert_eq!(per_object_best(), 20.0);
        assert!(per_object_worst() <= 32.0, "worst {}", per_object_worst());
    }

    #[test]
    fn the_fast_packing_is_the_default_and_its_bounds_are_the_constants() {
        assert_eq!(Packing::default(), Packing::Fast);
        assert_eq!(
            max_buckets_per_object(Packing::Fast),
            MAX_BUCKETS_PER_OBJECT
        );
        assert_eq!(
            min_buckets_per_object(Packing::Fast),
            MIN_BUCKETS_PER_OBJECT
        );
        assert_eq!(slab_max_spare(Packing::Fast), SLAB_MAX_SPARE);
        assert_eq!(per_object_worst(), 27.0);
    }

    #[test]
    fn dense_packing_costs_17_to_19_and_a_half_bytes() {
        // Node 24 less the key 8, index 4 B / 4 to 4 B / 2 objects, 1/16 of a node spare.
        assert_eq!(per_object_best_packed(Packing::Dense), 17.0);
        assert_eq!(per_object_worst_packed(Packing::Dense), 19.5);
    }

    #[test]
    fn measured_overhead_under_churn_is_within_the_bound() {
        for packing in [Packing::Fast, Packing::Dense] {
            for n in [1_000u64, 4_097, 57_344, 100_000, 262_143] {
                for alg in [Algorithm::Lru, Algorithm::Sieve, Algorithm::Clock] {
                    let mut cache = Cache::new(alg, Capacity::objects(n));
                    cache.set_packing(packing);
                    for key in 0..n * 3 {
                        cache.access(key.wrapping_mul(0x9e37_79b9_7f4a_7c15), 100);
                    }
                    assert_eq!(cache.len(), n);
                    let per_object = cache.metadata_bytes() as f64 / n as f64 - KEY_BYTES as f64;
                    let worst = per_object_worst_packed(packing);
                    assert!(
                        per_object <= worst,
                        "{alg} {packing:?} with {n} objects: {per_object:.1} bytes per object"
                    );
                }
            }
        }
    }

    /// ARC's ghosts are nodes of the cache's own slab and index: each costs what a cached
    /// object does, and there are at most as many as the capacity holds objects.
    #[test]
    fn arc_ghosts_cost_what_cached_objects_do() {
        for n in [1_000u64, 57_344, 100_000] {
            let mut cache = Cache::new(Algorithm::Arc, Capacity::objects(n));
            // Every key twice: each enters T2, so every eviction leaves a ghost in B2.
            for key in 0..n * 3 {
                let key = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                cache.access(key, 100);
                cache.access(key, 100);
            }
            let (objects, ghosts) = (cache.len(), cache.ghosts());
            assert_eq!(objects, n);
            assert!(ghosts > 0 && ghosts <= n, "{ghosts} ghosts for {n} objects");
            let per_node = cache.metadata_bytes() as f64 / (objects + ghosts) as f64;
            assert!(
                per_node - KEY_BYTES as f64 <= per_object_worst(),
                "ARC with {n} objects and {ghosts} ghosts: {per_node:.1} bytes per node"
            );
        }
    }

    #[test]
    fn a_dense_cache_finds_every_object_through_longer_chains() {
        let n = 50_000u64;
        let mut dense = Cache::new(Algorithm::Lru, Capacity::objects(n));
        dense.set_packing(Packing::Dense);
        let mut fast = Cache::new(Algorithm::Lru, Capacity::objects(n));
        for key in 0..n * 2 {
            let key = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            assert_eq!(dense.access(key, 1), fast.access(key, 1));
        }
        for key in n..n * 2 {
            let key = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            assert!(dense.slot_hint(key).is_some());
        }
        // The dense index holds a quarter to a half of the fast one's buckets.
        assert!(dense.metadata_bytes() < fast.metadata_bytes());
        let fresh = dense.fresh();
        assert_eq!(fresh.packing(), Packing::Dense, "fresh keeps the packing");
    }
}
