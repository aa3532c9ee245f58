//! The guarantees of class-aware caching, checked after every one of many random operations
//! for every algorithm: a hard-pinned object is never evicted whatever the pressure (inserts,
//! `evict`, capacity cuts), every class stays within its allocation cap, the cache within
//! its capacity, and the per-class counters agree with what is really cached.

use cache::classes::{ClassSet, Pinning, Probe, RuleOp};
use cache::{Algorithm, Capacity, ClassedCache};
use std::collections::HashSet;

/// splitmix64: a deterministic stream without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Metadata (offsets below 1 MiB) hard-pinned with a 20% cap; small objects soft-pinned;
/// medium at priority 3 capped at 50%; big ones at priority 200 capped at 30%; a class that
/// is never cached.
const CLASSES: &str = "\
IO class id,IO class name,Eviction priority,Allocation
0,unclassified,100,1
1,offset:lt:1048576&done,,0.2
2,size:le:64,soft:2,1
3,size:gt:64&size:le:4096,3,0.5
4,size:gt:4096,200,0.3
5,size:eq:777&done,1,0
";

fn probe(size: u32, offset: u64) -> Probe<'static> {
    Probe {
        key: b"",
        size,
        offset,
        op: RuleOp::Access,
        hint: None,
    }
}

/// `hard_before`: the hard-pinned class's (objects, bytes) before this step. A capacity cut
/// may leave a hard-pinned class over its cap (its objects are never evicted); it must then
/// admit nothing until it is back under.
fn check(
    cache: &ClassedCache,
    pinned: &HashSet<u64>,
    hard_before: (u64, u64),
    step: usize,
    what: &str,
) {
    for &key in pinned {
        assert!(
            cache.contains(key),
            "step {step} ({what}): hard-pinned key {key} is gone"
        );
    }
    let (mut objects, mut bytes) = (0, 0);
    for (i, spec) in cache.specs().iter().enumerate() {
        let s = cache.stats(i as u8);
        objects += s.objects;
        bytes += s.bytes;
        let limit = cache.class_limit(i as u8);
        if spec.pinning == Pinning::Hard && limit.exceeded_by(s.objects, s.bytes) {
            assert!(
                s.objects <= hard_before.0 && s.bytes <= hard_before.1,
                "step {step} ({what}): hard-pinned class over its cap admitted more"
            );
            continue;
        }
        assert!(
            !limit.exceeded_by(s.objects, s.bytes),
            "step {step} ({what}): class {} holds {} objects / {} bytes over its cap {limit:?}",
            spec.id,
            s.objects,
            s.bytes
        );
        if spec.pinning == Pinning::Hard {
            assert_eq!(
                s.evictions, 0,
                "step {step}: hard-pinned class {} evicted",
                spec.id
            );
        }
        if spec.allocation == 0.0 {
            assert_eq!(s.objects, 0);
        }
    }
    assert_eq!(
        (objects, bytes),
        (cache.len(), cache.bytes()),
        "step {step}"
    );
    let mut per_class = vec![(0u64, 0u64); cache.specs().len()];
    for (_, size, class) in cache.iter() {
        per_class[class as usize].0 += 1;
        per_class[class as usize].1 += u64::from(size);
    }
    for (i, (o, b)) in per_class.into_iter().enumerate() {
        let s = cache.stats(i as u8);
        assert_eq!(
            (s.objects, s.bytes),
            (o, b),
            "step {step}: class index {i} counters"
        );
    }
}

fn run(algorithm: Algorithm, capacity: Capacity, seed: u64) {
    let set = ClassSet::parse(CLASSES, "guarantees").unwrap();
    let mut cache = ClassedCache::with_classes(algorithm, capacity, set);
    let mut rng = Rng(seed);
    let mut pinned: HashSet<u64> = HashSet::new();
    for step in 0..20_000 {
        let key = rng.below(3_000);
        let roll = rng.below(1000);
        // Keys below 300 live in the pinned metadata region; the rest by size.
        let (size, offset) = if key < 300 {
            (512, key * 512)
        } else {
            let size = match key % 4 {
                0 => 32,
                1 => 1000,
                2 => 20_000,
                _ => 777,
            };
            (size, (1 << 30) + key * 65_536)
        };
        let class = cache.classify(&probe(size, offset));
        let mut evicted_pinned = None;
        let hard_before = (cache.stats(1).objects, cache.stats(1).bytes);
        let what = if roll < 900 {
            if !cache.get(key, class) {
                let stored = cache.insert_with(key, size, class, |k, _| {
                    if pinned.contains(&k) {
                        evicted_pinned = Some(k);
                    }
                });
                if stored && key < 300 {
                    pinned.insert(key);
                }
            }
            "access"
        } else if roll < 960 {
            cache.evict_with(rng.below(50), |k, _| {
                if pinned.contains(&k) {
                    evicted_pinned = Some(k);
                }
            });
            "evict"
        } else if roll < 990 {
            let mut cap = capacity;
            let scale = 1 + rng.below(4);
            cap.bytes = cap.bytes.map(|b| b / scale);
            cap.objects = cap.objects.map(|o| o / scale);
            cache.set_capacity_with(cap, |k, _| {
                if pinned.contains(&k) {
                    evicted_pinned = Some(k);
                }
            });
            "set_capacity"
        } else {
            // An explicit remove is allowed to drop pinned keys; it is not an eviction.
            if cache.remove(key) {
                pinned.remove(&key);
            }
            "remove"
        };
        assert_eq!(
            evicted_pinned, None,
            "step {step}: {what} evicted a hard-pinned key"
        );
        check(&cache, &pinned, hard_before, step, what);
        // Outside capacity cuts below the pinned footprint, the cache stays within capacity.
        let pinned_cost = cache.stats(1);
        let cap = cache.capacity();
        if !cap.exceeded_by(pinned_cost.objects, pinned_cost.bytes) {
            assert!(
                !cap.exceeded_by(cache.len(), cache.bytes()),
                "step {step} ({what}): {} objects / {} bytes over {cap:?}",
                cache.len(),
                cache.bytes()
            );
        }
    }
    assert!(!pinned.is_empty(), "the run exercised pinning");
    assert!(
        cache.stats(1).refused > 0,
        "the pinned class reached its cap"
    );
}

#[test]
fn guarantees_hold_for_every_algorithm_and_capacity_kind() {
    // BeladySize caches nothing without next access times (this run has none), so nothing
    // would be pinned; its own tests run it with them.
    for algorithm in Algorithm::ALL
        .into_iter()
        .filter(|&a| a != Algorithm::BeladySize)
    {
        for (i, capacity) in [
            Capacity::bytes(400_000),
            Capacity::objects(600),
            Capacity {
                bytes: Some(300_000),
                objects: Some(500),
            },
        ]
        .into_iter()
        .enumerate()
        {
            run(algorithm, capacity, 42 + i as u64);
        }
    }
}
