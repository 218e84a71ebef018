//! How a lock's writes reach replicas and the AOF: as deterministic effects, never as the
//! command itself.
//!
//! A replica or an AOF replay must not re-evaluate "now" or the fencing counter: it would
//! compute another deadline and another token. So every write is sent as the state it left
//! behind — `LOCK.APPLY key owner token holds [PXAT unix-ms]` with the absolute lease
//! deadline and the explicit token — or as `DEL key` when the lock was freed. This is the
//! "replicate effects, not commands" rule of Redis's module API (`RedisModule_Replicate`) and of
//! Redis's own scripts since 7.0. Keyspace notifications for the writes are sent from here too.
//!
//! These run on every write, so they call `RedisModule_Replicate` and
//! `RedisModule_NotifyKeyspaceEvent` directly with a format string and static names: the
//! crate's wrappers allocate a C string per call and a module string per argument.

use std::ffi::CStr;
use std::os::raw::{c_char, c_longlong};

use redis_module::{
    Context, ContextFlags, NextArg, RedisError, RedisResult, RedisString, RedisValue, raw,
};

use crate::fence;
use crate::key::LockKey;
use crate::lock::Lock;

/// The internal command that carries a lock's state to replicas and the AOF.
pub const APPLY: &CStr = c"LOCK.APPLY";

/// Sends "`key` is held as `lock`" to replicas and the AOF, with the lease ending at unix time
/// `deadline_ms`, or keeping the lease it has when `None`.
pub fn replicate_hold(ctx: &Context, key: &RedisString, lock: &Lock, deadline_ms: Option<i64>) {
    let Some(replicate) = (unsafe { raw::RedisModule_Replicate }) else {
        return;
    };
    let owner = lock.owner.as_ptr().cast::<c_char>();
    let token = fence::as_integer(lock.token);
    let holds = c_longlong::from(lock.holds);
    let ctx = ctx.get_raw();
    unsafe {
        match deadline_ms {
            Some(deadline) => replicate(
                ctx,
                APPLY.as_ptr(),
                c"sbllcl".as_ptr(),
                key.inner,
                owner,
                lock.owner.len(),
                token,
                holds,
                c"PXAT".as_ptr(),
                deadline,
            ),
            None => replicate(
                ctx,
                APPLY.as_ptr(),
                c"sbll".as_ptr(),
                key.inner,
                owner,
                lock.owner.len(),
                token,
                holds,
            ),
        };
    }
}

/// Sends "`key` is free" to replicas and the AOF.
pub fn replicate_free(ctx: &Context, key: &RedisString) {
    if let Some(replicate) = unsafe { raw::RedisModule_Replicate } {
        unsafe { replicate(ctx.get_raw(), c"DEL".as_ptr(), c"s".as_ptr(), key.inner) };
    }
}

/// Publishes the keyspace event `event` (module class: `notify-keyspace-events` with `d`).
pub fn notify(ctx: &Context, event: &CStr, key: &RedisString) {
    if let Some(notify) = unsafe { raw::RedisModule_NotifyKeyspaceEvent } {
        let class = raw::NotifyEvent::MODULE.bits();
        unsafe { notify(ctx.get_raw(), class, event.as_ptr(), key.inner) };
    }
}

/// `LOCK.APPLY key owner token holds [PXAT unix-time-ms]`: sets a lock's state as a master
/// decided it, and raises the fencing counter to at least `token`.
///
/// Runs only from the master's replication stream or while loading the AOF; a client gets an
/// error, so no client can make the server adopt a token of its choosing.
///
/// # Errors
/// `ERR` when a client calls it; arity, syntax and range errors; `WRONGTYPE`.
pub fn apply(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if !ctx
        .get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
    {
        return Err(RedisError::Str(
            "ERR LOCK.APPLY only carries a master's writes to replicas and the AOF; clients cannot call it",
        ));
    }
    let mut args = args.into_iter().skip(1);
    let name = args.next_arg()?;
    let owner = args.next_arg()?;
    let token = args.next_u64()?;
    let holds = args.next_u64()?;
    let deadline = match args.next() {
        None => None,
        Some(word) if word.as_slice().eq_ignore_ascii_case(b"PXAT") => Some(args.next_i64()?),
        Some(_) => return Err(RedisError::Str("ERR syntax error")),
    };
    args.done()?;
    let lock = Lock::from_parts(owner.as_slice(), token, holds).ok_or(RedisError::Str(
        "ERR invalid owner, fencing token or hold count in LOCK.APPLY",
    ))?;

    let mut key = LockKey::write(ctx, &name)?;
    key.store(lock)?;
    if let Some(deadline) = deadline {
        key.set_deadline(deadline)?;
    }
    fence::counter().observe(token);
    // A replica's own AOF gets the effect too; its sub-replicas get the master's stream.
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}
