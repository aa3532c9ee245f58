//! The four strategies' rankings, one definition for both hosts.
//!
//! Every ranking is total without looking at the units' names: order numbers are unique per
//! access, so `last_seq` (Last-K), `(count, last_seq)` (Top-K) and `(run start, run_seq)`
//! (First-K) never tie. That is what lets replay (numeric ids) and the server (key bytes)
//! agree: neither host's key order enters the result. Random-K orders by a seeded hash of the
//! unit's name, with a hash written out here rather than taken from a crate or the standard
//! library, whose outputs may change between versions (SipHash's is explicitly unstable) or
//! with the CPU (aHash uses AES instructions where present): the same record and seed must
//! give the same set on every machine and every build.

use super::spec::Strategy;
use super::table::Record;

/// Random-K's seed in both hosts (replay's `--warmup-seed` overrides it).
pub const DEFAULT_SEED: u64 = 1;

/// What Random-K hashes to order a unit. A numeric id is named by its decimal digits, which
/// is how `mantle replay --server` sends a trace id to the server as a key, so a trace ranks
/// the same in both hosts.
#[derive(Clone, Copy, Debug)]
pub enum Name<'a> {
    Id(u64),
    Bytes(&'a [u8]),
}

/// Random-K's position of a unit: FNV-1a over the name, started from the seed, then
/// SplitMix64's finaliser so that nearby names spread over the whole range.
pub fn random_rank(seed: u64, name: Name<'_>) -> u64 {
    let mut digits = [0u8; 20];
    let bytes = match name {
        Name::Bytes(bytes) => bytes,
        Name::Id(mut id) => {
            let mut at = digits.len();
            loop {
                at -= 1;
                digits[at] = b'0' + (id % 10) as u8;
                id /= 10;
                if id == 0 {
                    break;
                }
            }
            &digits[at..]
        }
    };
    let mut h = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The (at most `k`) units `strategy` picks, best first. `now` is the restart time and
/// `period` First-K's look-back (seconds); `seed` drives Random-K.
pub fn choose<T>(
    mut units: Vec<T>,
    strategy: Strategy,
    k: u64,
    (now, period): (f64, f64),
    seed: u64,
    record: impl Fn(&T) -> &Record,
    name: impl Fn(&T) -> Name<'_>,
) -> Vec<T> {
    use std::cmp::Reverse;
    match strategy {
        Strategy::LastK => units.sort_unstable_by_key(|u| Reverse(record(u).last_seq)),
        Strategy::TopK => {
            units.sort_unstable_by_key(|u| Reverse((record(u).count, record(u).last_seq)))
        }
        Strategy::FirstK => {
            let window_start = now - period;
            units.retain(|u| record(u).last_time >= window_start);
            // A unit whose current run began inside the window entered it then; one whose run
            // began earlier was live when the window opened (its exact first access in the
            // window is not kept), so it ranks at the window's start, by run order.
            units.sort_unstable_by(|a, b| {
                let (a, b) = (record(a), record(b));
                let ea = a.run_time.max(window_start);
                let eb = b.run_time.max(window_start);
                ea.total_cmp(&eb).then(a.run_seq.cmp(&b.run_seq))
            });
        }
        Strategy::RandomK => {
            units.sort_by_cached_key(|u| (random_rank(seed, name(u)), record(u).last_seq))
        }
    }
    units.truncate(usize::try_from(k).unwrap_or(usize::MAX));
    units
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warmup::Stamp;

    /// (name, record) pairs from accesses `(time, name)`.
    fn records(accesses: &[(f64, u64)]) -> Vec<(u64, Record)> {
        let mut out: Vec<(u64, Record)> = Vec::new();
        for (i, &(time, id)) in accesses.iter().enumerate() {
            let at = Stamp {
                seq: i as u64 + 1,
                time,
            };
            match out.iter_mut().find(|(n, _)| *n == id) {
                Some((_, r)) => r.touch(at, 100.0),
                None => out.push((id, Record::first(at))),
            }
        }
        out
    }

    fn pick(units: &[(u64, Record)], strategy: Strategy, k: u64, now: f64, seed: u64) -> Vec<u64> {
        choose(
            units.to_vec(),
            strategy,
            k,
            (now, 100.0),
            seed,
            |u| &u.1,
            |u| Name::Id(u.0),
        )
        .into_iter()
        .map(|u| u.0)
        .collect()
    }

    #[test]
    fn the_four_strategies_rank_as_bonfire_defines_them() {
        let u = records(&[(0.0, 5), (1.0, 6), (2.0, 5), (3.0, 7), (4.0, 8), (5.0, 5)]);
        assert_eq!(pick(&u, Strategy::LastK, 2, 5.0, 0), [5, 8]);
        assert_eq!(pick(&u, Strategy::TopK, 2, 5.0, 0), [5, 8]);
        assert_eq!(pick(&u, Strategy::FirstK, 3, 5.0, 0), [5, 6, 7]);
        let mut all = pick(&u, Strategy::RandomK, 4, 5.0, 9);
        assert_eq!(pick(&u, Strategy::RandomK, 4, 5.0, 9), all, "seeded");
        all.sort_unstable();
        assert_eq!(all, [5, 6, 7, 8]);
        // Period 100 s, restart at 300: the window opens at 200.
        let u = records(&[(10.0, 1), (20.0, 2), (210.0, 3), (250.0, 2), (260.0, 4)]);
        assert_eq!(pick(&u, Strategy::FirstK, 10, 300.0, 0), [3, 2, 4]);
    }

    #[test]
    fn the_ranking_ignores_the_order_units_come_in() {
        let u = records(&[(0.0, 3), (1.0, 1), (2.0, 2), (3.0, 1), (4.0, 9), (5.0, 4)]);
        for strategy in [
            Strategy::LastK,
            Strategy::TopK,
            Strategy::FirstK,
            Strategy::RandomK,
        ] {
            let mut reversed = u.clone();
            reversed.reverse();
            assert_eq!(
                pick(&u, strategy, 10, 5.0, 7),
                pick(&reversed, strategy, 10, 5.0, 7),
                "{strategy:?}"
            );
        }
    }

    #[test]
    fn random_k_is_fixed_by_the_name_and_seed_and_ids_read_as_decimal_keys() {
        // Pinned values: a change here changes every Random-K warm-up in both hosts.
        assert_eq!(
            random_rank(1, Name::Id(42)),
            random_rank(1, Name::Bytes(b"42"))
        );
        assert_eq!(
            random_rank(1, Name::Id(0)),
            random_rank(1, Name::Bytes(b"0"))
        );
        assert_eq!(
            random_rank(1, Name::Id(u64::MAX)),
            random_rank(1, Name::Bytes(u64::MAX.to_string().as_bytes()))
        );
        assert_ne!(random_rank(1, Name::Id(42)), random_rank(2, Name::Id(42)));
        assert_ne!(random_rank(1, Name::Id(42)), random_rank(1, Name::Id(24)));
        assert_eq!(random_rank(1, Name::Bytes(b"")), 0xe9d3_2759_6b86_9820_u64);
    }
}
