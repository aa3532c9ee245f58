//! Admission policies: whether an object that missed may enter the cache at all, asked
//! before anything is evicted for it, in front of any eviction algorithm. As in libCacheSim
//! 0.3.5 (`cache_can_insert_default`), the policy sees every miss that would insert (even of
//! an object too large to fit) and a refused object is simply not cached (a bypass); hits
//! and rewrites of cached objects are not asked.
//!
//! Specs on the command line and in Python are `NAME[:param=value,...]`:
//!
//! | spec | admits | libCacheSim |
//! |---|---|---|
//! | `size[:size=N]` | objects strictly smaller than `N` bytes (default: all) | `SizeAdmissioner` |
//! | `prob[:prob=P]` | each miss with probability `P` (default 0.5) | `ProbAdmissioner` |
//! | `bloomfilter` | an object's second and later misses | `BloomFilterAdmissioner` |
//! | `adaptsize[:max-iteration=N,reconf-interval=N]` | each miss with probability `exp(-size/c)`, `c` tuned by a model | `AdaptSizeAdmissioner` |
//!
//! A cache without admission ([`crate::Cache::set_admission`] never called) pays one
//! predictable branch per hit and per insertion. AdaptSize also learns from hits: the cache
//! tells every policy of each lookup ([`Admission::observe`]), which only AdaptSize uses.

mod adaptsize;
mod bloom_filter;
mod probabilistic;
mod size;

use std::fmt;
use std::str::FromStr;

pub use adaptsize::AdaptSize;
pub use bloom_filter::BloomFilter;
pub use probabilistic::Probabilistic;
pub use size::SizeThreshold;

/// One admission policy with its state.
#[derive(Clone, Debug)]
pub enum Admission {
    Size(SizeThreshold),
    Probabilistic(Probabilistic),
    BloomFilter(BloomFilter),
    AdaptSize(Box<AdaptSize>),
}

/// libCacheSim's AdaptSize defaults (`max-iteration=15,reconf-interval=30000`).
const ADAPTSIZE_DEFAULTS: (u64, u64) = (15, 30000);

impl Admission {
    /// Whether the object that just missed may be inserted.
    #[inline]
    pub fn admit(&mut self, key: u64, size: u32) -> bool {
        match self {
            Admission::Size(a) => a.admit(size),
            Admission::Probabilistic(a) => a.admit(),
            Admission::BloomFilter(a) => a.admit(key),
            Admission::AdaptSize(a) => a.admit(size),
        }
    }

    /// A lookup of `key` (`size` bytes) hit or missed, in a cache of `cache_bytes`: asked
    /// on every lookup before a miss asks [`Admission::admit`], as libCacheSim's
    /// `admissioner->update`.
    #[inline]
    pub fn observe(&mut self, key: u64, size: u32, cache_bytes: u64) {
        if let Admission::AdaptSize(a) = self {
            a.observe(key, size, cache_bytes);
        }
    }

    /// The same policy and parameters with its state reset (a fresh cache's).
    pub fn fresh(&self) -> Admission {
        match self {
            Admission::Size(a) => Admission::Size(*a),
            Admission::Probabilistic(a) => Admission::Probabilistic(a.fresh()),
            Admission::BloomFilter(_) => Admission::BloomFilter(BloomFilter::default()),
            Admission::AdaptSize(a) => Admission::AdaptSize(Box::new(a.fresh())),
        }
    }

    /// Heap bytes of the policy's state (the Bloom filter's set of seen keys).
    pub fn heap_bytes(&self) -> usize {
        match self {
            Admission::BloomFilter(a) => a.heap_bytes(),
            Admission::AdaptSize(a) => a.heap_bytes(),
            _ => 0,
        }
    }

    /// Every policy name, for help texts and errors.
    pub const NAMES: [&'static str; 4] = ["size", "prob", "bloomfilter", "adaptsize"];
}

/// `key=value` pairs of a spec, with the error naming the spec.
fn params<'a>(
    spec: &'a str,
    text: &'a str,
) -> impl Iterator<Item = Result<(&'a str, &'a str), String>> + 'a {
    text.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(move |p| {
            p.split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| format!("admission '{spec}': expected param=value, got '{p}'"))
        })
}

impl FromStr for Admission {
    type Err = String;

    fn from_str(spec: &str) -> Result<Self, String> {
        let (name, rest) = spec.split_once(':').unwrap_or((spec, ""));
        let name = name.trim().to_ascii_lowercase();
        let unknown = |key: &str| format!("admission '{spec}': {name} has no parameter '{key}'");
        match name.as_str() {
            "size" => {
                let mut admission = SizeThreshold::default();
                for pair in params(spec, rest) {
                    match pair? {
                        ("size", v) => {
                            admission = SizeThreshold::new(v.parse().map_err(|_| {
                                format!("admission '{spec}': size must be a byte count, got '{v}'")
                            })?)
                        }
                        (k, _) => return Err(unknown(k)),
                    }
                }
                Ok(Admission::Size(admission))
            }
            "prob" | "probabilistic" => {
                let mut admission = Probabilistic::default();
                for pair in params(spec, rest) {
                    match pair? {
                        ("prob", v) => {
                            let p: f64 = v.parse().map_err(|_| {
                                format!("admission '{spec}': prob must be a number, got '{v}'")
                            })?;
                            admission = Probabilistic::new(p)
                                .map_err(|e| format!("admission '{spec}': {e}"))?;
                        }
                        (k, _) => return Err(unknown(k)),
                    }
                }
                Ok(Admission::Probabilistic(admission))
            }
            "bloomfilter" | "bloom" => match params(spec, rest).next() {
                Some(pair) => Err(unknown(pair?.0)),
                None => Ok(Admission::BloomFilter(BloomFilter::default())),
            },
            "adaptsize" => {
                let (mut max_iteration, mut reconf_interval) = ADAPTSIZE_DEFAULTS;
                for pair in params(spec, rest) {
                    let (k, v) = pair?;
                    let n: u64 = v.parse().map_err(|_| {
                        format!("admission '{spec}': {k} must be a whole number, got '{v}'")
                    })?;
                    match k {
                        "max-iteration" => max_iteration = n,
                        "reconf-interval" => reconf_interval = n,
                        _ => return Err(unknown(k)),
                    }
                }
                let admission = AdaptSize::new(max_iteration, reconf_interval)
                    .map_err(|e| format!("admission '{spec}': {e}"))?;
                Ok(Admission::AdaptSize(Box::new(admission)))
            }
            _ => Err(format!(
                "unknown admission policy '{name}' (expected one of: {})",
                Admission::NAMES.join(", ")
            )),
        }
    }
}

impl fmt::Display for Admission {
    /// The canonical spec (parses back to the same policy).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Admission::Size(a) => match a.threshold() {
                Some(t) => write!(f, "size:size={t}"),
                None => f.write_str("size"),
            },
            Admission::Probabilistic(a) => write!(f, "prob:prob={}", a.probability()),
            Admission::BloomFilter(_) => f.write_str("bloomfilter"),
            Admission::AdaptSize(a) => match (a.max_iteration(), a.reconf_interval()) {
                ADAPTSIZE_DEFAULTS => f.write_str("adaptsize"),
                (m, r) => write!(f, "adaptsize:max-iteration={m},reconf-interval={r}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_print_back() {
        for spec in [
            "size",
            "size:size=4096",
            "prob:prob=0.25",
            "bloomfilter",
            "adaptsize",
            "adaptsize:max-iteration=5,reconf-interval=1000",
        ] {
            let a: Admission = spec.parse().unwrap();
            assert_eq!(a.to_string(), spec);
        }
        assert_eq!(
            "prob".parse::<Admission>().unwrap().to_string(),
            "prob:prob=0.5"
        );
    }

    #[test]
    fn bad_specs_name_what_is_wrong() {
        for (spec, needle) in [
            ("lfu", "unknown admission policy 'lfu'"),
            ("size:size=big", "byte count"),
            ("size:limit=3", "no parameter 'limit'"),
            ("prob:prob=0", "(0, 1]"),
            ("prob:prob=1.5", "(0, 1]"),
            ("prob:0.3", "param=value"),
            ("bloomfilter:window=3", "no parameter 'window'"),
            ("adaptsize:max-iteration=-1", "whole number"),
            ("adaptsize:reconf-interval=0", "at least 1"),
            ("adaptsize:c=3", "no parameter 'c'"),
        ] {
            let err = spec.parse::<Admission>().unwrap_err();
            assert!(err.contains(needle), "{spec}: {err}");
        }
    }
}
