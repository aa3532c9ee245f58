//! Access fans (seed 000 §V-B, Fig. 9): groups of accesses to a moving subset of keys.
//!
//! Fig. 9 scans the (time, dense key id) series backwards and opens a new fan each time the key
//! id drops below the lowest id of the fan after it. Those fan boundaries are exactly the
//! positions whose id is below every later id (the strict suffix minima), so the same fans come
//! out of one forward pass with a stack of fans whose bottoms increase: an access with id `x`
//! merges every stacked fan with bottom `>= x` into itself, amortised O(1) per access.
//!
//! This crate is that stack and nothing more, so that `mantle analyze` (whole traces, with a
//! bound on the fans kept) and the policy engine's `timeseries()` scans (a sliding window,
//! kept between ticks) find the same fans by construction. Each host adds its own bounds.

use std::collections::VecDeque;

/// One fan: the accesses at positions `first..=last` of the series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fan {
    /// Position of the oldest access (positions count every access the stack was fed).
    pub first: u64,
    /// Position of the newest access.
    pub last: u64,
    /// Time of `first`.
    pub start: f64,
    /// Time of `last`.
    pub finish: f64,
    /// Lowest key id accessed in the fan (on the scan's fans, the id at `last`).
    pub bottom: u64,
    /// Highest key id accessed in the fan.
    pub top: u64,
}

impl Fan {
    /// The fan of a single access.
    pub fn single(pos: u64, time: f64, id: u64) -> Fan {
        Fan {
            first: pos,
            last: pos,
            start: time,
            finish: time,
            bottom: id,
            top: id,
        }
    }

    /// Accesses in the fan.
    pub fn accesses(&self) -> u64 {
        self.last - self.first + 1
    }

    /// `top - bottom`: Fig. 9's height of the fan.
    pub fn height(&self) -> u64 {
        self.top - self.bottom
    }

    /// Extends the fan over `later`, the fan that immediately follows it.
    pub fn absorb(&mut self, later: &Fan) {
        debug_assert_eq!(self.last + 1, later.first, "fans are contiguous");
        self.last = later.last;
        self.finish = later.finish;
        self.bottom = self.bottom.min(later.bottom);
        self.top = self.top.max(later.top);
    }
}

/// The fans of a series, oldest first, fed one access at a time.
#[derive(Debug, Clone, Default)]
pub struct FanStack {
    fans: VecDeque<Fan>,
}

impl FanStack {
    pub fn new() -> FanStack {
        FanStack::default()
    }

    /// Records the access at position `pos` (one past the previous one's) of key `id` at
    /// `time`, merging into it every fan whose bottom is not below `id`.
    pub fn push(&mut self, pos: u64, time: f64, id: u64) {
        let single = Fan::single(pos, time, id);
        // Most accesses either open a fan or extend the newest one: no fan moves then.
        let Some(back) = self.fans.back_mut() else {
            self.fans.push_back(single);
            return;
        };
        if back.bottom < id {
            self.fans.push_back(single);
            return;
        }
        back.absorb(&single);
        while self.fans.len() >= 2 && self.fans[self.fans.len() - 2].bottom >= id {
            let later = self.fans.pop_back().expect("two fans");
            self.fans.back_mut().expect("one fan").absorb(&later);
        }
    }

    /// The fans, oldest first.
    pub fn fans(&self) -> &VecDeque<Fan> {
        &self.fans
    }

    pub fn len(&self) -> usize {
        self.fans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fans.is_empty()
    }

    /// The oldest fan, for a host whose window drops accesses off the front.
    pub fn front_mut(&mut self) -> Option<&mut Fan> {
        self.fans.front_mut()
    }

    pub fn pop_front(&mut self) -> Option<Fan> {
        self.fans.pop_front()
    }

    /// The fan holding position `last` as its newest access, if any (binary search).
    pub fn ending_at(&self, last: u64) -> Option<&Fan> {
        self.fans
            .binary_search_by_key(&last, |f| f.last)
            .ok()
            .map(|i| &self.fans[i])
    }

    /// Halves the number of fans by merging neighbours pairwise (a bound on memory that
    /// makes the fans coarser than the scan's).
    pub fn coarsen_pairs(&mut self) {
        let mut merged = VecDeque::with_capacity(self.fans.len().div_ceil(2));
        let mut fans = self.fans.drain(..);
        while let Some(mut f) = fans.next() {
            if let Some(later) = fans.next() {
                f.absorb(&later);
            }
            merged.push_back(f);
        }
        drop(fans);
        self.fans = merged;
    }
}

/// Fig. 9 transcribed literally (backwards over the whole series), oldest fan first: the
/// oracle the forward stack is tested against.
pub fn backward_scan(events: &[(f64, u64)]) -> Vec<Fan> {
    let Some(&(t, id)) = events.last() else {
        return Vec::new();
    };
    let n = events.len() as u64;
    let mut fans = Vec::new();
    let mut fan = Fan {
        first: 0,
        last: n - 1,
        start: 0.0,
        finish: t,
        bottom: id,
        top: 0,
    };
    for i in (0..events.len()).rev() {
        let (t, id) = events[i];
        if id < fan.bottom {
            fan.first = i as u64 + 1;
            fan.start = events[i + 1].0;
            fans.push(fan);
            fan = Fan {
                first: 0,
                last: i as u64,
                start: 0.0,
                finish: t,
                bottom: id,
                top: 0,
            };
        }
        fan.top = fan.top.max(id);
    }
    fan.first = 0;
    fan.start = events[0].0;
    fans.push(fan);
    fans.reverse();
    fans
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift; ids drift upwards with noise of width `spread`, like fans of a growing
    /// key space.
    fn events(n: usize, seed: u64, spread: u64) -> Vec<(f64, u64)> {
        let mut x = seed.max(1);
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (i as f64 * 0.5, i as u64 / 10 + x % spread)
            })
            .collect()
    }

    fn stacked(events: &[(f64, u64)]) -> Vec<Fan> {
        let mut stack = FanStack::new();
        for (pos, &(t, id)) in events.iter().enumerate() {
            stack.push(pos as u64, t, id);
        }
        stack.fans().iter().copied().collect()
    }

    #[test]
    fn the_forward_stack_finds_fig9_s_fans_on_random_series() {
        for seed in 1..=40 {
            for spread in [1, 3, 40, 1000] {
                let e = events(500 + seed as usize * 37, seed, spread);
                assert_eq!(
                    stacked(&e),
                    backward_scan(&e),
                    "seed {seed} spread {spread}"
                );
            }
        }
    }

    #[test]
    fn fans_tile_the_series_with_rising_bottoms() {
        let e = events(3000, 9, 60);
        let fans = stacked(&e);
        assert_eq!(fans.first().map(|f| f.first), Some(0));
        assert_eq!(fans.last().map(|f| f.last), Some(2999));
        for w in fans.windows(2) {
            assert_eq!(w[0].last + 1, w[1].first);
            assert!(w[0].bottom < w[1].bottom);
        }
        assert_eq!(fans.iter().map(Fan::accesses).sum::<u64>(), 3000);
    }

    #[test]
    fn coarsening_keeps_every_access_and_the_extremes() {
        let e = events(2000, 5, 40);
        let mut stack = FanStack::new();
        for (pos, &(t, id)) in e.iter().enumerate() {
            stack.push(pos as u64, t, id);
        }
        let before: Vec<Fan> = stack.fans().iter().copied().collect();
        stack.coarsen_pairs();
        assert_eq!(stack.len(), before.len().div_ceil(2));
        for (i, f) in stack.fans().iter().enumerate() {
            let pair = &before[2 * i..(2 * i + 2).min(before.len())];
            assert_eq!(f.first, pair[0].first);
            assert_eq!(f.last, pair[pair.len() - 1].last);
            assert_eq!(f.top, pair.iter().map(|p| p.top).max().unwrap());
        }
        assert_eq!(stack.ending_at(before[1].last).map(|f| f.first), Some(0));
    }

    #[test]
    fn empty_and_constant_series() {
        assert!(backward_scan(&[]).is_empty());
        let flat: Vec<(f64, u64)> = (0..5).map(|i| (i as f64, 3)).collect();
        assert_eq!(stacked(&flat).len(), 1);
        let rising: Vec<(f64, u64)> = (0..5).map(|i| (i as f64, i)).collect();
        assert_eq!(stacked(&rising).len(), 5);
    }
}
