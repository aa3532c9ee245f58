//! Synthetic workload generators (`mantle gen ...`).
