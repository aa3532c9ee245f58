//! Sends the trace's requests to the server (pipelined, bounded, on schedule) and counts what
//! comes back.

use super::keys::KeysInFlight;
use super::outcome::Outcome;
use super::route::Route;
use super::schedule::Schedule;
use super::server::{request_error, Server};
use super::{LiveOptions, MAX_IN_FLIGHT, MAX_LATENCY_US, MAX_VALUE_BYTES};
use anyhow::{anyhow, bail, Result};
use futures_util::stream::{FuturesUnordered, StreamExt};
use hdrhistogram::Histogram;
use redis::{RedisError, Value as Reply};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trace::{Op, Request};

/// What the replay itself counted: requests by operation, nil replies and the fills they
/// caused, failed requests, client-side latencies and the trace's time span.
pub(super) struct Tally {
    pub(super) requests: u64,
    pub(super) gets: u64,
    pub(super) accesses: u64,
    pub(super) puts: u64,
    pub(super) deletes: u64,
    pub(super) nil_replies: u64,
    pub(super) fills: u64,
    pub(super) errors: u64,
    pub(super) first_error: Option<String>,
    pub(super) lookup_latency: Histogram<u64>,
    pub(super) write_latency: Histogram<u64>,
    pub(super) first_time: Option<f64>,
    pub(super) last_time: f64,
}

impl Tally {
    pub(super) fn new() -> Result<Tally> {
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

    pub(super) fn sent(&mut self, r: &Request) {
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

    pub(super) fn completed(&mut self, outcome: &Outcome) {
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

/// Issues the trace's requests: at most [`MAX_IN_FLIGHT`] at once, writes to a key never
/// overlapping anything else on that key (see [`KeysInFlight`]), each no earlier than the
/// schedule says.
pub(super) struct Driver {
    pub(super) address: String,
    pub(super) route: Route,
    pub(super) schedule: Schedule,
    pub(super) max_requests: Option<u64>,
    zeros: Arc<[u8]>,
    pub(super) progress: Progress,
}

impl Driver {
    pub(super) fn new(server: &Server, options: &LiveOptions, started: Instant) -> Driver {
        Driver {
            address: server.address.clone(),
            route: Route::new(server.connection.clone(), options.password.clone()),
            schedule: Schedule::new(options.speed),
            max_requests: options.max_requests,
            zeros: Arc::from(vec![0u8; 4096]),
            progress: Progress::new(options.progress, started),
        }
    }

    pub(super) async fn run(
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
                        in_flight.push(issue(self.route.clone(), r, zeros));
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
    pub(super) fn value_buffer(&mut self, r: &Request) -> Result<Arc<[u8]>> {
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
pub(super) async fn issue(
    route: Route,
    request: Request,
    zeros: Arc<[u8]>,
) -> Result<Outcome, (Request, RedisError)> {
    let mut digits = itoa::Buffer::new();
    let key = digits.format(request.key);
    let slot = slots::key_slot(key.as_bytes());
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
        Op::Get | Op::Access => route.query(slot, redis::cmd("GET").arg(key)).await,
        Op::Put => {
            route
                .query(slot, redis::cmd("SET").arg(key).arg(value))
                .await
        }
        Op::Delete => route.query(slot, redis::cmd("DEL").arg(key)).await,
    };
    outcome.latency = started.elapsed();
    match reply {
        Ok(Reply::Nil) if matches!(request.op, Op::Get | Op::Access) => {
            outcome.nil = true;
            // The key is nowhere: store it, as the store behind a cache holds whatever is
            // read. NX: an overlapping lookup of the same key may have filled it already.
            let fill: Result<Reply, RedisError> = route
                .query(slot, redis::cmd("SET").arg(key).arg(value).arg("NX"))
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
pub(super) fn is_fatal(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_timeout()
        || err.code() == Some("NOAUTH")
}

/// The progress line on stderr, once a second after the first two.
pub(super) struct Progress {
    pub(super) enabled: bool,
    pub(super) started: Instant,
    pub(super) last_print: Option<Instant>,
}

impl Progress {
    pub(super) fn new(enabled: bool, started: Instant) -> Progress {
        Progress {
            enabled,
            started,
            last_print: None,
        }
    }

    pub(super) fn update(&mut self, requests: u64, lag: Duration) {
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
    pub(super) fn abandon(&self) {
        if self.last_print.is_some() {
            eprintln!();
        }
    }

    pub(super) fn finish(&self, requests: u64, wall: Duration) {
        if self.last_print.is_some() {
            eprintln!(
                "\rreplay --server: {requests} requests in {:.1}s                              ",
                wall.as_secs_f64()
            );
        }
    }
}
