//! The fencing-token counter: one per server, persisted, replicated, and never going back.
//!
//! # Design
//! A token is a hybrid of a counter and the wall clock (the idea of hybrid logical clocks,
//! Kulkarni et al., 2014): the next token is `max(last + 1, now_ms × 1000)`. The counter
//! (`last`) is saved as RDB auxiliary data, carried by every `LOCK.APPLY` effect in the AOF and
//! the replication stream, and raised by every lock that is loaded, so a server that lost
//! nothing continues exactly where it was. The clock floor covers what persistence and
//! replication can lose: a token issued at wall-clock time `t` is below `(t + 1) × 1000` as long
//! as fewer than a million tokens per second were issued, so a server that comes back later —
//! after a crash that lost the last writes, or with no persistence at all — issues larger
//! tokens even though it never saw the lost ones.
//!
//! A burst above a million tokens per second, or a replica whose clock is behind the old
//! master's, would defeat the floor alone. So the first token after the module starts, and
//! after the server is promoted to master, also skips [`RESERVE`]: it is at least
//! `max(last, now_ms × 1000) + RESERVE`. Tokens stay correct while the tokens lost in one crash
//! or failover, plus 1000 × the clock skew in ms, stay below `RESERVE` (10^9).
//!
//! Every token is below 2^53, so JSON and JavaScript clients read it exactly: the clock alone
//! reaches 2^53 in the year 2255, and each start or promotion brings that 1000 s closer
//! (README, "Guarantees").

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Largest token that is ever issued: 2^53 - 1, JavaScript's `Number.MAX_SAFE_INTEGER`.
pub const MAX_TOKEN: u64 = (1 << 53) - 1;

/// Tokens per millisecond of wall-clock time in the floor: a token divided by 1000 reads as
/// the unix time in ms at which it was issued (or a little later).
pub const TOKENS_PER_MS: u64 = 1000;

/// How far the first token after a start or a promotion jumps ahead: 10^9 tokens, as many as
/// the clock floor advances in 1000 s.
pub const RESERVE: u64 = 1_000_000_000;

/// The token space is used up: the next token would reach 2^53.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted;

/// The counter behind every fencing token of this server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// The largest token issued, loaded or received so far.
    last: u64,
    /// True until the first token after a start or promotion is issued.
    reserve_pending: bool,
}

impl Counter {
    /// A counter for a server that just started: nothing seen, the reserve pending.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            last: 0,
            reserve_pending: true,
        }
    }

    /// Issues the next token at unix time `now_ms`: larger than every token seen before.
    ///
    /// # Errors
    /// [`Exhausted`] when the token would exceed [`MAX_TOKEN`]; nothing changes then.
    pub fn issue(&mut self, now_ms: u64) -> Result<u64, Exhausted> {
        let floor = now_ms.saturating_mul(TOKENS_PER_MS);
        let next = if self.reserve_pending {
            self.last.max(floor).saturating_add(RESERVE)
        } else {
            self.last.saturating_add(1).max(floor)
        };
        if next > MAX_TOKEN {
            return Err(Exhausted);
        }
        self.last = next;
        self.reserve_pending = false;
        Ok(next)
    }

    /// Takes note of a token issued elsewhere (loaded from RDB or AOF, received from the
    /// master, restored by `RESTORE`/`MIGRATE`): later tokens are larger than it.
    pub fn observe(&mut self, token: u64) {
        self.last = self.last.max(token);
    }

    /// The largest token issued, loaded or received so far (what the RDB saves).
    #[must_use]
    pub const fn last(&self) -> u64 {
        self.last
    }

    /// Makes the next token skip [`RESERVE`]: called when this server becomes a master, whose
    /// predecessor may have issued tokens that never reached it.
    pub fn reserve(&mut self) {
        self.reserve_pending = true;
    }
}

impl Default for Counter {
    fn default() -> Self {
        Self::new()
    }
}

/// A token as the signed 64-bit integer Redis replies, saves and replicates. Exact: tokens
/// stay at or below [`MAX_TOKEN`] (2^53 - 1).
#[must_use]
pub fn as_integer(token: u64) -> i64 {
    i64::try_from(token.min(MAX_TOKEN)).unwrap_or(i64::MAX)
}

static COUNTER: Mutex<Counter> = Mutex::new(Counter::new());

/// The server's counter. Redis runs commands, loading and events on one thread, so the lock
/// is never contended; a panic elsewhere cannot poison it into refusing service.
pub fn counter() -> MutexGuard<'static, Counter> {
    COUNTER.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_763_800_000_000; // November 2025, in ms

    fn started(last: u64) -> Counter {
        let mut counter = Counter::new();
        counter.observe(last);
        counter
    }

    #[test]
    fn first_token_after_start_skips_the_reserve_above_the_clock() {
        let mut counter = Counter::new();
        assert_eq!(counter.issue(NOW), Ok(NOW * TOKENS_PER_MS + RESERVE));
    }

    #[test]
    fn first_token_after_start_skips_the_reserve_above_a_loaded_counter() {
        let loaded = NOW * TOKENS_PER_MS + 5 * RESERVE;
        assert_eq!(started(loaded).issue(NOW), Ok(loaded + RESERVE));
    }

    #[test]
    fn tokens_follow_the_clock_or_count_up_whichever_is_larger() {
        let mut counter = Counter::new();
        let first = counter.issue(NOW).unwrap_or_default();
        assert_eq!(counter.issue(NOW), Ok(first + 1));
        let later = NOW + 2 * RESERVE / TOKENS_PER_MS;
        assert_eq!(counter.issue(later), Ok(later * TOKENS_PER_MS));
        assert_eq!(
            counter.issue(NOW),
            Ok(later * TOKENS_PER_MS + 1),
            "a clock that goes back does not take tokens back"
        );
    }

    #[test]
    fn observed_tokens_are_never_issued_again() {
        let mut counter = Counter::new();
        counter.issue(NOW).unwrap_or_default();
        let far = MAX_TOKEN - 10;
        counter.observe(far);
        counter.observe(3);
        assert_eq!(counter.last(), far);
        assert_eq!(counter.issue(NOW), Ok(far + 1));
    }

    #[test]
    fn promotion_skips_the_reserve_again() {
        let mut counter = Counter::new();
        let first = counter.issue(NOW).unwrap_or_default();
        counter.reserve();
        assert_eq!(counter.issue(NOW), Ok(first + RESERVE));
    }

    #[test]
    fn exhaustion_is_an_error_that_changes_nothing() {
        let mut counter = started(MAX_TOKEN - 1);
        assert_eq!(
            counter.issue(NOW),
            Err(Exhausted),
            "the reserve does not fit"
        );
        assert_eq!(counter.last(), MAX_TOKEN - 1);
        counter.reserve_pending = false;
        assert_eq!(counter.issue(NOW), Ok(MAX_TOKEN));
        assert_eq!(counter.issue(NOW), Err(Exhausted));
        assert_eq!(
            Counter::new().issue(u64::MAX),
            Err(Exhausted),
            "a clock at the end of time"
        );
    }
}
