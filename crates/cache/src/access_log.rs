//! The recent accesses a policy can scan (`timeseries()` in the policy language): a bounded
//! ring of `(time, keyid)` events, where `keyid` is a dense id given to each key in order of
//! first appearance (as seed 000's analysis numbers keys).
//!
//! The ring never holds more than `limit` events, so its memory is bounded by the limit; the
//! key-to-id map grows with the number of distinct keys ever seen, which is inherent to
//! handing out stable dense ids.

use foldhash::fast::FixedState;
use hashbrown::HashMap;
use std::collections::VecDeque;

/// The recent accesses, oldest first, as `(time, keyid)` pairs where `keyid` is a dense id
/// given to each key in order of first appearance. Bounded: keeps the newest `limit` events.
pub struct AccessLog {
    limit: usize,
    events: VecDeque<(f64, u64)>,
    ids: HashMap<u64, u64, FixedState>,
    /// Events ever recorded, including those dropped off the front.
    recorded: u64,
}

impl AccessLog {
    pub fn new(limit: usize) -> AccessLog {
        AccessLog {
            limit,
            events: VecDeque::new(),
            ids: HashMap::with_hasher(FixedState::with_seed(0)),
            recorded: 0,
        }
    }

    /// Appends an access, dropping the oldest event when the log is full.
    pub fn record(&mut self, time: f64, key: u64) {
        let next_id = self.ids.len() as u64;
        let id = *self.ids.entry(key).or_insert(next_id);
        self.recorded += 1;
        if self.limit == 0 {
            return;
        }
        if self.events.len() == self.limit {
            self.events.pop_front();
        }
        self.events.push_back((time, id));
    }

    /// Events retained now (at most the limit).
    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most events retained.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Events recorded since creation, including those no longer retained; lets a scan that
    /// remembers where it stopped resume there.
    pub fn recorded(&self) -> u64 {
        self.recorded
    }

    /// Distinct keys seen since creation (the next key id to be handed out).
    pub fn distinct_keys(&self) -> u64 {
        self.ids.len() as u64
    }

    /// `i = 0` is the oldest retained event. Panics if `i >= len()`; see [`AccessLog::try_get`].
    pub fn get(&self, i: usize) -> (f64, u64) {
        self.events[i]
    }

    /// Like [`AccessLog::get`], `None` when out of range.
    pub fn try_get(&self, i: usize) -> Option<(f64, u64)> {
        self.events.get(i).copied()
    }

    /// The retained events, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.events.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_dense_in_order_of_first_appearance() {
        let mut log = AccessLog::new(10);
        for (t, k) in [(0.0, 500), (1.0, 7), (2.0, 500), (3.0, 9)] {
            log.record(t, k);
        }
        let events: Vec<_> = log.iter().collect();
        assert_eq!(events, vec![(0.0, 0), (1.0, 1), (2.0, 0), (3.0, 2)]);
        assert_eq!(log.distinct_keys(), 3);
    }

    #[test]
    fn keeps_only_the_newest_limit_events() {
        let mut log = AccessLog::new(3);
        for k in 0..5u64 {
            log.record(k as f64, k);
        }
        assert_eq!(log.len(), 3);
        assert_eq!(log.get(0), (2.0, 2));
        assert_eq!(log.get(2), (4.0, 4));
        assert_eq!(log.try_get(3), None);
        log.record(9.0, 0);
        assert_eq!(
            log.get(2),
            (9.0, 0),
            "old keys keep their id after leaving the window"
        );
    }

    #[test]
    fn zero_limit_keeps_nothing_but_still_numbers_keys() {
        let mut log = AccessLog::new(0);
        log.record(1.0, 42);
        log.record(2.0, 43);
        assert!(log.is_empty());
        assert_eq!(log.distinct_keys(), 2);
    }
}
