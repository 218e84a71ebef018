//! The `LOCK.*` commands a client calls: argument parsing, the lock rules from [`crate::lock`]
//! applied to the key, replication of the effect, keyspace notifications and the reply.
//!
//! Replies and errors follow Redis's own commands: null for "no lock" (RESP2 `$-1`, RESP3
//! `_`), `ERR value is not an integer or out of range` and `ERR invalid expire time in '...'
//! command` as `SET ... PX` has them, `WRONGTYPE` for a key of another type.

use redis_module::{
    Context, ContextFlags, NextArg, RedisError, RedisResult, RedisString, RedisValue,
    redisvalue::RedisValueKey,
};

use crate::blocking::waiters;
use crate::clock;
use crate::config;
use crate::effects::{notify, replicate_free, replicate_hold};
use crate::fence::{self, Refused};
use crate::handover;
use crate::info::{ACQUISITIONS, CONTENDED, RELEASES, RENEWALS};
use crate::key::{LockKey, selected_db};
use crate::lock::{self, Acquire, Lock, Release, Renew, check_owner};

/// `LOCK.ACQUIRE key owner ttl-ms [REENTRANT] [WAIT timeout-ms]`: takes the lock for `owner`
/// with a lease of `ttl-ms`, or resets the lease when `owner` already holds it (`REENTRANT`
/// also counts one more hold). With `WAIT`, a client that finds the lock held blocks until
/// the lock is handed to it, in arrival order, or `timeout-ms` passes (0: no limit).
///
/// Replies with the holding's fencing token, or null when another owner holds the lock (or
/// kept it until the timeout).
///
/// # Errors
/// Arity, owner, TTL, timeout, syntax, `WRONGTYPE`, and exhausted fencing tokens.
pub fn acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let request = AcquireRequest::parse(args)?;
    let owner = parse_owner(&request.owner)?;
    let now = clock::now_ms();
    let deadline = lease_deadline(now, request.ttl_ms, "lock.acquire")?;

    // Waiters come first: a free lock with a queue is theirs, not this newcomer's.
    handover::hand_over(ctx, &request.name)?;
    let mut key = LockKey::write(ctx, &request.name)?;
    let name = &request.name;
    let grant = acquire_now(ctx, &mut key, name, owner, now, deadline, request.reentrant)?;
    // When to look again for a waiter, and the answer for a client that does not wait.
    let (check_in_ms, answer) = match grant {
        Grant::Held(token) => return Ok(token_reply(token)),
        Grant::Busy => {
            CONTENDED.bump();
            (handover::lease_left(&key), Ok(RedisValue::Null))
        }
        Grant::TooSoon { retry_in_ms } => {
            let retry_in_ms = i64::try_from(retry_in_ms).unwrap_or(i64::MAX);
            (Some(retry_in_ms), Err(too_soon(retry_in_ms)))
        }
    };
    match request.wait_ms {
        Some(timeout) if can_block(ctx) => {
            drop(key);
            handover::wait(ctx, name, owner, request.ttl_ms, timeout, check_in_ms)
        }
        _ => answer,
    }
}

/// The arguments of `LOCK.ACQUIRE`, options in any order, each at most once.
struct AcquireRequest {
    name: RedisString,
    owner: RedisString,
    ttl_ms: i64,
    reentrant: bool,
    wait_ms: Option<i64>,
}

impl AcquireRequest {
    fn parse(args: Vec<RedisString>) -> Result<Self, RedisError> {
        let mut args = args.into_iter().skip(1);
        let name = args.next_arg()?;
        let owner = args.next_arg()?;
        let ttl = args.next_arg()?;
        let (mut reentrant, mut wait_ms) = (false, None);
        while let Some(option) = args.next() {
            let option = option.as_slice();
            if option.eq_ignore_ascii_case(b"REENTRANT") && !reentrant {
                reentrant = true;
            } else if option.eq_ignore_ascii_case(b"WAIT") && wait_ms.is_none() {
                let timeout = args.next().ok_or(RedisError::Str("ERR syntax error"))?;
                wait_ms = Some(parse_timeout(&timeout)?);
            } else {
                return Err(RedisError::Str("ERR syntax error"));
            }
        }
        Ok(Self {
            name,
            owner,
            ttl_ms: parse_ttl(&ttl)?,
            reentrant,
            wait_ms,
        })
    }
}

/// What [`acquire_now`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// `owner` holds the lock now, with this fencing token.
    Held(u64),
    /// Another owner holds it; nothing changed.
    Busy,
    /// The lock is free, but this server can issue no fencing token for `retry_in_ms` ms
    /// ([`fence::Refused::AheadOfClock`]); nothing changed.
    TooSoon {
        /// When a token can be issued, in ms from now.
        retry_in_ms: u64,
    },
}

/// Applies `LOCK.ACQUIRE`'s rules to the open lock `key` named `name` at unix time `now_ms`,
/// with the lease ending at `deadline_ms`, and replicates and notifies a change.
///
/// # Errors
/// Exhausted fencing tokens; a key that cannot be written.
pub fn acquire_now(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    owner: &[u8],
    now_ms: u64,
    deadline_ms: i64,
    reentrant: bool,
) -> Result<Grant, RedisError> {
    match lock::acquire(key.lock(), owner, reentrant) {
        Acquire::Busy => return Ok(Grant::Busy),
        Acquire::New => match fence::counter().issue(now_ms) {
            Ok(token) => {
                key.store(Lock::new(owner, token))?;
                ACQUISITIONS.bump();
            }
            Err(Refused::AheadOfClock { retry_in_ms }) => {
                return Ok(Grant::TooSoon { retry_in_ms });
            }
            Err(Refused::Exhausted) => {
                return Err(RedisError::Str(
                    "ERR fencing tokens exhausted: 2^53 reached",
                ));
            }
        },
        Acquire::Again { holds, .. } => {
            if let Some(lock) = key.lock_mut() {
                lock.holds = holds;
            }
        }
    }
    key.set_deadline(deadline_ms)?;
    let lock = held(key)?;
    replicate_hold(ctx, name, lock, Some(deadline_ms));
    notify(ctx, c"lock.acquire", name);
    Ok(Grant::Held(lock.token))
}

/// The error for [`Grant::TooSoon`]: `TRYAGAIN`, as Redis answers a command that may succeed
/// if repeated shortly.
fn too_soon(retry_in_ms: i64) -> RedisError {
    RedisError::String(format!(
        "TRYAGAIN fencing tokens are ahead of this server's clock; retry in {retry_in_ms} ms"
    ))
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
            drop(key);
            handover::hand_over(ctx, &name)?;
        }
        Release::Decremented { holds } => {
            if let Some(lock) = key.lock_mut() {
                lock.holds = holds;
            }
            replicate_hold(ctx, &name, held(&key)?, None);
        }
    }
    notify(ctx, c"lock.release", &name);
    RELEASES.bump();
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
    let deadline = lease_deadline(clock::now_ms(), parse_ttl(&ttl)?, "lock.renew")?;

    let mut key = LockKey::write(ctx, &name)?;
    match lock::renew(key.lock(), owner) {
        Renew::Missing => return Ok(RedisValue::Integer(0)),
        Renew::HeldByOther => return Ok(RedisValue::Integer(-1)),
        Renew::Renewed => key.set_deadline(deadline)?,
    }
    replicate_hold(ctx, &name, held(&key)?, Some(deadline));
    notify(ctx, c"lock.renew", &name);
    RENEWALS.bump();
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
        ("waiters", RedisValue::Integer(waiting(ctx, &name))),
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

/// A lease in ms: an integer (checked for being positive by [`lease_deadline`]) within
/// `lock.max-ttl-ms`.
fn parse_ttl(ttl: &RedisString) -> Result<i64, RedisError> {
    let ttl = ttl
        .parse_integer()
        .map_err(|_| RedisError::Str("ERR value is not an integer or out of range"))?;
    config::check_ttl(ttl)
}

/// The unix time in ms at which a lease of `ttl_ms` given at `now_ms` ends.
///
/// # Errors
/// `ERR invalid expire time in '<command>' command` for a lease that is not positive or a
/// deadline past the largest time Redis stores, as `SET ... PX` reports it.
pub fn lease_deadline(now_ms: u64, ttl_ms: i64, command: &str) -> Result<i64, RedisError> {
    i64::try_from(now_ms)
        .ok()
        .filter(|_| ttl_ms > 0)
        .and_then(|now| now.checked_add(ttl_ms))
        .ok_or_else(|| {
            RedisError::String(format!("ERR invalid expire time in '{command}' command"))
        })
}

/// A `WAIT` timeout in ms: 0 (no limit) or more, as `BLPOP` takes its timeout.
fn parse_timeout(timeout: &RedisString) -> Result<i64, RedisError> {
    let timeout = timeout
        .parse_integer()
        .map_err(|_| RedisError::Str("ERR timeout is not an integer or out of range"))?;
    if timeout < 0 {
        return Err(RedisError::Str("ERR timeout is negative"));
    }
    Ok(timeout)
}

/// False inside `MULTI`, scripts, functions and `RM_Call`, where a client cannot block.
fn can_block(ctx: &Context) -> bool {
    !ctx.get_flags()
        .intersects(ContextFlags::DENY_BLOCKING | ContextFlags::MULTI | ContextFlags::LUA)
}

fn waiting(ctx: &Context, name: &RedisString) -> i64 {
    let count = waiters().count(selected_db(ctx), name.as_slice());
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// The lock a command just wrote under `key`.
fn held(key: &LockKey) -> Result<&Lock, RedisError> {
    key.lock().ok_or(RedisError::Str(
        "ERR the lock vanished while it was written",
    ))
}

fn token_reply(token: u64) -> RedisValue {
    RedisValue::Integer(fence::as_integer(token))
}
