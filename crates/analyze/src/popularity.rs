//! Key popularity: how concentrated reads are (top-N share) and a Zipf exponent fit.
//!
//! Seed 000 Fig. 4 plots reads per key; a single skew number and the share of the hottest
//! keys say the same in JSON. Counts are per dense id (memory: one counter per distinct key).

use serde::Serialize;

/// Popularity summary of the reads (gets and accesses).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Popularity {
    /// Keys read at least once.
    pub keys_read: u64,
    /// Share of reads that go to the hottest 1% / 10% of the keys read.
    pub top1pct_share: f64,
    pub top10pct_share: f64,
    /// Reads of the 10 hottest keys, hottest first.
    pub top_reads: Vec<u64>,
    /// Keys read exactly once.
    pub keys_read_once: u64,
    /// Exponent `a` of a Zipf law `reads ∝ rank^-a`, least squares in log-log space over
    /// ranks spaced evenly in log scale (so the long tail does not dominate); null when fewer
    /// than 3 keys were read.
    pub zipf_alpha: Option<f64>,
}

/// Summarises per-key read counts (any order; zeros ignored).
pub fn popularity(counts: &[u64]) -> Popularity {
    let mut sorted: Vec<u64> = counts.iter().copied().filter(|&c| c > 0).collect();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let total: u64 = sorted.iter().sum();
    let n = sorted.len();
    if n == 0 || total == 0 {
        return Popularity::default();
    }
    let share = |fraction: f64| {
        let top = ((n as f64 * fraction).ceil() as usize).clamp(1, n);
        sorted[..top].iter().sum::<u64>() as f64 / total as f64
    };
    Popularity {
        keys_read: n as u64,
        top1pct_share: share(0.01),
        top10pct_share: share(0.10),
        top_reads: sorted.iter().take(10).copied().collect(),
        keys_read_once: sorted.iter().filter(|&&c| c == 1).count() as u64,
        zipf_alpha: zipf_alpha(&sorted),
    }
}

fn zipf_alpha(sorted_desc: &[u64]) -> Option<f64> {
    if sorted_desc.len() < 3 {
        return None;
    }
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    let mut rank = 1.0f64;
    let mut last = 0usize;
    while (rank as usize) <= sorted_desc.len() {
        let r = rank as usize;
        if r != last {
            xs.push((r as f64).ln());
            ys.push((sorted_desc[r - 1] as f64).ln());
            last = r;
        }
        rank *= 2f64.powf(0.125);
    }
    let n = xs.len() as f64;
    let mx = xs.iter().sum::<f64>() / n;
    let my = ys.iter().sum::<f64>() / n;
    let sxy: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    (sxx > 0.0).then(|| -sxy / sxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_exponent_is_recovered() {
        let counts: Vec<u64> = (1..=5000u64)
            .map(|r| (1e7 * (r as f64).powf(-0.9)) as u64)
            .collect();
        let p = popularity(&counts);
        let a = p.zipf_alpha.unwrap();
        assert!((a - 0.9).abs() < 0.02, "alpha {a}");
        assert!(p.top1pct_share > p.top10pct_share * 0.3);
        assert_eq!(p.top_reads[0], 10_000_000);
    }

    #[test]
    fn uniform_counts_have_proportional_shares() {
        let p = popularity(&[5; 1000]);
        assert!((p.top10pct_share - 0.1).abs() < 1e-9);
        assert!(p.zipf_alpha.unwrap().abs() < 1e-9);
        assert_eq!(p.keys_read_once, 0);
    }
}
