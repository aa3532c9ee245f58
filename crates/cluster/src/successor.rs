//! Who serves a dead node's shared-log sequencers before its slots are reassigned
//! (docs/shared-log.md, "Sequencer takeover").
//!
//! A data slot waits out the failover grace before it is given away, because its data lives
//! only where the map says. A sequencer is different: it is memory that a client rebuilds by
//! sealing the log's storage at a newer epoch, and the seal fences whatever the old sequencer
//! still hands out. So as soon as a node's membership lease key is seen *deleted* while etcd
//! answered, one live member — the [`successor`] of the slot, chosen by rendezvous hashing so
//! that every node names the same one without talking — may run the sequencers of that slot.
//!
//! [`Lapses`] records which members were seen going: a member that is simply missing from
//! the first view after an etcd outage (every lease lapsed while nobody could renew it) was
//! not seen going, and its sequencers stay where they are.

use crate::node::NodeId;
use std::collections::BTreeSet;

/// The live member that takes over the sequencers of `slot` while its owner is gone: the one
/// with the highest rendezvous weight for the slot (ties, which need equal 64-bit hashes,
/// go to the smaller id). `None` without members.
pub fn successor<'m>(
    slot: u16,
    members: impl IntoIterator<Item = &'m NodeId>,
) -> Option<&'m NodeId> {
    members
        .into_iter()
        .map(|id| (weight(slot, id), id))
        .max_by(|(wa, a), (wb, b)| wa.cmp(wb).then_with(|| b.cmp(a)))
        .map(|(_, id)| id)
}

/// A hash of (slot, node id) that is the same in every process and every build: FNV-1a
/// then a SplitMix64 finaliser, so ids differing in one byte get unrelated weights.
fn weight(slot: u16, id: &NodeId) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in slot.to_le_bytes().iter().chain(id.as_str().as_bytes()) {
        h ^= u64::from(*byte);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Members whose lease key was seen deleted: present in one view and gone in the next, both
/// taken while etcd answered.
#[derive(Debug, Default)]
pub struct Lapses {
    /// The members of the previous view, if that view was taken while etcd answered.
    previous: Option<BTreeSet<NodeId>>,
    watched: BTreeSet<NodeId>,
}

impl Lapses {
    /// Takes in one view: whether etcd answered, and the members it lists.
    pub fn observe<'m>(&mut self, connected: bool, members: impl IntoIterator<Item = &'m NodeId>) {
        if !connected {
            // Nothing the stale view says about members can be trusted, and whoever comes
            // back may have rejoined meanwhile: start over once etcd answers.
            self.previous = None;
            self.watched.clear();
            return;
        }
        let members: BTreeSet<NodeId> = members.into_iter().cloned().collect();
        if let Some(previous) = &self.previous {
            self.watched.extend(previous.difference(&members).cloned());
        }
        self.watched.retain(|id| !members.contains(id));
        self.previous = Some(members);
    }

    /// The members seen going and not back since.
    pub fn watched(&self) -> &BTreeSet<NodeId> {
        &self.watched
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<NodeId> {
        names.iter().map(|n| NodeId::new(n).unwrap()).collect()
    }

    #[test]
    fn every_order_of_the_members_names_the_same_successor() {
        let members = ids(&["n1", "n2", "n3", "n4"]);
        let mut reversed = members.clone();
        reversed.reverse();
        let mut chosen = BTreeSet::new();
        for slot in 0..2_000u16 {
            let a = successor(slot, &members).unwrap();
            assert_eq!(Some(a), successor(slot, &reversed));
            chosen.insert(a.clone());
        }
        // Slots spread over every member, not all to one.
        assert_eq!(chosen.len(), 4);
        assert!(successor(7, &[]).is_none());
    }

    #[test]
    fn removing_a_member_moves_only_its_own_slots() {
        let all = ids(&["n1", "n2", "n3"]);
        let without = ids(&["n1", "n3"]);
        for slot in 0..2_000u16 {
            let before = successor(slot, &all).unwrap();
            if before.as_str() != "n2" {
                assert_eq!(successor(slot, &without), Some(before));
            }
        }
    }

    #[test]
    fn only_a_lapse_seen_while_etcd_answered_counts() {
        let [n1, n2, n3] = <[NodeId; 3]>::try_from(ids(&["n1", "n2", "n3"])).unwrap();
        let mut lapses = Lapses::default();
        // The first view: n3 missing, but nobody saw it go.
        lapses.observe(true, [&n1, &n2]);
        assert!(lapses.watched().is_empty());
        lapses.observe(true, [&n1, &n2, &n3]);
        // n2's key is deleted while etcd answers.
        lapses.observe(true, [&n1, &n3]);
        assert_eq!(lapses.watched().iter().collect::<Vec<_>>(), [&n2]);
        // It comes back: no longer lapsed.
        lapses.observe(true, [&n1, &n2, &n3]);
        assert!(lapses.watched().is_empty());
        // An etcd outage: every lease lapses unseen; the first view after it lists nobody
        // but this node, and still nobody was seen going.
        lapses.observe(false, [&n1, &n2, &n3]);
        lapses.observe(true, [&n1]);
        assert!(lapses.watched().is_empty());
        // A lapse seen during the outage's stale view does not count either.
        lapses.observe(true, [&n1, &n2, &n3]);
        lapses.observe(false, [&n1, &n3]);
        assert!(lapses.watched().is_empty());
    }
}
