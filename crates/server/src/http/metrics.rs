//! `GET /metrics`: the server's numbers in the Prometheus/OpenMetrics text format, encoded by
//! the `prometheus-client` crate (names, `_total` suffixes, label escaping). The numbers live
//! in the server's own relaxed atomics; a [`Collector`] reads them at scrape time, so the
//! request path never touches anything of this module but [`LatencyHistogram::observe`].

use crate::instance::Instance;
use crate::live::Gauges;
use crate::stats::Stats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The `Content-Type` of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds, in microseconds, of the store read latency histogram's buckets: from a
/// memtable hit (a few microseconds) to a read stuck behind a compaction stall.
pub const READ_LATENCY_BOUNDS_US: [u64; 14] = [
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 50_000, 250_000, 1_000_000,
];

/// A Prometheus histogram of durations: fixed buckets of relaxed atomic counters, so
/// observing costs a few adds and never allocates or locks.
#[derive(Default, Debug)]
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

    /// `(upper bound in seconds, observations in that bucket)`, the last bound infinite, and
    /// the sum in seconds; the count is the buckets' total, so the three always agree.
    fn buckets(&self) -> (Vec<(f64, u64)>, f64, u64) {
        let buckets: Vec<(f64, u64)> = self
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let bound = READ_LATENCY_BOUNDS_US
                    .get(i)
                    .map_or(f64::INFINITY, |&us| us as f64 / 1e6);
                (bound, b.load(Ordering::Relaxed))
            })
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        (buckets, sum, count)
    }
}

/// Reads the instance's counters on every scrape.
struct ServerCollector(Arc<Instance>);

impl std::fmt::Debug for ServerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerCollector")
    }
}

/// Writes one unlabelled counter or gauge. Counter names are given without `_total`: the
/// encoder appends it.
fn one(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let metric = encoder.encode_descriptor(name, help, None, kind)?;
    match kind {
        MetricType::Counter => ConstCounter::new(value).encode(metric),
        _ => ConstGauge::new(value).encode(metric),
    }
}

impl Collector for ServerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use MetricType::{Counter, Gauge};
        let instance = &self.0;
        let stats = instance.db.stats();
        let snapshot = instance.db.cache_snapshot();
        let gauges: &Gauges = &instance.live.gauges;
        let read = Stats::read;
        let guards = &instance.guards;
        let mut rows: Vec<(&str, &str, MetricType, u64)> = vec![
            (
                "mantle_commands",
                "Commands processed.",
                Counter,
                read(&stats.commands_processed),
            ),
            (
                "mantle_cache_hits",
                "Lookups answered from the cache.",
                Counter,
                read(&stats.cache_hits),
            ),
            (
                "mantle_cache_misses",
                "Lookups that went to the store.",
                Counter,
                read(&stats.cache_misses),
            ),
            (
                "mantle_cache_objects",
                "Objects cached.",
                Gauge,
                snapshot.objects,
            ),
            (
                "mantle_cache_bytes",
                "Bytes charged to the cache.",
                Gauge,
                snapshot.bytes,
            ),
            (
                "mantle_cache_capacity_objects",
                "Object capacity (0: unlimited).",
                Gauge,
                snapshot.capacity.objects.unwrap_or(0),
            ),
            (
                "mantle_cache_capacity_bytes",
                "Byte capacity (0: unlimited).",
                Gauge,
                snapshot.capacity.bytes.unwrap_or(0),
            ),
            (
                "mantle_cache_evictions",
                "Objects evicted.",
                Counter,
                snapshot.evictions,
            ),
            (
                "mantle_store_reads",
                "Reads sent to the back-end store.",
                Counter,
                read(&stats.store_reads),
            ),
            (
                "mantle_store_writes",
                "Writes sent to the back-end store.",
                Counter,
                read(&stats.store_writes),
            ),
            (
                "mantle_store_errors",
                "Back-end store failures.",
                Counter,
                read(&stats.store_errors),
            ),
            (
                "mantle_connected_clients",
                "Clients connected.",
                Gauge,
                read(&stats.connected_clients),
            ),
            (
                "mantle_policy_ticks",
                "Policy decision ticks run.",
                Counter,
                Gauges::read(&gauges.ticks),
            ),
            (
                "mantle_policy_actions",
                "Ticks whose decision acted on the cache.",
                Counter,
                Gauges::read(&gauges.actions),
            ),
            (
                "mantle_policy_errors",
                "Policy ticks that failed.",
                Counter,
                Gauges::read(&gauges.errors),
            ),
            (
                "mantle_policy_fallbacks",
                "Automatic rollbacks of failing versions.",
                Counter,
                Gauges::read(&gauges.fallbacks),
            ),
            (
                "mantle_client_output_limit_rejections",
                "Replies refused for exceeding --client-output-limit.",
                Counter,
                read(&guards.output_rejections),
            ),
            (
                "mantle_auth_failures",
                "Wrong passwords given to AUTH, HELLO or the dashboard's admin actions.",
                Counter,
                read(&guards.auth_failures),
            ),
        ];
        if let crate::store::Store::Upstream(upstream) = instance.db.store() {
            let counters = upstream.counters();
            rows.extend([
                (
                    "mantle_upstream_up",
                    "0 while the upstream's circuit breaker is open.",
                    Gauge,
                    u64::from(upstream.state() == "ok"),
                ),
                (
                    "mantle_upstream_failures",
                    "Upstream operations that failed (timeouts, connection and protocol failures).",
                    Counter,
                    read(&counters.failures),
                ),
                (
                    "mantle_upstream_timeouts",
                    "Upstream operations that ran out of --upstream-timeout.",
                    Counter,
                    read(&counters.timeouts),
                ),
                (
                    "mantle_upstream_fast_failures",
                    "Requests failed at once while the upstream's breaker was open.",
                    Counter,
                    read(&counters.fast_failures),
                ),
            ]);
        }
        let progress = &instance.db.warmup().progress;
        let loaded = crate::warmup::Progress::read;
        rows.extend([
            (
                "mantle_warmup_loaded_keys",
                "Keys the warm-up bulk fill has put into the cache.",
                Gauge,
                loaded(&progress.loaded),
            ),
            (
                "mantle_warmup_total_keys",
                "Keys the warm-up strategy chose to load.",
                Gauge,
                loaded(&progress.total),
            ),
            (
                "mantle_warmup_done",
                "1 once the warm-up bulk fill has finished.",
                Gauge,
                u64::from(progress.is_done()),
            ),
        ]);
        for (name, help, kind, value) in rows {
            one(&mut encoder, name, help, kind, value)?;
        }

        let mut metric = encoder.encode_descriptor(
            "mantle_policy_active_version",
            "Registry version of the active policy (0: none).",
            None,
            Gauge,
        )?;
        let labels = [("policy", gauges.active())];
        ConstGauge::new(Gauges::read(&gauges.active_version))
            .encode(metric.encode_family(&labels)?)?;

        let (buckets, sum, count) = instance.db.store_read_latency().buckets();
        let mut metric = encoder.encode_descriptor(
            "mantle_store_read_seconds",
            "Latency of reads from the back-end store (cache misses and warm-up loads).",
            None,
            MetricType::Histogram,
        )?;
        metric.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }
}

/// The exposition text.
pub fn render(instance: &Arc<Instance>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ServerCollector(instance.clone())));
    let mut out = String::with_capacity(8192);
    // Writing to a String cannot fail; an encoder error would be a bug in a label value.
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        out.push_str("# encoding failed\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct One(Arc<LatencyHistogram>);

    impl Collector for One {
        fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            let (buckets, sum, count) = self.0.buckets();
            let mut metric = encoder.encode_descriptor("x", "h", None, MetricType::Histogram)?;
            metric.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
        }
    }

    #[test]
    fn latency_buckets_are_cumulative_and_end_at_inf() {
        let histogram = Arc::new(LatencyHistogram::default());
        for us in [3, 5, 6, 700, 5_000_000] {
            histogram.observe(Duration::from_micros(us));
        }
        let mut registry = Registry::default();
        registry.register_collector(Box::new(One(histogram.clone())));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        assert!(out.contains("# TYPE x histogram"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.000005\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.00001\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.001\"} 4\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"1.0\"} 4\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 5\n"), "{out}");
        assert!(out.contains("x_sum 5.000714\nx_count 5\n"), "{out}");
        assert_eq!(histogram.count(), 5);
    }

    #[derive(Debug)]
    struct Labelled(String);

    impl Collector for Labelled {
        fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            let mut metric = encoder.encode_descriptor("v", "h", None, MetricType::Gauge)?;
            ConstGauge::new(1u64).encode(metric.encode_family(&[("policy", self.0.clone())])?)
        }
    }

    #[test]
    fn label_values_are_escaped_not_mangled() {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Labelled("a\"b\\c\nd".into())));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        assert!(out.contains("v{policy=\"a\\\"b\\\\c\\nd\"} 1\n"), "{out}");
    }
}
