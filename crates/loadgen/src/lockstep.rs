//! `replay --server ADDR --tick T`: the trace replayed against a `mantle serve --tick manual` in
//! lock step with replay's tick schedule ([`sim::tick_schedule`]), so the server's policy
//! decides at the same trace times, on the same counters and access series, as `mantle replay`
//! would.
//!
//! One request at a time, in trace order (pipelining could reorder requests of different keys
//! on the server and with them the eviction order); before each request the server's policy
//! clock is set to the request's time (`POLICY CLOCK`) when it changed, and each tick due is a
//! `POLICY TICK now` whose reply (sent when the tick is done) becomes one row of replay's
//! per-tick table ([`sim::TickRow`]).

use super::driver::{issue, Driver, Tally};
use super::server::{integer, pairs, text, Counters, Server};
use anyhow::{anyhow, Context, Result};
use redis::Value as Reply;
use sim::tick_schedule::TickSchedule;
use sim::{Tick, TickRow};
use std::sync::atomic::{AtomicU64, Ordering};

/// Cumulative server figures at the previous tick, to turn the next tick's into per-tick ones.
struct Baseline {
    requests: u64,
    hits: u64,
    misses: u64,
    evictions: u64,
    store_reads: u64,
    store_writes: u64,
}

pub(super) async fn run(
    driver: &mut Driver,
    server: &Server,
    reader: &mut Box<dyn trace::TraceReader>,
    done: &AtomicU64,
    tick: Tick,
) -> Result<(Tally, Vec<TickRow>)> {
    let mut tally = Tally::new()?;
    let mut rows = Vec::new();
    let mut schedule = TickSchedule::new(tick);
    let before = server.counters().await?;
    let mut base = Baseline {
        requests: 0,
        hits: before.hits,
        misses: before.misses,
        evictions: before.evictions,
        store_reads: before.store_reads,
        store_writes: before.store_writes,
    };
    let mut clock: Option<f64> = None;
    let mut due = Vec::new();
    loop {
        if driver.max_requests.is_some_and(|max| tally.requests >= max) {
            break;
        }
        let Some(request) = reader.next_request()? else {
            break;
        };
        due.clear();
        schedule
            .before(request.time, |at| due.push(at))
            .map_err(|reason| {
                anyhow!(
                    "request {} (time {} s): {reason}",
                    tally.requests + 1,
                    request.time
                )
            })?;
        for &at in &due {
            let number = rows.len() as u64 + 1;
            rows.push(tick_server(server, number, at, tally.requests, &mut base).await?);
        }
        if clock != Some(request.time) {
            set_clock(server, request.time).await?;
            clock = Some(request.time);
        }
        let zeros = driver.value_buffer(&request)?;
        tally.sent(&request);
        let outcome = issue(driver.route.clone(), request, zeros)
            .await
            .map_err(|(r, e)| {
                super::server::request_error(&driver.address, &e).context(format!(
                    "{} {}",
                    r.op.name().to_uppercase(),
                    r.key
                ))
            })?;
        tally.completed(&outcome);
        let completed = done.fetch_add(1, Ordering::Relaxed) + 1;
        driver.progress.update(completed, driver.schedule.max_lag);
        if schedule.after() {
            let number = rows.len() as u64 + 1;
            let now = request.time;
            rows.push(tick_server(server, number, now, tally.requests, &mut base).await?);
        }
    }
    Ok((tally, rows))
}

async fn set_clock(server: &Server, now: f64) -> Result<()> {
    server
        .query(redis::cmd("POLICY").arg("CLOCK").arg(now))
        .await
        .map(drop)
        .with_context(|| {
            format!(
                "{}: POLICY CLOCK failed; replay --server with --tick needs a server started \
                 with --tick manual",
                server.address
            )
        })
}

/// Runs one tick on the server at `now` and turns its reply into a row.
async fn tick_server(
    server: &Server,
    number: u64,
    now: f64,
    requests: u64,
    base: &mut Baseline,
) -> Result<TickRow> {
    let reply = server
        .query(redis::cmd("POLICY").arg("TICK").arg(now))
        .await
        .with_context(|| format!("{}: POLICY TICK {now}", server.address))?;
    row(&reply, number, now, requests, base)
        .map_err(|e| anyhow!("{}: POLICY TICK {now} {e}", server.address))
}

/// `number` counts this replay's ticks from 1, as replay does (the server may have ticked
/// before).
fn row(
    reply: &Reply,
    number: u64,
    now: f64,
    requests: u64,
    base: &mut Baseline,
) -> Result<TickRow, String> {
    let pairs = pairs(reply).ok_or("did not reply with name/value pairs")?;
    let field = |name: &str| pairs.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    let count = |name: &str| {
        field(name)
            .and_then(integer)
            .ok_or_else(|| format!("reply lacks `{name}`"))
    };
    let counters = Counters {
        hits: count("hits")?,
        misses: count("misses")?,
        evictions: count("evictions")?,
        store_reads: count("store_reads")?,
        store_writes: count("store_writes")?,
        ..Counters::default()
    };
    let lookups = (counters.hits + counters.misses) - (base.hits + base.misses);
    let hits = counters.hits - base.hits;
    let tick = TickRow {
        tick: number,
        time: now,
        requests: requests - base.requests,
        cache_objects: count("cache_objects")?,
        cache_bytes: count("cache_bytes")?,
        capacity_objects: field("capacity_objects").and_then(integer),
        capacity_bytes: field("capacity_bytes").and_then(integer),
        lookups,
        hits,
        hit_ratio: (lookups > 0).then(|| hits as f64 / lookups as f64),
        backend_reads: counters.store_reads - base.store_reads,
        backend_writes: counters.store_writes - base.store_writes,
        backend_queue: 0.0,
        evictions: counters.evictions - base.evictions,
        action: field("action").and_then(text).unwrap_or_default(),
        policy_error: field("error").is_some_and(|e| *e != Reply::Nil),
    };
    *base = Baseline {
        requests,
        hits: counters.hits,
        misses: counters.misses,
        evictions: counters.evictions,
        store_reads: counters.store_reads,
        store_writes: counters.store_writes,
    };
    Ok(tick)
}
