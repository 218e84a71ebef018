//! Retrying without waiting in the server: exponential backoff with full jitter.

use std::time::Duration;

use rand::RngExt;

/// Exponential backoff with full jitter (Marc Brooker, "Exponential Backoff And Jitter", AWS
/// Architecture Blog, 2015): the delay before retry `n` (from 0) is uniformly random between 0
/// and `min(cap, base × 2^n)`, so contending clients spread out instead of retrying together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first retry's upper bound (default 10 ms).
    pub base: Duration,
    /// The largest upper bound (default 1 s).
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(10),
            cap: Duration::from_secs(1),
        }
    }
}

impl Backoff {
    /// The delay before retry `attempt` (0 for the first retry).
    #[must_use]
    pub fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(2_u32.saturating_pow(attempt.min(31)))
            .min(self.cap);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rand::rng().random_range(0..=nanos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_to_the_cap_and_stay_random_below_it() {
        let backoff = Backoff::default();
        for attempt in 0..40 {
            let bound = (Duration::from_millis(10) * 2_u32.pow(attempt.min(7))).min(backoff.cap);
            for _ in 0..50 {
                assert!(backoff.delay(attempt) <= bound, "attempt {attempt}");
            }
        }
        let late: Vec<Duration> = (0..100).map(|_| backoff.delay(20)).collect();
        assert!(
            late.iter().any(|d| *d > Duration::from_millis(500)),
            "full jitter up to the cap"
        );
        assert!(late.iter().any(|d| *d < Duration::from_millis(500)));
    }
}
