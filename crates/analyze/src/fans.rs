//! Access "fans" (seed 000 §V-B) over a whole trace, for `mantle analyze`.
//!
//! The scan itself (Fig. 9 as a forward stack of suffix minima) is the `fans` crate's, shared
//! with the policy engine's `timeseries():fans()`; this module bounds it and reports it.
//!
//! Memory: one entry per fan on the stack, bounded by `max_fans`; beyond it neighbouring fans
//! are merged pairwise (the result says so). Fans with fewer than `min_accesses` accesses are
//! merged into the fan before them when reporting, since single stray accesses split fans.

use fans::{Fan, FanStack};
use serde::Serialize;

/// Keys spanned (`top - bottom + 1`): how much a cache must hold to serve the fan.
fn keys(fan: &Fan) -> u64 {
    fan.height() + 1
}

/// Streaming fan detector.
pub struct FanDetector {
    stack: FanStack,
    next: u64,
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
            stack: FanStack::new(),
            next: 0,
            max_fans: max_fans.max(2),
            coarsened: false,
        }
    }

    /// Records an access to dense id `id` at time `t`.
    pub fn access(&mut self, t: f64, id: u32) {
        self.stack.push(self.next, t, u64::from(id));
        self.next += 1;
        if self.stack.len() > self.max_fans {
            self.stack.coarsen_pairs();
            self.coarsened = true;
        }
    }

    /// The fans so far, oldest first, small ones merged into their predecessor.
    pub fn report(&self, min_accesses: u64) -> FanReport {
        let mut fans: Vec<Fan> = Vec::new();
        for fan in self.stack.fans() {
            match fans.last_mut() {
                Some(prev) if fan.accesses() < min_accesses => prev.absorb(fan),
                _ => fans.push(*fan),
            }
        }
        // A small first fan is merged forward instead.
        if fans.len() > 1 && fans[0].accesses() < min_accesses {
            let mut first = fans.remove(0);
            first.absorb(&fans[0]);
            fans[0] = first;
        }
        let mut sizes: Vec<u64> = fans.iter().map(keys).collect();
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
            mean_duration_s: mean(fans.iter().map(|f| f.finish - f.start).sum()),
            fans: fans
                .iter()
                .map(|f| FanOut {
                    start: f.start,
                    end: f.finish,
                    // The ids fed in were u32.
                    bottom: f.bottom as u32,
                    top: f.top as u32,
                    keys: keys(f),
                    accesses: f.accesses(),
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
            .fans()
            .iter()
            .map(|f| (f.bottom as u32, f.top as u32, f.accesses()))
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
