//! Size admission (libCacheSim's `size.c`): admits objects strictly smaller than a threshold
//! in bytes; without one, every object.

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SizeThreshold(Option<u64>);

impl SizeThreshold {
    pub fn new(bytes: u64) -> Self {
        SizeThreshold(Some(bytes))
    }

    pub fn threshold(self) -> Option<u64> {
        self.0
    }

    #[inline]
    pub fn admit(self, size: u32) -> bool {
        self.0.is_none_or(|t| u64::from(size) < t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_strictly_smaller_objects() {
        let a = SizeThreshold::new(100);
        assert!(a.admit(99));
        assert!(!a.admit(100));
        assert!(SizeThreshold::default().admit(u32::MAX));
    }
}
