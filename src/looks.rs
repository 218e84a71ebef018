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

use leasehold_core::machine::{Member, Scope, Set};
use leasehold_core::outcome::{Next, Outcome, Reply};
use redis_module::server_events::FlushSubevent;
use redis_module::{Context, ContextFlags, NotifyEvent, RedisError, RedisString};

use crate::blocking::{self, Blocked};
use crate::clock;
use crate::cluster;
use crate::effects::replication_paused;
use crate::execute;
use crate::key::{LockKey, select_db, selected_db};
use crate::observers;
use crate::state;
use crate::stats;
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
    turn_away_if_moved(ctx, key, name, db, now)?;
    let mut outcome = Outcome::new();
    key.update(|lock| state::scope(lock, db, key_name, now, &mut outcome, event))?;
    finish(ctx, key, (db, name, key_name), caller, &outcome, now)?;
    Ok(outcome.reply)
}

/// Runs `event` at unix time `now_ms` on the open, distinct locks `keys` named `names` in the
/// selected database (a set: [`Set`]) and carries out each lock's outcome, as [`decide`] does
/// for one. Returns the command's reply and each lock's own (its token when the set was
/// granted), in the order of `keys`.
///
/// # Errors
/// A key that cannot be written; the cluster commands failing.
pub fn decide_set(
    ctx: &Context,
    keys: &mut [LockKey],
    names: &[RedisString],
    caller: Option<&RedisString>,
    now: u64,
    event: impl FnOnce(Set<'_, '_, Blocked>),
) -> Result<(Reply, Vec<Reply>), RedisError> {
    let db = selected_db(ctx);
    for (key, name) in keys.iter_mut().zip(names) {
        turn_away_if_moved(ctx, key, name, db, now)?;
    }
    let mut members: Vec<Member<'_, Blocked>> = keys
        .iter_mut()
        .zip(names)
        .map(|(key, name)| Member::new(name.as_slice(), key.take()))
        .collect();
    let reply = state::set_scope(&mut members, db, now, event);
    // Every lock goes back before anything else happens, even if one cannot.
    let mut stored = Ok(());
    let mut outcomes = Vec::with_capacity(members.len());
    for (member, key) in members.into_iter().zip(keys.iter_mut()) {
        stored = stored.and(key.put(member.lock));
        outcomes.push(member.out);
    }
    stored?;
    for ((outcome, key), name) in outcomes.iter().zip(keys.iter_mut()).zip(names) {
        finish(ctx, key, (db, name, name.as_slice()), caller, outcome, now)?;
    }
    Ok((
        reply,
        outcomes.iter().map(|outcome| outcome.reply).collect(),
    ))
}

/// In Redis Cluster, when the lock `key` (`name` of `db`) has waiters and this node no longer
/// serves its slot, answers them that it moved. Outside a cluster, nothing: inlined, it costs
/// every command one load.
#[inline]
fn turn_away_if_moved(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    db: i32,
    now: u64,
) -> Result<(), RedisError> {
    if cluster::enabled() {
        turn_away(ctx, key, name, db, now)
    } else {
        Ok(())
    }
}

/// [`turn_away_if_moved`] in a cluster.
fn turn_away(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    db: i32,
    now: u64,
) -> Result<(), RedisError> {
    let key_name = name.as_slice();
    if !state::has_waiters(db, key_name) || cluster::serves(ctx, name)? {
        return Ok(());
    }
    let mut outcome = Outcome::new();
    key.update(|lock| {
        state::scope(lock, db, key_name, now, &mut outcome, |scope| {
            scope.turn_away();
        });
    })?;
    execute::carry_out(ctx, key, name, None, &outcome)
}

/// Carries out `outcome` on the open lock `key` (`name` of `db`, its bytes `key_name`) and arms
/// its next look; a set that became ready is looked at on the next turn of the event loop.
#[inline]
fn finish(
    ctx: &Context,
    key: &mut LockKey,
    (db, name, key_name): (i32, &RedisString, &[u8]),
    caller: Option<&RedisString>,
    outcome: &Outcome<Blocked>,
    now: u64,
) -> Result<(), RedisError> {
    execute::carry_out(ctx, key, name, caller, outcome)?;
    look_again(ctx, key, db, key_name, outcome.next);
    if outcome.ready_set.is_some() {
        schedule(ctx, db, key_name, now);
    }
    Ok(())
}

/// Arms a look at the open lock `key` (`name` of `db`) for `next`; for [`Next::Never`] (a
/// lock nobody waits for) inline, without a call.
#[inline]
pub fn look_again(ctx: &Context, key: &LockKey, db: i32, name: &[u8], next: Next) {
    if next != Next::Never {
        arm(ctx, key, db, name, next);
    }
}

/// [`look_again`] for a look that is due.
fn arm(ctx: &Context, key: &LockKey, db: i32, name: &[u8], next: Next) {
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

/// Looks at the lock `name` in the selected database (a timer fired, or an event asked); when
/// its first waiter waits for a set, at the whole set.
fn look_at(ctx: &Context, name: &RedisString) -> Result<(), RedisError> {
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        return Ok(());
    }
    if replication_paused() {
        let at = clock::now_ms() + PAUSED_RETRY_MS;
        schedule(ctx, selected_db(ctx), name.as_slice(), at);
        return Ok(());
    }
    let now = clock::now_ms();
    if let Some((handle, keys)) = first_set(selected_db(ctx), name.as_slice()) {
        let names: Vec<RedisString> = keys.iter().map(|key| ctx.create_string(&**key)).collect();
        let mut keys = open_all(ctx, &names)?;
        decide_set(ctx, &mut keys, &names, None, now, |set| set.look(handle))?;
        return Ok(());
    }
    let mut key = LockKey::write(ctx, name)?;
    decide(ctx, &mut key, name, None, now, |scope| {
        scope.look();
    })?;
    Ok(())
}

/// The set waiter first in the queue of `key` of `db`, and its keys in the order it named them.
fn first_set(db: i32, key: &[u8]) -> Option<(Blocked, Vec<Box<[u8]>>)> {
    let waiters = state::waiters();
    let first = waiters.first(db, key).filter(|waiter| waiter.set)?;
    let (_, keys) = waiters.place_of(first.handle)?;
    Some((first.handle, keys.to_vec()))
}

/// Opens every key of `names` for writing; none is changed when one holds another type.
///
/// # Errors
/// `WRONGTYPE` when a key holds another type.
pub fn open_all(ctx: &Context, names: &[RedisString]) -> Result<Vec<LockKey>, RedisError> {
    names.iter().map(|name| LockKey::write(ctx, name)).collect()
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
/// the waiters behind it (on each of a set's keys) may fit now. Looks on the next turn of the event loop.
pub struct Leaving;

impl blocking::Leaving for Leaving {
    fn left(ctx: &Context, blocked: Blocked, _connected: bool) {
        let left = state::waiters().remove(blocked);
        if let Some((_, (db, keys))) = left {
            for key in keys {
                schedule(ctx, db, &key, clock::now_ms());
            }
        }
    }
}

/// A keyspace event (`del`, `expired`, `evicted`, `rename_from`, ...) on a key of the event's
/// database: if it has waiters, look on the next turn of the event loop whether it became
/// free. A lock that `RESTORE` (or `MIGRATE`) brought is looked at too: its shared holders'
/// leases end on time even when `RESTORE ... 0` gave its key no expiry.
pub fn on_key_event(ctx: &Context, _class: NotifyEvent, event: &str, key: &[u8]) {
    let db = selected_db(ctx);
    stats::key_removed(db, key, event);
    if state::has_waiters(db, key) || (event == "restore" && holds_lock(ctx, key)) {
        schedule(ctx, db, key, clock::now_ms());
    }
    if observers::watched(db, key)
        && let Ok(open) = LockKey::read(ctx, &ctx.create_string(key))
    {
        observers::wake(db, key, open.lock(), open.remaining_ms());
    }
}

/// True when `key` in the selected database holds a lock.
fn holds_lock(ctx: &Context, key: &[u8]) -> bool {
    LockKey::read(ctx, &ctx.create_string(key)).is_ok_and(|key| key.lock().is_some())
}

/// `FLUSHALL`/`FLUSHDB` freed locks: look at every lock with waiters. (The sessions' log
/// entries of the flushed locks are dropped by the sweep, as those of any holding gone.)
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
    for (db, key) in observers::keys() {
        observers::wake(db, &key, None, None);
    }
}
