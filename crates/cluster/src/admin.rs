//! What an operator does to a cluster (`mantle cluster status|rebalance|move`): read its
//! state, spread the slots over the live members, give a slot range to one member. Each
//! change of the map is one compare-and-swap, so it never races a node's own change; slots
//! that hold data move by migration (declared in the map, carried out by the source node,
//! flipped by it in one more compare-and-swap), which these calls wait for.

use crate::control::{ClusterError, ControlPlane, Versioned};
use crate::node::{Member, NodeId};
use crate::slotmap::{MapError, SlotMap};
use serde::Serialize;
use slots::SlotRange;
use std::time::{Duration, Instant};

/// A cluster's state as `mantle cluster status` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub name: String,
    pub members: Vec<Member>,
    /// `None` before the first node has joined.
    pub slot_map: Option<SlotMap>,
    pub revision: i64,
    /// Slots nobody owns.
    pub unassigned: Vec<SlotRange>,
    /// Owners that are not live members (their slots get `-CLUSTERDOWN`).
    pub failed: Vec<NodeId>,
}

impl Status {
    /// Healthy: every slot owned, every owner alive.
    pub fn ok(&self) -> bool {
        self.slot_map.is_some() && self.unassigned.is_empty() && self.failed.is_empty()
    }
}

pub async fn status(plane: &ControlPlane) -> Result<Status, ClusterError> {
    let members = plane.members().await?;
    let map = plane.slot_map().await?;
    let (slot_map, revision) = match map {
        Some(Versioned { value, revision }) => (Some(value), revision),
        None => (None, 0),
    };
    let unassigned = slot_map
        .as_ref()
        .map_or_else(|| vec![SlotRange::all()], SlotMap::unassigned);
    let failed = slot_map
        .as_ref()
        .map(|m| {
            m.owners
                .keys()
                .filter(|id| !members.contains_key(*id))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    Ok(Status {
        name: plane.config().name.clone(),
        members: members.into_values().collect(),
        slot_map,
        revision,
        unassigned,
        failed,
    })
}

/// How often a waiting operator command looks at the map.
const POLL: Duration = Duration::from_millis(50);
/// How long a waiting command keeps trying while etcd does not answer: a migration goes on
/// without etcd until its last step, so a short outage must not make the command fail.
const ETCD_PATIENCE: Duration = Duration::from_secs(30);
/// How long a migration's source or target may be missing from the members before the
/// command stops waiting for it.
const ABSENCE_PATIENCE: Duration = Duration::from_secs(1);

/// One step of a move, reported as it completes.
#[derive(Debug, Clone)]
pub struct Step {
    pub range: SlotRange,
    /// `None`: the slots were unowned and were simply assigned.
    pub from: Option<NodeId>,
    pub to: NodeId,
    pub took: Duration,
}

/// Spreads every slot evenly over the live members, moving as few as possible; each range
/// that changes owner migrates with its data, one after the other.
pub async fn rebalance(
    plane: &ControlPlane,
    mut progress: impl FnMut(&Step),
) -> Result<Versioned<SlotMap>, ClusterError> {
    let members: Vec<NodeId> = plane.members().await?.into_keys().collect();
    let now = current(plane).await?;
    let next = now.value.rebalance(&members)?;
    for (from, to, range) in now.value.moves_to(&next) {
        let step = transfer(plane, range, from, &to).await?;
        progress(&step);
    }
    // A member that died meanwhile may have been given slots (or kept its own): say so
    // rather than report a balanced cluster.
    let done = current(plane).await?;
    let live = plane.members().await?;
    let dead: Vec<String> = done
        .value
        .owners
        .iter()
        .filter(|(id, ranges)| !ranges.is_empty() && !live.contains_key(*id))
        .map(|(id, ranges)| {
            let n: usize = ranges.iter().map(SlotRange::len).sum();
            format!("{id} ({n} slots)")
        })
        .collect();
    if !dead.is_empty() {
        return Err(ClusterError::Incomplete(format!(
            "not balanced: {} left the cluster during the rebalance and their slots are not served; run `mantle cluster rebalance` again",
            dead.join(", ")
        )));
    }
    Ok(done)
}

/// Gives `range` to the live member `to`: each part owned by another node migrates with its
/// data (one after the other); unowned slots are simply assigned.
pub async fn move_slots(
    plane: &ControlPlane,
    range: SlotRange,
    to: &NodeId,
    mut progress: impl FnMut(&Step),
) -> Result<Versioned<SlotMap>, ClusterError> {
    if !plane.members().await?.contains_key(to) {
        return Err(ClusterError::NotAMember(to.clone()));
    }
    let now = current(plane).await?;
    for (from, part) in now.value.owners_of(range) {
        if from.as_ref() == Some(to) {
            continue;
        }
        let step = transfer(plane, part, from, to).await?;
        progress(&step);
    }
    let done = current(plane).await?;
    // Another change (a concurrent move of the same slots) may have moved them on.
    let others: Vec<String> = done
        .value
        .owners_of(range)
        .into_iter()
        .filter(|(owner, _)| owner.as_ref() != Some(to))
        .map(|(owner, part)| {
            format!(
                "{part} to {}",
                owner.map_or_else(|| "nobody".to_string(), |o| o.to_string())
            )
        })
        .collect();
    if !others.is_empty() {
        return Err(ClusterError::Incomplete(format!(
            "slots {range} are not all owned by {to}: another change of the slot map gave {}",
            others.join(", ")
        )));
    }
    Ok(done)
}

/// Keeps retrying `call` while etcd does not answer, up to [`ETCD_PATIENCE`] in a row.
async fn patiently<T, F: std::future::Future<Output = Result<T, ClusterError>>>(
    what: &str,
    mut call: impl FnMut() -> F,
) -> Result<T, ClusterError> {
    let since = Instant::now();
    loop {
        match call().await {
            Err(ClusterError::Unreachable { .. }) if since.elapsed() < ETCD_PATIENCE => {
                tokio::time::sleep(POLL * 4).await;
            }
            Err(ClusterError::Unreachable { endpoints, reason }) => {
                return Err(ClusterError::Unreachable {
                    endpoints,
                    reason: format!(
                        "{reason}; no answer for {ETCD_PATIENCE:?} while {what} (it may still complete: see `mantle cluster status`)"
                    ),
                })
            }
            other => return other,
        }
    }
}

async fn current(plane: &ControlPlane) -> Result<Versioned<SlotMap>, ClusterError> {
    Ok(plane.slot_map().await?.unwrap_or(Versioned {
        value: SlotMap::default(),
        revision: 0,
    }))
}

/// Moves one range of one owner (or of none) to `to`, waiting until it is done.
async fn transfer(
    plane: &ControlPlane,
    range: SlotRange,
    from: Option<NodeId>,
    to: &NodeId,
) -> Result<Step, ClusterError> {
    let started = Instant::now();
    let Some(source) = from.clone() else {
        plane.update(|map| map.assign(range, to)).await?;
        return Ok(Step {
            range,
            from,
            to: to.clone(),
            took: started.elapsed(),
        });
    };
    // Only a live source can copy its data; a dead one's slots wait for it to return.
    if !plane.members().await?.contains_key(&source) {
        return Err(ClusterError::NotAMember(source));
    }
    plane
        .update(|map| map.begin_migration(range, &source, to))
        .await?;
    let waiting = format!("waiting for the migration of slots {range} from {source} to {to}");
    let mut absent_since: Option<Instant> = None;
    loop {
        tokio::time::sleep(POLL).await;
        let map = patiently(&waiting, || current(plane)).await?.value;
        if let Some(m) = map.migrations.iter().find(|m| m.range == range) {
            if m.from != source || &m.to != to {
                return Err(ClusterError::Incomplete(format!(
                    "slots {range} are now migrating from {} to {} (another move took them over)",
                    m.from, m.to
                )));
            }
            // A source that died cannot finish; a target that died cannot take them.
            let members = patiently(&waiting, || plane.members()).await?;
            let missing: Vec<&NodeId> = [&source, to]
                .into_iter()
                .filter(|id| !members.contains_key(*id))
                .collect();
            if missing.is_empty() {
                absent_since = None;
                continue;
            }
            let since = *absent_since.get_or_insert_with(Instant::now);
            if since.elapsed() < ABSENCE_PATIENCE {
                continue;
            }
            let names: Vec<String> = missing.iter().map(|id| id.to_string()).collect();
            return Err(ClusterError::Incomplete(format!(
                "the migration of slots {range} from {source} to {to} cannot finish: {} is no longer a member of the cluster (stopped, killed or cut off from etcd); it stays declared and resumes if the node returns, or `mantle cluster abort {range}` ends it",
                names.join(" and ")
            )));
        }
        return if map.owner(range.start) == Some(to) && map.owner(range.end) == Some(to) {
            Ok(Step {
                range,
                from,
                to: to.clone(),
                took: started.elapsed(),
            })
        } else {
            Err(MapError::MigrationAborted {
                range,
                to: to.clone(),
            }
            .into())
        };
    }
}

/// Ends a migration without moving anything (the source keeps the range and drops it from
/// the target).
pub async fn abort(
    plane: &ControlPlane,
    range: SlotRange,
) -> Result<Versioned<SlotMap>, ClusterError> {
    plane.update(|map| map.abort_migration(range)).await
}
