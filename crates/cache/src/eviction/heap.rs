//! An indexed binary max-heap of slots, for the algorithms that rank objects (GDSF, Belady).
//!
//! It is laid out and moved exactly like libCacheSim's `pqueue.c` (1-based array, a node
//! bubbles up past a parent strictly below it, percolates down to the larger child, the
//! right one only when strictly larger): Belady orders by a `double` next-access time in
//! which many objects tie ("never again"), and which tied object leaves first depends on the
//! heap's shape, so the shape must be the same for the victims to be.
//!
//! Positions are kept per slot in a `Vec` that grows with the slab's peak population, so
//! after warm-up no operation allocates.

use crate::slab::{Slot, NIL};

/// A priority: the heap's top is an entry that no other entry is strictly above.
pub(crate) trait Rank: Copy {
    /// Whether `self` ranks strictly below `other` (libCacheSim's `cmp_pri(self, other)`).
    fn below(&self, other: &Self) -> bool;
}

pub(crate) struct Heap<K> {
    /// `entries[0]` is unused, as in `pqueue.c`.
    entries: Vec<(K, Slot)>,
    /// Where each slot's entry sits in `entries` (`NIL` when not in the heap).
    pos: Vec<u32>,
}

impl<K: Rank> Heap<K> {
    pub fn new(filler: K) -> Self {
        Heap {
            entries: vec![(filler, NIL)],
            pos: Vec::new(),
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len() - 1
    }

    #[cfg(test)]
    pub fn contains(&self, slot: Slot) -> bool {
        self.pos.get(slot as usize).is_some_and(|&p| p != NIL)
    }

    pub fn rank_of(&self, slot: Slot) -> K {
        self.entries[self.pos[slot as usize] as usize].0
    }

    fn place(&mut self, i: usize, entry: (K, Slot)) {
        self.pos[entry.1 as usize] = i as u32;
        self.entries[i] = entry;
    }

    fn bubble_up(&mut self, mut i: usize) {
        let moving = self.entries[i];
        while i > 1 && self.entries[i / 2].0.below(&moving.0) {
            let parent = self.entries[i / 2];
            self.place(i, parent);
            i /= 2;
        }
        self.place(i, moving);
    }

    /// The larger child of `i` (the right one only when the left is strictly below it).
    fn max_child(&self, i: usize) -> Option<usize> {
        let left = 2 * i;
        if left >= self.entries.len() {
            return None;
        }
        let right = left + 1;
        if right < self.entries.len() && self.entries[left].0.below(&self.entries[right].0) {
            Some(right)
        } else {
            Some(left)
        }
    }

    fn percolate_down(&mut self, mut i: usize) {
        let moving = self.entries[i];
        while let Some(child) = self.max_child(i) {
            if !moving.0.below(&self.entries[child].0) {
                break;
            }
            let up = self.entries[child];
            self.place(i, up);
            i = child;
        }
        self.place(i, moving);
    }

    pub fn push(&mut self, slot: Slot, rank: K) {
        if self.pos.len() <= slot as usize {
            self.pos.resize(slot as usize + 1, NIL);
        }
        self.entries.push((rank, slot));
        let i = self.entries.len() - 1;
        self.pos[slot as usize] = i as u32;
        self.bubble_up(i);
    }

    /// The top slot, `NIL` when empty.
    pub fn peek(&self) -> Slot {
        self.entries.get(1).map_or(NIL, |e| e.1)
    }

    /// Removes and returns the top slot, `NIL` when empty.
    pub fn pop(&mut self) -> Slot {
        if self.entries.len() == 1 {
            return NIL;
        }
        let top = self.entries[1].1;
        self.pos[top as usize] = NIL;
        let last = self.entries.pop().expect("non-empty");
        if self.entries.len() > 1 {
            self.place(1, last);
            self.percolate_down(1);
        }
        top
    }

    /// `pqueue_change_priority`: up if the new rank is strictly above the old, else down.
    pub fn change(&mut self, slot: Slot, rank: K) {
        let i = self.pos[slot as usize] as usize;
        let old = self.entries[i].0;
        self.entries[i].0 = rank;
        if old.below(&rank) {
            self.bubble_up(i);
        } else {
            self.percolate_down(i);
        }
    }

    /// `pqueue_remove`: the last entry takes the hole and moves up or down from there.
    pub fn remove(&mut self, slot: Slot) {
        let i = self.pos[slot as usize] as usize;
        self.pos[slot as usize] = NIL;
        let (removed, _) = self.entries[i];
        let last = self.entries.pop().expect("non-empty");
        if i == self.entries.len() {
            return;
        }
        self.place(i, last);
        if removed.below(&last.0) {
            self.bubble_up(i);
        } else {
            self.percolate_down(i);
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<(K, Slot)>()
            + self.pos.capacity() * std::mem::size_of::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Rank for u64 {
        fn below(&self, other: &Self) -> bool {
            self < other
        }
    }

    #[test]
    fn pops_in_rank_order_through_changes_and_removals() {
        let mut h = Heap::new(0u64);
        let mut model: Vec<(u64, Slot)> = Vec::new();
        let mut x = 7u64;
        for step in 0..5_000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let slot = ((x >> 40) % 64) as Slot;
            let rank = (x >> 20) % 1000;
            match (step % 4, model.iter().position(|e| e.1 == slot)) {
                (0 | 1, None) => {
                    h.push(slot, rank);
                    model.push((rank, slot));
                }
                (0 | 1, Some(i)) => {
                    h.change(slot, rank);
                    model[i].0 = rank;
                }
                (2, Some(i)) => {
                    h.remove(slot);
                    model.remove(i);
                }
                _ => {
                    let top = h.pop();
                    if model.is_empty() {
                        assert_eq!(top, NIL);
                        continue;
                    }
                    let best = model.iter().map(|e| e.0).max().unwrap();
                    let i = model
                        .iter()
                        .position(|e| e.1 == top)
                        .expect("popped a member");
                    assert_eq!(model[i].0, best, "step {step}");
                    model.remove(i);
                }
            }
            assert_eq!(h.len(), model.len());
            for &(rank, slot) in &model {
                assert!(h.contains(slot));
                assert_eq!(h.rank_of(slot), rank);
            }
        }
    }
}
