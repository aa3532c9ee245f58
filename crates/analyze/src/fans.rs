//! Access "fans" (seed 000 §V-B): groups of accesses to a moving subset of keys.
//!
//! Seed 000 Fig. 9 scans the (time, dense key id) series backwards and opens a new fan each
//! time the key id drops below the lowest id of the fan after it. Those fan boundaries are
//! exactly the positions whose id is below every later id (suffix minima), so the same fans
//! come out of one forward pass with a stack of open fans whose bottoms increase: an access
//! with id `x` merges every stacked fan with bottom `>= x` into itself. No window parameter.
//!
//! Memory: one entry per fan on the stack, bounded by `max_fans`; beyond it neighbouring fans
//! are merged pairwise (the result says so). Fans with fewer than `min_accesses` accesses are
//! merged into the fan before them when reporting, since single stray accesses split fans.

use serde::Serialize;

/// One fan: its time span, key-id range and volume.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Fan {
    /// Time of its first and last access (seconds from the trace start).
    pub start: f64,
    pub end: f64,
    /// Lowest and highest dense key id accessed in it.
    pub bottom: u32,
    pub top: u32,
    pub accesses: u64,
}

impl Fan {
    /// Keys spanned (`top - bottom + 1`): how much a cache must hold to serve the fan.
    pub fn keys(&self) -> u64 {
        u64::from(self.top - self.bottom) + 1
    }

    fn absorb(&mut self, later: &Fan) {
        self.end = later.end;
        self.bottom = self.bottom.min(later.bottom);
        self.top = self.top.max(later.top);
        self.accesses += later.accesses;
    }
}

/// Streaming fan detector.
pub struct FanDetector {
    stack: Vec<Fan>,
    max_fans: usize,
    coarsened: bool,
}

/// Fans as reported.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FanReport {
    pub method: String,
    /// Fans found by the scan before small ones were merged.
    pub raw_count: u64,
    pub min_accesses: u64,
    /// Whether `max_fans` forced merging of neighbours (coarser fans than the scan's).
    pub coarsened: bool,
    pub count: u64,
    pub mean_keys: f64,
    pub median_keys: u64,
    pub max_keys: u64,
    pub mean_duration_s: f64,
    pub fans: Vec<FanOut>,
}

/// A fan with its size spelled out for JSON readers.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FanOut {
    pub start: f64,
    pub end: f64,
    pub bottom: u32,
    pub top: u32,
    pub keys: u64,
    pub accesses: u64,
}

impl FanDetector {
    pub fn new(max_fans: usize) -> Self {
        FanDetector {
            stack: Vec::new(),
            max_fans: max_fans.max(2),
            coarsened: false,
        }
    }

    /// Records an access to dense id `id` at time `t`.
    pub fn access(&mut self, t: f64, id: u32) {
        let mut fan = Fan {
            start: t,
            end: t,
            bottom: id,
            top: id,
            accesses: 1,
        };
        while let Some(last) = self.stack.last() {
            if last.bottom < id {
                break;
            }
            let mut earlier = self.stack.pop().expect("peeked");
            earlier.absorb(&fan);
            fan = earlier;
        }
        self.stack.push(fan);
        if self.stack.len() > self.max_fans {
            self.coarsen();
        }
    }

    fn coarsen(&mut self) {
        let merged: Vec<Fan> = self
            .stack
            .chunks(2)
            .map(|pair| {
                let mut f = pair[0];
                if let Some(later) = pair.get(1) {
                    f.absorb(later);
                }
                f
            })
            .collect();
        self.stack = merged;
        self.coarsened = true;
    }

    /// The fans so far, oldest first, small ones merged into their predecessor.
    pub fn report(&self, min_accesses: u64) -> FanReport {
        let mut fans: Vec<Fan> = Vec::new();
        for fan in &self.stack {
            match fans.last_mut() {
                Some(prev) if fan.accesses < min_accesses => prev.absorb(fan),
                _ => fans.push(*fan),
            }
        }
        // A small first fan is merged forward instead.
        if fans.len() > 1 && fans[0].accesses < min_accesses {
            let first = fans.remove(0);
            let next = &mut fans[0];
            next.start = first.start;
            next.bottom = next.bottom.min(first.bottom);
            next.top = next.top.max(first.top);
            next.accesses += first.accesses;
        }
        let mut sizes: Vec<u64> = fans.iter().map(Fan::keys).collect();
        sizes.sort_unstable();
        let count = fans.len() as u64;
        let mean = |total: f64| {
            if count == 0 {
                0.0
            } else {
                total / count as f64
            }
        };
        FanReport {
            method: "suffix-minimum key id (seed 000 Fig. 9 backward scan)".to_string(),
            raw_count: self.stack.len() as u64,
            min_accesses,
            coarsened: self.coarsened,
            count,
            mean_keys: mean(sizes.iter().sum::<u64>() as f64),
            median_keys: sizes.get(sizes.len() / 2).copied().unwrap_or(0),
            max_keys: sizes.last().copied().unwrap_or(0),
            mean_duration_s: mean(fans.iter().map(|f| f.end - f.start).sum()),
            fans: fans
                .iter()
                .map(|f| FanOut {
                    start: f.start,
                    end: f.end,
                    bottom: f.bottom,
                    top: f.top,
                    keys: f.keys(),
                    accesses: f.accesses,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Fig. 9 algorithm, transcribed: backwards, new fan when the id drops below the
    /// current fan's bottom. Returns (bottom, top, accesses) oldest first.
    fn backward_scan(ids: &[u32]) -> Vec<(u32, u32, u64)> {
        let mut fans = Vec::new();
        let mut bottom = *ids.last().unwrap();
        let (mut top, mut n) = (0u32, 0u64);
        for &id in ids.iter().rev() {
            if id < bottom {
                fans.push((bottom, top, n));
                bottom = id;
                top = 0;
                n = 0;
            }
            top = top.max(id);
            n += 1;
        }
        fans.push((bottom, top, n));
        fans.reverse();
        fans
    }

    #[test]
    fn forward_pass_equals_backward_scan() {
        let mut x: u64 = 7;
        let ids: Vec<u32> = (0..5000u32)
            .map(|i| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                let base = i / 10;
                base.saturating_sub(((x >> 40) % 60) as u32)
            })
            .collect();
        let mut d = FanDetector::new(1 << 20);
        for (i, &id) in ids.iter().enumerate() {
            d.access(i as f64, id);
        }
        let got: Vec<(u32, u32, u64)> = d
            .stack
            .iter()
            .map(|f| (f.bottom, f.top, f.accesses))
            .collect();
        assert_eq!(got, backward_scan(&ids));
    }

    #[test]
    fn synthetic_fans_are_found_with_their_spans() {
        // Three superbasins: keys 0..50 during t 0..100, 50..200 during 100..300,
        // 200..260 during 300..400, each reading its own keys in random order.
        let mut x: u64 = 3;
        let mut d = FanDetector::new(1 << 20);
        let fans = [
            (0u32, 50u32, 0.0, 100.0),
            (50, 200, 100.0, 300.0),
            (200, 260, 300.0, 400.0),
        ];
        for &(lo, hi, start, end) in &fans {
            let mut t = start;
            while t < end {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                let id = lo + ((x >> 33) % u64::from(hi - lo)) as u32;
                d.access(t, id);
                t += 0.05;
            }
            d.access(end - 0.01, lo); // the fan's first state is read to the end
        }
        let report = d.report(100);
        assert_eq!(report.count, 3, "{:?}", report.fans);
        for (found, &(lo, hi, start, end)) in report.fans.iter().zip(&fans) {
            assert_eq!(found.bottom, lo);
            assert_eq!(found.top, hi - 1);
            assert!(
                found.start < start + 1.0 && found.start >= start - 1.0,
                "{found:?}"
            );
            assert!((found.end - (end - 0.01)).abs() < 1e-9, "{found:?}");
        }
    }

    #[test]
    fn stack_is_bounded() {
        let mut d = FanDetector::new(64);
        for i in 0..10_000u32 {
            d.access(f64::from(i), i); // every access opens a fan
        }
        assert!(d.stack.len() <= 64);
        let r = d.report(1);
        assert!(r.coarsened);
        assert_eq!(r.fans.iter().map(|f| f.accesses).sum::<u64>(), 10_000);
    }
}
