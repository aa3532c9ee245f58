//! K-means (Lloyd's algorithm) over 2-D points, deterministic.
//!
//! Seed 002 §6 clusters (time, request rate) tuples into workload regimes. Initial centroids
//! are the points at evenly spaced quantiles of the input order (time order for regimes), so
//! the result does not depend on a random seed.

/// Cluster assignment and centroids.
#[derive(Clone, Debug, PartialEq)]
pub struct Clustering {
    pub centroids: Vec<[f64; 2]>,
    pub labels: Vec<usize>,
    pub iterations: usize,
}

const MAX_ITERATIONS: usize = 200;

fn distance2(a: [f64; 2], b: [f64; 2]) -> f64 {
    (a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2)
}

/// Clusters `points` into at most `k` groups (fewer when there are fewer points).
pub fn kmeans(points: &[[f64; 2]], k: usize) -> Clustering {
    let k = k.min(points.len()).max(1);
    if points.is_empty() {
        return Clustering {
            centroids: Vec::new(),
            labels: Vec::new(),
            iterations: 0,
        };
    }
    let mut centroids: Vec<[f64; 2]> = (0..k)
        .map(|i| points[(2 * i + 1) * points.len() / (2 * k)])
        .collect();
    let mut labels = vec![usize::MAX; points.len()];
    let mut iterations = 0;
    while iterations < MAX_ITERATIONS {
        iterations += 1;
        let mut changed = false;
        for (label, p) in labels.iter_mut().zip(points) {
            let best = (0..k)
                .min_by(|&a, &b| {
                    distance2(*p, centroids[a]).total_cmp(&distance2(*p, centroids[b]))
                })
                .unwrap_or(0);
            if *label != best {
                *label = best;
                changed = true;
            }
        }
        if !changed {
            break;
        }
        let mut sums = vec![[0.0f64; 3]; k];
        for (&label, p) in labels.iter().zip(points) {
            sums[label][0] += p[0];
            sums[label][1] += p[1];
            sums[label][2] += 1.0;
        }
        for (c, s) in centroids.iter_mut().zip(&sums) {
            // An emptied cluster keeps its centroid.
            if s[2] > 0.0 {
                *c = [s[0] / s[2], s[1] / s[2]];
            }
        }
    }
    Clustering {
        centroids,
        labels,
        iterations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separable_blobs_are_recovered() {
        let centers = [[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]];
        let mut points = Vec::new();
        let mut truth = Vec::new();
        let mut x: u64 = 1;
        for (ci, c) in centers.iter().enumerate() {
            for _ in 0..50 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let dx = ((x >> 40) % 1000) as f64 / 1000.0 - 0.5;
                let dy = ((x >> 20) % 1000) as f64 / 1000.0 - 0.5;
                points.push([c[0] + dx, c[1] + dy]);
                truth.push(ci);
            }
        }
        let result = kmeans(&points, 4);
        // Same partition as the truth, whatever the label numbering.
        for i in 0..points.len() {
            for j in 0..points.len() {
                assert_eq!(truth[i] == truth[j], result.labels[i] == result.labels[j]);
            }
        }
        for c in &result.centroids {
            assert!(centers.iter().any(|t| distance2(*t, *c) < 0.1), "{c:?}");
        }
    }

    #[test]
    fn fewer_points_than_clusters() {
        let r = kmeans(&[[1.0, 1.0], [2.0, 2.0]], 4);
        assert_eq!(r.centroids.len(), 2);
        assert!(kmeans(&[], 4).labels.is_empty());
    }
}
