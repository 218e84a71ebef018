//! The counters a user would graph, and the events that move them: `INFO lock` shows them
//! ([`crate::info`]). Every counter counts since the server started. A rising
//! [`EXPIRED_LEASES`] means holders outlive their TTL: their work takes longer than the lease,
//! and only fencing keeps it safe.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use leasehold_core::outcome::Counts;

/// One counter of the `lock_stats` section.
pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    fn add(&self, count: u32) {
        if count > 0 {
            self.0.fetch_add(u64::from(count), Ordering::Relaxed);
        }
    }

    /// Its count since the server started.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// New holdings granted (a new fencing token each), directly or by hand-over.
pub static ACQUISITIONS: Counter = Counter::new();
/// Sets granted by `LOCK.MACQUIRE` (directly or by hand-over) with a new fencing token; each
/// also counts once in [`ACQUISITIONS`].
pub static MULTI_ACQUISITIONS: Counter = Counter::new();
/// `LOCK.ACQUIRE` and `LOCK.MACQUIRE` calls that found the lock (a set: any of its locks) busy
/// (then waited or got null).
pub static CONTENDED: Counter = Counter::new();
/// Successful `LOCK.RELEASE` calls.
pub static RELEASES: Counter = Counter::new();
/// Successful `LOCK.RENEW` calls.
pub static RENEWALS: Counter = Counter::new();
/// Locks handed to a waiting client.
pub static HANDOVERS: Counter = Counter::new();
/// Leases that ended by expiry rather than by release: a shared holder's, ended by the module,
/// or a lock key's, expired by Redis.
pub static EXPIRED_LEASES: Counter = Counter::new();

/// Sessions ended because their connection closed and their grace passed.
pub static SESSIONS_EXPIRED: Counter = Counter::new();
/// Holdings released by sessions that ended (by their grace or `LOCK.SESSION CLOSE`).
pub static SESSION_RELEASES: Counter = Counter::new();

/// A session ended because its grace passed.
pub fn session_expired() {
    SESSIONS_EXPIRED.add(1);
}

/// An ended session released `count` holdings.
pub fn sessions_released(count: u32) {
    SESSION_RELEASES.add(count);
}

/// Adds what one event did to the counters.
pub fn count(counts: &Counts) {
    ACQUISITIONS.add(counts.acquisitions);
    MULTI_ACQUISITIONS.add(counts.multi_acquisitions);
    CONTENDED.add(counts.contended);
    RELEASES.add(counts.releases);
    RENEWALS.add(counts.renewals);
    HANDOVERS.add(counts.handovers);
    EXPIRED_LEASES.add(counts.expired_leases);
}

/// The lock key Redis removed last, as (database, name): Redis tells a data type which key it
/// unlinks, then publishes why (`expired`, `del`, ...) for that same key.
static UNLINKED: Mutex<Option<(i32, Vec<u8>)>> = Mutex::new(None);

/// Redis is removing the lock key `key` of `db` from the keyspace.
pub fn lock_unlinked(db: i32, key: &[u8]) {
    *unlinked() = Some((db, key.to_vec()));
}

/// Redis published why it removed `key` of `db`: an `expired` lock key is an expired lease.
pub fn key_removed(db: i32, key: &[u8], event: &str) {
    let last = unlinked().take();
    if event == "expired"
        && last.is_some_and(|(unlinked_db, name)| unlinked_db == db && name == key)
    {
        EXPIRED_LEASES.add(1);
    }
}

/// The module deleted a lock key itself, which Redis publishes nothing about.
pub fn forget_unlinked() {
    unlinked().take();
}

fn unlinked() -> MutexGuard<'static, Option<(i32, Vec<u8>)>> {
    UNLINKED.lock().unwrap_or_else(PoisonError::into_inner)
}
