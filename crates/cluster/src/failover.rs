//! Reassigning a dead node's slots in a pure cache tier. When every node has `--upstream`
//! behind it, no node holds data only it has: a dead node's slots can be served by anyone,
//! reading through to the upstream. Each such node marks itself under
//! `/mantle/<cluster>/cache_tier/<id>` (no lease: the mark outlives the node, which is the
//! point); when a marked node's membership lapses, the live marked nodes race to give its
//! slots to themselves in one compare-and-swap of the map, so exactly one succeeds and the
//! others find nothing left to do. Slots of a node with its own data are never reassigned:
//! they stay down until it returns.

use crate::control::{ClusterError, ControlPlane, Versioned};
use crate::node::NodeId;
use crate::slotmap::{MapError, SlotMap, SlotRange};
use etcd_client::GetOptions;
use std::collections::BTreeSet;

const ATTEMPTS: usize = 16;

/// Records whether `node` is a pure cache tier (`--upstream`), or erases the mark.
pub async fn mark_cache_tier(
    plane: &ControlPlane,
    node: &NodeId,
    cache_tier: bool,
) -> Result<(), ClusterError> {
    let key = plane.key(&format!("cache_tier/{node}"));
    let mut client = plane.client();
    if cache_tier {
        plane.bounded(client.put(key, "1", None)).await.map(|_| ())
    } else {
        plane.bounded(client.delete(key, None)).await.map(|_| ())
    }
}

async fn cache_tier(plane: &ControlPlane) -> Result<BTreeSet<NodeId>, ClusterError> {
    let prefix = plane.key("cache_tier/");
    let resp = plane
        .bounded(
            plane
                .client()
                .get(prefix.clone(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
    Ok(resp
        .kvs()
        .iter()
        .filter_map(|kv| {
            std::str::from_utf8(&kv.key()[prefix.len()..])
                .ok()
                .and_then(|id| NodeId::new(id).ok())
        })
        .collect())
}

/// `map` with the slots of `dead` spread over `survivors` (each dead range cut into one
/// contiguous piece per survivor), migrations from or to a dead node abandoned first;
/// `None` when there is nothing to change.
pub fn reassign(
    map: &SlotMap,
    dead: &BTreeSet<NodeId>,
    survivors: &[NodeId],
) -> Result<Option<SlotMap>, MapError> {
    if survivors.is_empty() {
        return Ok(None);
    }
    let mut next = map.clone();
    for m in map.migrations.iter() {
        if dead.contains(&m.from) || dead.contains(&m.to) {
            next = next.abort_migration(m.range)?;
        }
    }
    let ranges: Vec<SlotRange> = dead
        .iter()
        .filter_map(|d| next.owners.get(d))
        .flatten()
        .copied()
        .collect();
    if ranges.is_empty() {
        return Ok(None);
    }
    let n = survivors.len();
    for range in ranges {
        let len = range.len();
        let mut start = range.start;
        for (i, survivor) in survivors.iter().enumerate() {
            let part = len / n + usize::from(i < len % n);
            if part == 0 {
                continue;
            }
            let end = start + (part - 1) as u16;
            let piece = SlotRange::new(start, end).expect("a piece of a valid range");
            next = next.assign(piece, survivor)?;
            start = end.wrapping_add(1);
        }
    }
    for d in dead {
        if next.owners.get(d).is_some_and(Vec::is_empty) {
            next.owners.remove(d);
        }
    }
    Ok(Some(next))
}

/// Gives the slots of cache-tier nodes that are no longer members to the live cache-tier
/// nodes. Returns the new map if this call wrote it, `None` if there was nothing to do (or
/// another node did it first).
pub async fn take_over_dead(
    plane: &ControlPlane,
) -> Result<Option<Versioned<SlotMap>>, ClusterError> {
    for _ in 0..ATTEMPTS {
        let Some(current) = plane.slot_map().await? else {
            return Ok(None);
        };
        let members = plane.members().await?;
        let tier = cache_tier(plane).await?;
        let dead: BTreeSet<NodeId> = current
            .value
            .owners
            .iter()
            .filter(|(id, ranges)| !ranges.is_empty() && !members.contains_key(*id))
            .map(|(id, _)| id.clone())
            .filter(|id| tier.contains(id))
            .collect();
        if dead.is_empty() {
            return Ok(None);
        }
        let survivors: Vec<NodeId> = members
            .keys()
            .filter(|id| tier.contains(*id))
            .cloned()
            .collect();
        let Some(next) = reassign(&current.value, &dead, &survivors)? else {
            return Ok(None);
        };
        match plane.compare_and_swap(current.revision, &next).await? {
            Ok(revision) => {
                return Ok(Some(Versioned {
                    value: next,
                    revision,
                }))
            }
            Err(_) => continue,
        }
    }
    Err(ClusterError::Conflict(ATTEMPTS))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> NodeId {
        NodeId::new(s).unwrap()
    }

    #[test]
    fn a_dead_nodes_slots_are_split_over_the_survivors() {
        let map = SlotMap::all_to(&id("a"))
            .rebalance(&[id("a"), id("b"), id("c")])
            .unwrap();
        let dead: BTreeSet<NodeId> = [id("b")].into_iter().collect();
        let next = reassign(&map, &dead, &[id("a"), id("c")]).unwrap().unwrap();
        next.validate().unwrap();
        assert!(next.unassigned().is_empty());
        assert_eq!(next.slot_count(&id("b")), 0);
        let (a, c) = (next.slot_count(&id("a")), next.slot_count(&id("c")));
        assert_eq!(a + c, 16_384);
        // The dead node's slots are split evenly.
        let gained_a = a - map.slot_count(&id("a"));
        let gained_c = c - map.slot_count(&id("c"));
        assert!(gained_a.abs_diff(gained_c) <= 1, "{gained_a} {gained_c}");
        // Nothing left to do the second time; no survivors, nothing to do either.
        assert!(reassign(&next, &dead, &[id("a"), id("c")])
            .unwrap()
            .is_none());
        assert!(reassign(&map, &dead, &[]).unwrap().is_none());
    }

    #[test]
    fn migrations_touching_the_dead_node_are_abandoned() {
        let map = SlotMap::all_to(&id("a"))
            .rebalance(&[id("a"), id("b")])
            .unwrap();
        let range = map.owners[&id("b")][0];
        let small = SlotRange::new(range.start, range.start + 9).unwrap();
        let moving = map.begin_migration(small, &id("b"), &id("a")).unwrap();
        let dead: BTreeSet<NodeId> = [id("b")].into_iter().collect();
        let next = reassign(&moving, &dead, &[id("a")]).unwrap().unwrap();
        assert!(next.migrations.is_empty());
        assert_eq!(next.slot_count(&id("a")), 16_384);
    }
}
