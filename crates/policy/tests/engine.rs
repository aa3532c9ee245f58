//! Engine behaviour seen by a host: the environment, state, hot swap, versions, fallback,
//! logging and both policy dialects.

mod common;

use common::*;
use policy::{
    Action, LoadError, LogLevel, Metrics, Params, PolicyEngine, Scalar, StateValue, VecSeries,
};

#[test]
fn the_environment_has_every_documented_name() {
    let src = r#"
function when()
  assert(whoami == 1, "whoami")
  assert(server == servers and mds == servers, "aliases")
  assert(nservers == 2, "nservers")
  assert(servers[0].cachesize == 10 and servers[1].cachesize == 20, "0-based servers")
  local me = servers[whoami]
  assert(me.capacity == 500 and servers[0].capacity == math.huge, "capacity")
  for _, k in ipairs({"cachebytes","hits","misses","gets","puts","reqrate","getrate","putrate",
      "missrate","hitrate","backend_rate","backend_queue","evictions","load"}) do
    assert(type(me[k]) == "number", k)
  end
  assert(me["auth.meta_load"] == 7 and me["all.meta_load"] == 7 and me.req_rate == 3, "ceph")
  assert(me.queue_len == 4, "queue_len")
  assert(me.cpu == 0.5 and me.cpu_load_avg == 0.5 and me.mem == 1024, "serve metrics")
  assert(servers[0].cpu == nil, "cpu absent in replay")
  assert(now == 12.5 and tick == 1, "time")
  assert(params.n == 100 and math.type(params.n) == "integer", "numeric param")
  assert(params.f == 0.25 and params.mode == "lru" and params.on == true, "params")
  local d = timeseries()
  assert(d:size() == 3, "size")
  local ts, id = d:get(1)
  assert(ts == 1.5 and id == 0, "oldest first")
  ts, id = d:get(3)
  assert(ts == 3.5 and id == 2, "newest last")
  assert(d:get(0) == nil and d:get(4) == nil, "out of range is nil")
  return true
end
"#;
    let mut e = engine("env", src);
    let servers = [
        Metrics {
            cachesize: 10.0,
            ..Metrics::default()
        },
        Metrics {
            cachesize: 20.0,
            capacity: 500.0,
            load: 7.0,
            reqrate: 3.0,
            backend_queue: 4.0,
            cpu: Some(0.5),
            mem: Some(1024.0),
            ..Metrics::default()
        },
    ];
    let p = params(&[("n", "100"), ("f", "0.25"), ("mode", "lru"), ("on", "true")]);
    let series = VecSeries::new(vec![(1.5, 0), (2.5, 1), (3.5, 2)]);
    let input = policy::TickInput {
        now: 12.5,
        tick: 1,
        whoami: 1,
        servers: &servers,
        params: &p,
        timeseries: &series,
    };
    let out = e.tick(&input);
    assert!(out.error.is_none(), "{:?}", out.error);
    assert_eq!(out.decision.when, Some(true));
    assert_eq!(
        out.decision.load, 7.0,
        "the host's load without a load() callback"
    );
}

#[test]
fn callbacks_run_in_order_and_when_false_stops_the_tick() {
    let src = r#"
calls = ""
function load() calls = "L" return servers[whoami].cachesize * 2 end
function when() calls = calls .. "W" return servers[whoami].load > 10 end
function howmuch() calls = calls .. "H" return {evict = 3} end
function where() calls = calls .. "R" assert(calls == "LWHR") return {[0] = 1.5} end
"#;
    let mut e = engine("order", src);
    let out = tick(&mut e, 4.0);
    assert_eq!(out.decision.load, 8.0);
    assert_eq!(out.decision.when, Some(false));
    assert_eq!(out.decision.action, Action::None);
    let out = tick(&mut e, 6.0);
    assert!(out.error.is_none(), "{:?}", out.error);
    assert_eq!(out.decision.action, Action::Evict(3));
    assert_eq!(out.decision.targets, vec![(0, 1.5)]);
    assert_eq!(e.callbacks(), vec!["load", "when", "howmuch", "where"]);
}

#[test]
fn globals_persist_between_ticks() {
    let mut e = engine("count", "n = 0\nfunction howmuch() n = n + 1 return n end");
    assert_eq!(tick(&mut e, 0.0).decision.action, Action::Evict(1));
    assert_eq!(tick(&mut e, 0.0).decision.action, Action::Evict(2));
}

#[test]
fn state_survives_a_reload_of_the_same_name_only() {
    let src = "function howmuch() local s = RDstate() WRState(s + 1) return {capacity = s + 1} end";
    let mut e = engine("counter", src);
    tick(&mut e, 0.0);
    tick(&mut e, 0.0);
    assert_eq!(
        e.state("counter"),
        Some(StateValue::Scalar(Scalar::Number(2.0)))
    );
    let v2 = e.replace(src).unwrap();
    assert_eq!(v2.to_string(), "counter@2");
    assert_eq!(
        tick(&mut e, 0.0).decision.action,
        Action::SetCapacity(3),
        "state carried over to version 2"
    );
    e.load("other", src).unwrap();
    assert_eq!(tick(&mut e, 0.0).decision.action, Action::SetCapacity(1));
    // A host restoring durable state.
    e.set_state("other", StateValue::Scalar(Scalar::Number(41.0)));
    assert_eq!(tick(&mut e, 0.0).decision.action, Action::SetCapacity(42));
    assert_eq!(e.states().len(), 2);
}

#[test]
fn tables_and_strings_are_valid_state() {
    let src = r#"
function when()
  local s = RDstate()
  if s == 0 then WRstate({absorbed = true, [1] = "x"}) return false end
  return s.absorbed == true and s[1] == "x"
end"#;
    let mut e = engine("tbl", src);
    assert_eq!(tick(&mut e, 0.0).decision.when, Some(false));
    assert_eq!(tick(&mut e, 0.0).decision.when, Some(true));
    let mut e = engine("nested", "function when() WRstate({{}}) return true end");
    let err = tick(&mut e, 0.0).error.unwrap();
    assert!(err.message.contains("must be flat"), "{err}");
}

#[test]
fn a_broken_replacement_is_rejected_and_the_old_version_keeps_running() {
    let mut e = engine("fixed", &shipped("fixed.lua"));
    let err = e.replace("function when(\n  return true end").unwrap_err();
    match &err {
        LoadError::Compile { line, message } => {
            assert_eq!(*line, Some(2), "{message}");
            assert!(message.starts_with("fixed.lua:2:"), "{message}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    let err = e.replace("local x = 1").unwrap_err();
    assert!(matches!(err, LoadError::NoCallbacks { .. }));
    assert!(
        err.to_string().contains("defines none of the callbacks"),
        "{err}"
    );
    let err = e.replace("error('boom')").unwrap_err();
    assert!(err.to_string().contains("boom"), "{err}");
    assert_eq!(e.active().unwrap().to_string(), "fixed@1");
    assert_eq!(e.stats().rejected_loads, 3);
    let out = tick_on(
        &mut e,
        &[metrics(150.0)],
        &params(&[("n", "100")]),
        &VecSeries::default(),
    );
    assert_eq!(out.decision.action, Action::Evict(50));
    let (logs, _) = e.drain_logs();
    assert!(logs
        .iter()
        .any(|l| l.level == LogLevel::Error && l.message.contains("fixed@1 keeps running")));
}

#[test]
fn load_file_names_the_policy_after_the_file_and_reports_io_errors() {
    let mut e = PolicyEngine::new(Default::default());
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../policies/fixed.lua");
    assert_eq!(e.load_file(path.as_ref()).unwrap().to_string(), "fixed@1");
    let err = e.load_file("/nonexistent/x.lua".as_ref()).unwrap_err();
    assert!(err
        .to_string()
        .starts_with("/nonexistent/x.lua: cannot read policy"));
    assert!(PolicyEngine::new(Default::default()).replace("x").is_err());
}

#[test]
fn repeated_failures_fall_back_to_the_previous_version_then_to_none() {
    let mut e = engine("p", "function howmuch() return 7 end");
    e.replace("function howmuch() return nil + 1 end").unwrap();
    assert_eq!(e.active().unwrap().to_string(), "p@2");
    for _ in 0..2 {
        let out = tick(&mut e, 0.0);
        assert!(out.error.is_some() && out.fallback.is_none());
    }
    let out = tick(&mut e, 0.0);
    let fb = out.fallback.expect("third failure falls back");
    assert_eq!(fb.from.to_string(), "p@2");
    assert_eq!(fb.to.unwrap().to_string(), "p@1");
    assert_eq!(tick(&mut e, 0.0).decision.action, Action::Evict(7));

    let (logs, _) = e.drain_logs();
    let errors: Vec<_> = logs.iter().filter(|l| l.level == LogLevel::Error).collect();
    assert_eq!(errors.len(), 1, "the same error is logged once: {errors:?}");
    assert_eq!(errors[0].policy, "p@2");
    assert!(
        errors[0].message.contains("p.lua:1:"),
        "{}",
        errors[0].message
    );
    assert!(logs
        .iter()
        .any(|l| l.message.contains("falling back to p@1")));

    let mut e = engine("solo", "function when() error('always') end");
    for _ in 0..3 {
        tick(&mut e, 0.0);
    }
    assert!(e.active().is_none(), "no previous version: no management");
    let out = tick(&mut e, 0.0);
    assert!(out.policy.is_none() && out.error.is_none());
    let stats = e.stats();
    assert_eq!((stats.errors, stats.fallbacks, stats.ticks), (3, 1, 3));
}

/// A host that keeps a stack of versions refills the fallback slot after a fallback, without
/// reloading the version that now runs: the next fallback lands one further down.
#[test]
fn a_refilled_fallback_slot_takes_the_next_fallback() {
    let mut e = engine("p", "function howmuch() return 1 end");
    let failing = "function when() error('always') end";
    e.replace(failing).unwrap();
    e.replace(failing).unwrap();
    assert_eq!(e.previous().unwrap().to_string(), "p@2");
    let fall = |e: &mut PolicyEngine| {
        (0..3)
            .find_map(|_| tick(e, 0.0).fallback)
            .expect("the third failure falls back")
    };
    assert_eq!(fall(&mut e).to.unwrap().to_string(), "p@2");
    assert!(
        e.previous().is_none(),
        "the engine took its fallback into service"
    );
    let id = policy::PolicyId::new("p", 1);
    e.set_fallback(id, "=p@1", "function howmuch() return 1 end")
        .unwrap();
    assert_eq!(
        e.active().unwrap().to_string(),
        "p@2",
        "the running version stays"
    );
    assert_eq!(fall(&mut e).to.unwrap().to_string(), "p@1");
    assert_eq!(tick(&mut e, 0.0).decision.action, Action::Evict(1));

    let bad = e.set_fallback(policy::PolicyId::new("p", 9), "=p@9", "return +");
    assert!(bad.is_err());
    assert!(
        e.previous().is_none(),
        "a fallback that cannot load leaves the slot empty"
    );
    assert_eq!(e.active().unwrap().to_string(), "p@1");
}

#[test]
fn log_and_bal_log_reach_the_host() {
    let mut e = engine(
        "chatty",
        "function when() log('warn', 'size', servers[whoami].cachesize) BAL_LOG(5, 'dbg') print('hi') return false end",
    );
    tick(&mut e, 3.0);
    let (logs, dropped) = e.drain_logs();
    assert_eq!(dropped, 0);
    let lines: Vec<_> = logs
        .iter()
        .map(|l| (l.policy.as_str(), l.level, l.message.as_str()))
        .collect();
    assert_eq!(
        lines,
        vec![
            ("chatty@1", LogLevel::Warn, "size 3"),
            ("chatty@1", LogLevel::Debug, "dbg"),
            ("chatty@1", LogLevel::Info, "hi"),
        ]
    );
}

#[test]
fn ceph_dialect_chunks_return_their_targets_every_tick() {
    let src = "local t = {} for r in pairs(mds) do t[r] = 0 end t[1] = mds[0].load / 4 return t";
    let mut e = engine("ceph", src);
    assert!(e.is_ceph_dialect());
    assert_eq!(e.callbacks(), vec!["chunk"]);
    let servers = [
        Metrics {
            load: 8.0,
            ..Metrics::default()
        },
        Metrics::default(),
    ];
    let out = tick_on(&mut e, &servers, &Params::new(), &VecSeries::default());
    assert!(out.error.is_none(), "{:?}", out.error);
    assert_eq!(out.decision.targets, vec![(1, 2.0)]);
    let bad = "return {[7] = 1}";
    let mut e = engine("ceph", bad);
    let err = tick(&mut e, 0.0).error.unwrap();
    assert!(err.message.contains("server index 0..0, got 7"), "{err}");
}

#[test]
fn fans_are_exposed_natively() {
    let src = r#"
function when()
  local f = timeseries():fans()
  assert(#f == 2, "two fans")
  assert(f[1].bottom == 5 and f[1].top == 7 and f[1].first == 3 and f[1].last == 4, "newest")
  assert(f[2].bottom == 1 and f[2].top == 9 and f[2].start == 0 and f[2].finish == 1, "oldest")
  return true
end"#;
    let mut e = engine("fans", src);
    let series = VecSeries::new(vec![(0.0, 9), (1.0, 1), (2.0, 7), (3.0, 5)]);
    let out = tick_on(&mut e, &[metrics(0.0)], &Params::new(), &series);
    assert!(out.error.is_none(), "{:?}", out.error);
}

#[test]
fn a_bad_whoami_is_an_input_error_that_never_causes_fallback() {
    let mut e = engine("p", "function when() return true end");
    for _ in 0..5 {
        let input = policy::TickInput {
            now: 0.0,
            tick: 1,
            whoami: 3,
            servers: &[Metrics::default()],
            params: &Params::new(),
            timeseries: &VecSeries::default(),
        };
        let out = e.tick(&input);
        assert_eq!(out.error.unwrap().kind, policy::ErrorKind::Input);
    }
    assert_eq!(e.active().unwrap().to_string(), "p@1");
}

#[test]
fn versions_carry_the_ids_the_host_gives() {
    // A host that keeps versions (the server's registry) names them; the engine keeps no
    // numbering of its own, so its outcomes, fallbacks and log lines need no translation.
    let mut e = PolicyEngine::new(Default::default());
    let id = |v| policy::PolicyId::new("p", v);
    e.load_version(id(7), "=p@7", "function howmuch() return 7 end")
        .unwrap();
    let bad = "function howmuch() return nil + 1 end";
    assert_eq!(e.load_version(id(9), "=p@9", bad).unwrap(), id(9));
    assert_eq!(e.previous(), Some(&id(7)));
    let mut last = None;
    for _ in 0..3 {
        let out = tick(&mut e, 0.0);
        assert_eq!(out.policy.as_deref(), Some(&id(9)));
        last = out.fallback;
    }
    let fallback = last.expect("the third failure falls back");
    assert_eq!((fallback.from, fallback.to), (id(9), Some(id(7))));
    let (logs, _) = e.drain_logs();
    assert!(logs.iter().all(|l| l.policy == "p@9"), "{logs:?}");
    assert!(
        logs.iter()
            .any(|l| l.message.contains("falling back to p@7")),
        "{logs:?}"
    );
    assert!(
        logs.iter().any(|l| l.message.contains("p@9:1:")),
        "{logs:?}"
    );

    // A rejected version is named by the id it was offered under, not a next number.
    let err = e
        .load_version(id(12), "=p@12", "function when(")
        .unwrap_err();
    assert!(!err.to_string().is_empty());
    let (logs, _) = e.drain_logs();
    assert!(
        logs.iter()
            .any(|l| l.policy == "p@12" && l.message.contains("p@7 keeps running")),
        "{logs:?}"
    );
}
