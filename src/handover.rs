//! Fair hand-over: a lock that becomes free goes straight to its first waiter, in the same
//! step, so no client that arrives without waiting (or later) can take it in between.
//!
//! A lock becomes free in four ways, each covered:
//! - `LOCK.RELEASE` drops the last hold: it hands over before it returns;
//! - the lease ends: a timer set for the holder's deadline (re-armed when the lease was
//!   renewed) hands over within a few ms of it, not whenever Redis's lazy or active expiry
//!   would notice the key;
//! - `DEL`, `UNLINK`, `FLUSHALL`, eviction and the like: their keyspace or flush events
//!   schedule a hand-over on the next turn of the event loop;
//! - and in between, `LOCK.ACQUIRE` hands over to queued waiters before it looks at a free
//!   lock itself.
//!
//! Waiters live in the module's own registry ([`crate::waiters`]), which behaves the same on
//! Redis 7.0, 8.x and Valkey.

use std::time::Duration;

use redis_module::server_events::FlushSubevent;
use redis_module::{
    Context, ContextFlags, NotifyEvent, RedisError, RedisResult, RedisString, RedisValue,
};

use crate::blocking::{self, Outcome, waiters};
use crate::clock;
use crate::cluster;
use crate::commands::{Grant, acquire_now, lease_deadline};
use crate::info;
use crate::key::{LockKey, select_db, selected_db};
use crate::waiters::Waiter;

/// Blocks the current client until it is granted `name` for `owner` (lease `ttl_ms` from the
/// grant) or `timeout_ms` passes (0: no limit); the waiters are checked again in
/// `check_in_ms` (see [`watch`]). Replies nothing now: the grant or the timeout answers later.
///
/// # Errors
/// When the server cannot block the client (nothing is queued then).
pub fn wait(
    ctx: &Context,
    name: &RedisString,
    owner: &[u8],
    ttl_ms: i64,
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
            owner: owner.into(),
            ttl_ms,
        },
    );
    watch(ctx, db, name.as_slice(), check_in_ms);
    Ok(RedisValue::NoReply)
}

/// When the waiters of an open lock key need a look: at once (`Some(0)`) when the lock is
/// free, when the lease ends when held, never (`None`) for a lease made persistent, which only
/// a release or a delete frees.
#[must_use]
pub fn lease_left(key: &LockKey) -> Option<i64> {
    match key.lock() {
        Some(_) => key.remaining_ms(),
        None => Some(0),
    }
}

/// If the lock `name` is free and has waiters, grants it to the first of them now, and makes
/// sure the next waiter's turn is checked when the new lease ends.
///
/// # Errors
/// `WRONGTYPE` when the key now holds another type (its waiters keep waiting).
pub fn hand_over(ctx: &Context, name: &RedisString) -> Result<(), RedisError> {
    if waiters().total() == 0 {
        return Ok(()); // every LOCK.ACQUIRE passes here: the common case costs one check
    }
    let db = selected_db(ctx);
    if waiters().count(db, name.as_slice()) == 0 || is_replica(ctx) {
        return Ok(());
    }
    if !cluster::serves(ctx, name)? {
        turn_away(db, name.as_slice());
        return Ok(());
    }
    let mut key = LockKey::write(ctx, name)?;
    let mut check_in_ms = lease_left(&key);
    let first = if key.lock().is_none() {
        waiters().first(db, name.as_slice())
    } else {
        None
    };
    if let Some(waiter) = first {
        let now = clock::now_ms();
        let granted = lease_deadline(now, waiter.ttl_ms, "lock.acquire").and_then(|deadline| {
            acquire_now(ctx, &mut key, name, &waiter.owner, now, deadline, false)
        });
        let outcome = match granted {
            Ok(Grant::TooSoon { retry_in_ms }) => {
                // The waiter keeps its place until a token can be issued.
                watch(ctx, db, name.as_slice(), i64::try_from(retry_in_ms).ok());
                return Ok(());
            }
            Ok(Grant::Held(token)) => {
                info::HANDOVERS.bump();
                Outcome::Granted(token)
            }
            Ok(Grant::Busy) => Outcome::Failed("ERR the lock was taken meanwhile".into()),
            Err(error) => Outcome::Failed(error.to_string()),
        };
        waiters().pop(db, name.as_slice());
        blocking::unblock(waiter.handle, outcome);
        check_in_ms = lease_left(&key);
    }
    watch(ctx, db, name.as_slice(), check_in_ms);
    Ok(())
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

/// Checks the waiters of `key` in `db` when `check_in_ms` ms have passed (the lease left, see
/// [`lease_left`], or the wait for a fencing token), never for `None`, unless a check that
/// comes earlier is already armed.
fn watch(ctx: &Context, db: i32, key: &[u8], check_in_ms: Option<i64>) {
    if let Some(left) = check_in_ms {
        schedule(
            ctx,
            db,
            key,
            clock::now_ms() + u64::try_from(left).unwrap_or(0),
        );
    }
}

/// Checks the waiters of `key` in `db` at unix time `at_ms` (at once if it has passed), if
/// they need it.
fn schedule(ctx: &Context, db: i32, key: &[u8], at_ms: u64) {
    if !waiters().needs_timer(db, key, at_ms) {
        return;
    }
    let delay = Duration::from_millis(at_ms.saturating_sub(clock::now_ms()));
    let key: Box<[u8]> = key.into();
    ctx.create_timer(delay, on_timer, (db, key, at_ms));
}

/// A timer runs on database 0: it selects the lock's own database before the hand-over.
fn on_timer(ctx: &Context, (db, key, at_ms): (i32, Box<[u8]>, u64)) {
    waiters().timer_fired(db, &key, at_ms);
    if select_db(ctx, db).is_err() {
        return;
    }
    let name = ctx.create_string(&*key);
    // A key of another type: its waiters keep waiting until they time out.
    let _ = hand_over(ctx, &name);
}

fn is_replica(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::SLAVE)
}

/// A keyspace event (`del`, `expired`, `evicted`, `rename_from`, ...) on a key of the event's
/// database: if it has waiters, check on the next turn of the event loop whether it became
/// free. Writing to the keyspace inside the event itself is not allowed.
pub fn on_key_event(ctx: &Context, _class: NotifyEvent, _event: &str, key: &[u8]) {
    let db = selected_db(ctx);
    if waiters().count(db, key) > 0 {
        schedule(ctx, db, key, clock::now_ms());
    }
}

/// `FLUSHALL`/`FLUSHDB` freed locks: check every lock with waiters.
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
