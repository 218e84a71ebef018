//! The commands on several locks at once — `LOCK.MACQUIRE`, `LOCK.MRELEASE`, `LOCK.MRENEW` —
//! in the `numkeys key [key ...]` form of Redis's `LMPOP` and `SINTERCARD`: parse, let the
//! core decide for the whole set ([`leasehold_core::machine::Set`], through
//! [`crate::looks::decide_set`]), reply.
//!
//! Besides their key specs (for `COMMAND GETKEYS` and ACLs), the commands answer Redis's
//! `getkeys-api` request, which is what Redis Cluster routes module commands by.
//!
//! A set is all or nothing: every key is checked before any is written, and its writes are
//! replicated by one command, which Redis wraps in `MULTI`/`EXEC` for replicas and the AOF
//! when it has several effects. In Redis Cluster the keys must hash to one slot (`CROSSSLOT`
//! otherwise, from the key specs); hash tags (`{order:42}:item:1`) put them there.

use leasehold_core::args;
use leasehold_core::lock::Mode;
use leasehold_core::outcome::{Refusal, Reply};
use leasehold_core::queue::Waiter;
use leasehold_core::session::{Number, Tie};
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use crate::blocking;
use crate::clock;
use crate::commands::{Waiting, held_if, lease_deadline, reply_for};
use crate::config;
use crate::key::LockKey;
use crate::looks;
use crate::replies;
use crate::session;
use crate::synced::{self, Stretch};

/// `LOCK.MACQUIRE numkeys key [key ...] owner ttl-ms [WAIT timeout-ms] [SESSION id]`: takes
/// every lock exclusively for `owner` with a lease of `ttl-ms`, or none; with `SESSION` (or the
/// session the connection uses), tied to that session ([`crate::session`]). Locks newly taken
/// share one new fencing token; a lock `owner` already holds keeps its token and has its lease
/// reset. With `WAIT`, a client that finds any lock busy queues for all of them at once, behind
/// everyone already queued for any of them, until they are handed to it together or
/// `timeout-ms` passes (0: no limit).
///
/// Replies with an array of the fencing tokens, one per key in the order given, or null when
/// any lock is busy (or stayed busy until the timeout).
///
/// # Errors
/// `numkeys`, duplicate keys, more keys than `lock.max-multi-keys`, owner, TTL, timeout,
/// syntax, options of `LOCK.ACQUIRE` that sets do not take (`REENTRANT`, `SHARED`, `LIMIT`),
/// `WRONGTYPE` on any key, no fencing token to issue, and a session id that is invalid or
/// unknown.
pub fn acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if keys_asked(ctx, &args) {
        return Ok(RedisValue::NoReply);
    }
    let parsed = args::macquire(&args, &config::limits()).map_err(replies::arg_error)?;
    let sync = synced::wanted(ctx, parsed.sync)?;
    let session = session::of_command(ctx, parsed.session)?;
    let (names, owner) = (parsed.keys, parsed.owner);
    let now = clock::now_ms();
    let stretch = Stretch::of(sync, parsed.wait_ms.is_some(), parsed.ttl_ms);
    let lease_ms = Stretch::lease_ms(stretch, parsed.ttl_ms);
    let deadline = lease_deadline(now, lease_ms, "lock.macquire")?;
    let mut keys = looks::open_all(ctx, names)?;
    let was = tied_to(&keys, owner);
    let ties = log_all(ctx, session, names, deadline);
    let (reply, replies) = looks::decide_set(ctx, &mut keys, names, Some(owner), now, |set| {
        set.acquire(owner, deadline, &ties);
    })?;
    let busy = matches!(reply, Reply::Busy | Reply::Refused(Refusal::TooSoon { .. }));
    let waits = busy && parsed.wait_ms.is_some() && blocking::can_block(ctx);
    if !waits {
        settle_all(ctx, &keys, names, owner, &was, &ties);
    }
    match (reply, parsed.wait_ms) {
        (Reply::Tokens, _) => {
            drop(keys);
            let tokens = RedisValue::Array(
                replies
                    .into_iter()
                    .map(|reply| match reply {
                        Reply::Token(token) => replies::token(token),
                        _ => RedisValue::Null,
                    })
                    .collect(),
            );
            if sync {
                synced::hold_grant(ctx, tokens, names, owner, stretch)
            } else {
                Ok(tokens)
            }
        }
        (_, Some(timeout)) if waits => {
            let handle = blocking::block::<Waiting>(ctx, timeout)?;
            let stretch = Stretch::of(sync, true, parsed.ttl_ms);
            if sync {
                synced::waiting(handle, synced::release_of(ctx, names, owner, stretch));
            }
            let waiter = Waiter {
                handle,
                owner: owner.as_slice().into(),
                ttl_ms: Stretch::lease_ms(stretch, parsed.ttl_ms),
                mode: Mode::Exclusive,
                reentrant: false,
                ties: ties.into_iter().collect(),
                set: true,
                value: None,
            };
            looks::decide_set(ctx, &mut keys, names, None, now, |set| set.wait(waiter))?;
            Ok(RedisValue::NoReply)
        }
        (reply, _) => reply_for(reply, "lock.macquire"),
    }
}

/// `LOCK.MRELEASE numkeys key [key ...] owner`: releases one hold of `owner`'s holding of each
/// lock, as `LOCK.RELEASE` does (a lock held by another, or free, is skipped); each freed lock
/// goes to its first waiters in the same step.
///
/// Replies with the number of locks released.
///
/// # Errors
/// `numkeys`, duplicate keys, more keys than `lock.max-multi-keys`, arity, owner, `WRONGTYPE`
/// on any key.
pub fn release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if keys_asked(ctx, &args) {
        return Ok(RedisValue::NoReply);
    }
    let parsed = args::mrelease(&args, &config::limits()).map_err(replies::arg_error)?;
    let (names, owner) = (parsed.keys, parsed.owner);
    let mut keys = looks::open_all(ctx, names)?;
    let was = tied_to(&keys, owner);
    let now = clock::now_ms();
    let (reply, _) = looks::decide_set(ctx, &mut keys, names, Some(owner), now, |set| {
        set.release(owner);
    })?;
    settle_all(ctx, &keys, names, owner, &was, &[]);
    reply_for(reply, "lock.mrelease")
}

/// `LOCK.MRENEW numkeys key [key ...] owner ttl-ms [SESSION id]`: when `owner` holds every
/// lock, resets each lease to `ttl-ms` from now (and with `SESSION`, or the session the
/// connection uses, ties each to that session); otherwise renews none — a set is held whole or
/// not at all, so a watchdog learns at once that part of it was lost.
///
/// Replies with the number of locks renewed: all of them, or 0.
///
/// # Errors
/// `numkeys`, duplicate keys, more keys than `lock.max-multi-keys`, arity, syntax, owner, TTL,
/// `WRONGTYPE` on any key, a session id that is invalid or unknown.
pub fn renew(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if keys_asked(ctx, &args) {
        return Ok(RedisValue::NoReply);
    }
    let parsed = args::mrenew(&args, &config::limits()).map_err(replies::arg_error)?;
    let sync = synced::wanted(ctx, parsed.sync)?;
    let session = session::of_command(ctx, parsed.session)?;
    let (names, owner) = (parsed.keys, parsed.owner);
    let now = clock::now_ms();
    let deadline = lease_deadline(now, parsed.ttl_ms, "lock.mrenew")?;
    let mut keys = looks::open_all(ctx, names)?;
    let was = tied_to(&keys, owner);
    let ties = log_all(ctx, session, names, deadline);
    let (reply, _) = looks::decide_set(ctx, &mut keys, names, Some(owner), now, |set| {
        set.renew(owner, deadline, &ties);
    })?;
    settle_all(ctx, &keys, names, owner, &was, &ties);
    drop(keys);
    let renewed = i64::try_from(names.len()).unwrap_or(i64::MAX);
    let reply = reply_for(reply, "lock.mrenew")?;
    held_if(ctx, sync, reply, renewed, synced::Undo::Renewal)
}

/// The tie `owner`'s holding of each of `keys` keeps, before a command changes them.
fn tied_to(keys: &[LockKey], owner: &[u8]) -> Vec<Option<Tie>> {
    keys.iter()
        .map(|key| session::tied_to(key, owner))
        .collect()
}

/// [`session::log`] for each of `names`: the ties, one per key, or none without a session.
fn log_all(
    ctx: &Context,
    session: Option<Number>,
    names: &[RedisString],
    lease_end_ms: i64,
) -> Vec<Tie> {
    names
        .iter()
        .map_while(|name| session::log(ctx, session, name, lease_end_ms))
        .collect()
}

/// [`session::settle`] for each of `keys` (`names`), with what each was tied by before and
/// the tie logged for it (none where `ties` is short).
fn settle_all(
    ctx: &Context,
    keys: &[LockKey],
    names: &[RedisString],
    owner: &RedisString,
    was: &[Option<Tie>],
    ties: &[Tie],
) {
    for (at, (key, name)) in keys.iter().zip(names).enumerate() {
        let before = was.get(at).copied().flatten();
        session::settle(ctx, key, name, owner, before, ties.get(at).copied());
    }
}

/// Answers Redis when it asks where the keys are rather than running the command: Redis
/// Cluster routes (`MOVED`, `ASK`, `CROSSSLOT`) by the `getkeys-api` answer, not by the key
/// specs, for module commands whose keys move (Redis 7.0's `getKeysFromCommand`).
fn keys_asked(ctx: &Context, args: &[RedisString]) -> bool {
    if !ctx.is_keys_position_request() {
        return false;
    }
    for position in args::key_positions(args) {
        if let Ok(position) = i32::try_from(position) {
            ctx.key_at_pos(position);
        }
    }
    true
}
