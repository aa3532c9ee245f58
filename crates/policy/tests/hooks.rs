//! Per-request hooks in Lua ([`policy::ScriptHooks`]) driving the cache: the shipped hook
//! policies (`policies/hooks/`) agree exactly with the algorithm they implement, and every way
//! a hook can misbehave falls back to LRU with a message, never a panic.

use cache::{Algorithm, Cache, Capacity};
use policy::{Interrupt, Limits, Params, ScriptHooks};
use std::path::Path;

fn repo_file(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn hooks_of(source: &str, params: &Params, limits: &Limits) -> ScriptHooks {
    ScriptHooks::compile("t", "@t.lua", source, params, limits, Interrupt::default())
        .expect("compiles")
        .expect("defines hooks")
}

fn shipped(name: &str, params: &Params) -> ScriptHooks {
    ScriptHooks::from_file(&repo_file(name), params, &Limits::default())
        .expect("compiles")
        .expect("defines hooks")
}

/// 30,000 requests over about 600 keys, skewed towards low ids, sizes 1..=200.
fn trace() -> Vec<(u64, u32)> {
    let mut x = 42u64;
    (0..30_000)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = x >> 33;
            let key = (r % 600) * (r % 5 + 1) / 5;
            (key, (key * 37 % 200 + 1) as u32)
        })
        .collect()
}

fn hits(cache: &mut Cache, trace: &[(u64, u32)]) -> Vec<bool> {
    trace.iter().map(|&(k, s)| cache.access(k, s)).collect()
}

fn misses(hits: &[bool]) -> usize {
    hits.iter().filter(|h| !**h).count()
}

#[test]
fn shipped_lru_hooks_equal_the_builtin_lru() {
    let trace = trace();
    for capacity in [Capacity::bytes(5_000), Capacity::objects(80)] {
        let builtin = hits(&mut Cache::new(Algorithm::Lru, capacity), &trace);
        let hooks = shipped("policies/hooks/lru.lua", &Params::new());
        let mut scripted = Cache::with_hooks(capacity, Box::new(hooks));
        let got = hits(&mut scripted, &trace);
        assert!(scripted.hook_failure().is_none());
        assert_eq!(misses(&got), misses(&builtin));
        assert_eq!(got, builtin, "{capacity:?}");
    }
}

#[test]
fn shipped_size_admission_equals_lru_without_the_large_objects() {
    let trace = trace();
    let capacity = Capacity::bytes(5_000);
    let mut builtin = Cache::new(Algorithm::Lru, capacity);
    let expected: Vec<bool> = trace
        .iter()
        .map(|&(k, s)| {
            if s > 120 {
                builtin.get(k)
            } else {
                builtin.access(k, s)
            }
        })
        .collect();
    let params: Params = [policy::parse_param("max_size=120").unwrap()].into();
    let hooks = shipped("policies/hooks/size_admission.lua", &params);
    let mut scripted = Cache::with_hooks(capacity, Box::new(hooks));
    assert_eq!(hits(&mut scripted, &trace), expected);
    assert!(scripted.hook_failure().is_none());
    assert!(scripted.iter().all(|(_, size)| size <= 120));
}

/// ARC as the paper gives it (Megiddo and Modha, FAST '03, Fig. 4), in objects, with the
/// integer adaptation steps the Lua version uses. Lists hold the LRU end at index 0.
struct ReferenceArc {
    c: usize,
    p: usize,
    t1: Vec<u64>,
    t2: Vec<u64>,
    b1: Vec<u64>,
    b2: Vec<u64>,
}

fn take(list: &mut Vec<u64>, x: u64) -> bool {
    match list.iter().position(|&y| y == x) {
        Some(i) => {
            list.remove(i);
            true
        }
        None => false,
    }
}

impl ReferenceArc {
    fn new(c: usize) -> Self {
        ReferenceArc {
            c,
            p: 0,
            t1: vec![],
            t2: vec![],
            b1: vec![],
            b2: vec![],
        }
    }

    fn replace(&mut self, in_b2: bool) {
        let t1 = self.t1.len();
        if t1 >= 1 && (t1 > self.p || (in_b2 && t1 == self.p) || self.t2.is_empty()) {
            let y = self.t1.remove(0);
            self.b1.push(y);
        } else {
            let y = self.t2.remove(0);
            self.b2.push(y);
        }
    }

    fn access(&mut self, x: u64) -> bool {
        if take(&mut self.t1, x) || take(&mut self.t2, x) {
            self.t2.push(x);
            return true;
        }
        if take(&mut self.b1, x) {
            let step = (self.b2.len() / (self.b1.len() + 1)).max(1);
            self.p = (self.p + step).min(self.c);
            self.replace(false);
            self.t2.push(x);
            return false;
        }
        if take(&mut self.b2, x) {
            let step = (self.b1.len() / (self.b2.len() + 1)).max(1);
            self.p = self.p.saturating_sub(step);
            self.replace(true);
            self.t2.push(x);
            return false;
        }
        let (t1, t2, b1, b2) = (self.t1.len(), self.t2.len(), self.b1.len(), self.b2.len());
        if t1 + b1 == self.c {
            if t1 < self.c {
                self.b1.remove(0);
                self.replace(false);
            } else {
                self.t1.remove(0);
            }
        } else if t1 + t2 + b1 + b2 >= self.c {
            if t1 + t2 + b1 + b2 == 2 * self.c {
                self.b2.remove(0);
            }
            self.replace(false);
        }
        self.t1.push(x);
        false
    }
}

#[test]
fn shipped_arc_hooks_equal_the_reference_arc() {
    let trace = trace();
    for c in [10, 64, 150] {
        let mut reference = ReferenceArc::new(c);
        let expected: Vec<bool> = trace.iter().map(|&(k, _)| reference.access(k)).collect();
        let hooks = shipped("policies/hooks/arc.lua", &Params::new());
        let mut scripted = Cache::with_hooks(Capacity::objects(c as u64), Box::new(hooks));
        let got: Vec<bool> = trace.iter().map(|&(k, _)| scripted.access(k, 1)).collect();
        assert!(
            scripted.hook_failure().is_none(),
            "{:?}",
            scripted.hook_failure()
        );
        let first = got.iter().zip(&expected).position(|(a, b)| a != b);
        assert_eq!(first, None, "c={c}: first differing request");
        // ARC is not LRU on this trace: the test can tell them apart.
        let lru = hits(
            &mut Cache::new(Algorithm::Lru, Capacity::objects(c as u64)),
            &trace.iter().map(|&(k, _)| (k, 1)).collect::<Vec<_>>(),
        );
        assert_ne!(misses(&lru), misses(&got), "c={c}");
    }
}

/// Runs `source` as hooks over the trace; returns the failure it reported.
fn failure_of(source: &str, limits: &Limits) -> cache::hooks::HookFailure {
    let trace = trace();
    let hooks = hooks_of(source, &Params::new(), limits);
    let capacity = Capacity::objects(50);
    let mut cache = Cache::with_hooks(capacity, Box::new(hooks));
    for &(k, _) in &trace {
        cache.access(k, 1);
        assert!(cache.len() <= 50);
    }
    let failure = cache.hook_failure().cloned().expect("the hook failed");
    // From the failure on the cache is LRU: emptied, it serves like a fresh built-in one.
    cache.clear();
    let mut reference = Cache::new(Algorithm::Lru, capacity);
    let unit: Vec<(u64, u32)> = trace.iter().map(|&(k, _)| (k, 1)).collect();
    assert_eq!(hits(&mut cache, &unit), hits(&mut reference, &unit));
    failure
}

#[test]
fn a_runtime_error_in_any_hook_falls_back_to_lru() {
    let base = "n = 0\nfunction priority(o) return o.inserted end\n";
    for hook in ["admit", "on_hit", "on_insert", "on_evict", "priority"] {
        let body = if hook == "admit" {
            "return true"
        } else if hook == "priority" {
            "return o.inserted"
        } else {
            ""
        };
        let source = format!(
            "{base}function {hook}(o)\n  n = n + 1\n  if n > 500 then error('broken') end\n  {body}\nend\n"
        );
        let failure = failure_of(&source, &Limits::default());
        assert_eq!(failure.hook, hook);
        assert!(
            failure.message.contains("t.lua:5: broken"),
            "{hook}: {failure}"
        );
    }
}

#[test]
fn a_spent_budget_or_memory_limit_falls_back_to_lru() {
    let limits = Limits {
        instructions: 200_000,
        memory_bytes: 4 << 20,
        ..Limits::default()
    };
    let spin =
        "n = 0\nfunction on_hit(o)\n  n = n + 1\n  if n > 300 then while true do end end\nend\n";
    let failure = failure_of(spin, &limits);
    assert_eq!(failure.hook, "on_hit");
    assert!(
        failure.message.contains("instruction budget of 200000"),
        "{failure}"
    );

    let hog = "t = {}\nfunction on_insert(o)\n  for i = 1, 100000 do t[#t + 1] = {i} end\nend\n";
    let failure = failure_of(
        hog,
        &Limits {
            memory_bytes: 4 << 20,
            ..Limits::default()
        },
    );
    assert_eq!(failure.hook, "on_insert");
    assert!(failure.message.contains("memory limit"), "{failure}");
}

/// Hooks that run without end, each in another way: the budget stops every one, whether the
/// hook's own code loops (and so keeps the count hook) or is straight-line code that reaches
/// a loop through a metamethod (which a metatable set from Lua, at the top level or later in
/// a hook, must put back under the count hook).
#[test]
fn every_way_to_run_without_end_is_stopped_by_the_budget() {
    let limits = Limits {
        instructions: 200_000,
        ..Limits::default()
    };
    let spin = "function() while true do end end";
    let cases = [
        "function on_hit(o) while true do end end".to_string(),
        "function on_hit(o) repeat until false end".to_string(),
        "function on_hit(o) for i = 1, math.huge do end end".to_string(),
        "function on_hit(o) for _ in function() return 1 end do end end".to_string(),
        "function on_hit(o) ::again:: goto again end".to_string(),
        // A tail call: no stack grows, only the budget ends it.
        "function on_hit(o) return on_hit(o) end".to_string(),
        format!("t = {{f = {spin}}}\nfunction on_hit(o) t.f() end"),
        format!("string.spin = {spin}\nfunction on_hit(o) ('x'):spin() end"),
        // Straight-line hooks reaching Lua through a metamethod set at the top level.
        format!("m = setmetatable({{}}, {{__index = {spin}}})\nfunction on_hit(o) return m.x end"),
        format!("m = setmetatable({{}}, {{__newindex = {spin}}})\nfunction on_hit(o) m.x = 1 end"),
        format!("m = setmetatable({{}}, {{__len = {spin}}})\nfunction on_hit(o) return #m end"),
        format!("m = setmetatable({{}}, {{__lt = {spin}}})\nfunction on_hit(o) return m < m end"),
        format!("m = setmetatable({{}}, {{__concat = {spin}}})\nfunction on_hit(o) return m .. 'x' end"),
        // A string's arithmetic metamethod (C) handing over to the table's (Lua).
        format!("m = setmetatable({{}}, {{__add = {spin}}})\nfunction on_hit(o) return '1' + m end"),
        format!("m = setmetatable({{}}, {{__close = {spin}}})\nfunction on_hit(o) local c <close> = m end"),
        format!("m = setmetatable({{}}, {{__index = {{}}}})\ngetmetatable(m).__index = {spin}\nfunction on_hit(o) return m.x end"),
        // The metatable set later, by a hook that calls (and so runs under the count hook).
        format!("function on_insert(o) m = m or setmetatable({{}}, {{__index = {spin}}}) end\nfunction on_hit(o) return m.x end"),
        // The global table itself given a metamethod.
        format!("setmetatable(_G, {{__index = {spin}}})\nfunction on_hit(o) return undefined_name end"),
    ];
    for source in &cases {
        let failure = failure_of(source, &limits);
        assert_eq!(failure.hook, "on_hit", "{source}");
        assert!(
            failure.message.contains("instruction budget of 200000"),
            "{source}: {failure}"
        );
    }
    // Neither a finalizer nor a coroutine is there to run outside the budget.
    let gc = "setmetatable({}, {__gc = function() while true do end end})\n\
              function on_hit(o) end";
    let refused = ScriptHooks::compile(
        "t",
        "@t.lua",
        gc,
        &Params::new(),
        &limits,
        Interrupt::default(),
    );
    assert!(
        refused
            .err()
            .is_some_and(|e| e.to_string().contains("__gc finalizers are not allowed")),
        "a __gc metatable is refused at load"
    );
    let coroutine = format!("function on_hit(o) coroutine.wrap({spin})() end");
    let failure = failure_of(&coroutine, &limits);
    assert!(failure.message.contains("global 'coroutine'"), "{failure}");
}

/// A straight-line hook over a state with no metatable from Lua runs without the count
/// hook, and still answers the same (the shipped LRU is such a hook).
#[test]
fn straight_line_hooks_decide_as_before() {
    let trace = trace();
    for source in [
        "function priority(o) return o.last_access end",
        // Same order, but a call in the hook keeps the count hook on.
        "function priority(o) return math.floor(o.last_access) end",
    ] {
        let hooks = hooks_of(source, &Params::new(), &Limits::default());
        let mut cache = Cache::with_hooks(Capacity::objects(80), Box::new(hooks));
        let mut reference = Cache::new(Algorithm::Lru, Capacity::objects(80));
        assert_eq!(
            hits(&mut cache, &trace),
            hits(&mut reference, &trace),
            "{source}"
        );
        assert!(cache.hook_failure().is_none(), "{source}");
    }
}

#[test]
fn bad_results_fall_back_to_lru_with_the_reason() {
    let cases = [
        ("function admit(o) return nil end", "admit", "must return true or false"),
        ("function priority(o) return 'soon' end", "priority", "must return a number"),
        ("function priority(o) return 0/0 end", "priority", "not NaN"),
        ("function priority(o) return 1, 9 end", "priority", "queue number 1..4"),
        (
            "function priority(o) return o.id, o.id % 2 + 1 end\nfunction evict(a, b) return {} end",
            "evict",
            "one of its 2 candidates",
        ),
        ("function on_hit(o) o[2] = 'x' end", "on_hit", "obj[2] must be a number"),
    ];
    for (source, hook, text) in cases {
        let failure = failure_of(source, &Limits::default());
        assert_eq!(failure.hook, hook, "{source}");
        assert!(failure.message.contains(text), "{source}: {failure}");
    }
}

#[test]
fn user_numbers_persist_per_object_and_lfu_can_be_written() {
    // LFU by a counter the hooks keep in obj[1] (ties: earliest insert), against a model.
    let source = "function on_hit(o) o[1] = o[1] + 1 end\n\
                  function priority(o) return o[1] end\n";
    let hooks = hooks_of(source, &Params::new(), &Limits::default());
    let mut cache = Cache::with_hooks(Capacity::objects(30), Box::new(hooks));
    let mut model: Vec<(u64, u64, u64)> = Vec::new(); // (key, hits, inserted)
    for (t, &(k, _)) in trace().iter().enumerate() {
        let expected = match model.iter_mut().find(|e| e.0 == k) {
            Some(e) => {
                e.1 += 1;
                true
            }
            None => {
                if model.len() == 30 {
                    let victim = (0..model.len())
                        .min_by_key(|&i| (model[i].1, model[i].2))
                        .unwrap();
                    model.remove(victim);
                }
                model.push((k, 0, t as u64));
                false
            }
        };
        assert_eq!(cache.access(k, 1), expected, "request {t}");
    }
    assert!(cache.hook_failure().is_none());
}

#[test]
fn a_hooks_only_policy_loads_in_the_engine_without_tick_callbacks() {
    let mut engine = policy::PolicyEngine::new(Limits::default());
    engine
        .load_file(&repo_file("policies/hooks/arc.lua"))
        .expect("a hooks-only policy is a policy");
    let err = engine.load("none", "x = 1").unwrap_err();
    assert!(err.to_string().contains("per-request hook"), "{err}");
}

#[test]
fn fields_named_only_in_comments_are_not_stored_but_still_answered() {
    // `last_access` and `hits` appear only in comments (and as keys built at run time): the
    // host stores neither in `obj` at each call, and the metatable answers the read as the
    // record holds it, so this is still LRU.
    let source = "-- LRU: priority is obj.last_access; obj.hits is not used\n\
                  local field = 'last_' .. 'access'\n\
                  function priority(o) return o[field] end\n";
    let trace = trace();
    let capacity = Capacity::objects(80);
    let builtin = hits(&mut Cache::new(Algorithm::Lru, capacity), &trace);
    let hooks = hooks_of(source, &Params::new(), &Limits::default());
    let mut scripted = Cache::with_hooks(capacity, Box::new(hooks));
    assert_eq!(hits(&mut scripted, &trace), builtin);
    assert!(scripted.hook_failure().is_none());

    // A write to such a field is refused like any host field's (it was let through, and
    // left in the reused table for the next object, when the comment made it stored).
    let source = "-- obj.hits\nfunction on_hit(o) o['hi' .. 'ts'] = 0 end\n";
    let hooks = hooks_of(source, &Params::new(), &Limits::default());
    let mut scripted = Cache::with_hooks(capacity, Box::new(hooks));
    hits(&mut scripted, &trace);
    let failure = scripted.hook_failure().expect("the write is refused");
    assert!(
        failure.message.contains("fields are the host's"),
        "{failure}"
    );
}

/// A `priority` that only returns fields of `obj` or its user numbers is read by the host
/// without running the VM: the same decisions and the same failures as a hook that computes
/// the same numbers (`+ 0` makes the VM run it).
#[test]
fn projection_priorities_decide_and_fail_as_run_hooks() {
    let trace = trace();
    let decide = |source: &str| {
        let hooks = hooks_of(source, &Params::new(), &Limits::default());
        let mut cache = Cache::with_hooks(Capacity::objects(40), Box::new(hooks));
        let got = hits(&mut cache, &trace);
        (got, cache.hook_failure().map(|f| f.to_string()))
    };
    for (read, run) in [
        // LFU by a counter; LRU and ARC's shapes; a user number set once.
        (
            "function on_hit(o) o[1] = o[1] + 1 end\nfunction priority(o) return o[1] end",
            "function on_hit(o) o[1] = o[1] + 1 end\nfunction priority(o) return o[1] + 0 end",
        ),
        (
            "function priority(o) return o.hits end",
            "function priority(o) return o.hits + 0 end",
        ),
        (
            "function on_insert(o) o[2] = o.id % 2 + 1 end\n\
             function priority(o) return o.last_access, o[2] end",
            "function on_insert(o) o[2] = o.id % 2 + 1 end\n\
             function priority(o) return o.last_access, o[2] + 0 end",
        ),
        // A float user number as an integer priority; a queue given as 2.0.
        (
            "function on_insert(o) o[1] = o.id / 4 o[2] = 2.0 end\n\
             function priority(o) return o[1], o[2] end",
            "function on_insert(o) o[1] = o.id / 4 o[2] = 2.0 end\n\
             function priority(o) return o[1] + 0, o[2] + 0 end",
        ),
        // A user number put into the reused table with `rawset` is what the hook reads.
        (
            "function on_insert(o) rawset(o, 1, o.inserted) end\n\
             function priority(o) return o[1] end",
            "function on_insert(o) rawset(o, 1, o.inserted) end\n\
             function priority(o) return o[1] + 0 end",
        ),
        // The same failures: NaN, a queue out of range (the user numbers start at 0), a
        // queue that is not an integer.
        (
            "function on_hit(o) o[1] = 0/0 end\nfunction priority(o) return o[1] end",
            "function on_hit(o) o[1] = 0/0 end\nfunction priority(o) return o[1] + 0 end",
        ),
        (
            "function priority(o) return o.size, o[3] end",
            "function priority(o) return o.size, o[3] + 0 end",
        ),
        (
            "function on_insert(o) o[3] = 1.5 end\nfunction priority(o) return o.size, o[3] end",
            "function on_insert(o) o[3] = 1.5 end\nfunction priority(o) return o.size, o[3] + 0 end",
        ),
    ] {
        assert_eq!(decide(read), decide(run), "{read}");
    }
    let (_, failure) =
        decide("function on_hit(o) o[1] = 0/0 end\nfunction priority(o) return o[1] end");
    assert!(failure
        .unwrap()
        .contains("priority(): bad result: priority() must return a number, not NaN"));
    let (_, failure) = decide("function priority(o) return o.size, o[3] end");
    assert!(failure.unwrap().contains("queue number 1..4"));
}
