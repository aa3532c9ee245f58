//! SCAN's cursors. A client must get a number back (redis-py and redis-rs parse the cursor as
//! an integer), while the walk resumes after a stored key (see `store::rocks::KeyPage`), which
//! no 64-bit number can hold. So the server remembers where each walk stands: a cursor is a
//! walk's number and its step. The newest [`MAX_WALKS`] walks are remembered; a cursor of a
//! forgotten walk is refused with an error that says so (never silently restarted, which
//! would return keys twice). The previous step of a walk stays valid, so a client that
//! retries the call it lost the reply of gets the same page again.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Walks remembered at once (each holds at most two stored keys).
pub const MAX_WALKS: usize = 4096;
/// Steps of one walk wrap at this; a cursor is `walk * STEPS + step`.
const STEPS: u64 = 1 << 20;

#[derive(Default)]
pub struct ScanCursors {
    inner: Mutex<Walks>,
}

#[derive(Default)]
struct Walks {
    by_id: HashMap<u64, Walk>,
    /// Oldest first, for forgetting.
    order: VecDeque<u64>,
    next_id: u64,
}

struct Walk {
    step: u64,
    at: Vec<u8>,
    /// Where the previous step resumed (a retried call).
    before: Option<(u64, Vec<u8>)>,
}

/// Where a cursor resumes.
#[derive(Debug, PartialEq, Eq)]
pub enum Resume {
    Start,
    After(Vec<u8>),
    /// Not a cursor this server handed out, or one of a walk since forgotten.
    Unknown,
}

impl ScanCursors {
    pub fn resume(&self, cursor: u64) -> Resume {
        if cursor == 0 {
            return Resume::Start;
        }
        let (id, step) = (cursor / STEPS, cursor % STEPS);
        let walks = self.lock();
        match walks.by_id.get(&id) {
            Some(walk) if walk.step == step => Resume::After(walk.at.clone()),
            Some(Walk {
                before: Some((before, at)),
                ..
            }) if *before == step => Resume::After(at.clone()),
            _ => Resume::Unknown,
        }
    }

    /// The cursor that resumes after `position`, for the call that was given `cursor`.
    pub fn advance(&self, cursor: u64, position: Vec<u8>) -> u64 {
        let mut walks = self.lock();
        let (id, step) = (cursor / STEPS, cursor % STEPS);
        if cursor != 0 {
            if let Some(walk) = walks.by_id.get_mut(&id) {
                let next = (step + 1) % STEPS;
                if walk.step == step {
                    walk.before = Some((step, std::mem::replace(&mut walk.at, position)));
                } else {
                    walk.at = position; // a retried step: its successor is recomputed
                }
                walk.step = next;
                return id * STEPS + next;
            }
        }
        walks.next_id += 1;
        // Ids stay below 2^43, so every cursor fits a signed 64-bit integer.
        let id = walks.next_id % (1 << 43);
        if walks.order.len() >= MAX_WALKS {
            if let Some(oldest) = walks.order.pop_front() {
                walks.by_id.remove(&oldest);
            }
        }
        walks.order.push_back(id);
        walks.by_id.insert(
            id,
            Walk {
                step: 1,
                at: position,
                before: None,
            },
        );
        id * STEPS + 1
    }

    /// A walk that reached the end: its number can be forgotten.
    pub fn finish(&self, cursor: u64) {
        if cursor == 0 {
            return;
        }
        let mut walks = self.lock();
        let id = cursor / STEPS;
        if walks.by_id.remove(&id).is_some() {
            walks.order.retain(|&w| w != id);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Walks> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_resume_retry_and_are_forgotten_oldest_first() {
        let cursors = ScanCursors::default();
        assert_eq!(cursors.resume(0), Resume::Start);
        let first = cursors.advance(0, b"a".to_vec());
        assert_eq!(cursors.resume(first), Resume::After(b"a".to_vec()));
        let second = cursors.advance(first, b"b".to_vec());
        assert_ne!(first, second);
        assert_eq!(cursors.resume(second), Resume::After(b"b".to_vec()));
        // The call given `first` may be retried once its reply was lost.
        assert_eq!(cursors.resume(first), Resume::After(b"a".to_vec()));
        assert_eq!(cursors.resume(12345), Resume::Unknown);
        cursors.finish(second);
        assert_eq!(cursors.resume(second), Resume::Unknown);
        let old = cursors.advance(0, b"x".to_vec());
        for _ in 0..MAX_WALKS {
            cursors.advance(0, b"y".to_vec());
        }
        assert_eq!(cursors.resume(old), Resume::Unknown);
        assert!(cursors.lock().by_id.len() <= MAX_WALKS);
    }
}
