//! A workload whose regime changes: a list of phases, each a working set read for a number of
//! seconds, played in order and repeated. It exists so that adaptive setups (docs/adaptive.md)
//! are tested on traces where different cache policies are best in different stretches, e.g.
//! a small hot set (a small cache serves it; a large one only holds stale keys) alternating
//! with a large working set (only a large cache serves it).
//!
//! A phase reads `keys` keys, uniformly, Zipf-popular (`zipf=S`) or as a cyclic scan
//! (`scan`). Its keys are the same every time the phase recurs unless it is `fresh`, in which
//! case each repetition reads new keys (so what a cache kept from the last time is dead
//! weight). Written in the ParSplice CSV form (`timestamp_s,op,key`), reads only.

use std::io::{self, Write};
use std::path::Path;
use std::str::FromStr;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};

use crate::{Op, Request};

/// How a phase picks its keys.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Draw {
    Uniform,
    Zipf(f64),
    Scan,
}

/// One phase: `SECONDS,KEYS[,fresh][,scan|zipf=S]` on the command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    pub seconds: f64,
    pub keys: u64,
    pub draw: Draw,
    pub fresh: bool,
}

impl FromStr for Phase {
    type Err = String;

    fn from_str(text: &str) -> Result<Phase, String> {
        let bad =
            |why: &str| format!("phase '{text}': {why} (form: SECONDS,KEYS[,fresh][,scan|zipf=S])");
        let mut parts = text.split(',').map(str::trim);
        let seconds: f64 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .filter(|s: &f64| s.is_finite() && *s > 0.0)
            .ok_or_else(|| bad("SECONDS must be a positive number"))?;
        let keys: u64 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .filter(|&k| k > 0 && k < 1 << 24)
            .ok_or_else(|| bad("KEYS must be a whole number from 1 to 16777215"))?;
        let mut phase = Phase {
            seconds,
            keys,
            draw: Draw::Uniform,
            fresh: false,
        };
        for word in parts {
            match word.split_once('=') {
                None if word == "fresh" => phase.fresh = true,
                None if word == "scan" => phase.draw = Draw::Scan,
                Some(("zipf", s)) => match s.parse::<f64>() {
                    Ok(s) if s.is_finite() && s > 0.0 => phase.draw = Draw::Zipf(s),
                    _ => return Err(bad("zipf=S needs a positive exponent")),
                },
                _ => return Err(bad(&format!("unknown option '{word}'"))),
            }
        }
        Ok(phase)
    }
}

/// Knobs of the phased workload.
#[derive(Clone, Debug, PartialEq)]
pub struct PhasesParams {
    pub seed: u64,
    pub phases: Vec<Phase>,
    /// Times the list of phases is played.
    pub repeat: u32,
    /// Requests per second.
    pub rate: f64,
}

impl PhasesParams {
    /// Checks the knobs; the message names the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.phases.is_empty() {
            return Err("--phase is needed at least once".into());
        }
        if self.phases.len() > 255 {
            return Err("--phase: at most 255 phases".into());
        }
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(format!(
                "--rate must be a positive number, got {}",
                self.rate
            ));
        }
        if self.repeat == 0 || self.repeat > 255 {
            return Err(format!(
                "--repeat must be from 1 to 255, got {}",
                self.repeat
            ));
        }
        let seconds: f64 = self.phases.iter().map(|p| p.seconds).sum();
        if seconds * self.rate * self.repeat as f64 > 1e9 {
            return Err("the phases x --repeat x --rate make over a billion requests".into());
        }
        Ok(())
    }
}

/// A phase's keys occupy their own range: phase `i` from `(i + 1) << 32`, and a fresh phase's
/// repetition `r` from `r << 24` above that, so phases never share keys by accident.
fn key_base(phase: usize, repetition: u32, fresh: bool) -> u64 {
    let r = if fresh { u64::from(repetition) } else { 0 };
    ((phase as u64 + 1) << 32) + (r << 24)
}

/// The requests, in time order.
pub struct PhasesGen {
    params: PhasesParams,
    rng: ChaCha8Rng,
    zipf: Vec<Option<Zipf<f64>>>,
    repetition: u32,
    phase: usize,
    /// Start time of the current phase and requests issued in it.
    start: f64,
    issued: u64,
    scan_at: u64,
}

impl PhasesGen {
    pub fn new(params: PhasesParams) -> PhasesGen {
        let zipf = params
            .phases
            .iter()
            .map(|p| match p.draw {
                Draw::Zipf(s) => Some(Zipf::new(p.keys, s).expect("validated parameters")),
                _ => None,
            })
            .collect();
        PhasesGen {
            rng: ChaCha8Rng::seed_from_u64(params.seed),
            params,
            zipf,
            repetition: 0,
            phase: 0,
            start: 0.0,
            issued: 0,
            scan_at: 0,
        }
    }
}

impl Iterator for PhasesGen {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        loop {
            if self.repetition >= self.params.repeat {
                return None;
            }
            let p = &self.params.phases[self.phase];
            let n = (p.seconds * self.params.rate).round() as u64;
            if self.issued < n {
                break;
            }
            self.start += p.seconds;
            self.issued = 0;
            self.scan_at = 0;
            self.phase += 1;
            if self.phase == self.params.phases.len() {
                self.phase = 0;
                self.repetition += 1;
            }
        }
        let p = &self.params.phases[self.phase];
        let time = self.start + self.issued as f64 / self.params.rate;
        self.issued += 1;
        let offset = match p.draw {
            Draw::Uniform => self.rng.gen_range(0..p.keys),
            Draw::Zipf(_) => {
                let z = self.zipf[self.phase]
                    .as_ref()
                    .expect("a zipf phase has one");
                z.sample(&mut self.rng) as u64 - 1
            }
            Draw::Scan => {
                let k = self.scan_at % p.keys;
                self.scan_at += 1;
                k
            }
        };
        Some(Request {
            time,
            key: key_base(self.phase, self.repetition, p.fresh) + offset,
            size: 0,
            op: Op::Get,
            offset: 0,
        })
    }
}

/// Writes the trace as CSV and returns the number of requests.
pub fn write_csv<W: Write>(params: &PhasesParams, out: W) -> io::Result<u64> {
    super::write_requests(PhasesGen::new(params.clone()), out)
}

/// Writes the trace to `path`, zstd-compressed when the name ends in `.zst`. Errors name
/// the file.
pub fn write_file(params: &PhasesParams, path: &Path) -> io::Result<u64> {
    super::to_file(path, |out| write_csv(params, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn params() -> PhasesParams {
        PhasesParams {
            seed: 7,
            phases: vec!["10,20".parse().unwrap(), "5,300,fresh".parse().unwrap()],
            repeat: 3,
            rate: 100.0,
        }
    }

    #[test]
    fn phases_play_in_order_and_fresh_ones_read_new_keys() {
        let reqs: Vec<Request> = PhasesGen::new(params()).collect();
        assert_eq!(reqs.len(), 3 * 1500);
        assert_eq!(reqs, PhasesGen::new(params()).collect::<Vec<_>>());
        assert!(reqs.windows(2).all(|w| w[0].time <= w[1].time));
        assert!((reqs.last().unwrap().time - 44.99).abs() < 1e-9);
        let keys = |from: usize, to: usize| -> HashSet<u64> {
            reqs[from..to].iter().map(|r| r.key).collect()
        };
        // The hot phase reads the same 20 keys every time.
        let (hot1, hot2) = (keys(0, 1000), keys(1500, 2500));
        assert_eq!(hot1, hot2);
        assert!(hot1.len() <= 20);
        // The fresh phase reads new keys each repetition, never a hot one.
        let (big1, big2) = (keys(1000, 1500), keys(2500, 3000));
        assert!(big1.is_disjoint(&big2) && big1.is_disjoint(&hot1));
        assert!(big1.len() > 100 && big1.len() <= 300);
    }

    #[test]
    fn a_scan_cycles_through_its_keys() {
        let p = PhasesParams {
            phases: vec!["1,30,scan".parse().unwrap()],
            repeat: 1,
            ..params()
        };
        let keys: Vec<u64> = PhasesGen::new(p).map(|r| r.key - (1 << 32)).collect();
        assert_eq!(keys, (0..100).map(|i| i % 30).collect::<Vec<_>>());
    }

    #[test]
    fn bad_phases_are_named() {
        for (text, needle) in [
            ("0,10", "SECONDS"),
            ("10", "KEYS"),
            ("10,0", "KEYS"),
            ("10,5,zipf=-1", "zipf"),
            ("10,5,sideways", "unknown option 'sideways'"),
        ] {
            let e = text.parse::<Phase>().unwrap_err();
            assert!(e.contains(needle) && e.contains(text), "{text}: {e}");
        }
        let none = PhasesParams {
            phases: vec![],
            ..params()
        };
        assert!(none.validate().unwrap_err().contains("--phase"));
    }
}
