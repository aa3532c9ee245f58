//! Distinct keys accessed in a sliding time window (seed 000 Fig. 5, the dots), and per
//! tumbling window for summary statistics.
//!
//! A min-heap holds one entry per key active in the window, keyed by the time it was last
//! known to be accessed; expired entries are dropped or re-armed with the key's newest time.
//! Memory: the heap is bounded by the keys active in one window; the per-key last-access time
//! lives in a vector indexed by dense id (one `f64` per distinct key).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Sliding-window distinct-key counter over non-decreasing times.
pub struct WindowKeys {
    window: f64,
    last_seen: Vec<f64>,
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    active: u64,
    tumbling_index: u64,
    tumbling_seen: Vec<u64>,
    tumbling_count: u64,
    tumbling: TumblingStats,
}

/// Distinct keys per tumbling window, summarised.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TumblingStats {
    /// Windows that ended (including empty ones between accesses).
    pub windows: u64,
    pub sum: u64,
    pub max: u64,
}

impl TumblingStats {
    pub fn mean(&self) -> f64 {
        if self.windows == 0 {
            0.0
        } else {
            self.sum as f64 / self.windows as f64
        }
    }
}

/// Orders non-negative times as integers (their IEEE bits order the same way).
fn time_bits(t: f64) -> u64 {
    t.max(0.0).to_bits()
}

impl WindowKeys {
    /// `window` in the trace's time unit (seconds); must be positive.
    pub fn new(window: f64) -> Self {
        WindowKeys {
            window,
            last_seen: Vec::new(),
            heap: BinaryHeap::new(),
            active: 0,
            tumbling_index: 0,
            tumbling_seen: Vec::new(),
            tumbling_count: 0,
            tumbling: TumblingStats::default(),
        }
    }

    /// Records an access to dense id `id` at relative time `t` (non-decreasing across calls).
    pub fn access(&mut self, t: f64, id: u32) {
        self.expire(t);
        let idx = id as usize;
        if idx >= self.last_seen.len() {
            self.last_seen.resize(idx + 1, f64::NEG_INFINITY);
            self.tumbling_seen.resize(idx + 1, u64::MAX);
        }
        if self.last_seen[idx] <= t - self.window {
            self.heap.push(Reverse((time_bits(t), id)));
            self.active += 1;
        }
        self.last_seen[idx] = t;
        self.tumble(t);
        if self.tumbling_seen[idx] != self.tumbling_index {
            self.tumbling_seen[idx] = self.tumbling_index;
            self.tumbling_count += 1;
        }
    }

    fn expire(&mut self, t: f64) {
        let horizon = t - self.window;
        while let Some(&Reverse((bits, id))) = self.heap.peek() {
            if f64::from_bits(bits) > horizon {
                break;
            }
            self.heap.pop();
            let last = self.last_seen[id as usize];
            if last > horizon {
                self.heap.push(Reverse((time_bits(last), id)));
            } else {
                self.active -= 1;
            }
        }
    }

    fn tumble(&mut self, t: f64) {
        let index = (t / self.window).floor().max(0.0) as u64;
        if index > self.tumbling_index {
            self.close_window(self.tumbling_count);
            // Windows with no access at all count as zero distinct keys.
            self.tumbling.windows += index - self.tumbling_index - 1;
            self.tumbling_index = index;
            self.tumbling_count = 0;
        }
    }

    fn close_window(&mut self, count: u64) {
        self.tumbling.windows += 1;
        self.tumbling.sum += count;
        self.tumbling.max = self.tumbling.max.max(count);
    }

    /// Keys accessed in `(t - window, t]` as of the last access.
    pub fn active(&self) -> u64 {
        self.active
    }

    /// Per-tumbling-window statistics including the window in progress.
    pub fn tumbling(&self) -> TumblingStats {
        let mut stats = self.tumbling;
        if self.tumbling_count > 0 {
            stats.windows += 1;
            stats.sum += self.tumbling_count;
            stats.max = stats.max.max(self.tumbling_count);
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_count_matches_brute_force() {
        let events: Vec<(f64, u32)> = (0..2000u32)
            .map(|i| (f64::from(i) * 0.37, (i * 7919) % 53))
            .collect();
        let mut w = WindowKeys::new(5.0);
        for (n, &(t, id)) in events.iter().enumerate() {
            w.access(t, id);
            let mut seen: Vec<u32> = events[..=n]
                .iter()
                .filter(|(u, _)| *u > t - 5.0)
                .map(|&(_, k)| k)
                .collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(w.active(), seen.len() as u64, "at event {n}");
        }
    }

    #[test]
    fn tumbling_windows_count_empty_gaps() {
        let mut w = WindowKeys::new(10.0);
        for (t, id) in [(0.0, 0), (1.0, 1), (2.0, 0), (35.0, 2)] {
            w.access(t, id);
        }
        let stats = w.tumbling();
        // windows [0,10): 2 keys, [10,20) and [20,30): 0, [30,40): 1 key.
        assert_eq!(stats.windows, 4);
        assert_eq!(stats.sum, 3);
        assert_eq!(stats.max, 2);
    }
}
