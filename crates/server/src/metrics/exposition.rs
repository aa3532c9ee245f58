//! `GET /metrics`: [`Metrics`] in the Prometheus/OpenMetrics text format, encoded by the
//! `prometheus-client` crate (names, `_total` suffixes, label escaping). The counters stay the
//! server's relaxed atomics; a collector registered in the registry reads them at scrape
//! time together with the figures other owners keep ([`Readings`]: the cache's, the
//! upstream's), so the request path never touches the registry.

use super::{CacheSnapshot, Metrics, PolicyGauges, Stats};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::Arc;

/// The `Content-Type` of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What a scrape shows besides the counters of [`Metrics`], read by its caller from the
/// modules that keep it.
#[derive(Clone, Debug)]
pub struct Readings {
    pub cache: CacheSnapshot,
    /// With an upstream store.
    pub upstream: Option<UpstreamFigures>,
    /// The command table's names, by row (what [`super::CommandLatencies`] is indexed by).
    pub command_names: Vec<&'static str>,
}

/// The upstream store's health.
#[derive(Clone, Copy, Debug, Default)]
pub struct UpstreamFigures {
    /// The circuit breaker is closed.
    pub up: bool,
    pub failures: u64,
    pub timeouts: u64,
    pub fast_failures: u64,
}

/// Reads the metrics on every scrape.
struct ServerCollector {
    metrics: Arc<Metrics>,
    readings: Readings,
}

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

/// Name, help, type and value of one unlabelled metric.
type Row = (&'static str, &'static str, MetricType, u64);

impl ServerCollector {
    fn rows(&self) -> Vec<Row> {
        use MetricType::{Counter, Gauge};
        let (stats, guards) = (&self.metrics.stats, &self.metrics.guards);
        let policy = &self.metrics.policy;
        let cache = &self.readings.cache;
        let read = Stats::read;
        let gauge = PolicyGauges::read;
        let mut rows: Vec<Row> = vec![
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
                cache.objects,
            ),
            (
                "mantle_cache_bytes",
                "Bytes charged to the cache.",
                Gauge,
                cache.bytes,
            ),
            (
                "mantle_cache_capacity_objects",
                "Object capacity (0: unlimited).",
                Gauge,
                cache.capacity.objects.unwrap_or(0),
            ),
            (
                "mantle_cache_capacity_bytes",
                "Byte capacity (0: unlimited).",
                Gauge,
                cache.capacity.bytes.unwrap_or(0),
            ),
            (
                "mantle_cache_evictions",
                "Objects evicted.",
                Counter,
                cache.evictions,
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
                gauge(&policy.ticks),
            ),
            (
                "mantle_policy_actions",
                "Ticks whose decision acted on the cache.",
                Counter,
                gauge(&policy.actions),
            ),
            (
                "mantle_policy_errors",
                "Policy ticks that failed.",
                Counter,
                gauge(&policy.errors),
            ),
            (
                "mantle_policy_fallbacks",
                "Automatic rollbacks of failing versions.",
                Counter,
                gauge(&policy.fallbacks),
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
        if let Some(upstream) = self.readings.upstream {
            rows.extend([
                (
                    "mantle_upstream_up",
                    "0 while the upstream's circuit breaker is open.",
                    Gauge,
                    u64::from(upstream.up),
                ),
                (
                    "mantle_upstream_failures",
                    "Upstream operations that failed (timeouts, connection and protocol failures).",
                    Counter,
                    upstream.failures,
                ),
                (
                    "mantle_upstream_timeouts",
                    "Upstream operations that ran out of --upstream-timeout.",
                    Counter,
                    upstream.timeouts,
                ),
                (
                    "mantle_upstream_fast_failures",
                    "Requests failed at once while the upstream's breaker was open.",
                    Counter,
                    upstream.fast_failures,
                ),
            ]);
        }
        let progress = &self.metrics.warmup;
        rows.extend([
            (
                "mantle_warmup_loaded_keys",
                "Keys the warm-up bulk fill has put into the cache.",
                Gauge,
                read(&progress.loaded),
            ),
            (
                "mantle_warmup_total_keys",
                "Keys the warm-up strategy chose to load.",
                Gauge,
                read(&progress.total),
            ),
            (
                "mantle_warmup_done",
                "1 once the warm-up bulk fill has finished.",
                Gauge,
                u64::from(progress.is_done()),
            ),
        ]);
        rows
    }
}

impl Collector for ServerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, help, kind, value) in self.rows() {
            one(&mut encoder, name, help, kind, value)?;
        }
        let policy = &self.metrics.policy;
        let mut metric = encoder.encode_descriptor(
            "mantle_policy_active_version",
            "Registry version of the active policy (0: none).",
            None,
            MetricType::Gauge,
        )?;
        let labels = [("policy", policy.active())];
        ConstGauge::new(PolicyGauges::read(&policy.active_version))
            .encode(metric.encode_family(&labels)?)?;

        encode_shadows(&mut encoder, &self.metrics.shadows.read())?;

        encode_commands(
            &mut encoder,
            &self.metrics.commands,
            &self.readings.command_names,
        )?;

        let (buckets, sum, count) = self.metrics.store_read.buckets();
        let mut metric = encoder.encode_descriptor(
            "mantle_store_read_seconds",
            "Latency of reads from the back-end store (cache misses and warm-up loads).",
            None,
            MetricType::Histogram,
        )?;
        metric.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }
}

/// One histogram series per command that ran, labelled by its name, with power-of-two
/// microsecond buckets (see [`super::CommandFigures::power_of_two_buckets`]).
fn encode_commands(
    encoder: &mut DescriptorEncoder,
    latencies: &super::CommandLatencies,
    names: &[&'static str],
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(
        "mantle_command_duration_seconds",
        "Time to run each command, from parsed request to reply (a deferred SET counts its share of its batch).",
        None,
        MetricType::Histogram,
    )?;
    for (row, name) in names.iter().enumerate() {
        let figures = latencies.read(row);
        if figures.calls == 0 {
            continue;
        }
        let mut buckets: Vec<(f64, u64)> = Vec::new();
        let mut previous = 0;
        for (us, cumulative) in figures.power_of_two_buckets() {
            buckets.push((us as f64 / 1e6, cumulative - previous));
            previous = cumulative;
        }
        buckets.push((f64::INFINITY, figures.calls - previous));
        let labels = [("command", *name)];
        metric
            .encode_family(&labels)?
            .encode_histogram::<NoLabelSet>(
                figures.total_us / 1e6,
                figures.calls,
                &buckets,
                None,
            )?;
    }
    Ok(())
}

/// Every candidate's window figures, one series per candidate labelled by its name and role
/// (`active`: the real cache under the running version; `shadow`), and the switch's counts.
fn encode_shadows(
    encoder: &mut DescriptorEncoder,
    report: &super::ShadowReport,
) -> Result<(), std::fmt::Error> {
    type Read = fn(&super::CandidateFigures) -> f64;
    let series: [(&str, &str, Read); 8] = [
        (
            "mantle_shadow_hit_ratio",
            "Hit ratio over the last window of ticks.",
            |c| c.window.hit_ratio,
        ),
        (
            "mantle_shadow_misses",
            "Misses (back-end reads) over the last window, scaled to the whole key space.",
            |c| c.window.misses,
        ),
        (
            "mantle_shadow_mean_objects",
            "Request-weighted mean of the cached objects over the last window.",
            |c| c.window.mean_objects,
        ),
        (
            "mantle_shadow_peak_objects",
            "Peak of the cached objects over the last window.",
            |c| c.window.peak_objects,
        ),
        (
            "mantle_shadow_mean_bytes",
            "Request-weighted mean of the cached bytes over the last window.",
            |c| c.window.mean_bytes,
        ),
        (
            "mantle_shadow_decisions",
            "Ticks of the last window whose decision acted on the cache (shadows).",
            |c| c.window.decisions as f64,
        ),
        (
            "mantle_shadow_errors",
            "Ticks of the last window that failed (shadows).",
            |c| c.window.errors as f64,
        ),
        (
            "mantle_shadow_sample",
            "Share of the key space the candidate sees.",
            |c| c.sample,
        ),
    ];
    if !report.candidates.is_empty() {
        for (name, help, read) in series {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for c in &report.candidates {
                let labels = [("candidate", c.name.clone()), ("role", c.role.to_string())];
                ConstGauge::new(read(c)).encode(metric.encode_family(&labels)?)?;
            }
        }
    }
    for (name, help, value) in [
        (
            "mantle_shadow_events_dropped",
            "Accesses the request path could not hand to the shadows (queue full).",
            report.dropped,
        ),
        (
            "mantle_switches",
            "Versions the switch policy activated.",
            report.switches,
        ),
        (
            "mantle_switch_errors",
            "Switch policy calls that failed.",
            report.switch_errors,
        ),
    ] {
        one(encoder, name, help, MetricType::Counter, value)?;
    }
    Ok(())
}

/// The exposition text of `metrics`, with `readings` for the figures it does not keep.
pub fn render(metrics: &Arc<Metrics>, readings: Readings) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ServerCollector {
        metrics: metrics.clone(),
        readings,
    }));
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
    use crate::metrics::LatencyHistogram;
    use std::time::Duration;

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

    #[test]
    fn a_scrape_shows_counters_readings_and_the_escaped_policy_label() {
        let metrics = Arc::new(Metrics::default());
        Stats::bump(&metrics.stats.cache_hits);
        *metrics.policy.active.lock().unwrap() = "p\"q@2".into();
        metrics.store_read.observe(Duration::from_micros(7));
        let readings = Readings {
            cache: CacheSnapshot {
                algorithm: cache::Algorithm::Lru,
                objects: 3,
                bytes: 30,
                capacity: cache::Capacity::objects(10),
                evictions: 0,
                metadata_bytes: 0,
                object_overhead: 0,
            },
            upstream: None,
            command_names: vec!["get", "set"],
        };
        metrics.commands.record(1, Duration::from_micros(3), 1);
        metrics.commands.record(1, Duration::from_micros(300), 1);
        let out = render(&metrics, readings);
        assert!(
            out.contains("# TYPE mantle_command_duration_seconds histogram"),
            "{out}"
        );
        assert!(
            out.contains(
                "mantle_command_duration_seconds_bucket{le=\"0.000004\",command=\"set\"} 1\n"
            ),
            "{out}"
        );
        assert!(
            out.contains("mantle_command_duration_seconds_bucket{le=\"+Inf\",command=\"set\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("mantle_command_duration_seconds_count{command=\"set\"} 2\n"),
            "{out}"
        );
        assert!(!out.contains("command=\"get\""), "{out}");
        assert!(out.contains("mantle_cache_hits_total 1\n"), "{out}");
        assert!(out.contains("mantle_cache_objects 3\n"), "{out}");
        assert!(
            out.contains("mantle_policy_active_version{policy=\"p\\\"q@2\"} 0\n"),
            "{out}"
        );
        assert!(out.contains("mantle_store_read_seconds_count 1\n"), "{out}");
        assert!(!out.contains("mantle_upstream_up"), "{out}");
        assert!(out.ends_with("# EOF\n"), "{out}");
    }
}
