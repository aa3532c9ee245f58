//! Dense key ids in order of first appearance, as seed 000 numbers ParSplice states.
//!
//! Fan detection and the key-id/time picture need small integers that grow with the key space;
//! trace keys are arbitrary 64-bit values. Memory: one map entry per distinct key.

use rustc_hash::FxHashMap;

/// Maps trace keys to `0, 1, 2, ...` in order of first appearance.
#[derive(Default)]
pub struct DenseIds {
    ids: FxHashMap<u64, u32>,
}

impl DenseIds {
    /// The dense id of `key` and whether this is its first appearance.
    pub fn id(&mut self, key: u64) -> (u32, bool) {
        let next = self.ids.len() as u32;
        let mut fresh = false;
        let id = *self.ids.entry(key).or_insert_with(|| {
            fresh = true;
            next
        });
        (id, fresh)
    }

    /// Distinct keys seen so far.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_first_appearance() {
        let mut d = DenseIds::default();
        assert_eq!(d.id(900), (0, true));
        assert_eq!(d.id(5), (1, true));
        assert_eq!(d.id(900), (0, false));
        assert_eq!(d.id(7), (2, true));
        assert_eq!(d.len(), 3);
    }
}
