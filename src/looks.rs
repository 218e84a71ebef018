//! Looks at a lock outside its own commands — when a lease ends, when its key is deleted,
//! expired, evicted or flushed, when a waiter leaves — so that its waiters are granted (by the
//! core's [`Scope::look`](leasehold_core::machine::Scope::look)) the moment it can take them:
//!
//! - a lease ends: one Redis timer per lock, armed for the next look the core asks for
//!   ([`crate::timers`] keeps the earliest), so a waiter is granted within a few ms of the lease
//!   end, not whenever Redis's lazy or active expiry would notice the key; the same looks end
//!   shared holders' leases one by one;
//! - `DEL`, `UNLINK`, `FLUSHALL`, eviction and the like: their keyspace or flush events
//!   schedule a look on the next turn of the event loop (writing inside the event is not
//!   allowed);
//! - a waiter times out or disconnects ([`Leaving`]): the ones behind it may fit.
//!
//! Only a master changes anything, and not while writes are paused (`CLIENT PAUSE WRITE`,
//! `FAILOVER`): it looks again when the pause is over, as Redis expires keys only then. In
//! Redis Cluster, the waiters of a lock whose slot this node no longer serves are turned away.

use std::time::Duration;

use leasehold_core::machine::Scope;
use leasehold_core::outcome::{Next, Outcome, Reply};
use redis_module::server_events::FlushSubevent;
use redis_module::{Context, ContextFlags, NotifyEvent, RedisError, RedisString};

use crate::blocking::{self, Blocked};
use crate::clock;
use crate::cluster;
use crate::effects::replication_paused;
use crate::execute;
use crate::info;
use crate::key::{LockKey, select_db, selected_db};
use crate::state;
use crate::timers;

/// How often a look is retried while writes are paused, in ms.
const PAUSED_RETRY_MS: u64 = 10;

/// Runs `event` at unix time `now_ms` on the open lock `key` named `name` in the selected
/// database and carries out its outcome, with `caller` the owner a command named; then arms
/// the next look. Returns the command's reply. In Redis Cluster, when the lock has waiters and
/// this node no longer serves its slot, they are turned away first.
///
/// # Errors
/// A key that cannot be written; the cluster commands failing.
pub fn decide(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    caller: Option<&RedisString>,
    now: u64,
    event: impl FnOnce(Scope<'_, Blocked>),
) -> Result<Reply, RedisError> {
    let (db, key_name) = (selected_db(ctx), name.as_slice());
    let mut outcome = Outcome::new();
    if cluster::enabled() && state::has_waiters(db, key_name) && !cluster::serves(ctx, name)? {
        key.update(|lock| {
            state::scope(lock, db, key_name, now, &mut outcome, |scope| {
                scope.turn_away();
            });
        })?;
        execute::carry_out(ctx, key, name, None, &outcome)?;
        outcome = Outcome::new();
    }
    key.update(|lock| state::scope(lock, db, key_name, now, &mut outcome, event))?;
    execute::carry_out(ctx, key, name, caller, &outcome)?;
    look_again(ctx, key, db, key_name, outcome.next);
    Ok(outcome.reply)
}

/// Arms a look at the open lock `key` (`name` of `db`) for `next`.
pub fn look_again(ctx: &Context, key: &LockKey, db: i32, name: &[u8], next: Next) {
    let at = match next {
        Next::Never => return,
        Next::At(at) => u64::try_from(at).unwrap_or(0),
        Next::LeaseEnd => match key.remaining_ms() {
            Some(left) => clock::now_ms() + u64::try_from(left).unwrap_or(0),
            None => return,
        },
    };
    schedule(ctx, db, name, at);
}

/// Looks at the lock `name` in the selected database (a timer fired, or an event asked).
fn look_at(ctx: &Context, name: &RedisString) -> Result<(), RedisError> {
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        return Ok(());
    }
    if replication_paused() {
        let at = clock::now_ms() + PAUSED_RETRY_MS;
        schedule(ctx, selected_db(ctx), name.as_slice(), at);
        return Ok(());
    }
    let mut key = LockKey::write(ctx, name)?;
    decide(ctx, &mut key, name, None, clock::now_ms(), |scope| {
        scope.look();
    })?;
    Ok(())
}

/// Looks at `key` in `db` at unix time `at_ms` (at once if it has passed), unless a look that
/// comes earlier is already armed.
fn schedule(ctx: &Context, db: i32, key: &[u8], at_ms: u64) {
    if !timers::needs_timer(db, key, at_ms) {
        return;
    }
    let delay = Duration::from_millis(at_ms.saturating_sub(clock::now_ms()));
    let key: Box<[u8]> = key.into();
    ctx.create_timer(delay, on_timer, (db, key, at_ms));
}

/// A timer runs on database 0: it selects the lock's own database first.
fn on_timer(ctx: &Context, (db, key, at_ms): (i32, Box<[u8]>, u64)) {
    timers::fired(db, &key, at_ms);
    if select_db(ctx, db).is_err() {
        return;
    }
    let name = ctx.create_string(&*key);
    // A key of another type: its waiters keep waiting until they time out.
    let _ = look_at(ctx, &name);
}

/// A waiter leaving its queue without an answer (timed out, disconnected): if it was first,
/// the waiters behind it may fit now. Looks on the next turn of the event loop.
pub struct Leaving;

impl blocking::Leaving for Leaving {
    fn left(ctx: &Context, blocked: Blocked) {
        let left = state::waiters().remove(blocked);
        if let Some((db, key)) = left {
            schedule(ctx, db, &key, clock::now_ms());
        }
    }
}

/// A keyspace event (`del`, `expired`, `evicted`, `rename_from`, ...) on a key of the event's
/// database: if it has waiters, look on the next turn of the event loop whether it became
/// free.
pub fn on_key_event(ctx: &Context, _class: NotifyEvent, event: &str, key: &[u8]) {
    let db = selected_db(ctx);
    info::key_removed(db, key, event);
    if state::has_waiters(db, key) {
        schedule(ctx, db, key, clock::now_ms());
    }
}

/// `FLUSHALL`/`FLUSHDB` freed locks: look at every lock with waiters.
pub fn on_flush(ctx: &Context, event: FlushSubevent) {
    if event != FlushSubevent::Ended {
        return;
    }
    let locks: Vec<(i32, Box<[u8]>)> = state::waiters()
        .keys()
        .map(|(db, key)| (db, key.into()))
        .collect();
    let now = clock::now_ms();
    for (db, key) in locks {
        schedule(ctx, db, &key, now);
    }
}
