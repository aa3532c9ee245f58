//! libCacheSim 0.3.5's `next_rand`, as the pip package's library is built: Lemire's
//! lehmer64, a 128-bit multiplicative generator (`state *= 0xda942042e4dd58b5`, the draw is
//! the state's high 64 bits) whose per-thread state starts at `0xdeadbeef`. (The October
//! 2024 source snapshot has an MMIX LCG there instead; the released library was read from
//! its machine code: the multiplier and the thread-local initial value.)
//!
//! The learning algorithms (LeCaR, Cacheus) draw from it in libCacheSim, so started from the
//! same state this generator draws the same sequence as a fresh libCacheSim process.

const MULTIPLIER: u128 = 0xda94_2042_e4dd_58b5;
const INITIAL_STATE: u128 = 0xdead_beef;

#[derive(Clone, Copy, Debug)]
pub(crate) struct NextRand {
    state: u128,
}

impl Default for NextRand {
    fn default() -> Self {
        NextRand {
            state: INITIAL_STATE,
        }
    }
}

impl NextRand {
    #[inline]
    pub fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_mul(MULTIPLIER);
        (self.state >> 64) as u64
    }

    /// libCacheSim's `(double)(next_rand() % 100) / 100.0`.
    #[inline]
    pub fn percent(&mut self) -> f64 {
        (self.next() % 100) as f64 / 100.0
    }
}
