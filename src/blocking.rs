//! Blocked clients — in `LOCK.ACQUIRE ... WAIT`, or holding a synced write's reply
//! ([`crate::synced`]): blocking one and answering it later.
//!
//! `redis-module` 2.0.8 wraps `RedisModule_BlockClient` only without reply, timeout and
//! disconnect callbacks, so this is the one place that calls the blocked-client API directly.
//! Redis calls the timeout callback on timeout and on `CLIENT UNBLOCK` (which then replies
//! null), and the disconnect callback when the client goes away or is unblocked with
//! `CLIENT UNBLOCK ... ERROR`; both tell the [`Leaving`] handler the blocking caller named, which
//! takes the waiter off its queue at once.

use std::os::raw::{c_int, c_void};
use std::ptr::{self, NonNull};

use leasehold_core::outcome::Answer;
use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisValue, raw};

use crate::api::api;
use crate::replies;

/// A blocked client: the address of its `RedisModuleBlockedClient`, which Redis keeps alive
/// until the client is unblocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Blocked(usize);

/// What happens when a blocked client leaves without an answer (timeout, `CLIENT UNBLOCK`,
/// disconnect): given to [`block`] by the caller, so this file needs nothing above it.
pub trait Leaving {
    /// `blocked` left its place: `connected` when it is answered now (a timeout or `CLIENT
    /// UNBLOCK`, where keys may be written), not when it disconnected (Redis frees it then).
    fn left(ctx: &Context, blocked: Blocked, connected: bool);
}

/// How a blocked client's reply is made once it is unblocked: run where keys may be written
/// and effects replicated (a blocked client's reply callback).
pub type Reply = Box<dyn FnOnce(&Context) -> RedisResult>;

/// False inside `MULTI`, scripts, functions and `RM_Call`, where a client cannot block.
pub fn can_block(ctx: &Context) -> bool {
    !ctx.get_flags()
        .intersects(ContextFlags::DENY_BLOCKING | ContextFlags::MULTI | ContextFlags::LUA)
}

/// Blocks the client running the current command for at most `timeout_ms` (0: no limit).
///
/// # Errors
/// When the server lacks the blocked-client API or refuses to block.
pub fn block<L: Leaving>(ctx: &Context, timeout_ms: i64) -> Result<Blocked, RedisError> {
    let bc = unsafe {
        api(raw::RedisModule_BlockClient)?(
            ctx.get_raw(),
            Some(reply),
            Some(timed_out::<L>),
            Some(free_reply),
            timeout_ms,
        )
    };
    let bc = NonNull::new(bc).ok_or(RedisError::Str("ERR could not block the client"))?;
    unsafe { api(raw::RedisModule_SetDisconnectCallback)?(bc.as_ptr(), Some(disconnected::<L>)) };
    Ok(Blocked(bc.as_ptr() as usize))
}

/// Unblocks `blocked`; `reply` makes its reply before Redis next sleeps.
pub fn unblock(blocked: Blocked, reply: Reply) {
    let Some(unblock) = (unsafe { raw::RedisModule_UnblockClient }) else {
        return;
    };
    let reply = Box::into_raw(Box::new(Some(reply))).cast::<c_void>();
    unsafe { unblock(blocked.0 as *mut raw::RedisModuleBlockedClient, reply) };
}

/// The reply a waiter's `answer` makes.
///
/// # Errors
/// A refusal, as an error reply.
pub fn reply_of(answer: &Answer) -> RedisResult {
    match answer {
        Answer::Granted(token) => Ok(replies::token(*token)),
        Answer::GrantedSet(tokens) => Ok(replies::tokens(tokens)),
        Answer::Failed(refusal) => Err(replies::refusal(*refusal, "lock.acquire")),
        Answer::Null => Ok(RedisValue::Null),
    }
}

/// Answers a client unblocked by [`unblock`].
unsafe extern "C" fn reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let reply = unsafe { raw::RedisModule_GetBlockedClientPrivateData }
        .map_or(ptr::null_mut(), |get| unsafe { get(ctx) })
        .cast::<Option<Reply>>();
    let reply = unsafe { reply.as_mut() }
        .and_then(Option::take)
        .map_or(Ok(RedisValue::Null), |reply| reply(&context));
    context.reply(reply) as c_int
}

/// Timeout or `CLIENT UNBLOCK`: the client leaves and gets null.
unsafe extern "C" fn timed_out<L: Leaving>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    if let Some(handle) = unsafe { raw::RedisModule_GetBlockedClientHandle } {
        let bc = unsafe { handle(ctx) };
        L::left(&context, Blocked(bc as usize), true);
    }
    context.reply(Ok(RedisValue::Null)) as c_int
}

/// The client disconnected (or was unblocked with an error) while blocked.
unsafe extern "C" fn disconnected<L: Leaving>(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    L::left(&Context::new(ctx), Blocked(bc as usize), false);
}

unsafe extern "C" fn free_reply(_ctx: *mut raw::RedisModuleCtx, reply: *mut c_void) {
    if !reply.is_null() {
        drop(unsafe { Box::from_raw(reply.cast::<Option<Reply>>()) });
    }
}
