//! A cluster node in front of an upstream (`--cluster` with `--upstream`, a pure cache tier)
//! takes over the slots of cache-tier nodes that died, so clients are served on every slot
//! again a few seconds after a crash (see `cluster::failover`). A node with its own RocksDB
//! only clears its cache-tier mark: its slots wait for it.
//!
//! A node counts as dead only after it has been absent for `failover::grace` with etcd
//! answering throughout: an etcd outage lets every lease lapse at once, and the nodes rejoin
//! when etcd is back; none of them failed, so nothing is reassigned.

use crate::cluster::ClusterNode;
use cluster::failover::{self, Absences};
use cluster::{CentralLog, Level, LogEntry, LogKind, NodeId};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the check runs when nothing wakes it (a failed attempt is retried then).
const RECHECK: Duration = Duration::from_millis(500);

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
    let grace = failover::grace(node.ttl, plane.config().timeout);
    let log = CentralLog::new(
        plane.clone(),
        node.id.clone(),
        crate::cluster::CENTRAL_LOG_CAPACITY,
    );
    Ok(Some(tokio::spawn(async move {
        let mut changes = watch.subscribe();
        let mut absences = Absences::default();
        loop {
            let _ = tokio::time::timeout(RECHECK, changes.changed()).await;
            let view = changes.borrow_and_update().clone();
            let absent: BTreeSet<NodeId> = view
                .slot_map
                .as_ref()
                .map(|map| {
                    map.value
                        .owners
                        .iter()
                        .filter(|(id, ranges)| {
                            !ranges.is_empty() && !view.members.contains_key(*id)
                        })
                        .map(|(id, _)| id.clone())
                        .collect()
                })
                .unwrap_or_default();
            let now = Instant::now();
            absences.observe(now, view.connected, &absent);
            let dead = absences.dead(now, grace);
            if dead.is_empty() {
                continue;
            }
            match failover::take_over_dead(&plane, &dead).await {
                Ok(Some(map)) => {
                    let names: Vec<&str> = dead.iter().map(NodeId::as_str).collect();
                    let message = format!(
                        "slots of {} reassigned to the live cache-tier nodes (map epoch {}): absent from the members for {grace:?} while etcd answered",
                        names.join(", "),
                        map.value.epoch
                    );
                    store::log_line!("mantle: cluster: {message}");
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
                Err(e) => store::log_line!("mantle: cluster: reassigning slots: {e}"),
            }
        }
    })))
}
