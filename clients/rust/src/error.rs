//! What can go wrong.

use thiserror::Error;

/// An error of the client: from Redis, or from how it was asked to work.
#[derive(Debug, Error)]
pub enum Error {
    /// Redis replied with an error, or the connection failed. After a failed wait the client has
    /// already tried to find out whether it got the lock, and released it if it could not tell
    /// (see [`crate::Lock::acquire_timeout`]).
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    /// Redlock needs an odd number of independent masters, at least 3.
    #[error("Redlock needs an odd number of at least 3 independent masters, not {0}")]
    Nodes(usize),
    /// A lease must be at least 1 ms, and a Redlock lease long enough for the clock drift
    /// allowance (ttl × drift factor + 2 ms).
    #[error("the lease of {0:?} is too short")]
    Lease(std::time::Duration),
    /// A write did not count ([`crate::Sync`]). (For a guarded or fenced command, it ran on the
    /// master all the same: a failover may lose its write.) The master refused it (`NOREPLICAS`): it has
    /// fewer in-sync replicas than its `lock.min-insync-replicas`, not every in-sync replica
    /// acknowledged it within its `lock.sync-timeout-ms`, or it is no longer a master. Or the
    /// client found it short: a fixed count's `WAIT` counted too few replicas, the master did not
    /// fsync its AOF, no sync connection was free within the timeout (nothing was sent), or the
    /// replicas acknowledged a grant only after its lease ended. For a grant, nothing is left
    /// behind — released before the error came, by the client (owner-checked) or, for a
    /// wait's hand-over, by the server — distinct from "busy": the lock was free, the replicas were
    /// not there. For a renewal, it does not count: the holder's lease ends as the last synced
    /// one did ([`crate::Guard::lease_end`]).
    #[error("not synced to the replicas: {message}")]
    NotReplicated {
        /// Why, e.g. "the master has 1 in-sync replicas, fewer than
        /// lock.min-insync-replicas (2)": for the server's refusal, its text up to `; `.
        reason: String,
        /// The whole of it: for the server's refusal, its error as it replied it (`NOREPLICAS
        /// ...; the grant was released`, `...; the renewal does not count: the lease before it
        /// does`); otherwise the reason.
        message: String,
    },
    /// The server answered `SYNC` or `NOSYNC` on a grant or renewal with a syntax error: its
    /// lock module is older than 0.7.0, which syncs writes itself. This client needs the lock
    /// module 0.7.0 or later; nothing was done.
    #[error(
        "leasehold-client needs the lock module 0.7.0 or later, with synced writes (SYNC and \
         NOSYNC); the server answered: {reply}"
    )]
    ModuleTooOld {
        /// What the server answered (`ERR syntax error`).
        reply: String,
    },
    /// The client's session ([`crate::ClientOptions::sessions`]) ran past its deadline — no
    /// heartbeat confirmed for its grace — before a grant's reply came: the server may end the
    /// session and hand the lock on at any moment, so the grant cannot be counted on. The
    /// client released it (owner-checked); an acquire with a wait budget left tries again
    /// within it.
    #[error("the client's session ran past its deadline before the grant came; it was released")]
    SessionExpired,
    /// A guarded command ([`crate::Guard::guard`], `LOCK.GUARD`) was refused: the lock is free,
    /// held by another owner, or held by this owner with another fencing token (the holding
    /// was lost and taken again) — the server's words say which. The command did not run.
    #[error("{message}")]
    NotHeld {
        /// The server's refusal as it replied it (`NOTHELD the lock is held by another owner;
        /// the command did not run`).
        message: String,
    },
    /// A fenced command ([`crate::Guard::fenced`], [`crate::Client::fenced`], `LOCK.FENCED`) was
    /// refused: its token is below the largest that already ran a command through the fence —
    /// a newer holder wrote first. The command did not run.
    #[error("{message}")]
    Stale {
        /// The token the command came with.
        token: u64,
        /// The largest token that ran a command through the fence.
        largest: u64,
        /// The server's refusal as it replied it (`STALE token 7 is below 9, ...`).
        message: String,
    },
    /// Re-entering, downgrading and upgrading work on a lock of one server, not on a Redlock
    /// holding.
    #[error("{0} is not supported on a Redlock holding")]
    NotOnRedlock(&'static str),
    /// Re-entering, downgrading and upgrading work on one lock, not on a set taken with
    /// [`crate::Lock::multi`].
    #[error("{0} is not supported on a set of locks")]
    NotOnSet(&'static str),
}

/// The crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// [`Error::NotReplicated`] for a refusal the client made itself: its message is `reason`.
    pub(crate) fn not_replicated(reason: impl Into<String>) -> Self {
        let reason = reason.into();
        Self::NotReplicated {
            message: reason.clone(),
            reason,
        }
    }
}
