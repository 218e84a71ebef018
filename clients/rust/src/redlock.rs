//! Redlock over N independent masters, with fencing tokens that never go backwards.
//!
//! # The protocol
//! To acquire, the client sends `LOCK.ACQUIRE key owner ttl NOSYNC` (no `WAIT`; `NOSYNC`: a
//! node replies at once, not once its replicas have the grant) to every node at once, each with
//! a short timeout. It has the lock if a majority granted it within the
//! validity time: `ttl - elapsed - (ttl × drift factor + 2 ms)` still positive (Redis's
//! Redlock description, with its default drift factor of 0.01). Then:
//!
//! 1. `T` = the largest token of the nodes that granted it;
//! 2. `LOCK.RAISE key owner T` on every node that granted it: each raises its holding's token
//!    and its own counter to at least `T`;
//! 3. `T` goes to the caller only when a majority confirmed the raise, still within the
//!    validity time. Otherwise the client releases everywhere and reports failure.
//!
//! Renewal and release go to every node; renewal needs a majority within the validity time,
//! and so does the watchdog. A renewal refused by a majority is a lost lock, never taken back.
//!
//! # Why `T` is larger than every earlier holder's token
//! Kleppmann's objection to Redlock was that it has no fencing tokens; and the maximum of the
//! quorum's tokens alone goes backwards: a later quorum can miss the node that gave the earlier
//! maximum. With the raise, take an earlier holder whose token `T1` a majority `M1` confirmed,
//! and a later holder whose majority `M2` granted it. Every two majorities share a node `n`.
//! `n` raised its counter to `T1` while the earlier holder held the lock there (`LOCK.RAISE`
//! acts on a current holding only); the later holder could be granted `n` only after that
//! holding ended; and `n`'s counter never goes back (the module's guarantee, across restarts
//! and failovers). So `n` granted the later holder a token above `T1`, and `T2`, the maximum
//! over `M2`, is above it too.
//!
//! # What this rests on
//! - Redlock's own assumption that the nodes' clocks run at about the same rate: a lease
//!   measured by the client (minus the drift allowance) ends before the nodes' do.
//! - A node restarted without persistence issues its first tokens from its clock floor plus
//!   the module's reserve. That is above a token raised on it before if it stays down longer
//!   than the clock skew allowed to `LOCK.RAISE` (`lock.max-clock-skew-ms`, 10 s by default) —
//!   the "delayed restart" Redlock asks for anyway.
//! - A raise carries a token from another node's clock, so a node accepts it only within
//!   `lock.max-clock-skew-ms` of what its own clock allows; nodes whose clocks differ by more
//!   refuse the raise, and the acquire fails rather than hand out an unconfirmed token.
//!
//! Mutual exclusion is Redlock's, with its known limits (a paused client, a node restarted
//! without persistence too early); the token is what keeps a fenced resource safe through them.

use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::{Guard, Holding, Keeping};
use crate::held::Mode;
pub use crate::lease::DRIFT_FACTOR;
use crate::owner::new_owner;
use crate::quorum::Quorum;

/// Independent masters (not replicas of each other) with the leasehold module.
///
/// ```no_run
/// # async fn example() -> leasehold_client::Result<()> {
/// use std::time::Duration;
/// use leasehold_client::{Client, Redlock};
///
/// let mut nodes = Vec::new();
/// for port in [7001, 7002, 7003, 7004, 7005] {
///     nodes.push(Client::open(&format!("redis://127.0.0.1:{port}")).await?);
/// }
/// let redlock = Redlock::new(nodes)?;
/// if let Some(guard) = redlock.lock("payment:9").try_acquire(Duration::from_secs(10)).await? {
///     let token = guard.token(); // larger than every earlier holder's, on any quorum
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redlock {
    nodes: Vec<Client>,
}

impl Redlock {
    /// Redlock over `nodes`: an odd number, at least 3.
    ///
    /// # Errors
    /// [`Error::Nodes`] for another number of nodes.
    pub fn new(nodes: Vec<Client>) -> Result<Self> {
        if nodes.len() < 3 || nodes.len().is_multiple_of(2) {
            return Err(Error::Nodes(nodes.len()));
        }
        Ok(Self { nodes })
    }

    /// A lock named `name` on every node, a new owner per acquire (as for [`crate::Lock`]).
    #[must_use]
    pub fn lock(&self, name: &str) -> RedlockLock {
        RedlockLock {
            quorum: Quorum {
                nodes: self.nodes.clone(),
                name: name.to_owned(),
                owner: String::new(),
                node_timeout: None,
            },
            owner: None,
            backoff: Backoff::default(),
            keeping: Keeping::default(),
        }
    }
}

/// A Redlock on one name; every try is a new owner, kept by the guard it returns, so a handle
/// shared by several tasks excludes them.
#[derive(Clone)]
pub struct RedlockLock {
    /// The nodes, name and timeout; its owner is set for each try.
    quorum: Quorum,
    /// The owner every try uses, if one was set.
    owner: Option<String>,
    backoff: Backoff,
    keeping: Keeping,
}

impl RedlockLock {
    /// How long each node may take to answer (default: a tenth of the lease, 5 ms to 500 ms).
    #[must_use]
    pub fn with_node_timeout(mut self, timeout: Duration) -> Self {
        self.quorum.node_timeout = Some(timeout);
        self
    }

    /// The backoff between tries of [`RedlockLock::acquire_timeout`].
    #[must_use]
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Renews on a majority every third of the lease while the guard lives.
    #[must_use]
    pub fn with_watchdog(mut self, watchdog: bool) -> Self {
        self.keeping.watchdog = watchdog;
        self
    }

    /// With the watchdog, ends the holding at most `max_hold` after it began.
    #[must_use]
    pub fn with_max_hold(mut self, max_hold: Duration) -> Self {
        self.keeping.max_hold = Some(max_hold);
        self
    }

    /// Tries always as `owner`, with the hazard [`crate::Lock::with_owner`] tells.
    #[must_use]
    pub fn with_owner(mut self, owner: &str) -> Self {
        self.owner = Some(owner.to_owned());
        self
    }

    /// The owner every try uses, if one was set; `None`: a new one per try
    /// ([`Guard::owner`] tells it).
    #[must_use]
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// One round of the protocol: the lock with its quorum token, or `None`.
    ///
    /// # Errors
    /// [`Error::Lease`] for a lease shorter than the drift allowance, or
    /// [`Error::ModuleTooOld`] when a node's lock module is older than 0.7.0 (it does not know
    /// `NOSYNC`, which Redlock's grants and renewals carry: a node's replicas are no part of
    /// Redlock).
    pub async fn try_acquire(&self, ttl: Duration) -> Result<Option<Guard>> {
        let started = Instant::now();
        let quorum = &Quorum {
            owner: self.owner.clone().unwrap_or_else(new_owner),
            ..self.quorum.clone()
        };
        let tokens = quorum.acquire(ttl).await?;
        let granted: Vec<(usize, u64)> = tokens
            .iter()
            .enumerate()
            .filter_map(|(node, token)| token.map(|token| (node, token)))
            .collect();
        let valid = |quorum: &Quorum| quorum.still_valid(started, ttl);
        if granted.len() >= quorum.majority() && valid(quorum) {
            let highest = granted.iter().map(|(_, token)| *token).max().unwrap_or(0);
            let nodes: Vec<usize> = granted.iter().map(|(node, _)| *node).collect();
            if quorum.raise(&nodes, highest).await >= quorum.majority() && valid(quorum) {
                let holding = Holding::Quorum(quorum.clone());
                return Ok(Some(Guard::start(
                    holding,
                    Mode::Exclusive,
                    vec![highest],
                    (ttl, started),
                    self.keeping,
                    None,
                )));
            }
        }
        quorum.release().await;
        Ok(None)
    }

    /// Tries [`RedlockLock::try_acquire`] until it succeeds or `wait` passes, with backoff
    /// and full jitter between tries.
    ///
    /// # Errors
    /// As [`RedlockLock::try_acquire`].
    pub async fn acquire_timeout(&self, ttl: Duration, wait: Duration) -> Result<Option<Guard>> {
        let deadline = Instant::now() + wait;
        let mut attempt = 0;
        loop {
            if let Some(guard) = self.try_acquire(ttl).await? {
                return Ok(Some(guard));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            tokio::time::sleep(self.backoff.delay(attempt).min(left)).await;
            attempt += 1;
        }
    }
}
