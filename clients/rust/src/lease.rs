//! How long a holder counts on a lease: its TTL less a clock drift allowance of 1% and 2 ms —
//! the drift factor of the Redlock algorithm (Redis's distributed-lock description). The
//! server's clock may run a little faster than the client's, and a grant handed over after a
//! wait was made a little before its reply came; a holder that counts on its lease to the
//! last millisecond could still be writing when the server hands the lock on.

use std::time::Duration;

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
