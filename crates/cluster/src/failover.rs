//! Reassigning a dead node's slots in a pure cache tier. When every node has `--upstream`
//! behind it, no node holds data only it has: a dead node's slots can be served by anyone,
//! reading through to the upstream. Each such node marks itself under
//! `/mantle/<cluster>/cache_tier/<id>` (no lease: the mark outlives the node, which is the
//! point); when a marked node's membership lapses, the live marked nodes race to give its
//! slots to themselves in one compare-and-swap of the map, so exactly one succeeds and the
//! others find nothing left to do. Slots of a node with its own data are never reassigned:
//! they stay down until it returns.
//!
//! An etcd outage makes every lease lapse at once, though no node failed. So a node is
//! taken to be dead only once it has been absent for a grace period *while etcd answered*
//! ([`Absences`]): after an outage every live node rejoins within that period, and nothing is
//! reassigned. The grace also waits out the old owner's lease: the old owner stopped
//! answering for its slots before its lease could end ([`crate::lease`]).

use crate::control::{ClusterError, ControlPlane, Versioned};
use crate::node::NodeId;
use crate::slotmap::{MapError, SlotMap};
use etcd_client::GetOptions;
use slots::SlotRange;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

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

/// How long a slot owner must be seen absent, with etcd answering throughout, before its
/// slots are given away: a TTL (a node that was cut off with etcd rejoins about one
/// keep-alive timeout after etcd is back, and needs one more TTL at worst to notice its
/// lease lapsed) plus the etcd call timeout twice.
pub fn grace(ttl: Duration, timeout: Duration) -> Duration {
    ttl + timeout * 2
}

/// Which slot owners have been absent long enough, with etcd answering, to be called dead.
#[derive(Debug, Default)]
pub struct Absences {
    /// Since when etcd has answered without a break; `None` while it does not.
    connected_since: Option<Instant>,
    /// Owners missing from the members, since when they were seen missing.
    absent_since: BTreeMap<NodeId, Instant>,
}

impl Absences {
    /// Takes in one view of the cluster seen at `now`: whether etcd answered, and which
    /// owners of slots are missing from the members.
    pub fn observe(&mut self, now: Instant, connected: bool, absent: &BTreeSet<NodeId>) {
        if !connected {
            // What the view says of members is stale; an absence counts only once etcd
            // answers again, from then on.
            self.connected_since = None;
            return;
        }
        let since = *self.connected_since.get_or_insert(now);
        self.absent_since.retain(|id, _| absent.contains(id));
        for id in absent {
            self.absent_since
                .entry(id.clone())
                .or_insert(now.max(since));
        }
    }

    /// The owners absent for at least `grace` at `now` while etcd answered throughout.
    pub fn dead(&self, now: Instant, grace: Duration) -> BTreeSet<NodeId> {
        let Some(since) = self.connected_since else {
            return BTreeSet::new();
        };
        self.absent_since
            .iter()
            .filter(|(_, t)| now.saturating_duration_since((**t).max(since)) >= grace)
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// Gives the slots of cache-tier nodes that are no longer members, among `dead` (those
/// [`Absences`] found absent long enough), to the live cache-tier nodes. Returns the new
/// map if this call wrote it, `None` if there was nothing to do (or another node did it
/// first).
pub async fn take_over_dead(
    plane: &ControlPlane,
    dead: &BTreeSet<NodeId>,
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
            .filter(|id| tier.contains(id) && dead.contains(id))
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
    fn an_absence_counts_only_while_etcd_answers() {
        let grace = Duration::from_secs(4);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let n1: BTreeSet<NodeId> = [id("n1")].into_iter().collect();
        let none = BTreeSet::new();
        let mut a = Absences::default();
        a.observe(at(0), true, &none);
        // An etcd outage: every lease lapses while etcd does not answer...
        a.observe(at(1), false, &n1);
        a.observe(at(9), false, &n1);
        assert!(a.dead(at(9), grace).is_empty());
        // ...and when it answers again, the absence is timed from then.
        a.observe(at(10), true, &n1);
        assert!(a.dead(at(13), grace).is_empty());
        // The node rejoined within the grace: nothing is dead.
        a.observe(at(12), true, &none);
        assert!(a.dead(at(20), grace).is_empty());
        // A node that stays away is dead after the grace.
        a.observe(at(21), true, &n1);
        assert!(a.dead(at(24), grace).is_empty());
        assert_eq!(a.dead(at(25), grace), n1);
        // Another outage restarts the clock.
        a.observe(at(26), false, &n1);
        assert!(a.dead(at(26), grace).is_empty());
        a.observe(at(27), true, &n1);
        assert!(a.dead(at(30), grace).is_empty());
        assert_eq!(a.dead(at(31), grace), n1);
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
