//! Which slots an overloaded node sends away: Ceph's rule for choosing what to export
//! (`find_exports`: a chunk within 80–120% of what is needed, hottest first), applied to
//! slots instead of directory fragments. Shared by the simulator (`mantle replay --nodes`)
//! and the live cluster's balancer, so both choose the same slots from the same loads.

use slots::{SlotRange, SLOTS};

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

/// One export a decision asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    /// Index of the receiving node in `servers[]`.
    pub target: usize,
    /// The load the policy asked to send there.
    pub amount: f64,
    /// The slots chosen, sorted; empty when nothing fills the amount.
    pub slots: Vec<u16>,
    /// Their measured load.
    pub load: f64,
}

/// Turns a decision's `targets` (server index, amount; in order) into exports from
/// `available`, this node's slots that may move (owned, not migrating) with their loads.
/// Without `units` each slot is a unit; with `units` (the ranges `howmuch()` named) a unit
/// goes whole or not at all, and only if every slot of it is available. Each target takes
/// units by [`choose`]'s rule from those the earlier targets left. The simulator and the
/// live balancer both plan with this, so they move the same slots on the same loads.
pub fn plan(
    targets: &[(usize, f64)],
    available: &[(u16, f64)],
    units: &[(u16, u16)],
) -> Vec<Export> {
    let mut load_of: Vec<Option<f64>> = vec![None; usize::from(SLOTS)];
    for &(s, l) in available {
        if let Some(x) = load_of.get_mut(usize::from(s)) {
            *x = Some(l);
        }
    }
    // (first, last, load) of every unit that may go.
    let candidates: Vec<(u16, u16, f64)> = if units.is_empty() {
        let mut c: Vec<(u16, u16, f64)> = available.iter().map(|&(s, l)| (s, s, l)).collect();
        c.sort_unstable_by_key(|u| u.0);
        c
    } else {
        units
            .iter()
            .filter(|&&(a, b)| a <= b && b < SLOTS)
            .filter_map(|&(a, b)| {
                (a..=b)
                    .map(|s| load_of[usize::from(s)])
                    .sum::<Option<f64>>()
                    .map(|l| (a, b, l))
            })
            .collect()
    };
    let mut taken = vec![false; candidates.len()];
    targets
        .iter()
        .map(|&(target, amount)| {
            // Unit numbers stand in for slots in `choose` (there are at most SLOTS units).
            let open: Vec<(u16, f64)> = candidates
                .iter()
                .enumerate()
                .filter(|(i, _)| !taken[*i])
                .map(|(i, u)| (i as u16, u.2))
                .collect();
            let mut slots = Vec::new();
            let mut load = 0.0;
            for i in choose(&open, amount) {
                let (a, b, l) = candidates[usize::from(i)];
                taken[usize::from(i)] = true;
                slots.extend(a..=b);
                load += l;
            }
            slots.sort_unstable();
            Export {
                target,
                amount,
                slots,
                load,
            }
        })
        .collect()
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
    fn plans_fill_targets_in_turn_from_what_is_left() {
        let avail = [(1, 50.0), (2, 30.0), (3, 20.0), (4, 10.0)];
        let p = plan(&[(1, 60.0), (2, 45.0)], &avail, &[]);
        assert_eq!(p[0].slots, vec![1]);
        assert_eq!(p[1].slots, vec![2, 3]);
        assert_eq!((p[0].load, p[1].load), (50.0, 50.0));
        // The same choice slot by slot as `choose` for one target.
        for amount in [10.0, 33.0, 65.0, 100.0] {
            assert_eq!(
                plan(&[(0, amount)], &avail, &[])[0].slots,
                choose(&avail, amount)
            );
        }
    }

    #[test]
    fn named_units_go_whole_or_not_at_all() {
        let avail = [(1, 50.0), (2, 30.0), (3, 20.0), (4, 10.0), (9, 5.0)];
        // 2-3 (50) fills 60 by itself; 1 alone would too, but it is not a named unit.
        let p = plan(&[(1, 60.0)], &avail, &[(2, 3), (4, 4)]);
        assert_eq!(p[0].slots, vec![2, 3]);
        assert_eq!(p[0].load, 50.0);
        // A unit with a slot that may not move (not owned, or migrating) is never sent.
        let p = plan(&[(1, 60.0)], &avail, &[(3, 5), (9, 9)]);
        assert_eq!(p[0].slots, vec![9]);
        // A unit hotter than 120% of the amount stays, as a single hot slot does.
        assert!(plan(&[(1, 10.0)], &avail, &[(1, 2)])[0].slots.is_empty());
        // Out-of-range units are ignored, not a panic.
        assert!(plan(&[(1, 10.0)], &avail, &[(16_380, 20_000)])[0]
            .slots
            .is_empty());
    }

    #[test]
    fn runs_become_ranges() {
        let r = ranges(&[1, 2, 3, 7, 9, 10]);
        let text: Vec<String> = r.iter().map(|r| r.to_string()).collect();
        assert_eq!(text, ["1-3", "7", "9-10"]);
        assert!(ranges(&[]).is_empty());
    }
}
