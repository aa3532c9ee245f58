//! Probabilistic admission (libCacheSim's `prob.c`): admits each miss with probability `p`
//! (default 0.5), drawn as libCacheSim draws it: `rand % 10^7 < p * 10^7` from Knuth's MMIX
//! linear congruential generator.
//!
//! libCacheSim's generator state is one per thread, shared with everything else in the
//! process that draws from it and seeded outside the admissioner, so its sequence of
//! decisions cannot be reproduced; this policy seeds its own generator, which makes runs
//! reproducible and the miss ratio statistically (not bit-) equal to libCacheSim's.

const MODULUS: u64 = 10_000_000;
const SEED: u64 = 0x6d61_6e74_6c65_7072;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Probabilistic {
    probability: f64,
    threshold: u64,
    state: u64,
}

impl Default for Probabilistic {
    fn default() -> Self {
        Probabilistic::new(0.5).expect("0.5 is a probability")
    }
}

impl Probabilistic {
    /// Admission with probability `p`, which must be in (0, 1].
    pub fn new(p: f64) -> Result<Self, String> {
        if !(p > 0.0 && p <= 1.0) {
            return Err(format!("prob must be in (0, 1], got {p}"));
        }
        Ok(Probabilistic {
            probability: p,
            // libCacheSim: `(int)(p * MAX_MODULE)`.
            threshold: (p * MODULUS as f64) as u64,
            state: SEED,
        })
    }

    pub fn probability(&self) -> f64 {
        self.probability
    }

    pub(crate) fn fresh(&self) -> Self {
        Probabilistic {
            state: SEED,
            ..*self
        }
    }

    #[inline]
    pub fn admit(&mut self) -> bool {
        self.state = self
            .state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.state % MODULUS < self.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_about_p_of_the_misses_and_all_at_one() {
        let mut a = Probabilistic::new(0.3).unwrap();
        let admitted = (0..100_000).filter(|_| a.admit()).count();
        assert!((29_000..31_000).contains(&admitted), "{admitted}");
        let mut all = Probabilistic::new(1.0).unwrap();
        assert!((0..1000).all(|_| all.admit()));
        let mut again = a.fresh();
        let mut first = Probabilistic::new(0.3).unwrap();
        assert!(
            (0..100).all(|_| again.admit() == first.admit()),
            "fresh restarts"
        );
    }
}
