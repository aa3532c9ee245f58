//! Per-key ordering of the requests in flight: what keeps a pipelined live replay as faithful
//! to the trace's order as the simulator.

use super::outcome::Outcome;
use super::MAX_IN_FLIGHT;
use std::collections::HashMap;
use trace::{Op, Request};

pub(super) fn is_lookup(op: Op) -> bool {
    matches!(op, Op::Get | Op::Access)
}

/// Which keys have requests in flight, and which keys are known to be stored.
///
/// A put or delete waits until nothing is in flight for its key and then holds it alone, so
/// the server sees every write in trace order relative to the lookups around it. Lookups of a
/// key overlap each other only once the key is known to be stored: the server handles the
/// lookups of one connection in order, so the second is then a hit exactly as in the
/// simulator. Lookups of a key nobody stored yet go one at a time, so the first one's nil
/// reply and fill complete before the next is sent (otherwise both would miss and fill).
pub(super) struct KeysInFlight {
    /// At most [`MAX_IN_FLIGHT`] entries.
    keys: HashMap<u64, KeyUse>,
    /// Known-stored keys, direct-mapped by a hash of the key: a bounded memory whose only
    /// failure (a key pushed out by another) costs one serialised lookup, never a wrong result.
    stored: Box<[u64]>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct KeyUse {
    lookups: u32,
    writing: bool,
}

/// Slots of [`KeysInFlight::stored`] (512 KiB).
const STORED_SLOTS_LOG2: u32 = 16;
/// An empty slot; the key u64::MAX is therefore never known stored (it is only serialised).
const NO_KEY: u64 = u64::MAX;

impl Default for KeysInFlight {
    fn default() -> KeysInFlight {
        KeysInFlight {
            keys: HashMap::with_capacity(MAX_IN_FLIGHT),
            stored: vec![NO_KEY; 1 << STORED_SLOTS_LOG2].into_boxed_slice(),
        }
    }
}

impl KeysInFlight {
    fn slot(key: u64) -> usize {
        // Fibonacci hashing: block traces have sequential keys.
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - STORED_SLOTS_LOG2)) as usize
    }

    fn known_stored(&self, key: u64) -> bool {
        key != NO_KEY && self.stored[Self::slot(key)] == key
    }

    pub(super) fn may_start(&self, r: &Request) -> bool {
        match self.keys.get(&r.key) {
            None => true,
            Some(used) => is_lookup(r.op) && !used.writing && self.known_stored(r.key),
        }
    }

    pub(super) fn start(&mut self, r: &Request) {
        let used = self.keys.entry(r.key).or_default();
        if is_lookup(r.op) {
            used.lookups += 1;
        } else {
            used.writing = true;
        }
    }

    pub(super) fn finish(&mut self, outcome: &Outcome) {
        let r = &outcome.request;
        if let Some(used) = self.keys.get_mut(&r.key) {
            if is_lookup(r.op) {
                used.lookups = used.lookups.saturating_sub(1);
            } else {
                used.writing = false;
            }
            if *used == KeyUse::default() {
                self.keys.remove(&r.key);
            }
        }
        if outcome.error.is_some() {
            return;
        }
        let slot = &mut self.stored[Self::slot(r.key)];
        match r.op {
            // A nil whose fill did not store means an overlapping request stored it.
            Op::Get | Op::Access | Op::Put => *slot = r.key,
            Op::Delete if *slot == r.key => *slot = NO_KEY,
            Op::Delete => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn request(op: Op, key: u64) -> Request {
        Request {
            op,
            key,
            ..Request::default()
        }
    }

    fn done(request: Request, nil: bool) -> Outcome {
        Outcome {
            request,
            latency: Duration::ZERO,
            nil,
            filled: nil,
            error: None,
        }
    }

    #[test]
    fn writes_to_a_key_never_overlap_other_requests_for_it() {
        let mut keys = KeysInFlight::default();
        let (get, put, del) = (
            request(Op::Get, 1),
            request(Op::Put, 1),
            request(Op::Delete, 1),
        );
        keys.start(&put);
        assert!(!keys.may_start(&get), "a lookup waits for the put");
        assert!(!keys.may_start(&del));
        assert!(keys.may_start(&request(Op::Put, 2)), "other keys are free");
        keys.finish(&done(put, false));
        assert!(keys.keys.is_empty());
        keys.start(&get);
        assert!(!keys.may_start(&put), "a put waits for the lookup");
        assert!(
            keys.may_start(&request(Op::Access, 1)),
            "key 1 is stored: lookups overlap"
        );
        keys.finish(&done(get, false));
        assert!(keys.may_start(&del));
        assert!(keys.keys.is_empty());
    }

    #[test]
    fn lookups_of_an_unknown_key_go_one_at_a_time_until_it_is_stored() {
        let mut keys = KeysInFlight::default();
        let get = request(Op::Access, 7);
        keys.start(&get);
        assert!(!keys.may_start(&get), "the first lookup may come back nil");
        keys.finish(&done(get, true));
        keys.start(&get);
        assert!(keys.may_start(&get), "filled: now stored");
        keys.finish(&done(get, false));
        keys.start(&request(Op::Delete, 7));
        keys.finish(&done(request(Op::Delete, 7), false));
        keys.start(&get);
        assert!(!keys.may_start(&get), "deleted: unknown again");
        // The sentinel key is never known stored, only serialised.
        let max = request(Op::Get, NO_KEY);
        keys.finish(&done(max, false));
        keys.start(&max);
        assert!(!keys.may_start(&max));
    }
}
