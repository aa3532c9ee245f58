//! Helpers shared by the integration tests: build an engine around a policy source and run
//! ticks on given metrics.

#![allow(dead_code)]

use policy::{
    Limits, Metrics, Params, PolicyEngine, TickInput, TickOutcome, TimeSeries, VecSeries,
};

pub fn engine(name: &str, source: &str) -> PolicyEngine {
    engine_with(Limits::default(), name, source)
}

pub fn engine_with(limits: Limits, name: &str, source: &str) -> PolicyEngine {
    let mut e = PolicyEngine::new(limits);
    e.load(name, source)
        .unwrap_or_else(|err| panic!("{name} failed to load: {err}"));
    e
}

pub fn shipped(file: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../policies/");
    std::fs::read_to_string(format!("{path}{file}")).unwrap()
}

pub fn metrics(cachesize: f64) -> Metrics {
    Metrics {
        cachesize,
        ..Metrics::default()
    }
}

pub fn params(pairs: &[(&str, &str)]) -> Params {
    pairs
        .iter()
        .map(|(k, v)| policy::parse_param(&format!("{k}={v}")).unwrap())
        .collect()
}

pub fn tick_on(
    engine: &mut PolicyEngine,
    servers: &[Metrics],
    params: &Params,
    series: &dyn TimeSeries,
) -> TickOutcome {
    tick_at(engine, 0.0, servers, params, series)
}

pub fn tick_at(
    engine: &mut PolicyEngine,
    now: f64,
    servers: &[Metrics],
    params: &Params,
    series: &dyn TimeSeries,
) -> TickOutcome {
    let input = TickInput {
        now,
        tick: engine.stats().ticks + 1,
        whoami: 0,
        servers,
        params,
        timeseries: series,
    };
    engine.tick(&input)
}

pub fn tick(engine: &mut PolicyEngine, cachesize: f64) -> TickOutcome {
    tick_on(
        engine,
        &[metrics(cachesize)],
        &Params::new(),
        &VecSeries::default(),
    )
}
