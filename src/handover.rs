//! Fair hand-over: when a lock can take another holder, its first waiters get it in the same
//! step, in arrival order, so no client that arrives without waiting (or later) takes it in
//! between. A shared waiter at the head brings every shared waiter behind it up to the next
//! exclusive one (and up to the limit): the phase-fair order of `ZooKeeper`'s shared-lock recipe,
//! in which no writer starves behind a stream of readers and no reader behind writers.
//!
//! A lock can take another holder when:
//! - `LOCK.RELEASE` ends a holding, or the exclusive holder downgrades to `SHARED`: they hand
//!   over before they return;
//! - a lease ends: a timer set for it (re-armed when the lease changes) hands over within a few
//!   ms of it, not whenever Redis's lazy or active expiry would notice the key. The same timers
//!   end shared holders' leases one by one ([`crate::writes::expire_shared`]). While writes are
//!   paused (`CLIENT PAUSE WRITE`, `FAILOVER`) they wait for the pause to end;
//! - `DEL`, `UNLINK`, `FLUSHALL`, eviction and the like: their keyspace or flush events
//!   schedule a look on the next turn of the event loop;
//! - a waiter at the head leaves (timeout, disconnect): the ones behind it may fit;
//! - and in between, `LOCK.ACQUIRE` hands over to queued waiters before it looks at the lock
//!   itself.
//!
//! Waiters live in the module's own registry ([`crate::waiters`]), which behaves the same on
//! Redis 7.0, 8.x and Valkey.

use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redis_module::server_events::FlushSubevent;
use redis_module::{
    Context, ContextFlags, NotifyEvent, RedisError, RedisResult, RedisString, RedisValue,
};

use crate::blocking::{self, Outcome, waiters};
use crate::clock;
use crate::cluster;
use crate::commands::{lease_deadline, limit_differs};
use crate::effects::replication_paused;
use crate::info;
use crate::key::{LockKey, select_db, selected_db};
use crate::lock::{Lock, Mode};
use crate::timers::Timers;
use crate::waiters::Waiter;
use crate::writes::{self, Grant, Request};

static TIMERS: LazyLock<Mutex<Timers>> = LazyLock::new(Mutex::default);

/// The armed timers. Lock it only for a single call, as [`waiters`].
fn timers() -> MutexGuard<'static, Timers> {
    TIMERS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a blocked `LOCK.ACQUIRE` asked for.
pub struct Wanted<'a> {
    /// The owner it acquires for.
    pub owner: &'a [u8],
    /// Its lease, in ms from the grant.
    pub ttl_ms: i64,
    /// Exclusive, or shared with its limit.
    pub mode: Mode,
    /// `REENTRANT`.
    pub reentrant: bool,
}

/// Blocks the current client until it is granted `name` as `wanted` asks, or `timeout_ms`
/// passes (0: no limit); the lock is looked at again in `check_in_ms` (see [`check_in`]).
/// Replies nothing now: the grant or the timeout answers later.
///
/// # Errors
/// When the server cannot block the client (nothing is queued then).
pub fn wait(
    ctx: &Context,
    name: &RedisString,
    wanted: &Wanted,
    timeout_ms: i64,
    check_in_ms: Option<i64>,
) -> RedisResult {
    let handle = blocking::block(ctx, timeout_ms)?;
    let db = selected_db(ctx);
    waiters().push(
        db,
        name.as_slice(),
        Waiter {
            handle,
            owner: wanted.owner.into(),
            ttl_ms: wanted.ttl_ms,
            mode: wanted.mode,
            reentrant: wanted.reentrant,
        },
    );
    schedule_in(ctx, db, name.as_slice(), check_in_ms);
    Ok(RedisValue::NoReply)
}

/// When an open lock key needs a look again, in ms from now, with `waiting` true when clients
/// wait for it: when its first shared lease ends, when its exclusive lease ends if someone
/// waits (a lease made persistent only by a release or delete), else never (`None`).
#[must_use]
pub fn check_in(key: &LockKey, waiting: bool) -> Option<i64> {
    match key.lock() {
        Some(Lock::Shared(shared)) => {
            let now = i64::try_from(clock::now_ms()).unwrap_or(i64::MAX);
            shared
                .holders
                .soonest()
                .map(|holder| holder.deadline_ms - now)
        }
        Some(Lock::Exclusive(_)) if waiting => key.remaining_ms(),
        _ => None,
    }
}

/// After a write to the open lock `key` named `name`: a shared lock gets a look when its first
/// lease ends, so the holder leaves on time whether or not anyone waits.
pub fn watch(ctx: &Context, key: &LockKey, name: &RedisString) {
    if let Some(Lock::Shared(_)) = key.lock() {
        let db = selected_db(ctx);
        let waiting = waiters().count(db, name.as_slice()) > 0;
        schedule_in(ctx, db, name.as_slice(), check_in(key, waiting));
    }
}

/// If `name` has waiters, ends its shared leases that ended and grants its first waiters while
/// they can be granted; then arms the next look. Cheap when nobody waits for any lock: every
/// `LOCK.ACQUIRE` passes here.
///
/// # Errors
/// `WRONGTYPE` when the key now holds another type (its waiters keep waiting).
pub fn hand_over(ctx: &Context, name: &RedisString) -> Result<(), RedisError> {
    if waiters().total() == 0 || waiters().count(selected_db(ctx), name.as_slice()) == 0 {
        return Ok(());
    }
    look_at(ctx, name)
}

/// How often a look is retried while writes are paused, in ms.
const PAUSED_RETRY_MS: i64 = 10;

/// Looks at the lock `name` in the selected database: ends shared leases that ended, grants its
/// waiters what can be granted, and arms the next look. Only a master changes anything, and
/// not while writes are paused: it looks again when the pause is over, as Redis expires keys
/// only then.
fn look_at(ctx: &Context, name: &RedisString) -> Result<(), RedisError> {
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        return Ok(());
    }
    let db = selected_db(ctx);
    if replication_paused() {
        schedule_in(ctx, db, name.as_slice(), Some(PAUSED_RETRY_MS));
        return Ok(());
    }
    let mut key = LockKey::write(ctx, name)?;
    writes::expire_shared(ctx, &mut key, name, clock::now_ms())?;
    let waiting = waiters().count(db, name.as_slice()) > 0;
    if waiting {
        if !cluster::serves(ctx, name)? {
            turn_away(db, name.as_slice());
            return Ok(());
        }
        if let Some(retry_in_ms) = grant_waiters(ctx, &mut key, name, db) {
            schedule_in(ctx, db, name.as_slice(), Some(retry_in_ms));
        }
    }
    let waiting = waiters().count(db, name.as_slice()) > 0;
    schedule_in(ctx, db, name.as_slice(), check_in(&key, waiting));
    Ok(())
}

/// Grants the first waiters of the open lock `key` named `name` in `db` while they can be
/// granted. Returns when to try again if no fencing token could be issued yet.
fn grant_waiters(ctx: &Context, key: &mut LockKey, name: &RedisString, db: i32) -> Option<i64> {
    loop {
        let waiter = waiters().first(db, name.as_slice())?;
        let now = clock::now_ms();
        let owner = ctx.create_string(&*waiter.owner);
        let granted = lease_deadline(now, waiter.ttl_ms, "lock.acquire").and_then(|deadline| {
            let request = Request {
                owner: &owner,
                mode: waiter.mode,
                reentrant: waiter.reentrant,
                now_ms: now,
                deadline_ms: deadline,
            };
            writes::acquire(ctx, key, name, &request, false)
        });
        let outcome = match granted {
            Ok(Grant::Busy) => return None,
            Ok(Grant::TooSoon { retry_in_ms }) => {
                // The waiter keeps its place until a token can be issued.
                return Some(i64::try_from(retry_in_ms).unwrap_or(i64::MAX));
            }
            Ok(Grant::Held(token)) => {
                info::HANDOVERS.bump();
                Outcome::Granted(token)
            }
            Ok(Grant::UpgradeRefused) => Outcome::Refused,
            Ok(Grant::LimitDiffers(limit)) => {
                Outcome::Failed(limit_differs(waiter.mode, limit).to_string())
            }
            Err(error) => Outcome::Failed(error.to_string()),
        };
        waiters().pop(db, name.as_slice());
        blocking::unblock(waiter.handle, outcome);
    }
}

/// Unblocks every waiter of `key` in `db` with `TRYAGAIN`: the lock's slot moved, or is
/// moving, to another node. Cluster clients retry, and their retry is routed to the new owner.
fn turn_away(db: i32, key: &[u8]) {
    loop {
        let waiter = waiters().pop(db, key);
        let Some(waiter) = waiter else {
            return;
        };
        let moved = "TRYAGAIN the lock's slot moved to another node while waiting";
        blocking::unblock(waiter.handle, Outcome::Failed(moved.into()));
    }
}

/// Looks at `key` in `db` again in `in_ms` ms (never for `None`), unless a look that comes
/// earlier is already armed.
fn schedule_in(ctx: &Context, db: i32, key: &[u8], in_ms: Option<i64>) {
    if let Some(left) = in_ms {
        let at = clock::now_ms() + u64::try_from(left).unwrap_or(0);
        schedule(ctx, db, key, at);
    }
}

/// Looks at `key` in `db` at unix time `at_ms` (at once if it has passed).
fn schedule(ctx: &Context, db: i32, key: &[u8], at_ms: u64) {
    if !timers().needs_timer(db, key, at_ms) {
        return;
    }
    let delay = Duration::from_millis(at_ms.saturating_sub(clock::now_ms()));
    let key: Box<[u8]> = key.into();
    ctx.create_timer(delay, on_timer, (db, key, at_ms));
}

/// A timer runs on database 0: it selects the lock's own database first.
fn on_timer(ctx: &Context, (db, key, at_ms): (i32, Box<[u8]>, u64)) {
    timers().fired(db, &key, at_ms);
    if select_db(ctx, db).is_err() {
        return;
    }
    let name = ctx.create_string(&*key);
    // A key of another type: its waiters keep waiting until they time out.
    let _ = look_at(ctx, &name);
}

/// A waiter of `key` in `db` left the queue (timed out, disconnected): if it was first, the
/// waiters behind it may fit now. Looks on the next turn of the event loop.
pub fn waiter_left(ctx: &Context, db: i32, key: &[u8]) {
    schedule(ctx, db, key, clock::now_ms());
}

/// A keyspace event (`del`, `expired`, `evicted`, `rename_from`, ...) on a key of the event's
/// database: if it has waiters, look on the next turn of the event loop whether it became
/// free. Writing to the keyspace inside the event itself is not allowed.
pub fn on_key_event(ctx: &Context, _class: NotifyEvent, event: &str, key: &[u8]) {
    let db = selected_db(ctx);
    info::key_removed(db, key, event);
    if waiters().count(db, key) > 0 {
        schedule(ctx, db, key, clock::now_ms());
    }
}

/// `FLUSHALL`/`FLUSHDB` freed locks: look at every lock with waiters.
pub fn on_flush(ctx: &Context, event: FlushSubevent) {
    if event != FlushSubevent::Ended {
        return;
    }
    let locks: Vec<(i32, Box<[u8]>)> = waiters().keys().map(|(db, key)| (db, key.into())).collect();
    let now = clock::now_ms();
    for (db, key) in locks {
        schedule(ctx, db, &key, now);
    }
}
