//! What an operator does to a cluster (`mantle cluster status|rebalance|move`): read its
//! state, spread the slots over the live members, give a slot range to one member. Each
//! change is one compare-and-swap of the slot map, so it never races a node's own change.

use crate::control::{ClusterError, ControlPlane, Versioned};
use crate::node::{Member, NodeId};
use crate::slotmap::{SlotMap, SlotRange};
use serde::Serialize;

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

/// Spreads every slot evenly over the live members, moving as few as possible.
pub async fn rebalance(plane: &ControlPlane) -> Result<Versioned<SlotMap>, ClusterError> {
    let members: Vec<NodeId> = plane.members().await?.into_keys().collect();
    plane.update(|map| map.rebalance(&members)).await
}

/// Gives `range` to the live member `to`.
pub async fn move_slots(
    plane: &ControlPlane,
    range: SlotRange,
    to: &NodeId,
) -> Result<Versioned<SlotMap>, ClusterError> {
    if !plane.members().await?.contains_key(to) {
        return Err(ClusterError::NotAMember(to.clone()));
    }
    plane.update(|map| map.assign(range, to)).await
}
