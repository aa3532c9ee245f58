//! Names of the built-in eviction algorithms, as accepted on the command line.

use std::fmt;
use std::str::FromStr;

/// Eviction algorithm names accepted on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Belady,
    BeladySize,
    Lru,
    Fifo,
    Gdsf,
    Clock,
    Sieve,
    S3Fifo,
    Arc,
    TwoQ,
    Slru,
    Lfu,
    Lfuda,
    Random,
    Hyperbolic,
    Lirs,
    LeCaR,
    Cacheus,
    WTinyLfu,
    ClockPro,
    ClockProLibCacheSim,
    Lhd,
}

impl Algorithm {
    /// Every built-in algorithm, in documentation order.
    pub const ALL: [Algorithm; 22] = [
        Algorithm::Lru,
        Algorithm::Fifo,
        Algorithm::Clock,
        Algorithm::Sieve,
        Algorithm::S3Fifo,
        Algorithm::Arc,
        Algorithm::TwoQ,
        Algorithm::Slru,
        Algorithm::Lfu,
        Algorithm::Lfuda,
        Algorithm::Random,
        Algorithm::Hyperbolic,
        Algorithm::Lirs,
        Algorithm::LeCaR,
        Algorithm::Cacheus,
        Algorithm::WTinyLfu,
        Algorithm::ClockPro,
        Algorithm::ClockProLibCacheSim,
        Algorithm::Lhd,
        Algorithm::Gdsf,
        Algorithm::Belady,
        Algorithm::BeladySize,
    ];

    /// The canonical lowercase name (what `FromStr` accepts and `Display` prints).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Belady => "belady",
            Algorithm::BeladySize => "beladysize",
            Algorithm::Lru => "lru",
            Algorithm::Fifo => "fifo",
            Algorithm::Gdsf => "gdsf",
            Algorithm::Clock => "clock",
            Algorithm::Sieve => "sieve",
            Algorithm::S3Fifo => "s3fifo",
            Algorithm::Arc => "arc",
            Algorithm::TwoQ => "twoq",
            Algorithm::Slru => "slru",
            Algorithm::Lfu => "lfu",
            Algorithm::Lfuda => "lfuda",
            Algorithm::Random => "random",
            Algorithm::Hyperbolic => "hyperbolic",
            Algorithm::Lirs => "lirs",
            Algorithm::LeCaR => "lecar",
            Algorithm::Cacheus => "cacheus",
            Algorithm::WTinyLfu => "wtinylfu",
            Algorithm::ClockPro => "clockpro",
            Algorithm::ClockProLibCacheSim => "clockpro-libcachesim",
            Algorithm::Lhd => "lhd",
        }
    }
}

impl Algorithm {
    /// Every name, comma-separated, for error messages.
    pub fn names() -> String {
        Algorithm::ALL.map(Algorithm::name).join(", ")
    }

    /// Offline algorithms need each request's next access time
    /// ([`crate::Cache::access_with_future`]); hosts that cannot know it refuse them.
    pub fn is_offline(self) -> bool {
        matches!(self, Algorithm::Belady | Algorithm::BeladySize)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "belady" => Ok(Algorithm::Belady),
            "beladysize" | "belady-size" => Ok(Algorithm::BeladySize),
            "lru" => Ok(Algorithm::Lru),
            "fifo" => Ok(Algorithm::Fifo),
            "gdsf" => Ok(Algorithm::Gdsf),
            "clock" => Ok(Algorithm::Clock),
            "sieve" => Ok(Algorithm::Sieve),
            "s3fifo" | "s3-fifo" => Ok(Algorithm::S3Fifo),
            "arc" => Ok(Algorithm::Arc),
            "twoq" | "2q" => Ok(Algorithm::TwoQ),
            "slru" => Ok(Algorithm::Slru),
            "lfu" => Ok(Algorithm::Lfu),
            "lfuda" => Ok(Algorithm::Lfuda),
            "random" => Ok(Algorithm::Random),
            "hyperbolic" => Ok(Algorithm::Hyperbolic),
            "lirs" => Ok(Algorithm::Lirs),
            "lecar" => Ok(Algorithm::LeCaR),
            "cacheus" => Ok(Algorithm::Cacheus),
            "wtinylfu" | "w-tinylfu" | "tinylfu" => Ok(Algorithm::WTinyLfu),
            "clockpro" | "clock-pro" => Ok(Algorithm::ClockPro),
            "clockpro-libcachesim" | "clockpro-lcs" => Ok(Algorithm::ClockProLibCacheSim),
            "lhd" => Ok(Algorithm::Lhd),
            other => Err(format!(
                "unknown eviction algorithm '{other}' (expected one of: {})",
                Algorithm::names()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for alg in Algorithm::ALL {
            assert_eq!(alg.name().parse::<Algorithm>(), Ok(alg));
            assert_eq!(alg.to_string(), alg.name());
        }
        assert_eq!("S3-FIFO".parse::<Algorithm>(), Ok(Algorithm::S3Fifo));
        assert_eq!(
            "clockpro-lcs".parse::<Algorithm>(),
            Ok(Algorithm::ClockProLibCacheSim)
        );
        let err = "nosuch".parse::<Algorithm>().unwrap_err();
        assert!(err.contains("'nosuch'"), "{err}");
        for alg in Algorithm::ALL {
            assert!(err.contains(alg.name()), "{err} lacks {alg}");
        }
    }
}
