//! The slots an algorithm holds, as one bit per slot, with uniform random draws (Random's
//! victims). A draw picks random bits until it finds a member: the slab reuses freed slots
//! first, so members are dense and a draw is one or two probes of an array that stays in
//! the L1 cache (1 bit per slot), where a dense member array with a position per slot
//! ([`super::sample::Members`]) touches two cold words on every insert and eviction. A set
//! too sparse for probing (one class among many, a cache that shrank) falls back to
//! counting its way to a uniformly chosen member, so every draw is exactly uniform and
//! bounded by a scan of the bits.

use super::next_rand::NextRand;
use crate::slab::{Slot, NIL};

/// Random probes before a draw counts its way to a member instead. At a density of one
/// half, 16 misses in a row happen once in 65,536 draws.
const PROBES: usize = 16;

#[derive(Default)]
pub(crate) struct SlotSet {
    words: Vec<u64>,
    len: u32,
    rng: NextRand,
}

impl SlotSet {
    #[inline]
    pub fn insert(&mut self, slot: Slot) {
        let word = slot as usize / 64;
        if word >= self.words.len() {
            self.grow(word);
        }
        let bit = 1u64 << (slot % 64);
        debug_assert!(self.words[word] & bit == 0, "slot {slot} inserted twice");
        self.words[word] |= bit;
        self.len += 1;
    }

    #[cold]
    fn grow(&mut self, word: usize) {
        self.words.resize(word + 1, 0);
    }

    #[inline]
    pub fn remove(&mut self, slot: Slot) {
        let word = slot as usize / 64;
        let bit = 1u64 << (slot % 64);
        debug_assert!(self.words[word] & bit != 0, "slot {slot} is no member");
        self.words[word] &= !bit;
        self.len -= 1;
    }

    /// A member drawn uniformly at random; `NIL` if there is none.
    #[inline]
    pub fn draw(&mut self) -> Slot {
        if self.len == 0 {
            return NIL;
        }
        let bits = (self.words.len() * 64) as u64;
        for _ in 0..PROBES {
            let i = below(self.rng.next(), bits) as usize;
            if self.words[i / 64] & (1 << (i % 64)) != 0 {
                return i as Slot;
            }
        }
        let rank = below(self.rng.next(), u64::from(self.len));
        self.nth(rank)
    }

    /// The member of rank `n` (0-based, in slot order).
    #[cold]
    fn nth(&self, mut n: u64) -> Slot {
        for (w, &word) in self.words.iter().enumerate() {
            let count = u64::from(word.count_ones());
            if n < count {
                let mut word = word;
                for _ in 0..n {
                    word &= word - 1;
                }
                return (w * 64) as Slot + word.trailing_zeros();
            }
            n -= count;
        }
        unreachable!("rank below the member count")
    }

    pub fn heap_bytes(&self) -> usize {
        self.words.capacity() * size_of::<u64>()
    }
}

/// Maps 64 random bits onto `0..n` (multiply-shift, no division).
#[inline]
fn below(r: u64, n: u64) -> u64 {
    ((u128::from(r) * u128::from(n)) >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_only_members_and_all_of_them() {
        let mut s = SlotSet::default();
        assert_eq!(s.draw(), NIL);
        for slot in 0..100 {
            s.insert(slot);
        }
        for slot in 0..90 {
            s.remove(slot);
        }
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2_000 {
            let slot = s.draw();
            assert!(slot >= 90, "drew a removed slot");
            seen.insert(slot);
        }
        assert_eq!(seen.len(), 10);
        s.remove(95);
        s.insert(3);
        assert!((0..500).map(|_| s.draw()).any(|slot| slot == 3));
        assert!((0..500).all(|_| s.draw() != 95));
    }

    /// Draws from a set too sparse for probing (3 members among 100,000 slots) take the
    /// counting path, stay among the members and are uniform over them.
    #[test]
    fn a_sparse_set_still_draws_uniformly() {
        let mut s = SlotSet::default();
        for slot in 0..100_000 {
            s.insert(slot);
        }
        for slot in 0..100_000 {
            if ![7, 64_000, 99_999].contains(&slot) {
                s.remove(slot);
            }
        }
        let mut counts = std::collections::HashMap::new();
        for _ in 0..30_000 {
            *counts.entry(s.draw()).or_insert(0u32) += 1;
        }
        assert_eq!(counts.len(), 3, "{counts:?}");
        for (slot, n) in counts {
            assert!((9_000..11_000).contains(&n), "slot {slot} drawn {n} times");
        }
    }

    /// In a dense set every member is drawn about equally often.
    #[test]
    fn a_dense_set_draws_uniformly() {
        let mut s = SlotSet::default();
        for slot in 0..200 {
            s.insert(slot);
        }
        for slot in (0..200).step_by(3) {
            s.remove(slot);
        }
        let members = 200 - (0..200).step_by(3).count();
        let draws = 200_000;
        let mut counts = vec![0u32; 200];
        for _ in 0..draws {
            counts[s.draw() as usize] += 1;
        }
        let expected = draws as f64 / members as f64;
        for (slot, &n) in counts.iter().enumerate() {
            if slot % 3 == 0 {
                assert_eq!(n, 0);
            } else {
                assert!(
                    (f64::from(n) - expected).abs() < expected * 0.15,
                    "slot {slot}: {n}"
                );
            }
        }
    }
}
