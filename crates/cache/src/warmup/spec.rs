//! The `--warmup STRATEGY:K[:PERIOD]` spec: which of Bonfire's strategies (seed 001), how many
//! units, and First-K's look-back.

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

/// `--warmup STRATEGY:K`, or `firstk:K:PERIOD` (PERIOD a duration such as `1h`). K is a
/// number of units, or a share of the cache (`lastk:100%`, like `--cache-size 10%`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarmupSpec {
    pub strategy: Strategy,
    /// Most units to load; `u64::MAX` when K is a share (the share then bounds the load).
    pub k: u64,
    /// First-K's look-back; `None` = the caller's default (Bonfire's 24 hours).
    pub period: Option<Duration>,
    /// K as a share of the cache, in parts per million (kept integral so the spec stays
    /// `Eq`): units are loaded in rank order until their objects fill this share of the
    /// capacity (objects and bytes alike). `None`: K is a count.
    pub share_ppm: Option<u32>,
}

impl WarmupSpec {
    /// K as a fraction of the cache (1.0 = `100%`), when it was given as a share.
    pub fn share(&self) -> Option<f64> {
        self.share_ppm.map(|ppm| f64::from(ppm) / 1e6)
    }

    /// The part of `capacity` the bulk load may fill: all of it for a count K (the load
    /// stops when the cache is full), the share of each limit for a share.
    pub fn load_budget(&self, capacity: crate::Capacity) -> crate::Capacity {
        let Some(share) = self.share() else {
            return capacity;
        };
        let part = |limit: u64| (limit as f64 * share).floor() as u64;
        crate::Capacity {
            bytes: capacity.bytes.map(part),
            objects: capacity.objects.map(part),
        }
    }
}

/// `K` of a spec: a positive count, or `P%` with 0 < P ≤ 100.
fn parse_k(text: &str, k: &str) -> Result<(u64, Option<u32>), String> {
    if let Some(p) = k.strip_suffix('%') {
        let share = p
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|p| *p > 0.0 && *p <= 100.0)
            .ok_or_else(|| format!("'{text}': K '{k}' is not a share in (0%, 100%]"))?;
        let ppm = (share * 1e4).round().max(1.0) as u32;
        return Ok((u64::MAX, Some(ppm)));
    }
    let n = k.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
        format!("'{text}': K '{k}' is neither a positive integer nor a share such as 100%")
    })?;
    Ok((n, None))
}

impl FromStr for WarmupSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let usage = "expected lastk:K, firstk:K[:PERIOD], topk:K or randomk:K (K a count or P% of the cache)";
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
        let (k, share_ppm) = parse_k(text, k.trim())?;
        let period = match parts.next() {
            None => None,
            Some(p) if strategy == Strategy::FirstK => {
                let d = units::parse_duration(p).map_err(|e| format!("'{text}': period: {e}"))?;
                Some(d)
            }
            Some(_) => return Err(format!("'{text}': only firstk takes a period")),
        };
        Ok(WarmupSpec {
            strategy,
            k,
            period,
            share_ppm,
        })
    }
}

impl fmt::Display for WarmupSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.share() {
            Some(share) => write!(f, "{}:{}%", self.strategy.name(), share * 100.0),
            None => write!(f, "{}:{}", self.strategy.name(), self.k),
        }
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
            "lastk:0%",
            "lastk:150%",
            "lastk:-5%",
            "lastk:x%",
            "lastk:%",
        ] {
            let err = bad.parse::<WarmupSpec>().unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
    }

    #[test]
    fn k_can_be_a_share_of_the_cache() {
        let s: WarmupSpec = "lastk:100%".parse().unwrap();
        assert_eq!((s.strategy, s.share()), (Strategy::LastK, Some(1.0)));
        assert_eq!(s.k, u64::MAX, "a share bounds the load, not the units");
        assert_eq!(s.to_string(), "lastk:100%");
        let s: WarmupSpec = "firstk:12.5%:1h".parse().unwrap();
        assert_eq!(s.share(), Some(0.125));
        assert_eq!(s.period, Some(Duration::from_secs(3600)));
        assert_eq!(s.to_string(), "firstk:12.5%");
        let budget = s.load_budget(crate::Capacity {
            bytes: Some(1000),
            objects: Some(80),
        });
        assert_eq!((budget.bytes, budget.objects), (Some(125), Some(10)));
        let count: WarmupSpec = "topk:7".parse().unwrap();
        assert_eq!((count.k, count.share()), (7, None));
        let cap = crate::Capacity::objects(3);
        assert_eq!(
            count.load_budget(cap),
            cap,
            "a count K may fill the whole cache"
        );
    }
}
