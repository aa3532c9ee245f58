//! Live replay (`mantle replay --server ADDR`): drives a running `mantle serve` with a trace, in
//! real time scaled by `--speed`, and reports the same JSON keys as the simulated replay. Hits, misses,
//! footprint and store traffic come from the server's own counters, so the numbers describe the
//! real cache and the real RocksDB; a user can set them beside a simulated replay of the same
//! trace to check the back-end model. See docs/replay.md, "Replaying against a live server".

mod cluster;
mod driver;
mod footprint;
mod keys;
mod lockstep;
mod outcome;
mod report;
mod route;
mod schedule;
mod server;

use anyhow::{bail, Context, Result};
pub use cluster::replay_cluster;
use driver::Driver;
use footprint::Sampler;
use report::PolicyRun;
pub use report::{print_summary, Report};
use server::Server;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests in flight at once on the replay's connection. Enough to hide a loopback round trip
/// behind pipelining; small enough that a request is never far from its scheduled time.
const MAX_IN_FLIGHT: usize = 64;
/// How often the server's cache size and store counters are sampled (peaks and means).
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A reply slower than this means the server is stuck: the replay stops with an error.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest value the replay writes (a request's size); the buffer of zeros it slices from
/// never grows past it.
const MAX_VALUE_BYTES: u32 = 64 << 20;
/// Latencies are recorded in microseconds, from 1 µs to this, to 3 significant digits.
const MAX_LATENCY_US: u64 = 60_000_000;

/// What `--server` and its companion flags ask for.
pub struct LiveOptions {
    /// `HOST:PORT` or `redis://HOST:PORT`.
    pub server: String,
    pub password: Option<String>,
    /// Trace seconds per wall second; 0 = as fast as possible.
    pub speed: f64,
    pub max_requests: Option<u64>,
    pub progress: bool,
    /// `--tick`: replay in lock step with a `--tick manual` server, ticking it at this
    /// schedule's boundaries (see `lockstep`); `--speed` is then ignored.
    pub ticks: Option<sim::Tick>,
}

/// Replays every request `reader` yields against the server.
pub fn replay(options: &LiveOptions, reader: Box<dyn trace::TraceReader>) -> Result<Report> {
    if !options.speed.is_finite() || options.speed < 0.0 {
        bail!(
            "--speed must be a finite number >= 0 (0: as fast as possible), not {}",
            options.speed
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting the Tokio runtime")?;
    runtime.block_on(drive(options, reader))
}

async fn drive(options: &LiveOptions, mut reader: Box<dyn trace::TraceReader>) -> Result<Report> {
    let server = Server::connect(options).await?;
    let policy_before = server.policy_status().await?;
    let nodes_before = server.node_counters().await?;
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let sampler = Sampler::start(server.clone(), Arc::clone(&done), started).await?;

    let mut driver = Driver::new(&server, options, started);
    let mut ticks = Vec::new();
    let driven = match options.ticks {
        Some(tick) => lockstep::run(&mut driver, &server, &mut reader, &done, tick)
            .await
            .map(|(tally, rows)| {
                ticks = rows;
                tally
            }),
        None => driver.run(&mut reader, &done).await,
    };
    let wall = started.elapsed();
    if driven.is_err() {
        driver.progress.abandon();
    }
    let tally = driven?;
    let (before, after, footprint) = sampler.stop(done.load(Ordering::Relaxed)).await?;
    driver.progress.finish(tally.requests, wall);
    let policy_after = server.policy_status().await?;
    let nodes = server
        .node_counters()
        .await?
        .into_iter()
        .zip(nodes_before)
        .map(|((addr, after), (_, before))| (addr, after.since(&before)))
        .collect();
    Ok(Report {
        nodes,
        server: options.server.clone(),
        speed: options.speed,
        tally,
        delta: after.since(&before),
        after,
        footprint,
        policy: PolicyRun::between(policy_before, policy_after),
        wall,
        max_lag: driver.schedule.max_lag,
        ticks,
    })
}
