//! A generator of ParSplice-like key-value traces (the WorkManager cache of seed 000/002).
//!
//! Real ParSplice logs are scarce and large; policies for the dynamically sized cache need many
//! traces with the same structure under different initial conditions. This module produces
//! one, deterministically per seed, from a small model of what the papers and the real log
//! `scale-workers-1-71538` show:
//!
//! * **Superbasins make fans.** The trajectory is stuck in a set of states (a superbasin) and
//!   every new state it discovers is a new key with the next dense id. Tasks read states of the
//!   current superbasin only, the newest one and the earliest ones most often, so the key id vs
//!   time picture is a staircase of triangles ("fans"). Escaping opens a new fan whose ids are
//!   all higher: superbasins are never revisited.
//! * **A new state is written once, then read back** (`PUT k`, `GET k`), so puts equal unique
//!   keys and every key's first request is a put, as in the real log.
//! * **A read flash crowd, then a falling read rate over a rising key space.** Reads per second
//!   follow `A (1 + s/τ)^-α` and new states per second ramp up to a plateau, where `s` is time
//!   scaled by the growth rate (slower growth looks like the same run stretched in time).
//! * **Reads come in visits**: when a state is assigned segments, every worker task reads it
//!   (a visit is `workers` reads or more), in short bursts interleaved with the other visits in
//!   progress. States never assigned are read once, right after their put: in the real log
//!   most keys are read exactly once and the rest 28 times or more.
//!
//! The constants are fitted to the real log at `workers = 28`, `growth_rate = 1`,
//! `temperature = 1` (see `docs/generator.md` for the calibration table).
//! Output timestamps have 1-second resolution like the real log; line order is access order.

use std::io::{self, BufWriter, Write};
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Geometric, Poisson};

use crate::{Op, Request};

/// Workers of the calibration run; rates scale linearly with `workers / CALIBRATION_WORKERS`.
const CALIBRATION_WORKERS: f64 = 28.0;
/// Reads per second at time 0 (the flash crowd), at calibration settings.
const READ_RATE_PEAK: f64 = 740.0;
/// Time constant (s) and exponent of the read-rate decay.
const READ_DECAY_TAU: f64 = 60.0;
const READ_DECAY_ALPHA: f64 = 0.58;
/// Plateau of new states per second and its ramp-up time constant (s); the ramp is
/// `(1 - e^(-s/ramp))^2`, slow at first as in the real log.
const NEW_STATE_RATE: f64 = 4.4;
const NEW_STATE_RAMP: f64 = 1500.0;
/// Mean superbasin lifetime (s): short at first, longer as the particle grows.
const FAN_LIFETIME_START: f64 = 20.0;
const FAN_LIFETIME_GROWTH: f64 = 450.0;
const FAN_LIFETIME_RAMP: f64 = 4000.0;
/// Probability that a visit reads the newest state of the fan.
const FRONTIER_SHARE: f64 = 0.45;
/// Skew towards the fan's earliest states (exponent on a uniform draw) at temperature 1.
const EARLY_KEY_SKEW: f64 = 4.0;
/// Visits in progress at once; their reads interleave in short bursts.
const CONCURRENT_VISITS: usize = 3;
/// Mean length of a burst of consecutive reads of one state.
const BURST_MEAN: f64 = 3.0;
/// Parameter bounds: outside them the model is meaningless (seed 000 §II says the same of
/// the real simulation) or the output would be unreasonably large.
const MAX_WORKERS: u32 = 100_000;
const FACTOR_RANGE: (f64, f64) = (0.01, 100.0);
const MAX_DURATION_S: u64 = 10 * 24 * 3600;

/// The knobs of a generated run. `Default` is a one-hour run at the calibration settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ParspliceParams {
    /// Seed of the pseudo-random stream (ChaCha8): same seed and parameters, same trace.
    pub seed: u64,
    /// Length of the run in trace seconds.
    pub duration_s: u64,
    /// Worker tasks reading the cache; request rates and key-space growth scale with it.
    pub workers: u32,
    /// How fast atoms are added, relative to the calibration run (`Δ1` = 1.0; seed 000's
    /// `Δ2` is 0.1). Slower growth stretches the run in time: hotter keys, smaller key space.
    pub growth_rate: f64,
    /// How easily the trajectory jumps between states, relative to the calibration run.
    /// Higher: more new states, shorter superbasins, flatter popularity inside a fan.
    pub temperature: f64,
    /// Timestamp of the first second (seconds).
    pub start_time: u64,
}

impl Default for ParspliceParams {
    fn default() -> Self {
        ParspliceParams {
            seed: 1,
            duration_s: 3600,
            workers: 28,
            growth_rate: 1.0,
            temperature: 1.0,
            start_time: 0,
        }
    }
}

impl ParspliceParams {
    /// Checks the parameters, returning a one-line reason when they cannot make a trace.
    pub fn validate(&self) -> Result<(), String> {
        if self.duration_s == 0 || self.duration_s > MAX_DURATION_S {
            return Err(format!(
                "duration must be between 1 and {MAX_DURATION_S} seconds, got {}",
                self.duration_s
            ));
        }
        if self.workers == 0 || self.workers > MAX_WORKERS {
            return Err(format!(
                "workers must be between 1 and {MAX_WORKERS}, got {}",
                self.workers
            ));
        }
        for (name, value) in [
            ("growth rate", self.growth_rate),
            ("temperature", self.temperature),
        ] {
            if !(value.is_finite() && value >= FACTOR_RANGE.0 && value <= FACTOR_RANGE.1) {
                return Err(format!(
                    "{name} must be between {} and {} (1 = the calibration run), got {value}",
                    FACTOR_RANGE.0, FACTOR_RANGE.1
                ));
            }
        }
        Ok(())
    }

    fn worker_factor(&self) -> f64 {
        f64::from(self.workers) / CALIBRATION_WORKERS
    }

    /// Expected reads per second at `t` seconds into the run.
    fn read_rate(&self, t: f64) -> f64 {
        let stretched = self.growth_rate * t;
        self.worker_factor()
            * READ_RATE_PEAK
            * (1.0 + stretched / READ_DECAY_TAU).powf(-READ_DECAY_ALPHA)
    }

    /// Expected new states (puts) per second at `t`.
    fn new_state_rate(&self, t: f64) -> f64 {
        let stretched = self.growth_rate * t;
        self.worker_factor()
            * self.temperature
            * self.growth_rate
            * NEW_STATE_RATE
            * (1.0 - (-stretched / NEW_STATE_RAMP).exp()).powi(2)
    }

    /// Mean superbasin lifetime (s) for a fan that opens at `t`.
    fn fan_lifetime(&self, t: f64) -> f64 {
        let stretched = self.growth_rate * t;
        let lifetime = FAN_LIFETIME_START
            + FAN_LIFETIME_GROWTH * (1.0 - (-stretched / FAN_LIFETIME_RAMP).exp());
        lifetime / (self.growth_rate * self.temperature)
    }
}

/// Totals of a generated trace, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParspliceSummary {
    pub requests: u64,
    pub gets: u64,
    pub puts: u64,
    /// Distinct keys (= puts: every state is written once).
    pub unique_keys: u64,
    /// Superbasins opened (fans in the model; analysis may split or merge them).
    pub fans: u64,
}

/// Deterministic iterator over the requests of a generated run, in access order.
///
/// Memory is constant: one second of requests is buffered at a time.
pub struct ParspliceGen {
    params: ParspliceParams,
    rng: ChaCha8Rng,
    key_salt: u64,
    second: u64,
    buffer: Vec<Request>,
    cursor: usize,
    next_id: u64,
    fan_bottom: u64,
    /// Second at which the current superbasin is left.
    fan_end: u64,
    fans: u64,
    /// Visits in progress: (state id, reads left).
    visits: Vec<(u64, u64)>,
    burst: Geometric,
    round_extra: Geometric,
}

impl ParspliceGen {
    /// Starts a run. Fails with a one-line reason on parameters outside their range.
    pub fn new(params: ParspliceParams) -> Result<Self, String> {
        params.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
        let key_salt = rng.gen();
        let burst = Geometric::new(1.0 / BURST_MEAN).map_err(|e| e.to_string())?;
        let round_mean = (f64::from(params.workers) / 4.0).max(1.0);
        let round_extra = Geometric::new(1.0 / round_mean).map_err(|e| e.to_string())?;
        Ok(ParspliceGen {
            params,
            rng,
            key_salt,
            second: 0,
            buffer: Vec::new(),
            cursor: 0,
            next_id: 0,
            fan_bottom: 0,
            fan_end: 0,
            fans: 0,
            visits: Vec::with_capacity(CONCURRENT_VISITS),
            burst,
            round_extra,
        })
    }

    /// The parameters of this run.
    pub fn params(&self) -> &ParspliceParams {
        &self.params
    }

    /// Superbasins opened so far.
    pub fn fans_opened(&self) -> u64 {
        self.fans
    }

    /// The 64-bit key of dense state id `id`: a bijection, so keys never collide, and they
    /// look like the hashed state ids of the real log.
    fn key_of(&self, id: u64) -> u64 {
        let mut z = id.wrapping_add(self.key_salt);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn poisson(&mut self, mean: f64) -> u64 {
        if mean <= 0.0 || !mean.is_finite() {
            return 0;
        }
        match Poisson::new(mean) {
            Ok(dist) => {
                let draw: f64 = dist.sample(&mut self.rng);
                draw as u64
            }
            Err(_) => 0,
        }
    }

    fn push(&mut self, time: f64, id: u64, op: Op) {
        let key = self.key_of(id);
        self.buffer.push(Request {
            time,
            key,
            size: 1,
            op,
            offset: 0,
        });
    }

    /// A new state: written once, then read back by the task that found it.
    fn discover_state(&mut self, time: f64) {
        let id = self.next_id;
        self.next_id += 1;
        self.push(time, id, Op::Put);
        self.push(time, id, Op::Get);
    }

    /// Escapes to a new superbasin: its first state is new, and its lifetime is drawn now
    /// (uniform around the mean, as regular as the flash-crowd fans of the real log).
    fn open_fan(&mut self, time: f64) {
        self.fan_bottom = self.next_id;
        self.fans += 1;
        self.visits.clear();
        let mean = self.params.fan_lifetime(self.second as f64);
        let lifetime = mean * (0.5 + self.rng.gen::<f64>());
        self.fan_end = self.second + (lifetime.round() as u64).max(1);
        self.discover_state(time);
    }

    /// Which state of the current fan a visit reads: the newest one, or one biased towards
    /// the fan's earliest states.
    fn pick_state(&mut self) -> u64 {
        let newest = self.next_id - 1;
        if self.rng.gen_bool(FRONTIER_SHARE) {
            return newest;
        }
        let span = newest - self.fan_bottom + 1;
        let skew = (EARLY_KEY_SKEW / self.params.temperature).max(1.0);
        let u: f64 = self.rng.gen();
        let offset = ((span as f64) * u.powf(skew)) as u64;
        self.fan_bottom + offset.min(span - 1)
    }

    /// Reads of one visit: every worker task once, plus some re-reads.
    fn visit_length(&mut self) -> u64 {
        u64::from(self.params.workers) + self.round_extra.sample(&mut self.rng)
    }

    /// Emits up to `budget` reads from one of the visits in progress, starting a visit when
    /// fewer than [`CONCURRENT_VISITS`] are open. Returns the reads emitted.
    fn read_burst(&mut self, time: f64, budget: u64) -> u64 {
        if self.visits.len() < CONCURRENT_VISITS {
            let id = self.pick_state();
            let length = self.visit_length();
            self.visits.push((id, length));
        }
        let slot = self.rng.gen_range(0..self.visits.len());
        let (id, left) = self.visits[slot];
        let burst = (1 + self.burst.sample(&mut self.rng)).min(left).min(budget);
        for _ in 0..burst {
            self.push(time, id, Op::Get);
        }
        if burst == left {
            self.visits.swap_remove(slot);
        } else {
            self.visits[slot].1 = left - burst;
        }
        burst
    }

    /// Generates one second of requests into the buffer.
    fn fill_second(&mut self) {
        self.buffer.clear();
        self.cursor = 0;
        let t = self.second as f64;
        let time = (self.params.start_time + self.second) as f64;
        if self.second == 0 || self.second >= self.fan_end {
            self.open_fan(time);
        }
        let reads = self.poisson(self.params.read_rate(t));
        let discoveries = self.poisson(self.params.new_state_rate(t));
        // New states land at random points among this second's reads.
        let mut marks: Vec<u64> = (0..discoveries)
            .map(|_| self.rng.gen_range(0..=reads))
            .collect();
        marks.sort_unstable();
        let mut marks = marks.into_iter().peekable();
        let mut done = 0;
        while done < reads {
            while marks.next_if(|&m| m <= done).is_some() {
                self.discover_state(time);
            }
            done += self.read_burst(time, reads - done);
        }
        for _ in marks {
            self.discover_state(time);
        }
        self.second += 1;
    }
}

impl Iterator for ParspliceGen {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        while self.cursor == self.buffer.len() {
            if self.second >= self.params.duration_s {
                return None;
            }
            self.fill_second();
        }
        let request = self.buffer[self.cursor];
        self.cursor += 1;
        Some(request)
    }
}

/// Writes a generated run as `timestamp_s,op,key` CSV (the `parsplice` CSV format) to `out`.
pub fn write_csv<W: Write>(params: &ParspliceParams, out: W) -> io::Result<ParspliceSummary> {
    let mut generator = ParspliceGen::new(params.clone())
        .map_err(|msg| io::Error::new(io::ErrorKind::InvalidInput, msg))?;
    let mut out = BufWriter::with_capacity(1 << 16, out);
    out.write_all(b"timestamp_s,op,key\n")?;
    let mut summary = ParspliceSummary::default();
    for request in generator.by_ref() {
        let op = match request.op {
            Op::Put => {
                summary.puts += 1;
                "PUT"
            }
            _ => {
                summary.gets += 1;
                "GET"
            }
        };
        writeln!(out, "{},{op},{}", request.time as u64, request.key)?;
    }
    out.flush()?;
    summary.requests = summary.gets + summary.puts;
    summary.unique_keys = summary.puts;
    summary.fans = generator.fans_opened();
    Ok(summary)
}

/// Writes a generated run to `path`, zstd-compressed when the name ends in `.zst`.
/// Errors name the file.
pub fn write_file(params: &ParspliceParams, path: &Path) -> io::Result<ParspliceSummary> {
    super::to_file(path, |out| write_csv(params, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn small(seed: u64) -> ParspliceParams {
        ParspliceParams {
            seed,
            duration_s: 1200,
            ..ParspliceParams::default()
        }
    }

    #[test]
    fn same_seed_same_trace_other_seed_other_trace() {
        let a: Vec<Request> = ParspliceGen::new(small(7)).unwrap().collect();
        let b: Vec<Request> = ParspliceGen::new(small(7)).unwrap().collect();
        let c: Vec<Request> = ParspliceGen::new(small(8)).unwrap().collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn every_key_is_put_once_before_it_is_read() {
        let mut written = HashSet::new();
        for r in ParspliceGen::new(small(3)).unwrap() {
            match r.op {
                Op::Put => assert!(written.insert(r.key), "key {} put twice", r.key),
                Op::Get => assert!(written.contains(&r.key), "key {} read before put", r.key),
                other => panic!("unexpected op {other:?}"),
            }
        }
        assert!(written.len() > 100);
    }

    #[test]
    fn one_hour_default_run_has_paper_read_write_ratio() {
        let mut summary = ParspliceSummary::default();
        for r in ParspliceGen::new(ParspliceParams::default()).unwrap() {
            match r.op {
                Op::Put => summary.puts += 1,
                _ => summary.gets += 1,
            }
        }
        let ratio = summary.gets as f64 / summary.puts as f64;
        assert!((50.0..=100.0).contains(&ratio), "reads per write {ratio}");
    }

    #[test]
    fn read_rate_falls_and_key_space_grows() {
        let params = ParspliceParams {
            duration_s: 3600,
            ..ParspliceParams::default()
        };
        let mut reads = [0u64; 4];
        let mut new_keys = [0u64; 4];
        for r in ParspliceGen::new(params).unwrap() {
            let quarter = ((r.time as usize) / 900).min(3);
            match r.op {
                Op::Put => new_keys[quarter] += 1,
                _ => reads[quarter] += 1,
            }
        }
        assert!(reads[0] > 2 * reads[3], "reads per quarter {reads:?}");
        assert!(reads.windows(2).all(|w| w[0] > w[1]), "{reads:?}");
        assert!(
            new_keys[3] > new_keys[0],
            "new keys per quarter {new_keys:?}"
        );
    }

    #[test]
    fn flash_crowd_reads_few_keys_hard() {
        let mut per_key = std::collections::HashMap::new();
        for r in ParspliceGen::new(small(5))
            .unwrap()
            .take_while(|r| r.time < 60.0)
        {
            *per_key.entry(r.key).or_insert(0u64) += 1;
        }
        let reads: u64 = per_key.values().sum();
        assert!(reads > 20_000, "flash crowd reads {reads}");
        assert!(per_key.len() < 20, "keys in first minute {}", per_key.len());
    }

    #[test]
    fn parameters_move_the_key_space_the_way_the_papers_say() {
        let keys = |p: ParspliceParams| {
            ParspliceGen::new(p)
                .unwrap()
                .filter(|r| r.op == Op::Put)
                .count()
        };
        let base = keys(ParspliceParams::default());
        let slow = keys(ParspliceParams {
            growth_rate: 0.1,
            ..ParspliceParams::default()
        });
        let hot = keys(ParspliceParams {
            temperature: 2.0,
            ..ParspliceParams::default()
        });
        let more = keys(ParspliceParams {
            workers: 56,
            ..ParspliceParams::default()
        });
        assert!(slow * 3 < base, "slow growth {slow} vs {base}");
        assert!(hot > base * 3 / 2, "hot {hot} vs {base}");
        assert!(more > base * 3 / 2, "more workers {more} vs {base}");
    }

    #[test]
    fn bad_parameters_are_refused_with_a_reason() {
        for params in [
            ParspliceParams {
                duration_s: 0,
                ..ParspliceParams::default()
            },
            ParspliceParams {
                workers: 0,
                ..ParspliceParams::default()
            },
            ParspliceParams {
                temperature: f64::NAN,
                ..ParspliceParams::default()
            },
            ParspliceParams {
                growth_rate: 0.0,
                ..ParspliceParams::default()
            },
        ] {
            let err = ParspliceGen::new(params).err().expect("refused");
            assert!(err.contains("must be"), "{err}");
        }
    }

    #[test]
    fn csv_output_has_header_and_three_fields() {
        let mut out = Vec::new();
        let summary = write_csv(
            &ParspliceParams {
                duration_s: 30,
                ..ParspliceParams::default()
            },
            &mut out,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("timestamp_s,op,key"));
        let body: Vec<&str> = lines.collect();
        assert_eq!(body.len() as u64, summary.requests);
        assert!(body.iter().all(|l| {
            let f: Vec<&str> = l.split(',').collect();
            f.len() == 3 && (f[1] == "GET" || f[1] == "PUT") && f[2].parse::<u64>().is_ok()
        }));
    }
}
