//! Next access times for the offline algorithms (Belady, BeladySize).
//!
//! libCacheSim's `oracleGeneral` traces store, with each request, the 1-based index of the
//! next request for the same key (its "next access vtime"), or none. [`next_accesses`]
//! computes the same numbers for a trace of any format in one backward pass over its keys:
//! it holds the whole trace's keys and results (16 bytes per request) plus a map of the
//! distinct keys (about 24 bytes per object), so a 100M-request trace costs about 2 GB.

use std::collections::HashMap;

/// "Not requested again".
pub const NEVER: u64 = u64::MAX;

/// For every request of `keys` (in trace order), the 1-based index of the next request for
/// the same key, or [`NEVER`].
pub fn next_accesses(keys: impl IntoIterator<Item = u64>) -> Vec<u64> {
    let keys: Vec<u64> = keys.into_iter().collect();
    let mut next = vec![NEVER; keys.len()];
    let mut seen: HashMap<u64, u64, foldhash::fast::FixedState> =
        HashMap::with_hasher(foldhash::fast::FixedState::with_seed(0));
    for (i, &key) in keys.iter().enumerate().rev() {
        if let Some(later) = seen.insert(key, i as u64 + 1) {
            next[i] = later;
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_based_index_of_the_next_request() {
        assert_eq!(next_accesses([7, 8, 7, 7, 9]), [3, NEVER, 4, NEVER, NEVER]);
        assert!(next_accesses([]).is_empty());
    }
}
