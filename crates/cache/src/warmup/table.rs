//! What the monitor keeps per unit, and the bounded table it keeps it in.
//!
//! A unit is a key, or a region of a block device's address space; the table is keyed by a
//! 64-bit id (replay: the trace id or region number; the server: the key's table hash, with
//! the key's bytes in the payload). When the table outgrows its limit it drops the half
//! accessed least recently, so the monitor forgets the coldest units first (Bonfire keeps a
//! bounded log for the same reason) and its memory stays bounded.

use core::hash::BuildHasher;
use hashbrown::HashMap;

/// When an access happened: the monitor-wide order number (unique per access, so it breaks
/// every tie in the rankings) and the time in seconds (trace time in replay, Unix time in the
/// server).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stamp {
    pub seq: u64,
    pub time: f64,
}

/// Enough about one unit's accesses to rank it for any of the four strategies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Record {
    pub count: u64,
    pub last_seq: u64,
    pub last_time: f64,
    /// Start of the current run: the first access after a gap longer than First-K's period.
    pub run_time: f64,
    pub run_seq: u64,
}

impl Record {
    pub fn first(at: Stamp) -> Record {
        Record {
            count: 1,
            last_seq: at.seq,
            last_time: at.time,
            run_time: at.time,
            run_seq: at.seq,
        }
    }

    /// One more access; a gap longer than `period` seconds starts a new run.
    #[inline]
    pub fn touch(&mut self, at: Stamp, period: f64) {
        if at.time - self.last_time > period {
            self.run_time = at.time;
            self.run_seq = at.seq;
        }
        self.count += 1;
        self.last_seq = at.seq;
        self.last_time = at.time;
    }
}

/// A unit's record and what its host keeps beside it (replay: size and offset; the server:
/// the key's bytes).
#[derive(Clone, Debug, PartialEq)]
pub struct Unit<P> {
    pub record: Record,
    pub payload: P,
}

/// Units by id, at most `limit` of them after each access (the limit is given per call so a
/// host may change it at run time).
pub struct UnitTable<P, S = foldhash::fast::FixedState> {
    units: HashMap<u64, Unit<P>, S>,
}

impl<P, S: BuildHasher + Default> Default for UnitTable<P, S> {
    fn default() -> Self {
        UnitTable {
            units: HashMap::with_hasher(S::default()),
        }
    }
}

impl<P, S: BuildHasher> UnitTable<P, S> {
    /// Records an access to unit `id`. `refresh(payload)` says whether the unit kept under
    /// `id` is this one, updating its payload if so (a table keyed by hash may hold another
    /// key with the same hash: the newer one then takes the slot, with `fresh()`). Returns
    /// whether the table was full and dropped its colder half.
    #[inline]
    pub fn record(
        &mut self,
        id: u64,
        at: Stamp,
        period: f64,
        limit: usize,
        refresh: impl FnOnce(&mut P) -> bool,
        fresh: impl FnOnce() -> P,
    ) -> bool {
        if let Some(unit) = self.units.get_mut(&id) {
            if refresh(&mut unit.payload) {
                unit.record.touch(at, period);
                return false;
            }
        }
        self.insert(
            id,
            Unit {
                record: Record::first(at),
                payload: fresh(),
            },
            limit,
        )
    }

    /// Puts `unit` under `id` (replacing what was there), then trims to `limit`; returns
    /// whether it trimmed.
    pub fn insert(&mut self, id: u64, unit: Unit<P>, limit: usize) -> bool {
        self.units.insert(id, unit);
        if self.units.len() <= limit {
            return false;
        }
        if let Some(t) =
            recency_threshold(self.units.values().map(|u| u.record.last_seq), limit / 2)
        {
            self.units.retain(|_, u| u.record.last_seq >= t);
        }
        true
    }

    pub fn get(&self, id: u64) -> Option<&Unit<P>> {
        self.units.get(&id)
    }

    pub fn len(&self) -> usize {
        self.units.len()
    }

    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, &Unit<P>)> {
        self.units.iter().map(|(&id, u)| (id, u))
    }
}

/// The smallest order number among the `keep` most recent of `stamps`, so that keeping what
/// is at least as recent keeps exactly those (order numbers are unique); `None` when there
/// are no more than `keep`.
pub fn recency_threshold(stamps: impl Iterator<Item = u64>, keep: usize) -> Option<u64> {
    let mut stamps: Vec<u64> = stamps.collect();
    let cut = stamps.len().checked_sub(keep).filter(|&c| c > 0)?;
    let (_, &mut threshold, _) = stamps.select_nth_unstable(cut);
    Some(threshold)
}

#[cfg(test)]
mod tests {
    use super::*;
    use foldhash::fast::FixedState;

    fn at(seq: u64, time: f64) -> Stamp {
        Stamp { seq, time }
    }

    #[test]
    fn a_gap_longer_than_the_period_starts_a_run() {
        let mut r = Record::first(at(1, 10.0));
        r.touch(at(2, 50.0), 100.0);
        assert_eq!((r.count, r.run_seq, r.run_time), (2, 1, 10.0));
        r.touch(at(3, 200.0), 100.0);
        assert_eq!(
            (r.count, r.run_seq, r.run_time, r.last_seq),
            (3, 3, 200.0, 3)
        );
    }

    #[test]
    fn a_full_table_keeps_its_more_recent_half() {
        let mut t: UnitTable<(), FixedState> = UnitTable::default();
        let mut trims = 0;
        for i in 0..1000u64 {
            let trimmed = t.record(i % 300, at(i + 1, i as f64), 1e9, 100, |_| true, || ());
            trims += u64::from(trimmed);
            assert!(t.len() <= 100);
        }
        assert!(trims > 0);
        assert!(t.get(999 % 300).is_some(), "the latest unit is kept");
        let kept: Vec<u64> = t.iter().map(|(_, u)| u.record.last_seq).collect();
        assert!(kept.iter().all(|&s| s > 1000 - 100), "{kept:?}");
    }

    #[test]
    fn another_unit_under_the_same_id_takes_the_slot() {
        let mut t: UnitTable<&str, FixedState> = UnitTable::default();
        t.record(7, at(1, 0.0), 1e9, 10, |p| *p == "a", || "a");
        t.record(7, at(2, 0.0), 1e9, 10, |p| *p == "a", || "a");
        assert_eq!(t.get(7).unwrap().record.count, 2);
        t.record(7, at(3, 0.0), 1e9, 10, |p| *p == "b", || "b");
        let unit = t.get(7).unwrap();
        assert_eq!((unit.payload, unit.record.count), ("b", 1));
    }
}
