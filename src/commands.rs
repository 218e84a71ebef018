//! The `LOCK.*` commands a client calls: argument parsing, the write through
//! [`crate::writes`], the hand-over to waiters, and the reply.
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
use crate::fence;
use crate::handover::{self, Wanted};
use crate::info::CONTENDED;
use crate::key::{LockKey, selected_db};
use crate::lock::{Lock, Mode, Release, Renew, check_owner};
use crate::writes::{self, Grant, Request};

/// `LOCK.ACQUIRE key owner ttl-ms [REENTRANT] [WAIT timeout-ms] [SHARED [LIMIT n]]`: takes the
/// lock for `owner` with a lease of `ttl-ms` — exclusively, or with `SHARED` as one of its
/// shared holders (at most `n` with `LIMIT`) — or resets the lease when `owner` already holds
/// it (`REENTRANT` also counts one more hold). With `WAIT`, a client that finds the lock busy
/// blocks until the lock is handed to it, in arrival order, or `timeout-ms` passes (0: no
/// limit).
///
/// Replies with the holding's fencing token, or null when the lock is busy (or stayed busy
/// until the timeout), and at once when a shared holder asks for it exclusively while others
/// hold it too.
///
/// # Errors
/// Arity, owner, TTL, timeout, limit, syntax, `WRONGTYPE`, a different `LIMIT` than the lock's,
/// and no fencing token to issue.
pub fn acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let parsed = AcquireArgs::parse(args)?;
    parse_owner(&parsed.owner)?;
    let now = clock::now_ms();
    let deadline = lease_deadline(now, parsed.ttl_ms, "lock.acquire")?;
    let name = &parsed.name;

    // Waiters come first: a lock that can take them is theirs, not this newcomer's.
    handover::hand_over(ctx, name)?;
    let mut key = LockKey::write(ctx, name)?;
    let queued = waiters().total() > 0 && waiting(ctx, name) > 0;
    let request = Request {
        owner: &parsed.owner,
        mode: parsed.mode,
        reentrant: parsed.reentrant,
        now_ms: now,
        deadline_ms: deadline,
    };
    // When to look at the lock again for a waiter, and the answer when not waiting.
    let (check_in_ms, answer) = match writes::acquire(ctx, &mut key, name, &request, queued)? {
        Grant::Held(token) => {
            let shared = matches!(key.lock(), Some(Lock::Shared(_)));
            handover::watch(ctx, &key, name);
            drop(key);
            if shared {
                // A writer that downgraded lets the readers queued first join it.
                handover::hand_over(ctx, name)?;
            }
            return Ok(token_reply(token));
        }
        Grant::UpgradeRefused => return Ok(RedisValue::Null),
        Grant::LimitDiffers(limit) => return Err(limit_differs(parsed.mode, limit)),
        Grant::Busy => {
            CONTENDED.bump();
            (handover::check_in(&key, true), Ok(RedisValue::Null))
        }
        Grant::TooSoon { retry_in_ms } => {
            let retry_in_ms = i64::try_from(retry_in_ms).unwrap_or(i64::MAX);
            (Some(retry_in_ms), Err(too_soon(retry_in_ms)))
        }
    };
    match parsed.wait_ms {
        Some(timeout) if can_block(ctx) => {
            drop(key);
            let wanted = Wanted {
                owner: parsed.owner.as_slice(),
                ttl_ms: parsed.ttl_ms,
                mode: parsed.mode,
                reentrant: parsed.reentrant,
            };
            handover::wait(ctx, name, &wanted, timeout, check_in_ms)
        }
        _ => answer,
    }
}

/// The arguments of `LOCK.ACQUIRE`, options in any order, each at most once.
struct AcquireArgs {
    name: RedisString,
    owner: RedisString,
    ttl_ms: i64,
    reentrant: bool,
    wait_ms: Option<i64>,
    mode: Mode,
}

impl AcquireArgs {
    fn parse(args: Vec<RedisString>) -> Result<Self, RedisError> {
        let mut args = args.into_iter().skip(1);
        let name = args.next_arg()?;
        let owner = args.next_arg()?;
        let ttl = args.next_arg()?;
        let (mut reentrant, mut wait_ms, mut shared, mut limit) = (false, None, false, None);
        while let Some(option) = args.next() {
            let option = option.as_slice();
            if option.eq_ignore_ascii_case(b"REENTRANT") && !reentrant {
                reentrant = true;
            } else if option.eq_ignore_ascii_case(b"SHARED") && !shared {
                shared = true;
            } else if option.eq_ignore_ascii_case(b"WAIT") && wait_ms.is_none() {
                wait_ms = Some(parse_timeout(&value_of(&mut args)?)?);
            } else if option.eq_ignore_ascii_case(b"LIMIT") && limit.is_none() {
                limit = Some(parse_limit(&value_of(&mut args)?)?);
            } else {
                return Err(RedisError::Str("ERR syntax error"));
            }
        }
        let mode = match (shared, limit) {
            (true, limit) => Mode::Shared(limit),
            (false, None) => Mode::Exclusive,
            (false, Some(_)) => return Err(RedisError::Str("ERR syntax error")),
        };
        Ok(Self {
            name,
            owner,
            ttl_ms: parse_ttl(&ttl)?,
            reentrant,
            wait_ms,
            mode,
        })
    }
}

/// The value after an option word, or `ERR syntax error` when it is missing.
fn value_of(args: &mut impl Iterator<Item = RedisString>) -> Result<RedisString, RedisError> {
    args.next().ok_or(RedisError::Str("ERR syntax error"))
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
    let mut args = args.into_iter().skip(1);
    let name = args.next_arg()?;
    let owner = args.next_arg()?;
    args.done()?;
    parse_owner(&owner)?;
    let mut key = LockKey::write(ctx, &name)?;
    let released = writes::release(ctx, &mut key, &name, &owner)?;
    handover::watch(ctx, &key, &name);
    drop(key);
    Ok(RedisValue::Integer(match released {
        Release::Missing => 0,
        Release::HeldByOther => -1,
        Release::Freed | Release::Left => {
            handover::hand_over(ctx, &name)?;
            1
        }
        Release::Decremented { .. } => 1,
    }))
}

/// `LOCK.RENEW key owner ttl-ms`: resets the lease of `owner`'s holding to `ttl-ms` from now.
/// A lease that has ended is not brought back.
///
/// Replies `1` when renewed, `0` when there is no lock, `-1` when others hold it but not
/// `owner`.
///
/// # Errors
/// Arity, owner, TTL, `WRONGTYPE`.
pub fn renew(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let mut args = args.into_iter().skip(1);
    let name = args.next_arg()?;
    let owner = args.next_arg()?;
    let ttl = args.next_arg()?;
    args.done()?;
    parse_owner(&owner)?;
    let now = clock::now_ms();
    let deadline = lease_deadline(now, parse_ttl(&ttl)?, "lock.renew")?;

    let mut key = LockKey::write(ctx, &name)?;
    let renewed = writes::renew(ctx, &mut key, &name, &owner, now, deadline)?;
    handover::watch(ctx, &key, &name);
    Ok(RedisValue::Integer(match renewed {
        Renew::Renewed => 1,
        Renew::Missing => 0,
        Renew::HeldByOther => -1,
    }))
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
    let mut args = args.into_iter().skip(1);
    let name = args.next_arg()?;
    let owner = args.next_arg()?;
    let token = args.next_arg()?;
    args.done()?;
    parse_owner(&owner)?;
    let now = clock::now_ms();
    let limit = fence::raise_limit(now, config::max_clock_skew_ms());
    let token = token
        .parse_unsigned_integer()
        .ok()
        .filter(|token| (1..=limit).contains(token))
        .ok_or(RedisError::Str("ERR token out of range"))?;
    let mut key = LockKey::write(ctx, &name)?;
    let raised = writes::raise(ctx, &mut key, &name, &owner, token, now)?;
    Ok(raised.map_or(RedisValue::Null, token_reply))
}

/// `LOCK.FENCE key [owner]`: with `owner`, its holding's fencing token if it holds the lock;
/// without, the exclusive holder's token, or the largest of a shared lock's holders'. Null
/// otherwise. Read-only.
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
    let now = now_signed();
    let token = key.lock().and_then(|lock| match owner {
        Some(owner) => lock.token_of(owner, now),
        None => lock.newest_token(now),
    });
    Ok(token.map_or(RedisValue::Null, token_reply))
}

/// `LOCK.INFO key`: null when free. For an exclusive lock a map of `owner`, `token`, `ttl` (ms
/// left, `-1` if the key was made persistent), `holds`, `waiters` and `mode` (`exclusive`);
/// for a shared one `mode` (`shared`), `limit` (-1: none), `holders`, `token` (the largest),
/// `ttl` (the longest lease left), `waiters` and `owners`, one map of `owner`, `token`, `ttl`
/// and `holds` per holder. Read-only; O(holders).
///
/// # Errors
/// Arity, `WRONGTYPE`.
pub fn info(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let mut args = args.into_iter().skip(1);
    let name = args.next_arg()?;
    args.done()?;

    let key = LockKey::read(ctx, &name)?;
    let ttl = RedisValue::Integer(key.remaining_ms().unwrap_or(-1));
    let waiting = RedisValue::Integer(waiting(ctx, &name));
    Ok(match key.lock() {
        None => RedisValue::Null,
        Some(Lock::Exclusive(holding)) => map([
            ("owner", RedisValue::StringBuffer(holding.owner.to_vec())),
            ("token", token_reply(holding.token)),
            ("ttl", ttl),
            ("holds", RedisValue::Integer(i64::from(holding.holds))),
            ("waiters", waiting),
            ("mode", RedisValue::SimpleStringStatic("exclusive")),
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
                        ("token", token_reply(holder.token)),
                        ("ttl", RedisValue::Integer(holder.deadline_ms - now)),
                        ("holds", RedisValue::Integer(i64::from(holder.holds))),
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
                ("token", newest.map_or(RedisValue::Null, token_reply)),
                ("ttl", ttl),
                ("waiters", waiting),
                ("owners", RedisValue::Array(owners)),
            ])
        }
    })
}

/// A reply map with fields in this order (RESP3 map, RESP2 flat array).
fn map<const N: usize>(fields: [(&'static str, RedisValue); N]) -> RedisValue {
    RedisValue::OrderedMap(
        fields
            .into_iter()
            .map(|(field, value)| (RedisValueKey::from(field), value))
            .collect(),
    )
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

/// A `LIMIT`: an integer from 1 to 2^31 - 1.
fn parse_limit(limit: &RedisString) -> Result<u32, RedisError> {
    limit
        .parse_integer()
        .ok()
        .filter(|n| (1..=i64::from(i32::MAX)).contains(n))
        .and_then(|n| u32::try_from(n).ok())
        .ok_or(RedisError::Str(
            "ERR value is not an integer or out of range",
        ))
}

/// The error for [`Grant::LimitDiffers`]: `ERR LIMIT m differs from the lock's n`, each `none`
/// when there is no limit.
#[must_use]
pub fn limit_differs(asked: Mode, lock: Option<u32>) -> RedisError {
    let shown = |limit: Option<u32>| limit.map_or_else(|| "none".to_owned(), |n| n.to_string());
    let asked = match asked {
        Mode::Shared(limit) => limit,
        Mode::Exclusive => None,
    };
    RedisError::String(format!(
        "ERR LIMIT {} differs from the lock's {}",
        shown(asked),
        shown(lock)
    ))
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

/// The error for [`Grant::TooSoon`]: `TRYAGAIN`, as Redis answers a command that may succeed
/// if repeated shortly.
fn too_soon(retry_in_ms: i64) -> RedisError {
    RedisError::String(format!(
        "TRYAGAIN fencing tokens are ahead of this server's clock; retry in {retry_in_ms} ms"
    ))
}

/// False inside `MULTI`, scripts, functions and `RM_Call`, where a client cannot block.
fn can_block(ctx: &Context) -> bool {
    !ctx.get_flags()
        .intersects(ContextFlags::DENY_BLOCKING | ContextFlags::MULTI | ContextFlags::LUA)
}

fn waiting(ctx: &Context, name: &RedisString) -> i64 {
    len(waiters().count(selected_db(ctx), name.as_slice()))
}

fn len(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

fn now_signed() -> i64 {
    i64::try_from(clock::now_ms()).unwrap_or(i64::MAX)
}

fn token_reply(token: u64) -> RedisValue {
    RedisValue::Integer(fence::as_integer(token))
}
