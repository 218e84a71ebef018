//! Locks, read-write locks, semaphores and Redlock on the leasehold Redis module (module
//! `lock`, the `LOCK.*` commands), for Tokio.
//!
//! The module runs owner checks, leases, fair waiting and fencing tokens inside the server;
//! this crate is the loop users write around them, written once:
//!
//! - acquire with a wait that blocks in the server, on a dedicated connection borrowed from a
//!   pool ([`ClientOptions`]) whose timeout is longer than the wait, recovering from a lost
//!   reply by asking again with the same owner ([`Lock::acquire_timeout`]);
//! - grants and renewals synced to the master's in-sync replicas before they count: each
//!   carries `SYNC`, and the server replies once its in-sync set has it, or refuses it
//!   ([`Error::NotReplicated`]; [`Sync`], [`sync`]) — the lock module 0.7.0 or later is needed
//!   ([`Error::ModuleTooOld`]);
//! - a [`Guard`] with the fencing token, a watchdog that renews the lease every third of it,
//!   tries again soon when a renewal does not count (at once on a fresh connection after a
//!   blip) and stops for good on release, drop or refusal, a [`Guard::lost`] signal, and
//!   release on every path;
//! - every holding tied to the client's session (`LOCK.SESSION`, on by default:
//!   [`ClientOptions::sessions`]), kept by a heartbeat on a connection of its own, each pooled
//!   connection bound to it once (`LOCK.SESSION USE`): when the process dies or is cut off for
//!   longer than the session's grace, the server hands its locks on then, not after their
//!   leases — and the holder is told it lost them first;
//! - retries with exponential backoff and full jitter ([`Backoff`]) where waiting in the server
//!   is unwanted;
//! - elections ([`Election`]): a campaign is the lock's acquire with a value, so the term it
//!   wins ([`Leadership`]) is kept as a guard is, its epoch the fencing token; who leads is
//!   told at once ([`Election::leader`]) or followed, vacancies included ([`Observer`]);
//! - [`Redlock`] over independent masters, whose tokens never go backwards (`LOCK.RAISE`; the
//!   proof is in [`redlock`]).
//!
//! Times are [`Duration`](std::time::Duration)s, sent to the server in whole milliseconds.
//!
//! ```no_run
//! # async fn example() -> leasehold_client::Result<()> {
//! use std::time::Duration;
//! use leasehold_client::{Client, Lock};
//!
//! let client = Client::open("redis://127.0.0.1:6379").await?;
//! let lock = Lock::new(&client, "cron:nightly").with_watchdog(true);
//! let guard = lock.acquire(Duration::from_secs(10)).await?;
//! tokio::select! {
//!     () = guard.lost() => { /* the lease was lost: stop, the next holder has a larger token */ }
//!     () = async { /* the work, sending guard.token() with every write */ } => {}
//! }
//! guard.release().await?;
//! # Ok(()) }
//! ```

mod backoff;
mod batch;
mod binding;
mod client;
mod election;
mod error;
mod guard;
mod held;
mod lease;
mod lock;
mod masters;
mod owner;
mod pool;
mod quorum;
pub mod redlock;
mod session;
pub mod sync;

pub use backoff::Backoff;
pub use client::Client;
pub use election::{Election, LeaderState, Leadership, Observer};
pub use error::{Error, Result};
pub use guard::{Guard, Lost};
pub use lock::{Lock, ReadWriteLock, Semaphore, Waiting};
pub use pool::ClientOptions;
pub use redlock::{Redlock, RedlockLock};
pub use sync::Sync;
