//! Sliding windows of per-tick figures: the last `len` ticks (and the `len` before them, for
//! the trend), kept in a ring of `2 * len` samples allocated once.

use policy::switch::WindowFigures;
use std::collections::VecDeque;

/// What happened during one tick. Sizes are already scaled to the whole key space.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TickSample {
    pub lookups: f64,
    pub hits: f64,
    pub misses: f64,
    /// Requests seen and the sum of the cache's size after each (request-weighted mean).
    pub requests: f64,
    pub sum_objects: f64,
    pub sum_bytes: f64,
    pub peak_objects: f64,
    pub peak_bytes: f64,
    pub evictions: f64,
    pub decided: bool,
    pub failed: bool,
}

pub struct Window {
    len: usize,
    samples: VecDeque<TickSample>,
}

impl Window {
    /// A window of `len` ticks (at least 1).
    pub fn new(len: usize) -> Window {
        let len = len.max(1);
        Window {
            len,
            samples: VecDeque::with_capacity(2 * len),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    pub fn push(&mut self, sample: TickSample) {
        if self.samples.len() == 2 * self.len {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    /// The figures of the newest `len` ticks.
    pub fn figures(&self) -> WindowFigures {
        let n = self.samples.len();
        let recent = n.min(self.len);
        let mut f = WindowFigures {
            ticks: recent as u64,
            ..WindowFigures::default()
        };
        let (mut requests, mut sum_objects, mut sum_bytes) = (0.0, 0.0, 0.0);
        for s in self.samples.iter().skip(n - recent) {
            f.lookups += s.lookups;
            f.hits += s.hits;
            f.misses += s.misses;
            requests += s.requests;
            sum_objects += s.sum_objects;
            sum_bytes += s.sum_bytes;
            f.peak_objects = f.peak_objects.max(s.peak_objects);
            f.peak_bytes = f.peak_bytes.max(s.peak_bytes);
            f.evictions += s.evictions;
            f.decisions += u64::from(s.decided);
            f.errors += u64::from(s.failed);
        }
        if f.lookups > 0.0 {
            f.hit_ratio = f.hits / f.lookups;
            f.miss_ratio = f.misses / f.lookups;
        }
        if requests > 0.0 {
            f.mean_objects = sum_objects / requests;
            f.mean_bytes = sum_bytes / requests;
        }
        f.last_objects = match self.samples.back() {
            Some(s) if s.requests > 0.0 => s.sum_objects / s.requests,
            _ => f.mean_objects,
        };
        f.prev_miss_ratio = f.miss_ratio;
        if n > self.len {
            let (mut lookups, mut misses) = (0.0, 0.0);
            for s in self.samples.iter().take(n - self.len) {
                lookups += s.lookups;
                misses += s.misses;
            }
            if lookups > 0.0 {
                f.prev_miss_ratio = misses / lookups;
            }
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(lookups: f64, misses: f64, objects: f64) -> TickSample {
        TickSample {
            lookups,
            hits: lookups - misses,
            misses,
            requests: 1.0,
            sum_objects: objects,
            peak_objects: objects,
            ..TickSample::default()
        }
    }

    #[test]
    fn figures_cover_the_last_ticks_and_the_trend_the_ones_before() {
        let mut w = Window::new(2);
        w.push(sample(10.0, 10.0, 1.0));
        let f = w.figures();
        assert_eq!((f.ticks, f.miss_ratio, f.prev_miss_ratio), (1, 1.0, 1.0));
        for _ in 0..3 {
            w.push(sample(10.0, 5.0, 3.0));
        }
        w.push(sample(10.0, 1.0, 5.0));
        let f = w.figures();
        assert_eq!(f.ticks, 2);
        assert_eq!(f.misses, 6.0);
        assert_eq!(f.miss_ratio, 0.3);
        assert_eq!(f.prev_miss_ratio, 0.5);
        assert_eq!(f.mean_objects, 4.0);
        assert_eq!(f.last_objects, 5.0);
        assert_eq!(f.peak_objects, 5.0);
        assert!(w.samples.len() <= 4);
        // A newest tick that served nothing says nothing about the size: the window's mean.
        w.push(TickSample::default());
        let f = w.figures();
        assert_eq!(f.last_objects, f.mean_objects);
    }
}
