//! A bounded, evenly spaced sample of (time, dense key id) points for the key-activity chart
//! (seed 000 Fig. 8a).
//!
//! Keeps every `stride`-th access; when the buffer fills, every other point is dropped and the
//! stride doubles. Deterministic, and uniform over the trace whatever its length.

/// Sampled (time, key id) points, at most `max_points`.
pub struct ScatterSample {
    max_points: usize,
    stride: u64,
    seen: u64,
    points: Vec<(f64, u32)>,
}

impl ScatterSample {
    pub fn new(max_points: usize) -> Self {
        ScatterSample {
            max_points: max_points.max(2),
            stride: 1,
            seen: 0,
            points: Vec::new(),
        }
    }

    pub fn access(&mut self, t: f64, id: u32) {
        if self.seen.is_multiple_of(self.stride) {
            if self.points.len() == self.max_points {
                let mut keep = false;
                self.points.retain(|_| {
                    keep = !keep;
                    keep
                });
                self.stride *= 2;
            }
            if self.seen.is_multiple_of(self.stride) {
                self.points.push((t, id));
            }
        }
        self.seen += 1;
    }

    pub fn points(&self) -> &[(f64, u32)] {
        &self.points
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_evenly_spread() {
        let mut s = ScatterSample::new(1000);
        for i in 0..1_000_000u32 {
            s.access(f64::from(i), i);
        }
        let p = s.points();
        assert!(p.len() <= 1000 && p.len() >= 400, "{}", p.len());
        let gaps: Vec<u32> = p.windows(2).map(|w| w[1].1 - w[0].1).collect();
        assert!(gaps.iter().all(|&g| g == gaps[0]), "uneven spacing");
        assert_eq!(p[0].1, 0);
    }
}
