//! The request semantics every simulated cache shares (docs/replay.md, "Request semantics"):
//! `get` and `access` look up and insert on a miss, `put` (re)inserts, `delete` removes.
//! Replay, its warm-up caches, `replay --nodes`, the adaptive shadows and Python's `Cache`
//! all serve requests through [`Cache::serve_as`], which counts them in [`RequestCounts`] as
//! it serves them, so the semantics and the counters cannot drift between hosts.

use crate::classes::RuleOp;
use crate::{Cache, ClassLayer};

/// What serving one request did to the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// A lookup (`get`/`access`) found the key; nothing was inserted.
    Hit,
    /// A lookup missed: the object was read from the back end and inserted (unless larger
    /// than the whole cache).
    Miss,
    /// A `put`: written through to the back end and (re)inserted.
    Written,
    /// A `delete`: removed from the cache (if cached) and written to the back end.
    Deleted,
}

impl Served {
    /// `Some(hit)` for a lookup, `None` for a write or delete.
    #[inline]
    pub fn lookup(self) -> Option<bool> {
        match self {
            Served::Hit => Some(true),
            Served::Miss => Some(false),
            Served::Written | Served::Deleted => None,
        }
    }

    /// Whether the request inserted (so the cache's footprint may have grown).
    #[inline]
    pub fn inserted(self) -> bool {
        matches!(self, Served::Miss | Served::Written)
    }

    /// Back-end reads this request caused (a miss reads the object).
    #[inline]
    pub fn backend_reads(self) -> u64 {
        u64::from(self == Served::Miss)
    }

    /// Back-end writes this request caused (puts write through, deletes are written).
    #[inline]
    pub fn backend_writes(self) -> u64 {
        u64::from(matches!(self, Served::Written | Served::Deleted))
    }
}

impl<L: ClassLayer> Cache<L> {
    /// Serves one request of class `class` with the shared semantics, counts it in `counts`
    /// and says what happened. A hit keeps the cached size even if `size` differs; evictions
    /// it caused show in [`Cache::evictions`]. Serving and counting share one match on the
    /// operation (the replay loop runs this for every request: a second match after it cost
    /// 8% of an unclassed replay's instructions). Allocation free; always inlined into the
    /// caller's loop.
    #[inline(always)]
    pub fn serve_as(
        &mut self,
        op: RuleOp,
        key: u64,
        size: u32,
        class: L::Class,
        counts: &mut RequestCounts,
    ) -> Served {
        counts.requests += 1;
        match op {
            RuleOp::Get => {
                counts.gets += 1;
                self.look_up_as(key, size, class, counts)
            }
            RuleOp::Access => {
                counts.accesses += 1;
                self.look_up_as(key, size, class, counts)
            }
            RuleOp::Put => {
                counts.puts += 1;
                self.insert_as(key, size, class, |_, _| {});
                Served::Written
            }
            RuleOp::Delete => {
                counts.deletes += 1;
                self.remove(key);
                Served::Deleted
            }
        }
    }

    /// A `get` or `access`: a hit, or a miss that inserts.
    #[inline(always)]
    fn look_up_as(
        &mut self,
        key: u64,
        size: u32,
        class: L::Class,
        counts: &mut RequestCounts,
    ) -> Served {
        counts.lookup_bytes += u64::from(size);
        if self.get_or_insert_as(key, size, class) {
            counts.hits += 1;
            Served::Hit
        } else {
            counts.misses += 1;
            counts.miss_bytes += u64::from(size);
            Served::Miss
        }
    }
}

impl Cache {
    /// [`Cache::serve_as`] for a cache without classes.
    #[inline(always)]
    pub fn serve(&mut self, op: RuleOp, key: u64, size: u32, counts: &mut RequestCounts) -> Served {
        self.serve_as(op, key, size, (), counts)
    }
}

/// The request counters every host reports: by operation, lookups' hits and misses, and
/// their bytes (`miss_ratio = misses / lookups`, `byte_miss_ratio = miss_bytes /
/// lookup_bytes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestCounts {
    pub requests: u64,
    pub gets: u64,
    pub accesses: u64,
    pub puts: u64,
    pub deletes: u64,
    pub hits: u64,
    pub misses: u64,
    pub lookup_bytes: u64,
    pub miss_bytes: u64,
}

impl RequestCounts {
    /// A `get` of `size` bytes that missed and found nothing behind the cache to insert (a
    /// host whose back end may lack the key): counted as a miss, served by no cache.
    #[inline]
    pub fn count_absent_get(&mut self, size: u32) {
        self.requests += 1;
        self.gets += 1;
        self.misses += 1;
        self.lookup_bytes += u64::from(size);
        self.miss_bytes += u64::from(size);
    }

    /// Lookups: gets and accesses.
    #[inline]
    pub fn lookups(&self) -> u64 {
        self.gets + self.accesses
    }

    /// Back-end reads the requests caused (one per miss).
    #[inline]
    pub fn backend_reads(&self) -> u64 {
        self.misses
    }

    /// Back-end writes the requests caused (puts and deletes).
    #[inline]
    pub fn backend_writes(&self) -> u64 {
        self.puts + self.deletes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Capacity};

    #[test]
    fn each_operation_does_what_the_replay_docs_say() {
        let mut cache = Cache::new(Algorithm::Lru, Capacity::bytes(100));
        let mut n = RequestCounts::default();
        let mut run = |cache: &mut Cache, op, key, size| cache.serve(op, key, size, &mut n);
        assert_eq!(run(&mut cache, RuleOp::Get, 1, 10), Served::Miss);
        assert!(cache.contains(1), "a miss inserts");
        assert_eq!(run(&mut cache, RuleOp::Access, 1, 50), Served::Hit);
        assert_eq!(
            cache.object_size(1),
            Some(10),
            "a hit keeps the cached size"
        );
        assert_eq!(run(&mut cache, RuleOp::Put, 1, 30), Served::Written);
        assert_eq!(cache.object_size(1), Some(30), "a put rewrites the size");
        assert_eq!(run(&mut cache, RuleOp::Delete, 1, 0), Served::Deleted);
        assert!(!cache.contains(1));
        assert_eq!(run(&mut cache, RuleOp::Access, 2, 500), Served::Miss);
        assert!(!cache.contains(2), "larger than the cache: never inserted");
        assert_eq!(
            n,
            RequestCounts {
                requests: 5,
                gets: 1,
                accesses: 2,
                puts: 1,
                deletes: 1,
                hits: 1,
                misses: 2,
                lookup_bytes: 10 + 50 + 500,
                miss_bytes: 10 + 500,
            }
        );
        assert_eq!(
            (n.lookups(), n.backend_reads(), n.backend_writes()),
            (3, 2, 2)
        );
    }

    #[test]
    fn a_get_of_an_absent_key_counts_as_a_served_miss_does() {
        let mut cache = Cache::new(Algorithm::Lru, Capacity::bytes(100));
        let (mut served, mut absent) = (RequestCounts::default(), RequestCounts::default());
        cache.serve(RuleOp::Get, 7, 10, &mut served);
        absent.count_absent_get(10);
        assert_eq!(absent, served);
    }

    /// A served miss inserts without leaving a miss pending: a bare `get_as` miss noted
    /// before it must not let a later insert of that key skip its lookup (which would index
    /// a second node for a key the served miss already cached).
    #[test]
    fn a_served_miss_leaves_no_miss_pending() {
        for alg in [Algorithm::Lru, Algorithm::ClockPro, Algorithm::Arc] {
            let mut cache = Cache::new(alg, Capacity::bytes(1_000));
            let mut n = RequestCounts::default();
            assert!(!cache.get(1), "{alg}");
            assert_eq!(cache.serve(RuleOp::Access, 1, 10, &mut n), Served::Miss);
            assert_eq!(cache.serve(RuleOp::Put, 1, 20, &mut n), Served::Written);
            assert_eq!(
                (cache.len(), cache.bytes()),
                (1, 20),
                "{alg}: one node for key 1"
            );
            assert_eq!(cache.serve(RuleOp::Delete, 1, 0, &mut n), Served::Deleted);
            assert!(!cache.contains(1), "{alg}");
            assert_eq!((cache.len(), cache.bytes()), (0, 0), "{alg}");
        }
    }

    #[test]
    fn outcomes_say_lookup_insert_and_back_end_traffic() {
        assert_eq!(Served::Hit.lookup(), Some(true));
        assert_eq!(Served::Miss.lookup(), Some(false));
        assert_eq!(Served::Written.lookup(), None);
        assert!(Served::Miss.inserted() && Served::Written.inserted());
        assert!(!Served::Hit.inserted() && !Served::Deleted.inserted());
        assert_eq!(
            Served::Miss.backend_reads() + Served::Hit.backend_reads(),
            1
        );
        assert_eq!(
            Served::Written.backend_writes() + Served::Deleted.backend_writes(),
            2
        );
    }
}
