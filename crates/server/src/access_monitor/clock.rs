//! When the monitor's accesses happened, without a time per key: a log of marks, each the
//! first order number stamped in a second (Unix seconds, never going back). An access's time
//! is that of the last mark at or before its order number.
//!
//! Marks are added by the monitor's tick (each second, with every shard locked, so no access
//! straddles a mark) and only for seconds in which something was accessed. The rankings ask
//! of a time only whether it falls before `now - period` (First-K's window, and whether an
//! access starts a new run), so marks older than the period are not needed to the second:
//! past `period + 2` marks the oldest is dropped, and its accesses take the next mark's time,
//! still before the window. The log so holds at most `period + 2` marks of 8 bytes (675 KiB
//! for the default 24 hours, however many keys are tracked; a few marks on a quiet server).

use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub seq: u32,
    pub time: u32,
}

/// Bytes of one mark.
pub const MARK_BYTES: usize = std::mem::size_of::<Mark>();

#[derive(Debug, Default)]
pub struct Clock {
    marks: VecDeque<Mark>,
}

impl Clock {
    /// Whole seconds as a mark stores them (Unix seconds until 2106).
    pub fn seconds(unix_s: u64) -> u32 {
        unix_s.min(u64::from(u32::MAX)) as u32
    }

    /// The clock reads `now`; `next_seq` is the order number the next access gets. Returns
    /// the time accesses from `next_seq` on are stamped with (`now`, or the last mark's time
    /// if the wall clock went back).
    pub fn tick(&mut self, now: u32, next_seq: u32, period_s: u64) -> u32 {
        let floor = match self.marks.len() {
            0 | 1 => 0,
            n => self.marks[n - 2].time,
        };
        match self.marks.back_mut() {
            // Nothing was stamped with the last mark yet: it moves to now (back too, as far
            // as the mark before it).
            Some(last) if last.seq >= next_seq => last.time = now.max(floor),
            Some(last) if now <= last.time => return last.time,
            _ => self.marks.push_back(Mark {
                seq: next_seq,
                time: now,
            }),
        }
        let keep = usize::try_from(period_s.saturating_add(2)).unwrap_or(usize::MAX);
        while self.marks.len() > keep {
            self.marks.pop_front();
        }
        self.marks.back().map_or(now, |m| m.time)
    }

    /// The time of the access numbered `seq` (`None` before any mark).
    pub fn time_of(&self, seq: u32) -> Option<u32> {
        let after = self.marks.partition_point(|m| m.seq <= seq);
        let mark = self.marks.get(after.saturating_sub(1))?;
        Some(mark.time)
    }

    /// The first order number stamped at `time` or later (`next_seq` if none is yet): an
    /// access numbered below it happened before `time`.
    pub fn first_seq_at(&self, time: u32, next_seq: u32) -> u32 {
        let at = self.marks.partition_point(|m| m.time < time);
        self.marks.get(at).map_or(next_seq, |m| m.seq)
    }

    /// Replaces the log with `marks` (order numbers rising, times not falling).
    pub fn reset(&mut self, marks: impl IntoIterator<Item = Mark>) {
        self.marks = marks.into_iter().collect();
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.marks.len()
    }

    pub fn heap_bytes(&self) -> usize {
        self.marks.capacity() * MARK_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_take_the_time_of_their_mark_and_old_marks_fold_forward() {
        let mut c = Clock::default();
        assert_eq!(c.tick(100, 1, 10), 100);
        assert_eq!(
            c.tick(101, 1, 10),
            101,
            "nothing stamped at 100: the mark moves"
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c.tick(105, 4, 10), 105);
        assert_eq!(c.tick(103, 6, 10), 105, "the clock never goes back");
        assert_eq!(c.tick(104, 6, 10), 105, "not even for a mark nothing has");
        assert_eq!(
            (c.time_of(1), c.time_of(3), c.time_of(4), c.time_of(9)),
            (Some(101), Some(101), Some(105), Some(105))
        );
        assert_eq!(c.first_seq_at(102, 6), 4);
        assert_eq!(c.first_seq_at(101, 6), 1);
        assert_eq!(c.first_seq_at(106, 6), 6);
        // Period 10: at most 12 marks; the dropped ones' accesses take a later time that is
        // still outside the window.
        for (i, now) in (200..230).enumerate() {
            c.tick(now, 10 + i as u32, 10);
        }
        assert_eq!(c.len(), 12);
        let oldest = c.time_of(1).unwrap();
        assert!(oldest < 229 - 10, "{oldest}");
        assert_eq!(c.time_of(39), Some(229));
    }
}
