use super::*;
use cache::warmup::{Stamp, UnitTable};

fn hash(key: &[u8]) -> u64 {
    ahash::RandomState::with_seeds(1, 2, 3, 4).hash_one(key)
}

/// A monitor fed `(time, key)` accesses, its clock ticked to each new time.
fn monitor_at(accesses: &[(u64, &str)], period_s: u64) -> AccessMonitor {
    let m = AccessMonitor::new(1000, period_s);
    feed(&m, accesses);
    m
}

fn feed(m: &AccessMonitor, accesses: &[(u64, &str)]) {
    for &(t, key) in accesses {
        m.tick_at(t);
        m.record(hash(key.as_bytes()), key.as_bytes());
    }
}

/// What `strategy` picks among `candidates` (the store's keys, as a warm-up sees them).
fn pick(
    m: &AccessMonitor,
    candidates: &[String],
    strategy: Strategy,
    k: u64,
    now: u64,
) -> Vec<String> {
    let units = candidates
        .iter()
        .filter_map(|c| m.tracked(hash(c.as_bytes()), c.clone()))
        .collect();
    m.choose(units, strategy, k, now, 9)
}

fn all(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[test]
fn the_four_strategies_rank_as_bonfire_defines_them() {
    let m = monitor_at(
        &[(0, "e"), (1, "f"), (2, "e"), (3, "g"), (4, "h"), (5, "e")],
        100,
    );
    let keys = all(&["e", "f", "g", "h", "absent"]);
    assert_eq!(pick(&m, &keys, Strategy::LastK, 2, 5), ["e", "h"]);
    assert_eq!(pick(&m, &keys, Strategy::TopK, 2, 5), ["e", "h"]);
    assert_eq!(pick(&m, &keys, Strategy::FirstK, 3, 5), ["e", "f", "g"]);
    let random = pick(&m, &keys, Strategy::RandomK, 4, 5);
    assert_eq!(pick(&m, &keys, Strategy::RandomK, 4, 5), random, "seeded");
    let mut sorted = random;
    sorted.sort();
    assert_eq!(sorted, ["e", "f", "g", "h"]);
}

#[test]
fn first_k_looks_only_at_the_last_period() {
    // Period 100 s, start at 300: the window opens at 200. "a" was last seen at 10 (out);
    // "b" returned at 250 after a long gap (its run starts then); "c" entered at 210.
    let m = monitor_at(
        &[(10, "a"), (20, "b"), (210, "c"), (250, "b"), (260, "d")],
        100,
    );
    let keys = all(&["a", "b", "c", "d"]);
    assert_eq!(pick(&m, &keys, Strategy::FirstK, 10, 300), ["c", "b", "d"]);
}

/// Replay's table (`cache::warmup::UnitTable`, full records) and the monitor (tags, packed
/// counters, a clock of marks) rank the same accesses the same, for every strategy.
#[test]
fn the_rankings_are_replays_for_random_accesses() {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    for round in 0..20 {
        let period = 1 + next(50);
        let m = AccessMonitor::new(100_000, period);
        let mut replay: UnitTable<()> = UnitTable::default();
        let mut t = 1_000 + next(1000);
        for seq in 1..=2_000u64 {
            t += next(4) * next(3) * next(20); // bursts and gaps, some longer than the period
            let id = next(300);
            let key = id.to_string();
            m.tick_at(t);
            m.record(hash(key.as_bytes()), key.as_bytes());
            let at = Stamp {
                seq,
                time: t as f64,
            };
            replay.record(id, at, period as f64, usize::MAX, |_| true, || ());
        }
        let keys: Vec<String> = (0..300).map(|i: u64| i.to_string()).collect();
        let now = t + next(2 * period);
        for strategy in [
            Strategy::LastK,
            Strategy::TopK,
            Strategy::FirstK,
            Strategy::RandomK,
        ] {
            let units: Vec<(u64, Record)> = replay.iter().map(|(id, u)| (id, u.record)).collect();
            let expected: Vec<String> = choose(
                units,
                strategy,
                50,
                (now as f64, period as f64),
                9,
                |u| &u.1,
                |u| Name::Id(u.0),
            )
            .into_iter()
            .map(|u| u.0.to_string())
            .collect();
            assert_eq!(
                pick(&m, &keys, strategy, 50, now),
                expected,
                "round {round}, {strategy:?}, period {period}"
            );
        }
    }
}

#[test]
fn a_tracked_key_costs_at_most_16_bytes() {
    // Computed from the structure: 14-byte slots in tables at most 7/8 full.
    assert_eq!(slots::SLOT_BYTES, 14);
    for track in [DEFAULT_TRACK, 1_000_000, 10_000_000] {
        let bytes = bytes_per_tracked_key(track);
        assert!(bytes <= 16.0, "{track} keys: {bytes} B per key");
    }
    // And measured: a monitor at its bound holds that much (plus one mark).
    let m = AccessMonitor::new(DEFAULT_TRACK, 3600);
    for i in 0..DEFAULT_TRACK as u64 {
        m.record(i.wrapping_mul(0x9e37_79b9_7f4a_7c15), b"k");
    }
    let per_key = m.heap_bytes() as f64 / m.track() as f64;
    assert!(per_key <= 16.0, "{per_key} B per tracked key");
    assert!(m.len() > DEFAULT_TRACK / 2);
}

#[test]
fn renumbering_keeps_every_ranking() {
    let m = monitor_at(
        &[
            (10, "a"),
            (20, "b"),
            (210, "c"),
            (250, "b"),
            (260, "d"),
            (261, "a"),
        ],
        100,
    );
    let keys = all(&["a", "b", "c", "d"]);
    let before: Vec<Vec<String>> = [Strategy::LastK, Strategy::TopK, Strategy::FirstK]
        .into_iter()
        .map(|s| pick(&m, &keys, s, 10, 300))
        .collect();
    // As if four billion accesses had gone by: the tick renumbers.
    m.seq.store(RENUMBER_AT + 5, Ordering::Relaxed);
    m.tick_at(262);
    assert!(m.last_seq() < 100, "{}", m.last_seq());
    let after: Vec<Vec<String>> = [Strategy::LastK, Strategy::TopK, Strategy::FirstK]
        .into_iter()
        .map(|s| pick(&m, &keys, s, 10, 300))
        .collect();
    assert_eq!(before, after);
    feed(&m, &[(263, "c")]);
    assert_eq!(pick(&m, &keys, Strategy::LastK, 1, 300), ["c"]);
}

#[test]
fn memory_stays_bounded_and_keeps_the_recent_keys() {
    let m = AccessMonitor::new(160, 1000);
    let keys: Vec<String> = (0..5000u32).map(|i| format!("k{i}")).collect();
    for key in &keys {
        m.record(hash(key.as_bytes()), key.as_bytes());
        assert!(m.len() <= m.track());
    }
    assert!(m.trims() > 0);
    assert_eq!(pick(&m, &keys, Strategy::LastK, 1, 0), ["k4999"]);
    let kept = pick(&m, &keys, Strategy::LastK, 1000, 0);
    assert!(kept
        .iter()
        .all(|k| k[1..].parse::<u32>().unwrap() >= 5000 - 320));
}

#[test]
fn off_records_nothing_and_restore_keeps_the_newer_record() {
    let off = AccessMonitor::new(0, 1000);
    off.record(hash(b"x"), b"x");
    assert!(off.is_empty());

    let long = vec![b'k'; MAX_TRACKED_KEY_LEN + 1];
    let capped = AccessMonitor::new(1000, 1000);
    capped.record(hash(&long), &long);
    capped.record(hash(&long[1..]), &long[1..]);
    assert_eq!((capped.len(), capped.too_long()), (1, 1));

    let m = monitor_at(&[(1, "x"), (2, "y")], 1000);
    let fresh = AccessMonitor::new(1000, 1000);
    fresh.restore(m.units());
    assert_eq!(fresh.len(), 2);
    fresh.record(hash(b"x"), b"x");
    let keys = all(&["x", "y"]);
    assert_eq!(
        pick(&fresh, &keys, Strategy::LastK, 2, 0),
        ["x", "y"],
        "accesses after a restore rank after the restored ones"
    );
    // A tag restored twice keeps its newer record.
    let twice = AccessMonitor::new(1000, 1000);
    let mut units = m.units();
    let mut older = units[0];
    older.1.last_seq = 0;
    older.1.count = 40;
    units.push(older);
    twice.restore(units);
    assert!(twice.units().iter().all(|(_, r)| r.count == 1));
}
