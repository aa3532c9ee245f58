//! A workload that needs balancing: Zipf-popular keys at a steady rate, plus flash crowds.
//! A crowd is a burst of requests to a small set of keys that share a narrow window of the
//! cluster's key slots (as keys with one hash tag, or one tenant's keys, do), so it lands on
//! whichever node owns that window; each crowd picks a new window, so the hot spot moves.
//!
//! Written in the ParSplice CSV form (`timestamp_s,op,key`, seconds with millisecond
//! resolution), which every command reads without a `--format`.

use std::io::{self, Write};
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};
use slots::{key_slot, SLOTS};

use crate::{Op, Request};

/// Knobs of the hot-spot workload.
#[derive(Clone, Debug, PartialEq)]
pub struct HotspotParams {
    pub seed: u64,
    /// Trace seconds.
    pub duration: f64,
    /// Requests per second.
    pub rate: f64,
    /// Distinct background keys.
    pub keys: u64,
    /// Zipf exponent of the background's popularity.
    pub skew: f64,
    /// Seconds each flash crowd lasts; crowds follow one another with `gap` seconds between.
    pub crowd_seconds: f64,
    pub gap: f64,
    /// Share of all requests a crowd takes while it lasts.
    pub crowd_share: f64,
    /// Keys a crowd reads.
    pub crowd_keys: u64,
    /// Width of the slot window a crowd's keys come from.
    pub crowd_slots: u16,
    /// Share of requests that are writes.
    pub write_share: f64,
}

impl Default for HotspotParams {
    fn default() -> Self {
        HotspotParams {
            seed: 1,
            duration: 600.0,
            rate: 2_000.0,
            keys: 100_000,
            skew: 0.8,
            crowd_seconds: 120.0,
            gap: 30.0,
            crowd_share: 0.6,
            crowd_keys: 2_000,
            crowd_slots: 256,
            write_share: 0.05,
        }
    }
}

impl HotspotParams {
    /// Checks the knobs; the message names the flag.
    pub fn validate(&self) -> Result<(), String> {
        let positive = |v: f64, flag: &str| {
            (v.is_finite() && v > 0.0)
                .then_some(())
                .ok_or_else(|| format!("--{flag} must be a positive number, got {v}"))
        };
        let share = |v: f64, flag: &str| {
            (0.0..=1.0)
                .contains(&v)
                .then_some(())
                .ok_or_else(|| format!("--{flag} must be between 0 and 1, got {v}"))
        };
        positive(self.duration, "duration")?;
        positive(self.rate, "rate")?;
        positive(self.skew, "skew")?;
        positive(self.crowd_seconds, "crowd-seconds")?;
        if !(self.gap.is_finite() && self.gap >= 0.0) {
            return Err(format!("--gap must be zero or more, got {}", self.gap));
        }
        share(self.crowd_share, "crowd-share")?;
        share(self.write_share, "write-share")?;
        if self.keys == 0 || self.crowd_keys == 0 {
            return Err("--keys and --crowd-keys must be at least 1".into());
        }
        if self.crowd_slots == 0 || self.crowd_slots > SLOTS {
            return Err(format!(
                "--crowd-slots must be between 1 and {SLOTS}, got {}",
                self.crowd_slots
            ));
        }
        if self.duration * self.rate > 1e9 {
            return Err("--duration x --rate is over a billion requests".into());
        }
        Ok(())
    }
}

/// Background keys are `0..keys`; crowd keys are drawn above them so a crowd never borrows a
/// background key's popularity.
const CROWD_KEY_BASE: u64 = 1 << 40;

/// The requests, in time order.
pub struct HotspotGen {
    params: HotspotParams,
    rng: ChaCha8Rng,
    background: Zipf<f64>,
    total: u64,
    issued: u64,
    crowd: Vec<u64>,
    crowd_no: u64,
    next_crowd_key: u64,
}

impl HotspotGen {
    pub fn new(params: HotspotParams) -> HotspotGen {
        let rng = ChaCha8Rng::seed_from_u64(params.seed);
        let background = Zipf::new(params.keys, params.skew).expect("validated parameters");
        let total = (params.duration * params.rate) as u64;
        HotspotGen {
            params,
            rng,
            background,
            total,
            issued: 0,
            crowd: Vec::new(),
            crowd_no: u64::MAX,
            next_crowd_key: CROWD_KEY_BASE,
        }
    }

    /// The crowd running at `time` (its number), if any.
    fn crowd_at(&self, time: f64) -> Option<u64> {
        let period = self.params.crowd_seconds + self.params.gap;
        let n = (time / period).floor();
        (time - n * period < self.params.crowd_seconds).then_some(n as u64)
    }

    /// Picks a new slot window and the crowd's keys within it.
    fn start_crowd(&mut self, n: u64) {
        let width = self.params.crowd_slots;
        let start = self.rng.gen_range(0..=SLOTS - width);
        let window = start..start + width;
        self.crowd.clear();
        let mut digits = itoa::Buffer::new();
        while (self.crowd.len() as u64) < self.params.crowd_keys {
            let key = self.next_crowd_key;
            self.next_crowd_key += 1;
            if window.contains(&key_slot(digits.format(key).as_bytes())) {
                self.crowd.push(key);
            }
        }
        self.crowd_no = n;
    }
}

impl Iterator for HotspotGen {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.issued >= self.total {
            return None;
        }
        let time = self.issued as f64 / self.params.rate;
        self.issued += 1;
        let crowd = self.crowd_at(time);
        if let Some(n) = crowd {
            if n != self.crowd_no {
                self.start_crowd(n);
            }
        }
        let key = match crowd {
            Some(_) if self.rng.gen_bool(self.params.crowd_share) => {
                self.crowd[self.rng.gen_range(0..self.crowd.len())]
            }
            _ => self.background.sample(&mut self.rng) as u64 - 1,
        };
        let op = if self.rng.gen_bool(self.params.write_share) {
            Op::Put
        } else {
            Op::Get
        };
        Some(Request {
            time,
            key,
            size: 0,
            op,
            offset: 0,
        })
    }
}

/// Writes the trace as CSV and returns the number of requests.
pub fn write_csv<W: Write>(params: &HotspotParams, out: W) -> io::Result<u64> {
    super::write_requests(HotspotGen::new(params.clone()), out)
}

/// Writes the trace to `path`, zstd-compressed when the name ends in `.zst`. Errors name
/// the file.
pub fn write_file(params: &HotspotParams, path: &Path) -> io::Result<u64> {
    super::to_file(path, |out| write_csv(params, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> HotspotParams {
        HotspotParams {
            duration: 60.0,
            rate: 500.0,
            crowd_seconds: 20.0,
            gap: 10.0,
            ..HotspotParams::default()
        }
    }

    #[test]
    fn deterministic_and_in_time_order() {
        let a: Vec<Request> = HotspotGen::new(small()).collect();
        let b: Vec<Request> = HotspotGen::new(small()).collect();
        assert_eq!(a, b);
        assert_eq!(a.len(), 30_000);
        assert!(a.windows(2).all(|w| w[0].time <= w[1].time));
    }

    #[test]
    fn a_crowd_concentrates_on_its_slot_window_and_moves() {
        let p = small();
        let mut digits = itoa::Buffer::new();
        let windows: Vec<(u16, u16)> = [(0.0, 20.0), (30.0, 50.0)]
            .iter()
            .map(|&(from, to)| {
                let slots: Vec<u16> = HotspotGen::new(p.clone())
                    .filter(|r| r.time >= from && r.time < to && r.key >= CROWD_KEY_BASE)
                    .map(|r| key_slot(digits.format(r.key).as_bytes()))
                    .collect();
                // About 60% of the requests go to the crowd.
                let share = slots.len() as f64 / ((to - from) * p.rate);
                assert!((0.55..0.65).contains(&share), "{share}");
                let lo = *slots.iter().min().unwrap();
                let hi = *slots.iter().max().unwrap();
                assert!(hi - lo < p.crowd_slots, "{lo}..{hi}");
                (lo, hi)
            })
            .collect();
        assert_ne!(windows[0], windows[1], "each crowd picks a new window");
        // Between crowds there is none.
        assert!(HotspotGen::new(p)
            .filter(|r| r.time >= 21.0 && r.time < 29.0)
            .all(|r| r.key < CROWD_KEY_BASE));
    }

    #[test]
    fn bad_knobs_name_their_flag() {
        let bad = HotspotParams {
            crowd_share: 1.5,
            ..HotspotParams::default()
        };
        assert!(bad.validate().unwrap_err().contains("--crowd-share"));
        let bad = HotspotParams {
            rate: f64::NAN,
            ..HotspotParams::default()
        };
        assert!(bad.validate().unwrap_err().contains("--rate"));
        assert!(HotspotParams::default().validate().is_ok());
    }
}
