//! The fencing-token counter: one per server, persisted, replicated, and never going back.
//!
//! # Design
//! A token is a hybrid of a counter and the wall clock (the idea of hybrid logical clocks,
//! Kulkarni et al., 2014). While a server's clock reads `m` (unix ms), its *floor* is
//! `m × 1000` ([`TOKENS_PER_MS`]) and its *ceiling* is `(m + 1) × 1000 + RESERVE - 1`
//! ([`ceiling`]). The counter (`last`, the largest token issued, loaded or received) is saved
//! as RDB auxiliary data, carried by every `LOCK.APPLY` effect in the AOF and the replication
//! stream, and raised by every lock that is loaded. The next token is
//!
//! - `max(last + 1, floor)`, or
//! - `max(last + 1, floor + RESERVE)` for the first token after the module starts or the
//!   server is promoted to master, and for every token while the reserve is *held*: from when
//!   one of this master's replicas goes offline until it is a replica itself
//!   ([`Counter::hold_reserve`]),
//!
//! and it is refused ([`Refused::AheadOfClock`], retry a few ms later) when it would pass the
//! ceiling.
//!
//! # Invariant
//! **Every token a server issues while its clock reads `m` is below `(m + 1) × 1000 + RESERVE`.**
//! [`Counter::issue`] checks it for every token, so it holds unconditionally; the price is that
//! a server issues at most 1000 tokens per ms of its clock beyond the `RESERVE` it may run
//! ahead (10^6 per second; Redis executes a few hundred thousand lock commands per second at
//! most), and that a counter received from a master whose clock is ahead of this server's
//! waits for this clock to catch up before issuing (at most the clock difference).
//!
//! # Why tokens never go backwards
//! Take a token `x` issued by server A while its clock read `a`, and a later token `y` issued
//! by server B (A itself, or another). If B's counter saw `x` — B issued it, loaded it from
//! RDB or AOF, or received it from its master — then `y ≥ last + 1 > x`. Otherwise B's state
//! lost `x`, so B started or was promoted after `x` was issued, with its clock reading `b` then;
//! B's first token since is at least `b × 1000 + RESERVE` and later ones are larger, while the
//! invariant gives `x < (a + 1) × 1000 + RESERVE`. (A master that Sentinel names master again
//! without a command it sees — an old master that came back, was not yet made a replica, and
//! whose `SLAVEOF NO ONE` was lost — counts as promoted at every token: it lost the replica that
//! was promoted in its place, so it holds the reserve.) So `y > x` whenever `b ≥ a + 1`:
//! **the start or promotion that lost `x` happened at least 1 ms later, by B's clock, than `x`
//! by A's clock.** That is the only clock assumption, and it comes in two cases:
//! - A restart of the same server (with full, stale or no state, any number of times, at any
//!   spacing): its clock must not step back across the restart, which takes more than 1 ms.
//! - A promotion of a replica B that missed `x`: B's clock may be behind A's by less than the
//!   time from `x` to the promotion. With Sentinel that time is at least
//!   `down-after-milliseconds` (the master must be unreachable that long), in Redis Cluster
//!   `cluster-node-timeout`. A replica that saw every token (the `FAILOVER` command waits for
//!   it) needs no clock condition; a replica whose clock is ahead never does.
//!
//! Nothing stacks: the first token after a start is `max(last + 1, floor + RESERVE)`, not
//! `last + RESERVE`, so however many restarts or promotions come close together the counter
//! stays below the ceiling, and a server that lost everything still comes back above every
//! token issued before. The argument also assumes one master at a time: an old master that
//! keeps granting after a replica was promoted (a split brain) issues tokens the new master
//! never saw, from a clock the promotion did not wait for (docs/guarantees.md, "Split brain").
//!
//! Every token is below 2^53, so JSON and JavaScript clients read it exactly: the ceiling
//! reaches 2^53 in the year 2255, whatever the number of restarts.

#[cfg(test)]
mod simulation;

/// Largest token that is ever issued: 2^53 - 1, JavaScript's `Number.MAX_SAFE_INTEGER`.
pub const MAX_TOKEN: u64 = (1 << 53) - 1;

/// Tokens per millisecond of wall-clock time in the floor: a token divided by 1000 reads as
/// the unix time in ms at which it was issued (or, within [`RESERVE`], a little earlier).
pub const TOKENS_PER_MS: u64 = 1000;

/// How far the counter may run ahead of the clock floor, and where the first token after a
/// start or a promotion lands: 10^9 tokens, as many as the floor advances in 1000 s.
pub const RESERVE: u64 = 1_000_000_000;

/// Why no token was issued; nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The next token would pass the ceiling of this server's clock: more than 1000 tokens per
    /// ms were issued beyond the reserve, or the counter came from a server whose clock is
    /// ahead. The ceiling passes it after `retry_in_ms` ms.
    AheadOfClock {
        /// How long until the token can be issued, in ms (at least 1).
        retry_in_ms: u64,
    },
    /// The server started less than its restart delay ago ([`Counter::delay_until`]): no new
    /// holding begins for `retry_in_ms` ms.
    Starting {
        /// How long until the token can be issued, in ms (at least 1).
        retry_in_ms: u64,
        /// Why the start is delayed.
        why: Delay,
    },
    /// The token space is used up: the next token would reach 2^53.
    Exhausted,
}

/// The counter behind every fencing token of this server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// The largest token issued, loaded or received so far.
    last: u64,
    /// True until the first token after a start or promotion is issued.
    reserve_pending: bool,
    /// True while every token lands at least a reserve above the clock ([`Self::hold_reserve`]).
    reserve_held: bool,
    /// No token is issued before this unix time in ms (a delayed restart); 0: none.
    not_before_ms: u64,
    /// Why.
    delay: Delay,
}

/// Why a start issues no token for a while ([`Counter::delay_until`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Delay {
    /// `lock.restart-delay-ms`.
    #[default]
    Configured,
    /// The server came back without the data of leases it granted, which may still run
    /// ([`crate::horizon`]).
    LostLeases,
}

/// The largest token a server may issue while its clock reads `now_ms` (see the invariant
/// above): `(now_ms + 1) × 1000 + RESERVE - 1`.
#[must_use]
pub const fn ceiling(now_ms: u64) -> u64 {
    now_ms
        .saturating_add(1)
        .saturating_mul(TOKENS_PER_MS)
        .saturating_add(RESERVE - 1)
}

/// The largest token `LOCK.RAISE` accepts while this server's clock reads `now_ms`: the
/// [`ceiling`] of a clock `skew_ms` ahead of this one, the most a server whose clock is that far
/// ahead could have issued. Raising the counter there keeps the invariant within the skew: this
/// server issues nothing above it until its own clock has caught up.
#[must_use]
pub const fn raise_limit(now_ms: u64, skew_ms: u64) -> u64 {
    let limit = ceiling(now_ms.saturating_add(skew_ms));
    if limit < MAX_TOKEN { limit } else { MAX_TOKEN }
}

impl Counter {
    /// A counter for a server that just started: nothing seen, the reserve pending.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            last: 0,
            reserve_pending: true,
            reserve_held: false,
            not_before_ms: 0,
            delay: Delay::Configured,
        }
    }

    /// The token [`Self::issue`] would give at unix time `now_ms`, without issuing it.
    ///
    /// # Errors
    /// [`Refused`] as for [`Self::issue`].
    pub fn next(&self, now_ms: u64) -> Result<u64, Refused> {
        if now_ms < self.not_before_ms {
            let retry_in_ms = self.not_before_ms - now_ms;
            return Err(Refused::Starting {
                retry_in_ms,
                why: self.delay,
            });
        }
        let floor = now_ms.saturating_mul(TOKENS_PER_MS);
        let lowest = if self.reserve_pending || self.reserve_held {
            floor.saturating_add(RESERVE)
        } else {
            floor
        };
        let next = self.last.saturating_add(1).max(lowest);
        if next > MAX_TOKEN {
            return Err(Refused::Exhausted);
        }
        let ceiling = ceiling(now_ms);
        if next > ceiling {
            let retry_in_ms = (next - ceiling).div_ceil(TOKENS_PER_MS);
            return Err(Refused::AheadOfClock { retry_in_ms });
        }
        Ok(next)
    }

    /// Issues the next token at unix time `now_ms`: larger than every token seen before, and
    /// within the ceiling of `now_ms`.
    ///
    /// # Errors
    /// [`Refused`] when the token would pass the ceiling or 2^53; nothing changes then.
    pub fn issue(&mut self, now_ms: u64) -> Result<u64, Refused> {
        let next = self.next(now_ms)?;
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

    /// Issues no token before unix time `not_before_ms`: the delayed restart of the Redlock
    /// algorithm (Kleppmann and antirez both discuss it), called when the module starts with
    /// `lock.restart-delay-ms`. A master that comes back without the last grants it
    /// acknowledged — no persistence, an older RDB, `appendfsync everysec` after a machine
    /// crash — before a failover then grants nothing until every lease it may have granted
    /// and lost has ended, if the delay is at least the longest lease; its replicas, which
    /// resync from it, cannot keep those grants for it.
    pub fn delay_until(&mut self, not_before_ms: u64, why: Delay) {
        self.not_before_ms = not_before_ms;
        self.delay = why;
    }

    /// Makes the next token at least floor + [`RESERVE`]: called when this server becomes a
    /// master, whose predecessor may have issued tokens that never reached it.
    pub fn reserve(&mut self) {
        self.reserve_pending = true;
    }

    /// With `held`, makes every token at least floor + [`RESERVE`], not only the next: called
    /// when a replica of this master goes offline, since it may have been promoted, and Sentinel
    /// may then name this server master again without a command it sees (Sentinel sends
    /// `SLAVEOF NO ONE` to an old master it promotes as it is, and takes its `role:master` as
    /// done even when that command was lost). Without, back to the next token only: called when
    /// this server becomes a replica. Tokens stay below the ceiling either way.
    pub fn hold_reserve(&mut self, held: bool) {
        self.reserve_held = held;
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
    fn a_delayed_start_issues_nothing_before_its_time() {
        let mut counter = Counter::new();
        counter.delay_until(NOW + 1_000, Delay::LostLeases);
        assert_eq!(
            counter.issue(NOW),
            Err(Refused::Starting {
                retry_in_ms: 1_000,
                why: Delay::LostLeases
            })
        );
        assert_eq!(
            counter.issue(NOW + 999),
            Err(Refused::Starting {
                retry_in_ms: 1,
                why: Delay::LostLeases
            })
        );
        assert_eq!(counter.last(), 0, "nothing changed");
        assert!(counter.issue(NOW + 1_000).is_ok());
    }

    #[test]
    fn first_token_after_start_lands_a_reserve_above_the_clock() {
        let mut counter = Counter::new();
        assert_eq!(counter.issue(NOW), Ok(NOW * TOKENS_PER_MS + RESERVE));
    }

    #[test]
    fn reserves_do_not_stack_over_restarts_close_together() {
        let mut counter = Counter::new();
        let first = counter.issue(NOW).unwrap_or_default();
        let mut restarted = started(first);
        assert_eq!(
            restarted.issue(NOW + 5),
            Ok((NOW + 5) * TOKENS_PER_MS + RESERVE),
            "the second start is 5 ms of floor above the first, not another reserve"
        );
        let second = restarted.issue(NOW + 6).unwrap_or_default();
        let after_losing_everything = Counter::new().issue(NOW + 7).unwrap_or_default();
        assert!(
            after_losing_everything > second,
            "a start with nothing still comes back above both"
        );
    }

    #[test]
    fn a_loaded_counter_is_continued_when_within_the_ceiling() {
        let loaded = NOW * TOKENS_PER_MS + RESERVE + 500;
        assert_eq!(started(loaded).issue(NOW), Ok(loaded + 1));
    }

    #[test]
    fn tokens_follow_the_clock_or_count_up_whichever_is_larger() {
        let mut counter = Counter::new();
        let first = counter.issue(NOW).unwrap_or_default();
        assert_eq!(counter.issue(NOW), Ok(first + 1));
        let later = NOW + 2 * RESERVE / TOKENS_PER_MS;
        assert_eq!(counter.issue(later), Ok(later * TOKENS_PER_MS));
        assert_eq!(
            counter.issue(later - 5),
            Ok(later * TOKENS_PER_MS + 1),
            "a clock that goes back does not take tokens back"
        );
    }

    #[test]
    fn at_most_a_thousand_tokens_per_ms_at_the_ceiling() {
        let mut counter = Counter::new();
        let issued = (0..2_000)
            .map_while(|_| counter.issue(NOW).ok())
            .collect::<Vec<_>>();
        assert_eq!(issued.len(), 1_000, "the first and 999 more in the same ms");
        assert_eq!(issued.last().copied(), Some(ceiling(NOW)));
        assert_eq!(
            counter.issue(NOW),
            Err(Refused::AheadOfClock { retry_in_ms: 1 })
        );
        assert_eq!(counter.last(), ceiling(NOW), "a refusal changes nothing");
        assert_eq!(counter.issue(NOW + 1), Ok(ceiling(NOW) + 1));
    }

    #[test]
    fn a_counter_ahead_of_this_clock_waits_for_it() {
        let from_a_faster_clock = ceiling(NOW + 2_500);
        let mut counter = started(from_a_faster_clock);
        assert_eq!(
            counter.next(NOW),
            Err(Refused::AheadOfClock { retry_in_ms: 2_501 })
        );
        assert_eq!(counter.issue(NOW + 2_501), Ok(from_a_faster_clock + 1));
    }

    #[test]
    fn observed_tokens_are_never_issued_again() {
        let mut counter = Counter::new();
        let first = counter.issue(NOW).unwrap_or_default();
        counter.observe(first + 10);
        counter.observe(3);
        assert_eq!(counter.last(), first + 10);
        assert_eq!(counter.issue(NOW + 1), Ok(first + 11));
    }

    #[test]
    fn promotion_lands_the_reserve_above_the_clock_again() {
        let mut counter = Counter::new();
        counter.issue(NOW).unwrap_or_default();
        let later = NOW + 3 * RESERVE / TOKENS_PER_MS;
        counter.issue(later).unwrap_or_default();
        counter.reserve();
        assert_eq!(
            counter.issue(later + 1),
            Ok((later + 1) * TOKENS_PER_MS + RESERVE)
        );
    }

    #[test]
    fn a_held_reserve_lands_every_token_above_the_clock_until_let_go() {
        let mut counter = Counter::new();
        let first = counter.issue(NOW).unwrap_or_default();
        assert_eq!(
            counter.issue(NOW + 5),
            Ok(first + 1),
            "the reserve was the first's only"
        );
        counter.hold_reserve(true);
        for later in [NOW + 10, NOW + 11] {
            assert_eq!(counter.issue(later), Ok(later * TOKENS_PER_MS + RESERVE));
        }
        assert_eq!(
            counter.issue(NOW + 11),
            Ok((NOW + 11) * TOKENS_PER_MS + RESERVE + 1),
            "within a ms, one above the last"
        );
        counter.hold_reserve(false);
        assert_eq!(
            counter.issue(NOW + 20),
            Ok((NOW + 11) * TOKENS_PER_MS + RESERVE + 2)
        );
    }

    #[test]
    fn a_raise_may_carry_the_counter_a_clock_skew_ahead_and_no_further() {
        assert_eq!(raise_limit(NOW, 0), ceiling(NOW));
        assert_eq!(raise_limit(NOW, 10_000), ceiling(NOW + 10_000));
        assert_eq!(raise_limit(u64::MAX, 10_000), MAX_TOKEN, "never past 2^53");
        let mut counter = started(raise_limit(NOW, 10_000));
        assert_eq!(
            counter.issue(NOW),
            Err(Refused::AheadOfClock {
                retry_in_ms: 10_001
            }),
            "its own next token waits until its clock's ceiling passes the raised one"
        );
    }

    #[test]
    fn exhaustion_is_an_error_that_changes_nothing() {
        let last_ms = (MAX_TOKEN - RESERVE) / TOKENS_PER_MS; // in the year 2255
        let mut counter = started(MAX_TOKEN - 1);
        counter.reserve_pending = false;
        assert_eq!(counter.issue(last_ms), Ok(MAX_TOKEN));
        assert_eq!(counter.issue(last_ms), Err(Refused::Exhausted));
        assert_eq!(counter.last(), MAX_TOKEN);
        assert_eq!(
            Counter::new().issue(last_ms + 1),
            Err(Refused::Exhausted),
            "a start after the reserve no longer fits"
        );
        assert_eq!(Counter::new().issue(u64::MAX), Err(Refused::Exhausted));
    }
}
