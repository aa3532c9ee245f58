//! The recent accesses a policy can scan (`timeseries()` in the policy language): a bounded
//! ring of `(time, keyid)` events, where `keyid` is a dense id given to each key in order of
//! first appearance (as seed 000's analysis numbers keys).
//!
//! The ring never holds more than `limit` events, so its memory is bounded by the limit. The
//! key-to-id map grows with the number of distinct keys ever seen, which is inherent to
//! handing out stable dense ids: fine for a replay (a trace is finite), not for a server that
//! runs for months and whose clients choose the keys (GETs of random missing keys cost ~25
//! bytes each, never released). [`AccessLog::with_bounded_ids`] bounds the map at
//! [`ID_BOUND_FACTOR`] × the limit: when it reaches that, the ids of keys no longer in the
//! ring are released. Keys in the ring keep their ids; ids are never reused (a key that
//! returns after its id was released gets a new one), so they stay unique but are no longer
//! dense.

use foldhash::fast::FixedState;
use hashbrown::HashMap;
use std::collections::VecDeque;

/// The recent accesses, oldest first, as `(time, keyid)` pairs where `keyid` is a dense id
/// given to each key in order of first appearance. Bounded: keeps the newest `limit` events.
pub struct AccessLog {
    limit: usize,
    events: VecDeque<(f64, u64)>,
    ids: HashMap<u64, u64, FixedState>,
    /// The next id to hand out (ids are never reused).
    next_id: u64,
    /// Most entries in `ids` before those of keys not in the ring are released; `None`:
    /// unbounded (ids stay dense).
    max_ids: Option<usize>,
    /// Events ever recorded, including those dropped off the front.
    recorded: u64,
}

/// A bounded log's id map holds at most this many times its event limit (at least
/// [`MIN_ID_BOUND`]) entries.
pub const ID_BOUND_FACTOR: usize = 2;
pub const MIN_ID_BOUND: usize = 1024;

impl AccessLog {
    pub fn new(limit: usize) -> AccessLog {
        AccessLog {
            limit,
            events: VecDeque::new(),
            ids: HashMap::with_hasher(FixedState::with_seed(0)),
            next_id: 0,
            max_ids: None,
            recorded: 0,
        }
    }

    /// A log whose key-to-id map is bounded too (see the module's doc): for a server.
    pub fn with_bounded_ids(limit: usize) -> AccessLog {
        AccessLog {
            max_ids: Some(limit.saturating_mul(ID_BOUND_FACTOR).max(MIN_ID_BOUND)),
            ..AccessLog::new(limit)
        }
    }

    /// Appends an access, dropping the oldest event when the log is full.
    pub fn record(&mut self, time: f64, key: u64) {
        let id = match self.ids.get(&key) {
            Some(&id) => id,
            None => {
                if self.max_ids.is_some_and(|max| self.ids.len() >= max) {
                    self.release_ids();
                }
                let id = self.next_id;
                self.next_id += 1;
                self.ids.insert(key, id);
                id
            }
        };
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
        self.next_id
    }

    /// Keys the id map holds now (bounded for [`AccessLog::with_bounded_ids`]).
    pub fn mapped_keys(&self) -> usize {
        self.ids.len()
    }

    /// Forgets the ids of keys with no event in the ring. At most `limit` keys are in the ring
    /// and this runs when the map holds twice that, so the scan is paid once per `limit` new
    /// keys at least: constant time per access, amortized.
    #[cold]
    fn release_ids(&mut self) {
        let live: hashbrown::HashSet<u64, FixedState> =
            self.events.iter().map(|&(_, id)| id).collect();
        self.ids.retain(|_, id| live.contains(id));
        self.ids.shrink_to(self.ids.len() * 2);
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

    /// Issue 25 item 6: a server's map grew ~25 bytes per distinct key, never released.
    #[test]
    fn a_bounded_log_releases_the_ids_of_keys_out_of_the_ring() {
        let mut log = AccessLog::with_bounded_ids(1000);
        let bound = 1000 * ID_BOUND_FACTOR;
        log.record(0.0, u64::MAX);
        for k in 0..100_000u64 {
            log.record(k as f64, k);
            assert!(log.mapped_keys() <= bound);
            if k % 500 == 0 {
                log.record(-1.0, u64::MAX); // one key that stays in the ring
            }
        }
        assert_eq!(log.distinct_keys(), 100_001);
        let hot_id = log.iter().find(|&(t, _)| t == -1.0).map(|(_, id)| id);
        assert!(hot_id.is_some());
        log.record(1e6, u64::MAX);
        assert_eq!(log.iter().last().map(|(_, id)| id), hot_id, "kept its id");
        let ids: Vec<u64> = log.iter().map(|(_, id)| id).collect();
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            1000 - 2 + 1,
            "ids in the ring stay distinct per key"
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
