//! `--max-cache-size`: a ceiling on the capacity a replay's cache may have, whatever the
//! starting size or a policy asks for. Without it `--cache-size` under a policy is only where
//! the cache starts (a policy's `{capacity=N}` replaces it), so a sweep over sizes would
//! measure one policy-chosen size many times.

use cache::Capacity;

/// `wanted` with each limit cut to the ceiling's; an unlimited dimension of `wanted` takes the
/// ceiling's. The flag says whether a finite request was cut (an unlimited one taking the
/// ceiling is how a run starts, not a request refused).
pub fn clamp(wanted: Capacity, ceiling: Capacity) -> (Capacity, bool) {
    let mut clamped = false;
    let mut dim = |want: Option<u64>, max: Option<u64>| match (want, max) {
        (want, None) => want,
        (None, Some(max)) => Some(max),
        (Some(want), Some(max)) if want > max => {
            clamped = true;
            Some(max)
        }
        (Some(want), Some(_)) => Some(want),
    };
    let capacity = Capacity {
        objects: dim(wanted.objects, ceiling.objects),
        bytes: dim(wanted.bytes, ceiling.bytes),
    };
    (capacity, clamped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_cut_per_dimension() {
        let none = Capacity::default();
        assert_eq!(
            clamp(Capacity::objects(5), none),
            (Capacity::objects(5), false)
        );
        assert_eq!(
            clamp(Capacity::objects(500), Capacity::objects(100)),
            (Capacity::objects(100), true)
        );
        assert_eq!(
            clamp(Capacity::objects(50), Capacity::objects(100)),
            (Capacity::objects(50), false)
        );
        assert_eq!(
            clamp(none, Capacity::objects(7)),
            (Capacity::objects(7), false)
        );
        // A byte ceiling leaves an object limit alone and adds its own.
        let (both, cut) = clamp(Capacity::objects(500), Capacity::bytes(4096));
        assert_eq!(
            (both.objects, both.bytes, cut),
            (Some(500), Some(4096), false)
        );
    }
}
