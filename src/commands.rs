//! The `LOCK.*` commands a client calls: argument parsing, the lock rules from [`crate::lock`]
//! applied to the key, replication of the effect, keyspace notifications and the reply.
//!
//! Replies and errors follow Redis's own commands: null for "no lock" (RESP2 `$-1`, RESP3
//! `_`), `ERR value is not an integer or out of range` and `ERR invalid expire time in '...'
//! command` as `SET ... PX` has them, `WRONGTYPE` for a key of another type.

use redis_module::{
    Context, NextArg, NotifyEvent, RedisError, RedisResult, RedisString, RedisValue,
    redisvalue::RedisValueKey,
};

use crate::clock;
use crate::effects::{replicate_free, replicate_hold};
use crate::fence;
use crate::key::LockKey;
use crate::lock::{self, Acquire, Lock, Release, Renew, check_owner};

/// `LOCK.ACQUIRE key owner ttl-ms [REENTRANT]`: takes the lock for `owner` with a lease of
/// `ttl-ms`, or resets the lease when `owner` already holds it (`REENTRANT` also counts one
/// more hold).
///
/// Replies with the holding's fencing token, or null when another owner holds the lock.
///
/// # Errors
/// Arity, owner, TTL, syntax, `WRONGTYPE`, and exhausted fencing tokens.
pub fn acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let mut args = args.into_iter().skip(1);
    let name = args.next_arg()?;
    let owner = args.next_arg()?;
    let ttl = args.next_arg()?;
    let mut reentrant = false;
    for option in args {
        if option.as_slice().eq_ignore_ascii_case(b"REENTRANT") && !reentrant {
            reentrant = true;
        } else {
            return Err(RedisError::Str("ERR syntax error"));
        }
    }
    let owner = parse_owner(&owner)?;
    let now = clock::now_ms();
    let deadline = parse_deadline(&ttl, now, "lock.acquire")?;

    let mut key = LockKey::write(ctx, &name)?;
    match lock::acquire(key.lock(), owner, reentrant) {
        Acquire::Busy => return Ok(RedisValue::Null),
        Acquire::New => {
            let token = fence::counter()
                .issue(now)
                .map_err(|_| RedisError::Str("ERR fencing tokens exhausted: 2^53 reached"))?;
            key.store(Lock::new(owner, token))?;
        }
        Acquire::Again { holds, .. } => {
            if let Some(lock) = key.lock_mut() {
                lock.holds = holds;
            }
        }
    }
    key.set_deadline(deadline)?;
    let lock = held(&key)?;
    replicate_hold(ctx, &name, lock, Some(deadline));
    ctx.notify_keyspace_event(NotifyEvent::MODULE, "lock.acquire", &name);
    Ok(token_reply(lock.token))
}

/// `LOCK.RELEASE key owner`: releases one hold; the last one deletes the key.
///
/// Replies `1` when released, `0` when there is no lock, `-1` when another owner holds it.
///
/// # Errors
/// Arity, owner, `WRONGTYPE`.
pub fn release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let (name, owner) = key_and_owner(args)?;
    let owner = parse_owner(&owner)?;
    let mut key = LockKey::write(ctx, &name)?;
    match lock::release(key.lock(), owner) {
        Release::Missing => return Ok(RedisValue::Integer(0)),
        Release::HeldByOther => return Ok(RedisValue::Integer(-1)),
        Release::Freed => {
            key.delete()?;
            replicate_free(ctx, &name);
        }
        Release::Decremented { holds } => {
            if let Some(lock) = key.lock_mut() {
                lock.holds = holds;
            }
            replicate_hold(ctx, &name, held(&key)?, None);
        }
    }
    ctx.notify_keyspace_event(NotifyEvent::MODULE, "lock.release", &name);
    Ok(RedisValue::Integer(1))
}

/// `LOCK.RENEW key owner ttl-ms`: resets the lease of `owner`'s holding to `ttl-ms` from now.
///
/// Replies `1` when renewed, `0` when there is no lock, `-1` when another owner holds it.
///
/// # Errors
/// Arity, owner, TTL, `WRONGTYPE`.
pub fn renew(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let mut args = args.into_iter().skip(1);
    let name = args.next_arg()?;
    let owner = args.next_arg()?;
    let ttl = args.next_arg()?;
    args.done()?;
    let owner = parse_owner(&owner)?;
    let deadline = parse_deadline(&ttl, clock::now_ms(), "lock.renew")?;

    let mut key = LockKey::write(ctx, &name)?;
    match lock::renew(key.lock(), owner) {
        Renew::Missing => return Ok(RedisValue::Integer(0)),
        Renew::HeldByOther => return Ok(RedisValue::Integer(-1)),
        Renew::Renewed => key.set_deadline(deadline)?,
    }
    replicate_hold(ctx, &name, held(&key)?, Some(deadline));
    ctx.notify_keyspace_event(NotifyEvent::MODULE, "lock.renew", &name);
    Ok(RedisValue::Integer(1))
}

/// `LOCK.FENCE key [owner]`: the current holding's fencing token; with `owner`, only if
/// `owner` is the holder. Null otherwise. Read-only.
///
/// # Errors
/// Arity, owner, `WRONGTYPE`.
pub fn fence(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let mut args = args.into_iter().skip(1);
    let name = args.next_arg()?;
    let owner = args.next();
    args.done()?;
    let owner = owner.as_ref().map(parse_owner).transpose()?;

    let key = LockKey::read(ctx, &name)?;
    Ok(match key.lock() {
        Some(lock) if owner.is_none_or(|owner| lock.is_held_by(owner)) => token_reply(lock.token),
        _ => RedisValue::Null,
    })
}

/// `LOCK.INFO key`: null when free, else a map of `owner`, `token`, `ttl` (ms left, `-1` if
/// the key was made persistent), `holds` and `waiters`. Read-only.
///
/// # Errors
/// Arity, `WRONGTYPE`.
pub fn info(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let mut args = args.into_iter().skip(1);
    let name = args.next_arg()?;
    args.done()?;

    let key = LockKey::read(ctx, &name)?;
    let Some(lock) = key.lock() else {
        return Ok(RedisValue::Null);
    };
    let fields = [
        ("owner", RedisValue::StringBuffer(lock.owner.to_vec())),
        ("token", token_reply(lock.token)),
        ("ttl", RedisValue::Integer(key.remaining_ms().unwrap_or(-1))),
        ("holds", RedisValue::Integer(i64::from(lock.holds))),
        ("waiters", RedisValue::Integer(0)),
    ];
    Ok(RedisValue::OrderedMap(
        fields
            .into_iter()
            .map(|(field, value)| (RedisValueKey::from(field), value))
            .collect(),
    ))
}

fn key_and_owner(args: Vec<RedisString>) -> Result<(RedisString, RedisString), RedisError> {
    let mut args = args.into_iter().skip(1);
    let name = args.next_arg()?;
    let owner = args.next_arg()?;
    args.done()?;
    Ok((name, owner))
}

fn parse_owner(owner: &RedisString) -> Result<&[u8], RedisError> {
    check_owner(owner.as_slice()).map_err(|_| RedisError::Str("ERR owner must be 1 to 256 bytes"))
}

/// The lease deadline (unix ms) for a TTL argument given at `now_ms`, checked as `SET ... PX`
/// checks its expire time.
fn parse_deadline(ttl: &RedisString, now_ms: u64, command: &str) -> Result<i64, RedisError> {
    let ttl = ttl
        .parse_integer()
        .map_err(|_| RedisError::Str("ERR value is not an integer or out of range"))?;
    i64::try_from(now_ms)
        .ok()
        .filter(|_| ttl > 0)
        .and_then(|now| now.checked_add(ttl))
        .ok_or_else(|| {
            RedisError::String(format!("ERR invalid expire time in '{command}' command"))
        })
}

/// The lock a command just wrote under `key`.
fn held(key: &LockKey) -> Result<&Lock, RedisError> {
    key.lock().ok_or(RedisError::Str(
        "ERR the lock vanished while it was written",
    ))
}

fn token_reply(token: u64) -> RedisValue {
    RedisValue::Integer(i64::try_from(token).unwrap_or(i64::MAX))
}
