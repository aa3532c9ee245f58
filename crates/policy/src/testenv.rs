//! `mantle policy test`: run one tick of a policy on metrics read from JSON, so policy authors
//! can unit-test a policy without a trace or a server.
//!
//! The environment file (all fields optional):
//! ```json
//! {
//!   "whoami": 0,
//!   "now": 120.0,
//!   "tick": 1,
//!   "servers": [{"cachesize": 150000, "capacity": null, "reqrate": 900}],
//!   "params": {"n": 100000},
//!   "timeseries": [[119.5, 0], [119.7, 1], [119.9, 0]],
//!   "slots": [{"first": 42, "last": 42, "load": 300.0}],
//!   "sequencers": [{"log": "orders", "slot": 42, "rate": 250.0, "positions": 250.0, "load": 300.0}]
//! }
//! ```
//! `servers` entries take the metric names of [`Metrics`] (`capacity: null` = unlimited);
//! `timeseries` is `[timestamp, keyid]` pairs, oldest first; `slots` is what `slots()` returns
//! (at most [`SlotLoad::MAX`] entries); `sequencers` what `sequencers()` returns (at most
//! [`SequencerLoad::MAX`]).

use serde::{Deserialize, Serialize};

use crate::decision::Decision;
use crate::engine::PolicyEngine;
use crate::env::TickInput;
use crate::error::PolicyId;
use crate::host::{LogRecord, SequencerLoad, SlotLoad};
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::series::VecSeries;
use crate::value::{Params, Scalar};

/// The JSON environment of one test tick.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TestEnv {
    pub whoami: usize,
    pub now: f64,
    pub tick: u64,
    pub servers: Vec<Metrics>,
    pub params: Params,
    pub timeseries: Vec<(f64, u64)>,
    pub slots: Vec<SlotLoad>,
    pub sequencers: Vec<SequencerLoad>,
}

impl Default for TestEnv {
    fn default() -> TestEnv {
        TestEnv {
            whoami: 0,
            now: 0.0,
            tick: 1,
            servers: vec![Metrics::default()],
            params: Params::new(),
            timeseries: Vec::new(),
            slots: Vec::new(),
            sequencers: Vec::new(),
        }
    }
}

impl TestEnv {
    /// Parses the environment; errors name the file, line and column.
    pub fn from_json(file: &str, text: &str) -> Result<TestEnv, String> {
        let env: TestEnv = serde_json::from_str(text)
            .map_err(|e| format!("{file}:{}:{}: {e}", e.line(), e.column()))?;
        if env.slots.len() > SlotLoad::MAX {
            return Err(format!(
                "{file}: `slots` has {} entries; slots() holds at most {}",
                env.slots.len(),
                SlotLoad::MAX
            ));
        }
        if env.sequencers.len() > SequencerLoad::MAX {
            return Err(format!(
                "{file}: `sequencers` has {} entries; sequencers() holds at most {}",
                env.sequencers.len(),
                SequencerLoad::MAX
            ));
        }
        Ok(env)
    }
}

/// What `mantle policy test` prints.
#[derive(Debug, Clone, Serialize)]
pub struct TestReport {
    /// `name@version`.
    pub policy: String,
    pub callbacks: Vec<String>,
    pub decision: Decision,
    /// The tick's error, if it failed (then the decision takes no action).
    pub error: Option<String>,
    /// Lines the policy logged during load and the tick.
    pub logs: Vec<LogRecord>,
}

/// Loads the policy in `file` (source `source`), applies `extra_params` over the
/// environment's, and runs one tick. `Err` only when the policy does not load.
pub fn run_test(
    file: &str,
    source: &str,
    mut env: TestEnv,
    extra_params: &[(String, Scalar)],
    limits: &Limits,
) -> Result<TestReport, String> {
    let mut engine = PolicyEngine::new(*limits);
    let name = std::path::Path::new(file)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "policy".into());
    let id = engine
        .load_version(PolicyId::new(&name, 1), &format!("@{file}"), source)
        .map_err(|e| e.to_string())?;
    if env.servers.is_empty() {
        env.servers.push(Metrics::default());
    }
    for (k, v) in extra_params {
        env.params.insert(k.clone(), v.clone());
    }
    let series = VecSeries::new(env.timeseries);
    engine.set_slots(env.slots);
    engine.set_sequencers(env.sequencers);
    let outcome = engine.tick(&TickInput {
        now: env.now,
        tick: env.tick,
        whoami: env.whoami,
        servers: &env.servers,
        params: &env.params,
        timeseries: &series,
    });
    let (logs, _) = engine.drain_logs();
    Ok(TestReport {
        policy: id.to_string(),
        callbacks: engine.callbacks().iter().map(|s| s.to_string()).collect(),
        decision: outcome.decision,
        error: outcome.error.map(|e| e.to_string()),
        logs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_one_tick_and_reports_the_decision_as_json() {
        let env = TestEnv::from_json(
            "env.json",
            r#"{"servers": [{"cachesize": 150}], "params": {"n": 100}, "timeseries": [[1, 0]]}"#,
        )
        .unwrap();
        let src = "function when() return servers[whoami].cachesize > params.n end\n\
                   function howmuch() return servers[whoami].cachesize - params.n end";
        let report = run_test("p.lua", src, env, &[], &Limits::default()).unwrap();
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["policy"], "p@1");
        assert_eq!(json["decision"]["action"]["kind"], "evict");
        assert_eq!(json["decision"]["action"]["n"], 50);
        assert_eq!(json["decision"]["when"], true);
        assert!(json["error"].is_null());

        let env = TestEnv::from_json("env.json", r#"{"servers": [{"cachesize": 150}]}"#).unwrap();
        let over = [("n".to_string(), Scalar::Number(10.0))];
        let report = run_test("p.lua", src, env, &over, &Limits::default()).unwrap();
        assert_eq!(
            serde_json::to_value(report.decision.action).unwrap()["n"],
            140
        );
    }

    #[test]
    fn slots_reach_the_policy_and_howmuch_may_return_them() {
        let env = TestEnv::from_json(
            "env.json",
            r#"{"servers": [{"load": 90}, {"load": 10}],
                "slots": [{"first": 7, "last": 7, "load": 60}, {"first": 3, "last": 4, "load": 30}]}"#,
        )
        .unwrap();
        let src = "function when() return #slots() == 2 and slots()[1].load == 60 end\n\
                   function howmuch() local s = slots() return {s[2], s[1]} end\n\
                   function where() return {[1] = 40} end";
        let report = run_test("p.lua", src, env, &[], &Limits::default()).unwrap();
        assert!(report.error.is_none(), "{:?}", report.error);
        assert_eq!(report.decision.units, vec![(3, 4), (7, 7)]);
        assert_eq!(report.decision.targets, vec![(1, 40.0)]);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["decision"]["units"][0][1], 4);

        // Without a cluster, slots() is an empty table.
        let src = "function when() return next(slots()) == nil end";
        let report = run_test("p.lua", src, TestEnv::default(), &[], &Limits::default()).unwrap();
        assert_eq!(report.decision.when, Some(true));

        let many: Vec<String> = (0..65)
            .map(|s| format!(r#"{{"first": {s}, "last": {s}, "load": 1}}"#))
            .collect();
        let err = TestEnv::from_json("e.json", &format!(r#"{{"slots": [{}]}}"#, many.join(",")))
            .unwrap_err();
        assert!(err.contains("at most 64"), "{err}");
    }

    #[test]
    fn sequencers_reach_the_policy_and_their_slot_may_be_the_unit() {
        let env = TestEnv::from_json(
            "env.json",
            r#"{"servers": [{"load": 900}, {"load": 0}],
                "sequencers": [{"log": "orders", "slot": 866, "rate": 600, "positions": 6000, "load": 640},
                               {"log": "audit", "slot": 12, "rate": 300, "positions": 300}]}"#,
        )
        .unwrap();
        let src = "function when() local s = sequencers()\n\
                     return #s == 2 and s[1].log == 'orders' and s[1].positions == 6000\n\
                       and s[2].load == 0 end\n\
                   function howmuch() return {sequencers()[1].slot} end\n\
                   function where() return {[1] = sequencers()[1].load} end";
        let report = run_test("p.lua", src, env, &[], &Limits::default()).unwrap();
        assert!(report.error.is_none(), "{:?}", report.error);
        assert_eq!(report.decision.when, Some(true));
        assert_eq!(report.decision.units, vec![(866, 866)]);
        assert_eq!(report.decision.targets, vec![(1, 640.0)]);

        // Without a cluster, sequencers() is an empty table.
        let src = "function when() return next(sequencers()) == nil end";
        let report = run_test("p.lua", src, TestEnv::default(), &[], &Limits::default()).unwrap();
        assert_eq!(report.decision.when, Some(true));

        let many: Vec<String> = (0..65)
            .map(|s| format!(r#"{{"log": "l{s}", "slot": {s}, "rate": 1, "positions": 1}}"#))
            .collect();
        let err = TestEnv::from_json(
            "e.json",
            &format!(r#"{{"sequencers": [{}]}}"#, many.join(",")),
        )
        .unwrap_err();
        assert!(err.contains("sequencers() holds at most 64"), "{err}");
        let err = TestEnv::from_json("e.json", r#"{"sequencers": [{"log": "a", "slots": 1}]}"#)
            .unwrap_err();
        assert!(err.contains("slots"), "{err}");
    }

    #[test]
    fn json_errors_name_the_file_and_position() {
        let err =
            TestEnv::from_json("env.json", "{\n \"servers\": [{\"cachesise\": 1}]}").unwrap_err();
        assert!(err.starts_with("env.json:2:"), "{err}");
        assert!(err.contains("cachesise"), "{err}");
    }

    #[test]
    fn a_failing_tick_is_reported_not_raised() {
        let src = "function when() return nil + 1 end";
        let report = run_test("bad.lua", src, TestEnv::default(), &[], &Limits::default()).unwrap();
        assert!(report.error.unwrap().contains("bad.lua:1:"));
        assert!(run_test("x.lua", "x = ", TestEnv::default(), &[], &Limits::default()).is_err());
    }
}
