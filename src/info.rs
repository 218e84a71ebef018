//! The counters a user would graph, shown by `INFO lock` (section `lock_stats`), the in-sync
//! set (section `lock_insync`) and the sessions (section `lock_sessions`).
//!
//! Every counter counts since the server started. A rising `expired_leases` means holders
//! outlive their TTL: their work takes longer than the lease, and only fencing keeps it safe.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use leasehold_core::insync::Promotability;
use leasehold_core::outcome::Counts;
use redis_module::{InfoContext, RedisResult};
use redis_module_macros::info_command_handler;

use crate::insync;
use crate::replica_check;
use crate::state;

/// One counter of the `lock_stats` section.
struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    fn add(&self, count: u32) {
        if count > 0 {
            self.0.fetch_add(u64::from(count), Ordering::Relaxed);
        }
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// New holdings granted (a new fencing token each), directly or by hand-over.
static ACQUISITIONS: Counter = Counter::new();
/// Sets granted by `LOCK.MACQUIRE` (directly or by hand-over) with a new fencing token; each
/// also counts once in [`ACQUISITIONS`].
static MULTI_ACQUISITIONS: Counter = Counter::new();
/// `LOCK.ACQUIRE` and `LOCK.MACQUIRE` calls that found the lock (a set: any of its locks) busy
/// (then waited or got null).
static CONTENDED: Counter = Counter::new();
/// Successful `LOCK.RELEASE` calls.
static RELEASES: Counter = Counter::new();
/// Successful `LOCK.RENEW` calls.
static RENEWALS: Counter = Counter::new();
/// Locks handed to a waiting client.
static HANDOVERS: Counter = Counter::new();
/// Leases that ended by expiry rather than by release: a shared holder's, ended by the module,
/// or a lock key's, expired by Redis.
static EXPIRED_LEASES: Counter = Counter::new();

/// Sessions ended because their connection closed and their grace passed.
static SESSIONS_EXPIRED: Counter = Counter::new();
/// Holdings released by sessions that ended (by their grace or `LOCK.SESSION CLOSE`).
static SESSION_RELEASES: Counter = Counter::new();

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

#[info_command_handler]
fn lock_info(ctx: &InfoContext, _for_crash_report: bool) -> RedisResult<()> {
    let waiting = u64::try_from(state::waiters().total()).unwrap_or(u64::MAX);
    let builder = ctx
        .builder()
        .add_section("stats")
        .field("acquisitions", ACQUISITIONS.get())?
        .field("multi_acquisitions", MULTI_ACQUISITIONS.get())?
        .field("contended_acquisitions", CONTENDED.get())?
        .field("releases", RELEASES.get())?
        .field("renewals", RENEWALS.get())?
        .field("expired_leases", EXPIRED_LEASES.get())?
        .field("waiters", waiting)?
        .field("handovers", HANDOVERS.get())?
        .field("last_token", state::counter().last())?
        .build_section()?;
    let set = insync::fields();
    let builder = builder.add_section("insync");
    let builder = match &set.members {
        Some(members) => {
            let (lacking, unverified) = replica_check::fields();
            builder
                .field("insync_role", "master")?
                .field(
                    "insync_replicas",
                    u64::try_from(members.len()).unwrap_or(u64::MAX),
                )?
                .field("insync_members", members.join(","))?
                .field("insync_without_module", lacking.join(","))?
                .field("insync_unverified", unverified.join(","))?
        }
        None => {
            let (promotable, by) = match set.promotability {
                Promotability::No => (0_u64, "none"),
                Promotability::Lease(_) => (1, "lease"),
                Promotability::Succession => (1, "succession"),
            };
            builder
                .field("insync_role", "replica")?
                .field("insync_promotable", promotable)?
                .field("insync_promotable_by", by)?
                .field("insync_named", u64::from(set.last_listed))?
        }
    };
    let timing = match (set.explicit, set.timeout_too_short) {
        (false, _) => set.failover.source.describe(),
        (true, false) => "lock.insync-timeout-ms".to_owned(),
        (true, true) => format!(
            "lock.insync-timeout-ms, shorter than {} needs",
            set.failover.source.describe()
        ),
    };
    let builder = builder
        .field("insync_lease_ms", set.lease_ms)?
        .field("insync_failover_ms", set.failover.ms)?
        .field("insync_timing", timing)?;
    let (open, detached, ties, users) = {
        let sessions = state::sessions();
        let (open, detached) = sessions.counts();
        (open, detached, sessions.ties(), sessions.users())
    };
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    builder
        .field(
            "insync_required",
            u64::try_from(set.required).unwrap_or(u64::MAX),
        )?
        .build_section()?
        .add_section("sessions")
        .field("sessions", count(open))?
        .field("sessions_detached", count(detached))?
        .field("session_ties", count(ties))?
        .field("session_connections", count(users))?
        .field("sessions_expired", SESSIONS_EXPIRED.get())?
        .field("session_releases", SESSION_RELEASES.get())?
        .build_section()?
        .build_info()?;
    Ok(())
}
