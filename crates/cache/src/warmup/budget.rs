//! What a bulk load takes when the K chosen units do not all fit.
//!
//! The rule, in both hosts: offer the chosen objects in rank order and stop at the first one
//! that does not fit; the load is the longest prefix of the ranking that fits. The
//! alternatives were both worse:
//! - stopping at the first misfit in *key* order (what the server once did) loads a set that
//!   depends on how keys happen to sort, dropping hot keys for cold ones that sort earlier;
//! - skipping a misfit and going on (first fit) can put an object ranked below one it left
//!   out into the cache, and makes the load non-monotone: a larger budget can admit a large
//!   object early and then leave out several smaller, better-ranked ones it loaded before.
//!
//! With a prefix, a larger budget always loads a superset, and every object loaded ranks
//! above every object left out, so the strategy keeps its meaning ("the K most recent that
//! fit"). The objects taken may still be read in another order (replay reads them in key
//! order, as Bonfire does); only the choice is by rank.

use super::spec::WarmupSpec;
use crate::Capacity;

/// The part of the cache a bulk load may fill, and the prefix rule above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadBudget {
    limit: Capacity,
}

impl LoadBudget {
    /// The budget of `spec` in a cache of `capacity`: all of it for a count K, the share of
    /// each limit for a share K (`lastk:50%`).
    pub fn new(spec: &WarmupSpec, capacity: Capacity) -> LoadBudget {
        LoadBudget {
            limit: spec.load_budget(capacity),
        }
    }

    /// Whether the next object in rank order, of `size` bytes, joins a load (or a cache)
    /// already holding `objects` objects of `bytes` bytes. Once this says no, the load stops.
    #[inline]
    pub fn admits(&self, objects: u64, bytes: u64, size: u64) -> bool {
        !self
            .limit
            .exceeded_by(objects.saturating_add(1), bytes.saturating_add(size))
    }

    /// How many of `sizes` (the chosen objects' sizes, in rank order) an empty cache takes.
    pub fn prefix(&self, sizes: impl IntoIterator<Item = u64>) -> usize {
        let (mut objects, mut bytes) = (0u64, 0u64);
        sizes
            .into_iter()
            .take_while(|&size| {
                let fits = self.admits(objects, bytes, size);
                objects += 1;
                bytes += size;
                fits
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(spec: &str, capacity: Capacity) -> LoadBudget {
        LoadBudget::new(&spec.parse().unwrap(), capacity)
    }

    #[test]
    fn the_load_is_the_longest_prefix_of_the_ranking_that_fits() {
        let b = budget("topk:10", Capacity::bytes(100));
        assert_eq!(b.prefix([30, 30, 30, 30]), 3);
        // A big object stops the load even though smaller ones after it would fit.
        assert_eq!(b.prefix([30, 80, 10, 10]), 1);
        assert_eq!(b.prefix([120, 1]), 0);
        assert_eq!(b.prefix([]), 0);
        let objects = budget("lastk:5", Capacity::objects(2));
        assert_eq!(objects.prefix([1, 1, 1]), 2);
    }

    #[test]
    fn a_larger_budget_loads_a_superset() {
        let sizes = [40, 5, 70, 5, 5, 30, 90, 1];
        let mut last = 0;
        for bytes in 0..300 {
            let n = budget("topk:8", Capacity::bytes(bytes)).prefix(sizes);
            assert!(n >= last, "{bytes} B: {n} < {last}");
            last = n;
        }
    }

    #[test]
    fn a_share_bounds_the_load_and_a_count_does_not() {
        let cap = Capacity::bytes(1000);
        assert_eq!(budget("lastk:50%", cap).prefix([100; 10]), 5);
        assert_eq!(budget("lastk:7", cap).prefix([100; 10]), 10);
        assert!(budget("lastk:50%", cap).admits(4, 400, 100));
        assert!(!budget("lastk:50%", cap).admits(5, 500, 1));
    }
}
