//! The scripted cache driven by hooks written in Rust: the decisions the cache takes for the
//! hooks (order by priority, queues, admission) and the fallback to LRU when a hook fails.

use cache::hooks::{HookFailure, HookObject, HookSet, ObjectHooks, Placement};
use cache::{Algorithm, Cache, Capacity};

/// Hooks as plain closures; `fail_at` makes the named hook fail at its n-th call.
#[derive(Default)]
struct Hooks {
    defined: HookSet,
    admit: Option<fn(&mut HookObject) -> bool>,
    priority: Option<fn(&HookObject) -> Placement>,
    evict: Option<fn(&[HookObject]) -> usize>,
    fail_at: Option<(&'static str, u64)>,
    calls: u64,
    evicted: Vec<u64>,
}

impl Hooks {
    fn call(&mut self, hook: &'static str) -> Result<(), HookFailure> {
        self.calls += 1;
        match self.fail_at {
            Some((h, n)) if h == hook && self.calls >= n => Err(HookFailure {
                hook,
                message: "policy.lua:3: boom".into(),
            }),
            _ => Ok(()),
        }
    }
}

impl ObjectHooks for Hooks {
    fn defined(&self) -> HookSet {
        self.defined
    }
    fn admit(&mut self, obj: &mut HookObject) -> Result<bool, HookFailure> {
        self.call("admit")?;
        Ok(self.admit.is_none_or(|f| f(obj)))
    }
    fn on_hit(&mut self, _: &mut HookObject) -> Result<(), HookFailure> {
        self.call("on_hit")
    }
    fn on_insert(&mut self, _: &mut HookObject) -> Result<(), HookFailure> {
        self.call("on_insert")
    }
    fn on_evict(&mut self, obj: &mut HookObject) -> Result<(), HookFailure> {
        self.call("on_evict")?;
        self.evicted.push(obj.id);
        Ok(())
    }
    fn priority(&mut self, obj: &mut HookObject) -> Result<Placement, HookFailure> {
        self.call("priority")?;
        Ok(self.priority.expect("priority defined")(obj))
    }
    fn evict(&mut self, candidates: &[HookObject]) -> Result<usize, HookFailure> {
        self.call("evict")?;
        Ok(self.evict.expect("evict defined")(candidates))
    }
}

/// 20,000 requests over 400 keys, skewed, with sizes 1..=100.
fn trace() -> Vec<(u64, u32)> {
    let mut x = 7u64;
    (0..20_000)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = x >> 33;
            let key = (r % 400) * (r % 7) / 6;
            (key, (key % 100 + 1) as u32)
        })
        .collect()
}

fn hits(cache: &mut Cache, trace: &[(u64, u32)]) -> Vec<bool> {
    trace.iter().map(|&(k, s)| cache.access(k, s)).collect()
}

fn lru_priority(obj: &HookObject) -> Placement {
    Placement {
        priority: obj.last_access as f64,
        queue: 0,
    }
}

fn all_hooks() -> HookSet {
    HookSet {
        admit: true,
        on_hit: true,
        on_insert: true,
        on_evict: true,
        priority: true,
        evict: false,
    }
}

#[test]
fn priority_by_last_access_is_lru_exactly() {
    let trace = trace();
    let capacity = Capacity::bytes(3_000);
    let builtin = hits(&mut Cache::new(Algorithm::Lru, capacity), &trace);
    let hooks = Hooks {
        defined: all_hooks(),
        priority: Some(lru_priority),
        ..Hooks::default()
    };
    let mut scripted = Cache::with_hooks(capacity, Box::new(hooks));
    assert_eq!(hits(&mut scripted, &trace), builtin);
    assert!(scripted.hook_failure().is_none());
    assert!(scripted.evictions() > 1_000);
}

#[test]
fn without_priority_the_victims_are_lru_and_admit_bypasses() {
    let trace = trace();
    let capacity = Capacity::bytes(3_000);
    let mut builtin = Cache::new(Algorithm::Lru, capacity);
    let expected: Vec<bool> = trace
        .iter()
        .map(|&(k, s)| {
            if s > 50 {
                builtin.get(k)
            } else {
                builtin.access(k, s)
            }
        })
        .collect();
    let hooks = Hooks {
        defined: HookSet {
            admit: true,
            ..HookSet::default()
        },
        admit: Some(|obj| obj.size <= 50),
        ..Hooks::default()
    };
    let mut scripted = Cache::with_hooks(capacity, Box::new(hooks));
    assert_eq!(hits(&mut scripted, &trace), expected);
    assert!(scripted.iter().all(|(_, size)| size <= 50));
}

#[test]
fn evict_picks_among_the_heads_of_the_queues() {
    // Two queues by key parity, FIFO inside each; `evict` always drains the odd one first.
    let hooks = Hooks {
        defined: HookSet {
            priority: true,
            evict: true,
            on_evict: true,
            ..HookSet::default()
        },
        priority: Some(|obj| Placement {
            priority: obj.inserted as f64,
            queue: (obj.id % 2) as u8,
        }),
        evict: Some(|c| c.iter().position(|o| o.id % 2 == 1).unwrap_or(0)),
        ..Hooks::default()
    };
    let mut cache = Cache::with_hooks(Capacity::objects(4), Box::new(hooks));
    for key in [1, 2, 3, 4, 5, 6, 7] {
        cache.access(key, 1);
    }
    let mut left: Vec<u64> = cache.iter().map(|(k, _)| k).collect();
    left.sort_unstable();
    // 1 and 3 went first (odd heads), then 5 (the odd head again) for 7.
    assert_eq!(left, vec![2, 4, 6, 7]);
}

#[test]
fn a_failing_hook_falls_back_to_lru_for_good() {
    let trace = trace();
    let capacity = Capacity::bytes(3_000);
    for hook in [
        "admit",
        "on_hit",
        "on_insert",
        "on_evict",
        "priority",
        "evict",
    ] {
        let mut defined = all_hooks();
        defined.evict = true;
        let hooks = Hooks {
            defined,
            // FIFO within two queues: differs from LRU, so the fallback shows.
            priority: Some(|obj| Placement {
                priority: obj.inserted as f64,
                queue: (obj.id % 2) as u8,
            }),
            evict: Some(|_| 0),
            fail_at: Some((hook, 5_000)),
            ..Hooks::default()
        };
        let mut cache = Cache::with_hooks(capacity, Box::new(hooks));
        let mut served = 0;
        for &(k, s) in &trace {
            cache.access(k, s);
            served += 1;
            assert!(cache.bytes() <= 3_000);
        }
        assert_eq!(served, trace.len());
        let failure = cache.hook_failure().cloned().expect(hook);
        assert_eq!(failure.hook, hook);
        assert!(failure.to_string().contains("policy.lua:3"), "{failure}");
        // From then on the cache is an LRU: emptied, it serves like a fresh built-in one.
        cache.clear();
        let mut reference = Cache::new(Algorithm::Lru, capacity);
        assert_eq!(
            hits(&mut cache, &trace),
            hits(&mut reference, &trace),
            "{hook}"
        );
    }
}

#[test]
fn an_out_of_range_choice_is_a_failure_not_a_panic() {
    let hooks = Hooks {
        defined: HookSet {
            priority: true,
            evict: true,
            ..HookSet::default()
        },
        priority: Some(|obj| Placement {
            priority: 0.0,
            queue: (obj.id % 2) as u8,
        }),
        evict: Some(|c| c.len() + 3),
        ..Hooks::default()
    };
    let mut cache = Cache::with_hooks(Capacity::objects(2), Box::new(hooks));
    for key in 0..10 {
        cache.access(key, 1);
    }
    assert_eq!(cache.len(), 2);
    let failure = cache.hook_failure().expect("a bad choice is reported");
    assert_eq!(failure.hook, "evict");
    assert!(failure.message.contains("candidate 6 of 2"), "{failure}");
}

/// A priority that grows with each access for the first requests (the queue stays a list),
/// then jumps back and forth (the queue turns into a heap), then grows again after the
/// cache was emptied by a clear: the victims are the lowest (priority, insert) every time.
#[test]
fn priorities_in_order_and_out_of_order_evict_the_lowest() {
    fn priority(obj: &HookObject) -> Placement {
        let t = obj.last_access;
        let priority = if (5_000..12_000).contains(&t) {
            ((t * 7919) % 1_000) as f64 + (obj.id % 5) as f64
        } else {
            t as f64
        };
        Placement { priority, queue: 0 }
    }
    let hooks = Hooks {
        defined: HookSet {
            priority: true,
            ..HookSet::default()
        },
        priority: Some(priority),
        ..Hooks::default()
    };
    let capacity = 50;
    let mut cache = Cache::with_hooks(Capacity::objects(capacity), Box::new(hooks));
    // The model: (key, priority, inserted), the lowest evicted.
    let mut model: Vec<(u64, f64, u64)> = Vec::new();
    for (t, &(key, _)) in trace().iter().enumerate() {
        let now = t as u64 + 1;
        let hit = match model.iter_mut().find(|e| e.0 == key) {
            Some(e) => {
                let obj = HookObject {
                    id: key,
                    last_access: now,
                    ..HookObject::default()
                };
                e.1 = priority(&obj).priority;
                true
            }
            None => {
                if model.len() == capacity as usize {
                    let low = (0..model.len())
                        .min_by(|&a, &b| {
                            (model[a].1, model[a].2)
                                .partial_cmp(&(model[b].1, model[b].2))
                                .unwrap()
                        })
                        .unwrap();
                    model.swap_remove(low);
                }
                let obj = HookObject {
                    id: key,
                    last_access: now,
                    inserted: now,
                    ..HookObject::default()
                };
                model.push((key, priority(&obj).priority, now));
                false
            }
        };
        assert_eq!(cache.access(key, 1), hit, "request {t}, key {key}");
    }
    assert!(cache.hook_failure().is_none());
}
