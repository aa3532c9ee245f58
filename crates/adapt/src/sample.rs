//! Spatial sampling as SHARDS does it (Waldspurger et al., FAST '15): a key is in the sample
//! when `hash(key) mod P < T`, so every access of a sampled key is seen and the sample is a
//! fixed share `T/P` of the key space. A shadow on the sample scales its counts and sizes by
//! `P/T` and its capacity by `T/P`.

/// Modulus of the sampling hash: rates are exact to 1/2^24.
const MODULUS: u64 = 1 << 24;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampler {
    threshold: u64,
}

impl Sampler {
    /// Samples `rate` of the key space (clamped to (0, 1]; 1 = every key).
    pub fn new(rate: f64) -> Sampler {
        let t = (rate.clamp(0.0, 1.0) * MODULUS as f64).round() as u64;
        Sampler {
            threshold: t.clamp(1, MODULUS),
        }
    }

    /// The share of keys sampled.
    pub fn rate(&self) -> f64 {
        self.threshold as f64 / MODULUS as f64
    }

    pub fn is_full(&self) -> bool {
        self.threshold == MODULUS
    }

    /// Whether `key` (a 64-bit id or a hash of a byte key) is in the sample.
    #[inline]
    pub fn admits(&self, key: u64) -> bool {
        self.is_full() || position(key) < self.threshold
    }

    /// `T` of `hash(key) mod P < T`: a key is in every sample whose threshold is above its
    /// [`position`], so a host feeding several samplers tests a key once, against the largest.
    pub fn threshold(&self) -> u64 {
        self.threshold
    }
}

/// Where `key` falls in `[0, P)`; [`Sampler::admits`] compares it with the threshold.
#[inline]
pub fn position(key: u64) -> u64 {
    mix(key) % MODULUS
}

/// SplitMix64's finaliser: trace ids are often dense, so they are mixed before the modulus.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_is_the_asked_share_of_dense_ids() {
        let s = Sampler::new(0.1);
        let n = (0..200_000u64).filter(|&k| s.admits(k)).count();
        assert!((19_000..21_000).contains(&n), "{n}");
        assert!(Sampler::new(1.0).admits(12345));
        assert_eq!(Sampler::new(0.0).rate(), 1.0 / MODULUS as f64);
    }

    #[test]
    fn a_key_under_the_largest_threshold_is_all_a_union_of_samples_needs() {
        let (small, large) = (Sampler::new(0.01), Sampler::new(0.2));
        for key in 0..50_000u64 {
            let in_any = small.admits(key) || large.admits(key);
            assert_eq!(
                in_any,
                position(key) < large.threshold().max(small.threshold())
            );
        }
        assert!(position(u64::MAX) < Sampler::new(1.0).threshold());
    }
}
