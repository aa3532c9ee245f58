//! Which node owns which slot, and which slot ranges are moving. The map is one value in etcd,
//! changed only by a transaction that compares the revision it was read at, so two nodes
//! deciding at once can never both win; this module keeps its invariants (every slot owned
//! by at most one node, a migration only of slots its source owns, no slot in two
//! migrations) so a map that breaks them is refused before it is written.

use crate::node::NodeId;
use serde::{Deserialize, Serialize};
use slots::{SlotRange, SLOTS};
use std::collections::BTreeMap;

/// A slot range on its way from one node to another. Until the flip the source owns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    pub range: SlotRange,
    pub from: NodeId,
    pub to: NodeId,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error("slot {slot} is assigned twice (to {first} and {second})")]
    DoubleAssigned {
        slot: u16,
        first: NodeId,
        second: NodeId,
    },
    #[error("slots {range} are not all owned by {node}")]
    NotOwned { range: SlotRange, node: NodeId },
    #[error("slots {range} are already migrating")]
    AlreadyMigrating { range: SlotRange },
    #[error("no migration of exactly slots {range} is in progress")]
    NoSuchMigration { range: SlotRange },
    #[error("a migration from {0} to itself")]
    SelfMigration(NodeId),
    #[error("cannot rebalance onto no nodes")]
    NoNodes,
    #[error("slots {range} were not moved to {to}: the migration was aborted (the source's log says why)")]
    MigrationAborted { range: SlotRange, to: NodeId },
}

/// The slot map as stored in etcd: owned ranges, per node, and the migrations under way.
/// `epoch` counts the changes, so a node can tell an older map from a newer one without
/// asking etcd.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotMap {
    pub epoch: u64,
    /// Owned ranges, sorted and merged, per node.
    pub owners: BTreeMap<NodeId, Vec<SlotRange>>,
    #[serde(default)]
    pub migrations: Vec<Migration>,
}

impl SlotMap {
    /// A map that gives every slot to `node`: the first node of an empty cluster.
    pub fn all_to(node: &NodeId) -> SlotMap {
        let mut owners = BTreeMap::new();
        owners.insert(node.clone(), vec![SlotRange::all()]);
        SlotMap {
            epoch: 1,
            owners,
            migrations: Vec::new(),
        }
    }

    /// The owner of every slot, in one table (what a node consults per request).
    pub fn owner_table(&self) -> OwnerTable {
        let mut nodes = Vec::new();
        let mut owner = vec![OwnerTable::NONE; usize::from(SLOTS)];
        for (node, ranges) in &self.owners {
            let index = nodes.len() as u16;
            nodes.push(node.clone());
            for range in ranges {
                for slot in range.slots() {
                    owner[usize::from(slot)] = index;
                }
            }
        }
        OwnerTable {
            nodes,
            owner: owner.into_boxed_slice(),
        }
    }

    /// The node owning `slot`, if any.
    pub fn owner(&self, slot: u16) -> Option<&NodeId> {
        self.owners
            .iter()
            .find(|(_, ranges)| ranges.iter().any(|r| r.contains(slot)))
            .map(|(node, _)| node)
    }

    /// Slots owned by `node`.
    pub fn slot_count(&self, node: &NodeId) -> usize {
        self.owners
            .get(node)
            .map_or(0, |ranges| ranges.iter().map(SlotRange::len).sum())
    }

    /// Slots no node owns.
    pub fn unassigned(&self) -> Vec<SlotRange> {
        let owned: Vec<SlotRange> = self.owners.values().flatten().copied().collect();
        complement(&merge(owned))
    }

    /// The migration that covers `slot`, if one does.
    pub fn migration_of(&self, slot: u16) -> Option<&Migration> {
        self.migrations.iter().find(|m| m.range.contains(slot))
    }

    /// Checks the invariants; a map that fails is never written.
    pub fn validate(&self) -> Result<(), MapError> {
        let mut seen: Vec<(SlotRange, &NodeId)> = self
            .owners
            .iter()
            .flat_map(|(node, ranges)| ranges.iter().map(move |r| (*r, node)))
            .collect();
        seen.sort();
        for pair in seen.windows(2) {
            let ((a, first), (b, second)) = (&pair[0], &pair[1]);
            if a.overlaps(b) {
                return Err(MapError::DoubleAssigned {
                    slot: b.start,
                    first: (*first).clone(),
                    second: (*second).clone(),
                });
            }
        }
        for (i, m) in self.migrations.iter().enumerate() {
            if m.from == m.to {
                return Err(MapError::SelfMigration(m.from.clone()));
            }
            if !self.owns_all(&m.from, m.range) {
                return Err(MapError::NotOwned {
                    range: m.range,
                    node: m.from.clone(),
                });
            }
            if self.migrations[..i]
                .iter()
                .any(|o| o.range.overlaps(&m.range))
            {
                return Err(MapError::AlreadyMigrating { range: m.range });
            }
        }
        Ok(())
    }

    fn owns_all(&self, node: &NodeId, range: SlotRange) -> bool {
        let Some(ranges) = self.owners.get(node) else {
            return false;
        };
        // Ranges are merged, so one of them must hold the whole range.
        ranges
            .iter()
            .any(|r| r.start <= range.start && range.end <= r.end)
    }

    /// Gives `range` to `node` outright (an operator's `move` of slots nobody is serving, or a
    /// reassignment after a node is gone). Refused while any of it is migrating.
    pub fn assign(&self, range: SlotRange, node: &NodeId) -> Result<SlotMap, MapError> {
        if self.migrations.iter().any(|m| m.range.overlaps(&range)) {
            return Err(MapError::AlreadyMigrating { range });
        }
        let mut next = self.clone();
        next.remove_range(range);
        next.owners.entry(node.clone()).or_default().push(range);
        next.normalise();
        next.epoch += 1;
        next.validate()?;
        Ok(next)
    }

    /// Starts moving `range` from its owner `from` to `to`.
    pub fn begin_migration(
        &self,
        range: SlotRange,
        from: &NodeId,
        to: &NodeId,
    ) -> Result<SlotMap, MapError> {
        let mut next = self.clone();
        next.migrations.push(Migration {
            range,
            from: from.clone(),
            to: to.clone(),
        });
        next.epoch += 1;
        next.validate()?;
        Ok(next)
    }

    /// Flips the ownership of a migrating range to its target and ends the migration.
    pub fn finish_migration(&self, range: SlotRange) -> Result<SlotMap, MapError> {
        let mut next = self.clone();
        let migration = next.take_migration(range)?;
        next.remove_range(range);
        next.owners.entry(migration.to).or_default().push(range);
        next.normalise();
        next.epoch += 1;
        next.validate()?;
        Ok(next)
    }

    /// Ends a migration without moving anything: the source keeps the range.
    pub fn abort_migration(&self, range: SlotRange) -> Result<SlotMap, MapError> {
        let mut next = self.clone();
        next.take_migration(range)?;
        next.epoch += 1;
        Ok(next)
    }

    /// Spreads every slot over `nodes` as evenly as possible while moving as few slots as
    /// possible: nodes above their share give their highest slots to nodes below it, and
    /// unowned slots go to whoever is furthest below. Slots of nodes not listed are
    /// reassigned too. Refused while a migration is under way.
    pub fn rebalance(&self, nodes: &[NodeId]) -> Result<SlotMap, MapError> {
        if nodes.is_empty() {
            return Err(MapError::NoNodes);
        }
        if let Some(m) = self.migrations.first() {
            return Err(MapError::AlreadyMigrating { range: m.range });
        }
        let mut sorted: Vec<NodeId> = nodes.to_vec();
        sorted.sort();
        sorted.dedup();
        let n = sorted.len();
        let total = usize::from(SLOTS);
        // The first `total % n` nodes (in id order) take one slot more.
        let share = |i: usize| total / n + usize::from(i < total % n);

        let table = self.owner_table();
        let mut per_node: Vec<Vec<u16>> = vec![Vec::new(); n];
        let mut free: Vec<u16> = Vec::new();
        for slot in 0..SLOTS {
            let current = table.owner_of(slot);
            match current.and_then(|id| sorted.iter().position(|x| x == id)) {
                Some(i) => per_node[i].push(slot),
                None => free.push(slot),
            }
        }
        for (i, slots) in per_node.iter_mut().enumerate() {
            while slots.len() > share(i) {
                free.push(slots.pop().expect("over its share"));
            }
        }
        free.sort_unstable_by(|a, b| b.cmp(a));
        for (i, slots) in per_node.iter_mut().enumerate() {
            while slots.len() < share(i) {
                slots.push(free.pop().expect("slots add up to the total"));
            }
        }
        let mut next = SlotMap {
            epoch: self.epoch + 1,
            owners: BTreeMap::new(),
            migrations: Vec::new(),
        };
        for (node, slots) in sorted.into_iter().zip(per_node) {
            next.owners.insert(node, ranges_of(slots));
        }
        next.normalise();
        next.validate()?;
        Ok(next)
    }

    /// `range` cut into runs of one owner each (`None`: unowned), in slot order.
    pub fn owners_of(&self, range: SlotRange) -> Vec<(Option<NodeId>, SlotRange)> {
        let table = self.owner_table();
        let mut runs: Vec<(Option<NodeId>, SlotRange)> = Vec::new();
        for slot in range.slots() {
            let owner = table.owner_of(slot);
            match runs.last_mut() {
                Some((o, r)) if o.as_ref() == owner => r.end = slot,
                _ => runs.push((
                    owner.cloned(),
                    SlotRange {
                        start: slot,
                        end: slot,
                    },
                )),
            }
        }
        runs
    }

    /// What turns this map's ownership into `next`'s: runs of slots `(from, to, range)`
    /// whose owner changes, `from` being `None` for slots nobody owns now.
    pub fn moves_to(&self, next: &SlotMap) -> Vec<(Option<NodeId>, NodeId, SlotRange)> {
        let (now, then) = (self.owner_table(), next.owner_table());
        let mut moves: Vec<(Option<NodeId>, NodeId, SlotRange)> = Vec::new();
        for slot in 0..SLOTS {
            let (from, to) = (now.owner_of(slot), then.owner_of(slot));
            let Some(to) = to.filter(|t| Some(*t) != from) else {
                continue;
            };
            match moves.last_mut() {
                Some((f, t, r)) if f.as_ref() == from && t == to && r.end + 1 == slot => {
                    r.end = slot
                }
                _ => moves.push((
                    from.cloned(),
                    to.clone(),
                    SlotRange {
                        start: slot,
                        end: slot,
                    },
                )),
            }
        }
        moves
    }

    /// Removes and returns the migration of exactly `range`.
    fn take_migration(&mut self, range: SlotRange) -> Result<Migration, MapError> {
        let at = self
            .migrations
            .iter()
            .position(|m| m.range == range)
            .ok_or(MapError::NoSuchMigration { range })?;
        Ok(self.migrations.remove(at))
    }

    fn remove_range(&mut self, range: SlotRange) {
        for ranges in self.owners.values_mut() {
            let mut kept = Vec::with_capacity(ranges.len() + 1);
            for r in ranges.iter() {
                if !r.overlaps(&range) {
                    kept.push(*r);
                    continue;
                }
                if r.start < range.start {
                    kept.push(SlotRange {
                        start: r.start,
                        end: range.start - 1,
                    });
                }
                if r.end > range.end {
                    kept.push(SlotRange {
                        start: range.end + 1,
                        end: r.end,
                    });
                }
            }
            *ranges = kept;
        }
    }

    /// Sorts and merges each node's ranges and drops nodes left with none.
    fn normalise(&mut self) {
        for ranges in self.owners.values_mut() {
            *ranges = merge(std::mem::take(ranges));
        }
        self.owners.retain(|_, ranges| !ranges.is_empty());
    }
}

/// A slot → node lookup in O(1), built from a [`SlotMap`].
#[derive(Debug, Clone)]
pub struct OwnerTable {
    nodes: Vec<NodeId>,
    owner: Box<[u16]>,
}

impl OwnerTable {
    const NONE: u16 = u16::MAX;

    pub fn owner_of(&self, slot: u16) -> Option<&NodeId> {
        match self.owner.get(usize::from(slot)) {
            Some(&i) if i != Self::NONE => self.nodes.get(usize::from(i)),
            _ => None,
        }
    }
}

/// Sorted, merged ranges of sorted `slots`.
fn ranges_of(mut slots: Vec<u16>) -> Vec<SlotRange> {
    slots.sort_unstable();
    let ranges = slots
        .into_iter()
        .map(|s| SlotRange { start: s, end: s })
        .collect();
    merge(ranges)
}

fn merge(mut ranges: Vec<SlotRange>) -> Vec<SlotRange> {
    ranges.sort();
    let mut merged: Vec<SlotRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match merged.last_mut() {
            Some(last) if u32::from(r.start) <= u32::from(last.end) + 1 => {
                last.end = last.end.max(r.end)
            }
            _ => merged.push(r),
        }
    }
    merged
}

/// The slots not covered by sorted, merged `ranges`.
fn complement(ranges: &[SlotRange]) -> Vec<SlotRange> {
    let mut gaps = Vec::new();
    let mut next: u32 = 0;
    for r in ranges {
        if u32::from(r.start) > next {
            gaps.push(SlotRange {
                start: next as u16,
                end: r.start - 1,
            });
        }
        next = u32::from(r.end) + 1;
    }
    if next < u32::from(SLOTS) {
        gaps.push(SlotRange {
            start: next as u16,
            end: SLOTS - 1,
        });
    }
    gaps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> NodeId {
        NodeId::new(s).unwrap()
    }

    fn owned(map: &SlotMap) -> usize {
        map.owners.values().flatten().map(SlotRange::len).sum()
    }

    #[test]
    fn assign_splits_and_merges() {
        let a = id("a");
        let b = id("b");
        let map = SlotMap::all_to(&a);
        let map = map.assign(SlotRange::new(100, 199).unwrap(), &b).unwrap();
        assert_eq!(
            map.owners[&a],
            vec![
                SlotRange::new(0, 99).unwrap(),
                SlotRange::new(200, 16383).unwrap()
            ]
        );
        assert_eq!(map.owner(150), Some(&b));
        assert_eq!(map.owner(99), Some(&a));
        let back = map.assign(SlotRange::new(100, 199).unwrap(), &a).unwrap();
        assert_eq!(back.owners[&a], vec![SlotRange::all()]);
        assert!(!back.owners.contains_key(&b));
        assert_eq!(back.epoch, 3);
    }

    #[test]
    fn a_migration_flips_ownership_only_when_finished() {
        let (a, b) = (id("a"), id("b"));
        let range = SlotRange::new(0, 9).unwrap();
        let map = SlotMap::all_to(&a).begin_migration(range, &a, &b).unwrap();
        assert_eq!(map.owner(5), Some(&a));
        assert_eq!(map.migration_of(5).unwrap().to, b);
        assert!(map.begin_migration(range, &a, &b).is_err(), "twice");
        assert!(map.assign(range, &b).is_err(), "assign while migrating");
        let done = map.finish_migration(range).unwrap();
        assert_eq!(done.owner(5), Some(&b));
        assert!(done.migrations.is_empty());
        let aborted = map.abort_migration(range).unwrap();
        assert_eq!(aborted.owner(5), Some(&a));
        assert!(aborted.finish_migration(range).is_err());
    }

    #[test]
    fn migrations_need_the_source_to_own_the_range() {
        let (a, b) = (id("a"), id("b"));
        let map = SlotMap::all_to(&a);
        let err = map.begin_migration(SlotRange::all(), &b, &a).unwrap_err();
        assert!(matches!(err, MapError::NotOwned { .. }), "{err}");
        assert!(matches!(
            map.begin_migration(SlotRange::all(), &a, &a),
            Err(MapError::SelfMigration(_))
        ));
    }

    #[test]
    fn validate_catches_double_assignment() {
        let (a, b) = (id("a"), id("b"));
        let mut map = SlotMap::all_to(&a);
        map.owners.insert(b, vec![SlotRange::new(7, 7).unwrap()]);
        assert!(matches!(
            map.validate(),
            Err(MapError::DoubleAssigned { slot: 7, .. })
        ));
    }

    #[test]
    fn rebalance_is_even_complete_and_moves_little() {
        let nodes: Vec<NodeId> = ["a", "b", "c"].iter().map(|s| id(s)).collect();
        let one = SlotMap::all_to(&nodes[0]);
        let three = one.rebalance(&nodes).unwrap();
        assert_eq!(owned(&three), usize::from(SLOTS));
        let counts: Vec<usize> = nodes.iter().map(|n| three.slot_count(n)).collect();
        assert_eq!(counts, vec![5462, 5461, 5461]);
        assert!(three.unassigned().is_empty());
        // Already balanced: nothing moves.
        let again = three.rebalance(&nodes).unwrap();
        assert_eq!(again.owners, three.owners);
        // A fourth node takes about a quarter, and only from the others' surplus.
        let mut four_nodes = nodes.clone();
        four_nodes.push(id("d"));
        let four = three.rebalance(&four_nodes).unwrap();
        let t3 = three.owner_table();
        let t4 = four.owner_table();
        let moved = (0..SLOTS)
            .filter(|&s| t3.owner_of(s) != t4.owner_of(s))
            .count();
        assert_eq!(moved, 4096);
        // A node that left: its slots go to the others.
        let two = four.rebalance(&four_nodes[..2]).unwrap();
        assert_eq!(owned(&two), usize::from(SLOTS));
        assert_eq!(two.owners.len(), 2);
    }

    #[test]
    fn moves_and_owner_runs_cover_exactly_the_changes() {
        let (a, b, c) = (id("a"), id("b"), id("c"));
        let one = SlotMap::all_to(&a);
        let three = one.rebalance(&[a.clone(), b.clone(), c.clone()]).unwrap();
        let moves = one.moves_to(&three);
        assert_eq!(
            moves,
            vec![
                (
                    Some(a.clone()),
                    b.clone(),
                    SlotRange::new(5462, 10922).unwrap()
                ),
                (
                    Some(a.clone()),
                    c.clone(),
                    SlotRange::new(10923, 16383).unwrap()
                ),
            ]
        );
        assert!(three.moves_to(&three).is_empty());
        let runs = three.owners_of(SlotRange::new(5000, 11000).unwrap());
        assert_eq!(
            runs,
            vec![
                (Some(a.clone()), SlotRange::new(5000, 5461).unwrap()),
                (Some(b), SlotRange::new(5462, 10922).unwrap()),
                (Some(c), SlotRange::new(10923, 11000).unwrap()),
            ]
        );
        let mut gap = SlotMap::default();
        gap.owners
            .insert(a.clone(), vec![SlotRange::new(0, 9).unwrap()]);
        assert_eq!(
            gap.owners_of(SlotRange::new(5, 12).unwrap()),
            vec![
                (Some(a), SlotRange::new(5, 9).unwrap()),
                (None, SlotRange::new(10, 12).unwrap())
            ]
        );
    }

    #[test]
    fn unassigned_lists_gaps() {
        let a = id("a");
        let mut map = SlotMap::default();
        map.owners.insert(a, vec![SlotRange::new(10, 20).unwrap()]);
        assert_eq!(
            map.unassigned(),
            vec![
                SlotRange::new(0, 9).unwrap(),
                SlotRange::new(21, 16383).unwrap()
            ]
        );
    }

    #[test]
    fn json_round_trip() {
        let (a, b) = (id("a"), id("b"));
        let map = SlotMap::all_to(&a)
            .begin_migration(SlotRange::new(1, 2).unwrap(), &a, &b)
            .unwrap();
        let text = serde_json::to_string(&map).unwrap();
        let back: SlotMap = serde_json::from_str(&text).unwrap();
        assert_eq!(back, map);
    }
}
