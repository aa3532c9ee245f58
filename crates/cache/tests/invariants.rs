//! The cache's invariants under arbitrary operation sequences, for every algorithm and every
//! kind of capacity: after each call the objects and bytes cached are within the capacity,
//! the counters agree with what is actually cached, every eviction is reported once, and the
//! algorithms' bookkeeping stays consistent (no lost or duplicated objects).

use cache::{Algorithm, Cache, Capacity};
use std::collections::HashMap;

/// Deterministic generator (SplitMix64) so failures replay exactly.
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

fn check(cache: &Cache, model: &HashMap<u64, u32>, evictions: u64, step: usize) {
    let cap = cache.capacity();
    assert!(
        !cap.exceeded_by(cache.len(), cache.bytes()),
        "step {step}: {} objects / {} bytes exceed {cap:?}",
        cache.len(),
        cache.bytes()
    );
    let listed: HashMap<u64, u32> = cache.iter().collect();
    assert_eq!(
        &listed, model,
        "step {step}: cached set differs from the model"
    );
    assert_eq!(cache.len(), model.len() as u64, "step {step}");
    let bytes: u64 = model.values().map(|&s| u64::from(s)).sum();
    assert_eq!(cache.bytes(), bytes, "step {step}");
    assert_eq!(cache.evictions(), evictions, "step {step}");
}

fn capacities() -> Vec<Capacity> {
    vec![
        Capacity::bytes(5_000),
        Capacity::objects(40),
        Capacity {
            bytes: Some(3_000),
            objects: Some(25),
        },
        Capacity::bytes(150),
    ]
}

#[test]
fn capacity_and_bookkeeping_hold_after_every_operation() {
    for algorithm in Algorithm::ALL {
        for (c, capacity) in capacities().into_iter().enumerate() {
            let mut rng = Rng(7 + c as u64);
            let mut cache = Cache::new(algorithm, capacity);
            // What the cache should hold, maintained from the API's own reports.
            let mut model: HashMap<u64, u32> = HashMap::new();
            let mut evictions = 0u64;
            for step in 0..20_000 {
                let key = rng.below(200);
                let size = 1 + rng.below(300) as u32;
                let mut evicted = Vec::new();
                // The model is updated after the evictions each operation reports, because an
                // object whose update makes it grow may be the one evicted.
                let mut outcome: Option<(u64, Option<u32>)> = None;
                match rng.below(100) {
                    0..=59 => {
                        let hit = cache.get(key);
                        assert_eq!(hit, model.contains_key(&key), "step {step}");
                        if !hit && cache.insert_with(key, size, |k, s| evicted.push((k, s))) {
                            outcome = Some((key, Some(size)));
                        }
                    }
                    60..=84 => {
                        let cached = cache.insert_with(key, size, |k, s| evicted.push((k, s)));
                        outcome = Some((key, cached.then_some(size)));
                    }
                    85..=92 => {
                        assert_eq!(cache.remove(key), model.contains_key(&key));
                        outcome = Some((key, None));
                    }
                    93..=96 => {
                        let n = rng.below(5);
                        let done = cache.evict_with(n, |k, s| evicted.push((k, s)));
                        assert!(done <= n);
                    }
                    _ => {
                        let scale = 1 + rng.below(4);
                        let new_cap = Capacity {
                            bytes: capacity.bytes.map(|b| b * scale / 3),
                            objects: capacity.objects.map(|o| o * scale / 3),
                        };
                        let done = cache.set_capacity_with(new_cap, |k, s| evicted.push((k, s)));
                        assert_eq!(done as usize, evicted.len());
                        assert_eq!(cache.capacity(), new_cap);
                    }
                }
                for (k, s) in evicted {
                    let was = model.remove(&k);
                    let updated = outcome.is_some_and(|(key, _)| key == k);
                    assert!(
                        was == Some(s) || (updated && was.is_some()),
                        "step {step}: evicted {k} ({s} B) but the model had {was:?}"
                    );
                    evictions += 1;
                }
                match outcome {
                    Some((key, Some(size))) => {
                        model.insert(key, size);
                    }
                    Some((key, None)) => {
                        model.remove(&key);
                    }
                    None => {}
                }
                check(&cache, &model, evictions, step);
            }
        }
    }
}

#[test]
fn lru_evicts_least_recently_used_first() {
    let mut cache = Cache::new(Algorithm::Lru, Capacity::objects(3));
    for k in 1..=3 {
        cache.access(k, 1);
    }
    cache.access(1, 1);
    let mut evicted = Vec::new();
    cache.insert_with(4, 1, |k, _| evicted.push(k));
    assert_eq!(evicted, vec![2]);
}

#[test]
fn fifo_ignores_hits() {
    let mut cache = Cache::new(Algorithm::Fifo, Capacity::objects(3));
    for k in 1..=3 {
        cache.access(k, 1);
    }
    cache.access(1, 1);
    let mut evicted = Vec::new();
    cache.insert_with(4, 1, |k, _| evicted.push(k));
    assert_eq!(evicted, vec![1]);
}

#[test]
fn clock_gives_a_hit_object_a_second_chance() {
    let mut cache = Cache::new(Algorithm::Clock, Capacity::objects(3));
    for k in 1..=3 {
        cache.access(k, 1);
    }
    cache.access(1, 1);
    cache.access(1, 1); // a 1-bit counter saturates: still one chance
    let mut evicted = Vec::new();
    cache.insert_with(4, 1, |k, _| evicted.push(k));
    cache.insert_with(5, 1, |k, _| evicted.push(k));
    cache.insert_with(6, 1, |k, _| evicted.push(k));
    assert_eq!(evicted, vec![2, 3, 1]);
}

#[test]
fn sieve_keeps_visited_objects_in_place_and_remembers_its_hand() {
    let mut cache = Cache::new(Algorithm::Sieve, Capacity::objects(4));
    for k in 1..=4 {
        cache.access(k, 1);
    }
    cache.access(1, 1);
    cache.access(3, 1);
    let mut evicted = Vec::new();
    // Hand starts at the tail (1, visited -> cleared), evicts 2 and rests on 3.
    cache.insert_with(5, 1, |k, _| evicted.push(k));
    // From 3 (visited -> cleared) it moves to 4 and evicts it.
    cache.insert_with(6, 1, |k, _| evicted.push(k));
    // The hand rests on 5 (newer than 4) and keeps going towards the head: 5 is unvisited,
    // and so is 6 after it; 3 and 1, now behind the hand, are not looked at again yet.
    cache.insert_with(7, 1, |k, _| evicted.push(k));
    cache.insert_with(8, 1, |k, _| evicted.push(k));
    assert_eq!(evicted, vec![2, 4, 5, 6]);
    assert!(cache.contains(1) && cache.contains(3));
}

#[test]
fn s3fifo_filters_one_hit_wonders_and_readmits_from_the_ghost() {
    // 10 objects: small holds 1, main 9.
    let mut cache = Cache::new(Algorithm::S3Fifo, Capacity::objects(10));
    let mut evicted = Vec::new();
    for k in 0..10 {
        cache.insert_with(k, 1, |k, _| evicted.push(k));
    }
    assert!(evicted.is_empty());
    // A scan of new keys churns through the small queue only.
    for k in 100..110 {
        cache.insert_with(k, 1, |k, _| evicted.push(k));
    }
    assert!(evicted.iter().all(|&k| k >= 100 || k == 0), "{evicted:?}");
    // 100 went to the ghost: asking for it again admits it to main.
    assert!(!cache.get(100));
    assert!(cache.insert(100, 1));
    let before = evicted.len();
    for k in 200..205 {
        cache.insert_with(k, 1, |k, _| evicted.push(k));
    }
    assert!(
        cache.contains(100),
        "ghost hits go to main and survive a scan"
    );
    assert!(evicted.len() > before);
}
