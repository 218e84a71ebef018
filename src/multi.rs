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

use std::collections::HashSet;

use leasehold_core::lock::Mode;
use leasehold_core::outcome::{Refusal, Reply};
use leasehold_core::queue::Waiter;
use redis_module::{Context, NextArg, RedisError, RedisResult, RedisString, RedisValue};

use crate::blocking;
use crate::clock;
use crate::commands::{
    can_block, lease_deadline, parse_owner, parse_timeout, parse_ttl, reply_for, value_of,
};
use crate::config;
use crate::key::LockKey;
use crate::looks::{self, Leaving};
use crate::replies;

/// `LOCK.MACQUIRE numkeys key [key ...] owner ttl-ms [WAIT timeout-ms]`: takes every lock
/// exclusively for `owner` with a lease of `ttl-ms`, or none. Locks newly taken share one new
/// fencing token; a lock `owner` already holds keeps its token and has its lease reset. With
/// `WAIT`, a client that finds any lock busy queues for all of them at once, behind everyone
/// already queued for any of them, until they are handed to it together or `timeout-ms`
/// passes (0: no limit).
///
/// Replies with an array of the fencing tokens, one per key in the order given, or null when
/// any lock is busy (or stayed busy until the timeout).
///
/// # Errors
/// `numkeys`, duplicate keys, more keys than `lock.max-multi-keys`, owner, TTL, timeout,
/// syntax, options of `LOCK.ACQUIRE` that sets do not take (`REENTRANT`, `SHARED`, `LIMIT`),
/// `WRONGTYPE` on any key, and no fencing token to issue.
pub fn acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if keys_asked(ctx, &args) {
        return Ok(RedisValue::NoReply);
    }
    let (names, mut args) = parse_keys(args)?;
    let owner = args.next_arg()?;
    let ttl = args.next_arg()?;
    let mut wait_ms = None;
    while let Some(option) = args.next() {
        let word = option.as_slice();
        if word.eq_ignore_ascii_case(b"WAIT") && wait_ms.is_none() {
            wait_ms = Some(parse_timeout(&value_of(&mut args)?)?);
        } else if [&b"REENTRANT"[..], b"SHARED", b"LIMIT"]
            .iter()
            .any(|unsupported| word.eq_ignore_ascii_case(unsupported))
        {
            return Err(RedisError::String(format!(
                "ERR {} is not supported by LOCK.MACQUIRE",
                option.to_string_lossy().to_ascii_uppercase()
            )));
        } else {
            return Err(RedisError::Str("ERR syntax error"));
        }
    }
    let owner_bytes = parse_owner(&owner)?;
    let ttl_ms = parse_ttl(&ttl)?;
    let now = clock::now_ms();
    let deadline = lease_deadline(now, ttl_ms, "lock.macquire")?;
    let mut keys = looks::open_all(ctx, &names)?;
    let (reply, replies) = looks::decide_set(ctx, &mut keys, &names, Some(&owner), now, |set| {
        set.acquire(owner_bytes, deadline);
    })?;
    let busy = matches!(reply, Reply::Busy | Reply::Refused(Refusal::TooSoon { .. }));
    match (reply, wait_ms) {
        (Reply::Tokens, _) => Ok(RedisValue::Array(
            replies
                .into_iter()
                .map(|reply| match reply {
                    Reply::Token(token) => replies::token(token),
                    _ => RedisValue::Null,
                })
                .collect(),
        )),
        (_, Some(timeout)) if busy && can_block(ctx) => {
            let waiter = Waiter {
                handle: blocking::block::<Leaving>(ctx, timeout)?,
                owner: owner_bytes.into(),
                ttl_ms,
                mode: Mode::Exclusive,
                reentrant: false,
                set: true,
            };
            looks::decide_set(ctx, &mut keys, &names, None, now, |set| set.wait(waiter))?;
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
    let (names, mut args) = parse_keys(args)?;
    let owner = args.next_arg()?;
    args.done()?;
    let owner_bytes = parse_owner(&owner)?;
    let mut keys = looks::open_all(ctx, &names)?;
    let now = clock::now_ms();
    let (reply, _) = looks::decide_set(ctx, &mut keys, &names, Some(&owner), now, |set| {
        set.release(owner_bytes);
    })?;
    reply_for(reply, "lock.mrelease")
}

/// `LOCK.MRENEW numkeys key [key ...] owner ttl-ms`: when `owner` holds every lock, resets
/// each lease to `ttl-ms` from now; otherwise renews none — a set is held whole or not at all,
/// so a watchdog learns at once that part of it was lost.
///
/// Replies with the number of locks renewed: all of them, or 0.
///
/// # Errors
/// `numkeys`, duplicate keys, more keys than `lock.max-multi-keys`, arity, owner, TTL,
/// `WRONGTYPE` on any key.
pub fn renew(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if keys_asked(ctx, &args) {
        return Ok(RedisValue::NoReply);
    }
    let (names, mut args) = parse_keys(args)?;
    let owner = args.next_arg()?;
    let ttl = args.next_arg()?;
    args.done()?;
    let owner_bytes = parse_owner(&owner)?;
    let now = clock::now_ms();
    let deadline = lease_deadline(now, parse_ttl(&ttl)?, "lock.mrenew")?;
    let mut keys: Vec<LockKey> = looks::open_all(ctx, &names)?;
    let (reply, _) = looks::decide_set(ctx, &mut keys, &names, Some(&owner), now, |set| {
        set.renew(owner_bytes, deadline);
    })?;
    reply_for(reply, "lock.mrenew")
}

/// Answers Redis when it asks where the keys are rather than running the command: Redis
/// Cluster routes (`MOVED`, `ASK`, `CROSSSLOT`) by the `getkeys-api` answer, not by the key
/// specs, for module commands whose keys move (Redis 7.0's `getKeysFromCommand`).
fn keys_asked(ctx: &Context, args: &[RedisString]) -> bool {
    if !ctx.is_keys_position_request() {
        return false;
    }
    let numkeys = args
        .get(1)
        .and_then(|numkeys| numkeys.parse_integer().ok())
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    let last = numkeys.saturating_add(1).min(args.len().saturating_sub(1));
    for position in 2..=last {
        if let Ok(position) = i32::try_from(position) {
            ctx.key_at_pos(position);
        }
    }
    true
}

/// The keys of a `numkeys key [key ...]` command, and the arguments after them.
///
/// # Errors
/// Redis's own errors for `numkeys` (as `LMPOP` words them), more keys than
/// `lock.max-multi-keys`, and `ERR duplicate key '<key>'`.
fn parse_keys(
    args: Vec<RedisString>,
) -> Result<(Vec<RedisString>, impl Iterator<Item = RedisString>), RedisError> {
    let mut args = args.into_iter().skip(1);
    let numkeys = args
        .next_arg()?
        .parse_integer()
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or(RedisError::Str("ERR numkeys should be greater than 0"))?;
    let most = config::max_multi_keys();
    if numkeys > most {
        return Err(RedisError::String(format!(
            "ERR numkeys exceeds lock.max-multi-keys ({most})"
        )));
    }
    let names: Vec<RedisString> = args.by_ref().take(numkeys).collect();
    if names.len() < numkeys {
        return Err(RedisError::Str(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    let mut seen = HashSet::with_capacity(numkeys);
    if let Some(twice) = names.iter().find(|name| !seen.insert(name.as_slice())) {
        return Err(RedisError::String(format!(
            "ERR duplicate key '{}'",
            twice.to_string_lossy()
        )));
    }
    Ok((names, args))
}
