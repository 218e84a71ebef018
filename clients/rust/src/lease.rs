//! How long a holder counts on a lease: its TTL less a clock drift allowance of 1% and 2 ms —
//! the drift factor of the Redlock algorithm (Redis's distributed-lock description). The
//! server's clock may run a little faster than the client's, and a grant handed over after a
//! wait was made a little before its reply came; a holder that counts on its lease to the
//! last millisecond could still be writing when the server hands the lock on. A [`Lease`] is
//! the end of the one a holder counts on, moved by the renewals that count.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Redlock's clock drift factor: the lease counts as `ttl × 0.01 + 2 ms` shorter.
pub const DRIFT_FACTOR: f64 = 0.01;

/// The drift allowance for a lease of `ttl`.
pub(crate) fn drift(ttl: Duration) -> Duration {
    ttl.mul_f64(DRIFT_FACTOR) + Duration::from_millis(2)
}

/// How long a lease of `ttl` counts for the holder, from when it began: `ttl` less
/// [`drift`] (nothing for a lease shorter than that).
pub(crate) fn counted(ttl: Duration) -> Duration {
    ttl.saturating_sub(drift(ttl))
}

/// When the lease the holder counts on ends: from the grant, then from the last renewal the
/// replicas acknowledged. Shared by the guard, its watchdog and the client's session.
pub(crate) struct Lease(Mutex<Instant>);

impl Lease {
    /// A lease of `ttl` that began at `granted`: it counts until `granted` plus [`counted`].
    pub(crate) fn new(granted: Instant, ttl: Duration) -> Self {
        Self(Mutex::new(granted + counted(ttl)))
    }

    /// The end of the lease, on the client's clock.
    pub(crate) fn end(&self) -> Instant {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A renewal sent at `sent` for `ttl` counts (less the drift allowance, [`counted`]).
    pub(crate) fn renewed(&self, sent: Instant, ttl: Duration) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = sent + counted(ttl);
    }

    /// A renewal sent at `sent` for `ttl` did not count, but the master may have made it: a
    /// `ttl` shorter than what was left shortened the lease there, so the holder counts on no
    /// more than that either.
    pub(crate) fn unsure(&self, sent: Instant, ttl: Duration) {
        let mut end = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *end = (*end).min(sent + counted(ttl));
    }
}
