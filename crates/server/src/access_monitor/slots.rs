//! One shard of the access monitor: a fixed open-addressed table of 14-byte slots, one per
//! tracked key, holding the key's tag and its packed counters. No key bytes: a warm-up reads
//! the keys back from the store and looks each one up by its tag.
//!
//! A slot is the key's 32-bit fingerprint (the shard adds four more bits of identity), its
//! last and run-start order numbers (32 bits each; the monitor renumbers them before they
//! overflow, which keeps their order, the only thing the rankings read) and its access count
//! (16 bits, saturating: Top-K tells counts apart up to 65,535 and ranks keys above that by
//! recency among themselves). Times are not stored per key: the monitor's [`super::clock`]
//! maps order numbers to seconds.
//!
//! The table has `limit + limit / 7` slots, so it is at most 7/8 full; a full shard drops its
//! least recently accessed half (the rule `cache::warmup::UnitTable` applies in replay) and
//! is rebuilt. Probing is Robin Hood's: a lookup stops at the first slot whose key sits
//! closer to its home than the one sought would, so misses stay short at 7/8.

use cache::warmup::recency_threshold;

/// One tracked key. `fp == 0` marks an empty slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, packed(2))]
pub struct Slot {
    pub fp: u32,
    pub last: u32,
    pub run: u32,
    pub count: u16,
}

/// Bytes of one slot.
pub const SLOT_BYTES: usize = std::mem::size_of::<Slot>();

/// Slots a table of at most `limit` keys has (`limit` and an empty seventh more).
pub fn capacity(limit: usize) -> usize {
    limit + (limit / 7).max(1)
}

#[derive(Default)]
pub struct Slots {
    slots: Box<[Slot]>,
    len: usize,
}

impl Slots {
    /// The fingerprint of a table hash (never 0, the empty mark).
    #[inline]
    pub fn fingerprint(hash: u64) -> u32 {
        (hash as u32).max(1)
    }

    #[inline]
    fn home(&self, fp: u32) -> usize {
        ((u64::from(fp) * self.slots.len() as u64) >> 32) as usize
    }

    #[inline]
    fn distance(&self, fp: u32, at: usize) -> usize {
        let home = self.home(fp);
        if at >= home {
            at - home
        } else {
            at + self.slots.len() - home
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Heap bytes held (the slot array).
    pub fn heap_bytes(&self) -> usize {
        self.slots.len() * SLOT_BYTES
    }

    /// Starts loading where [`Slots::find`] starts looking for `fp`.
    #[inline]
    pub fn prefetch(&self, fp: u32) {
        if !self.slots.is_empty() {
            cache::prefetch_read(&self.slots[self.home(fp)]);
        }
    }

    /// Where `fp` is kept, if it is.
    #[inline]
    fn find(&self, fp: u32) -> Option<usize> {
        let n = self.slots.len();
        if n == 0 {
            return None;
        }
        let mut at = self.home(fp);
        for probe in 0..n {
            let slot = self.slots[at];
            if slot.fp == fp {
                return Some(at);
            }
            if slot.fp == 0 || self.distance(slot.fp, at) < probe {
                return None;
            }
            at = if at + 1 == n { 0 } else { at + 1 };
        }
        None
    }

    pub fn get(&self, fp: u32) -> Option<Slot> {
        self.find(fp).map(|at| self.slots[at])
    }

    /// The slot of `fp` to update in place, if it is kept.
    #[inline]
    pub fn get_mut(&mut self, fp: u32) -> Option<&mut Slot> {
        self.find(fp).map(move |at| &mut self.slots[at])
    }

    /// Adds a key not kept yet, sizing the table for `limit` on first use; when that makes
    /// more than `limit`, drops the less recently accessed half. Returns whether it trimmed.
    pub fn insert(&mut self, slot: Slot, limit: usize) -> bool {
        debug_assert!(slot.fp != 0 && self.find(slot.fp).is_none());
        if self.slots.len() != capacity(limit) {
            // First use, or `--warmup-track` changed.
            let kept: Vec<Slot> = self.iter().collect();
            self.rebuild(kept, limit);
        }
        self.place(slot);
        if self.len <= limit {
            return false;
        }
        let keep = limit / 2;
        if let Some(threshold) = recency_threshold(self.iter().map(|s| u64::from(s.last)), keep) {
            let kept: Vec<Slot> = self
                .iter()
                .filter(|s| u64::from(s.last) >= threshold)
                .collect();
            self.rebuild(kept, limit);
        }
        true
    }

    /// Robin Hood placement of a key known to be absent; the table has a free slot.
    fn place(&mut self, mut slot: Slot) {
        let n = self.slots.len();
        let mut at = self.home(slot.fp);
        let mut dist = 0;
        loop {
            let here = self.slots[at];
            if here.fp == 0 {
                self.slots[at] = slot;
                self.len += 1;
                return;
            }
            let theirs = self.distance(here.fp, at);
            if theirs < dist {
                self.slots[at] = slot;
                slot = here;
                dist = theirs;
            }
            at = if at + 1 == n { 0 } else { at + 1 };
            dist += 1;
        }
    }

    /// Replaces the contents with `slots` in a table sized for `limit`.
    pub fn rebuild(&mut self, slots: Vec<Slot>, limit: usize) {
        self.slots = vec![Slot::default(); capacity(limit.max(slots.len()))].into_boxed_slice();
        self.len = 0;
        for slot in slots {
            self.place(slot);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = Slot> + '_ {
        self.slots.iter().copied().filter(|s| s.fp != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(fp: u32, last: u32) -> Slot {
        Slot {
            fp,
            last,
            run: last,
            count: 1,
        }
    }

    #[test]
    fn a_slot_is_fourteen_bytes_and_the_table_at_most_seven_eighths_full() {
        assert_eq!(SLOT_BYTES, 14);
        for limit in [2, 7, 100, 6250, 62_500] {
            let slots = capacity(limit);
            assert!(slots > limit, "{limit}: a free slot ends every probe");
            assert!(SLOT_BYTES * slots <= 16 * limit || limit < 7, "{limit}");
        }
    }

    #[test]
    fn keys_are_found_after_collisions_and_a_full_table_keeps_its_recent_half() {
        let mut t = Slots::default();
        // Fingerprints that share a home: a small table maps nearby values to one slot.
        for (i, fp) in (1..=60u32).map(|i| i * 3).enumerate() {
            let trimmed = t.insert(slot(fp, i as u32 + 1), 100);
            assert!(!trimmed);
        }
        for fp in (1..=60u32).map(|i| i * 3) {
            assert_eq!(t.get(fp).map(|s| s.fp), Some(fp));
        }
        assert_eq!(t.get(4), None);
        t.get_mut(3).unwrap().count = 9;
        assert_eq!(t.get(3).unwrap().count, 9);

        let mut t = Slots::default();
        let mut trims = 0;
        for i in 1..=1000u32 {
            trims += u32::from(t.insert(slot(i.wrapping_mul(2_654_435_761).max(1), i), 100));
            assert!(t.len() <= 100);
            assert_eq!(t.heap_bytes(), capacity(100) * SLOT_BYTES);
        }
        assert!(trims > 0);
        assert!(t.iter().all(|s| s.last > 1000 - 100));
        assert!(t.get(1000u32.wrapping_mul(2_654_435_761)).is_some());
    }
}
