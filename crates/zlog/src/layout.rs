//! Where a position lives: CORFU's deterministic mapping, over the cluster's slots.
//!
//! Position `p` of log `L` is in stripe `p % stripes`; replica `i` of stripe `s` is the
//! object whose key is tagged to land in slot
//! `(slot(L) + s * 16384 / stripes + i * 16384 / replicas) % 16384`. Replicas of one position
//! are therefore `16384 / replicas` slots apart: with the slots split evenly over at least
//! `replicas` nodes (`mantle cluster rebalance`), they are on distinct nodes, so losing one
//! node loses no acknowledged entry. Stripes spread consecutive positions over the nodes.
//! The mapping depends on nothing but the name and the two numbers, so every client and a
//! recovering sequencer compute the same objects.

use slots::SLOTS;
use std::sync::OnceLock;

/// A short hash tag for every slot: `TAGS[slot]` hashes to `slot`.
fn tags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        let mut tags = vec![String::new(); SLOTS as usize];
        let mut missing = SLOTS as usize;
        let mut n: u64 = 0;
        // Base-36 numerals: about 170k tries cover every slot (coupon collector).
        while missing > 0 {
            let tag = base36(n);
            let slot = slots::key_slot(tag.as_bytes()) as usize;
            if tags[slot].is_empty() {
                tags[slot] = tag;
                missing -= 1;
            }
            n += 1;
        }
        tags
    })
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII digits")
}

/// A log's layout: its name, stripes and replicas.
#[derive(Debug, Clone)]
pub struct Layout {
    name: String,
    base: u32,
    stripes: u32,
    replicas: u32,
}

impl Layout {
    pub fn new(name: &str, stripes: u32, replicas: u32) -> Layout {
        assert!(
            stripes > 0 && replicas > 0,
            "a layout needs stripes and replicas"
        );
        Layout {
            name: name.to_string(),
            base: u32::from(slots::key_slot(name.as_bytes())),
            stripes,
            replicas,
        }
    }

    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    pub fn stripes(&self) -> u32 {
        self.stripes
    }

    /// The slot of replica `replica` of stripe `stripe`.
    pub fn slot(&self, stripe: u32, replica: u32) -> u16 {
        let slots = u32::from(SLOTS);
        let at = self.base + stripe * (slots / self.stripes) + replica * (slots / self.replicas);
        (at % slots) as u16
    }

    /// The stripe position `pos` is in.
    pub fn stripe(&self, pos: u64) -> u32 {
        (pos % u64::from(self.stripes)) as u32
    }

    /// The key of replica `replica` of stripe `stripe`.
    pub fn object(&self, stripe: u32, replica: u32) -> String {
        let tag = &tags()[self.slot(stripe, replica) as usize];
        format!("{{{tag}}}zlog/{}/{stripe}/{replica}", self.name)
    }

    /// The objects holding position `pos`, head of the chain first.
    pub fn chain(&self, pos: u64) -> impl Iterator<Item = String> + '_ {
        let stripe = self.stripe(pos);
        (0..self.replicas).map(move |replica| self.object(stripe, replica))
    }

    /// Every object of the log (what a seal visits).
    pub fn objects(&self) -> impl Iterator<Item = String> + '_ {
        (0..self.stripes).flat_map(move |s| (0..self.replicas).map(move |r| self.object(s, r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_has_a_tag_that_hashes_to_it() {
        for (slot, tag) in tags().iter().enumerate() {
            assert_eq!(slots::key_slot(tag.as_bytes()) as usize, slot);
        }
    }

    #[test]
    fn objects_land_in_their_slots_and_replicas_are_spread() {
        let layout = Layout::new("orders", 16, 2);
        for stripe in 0..16 {
            for replica in 0..2 {
                let key = layout.object(stripe, replica);
                assert_eq!(
                    slots::key_slot(key.as_bytes()),
                    layout.slot(stripe, replica)
                );
            }
        }
        // Three nodes with the slots split evenly: the two replicas are on distinct nodes.
        let node = |slot: u16| (u32::from(slot) * 3 / u32::from(SLOTS)) as u8;
        for name in ["a", "orders", "log-17", "x{y}"] {
            for replicas in [2, 3] {
                let layout = Layout::new(name, 16, replicas);
                for stripe in 0..16 {
                    let nodes: std::collections::BTreeSet<u8> = (0..replicas)
                        .map(|r| node(layout.slot(stripe, r)))
                        .collect();
                    assert_eq!(nodes.len(), replicas as usize, "{name} {stripe}");
                }
            }
        }
    }
}
