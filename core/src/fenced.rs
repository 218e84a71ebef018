//! Fences: where a resource keeps the largest fencing token that wrote to it and refuses a
//! smaller one — the check Kleppmann's "How to do distributed locking" (2016) asks of every
//! resource a lock protects — for a resource inside Redis itself (`LOCK.FENCED`).
//!
//! A fence admits a token at least as large as the largest it admitted: equal is admitted, so
//! that one holding may write through it many times, and a holding whose token is smaller than
//! one that already wrote was overtaken (its lease ended and another owner took the lock). The
//! tokens may come from any server (another Redis, Redlock's `LOCK.RAISE`, a lock that moved
//! across a failover): a fence compares them and issues none.

/// The largest token a fence takes: 2^63 - 1, Redis's largest integer.
pub const MAX_TOKEN: u64 = i64::MAX as u64;

/// A fence: the largest token admitted, 1 to [`MAX_TOKEN`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    largest: u64,
}

impl Fence {
    /// A fence that admitted `token` and nothing larger; `None` outside 1 to 2^63 - 1, the
    /// tokens Redis's integers carry (0 is no token, and a saved fence never holds it).
    #[must_use]
    pub fn new(token: u64) -> Option<Self> {
        (1..=MAX_TOKEN)
            .contains(&token)
            .then_some(Self { largest: token })
    }

    /// The largest token admitted.
    #[must_use]
    pub fn largest(self) -> u64 {
        self.largest
    }

    /// Whether `token` may write: `Err` with the largest admitted when it is smaller.
    ///
    /// # Errors
    /// The largest token admitted, when `token` is below it.
    pub fn check(self, token: u64) -> Result<(), u64> {
        if token >= self.largest {
            Ok(())
        } else {
            Err(self.largest)
        }
    }

    /// Admits `token`, already [`Self::check`]ed: the fence keeps the larger of the two.
    pub fn admit(&mut self, token: u64) {
        self.largest = self.largest.max(token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_admits_its_largest_token_and_larger_ones_only() {
        let mut fence = Fence::new(7).expect("a token");
        assert_eq!(fence.check(7), Ok(()));
        assert_eq!(fence.check(6), Err(7));
        fence.admit(9);
        assert_eq!((fence.largest(), fence.check(8)), (9, Err(9)));
        fence.admit(8);
        assert_eq!(fence.largest(), 9);
        assert_eq!(Fence::new(0), None);
        assert_eq!(Fence::new(MAX_TOKEN + 1), None);
    }
}
