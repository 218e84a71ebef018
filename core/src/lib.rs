//! leasehold-core: every rule of leasehold's locks, with no Redis in it.
//!
//! The `lock` Redis module (`src/` of this repository) is a shell around this crate: it parses
//! a command, calls one entry point of [`machine`] with the lock's value, the waiters' queues,
//! the fencing counter and the time, and carries out the [`outcome::Outcome`] it gets back —
//! key writes, effects for replicas and the AOF, keyspace events, answers to blocked clients,
//! timers. Nothing here calls back into the shell, so every rule is tested without a server,
//! and the compiler keeps it that way: this crate does not depend on `redis-module`.
//!
//! Where each rule lives:
//! - [`args`]: every command's arguments, parsed and checked from the bytes sent;
//! - [`lock`]: what a request does to a lock (exclusive, shared, limits, re-entry, upgrade and
//!   downgrade, release, renewal), with [`holders`] (a shared lock's holders, indexed by
//!   owner, deadline and token; [`heap`] orders their deadlines) and [`owner`];
//! - [`fence`]: the fencing-token counter, and why its tokens never go back;
//! - [`fenced`]: fences, which refuse a write with a token smaller than one that wrote;
//! - [`queue`]: the waiters of each lock, in arrival order;
//! - [`packed`]: the binary form of a holding in the effects sent to replicas and the AOF;
//! - [`saved`]: a lock's form in an RDB file or a `DUMP` payload, and the checks a lock read
//!   from outside passes;
//! - [`insync`]: the in-sync replica set: which replicas a write must reach before it counts,
//!   and which may be promoted;
//! - [`deployment`]: what the module learns of the Sentinels or the Redis Cluster it runs in,
//!   and how long a failover there takes — the length of the in-sync set's leases;
//! - [`session`]: sessions, which end their holdings soon after their connection closes;
//! - [`horizon`]: how far the leases a master granted reach, so that a master back without its
//!   data after a crash grants nothing a holder may still count on;
//! - [`machine`]: one entry point per event — the FIFO hand-over to waiters, lease ends,
//!   promotions' effects on tokens — returning an [`outcome::Outcome`].

#![warn(missing_docs)]
// Safe Rust only: the fuzz targets (fuzz/) run without a memory sanitizer.
#![forbid(unsafe_code)]
// A panic would abort the Redis server that runs this code.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod args;
pub mod deployment;
pub mod election;
pub mod fence;
pub mod fenced;
pub mod heap;
pub mod holders;
pub mod horizon;
pub mod insync;
pub mod lock;
pub mod machine;
pub mod outcome;
pub mod owner;
pub mod packed;
pub mod queue;
pub mod saved;
pub mod session;
