//! `mantle replay --server ADDR`: drives a running `mantle serve` with a trace, in real time
//! scaled by `--speed`, and reports the same JSON keys as the simulated replay. Hits, misses,
//! footprint and store traffic come from the server's own counters, so the numbers describe the
//! real cache and the real RocksDB; a user can set them beside a simulated replay of the same
//! trace to check the back-end model. See docs/replay.md, "Replaying against a live server".

use super::trace_args::TraceArgs;
use anyhow::{anyhow, bail, Context, Result};
use futures_util::stream::{FuturesUnordered, StreamExt};
use hdrhistogram::Histogram;
use redis::aio::MultiplexedConnection;
use redis::{IntoConnectionInfo, RedisError, Value as Reply};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trace::{Op, Request};

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
}

/// Replays `input` against the server and prints the report (JSON with `json`).
pub fn run(options: &LiveOptions, input: &TraceArgs, json: bool) -> Result<()> {
    if !options.speed.is_finite() || options.speed < 0.0 {
        bail!(
            "--speed must be a finite number >= 0 (0: as fast as possible), not {}",
            options.speed
        );
    }
    let format = input.format()?;
    let read_options = input.options()?;
    let reader = trace::open(&input.trace, format, &read_options)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting the Tokio runtime")?;
    let report = runtime.block_on(replay(options, reader))?;
    let mut value = report.to_json();
    if let Value::Object(map) = &mut value {
        map.insert("trace".into(), json!(input.trace.display().to_string()));
        map.insert("format".into(), json!(input.format_name()));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print_summary(&report, input);
    }
    Ok(())
}

async fn replay(options: &LiveOptions, mut reader: Box<dyn trace::TraceReader>) -> Result<Report> {
    let server = Server::connect(options).await?;
    let policy_before = server.policy_status().await?;
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let sampler = Sampler::start(server.clone(), Arc::clone(&done), started).await?;

    let mut driver = Driver::new(&server, options, started);
    let driven = driver.run(&mut reader, &done).await;
    let wall = started.elapsed();
    if driven.is_err() {
        driver.progress.abandon();
    }
    let tally = driven?;
    let (before, after, footprint) = sampler.stop(done.load(Ordering::Relaxed)).await?;
    driver.progress.finish(tally.requests, wall);
    let policy_after = server.policy_status().await?;
    Ok(Report {
        server: options.server.clone(),
        speed: options.speed,
        tally,
        delta: after.since(&before),
        after,
        footprint,
        policy: PolicyRun::between(policy_before, policy_after),
        wall,
        max_lag: driver.schedule.max_lag,
    })
}

/// The connections to the server: one multiplexed connection carries the trace's requests,
/// a second one the periodic samples, so samples never queue behind requests.
#[derive(Clone)]
struct Server {
    address: String,
    connection: MultiplexedConnection,
    control: MultiplexedConnection,
}

impl Server {
    async fn connect(options: &LiveOptions) -> Result<Server> {
        let address = options.server.clone();
        let url = if address.contains("://") {
            address.clone()
        } else {
            format!("redis://{address}")
        };
        let mut info = url
            .as_str()
            .into_connection_info()
            .map_err(|e| anyhow!("--server {address}: not HOST:PORT or redis://HOST:PORT ({e})"))?;
        if options.password.is_some() {
            info.redis.password = options.password.clone();
        }
        let client = redis::Client::open(info).map_err(|e| anyhow!("--server {address}: {e}"))?;
        let open = || async {
            client
                .get_multiplexed_tokio_connection_with_response_timeouts(
                    RESPONSE_TIMEOUT,
                    CONNECT_TIMEOUT,
                )
                .await
                .map_err(|e| connect_error(&address, &e))
        };
        let server = Server {
            connection: open().await?,
            control: open().await?,
            address: address.clone(),
        };
        // The first command says whether the server wants a password and speaks CACHE STATS.
        server.counters().await?;
        Ok(server)
    }

    /// The server's cache and store counters (CACHE STATS).
    async fn counters(&self) -> Result<Counters> {
        let reply = self.query(redis::cmd("CACHE").arg("STATS")).await?;
        Counters::from_reply(&reply).map_err(|e| {
            anyhow!(
                "{}: CACHE STATS {e}; is it a mantle server (mantle serve)?",
                self.address
            )
        })
    }

    /// POLICY STATUS as name/value pairs; empty when the server has no policy commands.
    async fn policy_status(&self) -> Result<Vec<(String, Reply)>> {
        match self.query(redis::cmd("POLICY").arg("STATUS")).await {
            Ok(reply) => Ok(pairs(&reply).unwrap_or_default()),
            Err(_) => Ok(Vec::new()),
        }
    }

    async fn query(&self, cmd: &redis::Cmd) -> Result<Reply> {
        let mut control = self.control.clone();
        cmd.query_async::<_, Reply>(&mut control)
            .await
            .map_err(|e| request_error(&self.address, &e))
    }
}

/// A one-line explanation of a failed connection.
fn connect_error(address: &str, err: &RedisError) -> anyhow::Error {
    if err.kind() == redis::ErrorKind::AuthenticationFailed {
        anyhow!("the server at {address} refused the password (--password): {err}")
    } else if err.is_timeout() {
        anyhow!(
            "the server at {address} did not answer within {} s",
            CONNECT_TIMEOUT.as_secs()
        )
    } else if err.is_connection_dropped() || err.to_string().contains("driver unexpectedly") {
        anyhow!("the server at {address} closed the connection at once: is it a Redis-protocol server? ({err})")
    } else {
        anyhow!("cannot reach the server at {address}: {err}")
    }
}

/// A one-line explanation of a failed request.
fn request_error(address: &str, err: &RedisError) -> anyhow::Error {
    if err.code() == Some("NOAUTH") {
        anyhow!("the server at {address} requires a password: add --password")
    } else if err.is_timeout() {
        anyhow!(
            "the server at {address} did not answer within {} s",
            RESPONSE_TIMEOUT.as_secs()
        )
    } else if err.is_io_error() || err.is_connection_dropped() {
        anyhow!("lost the connection to the server at {address}: {err}")
    } else {
        anyhow!("{address}: {err}")
    }
}

/// A RESP2 map (a flat array of names and values) as pairs.
fn pairs(reply: &Reply) -> Option<Vec<(String, Reply)>> {
    let Reply::Bulk(items) = reply else {
        return None;
    };
    items
        .chunks_exact(2)
        .map(|kv| match &kv[0] {
            Reply::Data(name) => Some((String::from_utf8_lossy(name).into_owned(), kv[1].clone())),
            Reply::Status(name) => Some((name.clone(), kv[1].clone())),
            _ => None,
        })
        .collect()
}

fn integer(reply: &Reply) -> Option<u64> {
    match reply {
        Reply::Int(n) => u64::try_from(*n).ok(),
        Reply::Data(text) => std::str::from_utf8(text).ok()?.parse().ok(),
        _ => None,
    }
}

fn text(reply: &Reply) -> Option<String> {
    match reply {
        Reply::Data(text) => Some(String::from_utf8_lossy(text).into_owned()),
        Reply::Status(text) => Some(text.clone()),
        Reply::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The CACHE STATS numbers the report is made of.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Counters {
    objects: u64,
    bytes: u64,
    hits: u64,
    misses: u64,
    evictions: u64,
    store_reads: u64,
    store_writes: u64,
    store_errors: u64,
}

impl Counters {
    fn from_reply(reply: &Reply) -> Result<Counters, String> {
        let pairs = pairs(reply).ok_or("did not reply with name/value pairs")?;
        let get = |name: &str| -> Result<u64, String> {
            pairs
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, v)| integer(v))
                .ok_or_else(|| format!("reply lacks the counter `{name}`"))
        };
        Ok(Counters {
            objects: get("objects")?,
            bytes: get("bytes")?,
            hits: get("hits")?,
            misses: get("misses")?,
            evictions: get("evictions")?,
            store_reads: get("store_reads")?,
            store_writes: get("store_writes")?,
            store_errors: get("store_errors")?,
        })
    }

    /// The counters' growth since `before` (gauges keep this sample's value). A counter that
    /// went down (CONFIG RESETSTAT during the run) counts from zero.
    fn since(&self, before: &Counters) -> Counters {
        let d = |a: u64, b: u64| if a >= b { a - b } else { a };
        Counters {
            objects: self.objects,
            bytes: self.bytes,
            hits: d(self.hits, before.hits),
            misses: d(self.misses, before.misses),
            evictions: d(self.evictions, before.evictions),
            store_reads: d(self.store_reads, before.store_reads),
            store_writes: d(self.store_writes, before.store_writes),
            store_errors: d(self.store_errors, before.store_errors),
        }
    }

    fn store_ops(&self) -> u64 {
        self.store_reads + self.store_writes
    }
}

/// Samples CACHE STATS every [`SAMPLE_EVERY`] on its own task and folds each sample into
/// running figures (nothing grows with the run's length).
struct Sampler {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<Footprint>>,
    server: Server,
    before: Counters,
    started: Instant,
}

impl Sampler {
    async fn start(server: Server, done: Arc<AtomicU64>, started: Instant) -> Result<Sampler> {
        let before = server.counters().await?;
        let mut footprint = Footprint::default();
        footprint.add(Sample::new(0.0, 0, &before));
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let sampling = server.clone();
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(SAMPLE_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await;
            loop {
                tokio::select! {
                    _ = &mut stopped => return Ok(footprint),
                    _ = every.tick() => {
                        let counters = sampling.counters().await?;
                        let at = started.elapsed().as_secs_f64();
                        footprint.add(Sample::new(at, done.load(Ordering::Relaxed), &counters));
                    }
                }
            }
        });
        Ok(Sampler {
            stop,
            task,
            server,
            before,
            started,
        })
    }

    /// Stops sampling and takes the last sample: (counters before, counters after, footprint).
    async fn stop(self, requests: u64) -> Result<(Counters, Counters, Footprint)> {
        let _ = self.stop.send(());
        let mut footprint = self
            .task
            .await
            .map_err(|e| anyhow!("the sampling task failed: {e}"))??;
        let after = self.server.counters().await?;
        let at = self.started.elapsed().as_secs_f64();
        footprint.add(Sample::new(at, requests, &after));
        Ok((self.before, after, footprint))
    }
}

/// One observation of the server: wall seconds since the start, requests completed by then.
#[derive(Clone, Copy, Debug)]
struct Sample {
    at: f64,
    requests: u64,
    objects: u64,
    bytes: u64,
    store_ops: u64,
}

impl Sample {
    fn new(at: f64, requests: u64, c: &Counters) -> Sample {
        Sample {
            at,
            requests,
            objects: c.objects,
            bytes: c.bytes,
            store_ops: c.store_ops(),
        }
    }
}

/// Peaks and means of the cache's size, and the busiest wall second of the store, folded from
/// samples. Between two samples the size is taken as the mean of both ends.
#[derive(Default, Debug)]
struct Footprint {
    last: Option<Sample>,
    peak_objects: u64,
    peak_bytes: u64,
    /// Integrals over wall time and over completed requests.
    time_objects: f64,
    time_bytes: f64,
    request_objects: f64,
    request_bytes: f64,
    seconds: f64,
    requests: u64,
    /// The wall second being counted, its store operations, and the busiest so far.
    second: u64,
    second_ops: u64,
    peak_ops: u64,
}

impl Footprint {
    fn add(&mut self, s: Sample) {
        self.peak_objects = self.peak_objects.max(s.objects);
        self.peak_bytes = self.peak_bytes.max(s.bytes);
        if let Some(prev) = self.last {
            let dt = (s.at - prev.at).max(0.0);
            let dr = s.requests.saturating_sub(prev.requests);
            let objects = (prev.objects + s.objects) as f64 / 2.0;
            let bytes = (prev.bytes + s.bytes) as f64 / 2.0;
            self.time_objects += objects * dt;
            self.time_bytes += bytes * dt;
            self.request_objects += objects * dr as f64;
            self.request_bytes += bytes * dr as f64;
            self.seconds += dt;
            self.requests += dr;
            let second = s.at as u64;
            if second != self.second {
                self.peak_ops = self.peak_ops.max(self.second_ops);
                self.second = second;
                self.second_ops = 0;
            }
            self.second_ops += s.store_ops.saturating_sub(prev.store_ops);
        }
        self.last = Some(s);
    }

    fn last(&self) -> Sample {
        self.last.unwrap_or(Sample {
            at: 0.0,
            requests: 0,
            objects: 0,
            bytes: 0,
            store_ops: 0,
        })
    }

    /// (objects, bytes), request-weighted.
    fn request_mean(&self) -> (f64, f64) {
        if self.requests == 0 {
            let last = self.last();
            return (last.objects as f64, last.bytes as f64);
        }
        let n = self.requests as f64;
        (self.request_objects / n, self.request_bytes / n)
    }

    /// (objects, bytes), time-weighted over wall time.
    fn time_mean(&self) -> (f64, f64) {
        if self.seconds <= 0.0 {
            let last = self.last();
            return (last.objects as f64, last.bytes as f64);
        }
        (
            self.time_objects / self.seconds,
            self.time_bytes / self.seconds,
        )
    }

    fn peak_store_ops_per_second(&self) -> u64 {
        self.peak_ops.max(self.second_ops)
    }
}

/// When each request is due: the trace's gaps divided by `--speed`, from the first request.
struct Schedule {
    speed: f64,
    origin: Option<(f64, Instant)>,
    /// How far behind its due time the latest-sent request was, at worst.
    max_lag: Duration,
}

impl Schedule {
    fn new(speed: f64) -> Schedule {
        Schedule {
            speed,
            origin: None,
            max_lag: Duration::ZERO,
        }
    }

    /// The wall time `time` (trace seconds) is due at; None when the replay runs flat out.
    /// Times earlier than the first request's are due at once.
    fn due(&mut self, time: f64, now: Instant) -> Result<Option<Instant>> {
        if self.speed == 0.0 {
            return Ok(None);
        }
        let (first, start) = *self.origin.get_or_insert((time, now));
        let offset = (time - first) / self.speed;
        if offset.is_nan() || offset <= 0.0 {
            return Ok(Some(start));
        }
        let offset = Duration::try_from_secs_f64(offset).map_err(|_| {
            anyhow!(
                "trace time {time} s is too far from the first request's ({first} s) to schedule"
            )
        })?;
        Ok(Some(start + offset))
    }

    fn sent(&mut self, due: Option<Instant>, now: Instant) {
        if let Some(due) = due {
            self.max_lag = self.max_lag.max(now.saturating_duration_since(due));
        }
    }
}

/// What the replay itself counted: requests by operation, nil replies and the fills they
/// caused, failed requests, client-side latencies and the trace's time span.
struct Tally {
    requests: u64,
    gets: u64,
    accesses: u64,
    puts: u64,
    deletes: u64,
    nil_replies: u64,
    fills: u64,
    errors: u64,
    first_error: Option<String>,
    lookup_latency: Histogram<u64>,
    write_latency: Histogram<u64>,
    first_time: Option<f64>,
    last_time: f64,
}

impl Tally {
    fn new() -> Result<Tally> {
        let histogram = || {
            Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
                .map_err(|e| anyhow!("latency histogram: {e}"))
        };
        Ok(Tally {
            requests: 0,
            gets: 0,
            accesses: 0,
            puts: 0,
            deletes: 0,
            nil_replies: 0,
            fills: 0,
            errors: 0,
            first_error: None,
            lookup_latency: histogram()?,
            write_latency: histogram()?,
            first_time: None,
            last_time: 0.0,
        })
    }

    fn sent(&mut self, r: &Request) {
        self.requests += 1;
        match r.op {
            Op::Get => self.gets += 1,
            Op::Access => self.accesses += 1,
            Op::Put => self.puts += 1,
            Op::Delete => self.deletes += 1,
        }
        self.first_time.get_or_insert(r.time);
        self.last_time = r.time;
    }

    fn completed(&mut self, outcome: &Outcome) {
        let micros = (outcome.latency.as_micros() as u64).clamp(1, MAX_LATENCY_US);
        match outcome.request.op {
            Op::Get | Op::Access => self.lookup_latency.saturating_record(micros),
            Op::Put | Op::Delete => self.write_latency.saturating_record(micros),
        }
        self.nil_replies += u64::from(outcome.nil);
        self.fills += u64::from(outcome.filled);
        if let Some(err) = &outcome.error {
            self.errors += 1;
            self.first_error.get_or_insert_with(|| {
                format!(
                    "{} {}: {err}",
                    outcome.request.op.name().to_uppercase(),
                    outcome.request.key
                )
            });
        }
    }
}

/// The result of one trace request on the server.
struct Outcome {
    request: Request,
    /// The round trip of the request's own command (a fill's SET not included).
    latency: Duration,
    /// A GET answered nil: the key is in neither the cache nor the store.
    nil: bool,
    /// The nil was followed by a SET of the request's size that stored it.
    filled: bool,
    /// The server answered with an error (the connection itself is fine).
    error: Option<RedisError>,
}

fn is_lookup(op: Op) -> bool {
    matches!(op, Op::Get | Op::Access)
}

/// Which keys have requests in flight, and which keys are known to be stored.
///
/// A put or delete waits until nothing is in flight for its key and then holds it alone, so
/// the server sees every write in trace order relative to the lookups around it. Lookups of a
/// key overlap each other only once the key is known to be stored: the server handles the
/// lookups of one connection in order, so the second is then a hit exactly as in the
/// simulator. Lookups of a key nobody stored yet go one at a time, so the first one's nil
/// reply and fill complete before the next is sent (otherwise both would miss and fill).
struct KeysInFlight {
    /// At most [`MAX_IN_FLIGHT`] entries.
    keys: HashMap<u64, KeyUse>,
    /// Known-stored keys, direct-mapped by a hash of the key: a bounded memory whose only
    /// failure (a key pushed out by another) costs one serialised lookup, never a wrong result.
    stored: Box<[u64]>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct KeyUse {
    lookups: u32,
    writing: bool,
}

/// Slots of [`KeysInFlight::stored`] (512 KiB).
const STORED_SLOTS_LOG2: u32 = 16;
/// An empty slot; the key u64::MAX is therefore never known stored (it is only serialised).
const NO_KEY: u64 = u64::MAX;

impl Default for KeysInFlight {
    fn default() -> KeysInFlight {
        KeysInFlight {
            keys: HashMap::with_capacity(MAX_IN_FLIGHT),
            stored: vec![NO_KEY; 1 << STORED_SLOTS_LOG2].into_boxed_slice(),
        }
    }
}

impl KeysInFlight {
    fn slot(key: u64) -> usize {
        // Fibonacci hashing: block traces have sequential keys.
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - STORED_SLOTS_LOG2)) as usize
    }

    fn known_stored(&self, key: u64) -> bool {
        key != NO_KEY && self.stored[Self::slot(key)] == key
    }

    fn may_start(&self, r: &Request) -> bool {
        match self.keys.get(&r.key) {
            None => true,
            Some(used) => is_lookup(r.op) && !used.writing && self.known_stored(r.key),
        }
    }

    fn start(&mut self, r: &Request) {
        let used = self.keys.entry(r.key).or_default();
        if is_lookup(r.op) {
            used.lookups += 1;
        } else {
            used.writing = true;
        }
    }

    fn finish(&mut self, outcome: &Outcome) {
        let r = &outcome.request;
        if let Some(used) = self.keys.get_mut(&r.key) {
            if is_lookup(r.op) {
                used.lookups = used.lookups.saturating_sub(1);
            } else {
                used.writing = false;
            }
            if *used == KeyUse::default() {
                self.keys.remove(&r.key);
            }
        }
        if outcome.error.is_some() {
            return;
        }
        let slot = &mut self.stored[Self::slot(r.key)];
        match r.op {
            // A nil whose fill did not store means an overlapping request stored it.
            Op::Get | Op::Access | Op::Put => *slot = r.key,
            Op::Delete if *slot == r.key => *slot = NO_KEY,
            Op::Delete => {}
        }
    }
}

/// Issues the trace's requests: at most [`MAX_IN_FLIGHT`] at once, writes to a key never
/// overlapping anything else on that key (see [`KeysInFlight`]), each no earlier than the
/// schedule says.
struct Driver {
    address: String,
    connection: MultiplexedConnection,
    schedule: Schedule,
    max_requests: Option<u64>,
    zeros: Arc<[u8]>,
    progress: Progress,
}

impl Driver {
    fn new(server: &Server, options: &LiveOptions, started: Instant) -> Driver {
        Driver {
            address: server.address.clone(),
            connection: server.connection.clone(),
            schedule: Schedule::new(options.speed),
            max_requests: options.max_requests,
            zeros: Arc::from(vec![0u8; 4096]),
            progress: Progress::new(options.progress, started),
        }
    }

    async fn run(
        &mut self,
        reader: &mut Box<dyn trace::TraceReader>,
        done: &AtomicU64,
    ) -> Result<Tally> {
        let mut tally = Tally::new()?;
        let mut in_flight = FuturesUnordered::new();
        let mut keys = KeysInFlight::default();
        let mut next: Option<Request> = None;
        let mut exhausted = false;
        loop {
            if next.is_none() && !exhausted {
                if self.max_requests.is_some_and(|max| tally.requests >= max) {
                    exhausted = true;
                } else {
                    next = reader.next_request()?;
                    exhausted = next.is_none();
                }
            }
            let outcome = match next {
                Some(r) if in_flight.len() < MAX_IN_FLIGHT && keys.may_start(&r) => {
                    let now = Instant::now();
                    let due = self.schedule.due(r.time, now)?;
                    if let Some(at) = due.filter(|&at| at > now) {
                        tokio::select! {
                            _ = tokio::time::sleep_until(at.into()) => continue,
                            Some(outcome) = in_flight.next() => outcome,
                        }
                    } else {
                        self.schedule.sent(due, now);
                        let zeros = self.value_buffer(&r)?;
                        keys.start(&r);
                        tally.sent(&r);
                        in_flight.push(issue(self.connection.clone(), r, zeros));
                        next = None;
                        continue;
                    }
                }
                // Out of slots, or the key is in flight: wait for a completion.
                Some(_) => in_flight
                    .next()
                    .await
                    .ok_or_else(|| anyhow!("internal: waiting on an empty request set"))?,
                None => match in_flight.next().await {
                    Some(outcome) => outcome,
                    None => break,
                },
            };
            let outcome = outcome.map_err(|(r, e)| {
                request_error(&self.address, &e).context(format!(
                    "{} {}",
                    r.op.name().to_uppercase(),
                    r.key
                ))
            })?;
            keys.finish(&outcome);
            tally.completed(&outcome);
            let completed = done.fetch_add(1, Ordering::Relaxed) + 1;
            self.progress.update(completed, self.schedule.max_lag);
        }
        Ok(tally)
    }

    /// Zeros enough for `r`'s value (grown, up to the bound, when a larger request comes).
    fn value_buffer(&mut self, r: &Request) -> Result<Arc<[u8]>> {
        if matches!(r.op, Op::Get | Op::Access | Op::Put) && r.size as usize > self.zeros.len() {
            if r.size > MAX_VALUE_BYTES {
                bail!(
                    "key {} has size {} bytes; a live replay writes values of at most {} MiB",
                    r.key,
                    r.size,
                    MAX_VALUE_BYTES >> 20
                );
            }
            self.zeros = Arc::from(vec![0u8; (r.size as usize).next_power_of_two()]);
        }
        Ok(Arc::clone(&self.zeros))
    }
}

/// One trace request as commands: GET (and SET on nil), SET, or DEL. Errors of the connection
/// come back as `Err`; errors the server answers with are part of the outcome.
async fn issue(
    mut connection: MultiplexedConnection,
    request: Request,
    zeros: Arc<[u8]>,
) -> Result<Outcome, (Request, RedisError)> {
    let mut digits = itoa::Buffer::new();
    let key = digits.format(request.key);
    let value = &zeros[..(request.size as usize).min(zeros.len())];
    let started = Instant::now();
    let mut outcome = Outcome {
        request,
        latency: Duration::ZERO,
        nil: false,
        filled: false,
        error: None,
    };
    let reply = match request.op {
        Op::Get | Op::Access => {
            redis::cmd("GET")
                .arg(key)
                .query_async(&mut connection)
                .await
        }
        Op::Put => {
            redis::cmd("SET")
                .arg(key)
                .arg(value)
                .query_async(&mut connection)
                .await
        }
        Op::Delete => {
            redis::cmd("DEL")
                .arg(key)
                .query_async(&mut connection)
                .await
        }
    };
    outcome.latency = started.elapsed();
    match reply {
        Ok(Reply::Nil) if matches!(request.op, Op::Get | Op::Access) => {
            outcome.nil = true;
            // The key is nowhere: store it, as the store behind a cache holds whatever is
            // read. NX: an overlapping lookup of the same key may have filled it already.
            let fill: Result<Reply, RedisError> = redis::cmd("SET")
                .arg(key)
                .arg(value)
                .arg("NX")
                .query_async(&mut connection)
                .await;
            match fill {
                Ok(reply) => outcome.filled = reply != Reply::Nil,
                Err(e) if is_fatal(&e) => return Err((request, e)),
                Err(e) => outcome.error = Some(e),
            }
        }
        Ok(_) => {}
        Err(e) if is_fatal(&e) => return Err((request, e)),
        Err(e) => outcome.error = Some(e),
    }
    Ok(outcome)
}

/// Errors after which the connection cannot go on (as opposed to an error reply).
fn is_fatal(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_timeout()
        || err.code() == Some("NOAUTH")
}

/// The progress line on stderr, once a second after the first two.
struct Progress {
    enabled: bool,
    started: Instant,
    last_print: Option<Instant>,
}

impl Progress {
    fn new(enabled: bool, started: Instant) -> Progress {
        Progress {
            enabled,
            started,
            last_print: None,
        }
    }

    fn update(&mut self, requests: u64, lag: Duration) {
        if !self.enabled || !requests.is_multiple_of(256) {
            return;
        }
        let now = Instant::now();
        let elapsed = now - self.started;
        let due = match self.last_print {
            None => elapsed >= Duration::from_secs(2),
            Some(t) => now - t >= Duration::from_secs(1),
        };
        if due {
            self.last_print = Some(now);
            eprint!(
                "\rreplay --server: {requests} requests, {:.0} req/s, {:.0}s elapsed, lag {:.3}s   ",
                requests as f64 / elapsed.as_secs_f64(),
                elapsed.as_secs_f64(),
                lag.as_secs_f64()
            );
        }
    }

    /// Ends the progress line so that an error message starts on its own line.
    fn abandon(&self) {
        if self.last_print.is_some() {
            eprintln!();
        }
    }

    fn finish(&self, requests: u64, wall: Duration) {
        if self.last_print.is_some() {
            eprintln!(
                "\rreplay --server: {requests} requests in {:.1}s                              ",
                wall.as_secs_f64()
            );
        }
    }
}

/// The policy the server ran, from POLICY STATUS before and after the replay.
struct PolicyRun {
    active: String,
    ticks: u64,
    actions: u64,
    errors: u64,
    fallbacks: u64,
}

impl PolicyRun {
    /// None when no policy was active at either end.
    fn between(before: Vec<(String, Reply)>, after: Vec<(String, Reply)>) -> Option<PolicyRun> {
        let field = |pairs: &[(String, Reply)], name: &str| {
            pairs
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let count = |name: &str| {
            let at = |pairs: &[(String, Reply)]| {
                field(pairs, name).and_then(|v| integer(&v)).unwrap_or(0)
            };
            at(&after).saturating_sub(at(&before))
        };
        let active = |pairs: &[(String, Reply)]| {
            field(pairs, "active")
                .and_then(|v| text(&v))
                .filter(|s| !s.is_empty())
        };
        let name = active(&after).or_else(|| active(&before))?;
        Some(PolicyRun {
            active: name,
            ticks: count("ticks"),
            actions: count("actions"),
            errors: count("errors"),
            fallbacks: count("fallbacks"),
        })
    }

    fn to_json(&self) -> Value {
        let (name, version) = match self.active.rsplit_once('@') {
            Some((name, v)) => (name.to_string(), v.parse::<u64>().ok()),
            None => (self.active.clone(), None),
        };
        json!({
            "name": name,
            "version": version,
            "ticks": self.ticks,
            "actions": self.actions,
            "errors": self.errors,
            "fallback": (self.fallbacks > 0)
                .then(|| format!("{} automatic rollbacks during the replay; {} active at the end", self.fallbacks, self.active)),
        })
    }
}

struct Report {
    server: String,
    speed: f64,
    tally: Tally,
    /// Counter growth during the replay (gauges: the final values).
    delta: Counters,
    after: Counters,
    footprint: Footprint,
    policy: Option<PolicyRun>,
    wall: Duration,
    max_lag: Duration,
}

impl Report {
    fn lookups(&self) -> u64 {
        self.delta.hits + self.delta.misses
    }

    fn miss_ratio(&self) -> f64 {
        match self.lookups() {
            0 => 0.0,
            n => self.delta.misses as f64 / n as f64,
        }
    }

    fn to_json(&self) -> Value {
        let t = &self.tally;
        let d = &self.delta;
        let (mean_objects, mean_bytes) = self.footprint.request_mean();
        let (time_objects, time_bytes) = self.footprint.time_mean();
        let wall = self.wall.as_secs_f64();
        let ms = |h: &Histogram<u64>, q: f64| {
            (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1000.0)
        };
        let max_ms = |h: &Histogram<u64>| (!h.is_empty()).then(|| h.max() as f64 / 1000.0);
        let duration = t.first_time.map(|first| t.last_time - first);
        json!({
            "mode": "live",
            "server": self.server,
            "speed": self.speed,
            "requests": t.requests,
            "gets": t.gets,
            "accesses": t.accesses,
            "puts": t.puts,
            "deletes": t.deletes,
            "hits": d.hits,
            "misses": d.misses,
            "miss_ratio": self.miss_ratio(),
            "byte_miss_ratio": null,
            "nil_replies": t.nil_replies,
            "fills": t.fills,
            "errors": t.errors,
            "first_error": t.first_error,
            "evictions": d.evictions,
            "peak_cache_objects": self.footprint.peak_objects,
            "mean_cache_objects": mean_objects,
            "time_mean_cache_objects": time_objects,
            "peak_cache_bytes": self.footprint.peak_bytes,
            "mean_cache_bytes": mean_bytes,
            "time_mean_cache_bytes": time_bytes,
            "final_cache_objects": self.after.objects,
            "final_cache_bytes": self.after.bytes,
            "duration_seconds": duration.filter(|&d| d > 0.0),
            "backend": {
                "model": "live",
                "reads": d.store_reads,
                "writes": d.store_writes,
                "fill_writes": t.fills,
                "errors": d.store_errors,
                "peak_rate": self.footprint.peak_store_ops_per_second() as f64,
                "overload_seconds": null,
                "compactions": null,
                "p50_read_latency_ms": ms(&t.lookup_latency, 0.5),
                "p99_read_latency_ms": ms(&t.lookup_latency, 0.99),
                "max_read_latency_ms": max_ms(&t.lookup_latency),
            },
            "client": {
                "in_flight_limit": MAX_IN_FLIGHT,
                "max_lag_seconds": self.max_lag.as_secs_f64(),
                "p50_write_latency_ms": ms(&t.write_latency, 0.5),
                "p99_write_latency_ms": ms(&t.write_latency, 0.99),
                "max_write_latency_ms": max_ms(&t.write_latency),
            },
            "policy": self.policy.as_ref().map(PolicyRun::to_json),
            "wall_seconds": wall,
            "requests_per_second": if wall > 0.0 { t.requests as f64 / wall } else { 0.0 },
        })
    }
}

fn print_summary(r: &Report, input: &TraceArgs) {
    let t = &r.tally;
    let d = &r.delta;
    let (mean_objects, mean_bytes) = r.footprint.request_mean();
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.2}"));
    let h = &t.lookup_latency;
    let q = |q: f64| (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1000.0);
    println!(
        "trace        {} ({})",
        input.trace.display(),
        input.format_name()
    );
    println!("server       {} (speed {})", r.server, r.speed);
    println!(
        "requests     {} ({} gets, {} accesses, {} puts, {} deletes), {} errors",
        t.requests, t.gets, t.accesses, t.puts, t.deletes, t.errors
    );
    println!(
        "miss ratio   {:.6} ({} misses of {} lookups, server counters); {} nil replies filled",
        r.miss_ratio(),
        d.misses,
        r.lookups(),
        t.fills
    );
    println!(
        "footprint    peak {} objects / {} bytes, mean {:.1} objects / {:.0} bytes (sampled)",
        r.footprint.peak_objects, r.footprint.peak_bytes, mean_objects, mean_bytes
    );
    println!(
        "store        {} reads, {} writes ({} fills), peak {} ops/s; GET p50 {} ms, p99 {} ms",
        d.store_reads,
        d.store_writes,
        t.fills,
        r.footprint.peak_store_ops_per_second(),
        opt(q(0.5)),
        opt(q(0.99))
    );
    if let Some(p) = &r.policy {
        println!(
            "policy       {}: {} ticks, {} actions, {} errors",
            p.active, p.ticks, p.actions, p.errors
        );
    }
    let wall = r.wall.as_secs_f64();
    println!(
        "speed        {:.0} requests/s ({:.2} s, worst lag {:.3} s)",
        if wall > 0.0 {
            t.requests as f64 / wall
        } else {
            0.0
        },
        wall,
        r.max_lag.as_secs_f64()
    );
    if let Some(e) = &t.first_error {
        eprintln!(
            "mantle: warning: {} requests failed; the first: {e}",
            t.errors
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(text: &str) -> Reply {
        Reply::Data(text.as_bytes().to_vec())
    }

    fn cache_stats(hits: i64, misses: i64) -> Reply {
        let mut items = vec![data("algorithm"), data("lru")];
        for (name, value) in [
            ("objects", 10),
            ("bytes", 1000),
            ("hits", hits),
            ("misses", misses),
            ("hit_ratio", -1),
            ("evictions", 3),
            ("fills", 2),
            ("store_reads", misses),
            ("store_writes", 7),
            ("store_errors", 0),
        ] {
            items.push(data(name));
            items.push(if name == "hit_ratio" {
                data("0.5000")
            } else {
                Reply::Int(value)
            });
        }
        Reply::Bulk(items)
    }

    #[test]
    fn cache_stats_reply_is_read_by_name() {
        let c = Counters::from_reply(&cache_stats(5, 4)).unwrap();
        assert_eq!((c.objects, c.bytes, c.hits, c.misses), (10, 1000, 5, 4));
        assert_eq!((c.evictions, c.store_reads, c.store_writes), (3, 4, 7));
        let err =
            Counters::from_reply(&Reply::Bulk(vec![data("objects"), Reply::Int(1)])).unwrap_err();
        assert!(err.contains("`bytes`"), "{err}");
        assert!(Counters::from_reply(&Reply::Okay).is_err());
    }

    #[test]
    fn deltas_count_growth_and_survive_a_reset() {
        let before = Counters::from_reply(&cache_stats(100, 50)).unwrap();
        let after = Counters::from_reply(&cache_stats(130, 60)).unwrap();
        let d = after.since(&before);
        assert_eq!((d.hits, d.misses, d.objects), (30, 10, 10));
        // CONFIG RESETSTAT between the samples: the later value is all there is.
        let reset = Counters::from_reply(&cache_stats(7, 2)).unwrap();
        assert_eq!(reset.since(&before).hits, 7);
    }

    fn sample(at: f64, requests: u64, objects: u64, store_ops: u64) -> Sample {
        Sample {
            at,
            requests,
            objects,
            bytes: objects * 10,
            store_ops,
        }
    }

    #[test]
    fn footprint_weighs_by_requests_and_by_time() {
        let mut f = Footprint::default();
        f.add(sample(0.0, 0, 0, 0));
        // 100 requests while the cache grows 0 -> 10 over 1 s, then 900 more requests in 0.5 s
        // at 10 objects.
        f.add(sample(1.0, 100, 10, 40));
        f.add(sample(1.5, 1000, 10, 60));
        let (objects, bytes) = f.request_mean();
        assert!((objects - (5.0 * 100.0 + 10.0 * 900.0) / 1000.0).abs() < 1e-9);
        assert!((bytes - objects * 10.0).abs() < 1e-9);
        let (objects, _) = f.time_mean();
        assert!((objects - (5.0 * 1.0 + 10.0 * 0.5) / 1.5).abs() < 1e-9);
        assert_eq!((f.peak_objects, f.peak_bytes), (10, 100));
        // Second 1 holds the 40 operations of the first interval plus 20: 60 in all.
        assert_eq!(f.peak_store_ops_per_second(), 60);
    }

    #[test]
    fn footprint_of_one_sample_is_that_sample() {
        let mut f = Footprint::default();
        f.add(sample(0.0, 0, 4, 0));
        assert_eq!(f.request_mean().0, 4.0);
        assert_eq!(f.time_mean().0, 4.0);
        assert_eq!(f.peak_store_ops_per_second(), 0);
    }

    #[test]
    fn schedule_divides_trace_gaps_by_the_speed() {
        let now = Instant::now();
        let mut s = Schedule::new(4.0);
        assert_eq!(s.due(100.0, now).unwrap(), Some(now));
        assert_eq!(
            s.due(102.0, now).unwrap(),
            Some(now + Duration::from_millis(500))
        );
        // Out of order: due at once, never before the start.
        assert_eq!(s.due(50.0, now).unwrap(), Some(now));
        assert!(s.due(f64::MAX, now).is_err());
        s.sent(Some(now), now + Duration::from_millis(3));
        assert_eq!(s.max_lag, Duration::from_millis(3));

        let mut flat_out = Schedule::new(0.0);
        assert_eq!(flat_out.due(5.0, now).unwrap(), None);
    }

    fn request(op: Op, key: u64) -> Request {
        Request {
            op,
            key,
            ..Request::default()
        }
    }

    fn done(request: Request, nil: bool) -> Outcome {
        Outcome {
            request,
            latency: Duration::ZERO,
            nil,
            filled: nil,
            error: None,
        }
    }

    #[test]
    fn writes_to_a_key_never_overlap_other_requests_for_it() {
        let mut keys = KeysInFlight::default();
        let (get, put, del) = (
            request(Op::Get, 1),
            request(Op::Put, 1),
            request(Op::Delete, 1),
        );
        keys.start(&put);
        assert!(!keys.may_start(&get), "a lookup waits for the put");
        assert!(!keys.may_start(&del));
        assert!(keys.may_start(&request(Op::Put, 2)), "other keys are free");
        keys.finish(&done(put, false));
        assert!(keys.keys.is_empty());
        keys.start(&get);
        assert!(!keys.may_start(&put), "a put waits for the lookup");
        assert!(
            keys.may_start(&request(Op::Access, 1)),
            "key 1 is stored: lookups overlap"
        );
        keys.finish(&done(get, false));
        assert!(keys.may_start(&del));
        assert!(keys.keys.is_empty());
    }

    #[test]
    fn lookups_of_an_unknown_key_go_one_at_a_time_until_it_is_stored() {
        let mut keys = KeysInFlight::default();
        let get = request(Op::Access, 7);
        keys.start(&get);
        assert!(!keys.may_start(&get), "the first lookup may come back nil");
        keys.finish(&done(get, true));
        keys.start(&get);
        assert!(keys.may_start(&get), "filled: now stored");
        keys.finish(&done(get, false));
        keys.start(&request(Op::Delete, 7));
        keys.finish(&done(request(Op::Delete, 7), false));
        keys.start(&get);
        assert!(!keys.may_start(&get), "deleted: unknown again");
        // The sentinel key is never known stored, only serialised.
        let max = request(Op::Get, NO_KEY);
        keys.finish(&done(max, false));
        keys.start(&max);
        assert!(!keys.may_start(&max));
    }

    #[test]
    fn policy_figures_are_the_growth_during_the_replay() {
        let status = |active: &str, ticks: i64, fallbacks: i64| {
            vec![
                ("active".to_string(), data(active)),
                ("ticks".to_string(), Reply::Int(ticks)),
                ("actions".to_string(), Reply::Int(ticks / 2)),
                ("errors".to_string(), Reply::Int(0)),
                ("fallbacks".to_string(), Reply::Int(fallbacks)),
            ]
        };
        assert!(PolicyRun::between(status("", 0, 0), status("", 5, 0)).is_none());
        assert!(PolicyRun::between(Vec::new(), Vec::new()).is_none());
        let run = PolicyRun::between(status("cap@2", 10, 0), status("cap@2", 30, 0)).unwrap();
        let v = run.to_json();
        assert_eq!(v["name"], "cap");
        assert_eq!(v["version"], 2);
        assert_eq!(v["ticks"], 20);
        assert_eq!(v["actions"], 10);
        assert!(v["fallback"].is_null());
        let rolled = PolicyRun::between(status("cap@2", 0, 0), status("cap@1", 3, 1)).unwrap();
        assert!(rolled.to_json()["fallback"]
            .as_str()
            .unwrap()
            .contains("cap@1"));
    }
}
