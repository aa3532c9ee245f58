//! A cluster node in front of an upstream (`--cluster` with `--upstream`, a pure cache tier)
//! takes over the slots of cache-tier nodes that died, so clients are served on every slot
//! again about one lease TTL after a crash (see `cluster::failover`). A node with its own
//! RocksDB only clears its cache-tier mark: its slots wait for it.

use crate::cluster::ClusterNode;
use cluster::failover;
use cluster::{CentralLog, Level, LogEntry, LogKind};
use std::sync::Arc;
use std::time::Duration;

/// How often the check runs when nothing wakes it (a failed attempt is retried then).
const RECHECK: Duration = Duration::from_secs(1);

/// Marks (or unmarks) this node as a cache tier and, for a cache tier, starts the task that
/// takes over dead nodes' slots.
pub async fn start(
    node: &Arc<ClusterNode>,
    cache_tier: bool,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    failover::mark_cache_tier(node.plane(), &node.id, cache_tier).await?;
    if !cache_tier {
        return Ok(None);
    }
    let watch = node.plane().watch().await?;
    let plane = node.plane().clone();
    let log = CentralLog::new(
        plane.clone(),
        node.id.clone(),
        crate::cluster::policy::CENTRAL_LOG_CAPACITY,
    );
    Ok(Some(tokio::spawn(async move {
        let mut changes = watch.subscribe();
        loop {
            let _ = tokio::time::timeout(RECHECK, changes.changed()).await;
            let view = changes.borrow_and_update().clone();
            let orphaned = view.connected
                && view.slot_map.as_ref().is_some_and(|map| {
                    map.value
                        .owners
                        .iter()
                        .any(|(id, ranges)| !ranges.is_empty() && !view.members.contains_key(id))
                });
            if !orphaned {
                continue;
            }
            match failover::take_over_dead(&plane).await {
                Ok(Some(map)) => {
                    let message = format!(
                        "slots of nodes that left reassigned to the live cache-tier nodes (map epoch {})",
                        map.value.epoch
                    );
                    crate::log::log_line!("mantle: cluster: {message}");
                    let _ = log
                        .append(&[LogEntry::new(
                            Level::Warn,
                            LogKind::SlotsReassigned,
                            "",
                            &message,
                        )])
                        .await;
                }
                Ok(None) => {}
                Err(e) => crate::log::log_line!("mantle: cluster: reassigning slots: {e}"),
            }
        }
    })))
}
