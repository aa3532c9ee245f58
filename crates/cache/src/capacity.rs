//! The cache's limits: bytes, objects, or both.

/// Largest limit, in objects or bytes, a cache accepts (2^53): every figure derived from it
/// is exact as a Lua number and fits a signed 64-bit integer in reports (INFO, CACHE STATS,
/// RESP integers), so no report shows a wrapped or rounded capacity.
pub const MAX_LIMIT: u64 = 1 << 53;

/// One limit as a user writes it (`--maxmemory`, `CONFIG SET max-keys`, `CACHE RESIZE`):
/// 0 means unlimited; above [`MAX_LIMIT`] is an error naming `what`.
pub fn limit(n: u64, what: &str) -> Result<Option<u64>, String> {
    if n > MAX_LIMIT {
        return Err(format!(
            "{what} {n} is above the largest supported capacity, {MAX_LIMIT} (0: unlimited)"
        ));
    }
    Ok((n > 0).then_some(n))
}

/// Limits of the cache. `None` means unlimited in that dimension; both may be set, and then
/// the cache stays within both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capacity {
    pub bytes: Option<u64>,
    pub objects: Option<u64>,
}

impl Capacity {
    /// A limit in bytes only.
    pub fn bytes(bytes: u64) -> Capacity {
        Capacity {
            bytes: Some(bytes),
            objects: None,
        }
    }

    /// A limit in objects only.
    pub fn objects(objects: u64) -> Capacity {
        Capacity {
            bytes: None,
            objects: Some(objects),
        }
    }

    /// Whether `objects` objects totalling `bytes` bytes exceed the limits.
    #[inline]
    pub fn exceeded_by(&self, objects: u64, bytes: u64) -> bool {
        self.bytes.is_some_and(|limit| bytes > limit)
            || self.objects.is_some_and(|limit| objects > limit)
    }

    /// Whether a single object of `size` bytes could ever be cached.
    #[inline]
    pub fn can_hold(&self, size: u32) -> bool {
        !self.exceeded_by(1, u64::from(size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_apply_per_dimension() {
        let both = Capacity {
            bytes: Some(100),
            objects: Some(2),
        };
        assert!(!both.exceeded_by(2, 100));
        assert!(both.exceeded_by(3, 10));
        assert!(both.exceeded_by(1, 101));
        assert!(!Capacity::default().exceeded_by(u64::MAX, u64::MAX));
        assert!(Capacity::bytes(10).can_hold(10));
        assert!(!Capacity::bytes(10).can_hold(11));
        assert!(!Capacity::objects(0).can_hold(1));
    }

    #[test]
    fn a_limit_is_zero_for_unlimited_and_at_most_two_to_the_53() {
        assert_eq!(limit(0, "x"), Ok(None));
        assert_eq!(limit(MAX_LIMIT, "x"), Ok(Some(MAX_LIMIT)));
        let err = limit(u64::MAX, "max-keys").unwrap_err();
        assert!(
            err.contains("max-keys 18446744073709551615 is above"),
            "{err}"
        );
    }
}
