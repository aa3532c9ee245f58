//! `GET /metrics`: gathers what the server's [`Metrics`](crate::metrics::Metrics) does not keep
//! (the cache's snapshot, the upstream's health) and has `metrics::exposition` encode it all.

use crate::instance::Instance;
use crate::metrics::{Readings, Stats, UpstreamFigures};
use std::sync::Arc;
use store::Storage;

pub use crate::metrics::CONTENT_TYPE;

/// The exposition text.
pub fn render(instance: &Arc<Instance>) -> String {
    let upstream = instance.db.store().upstream().map(|upstream| {
        let counters = upstream.counters();
        UpstreamFigures {
            up: upstream.state() == "ok",
            failures: Stats::read(&counters.failures),
            timeouts: Stats::read(&counters.timeouts),
            fast_failures: Stats::read(&counters.fast_failures),
        }
    });
    let readings = Readings {
        cache: instance.db.cache_snapshot(),
        upstream,
        command_names: crate::cmd::COMMANDS.iter().map(|spec| spec.name).collect(),
    };
    crate::metrics::render(instance.db.metrics(), readings)
}
