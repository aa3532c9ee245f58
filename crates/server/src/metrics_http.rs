//! `--metrics-listen ADDR`: the server's numbers in Prometheus's text exposition format at
//! `GET /metrics`, for dashboards and alerts. A deliberately tiny HTTP/1.x responder (one
//! request per connection, bounded request head, short timeout, at most
//! [`MAX_CONNECTIONS`] at once): scrapers need nothing more, and it keeps a web framework out
//! of the cache tier.

use crate::instance::Instance;
use crate::live::Gauges;
use crate::stats::Stats;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

/// Largest request head read; scrapers send a few hundred bytes.
const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// A scraper that has not sent its request and read the answer by then is dropped.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Most scrape connections served at once; more are answered 503 and closed at once, so
/// idle connections cannot pile up tasks and sockets (a scraper needs one).
pub const MAX_CONNECTIONS: usize = 16;
const BUSY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Upper bounds, in microseconds, of the store read latency histogram's buckets: from a
/// memtable hit (a few microseconds) to a read stuck behind a compaction stall.
pub const READ_LATENCY_BOUNDS_US: [u64; 14] = [
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 50_000, 250_000, 1_000_000,
];

/// A Prometheus histogram of durations: fixed buckets of relaxed atomic counters, so
/// observing costs a few adds and never allocates or locks.
#[derive(Default)]
pub struct LatencyHistogram {
    /// Per bucket (not cumulative); the last one is `+Inf`.
    buckets: [AtomicU64; READ_LATENCY_BOUNDS_US.len() + 1],
    sum_ns: AtomicU64,
    count: AtomicU64,
}

impl LatencyHistogram {
    pub fn observe(&self, elapsed: Duration) {
        let us = elapsed.as_micros().min(u128::from(u64::MAX)) as u64;
        let bucket = READ_LATENCY_BOUNDS_US.partition_point(|&bound| bound < us);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let ns = elapsed.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Writes the histogram's `_bucket`, `_sum` and `_count` series.
    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            let le = match READ_LATENCY_BOUNDS_US.get(i) {
                Some(&us) => format!("{}", us as f64 / 1e6),
                None => "+Inf".to_string(),
            };
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {cumulative}");
    }
}

/// Serves until `stop` turns true.
pub async fn serve(
    listener: TcpListener,
    instance: Arc<Instance>,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((socket, _)) = accepted {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        // Never waits: a full socket buffer just loses the courtesy answer.
                        let _ = socket.try_write(BUSY);
                        continue;
                    };
                    let instance = instance.clone();
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(REQUEST_TIMEOUT, answer(socket, &instance)).await;
                        drop(slot);
                    });
                } else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            _ = stop.changed() => return,
        }
    }
}

async fn answer(mut socket: TcpStream, instance: &Instance) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = socket.read(&mut chunk).await?;
        if n == 0 || head.len() + n > MAX_REQUEST_HEAD {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, path) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    );
    let path = path.split(|&b| b == b'?').next().unwrap_or_default();
    let (status, body, kind) = if method != b"GET" {
        (
            "405 Method Not Allowed",
            "only GET\n".to_string(),
            "text/plain",
        )
    } else if path == b"/metrics" {
        (
            "200 OK",
            render(instance),
            "text/plain; version=0.0.4; charset=utf-8",
        )
    } else {
        ("404 Not Found", "see /metrics\n".to_string(), "text/plain")
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(response.as_bytes()).await?;
    socket.shutdown().await
}

/// The exposition text.
pub fn render(instance: &Instance) -> String {
    let stats = instance.db.stats();
    let snapshot = instance.db.cache_snapshot();
    let gauges: &Gauges = &instance.live.gauges;
    let mut out = String::with_capacity(4096);
    let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    let read = Stats::read;
    metric(
        "mantle_commands_total",
        "counter",
        "Commands processed.",
        read(&stats.commands_processed),
    );
    metric(
        "mantle_cache_hits_total",
        "counter",
        "Lookups answered from the cache.",
        read(&stats.cache_hits),
    );
    metric(
        "mantle_cache_misses_total",
        "counter",
        "Lookups that went to the store.",
        read(&stats.cache_misses),
    );
    metric(
        "mantle_cache_objects",
        "gauge",
        "Objects cached.",
        snapshot.objects,
    );
    metric(
        "mantle_cache_bytes",
        "gauge",
        "Bytes charged to the cache.",
        snapshot.bytes,
    );
    metric(
        "mantle_cache_capacity_objects",
        "gauge",
        "Object capacity (0: unlimited).",
        snapshot.capacity.objects.unwrap_or(0),
    );
    metric(
        "mantle_cache_capacity_bytes",
        "gauge",
        "Byte capacity (0: unlimited).",
        snapshot.capacity.bytes.unwrap_or(0),
    );
    metric(
        "mantle_cache_evictions_total",
        "counter",
        "Objects evicted.",
        snapshot.evictions,
    );
    metric(
        "mantle_store_reads_total",
        "counter",
        "Reads sent to the back-end store.",
        read(&stats.store_reads),
    );
    metric(
        "mantle_store_writes_total",
        "counter",
        "Writes sent to the back-end store.",
        read(&stats.store_writes),
    );
    metric(
        "mantle_store_errors_total",
        "counter",
        "Back-end store failures.",
        read(&stats.store_errors),
    );
    metric(
        "mantle_connected_clients",
        "gauge",
        "Clients connected.",
        read(&stats.connected_clients),
    );
    metric(
        "mantle_policy_ticks_total",
        "counter",
        "Policy decision ticks run.",
        Gauges::read(&gauges.ticks),
    );
    metric(
        "mantle_policy_actions_total",
        "counter",
        "Ticks whose decision acted on the cache.",
        Gauges::read(&gauges.actions),
    );
    metric(
        "mantle_policy_errors_total",
        "counter",
        "Policy ticks that failed.",
        Gauges::read(&gauges.errors),
    );
    metric(
        "mantle_policy_fallbacks_total",
        "counter",
        "Automatic rollbacks of failing versions.",
        Gauges::read(&gauges.fallbacks),
    );
    let guards = &instance.guards;
    metric(
        "mantle_client_output_limit_rejections_total",
        "counter",
        "Replies refused for exceeding --client-output-limit.",
        read(&guards.output_rejections),
    );
    metric(
        "mantle_auth_failures_total",
        "counter",
        "Wrong passwords given to AUTH or HELLO.",
        read(&guards.auth_failures),
    );
    if let crate::store::Store::Upstream(upstream) = instance.db.store() {
        let counters = upstream.counters();
        metric(
            "mantle_upstream_up",
            "gauge",
            "0 while the upstream's circuit breaker is open.",
            u64::from(upstream.state() == "ok"),
        );
        metric(
            "mantle_upstream_failures_total",
            "counter",
            "Upstream operations that failed (timeouts, connection and protocol failures).",
            read(&counters.failures),
        );
        metric(
            "mantle_upstream_timeouts_total",
            "counter",
            "Upstream operations that ran out of --upstream-timeout.",
            read(&counters.timeouts),
        );
        metric(
            "mantle_upstream_fast_failures_total",
            "counter",
            "Requests failed at once while the upstream's breaker was open.",
            read(&counters.fast_failures),
        );
    }
    let progress = &instance.db.warmup().progress;
    let read = crate::warmup::Progress::read;
    metric(
        "mantle_warmup_loaded_keys",
        "gauge",
        "Keys the warm-up bulk fill has put into the cache.",
        read(&progress.loaded),
    );
    metric(
        "mantle_warmup_total_keys",
        "gauge",
        "Keys the warm-up strategy chose to load.",
        read(&progress.total),
    );
    metric(
        "mantle_warmup_done",
        "gauge",
        "1 once the warm-up bulk fill has finished.",
        u64::from(progress.is_done()),
    );
    let active = gauges.active();
    let _ = writeln!(
        out,
        "# HELP mantle_policy_active_version Registry version of the active policy (0: none).\n\
         # TYPE mantle_policy_active_version gauge\n\
         mantle_policy_active_version{{policy=\"{}\"}} {}",
        active.replace(['"', '\\', '\n'], "_"),
        Gauges::read(&gauges.active_version)
    );
    instance.db.store_read_latency().render(
        "mantle_store_read_seconds",
        "Latency of reads from the back-end store (cache misses and warm-up loads).",
        &mut out,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_are_cumulative_and_end_at_inf() {
        let histogram = LatencyHistogram::default();
        for us in [3, 5, 6, 700, 5_000_000] {
            histogram.observe(Duration::from_micros(us));
        }
        let mut out = String::new();
        histogram.render("x", "h", &mut out);
        assert!(out.contains("# TYPE x histogram"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.000005\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.00001\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.001\"} 4\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"1\"} 4\n"), "{out}");
        assert!(
            out.contains("x_bucket{le=\"+Inf\"} 5\nx_sum 5.000714\nx_count 5\n"),
            "{out}"
        );
        assert_eq!(histogram.count(), 5);
    }
}
