//! An LFU ordering kept beside another queue: the algorithms that run LFU as one of two
//! experts over the same objects (LeCaR, Cacheus) already thread the slab's links through
//! their LRU queue, so these lists keep links of their own, indexed by slot.
//!
//! Objects are grouped by request count; each count keeps its objects in arrival order (the
//! oldest first), as libCacheSim's `freq_node_t` chains do: a newcomer or a promoted object
//! joins at the back, and the LFU victim is the front of the lowest non-empty count (CR-LFU,
//! Cacheus's expert, takes the back instead).

use crate::slab::{Slot, NIL};

/// A member's place: its links and its count side by side, so that a request touches one
/// entry (one cache line) per member, not one in each of two arrays.
#[derive(Clone, Copy)]
struct Links {
    /// Towards the front (older).
    prev: Slot,
    /// Towards the back (newer).
    next: Slot,
    /// Request count (0: not a member).
    freq: u32,
}

const UNLINKED: Links = Links {
    prev: NIL,
    next: NIL,
    freq: 0,
};

#[derive(Clone, Copy)]
struct Chain {
    front: Slot,
    back: Slot,
}

const EMPTY: Chain = Chain {
    front: NIL,
    back: NIL,
};

pub(crate) struct FreqLists {
    /// By slot.
    links: Vec<Links>,
    /// Objects by count; index 0 unused.
    chains: Vec<Chain>,
    /// At most the lowest count with an object (searched upwards from when used).
    min_freq: usize,
}

impl Default for FreqLists {
    fn default() -> Self {
        FreqLists {
            links: Vec::new(),
            chains: vec![EMPTY; 2],
            min_freq: 1,
        }
    }
}

impl FreqLists {
    /// The request count of a member.
    #[cfg(test)]
    pub fn freq(&self, slot: Slot) -> u32 {
        self.links[slot as usize].freq
    }

    // The list operations are inlined: called once per request, as calls they cost more in
    // register saves than in work.
    #[inline]
    fn append(&mut self, slot: Slot, freq: u32) {
        let f = freq as usize;
        if f >= self.chains.len() {
            self.chains.resize(f + 1, EMPTY);
        }
        let chain = &mut self.chains[f];
        let back = chain.back;
        self.links[slot as usize] = Links {
            prev: back,
            next: NIL,
            freq,
        };
        if back == NIL {
            chain.front = slot;
        } else {
            self.links[back as usize].next = slot;
        }
        chain.back = slot;
    }

    #[inline]
    fn unlink(&mut self, slot: Slot) -> u32 {
        let Links { prev, next, freq } = self.links[slot as usize];
        let chain = &mut self.chains[freq as usize];
        if prev == NIL {
            chain.front = next;
        } else {
            self.links[prev as usize].next = next;
        }
        if next == NIL {
            chain.back = prev;
        } else {
            self.links[next as usize].prev = prev;
        }
        self.links[slot as usize] = UNLINKED;
        freq
    }

    /// Adds a new member with `freq` requests.
    #[inline]
    pub fn insert_with(&mut self, slot: Slot, freq: u32) {
        let i = slot as usize;
        if i >= self.links.len() {
            self.grow(i);
        }
        self.append(slot, freq);
        self.min_freq = self.min_freq.min(freq as usize);
    }

    /// Adds a new member with one request.
    #[inline]
    pub fn insert(&mut self, slot: Slot) {
        self.insert_with(slot, 1);
    }

    #[cold]
    fn grow(&mut self, i: usize) {
        self.links.resize(i + 1, UNLINKED);
    }

    /// One more request for a member: it moves to the back of the next count.
    #[inline]
    pub fn hit(&mut self, slot: Slot) {
        let old = self.unlink(slot);
        self.append(slot, old + 1);
        // The count it left may be empty now; if it was the lowest, the new one is.
        if old as usize == self.min_freq && self.chains[old as usize].front == NIL {
            self.min_freq += 1;
        }
    }

    /// Takes a member out (evicted or removed); returns its count.
    #[inline]
    pub fn remove(&mut self, slot: Slot) -> u32 {
        self.unlink(slot)
    }

    /// The LFU victim: the oldest member of the lowest count; `NIL` when empty.
    pub fn victim(&mut self) -> Slot {
        while self.min_freq < self.chains.len() {
            let front = self.chains[self.min_freq].front;
            if front != NIL {
                return front;
            }
            self.min_freq += 1;
        }
        // Empty: the next insert brings the minimum down again.
        self.min_freq = 1;
        NIL
    }

    /// The newest member of the lowest count (CR-LFU's churn-resistant victim); `NIL` when
    /// empty.
    pub fn newest_of_lowest(&mut self) -> Slot {
        let oldest = self.victim();
        if oldest == NIL {
            return NIL;
        }
        self.chains[self.min_freq].back
    }

    pub fn heap_bytes(&self) -> usize {
        self.links.capacity() * size_of::<Links>() + self.chains.capacity() * size_of::<Chain>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn victim_is_the_oldest_of_the_lowest_count() {
        let mut f = FreqLists::default();
        assert_eq!(f.victim(), NIL);
        for s in 0..4 {
            f.insert(s);
        }
        f.hit(0);
        f.hit(1);
        f.hit(0);
        // Counts: 0 -> 3, 1 -> 2, 2 -> 1, 3 -> 1.
        assert_eq!(f.victim(), 2);
        f.remove(2);
        assert_eq!(f.victim(), 3);
        f.remove(3);
        assert_eq!(f.victim(), 1);
        f.hit(1);
        // 0 reached 3 before 1 did.
        assert_eq!(f.victim(), 0);
        f.insert(7);
        assert_eq!(f.victim(), 7);
        f.insert(8);
        assert_eq!((f.victim(), f.newest_of_lowest()), (7, 8));
        f.remove(8);
        assert_eq!((f.freq(0), f.freq(1), f.freq(7)), (3, 3, 1));
        for s in [7, 0, 1] {
            f.remove(s);
        }
        assert_eq!(f.victim(), NIL);
        f.insert_with(5, 4);
        assert_eq!(f.victim(), 5);
    }
}
