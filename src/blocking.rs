//! Clients blocked in `LOCK.ACQUIRE ... WAIT`: blocking one, answering it later, and the
//! registry of who waits for which lock.
//!
//! `redis-module` 2.0.8 wraps `RedisModule_BlockClient` only without reply, timeout and
//! disconnect callbacks, so this is the one place that calls the blocked-client API directly.
//! Redis calls the timeout callback on timeout and on `CLIENT UNBLOCK` (which then replies
//! null), and the disconnect callback when the client goes away or is unblocked with
//! `CLIENT UNBLOCK ... ERROR`; both take the waiter off its queue at once.

use std::os::raw::{c_int, c_void};
use std::ptr::{self, NonNull};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use redis_module::{Context, RedisError, RedisValue, raw};

use crate::fence;
use crate::handover;
use crate::key::api;
use crate::waiters::Waiters;

/// A blocked client: the address of its `RedisModuleBlockedClient`, which Redis keeps alive
/// until the client is unblocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Blocked(usize);

/// What a blocked client is finally told.
#[derive(Debug)]
pub enum Outcome {
    /// It holds the lock now, with this fencing token.
    Granted(u64),
    /// It was not granted the lock, with this error reply: the fencing tokens ran out, its
    /// slot moved away, or its `LIMIT` differs from the lock's.
    Failed(String),
    /// It was not granted the lock and gets null: it asked for the lock exclusively while it
    /// held it shared with others.
    Refused,
}

static WAITERS: LazyLock<Mutex<Waiters<Blocked>>> = LazyLock::new(Mutex::default);

/// The clients blocked for each lock. Lock it only for a single call: Redis may re-enter the
/// module (a keyspace event during a grant) while a guard is held.
pub fn waiters() -> MutexGuard<'static, Waiters<Blocked>> {
    WAITERS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Blocks the client running the current command for at most `timeout_ms` (0: no limit).
///
/// # Errors
/// When the server lacks the blocked-client API or refuses to block.
pub fn block(ctx: &Context, timeout_ms: i64) -> Result<Blocked, RedisError> {
    let bc = unsafe {
        api(raw::RedisModule_BlockClient)?(
            ctx.get_raw(),
            Some(reply),
            Some(timed_out),
            Some(free_outcome),
            timeout_ms,
        )
    };
    let bc = NonNull::new(bc).ok_or(RedisError::Str("ERR could not block the client"))?;
    unsafe { api(raw::RedisModule_SetDisconnectCallback)?(bc.as_ptr(), Some(disconnected)) };
    Ok(Blocked(bc.as_ptr() as usize))
}

/// Unblocks `blocked`; it is answered with `outcome` before Redis next sleeps.
pub fn unblock(blocked: Blocked, outcome: Outcome) {
    let Some(unblock) = (unsafe { raw::RedisModule_UnblockClient }) else {
        return;
    };
    let outcome = Box::into_raw(Box::new(outcome)).cast::<c_void>();
    unsafe { unblock(blocked.0 as *mut raw::RedisModuleBlockedClient, outcome) };
}

/// Answers a client unblocked by [`unblock`].
unsafe extern "C" fn reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let outcome = unsafe { raw::RedisModule_GetBlockedClientPrivateData }
        .map_or(ptr::null_mut(), |get| unsafe { get(ctx) })
        .cast::<Outcome>();
    let answer = match unsafe { outcome.as_ref() } {
        Some(Outcome::Granted(token)) => Ok(RedisValue::Integer(fence::as_integer(*token))),
        Some(Outcome::Failed(error)) => Err(RedisError::String(error.clone())),
        Some(Outcome::Refused) | None => Ok(RedisValue::Null),
    };
    context.reply(answer) as c_int
}

/// Timeout or `CLIENT UNBLOCK`: the waiter leaves its queue and gets null.
unsafe extern "C" fn timed_out(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    if let Some(handle) = unsafe { raw::RedisModule_GetBlockedClientHandle } {
        let bc = unsafe { handle(ctx) };
        leave(&context, Blocked(bc as usize));
    }
    context.reply(Ok(RedisValue::Null)) as c_int
}

/// The client disconnected (or was unblocked with an error) while waiting.
unsafe extern "C" fn disconnected(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    leave(&Context::new(ctx), Blocked(bc as usize));
}

/// Takes `blocked` off its queue; those behind it get a look.
fn leave(ctx: &Context, blocked: Blocked) {
    let left = waiters().remove(blocked);
    if let Some((db, key)) = left {
        handover::waiter_left(ctx, db, &key);
    }
}

unsafe extern "C" fn free_outcome(_ctx: *mut raw::RedisModuleCtx, outcome: *mut c_void) {
    if !outcome.is_null() {
        drop(unsafe { Box::from_raw(outcome.cast::<Outcome>()) });
    }
}
