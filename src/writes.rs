//! Every write to a lock key: a rule of [`crate::lock`] carried out on the key, its effect
//! replicated ([`crate::effects`]), its keyspace event published and its `INFO lock` counter
//! bumped. The commands and the hand-over to waiters both write through here.

use redis_module::{Context, RedisError, RedisString};

use crate::effects::{notify, replicate_drop, replicate_free, replicate_holding};
use crate::fence::{self, Refused};
use crate::info::{ACQUISITIONS, EXPIRED_LEASES, RELEASES, RENEWALS};
use crate::key::LockKey;
use crate::lock::{self, Acquire, Lock, Mode, Release, Renew};

/// What `LOCK.ACQUIRE` (or a waiter's turn) asks for.
pub struct Request<'a> {
    /// The owner it acquires for (1 to 256 bytes, checked).
    pub owner: &'a RedisString,
    /// Exclusive, or shared with its `LIMIT`.
    pub mode: Mode,
    /// `REENTRANT`: one more hold for a holder.
    pub reentrant: bool,
    /// When it asked, unix ms.
    pub now_ms: u64,
    /// When a lease granted now ends, unix ms.
    pub deadline_ms: i64,
}

/// What [`acquire`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// The owner holds the lock now, with this fencing token.
    Held(u64),
    /// Others hold it in a conflicting mode, the limit is reached, or others queue first;
    /// nothing changed.
    Busy,
    /// [`Acquire::UpgradeRefused`]: null at once, even with `WAIT`; nothing changed.
    UpgradeRefused,
    /// `SHARED` with another `LIMIT` than the lock's (`None`: no limit); nothing changed.
    LimitDiffers(Option<u32>),
    /// The lock is free, but this server can issue no fencing token for `retry_in_ms` ms
    /// ([`Refused::AheadOfClock`]); nothing changed.
    TooSoon {
        /// When a token can be issued, in ms from now.
        retry_in_ms: u64,
    },
}

/// Applies `LOCK.ACQUIRE`'s rules for `request` to the open lock `key` named `name`, with
/// `queued` true when other clients wait for it.
///
/// # Errors
/// Exhausted fencing tokens; a key that cannot be written.
pub fn acquire(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    request: &Request,
    queued: bool,
) -> Result<Grant, RedisError> {
    expire_shared(ctx, key, name, request.now_ms)?;
    let owner = request.owner.as_slice();
    let decision = lock::acquire(key.lock(), owner, request.mode, request.reentrant, queued);
    match decision {
        Acquire::Busy => return Ok(Grant::Busy),
        Acquire::UpgradeRefused => return Ok(Grant::UpgradeRefused),
        Acquire::LimitDiffers { limit } => return Ok(Grant::LimitDiffers(limit)),
        _ => {}
    }
    let token = if decision.needs_token() {
        match fence::counter().issue(request.now_ms) {
            Ok(token) => token,
            Err(Refused::AheadOfClock { retry_in_ms }) => {
                return Ok(Grant::TooSoon { retry_in_ms });
            }
            Err(Refused::Exhausted) => {
                return Err(RedisError::Str(
                    "ERR fencing tokens exhausted: 2^53 reached",
                ));
            }
        }
    } else {
        0
    };
    let deadline = request.deadline_ms;
    if let Some(new) = lock::grant(
        key.lock_mut(),
        owner,
        request.mode,
        decision,
        token,
        deadline,
    ) {
        key.store(new)?;
    }
    if decision.needs_token() {
        ACQUISITIONS.bump();
    }
    let lock = held(key)?;
    let key_deadline = lock.shared_deadline().unwrap_or(deadline);
    let token = lock.token_of(owner, i64::MIN);
    key.set_deadline(key_deadline)?;
    replicate_holding(ctx, name, request.owner, held(key)?, Some(deadline));
    notify(ctx, c"lock.acquire", name);
    token.map(Grant::Held).ok_or(RedisError::Str(
        "ERR the lock vanished while it was written",
    ))
}

/// Applies `LOCK.RELEASE`'s rules for `owner` to the open lock `key` named `name`.
///
/// # Errors
/// A key that cannot be written.
pub fn release(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    owner: &RedisString,
) -> Result<Release, RedisError> {
    expire_shared(ctx, key, name, crate::clock::now_ms())?;
    let decision = lock::release(key.lock(), owner.as_slice());
    match decision {
        Release::Missing | Release::HeldByOther => return Ok(decision),
        Release::Freed => {
            key.delete()?;
            replicate_free(ctx, name);
        }
        Release::Left => {
            let left = key
                .lock_mut()
                .and_then(|lock| lock.remove_holder(owner.as_slice()));
            key.set_shared_deadline()?;
            if let Some(holder) = left {
                replicate_drop(ctx, name, &holder);
            }
        }
        Release::Decremented { holds } => {
            if let Some(lock) = key.lock_mut() {
                lock.set_holds(owner.as_slice(), holds, None);
            }
            replicate_holding(ctx, name, owner, held(key)?, None);
        }
    }
    notify(ctx, c"lock.release", name);
    RELEASES.bump();
    Ok(decision)
}

/// Applies `LOCK.RENEW`'s rules for `owner` to the open lock `key` named `name`: its lease
/// ends at `deadline_ms` now.
///
/// # Errors
/// A key that cannot be written.
pub fn renew(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    owner: &RedisString,
    now_ms: u64,
    deadline_ms: i64,
) -> Result<Renew, RedisError> {
    expire_shared(ctx, key, name, now_ms)?;
    let decision = lock::renew(key.lock(), owner.as_slice());
    if decision != Renew::Renewed {
        return Ok(decision);
    }
    if let Some(Lock::Shared(shared)) = key.lock_mut() {
        let holds = shared.holders.get(owner.as_slice()).map_or(1, |h| h.holds);
        shared.holders.update(owner.as_slice(), holds, deadline_ms);
        key.set_shared_deadline()?;
    } else {
        key.set_deadline(deadline_ms)?;
    }
    replicate_holding(ctx, name, owner, held(key)?, Some(deadline_ms));
    notify(ctx, c"lock.renew", name);
    RENEWALS.bump();
    Ok(decision)
}

/// Applies `LOCK.RAISE` for `owner` to the open lock `key` named `name`: its holding's token
/// becomes at least `token` (already checked against the raise limit), and so does the
/// counter. `None` when `owner` holds nothing.
///
/// # Errors
/// A key that cannot be written.
pub fn raise(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    owner: &RedisString,
    token: u64,
    now_ms: u64,
) -> Result<Option<u64>, RedisError> {
    expire_shared(ctx, key, name, now_ms)?;
    let Some(raised) = key
        .lock_mut()
        .and_then(|lock| lock.raise(owner.as_slice(), token))
    else {
        return Ok(None);
    };
    fence::counter().observe(raised);
    replicate_holding(ctx, name, owner, held(key)?, None);
    notify(ctx, c"lock.raise", name);
    Ok(Some(raised))
}

/// Ends the shared holdings of the open lock `key` named `name` whose lease ended by `now_ms`,
/// each replicated as its removal with a `lock.expire` event; the key goes with the last.
///
/// # Errors
/// A key that cannot be written.
pub fn expire_shared(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    now_ms: u64,
) -> Result<(), RedisError> {
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let Some(Lock::Shared(shared)) = key.lock_mut() else {
        return Ok(());
    };
    if shared
        .holders
        .soonest()
        .is_none_or(|holder| holder.deadline_ms > now)
    {
        return Ok(());
    }
    let mut ended = Vec::new();
    while let Some(holder) = shared.holders.pop_expired(now) {
        ended.push(holder);
    }
    let emptied = shared.holders.is_empty();
    for holder in &ended {
        replicate_drop(ctx, name, holder);
        notify(ctx, c"lock.expire", name);
        EXPIRED_LEASES.bump();
    }
    if emptied {
        key.delete()?;
        replicate_free(ctx, name);
        Ok(())
    } else {
        key.set_shared_deadline()
    }
}

/// The lock a command just wrote under `key`.
fn held(key: &LockKey) -> Result<&Lock, RedisError> {
    key.lock().ok_or(RedisError::Str(
        "ERR the lock vanished while it was written",
    ))
}
