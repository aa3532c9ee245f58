//! The warm-up strategies of Bonfire (seed 001) and the `--warmup STRATEGY:K[:PERIOD]` spec
//! that selects one; shared by replay (`crates/sim`) and the server, which rank their own
//! records of accesses by it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Which units a warm-up loads (Bonfire's four algorithms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// The K units accessed most recently.
    LastK,
    /// The first K units accessed in the last period (Bonfire: the last 24 hours).
    FirstK,
    /// The K units accessed most often.
    TopK,
    /// K units drawn uniformly at random (seeded, reproducible).
    RandomK,
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::LastK => "lastk",
            Strategy::FirstK => "firstk",
            Strategy::TopK => "topk",
            Strategy::RandomK => "randomk",
        }
    }
}

/// `--warmup STRATEGY:K`, or `firstk:K:PERIOD` (PERIOD a duration such as `1h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarmupSpec {
    pub strategy: Strategy,
    pub k: u64,
    /// First-K's look-back; `None` = the caller's default (Bonfire's 24 hours).
    pub period: Option<Duration>,
}

impl FromStr for WarmupSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let usage = "expected lastk:K, firstk:K[:PERIOD], topk:K or randomk:K";
        let mut parts = text.trim().splitn(3, ':');
        let strategy = match parts.next().unwrap_or("").to_ascii_lowercase().as_str() {
            "lastk" => Strategy::LastK,
            "firstk" => Strategy::FirstK,
            "topk" => Strategy::TopK,
            "randomk" => Strategy::RandomK,
            _ => return Err(format!("unknown warm-up strategy in '{text}': {usage}")),
        };
        let k = parts
            .next()
            .ok_or_else(|| format!("'{text}': missing K ({usage})"))?;
        let k: u64 = k
            .parse()
            .ok()
            .filter(|&k| k > 0)
            .ok_or_else(|| format!("'{text}': K '{k}' is not a positive integer"))?;
        let period = match parts.next() {
            None => None,
            Some(p) if strategy == Strategy::FirstK => {
                let d = humantime::parse_duration(p)
                    .map_err(|e| format!("'{text}': period '{p}': {e}"))?;
                if d.is_zero() {
                    return Err(format!("'{text}': the period must be > 0"));
                }
                Some(d)
            }
            Some(_) => return Err(format!("'{text}': only firstk takes a period")),
        };
        Ok(WarmupSpec {
            strategy,
            k,
            period,
        })
    }
}

impl fmt::Display for WarmupSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.strategy.name(), self.k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_strategy_and_rejects_nonsense() {
        let s: WarmupSpec = "lastk:1000".parse().unwrap();
        assert_eq!((s.strategy, s.k, s.period), (Strategy::LastK, 1000, None));
        let s: WarmupSpec = "FirstK:5:1h".parse().unwrap();
        assert_eq!(s.period, Some(Duration::from_secs(3600)));
        assert_eq!(
            "topk:3".parse::<WarmupSpec>().unwrap().to_string(),
            "topk:3"
        );
        for bad in [
            "",
            "lastk",
            "lastk:0",
            "lastk:-1",
            "hotk:5",
            "topk:5:1h",
            "firstk:5:soon",
        ] {
            let err = bad.parse::<WarmupSpec>().unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
    }
}
