//! The cache's size and the store's busiest second over a run, from CACHE STATS sampled
//! periodically on its own task (the server keeps no history the replay could ask for).

use super::server::{Counters, Server};
use super::SAMPLE_EVERY;
use anyhow::{anyhow, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Samples CACHE STATS every [`SAMPLE_EVERY`] on its own task and folds each sample into
/// running figures (nothing grows with the run's length).
pub(super) struct Sampler {
    pub(super) stop: tokio::sync::oneshot::Sender<()>,
    pub(super) task: tokio::task::JoinHandle<Result<Footprint>>,
    pub(super) server: Server,
    pub(super) before: Counters,
    pub(super) started: Instant,
}

impl Sampler {
    pub(super) async fn start(
        server: Server,
        done: Arc<AtomicU64>,
        started: Instant,
    ) -> Result<Sampler> {
        let before = server.counters().await?;
        let mut footprint = Footprint::default();
        footprint.add(Sample::new(0.0, 0, &before));
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let sampling = server.clone();
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(SAMPLE_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await;
            loop {
                tokio::select! {
                    _ = &mut stopped => return Ok(footprint),
                    _ = every.tick() => {
                        let counters = sampling.counters().await?;
                        let at = started.elapsed().as_secs_f64();
                        footprint.add(Sample::new(at, done.load(Ordering::Relaxed), &counters));
                    }
                }
            }
        });
        Ok(Sampler {
            stop,
            task,
            server,
            before,
            started,
        })
    }

    /// Stops sampling and takes the last sample: (counters before, counters after, footprint).
    pub(super) async fn stop(self, requests: u64) -> Result<(Counters, Counters, Footprint)> {
        let _ = self.stop.send(());
        let mut footprint = self
            .task
            .await
            .map_err(|e| anyhow!("the sampling task failed: {e}"))??;
        let after = self.server.counters().await?;
        let at = self.started.elapsed().as_secs_f64();
        footprint.add(Sample::new(at, requests, &after));
        Ok((self.before, after, footprint))
    }
}

/// One observation of the server: wall seconds since the start, requests completed by then.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sample {
    pub(super) at: f64,
    pub(super) requests: u64,
    pub(super) objects: u64,
    pub(super) bytes: u64,
    pub(super) store_ops: u64,
}

impl Sample {
    pub(super) fn new(at: f64, requests: u64, c: &Counters) -> Sample {
        Sample {
            at,
            requests,
            objects: c.objects,
            bytes: c.bytes,
            store_ops: c.store_ops(),
        }
    }
}

/// Peaks and means of the cache's size, and the busiest wall second of the store, folded from
/// samples. Between two samples the size is taken as the mean of both ends.
#[derive(Default, Debug)]
pub(super) struct Footprint {
    pub(super) last: Option<Sample>,
    pub(super) peak_objects: u64,
    pub(super) peak_bytes: u64,
    /// Integrals over wall time and over completed requests.
    pub(super) time_objects: f64,
    pub(super) time_bytes: f64,
    pub(super) request_objects: f64,
    pub(super) request_bytes: f64,
    pub(super) seconds: f64,
    pub(super) requests: u64,
    /// The wall second being counted, its store operations, and the busiest so far.
    pub(super) second: u64,
    pub(super) second_ops: u64,
    pub(super) peak_ops: u64,
}

impl Footprint {
    pub(super) fn add(&mut self, s: Sample) {
        self.peak_objects = self.peak_objects.max(s.objects);
        self.peak_bytes = self.peak_bytes.max(s.bytes);
        if let Some(prev) = self.last {
            let dt = (s.at - prev.at).max(0.0);
            let dr = s.requests.saturating_sub(prev.requests);
            let objects = (prev.objects + s.objects) as f64 / 2.0;
            let bytes = (prev.bytes + s.bytes) as f64 / 2.0;
            self.time_objects += objects * dt;
            self.time_bytes += bytes * dt;
            self.request_objects += objects * dr as f64;
            self.request_bytes += bytes * dr as f64;
            self.seconds += dt;
            self.requests += dr;
            let second = s.at as u64;
            if second != self.second {
                self.peak_ops = self.peak_ops.max(self.second_ops);
                self.second = second;
                self.second_ops = 0;
            }
            self.second_ops += s.store_ops.saturating_sub(prev.store_ops);
        }
        self.last = Some(s);
    }

    pub(super) fn last(&self) -> Sample {
        self.last.unwrap_or(Sample {
            at: 0.0,
            requests: 0,
            objects: 0,
            bytes: 0,
            store_ops: 0,
        })
    }

    /// (objects, bytes), request-weighted.
    pub(super) fn request_mean(&self) -> (f64, f64) {
        if self.requests == 0 {
            let last = self.last();
            return (last.objects as f64, last.bytes as f64);
        }
        let n = self.requests as f64;
        (self.request_objects / n, self.request_bytes / n)
    }

    /// (objects, bytes), time-weighted over wall time.
    pub(super) fn time_mean(&self) -> (f64, f64) {
        if self.seconds <= 0.0 {
            let last = self.last();
            return (last.objects as f64, last.bytes as f64);
        }
        (
            self.time_objects / self.seconds,
            self.time_bytes / self.seconds,
        )
    }

    pub(super) fn peak_store_ops_per_second(&self) -> u64 {
        self.peak_ops.max(self.second_ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: f64, requests: u64, objects: u64, store_ops: u64) -> Sample {
        Sample {
            at,
            requests,
            objects,
            bytes: objects * 10,
            store_ops,
        }
    }

    #[test]
    fn footprint_weighs_by_requests_and_by_time() {
        let mut f = Footprint::default();
        f.add(sample(0.0, 0, 0, 0));
        // 100 requests while the cache grows 0 -> 10 over 1 s, then 900 more requests in 0.5 s
        // at 10 objects.
        f.add(sample(1.0, 100, 10, 40));
        f.add(sample(1.5, 1000, 10, 60));
        let (objects, bytes) = f.request_mean();
        assert!((objects - (5.0 * 100.0 + 10.0 * 900.0) / 1000.0).abs() < 1e-9);
        assert!((bytes - objects * 10.0).abs() < 1e-9);
        let (objects, _) = f.time_mean();
        assert!((objects - (5.0 * 1.0 + 10.0 * 0.5) / 1.5).abs() < 1e-9);
        assert_eq!((f.peak_objects, f.peak_bytes), (10, 100));
        // Second 1 holds the 40 operations of the first interval plus 20: 60 in all.
        assert_eq!(f.peak_store_ops_per_second(), 60);
    }

    #[test]
    fn footprint_of_one_sample_is_that_sample() {
        let mut f = Footprint::default();
        f.add(sample(0.0, 0, 4, 0));
        assert_eq!(f.request_mean().0, 4.0);
        assert_eq!(f.time_mean().0, 4.0);
        assert_eq!(f.peak_store_ops_per_second(), 0);
    }
}
