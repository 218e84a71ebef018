//! Elections: what an observer (`LOCK.OBSERVE`) is told.
//!
//! An election is a lock whose holder is its leader ([`Lock::leader`]): a candidate campaigns
//! as it acquires (`LOCK.CAMPAIGN`, in the lock's fair queue), its term's epoch is the
//! holding's fencing token, and it proclaims a value kept beside its owner
//! ([`crate::owner::Owner::value`]). Everything else — leases, sessions, the hand-over to the
//! next candidate, replication and persistence — is the lock's own.
//!
//! An observer passes what it saw last and is told the next state that differs from it. Every
//! change of leader passes through a vacancy: a term ends before the next begins, even when the
//! next candidate is granted in the same step. So an observer that saw term `e` while another
//! term now leads is told first that nobody leads, and the new leader on its next call. It
//! may miss whole terms between two calls, never the order: etcd's `Observe` reports leaders
//! only, never a vacancy (google/trillian#1387), which this rule is here to avoid.

use crate::lock::{Holding, Lock};

/// What an observer saw last (`LOCK.OBSERVE ... LAST epoch value`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen<'a> {
    /// Nobody led (`LAST 0 ...`).
    Nobody,
    /// The term `epoch` led, proclaiming `value`.
    Leader {
        /// The term's epoch.
        epoch: u64,
        /// The value it proclaimed.
        value: &'a [u8],
    },
}

impl<'a> Seen<'a> {
    /// What `LAST epoch value` says: epoch 0 is nobody (tokens start at 1), whatever the value.
    #[must_use]
    pub fn new(epoch: u64, value: &'a [u8]) -> Self {
        match epoch {
            0 => Self::Nobody,
            epoch => Self::Leader { epoch, value },
        }
    }
}

/// Who leads an election now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leadership<'a> {
    /// Nobody: the lock is free, or held shared (a shared lock has no single leader).
    Nobody,
    /// This holding's owner, in the term of its fencing token.
    Leader(&'a Holding),
}

impl<'a> Leadership<'a> {
    /// Who leads `lock` now.
    #[must_use]
    pub fn of(lock: Option<&'a Lock>) -> Self {
        lock.and_then(Lock::leader)
            .map_or(Self::Nobody, Self::Leader)
    }
}

/// What an observer that saw `seen` (`None`: it passed nothing) is told now that `now` leads;
/// `None` while that is what it saw (it waits on).
#[must_use]
pub fn observe<'a>(seen: Option<Seen>, now: Leadership<'a>) -> Option<Leadership<'a>> {
    let Some(seen) = seen else {
        return Some(now);
    };
    match (seen, now) {
        (Seen::Nobody, Leadership::Nobody) => None,
        (Seen::Leader { epoch, value }, Leadership::Leader(leader)) if leader.token == epoch => {
            (leader.owner.value() != value).then_some(now)
        }
        // Its term ended before any later one began.
        (Seen::Leader { .. }, _) => Some(Leadership::Nobody),
        (Seen::Nobody, Leadership::Leader(_)) => Some(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::Mode;

    fn leader(epoch: u64, value: &[u8]) -> Lock {
        let mut lock = Lock::new(b"candidate", epoch, 1, Mode::Exclusive, 0);
        lock.proclaim(epoch, value);
        lock
    }

    #[test]
    fn an_observer_that_passes_nothing_learns_the_state_at_once() {
        assert_eq!(observe(None, Leadership::Nobody), Some(Leadership::Nobody));
        let lock = leader(5, b"10.0.0.1");
        let now = Leadership::of(Some(&lock));
        assert_eq!(observe(None, now), Some(now));
    }

    #[test]
    fn the_same_term_and_value_is_no_change() {
        let lock = leader(5, b"a");
        let now = Leadership::of(Some(&lock));
        let seen = Seen::Leader {
            epoch: 5,
            value: b"a",
        };
        assert_eq!(observe(Some(seen), now), None);
        assert_eq!(observe(Some(Seen::Nobody), Leadership::Nobody), None);
    }

    #[test]
    fn a_new_value_in_the_same_term_is_told() {
        let lock = leader(5, b"b");
        let now = Leadership::of(Some(&lock));
        let seen = Seen::Leader {
            epoch: 5,
            value: b"a",
        };
        assert_eq!(observe(Some(seen), now), Some(now));
    }

    #[test]
    fn a_new_term_is_told_after_the_vacancy_before_it() {
        let lock = leader(9, b"b");
        let now = Leadership::of(Some(&lock));
        let seen = Seen::Leader {
            epoch: 5,
            value: b"a",
        };
        assert_eq!(observe(Some(seen), now), Some(Leadership::Nobody));
        assert_eq!(observe(Some(Seen::Nobody), now), Some(now));
        let seen = Seen::Leader {
            epoch: 5,
            value: b"a",
        };
        assert_eq!(
            observe(Some(seen), Leadership::Nobody),
            Some(Leadership::Nobody)
        );
    }

    #[test]
    fn a_lock_held_shared_has_no_leader() {
        let lock = Lock::new(b"reader", 3, 1, Mode::Shared(None), 1_000);
        assert_eq!(Leadership::of(Some(&lock)), Leadership::Nobody);
    }
}
