//! The `LOCK.*` commands a client calls: parse the arguments, let the core decide
//! ([`leasehold_core::machine`], through [`crate::looks::decide`], which carries the outcome
//! out), reply.
//!
//! Replies and errors follow Redis's own commands: null for "no lock" (RESP2 `$-1`, RESP3
//! `_`), `ERR value is not an integer or out of range` and `ERR invalid expire time in '...'
//! command` as `SET ... PX` has them, `WRONGTYPE` for a key of another type.

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use leasehold_core::args::{self, Acquire};
use leasehold_core::fence;
use leasehold_core::lock::Lock;
use leasehold_core::machine::{self, Request};
use leasehold_core::outcome::{Refusal, Reply};
use leasehold_core::queue::Waiter;
use leasehold_core::session::Tie;

use crate::blocking;
use crate::clock;
use crate::config;
use crate::key::{LockKey, selected_db};
use crate::looks::{self, Leaving};
use crate::replies::{self, map};
use crate::session;
use crate::state;
use crate::synced::{self, Stretch};

/// `LOCK.ACQUIRE key owner ttl-ms [REENTRANT] [WAIT timeout-ms] [SHARED [LIMIT n]] [SESSION
/// id] [SYNC | NOSYNC]`: takes the lock for `owner` with a lease of `ttl-ms` — exclusively, or with `SHARED` as
/// one of its shared holders (at most `n` with `LIMIT`) — or resets the lease when `owner`
/// already holds it (`REENTRANT` also counts one more hold). With `WAIT`, a client that finds
/// the lock busy blocks until the lock is handed to it, in arrival order, or `timeout-ms` passes
/// (0: no limit). With `SESSION`, or on a connection that uses a session (`LOCK.SESSION USE`),
/// the holding is tied to that session ([`crate::session`]), which releases it a grace after the
/// session's connection closed.
///
/// Replies with the holding's fencing token, or null when the lock is busy (or stayed busy
/// until the timeout), and at once when a shared holder asks for it exclusively while others
/// hold it too. A grant replies once the in-sync set has it, with `SYNC` or by
/// `lock.sync-writes` unless `NOSYNC` ([`crate::synced`]).
///
/// # Errors
/// Arity, owner, TTL, timeout, limit, syntax, `WRONGTYPE`, a different `LIMIT` than the lock's,
/// no fencing token to issue, a session id that is invalid or unknown; `SYNC` where a client
/// cannot block; `NOREPLICAS` for a grant the in-sync set did not get (released then).
pub fn acquire(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let parsed = args::acquire(args, &config::limits()).map_err(replies::arg_error)?;
    acquire_as(ctx, &parsed, "lock.acquire")
}

/// [`acquire`] of arguments already parsed — `LOCK.ACQUIRE`'s, or `LOCK.CAMPAIGN`'s with the
/// value its candidate proclaims — named `command` in errors.
///
/// # Errors
/// As [`acquire`]'s, after the arguments.
pub fn acquire_as(ctx: &Context, parsed: &Acquire<'_, RedisString>, command: &str) -> RedisResult {
    // Whether a grant waits for the in-sync set is asked at once only where it matters before
    // the decision (`SYNC`'s error where the client cannot block, a `WAIT`'s longer lease);
    // otherwise after a grant, and only on a server with a set to wait for: a lone server's
    // acquire does not read the context's flags (issue 55).
    let early = parsed.sync == Some(true) || parsed.wait_ms.is_some();
    let sync = early && synced::wanted(ctx, parsed.sync)?;
    let session = session::of_command(ctx, parsed.session)?;
    let now = clock::now_ms();
    let stretch = Stretch::of(sync, parsed.wait_ms.is_some(), parsed.ttl_ms);
    let lease_ms = Stretch::lease_ms(stretch, parsed.ttl_ms);
    let deadline_ms = lease_deadline(now, lease_ms, command)?;
    let (name, owner) = (parsed.key, parsed.owner);
    // Their bytes, found once: each look asks the server (`RedisModule_StringPtrLen`).
    let (name_bytes, owner_bytes) = (name.as_slice(), owner.as_slice());
    let mut key = LockKey::write(ctx, name)?;
    let was = session::tied_to(&key, owner_bytes);
    let tie = session::log(ctx, session, name_bytes, deadline_ms);
    let request = Request {
        owner: owner_bytes,
        mode: parsed.mode,
        reentrant: parsed.reentrant,
        deadline_ms,
        tie,
        value: parsed.value.map(|value| value.as_slice()),
    };
    let reply = looks::decide(ctx, &mut key, name, Some(owner), now, |scope| {
        scope.acquire(&request);
    })?;
    let busy = matches!(reply, Reply::Busy | Reply::Refused(Refusal::TooSoon { .. }));
    match parsed.wait_ms {
        Some(timeout) if busy && blocking::can_block(ctx) => {
            wait(ctx, &key, parsed, tie, timeout, sync)
        }
        _ => {
            session::settle(ctx, &key, name_bytes, owner_bytes, was, tie);
            drop(key);
            let granted = matches!(reply, Reply::Token(_));
            let reply = reply_for(reply, command)?;
            let sync = if early {
                sync
            } else {
                granted && synced::waits(ctx, parsed.sync)
            };
            if sync && granted {
                synced::hold_grant(ctx, reply, std::slice::from_ref(name), owner, stretch)
            } else {
                Ok(reply)
            }
        }
    }
}

/// Blocks the caller of `LOCK.ACQUIRE` until the lock is handed to it or `timeout_ms` passes
/// (0: no limit), queued last for the open lock `key`; the holding it is granted keeps `tie`
/// (logged already), and its reply waits for the in-sync set when `sync` (its grant made
/// longer meanwhile: [`Stretch`]). Replies nothing now.
///
/// # Errors
/// When the server cannot block the client (nothing is queued then).
fn wait(
    ctx: &Context,
    key: &LockKey,
    parsed: &Acquire<'_, RedisString>,
    tie: Option<Tie>,
    timeout_ms: i64,
    sync: bool,
) -> RedisResult {
    let handle = blocking::block::<Waiting>(ctx, timeout_ms)?;
    let stretch = Stretch::of(sync, true, parsed.ttl_ms);
    if sync {
        let key = std::slice::from_ref(parsed.key);
        synced::waiting(handle, synced::release_of(ctx, key, parsed.owner, stretch));
    }
    let (db, name) = (selected_db(ctx), parsed.key.as_slice());
    let waiter = Waiter {
        handle,
        owner: parsed.owner.as_slice().into(),
        ttl_ms: Stretch::lease_ms(stretch, parsed.ttl_ms),
        mode: parsed.mode,
        reentrant: parsed.reentrant,
        ties: tie.into_iter().collect(),
        set: false,
        value: parsed.value.map(|value| value.as_slice().into()),
    };
    let next = machine::wait(key.lock(), &mut state::waiters(), db, name, waiter);
    looks::look_again(ctx, key, db, name, next);
    Ok(RedisValue::NoReply)
}

/// `LOCK.RELEASE key owner`: releases one hold of `owner`'s holding; the last one ends it,
/// and the last holding deletes the key. Waiters that fit now are granted in the same step.
///
/// Replies `1` when released, `0` when there is no lock, `-1` when others hold it but not
/// `owner`.
///
/// # Errors
/// Arity, owner, `WRONGTYPE`.
pub fn release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let parsed = args::release(&args).map_err(replies::arg_error)?;
    let (name, owner) = (parsed.key, parsed.owner);
    let mut key = LockKey::write(ctx, name)?;
    let was = session::tied_to(&key, owner);
    let now = clock::now_ms();
    let reply = looks::decide(ctx, &mut key, name, Some(owner), now, |scope| {
        scope.release(owner);
    })?;
    session::settle(ctx, &key, name, owner, was, None);
    reply_for(reply, "lock.release")
}

/// `LOCK.RENEW key owner ttl-ms [SESSION id] [SYNC | NOSYNC]`: resets the lease of `owner`'s holding to
/// `ttl-ms` from now; with `SESSION` (or the session the connection uses), the holding is tied
/// to that session from now on (clients tie their holdings to a new session this way after a
/// failover). A lease that has ended is not brought back.
///
/// Replies `1` when renewed, `0` when there is no lock, `-1` when others hold it but not
/// `owner`.
///
/// A renewal replies once the in-sync set has it, as a grant does.
///
/// # Errors
/// Arity, syntax, owner, TTL, `WRONGTYPE`, a session id that is invalid or unknown; `SYNC` where
/// a client cannot block; `NOREPLICAS` for a renewal the in-sync set did not get (the lease
/// from before it is the one to count on).
pub fn renew(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let parsed = args::renew(&args, &config::limits()).map_err(replies::arg_error)?;
    let sync = synced::wanted(ctx, parsed.sync)?;
    let session = session::of_command(ctx, parsed.session)?;
    let (name, owner) = (parsed.key, parsed.owner);
    let now = clock::now_ms();
    let deadline = lease_deadline(now, parsed.ttl_ms, "lock.renew")?;
    let mut key = LockKey::write(ctx, name)?;
    let was = session::tied_to(&key, owner);
    let tie = session::log(ctx, session, name, deadline);
    let reply = looks::decide(ctx, &mut key, name, Some(owner), now, |scope| {
        scope.renew(owner, deadline, tie);
    })?;
    session::settle(ctx, &key, name, owner, was, tie);
    drop(key);
    held_if(
        ctx,
        sync,
        reply_for(reply, "lock.renew")?,
        1,
        synced::Undo::Renewal,
    )
}

/// The reply to a write: held until the in-sync set has it ([`synced::hold`]) when `sync` and
/// the command replied `wrote` (the write counts: a renewal, or a set renewed whole);
/// `reply` at once otherwise.
///
/// # Errors
/// `NOREPLICAS` from [`synced::hold`].
pub fn held_if(
    ctx: &Context,
    sync: bool,
    reply: RedisValue,
    wrote: i64,
    undo: synced::Undo,
) -> RedisResult {
    if sync && reply == RedisValue::Integer(wrote) {
        synced::hold(ctx, reply, undo)
    } else {
        Ok(reply)
    }
}

/// A waiter leaving without its answer: its place in the queue ([`looks::Leaving`]), and a
/// synced grant held for it ([`synced::left`]).
pub struct Waiting;

impl blocking::Leaving for Waiting {
    fn left(ctx: &Context, blocked: blocking::Blocked, connected: bool) {
        <Leaving as blocking::Leaving>::left(ctx, blocked, connected);
        synced::left(ctx, blocked, connected);
    }
}

/// `LOCK.RAISE key owner token`: if `owner` holds `key`, its holding's fencing token becomes the
/// larger of its own and `token`, and the server's counter at least that, so every later token
/// of this server is larger. The building block of fencing tokens across Redlock's independent
/// masters: a client raises every node that granted it to the largest token of the quorum.
///
/// Replies with the holding's token afterwards, or null when `owner` does not hold the lock.
///
/// # Errors
/// Arity, owner, `WRONGTYPE`; `ERR token out of range` for a token below 1 or above what this
/// server could issue now from a clock `lock.max-clock-skew-ms` ahead of its own.
pub fn raise(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let now = clock::now_ms();
    let max_token = fence::raise_limit(now, config::max_clock_skew_ms());
    let parsed = args::raise(&args, max_token).map_err(replies::arg_error)?;
    let (name, owner) = (parsed.key, parsed.owner);
    let mut key = LockKey::write(ctx, name)?;
    let reply = looks::decide(ctx, &mut key, name, Some(owner), now, |scope| {
        scope.raise(owner, parsed.token);
    })?;
    reply_for(reply, "lock.raise")
}

/// The reply to a command from the core's [`Reply`]; `command` names it in errors.
///
/// # Errors
/// A refusal, as a Redis error reply.
pub fn reply_for(reply: Reply, command: &str) -> RedisResult {
    match reply {
        Reply::Token(token) => Ok(replies::token(token)),
        Reply::Integer(n) => Ok(RedisValue::Integer(n)),
        // A granted set's tokens are in its locks' replies, which its command replies with.
        Reply::Null | Reply::Busy | Reply::Nothing | Reply::Tokens => Ok(RedisValue::Null),
        Reply::Refused(refusal) => Err(replies::refusal(refusal, command)),
    }
}

/// `LOCK.FENCE key [owner]`: with `owner`, its holding's fencing token if it holds the lock;
/// without, the exclusive holder's token, or the largest of a shared lock's holders'. Null
/// otherwise. Read-only.
///
/// # Errors
/// Arity, owner, `WRONGTYPE`.
pub fn fence(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let parsed = args::fence(&args).map_err(replies::arg_error)?;
    let key = LockKey::read(ctx, parsed.key)?;
    let now = now_signed();
    let token = key.lock().and_then(|lock| match parsed.owner {
        Some(owner) => lock.token_of(owner, now),
        None => lock.newest_token(now),
    });
    Ok(token.map_or(RedisValue::Null, replies::token))
}

/// `LOCK.INFO key`: null when free. For an exclusive lock a map of `owner`, `token`, `ttl` (ms
/// left, `-1` if the key was made persistent), `holds`, `waiters`, `mode` (`exclusive`) and
/// `session` (the session the holding is tied to, or null); for a shared one `mode`
/// (`shared`), `limit` (-1: none), `holders`, `token` (the largest), `ttl` (the longest lease
/// left), `waiters` and `owners`, one map of `owner`, `token`, `ttl`, `holds` and `session` per
/// holder. Read-only; O(holders).
///
/// # Errors
/// Arity, `WRONGTYPE`.
pub fn info(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let name = args::info(&args).map_err(replies::arg_error)?;
    let key = LockKey::read(ctx, name)?;
    let ttl = RedisValue::Integer(key.remaining_ms().unwrap_or(-1));
    let waiting = RedisValue::Integer(waiting(ctx, name));
    Ok(match key.lock() {
        None => RedisValue::Null,
        Some(Lock::Exclusive(holding)) => map([
            ("owner", RedisValue::StringBuffer(holding.owner.to_vec())),
            ("token", replies::token(holding.token)),
            ("ttl", ttl),
            ("holds", RedisValue::Integer(i64::from(holding.holds))),
            ("waiters", waiting),
            ("mode", RedisValue::SimpleStringStatic("exclusive")),
            ("session", session_id(holding.tie)),
        ]),
        Some(Lock::Shared(shared)) => {
            let now = now_signed();
            let owners: Vec<RedisValue> = shared
                .holders
                .iter()
                .filter(|holder| holder.deadline_ms > now)
                .map(|holder| {
                    map([
                        ("owner", RedisValue::StringBuffer(holder.owner.to_vec())),
                        ("token", replies::token(holder.token)),
                        ("ttl", RedisValue::Integer(holder.deadline_ms - now)),
                        ("holds", RedisValue::Integer(i64::from(holder.holds))),
                        ("session", session_id(holder.tie)),
                    ])
                })
                .collect();
            let newest = key.lock().and_then(|lock| lock.newest_token(now));
            map([
                ("mode", RedisValue::SimpleStringStatic("shared")),
                (
                    "limit",
                    RedisValue::Integer(shared.limit.map_or(-1, i64::from)),
                ),
                ("holders", RedisValue::Integer(len(owners.len()))),
                ("token", newest.map_or(RedisValue::Null, replies::token)),
                ("ttl", ttl),
                ("waiters", waiting),
                ("owners", RedisValue::Array(owners)),
            ])
        }
    })
}

/// The id of the session a holding is tied to, or null (none, or it ended).
fn session_id(tie: Option<Tie>) -> RedisValue {
    tie.and_then(session::id_of)
        .map_or(RedisValue::Null, RedisValue::BulkString)
}

/// The unix time in ms at which a lease of `ttl_ms` given at `now_ms` ends.
///
/// # Errors
/// `ERR invalid expire time in '<command>' command` for a lease that is not positive or a
/// deadline past the largest time Redis stores, as `SET ... PX` reports it.
pub fn lease_deadline(now_ms: u64, ttl_ms: i64, command: &str) -> Result<i64, RedisError> {
    machine::lease_deadline(now_ms, ttl_ms)
        .ok_or_else(|| replies::refusal(Refusal::InvalidExpire, command))
}

fn waiting(ctx: &Context, name: &RedisString) -> i64 {
    len(state::waiters().count(selected_db(ctx), name.as_slice()))
}

fn len(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

fn now_signed() -> i64 {
    i64::try_from(clock::now_ms()).unwrap_or(i64::MAX)
}
