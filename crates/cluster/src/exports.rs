//! Which slots an overloaded node sends away: Ceph's rule for choosing what to export
//! (`find_exports`: a chunk within 80–120% of what is needed, hottest first), applied to
//! slots instead of directory fragments. Shared by the simulator (`mantle replay --nodes`)
//! and the live cluster's balancer, so both choose the same slots from the same loads.

use crate::slotmap::SlotRange;

/// Share of the amount at which an export is big enough.
const NEED_MIN: f64 = 0.8;
/// Share of the amount an export may not exceed.
const NEED_MAX: f64 = 1.2;

/// Slots from `loads` (slot, load) whose loads add up to between 80% and 120% of `amount`
/// when they can: hottest first, a slot skipped when it would overshoot. Slots with no load
/// are never chosen (moving them relieves nothing). Sorted by slot.
pub fn choose(loads: &[(u16, f64)], amount: f64) -> Vec<u16> {
    if amount.is_nan() || amount <= 0.0 {
        return Vec::new();
    }
    let mut hottest: Vec<(u16, f64)> = loads.iter().copied().filter(|&(_, l)| l > 0.0).collect();
    hottest.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut chosen = Vec::new();
    let mut sent = 0.0;
    for (slot, load) in hottest {
        if sent >= NEED_MIN * amount {
            break;
        }
        if sent + load <= NEED_MAX * amount {
            chosen.push(slot);
            sent += load;
        }
    }
    chosen.sort_unstable();
    chosen
}

/// Sorted slots as contiguous ranges.
pub fn ranges(sorted: &[u16]) -> Vec<SlotRange> {
    let mut out: Vec<SlotRange> = Vec::new();
    for &s in sorted {
        match out.last_mut() {
            Some(r) if u32::from(r.end) + 1 == u32::from(s) => r.end = s,
            _ => out.push(SlotRange::new(s, s).expect("a slot is a range")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hottest_first_within_the_band() {
        let loads = [(1, 50.0), (2, 30.0), (3, 20.0), (4, 10.0), (5, 0.0)];
        // 60 wanted: 50 is already past 80% of it.
        assert_eq!(choose(&loads, 60.0), vec![1]);
        // 65 wanted: 50, then 30 would overshoot 78 and is skipped, 20 fits.
        assert_eq!(choose(&loads, 65.0), vec![1, 3]);
        // 100 wanted: 50 + 30 = 80 reaches 80%.
        assert_eq!(choose(&loads, 100.0), vec![1, 2]);
        // A slot hotter than 120% of the amount is never sent alone.
        assert_eq!(choose(&[(9, 500.0)], 100.0), Vec::<u16>::new());
        // Idle slots relieve nothing.
        assert!(choose(&[(5, 0.0)], 10.0).is_empty());
        assert!(choose(&loads, 0.0).is_empty());
        assert!(choose(&loads, f64::NAN).is_empty());
    }

    #[test]
    fn never_more_than_120_percent() {
        let loads: Vec<(u16, f64)> = (0..200).map(|s| (s, f64::from(s % 17) + 0.5)).collect();
        for amount in [1.0, 7.0, 33.0, 250.0, 1000.0] {
            let sent: f64 = choose(&loads, amount)
                .iter()
                .map(|s| loads[usize::from(*s)].1)
                .sum();
            assert!(sent <= 1.2 * amount + 1e-9, "{amount}: {sent}");
        }
    }

    #[test]
    fn runs_become_ranges() {
        let r = ranges(&[1, 2, 3, 7, 9, 10]);
        let text: Vec<String> = r.iter().map(|r| r.to_string()).collect();
        assert_eq!(text, ["1-3", "7", "9-10"]);
        assert!(ranges(&[]).is_empty());
    }
}
