//! Workload regimes (seed 002 §6): k-means over (time, read rate), and the cache size to
//! switch to.
//!
//! Both coordinates are scaled to [0, 1] so they weigh equally, as in the seed. Regimes are
//! numbered in time order of their centroids. The seed switches to a fixed-size cache at the
//! start of the third regime (after the flash-crowd plateau and the decline) and suggests the
//! key-space size reached by then; with fewer regimes the last one is used.

use serde::Serialize;

use crate::kmeans::kmeans;
use crate::series::SeriesColumns;

/// One regime: its time span and what the workload looks like in it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Regime {
    pub start: f64,
    pub end: f64,
    /// Centroid read rate and mean read rate over its buckets (reads/s).
    pub centroid_read_rate: f64,
    pub mean_read_rate: f64,
    /// Distinct keys seen since the trace start, when the regime begins.
    pub keyspace_at_start: u64,
    pub buckets: u64,
}

/// Regimes and the policy switch they suggest.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Regimes {
    pub k: usize,
    pub regimes: Vec<Regime>,
    /// Bucket label of each series point (regime index), for coloured charts.
    #[serde(skip)]
    pub labels: Vec<usize>,
    /// Regime whose start is the switch point (0-based; the seed's "third regime" is 2).
    pub switch_regime: Option<usize>,
    pub switch_time: Option<f64>,
    /// Key-space size at the switch: the cache size for a fixed-size policy after it.
    pub suggested_cache_size: Option<u64>,
}

/// Clusters the read-rate series into `k` regimes.
pub fn detect(series: &SeriesColumns, k: usize) -> Regimes {
    let n = series.time.len();
    let empty = Regimes {
        k,
        regimes: Vec::new(),
        labels: Vec::new(),
        switch_regime: None,
        switch_time: None,
        suggested_cache_size: None,
    };
    if n == 0 || k == 0 {
        return empty;
    }
    let scale = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let span = if hi > lo { hi - lo } else { 1.0 };
        v.iter().map(|x| (x - lo) / span).collect::<Vec<f64>>()
    };
    let ts = scale(&series.time);
    let rs = scale(&series.read_rate);
    let points: Vec<[f64; 2]> = ts.iter().zip(&rs).map(|(&t, &r)| [t, r]).collect();
    let clustering = kmeans(&points, k);
    let k = clustering.centroids.len();
    // Number clusters by centroid time.
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&a, &b| clustering.centroids[a][0].total_cmp(&clustering.centroids[b][0]));
    let mut rank = vec![0; k];
    for (position, &cluster) in order.iter().enumerate() {
        rank[cluster] = position;
    }
    let labels: Vec<usize> = clustering.labels.iter().map(|&l| rank[l]).collect();
    let rate_span = {
        let lo = series
            .read_rate
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let hi = series
            .read_rate
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        (lo, if hi > lo { hi - lo } else { 1.0 })
    };
    let mut regimes = Vec::new();
    for (position, &cluster) in order.iter().enumerate() {
        let members: Vec<usize> = (0..n).filter(|&i| labels[i] == position).collect();
        let Some(&first) = members.first() else {
            continue;
        };
        let last = *members.last().expect("non-empty");
        let mean = members.iter().map(|&i| series.read_rate[i]).sum::<f64>() / members.len() as f64;
        regimes.push(Regime {
            start: series.time[first],
            end: series.time[last] + series.bucket_s,
            centroid_read_rate: rate_span.0 + clustering.centroids[cluster][1] * rate_span.1,
            mean_read_rate: mean,
            keyspace_at_start: if first == 0 {
                0
            } else {
                series.keyspace[first - 1]
            },
            buckets: members.len() as u64,
        });
    }
    let switch = regimes.len().checked_sub(1).map(|last| last.min(2));
    Regimes {
        k,
        switch_time: switch.map(|s| regimes[s].start),
        suggested_cache_size: switch.map(|s| regimes[s].keyspace_at_start),
        switch_regime: switch,
        regimes,
        labels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_phases_are_found_and_the_third_sets_the_switch() {
        // Plateau at 600/s, decline to 100/s, plateau 100/s, plateau 40/s; key space +10/s.
        let mut s = SeriesColumns {
            bucket_s: 10.0,
            ..SeriesColumns::default()
        };
        for i in 0..400 {
            let t = i as f64 * 10.0;
            let rate = match i {
                0..=99 => 600.0,
                100..=199 => 600.0 - 5.0 * (i - 100) as f64,
                200..=299 => 100.0,
                _ => 40.0,
            };
            s.time.push(t);
            s.read_rate.push(rate);
            s.keyspace.push((i as u64 + 1) * 100);
        }
        let r = detect(&s, 4);
        assert_eq!(r.regimes.len(), 4);
        assert!(r.regimes.windows(2).all(|w| w[0].start < w[1].start));
        assert_eq!(r.regimes[0].start, 0.0);
        assert!(r.regimes[0].mean_read_rate > 500.0);
        let switch = r.switch_time.unwrap();
        assert!((1500.0..=3000.0).contains(&switch), "switch at {switch}");
        let size = r.suggested_cache_size.unwrap();
        assert_eq!(size, s.keyspace[(switch / 10.0) as usize - 1]);
    }
}
