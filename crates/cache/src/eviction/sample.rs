//! Uniform sampling of an algorithm's own cached objects for the sampling algorithms (Random,
//! Hyperbolic), as libCacheSim's `hashtable_rand_obj` samples its hash table. The objects are
//! kept in a dense array (with each slot's position, for O(1) removal), so a draw is one
//! random index, and under classes an algorithm only ever draws objects of its own class. The
//! generator has a fixed seed, so a replay is reproducible (libCacheSim's is not: it seeds
//! from the clock).

use crate::slab::{Slot, NIL};

pub(crate) struct Members {
    /// Slots of the cached objects, in no particular order.
    slots: Vec<Slot>,
    /// Position in `slots` of each slot's object.
    position: Vec<u32>,
    /// SplitMix64 state.
    state: u64,
}

impl Default for Members {
    fn default() -> Self {
        Members {
            slots: Vec::new(),
            position: Vec::new(),
            state: 0x5eed_6d61_6e74_6c65,
        }
    }
}

impl Members {
    #[inline]
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn add(&mut self, slot: Slot) {
        let i = slot as usize;
        if i >= self.position.len() {
            self.position.resize(i + 1, 0);
        }
        self.position[i] = self.slots.len() as u32;
        self.slots.push(slot);
    }

    pub fn remove(&mut self, slot: Slot) {
        let at = self.position[slot as usize] as usize;
        let last = self.slots.len() - 1;
        self.slots.swap(at, last);
        self.position[self.slots[at] as usize] = at as u32;
        self.slots.pop();
    }

    /// A member drawn uniformly at random; `NIL` if there is none.
    #[inline]
    pub fn draw(&mut self) -> Slot {
        let n = self.slots.len() as u64;
        if n == 0 {
            return NIL;
        }
        // Multiply-shift maps 64 random bits onto 0..n without a division.
        let r = self.next();
        self.slots[((u128::from(r) * u128::from(n)) >> 64) as usize]
    }

    pub fn heap_bytes(&self) -> usize {
        (self.slots.capacity() + self.position.capacity()) * size_of::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_only_members_and_all_of_them() {
        let mut m = Members::default();
        assert_eq!(m.draw(), NIL);
        for s in 0..100 {
            m.add(s);
        }
        for s in 0..90 {
            m.remove(s);
        }
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2_000 {
            let s = m.draw();
            assert!(s >= 90, "drew a removed slot");
            seen.insert(s);
        }
        assert_eq!(seen.len(), 10);
        m.remove(95);
        m.add(3);
        assert!((0..500).map(|_| m.draw()).any(|s| s == 3));
        assert!((0..500).all(|_| m.draw() != 95));
    }
}
