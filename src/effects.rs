//! How a lock's writes reach replicas and the AOF: as deterministic effects, never as the
//! command itself.
//!
//! A replica or an AOF replay must not re-evaluate "now" or the fencing counter: it would
//! compute another deadline and another token. So every write is sent as the state it left
//! behind, one holding at a time:
//!
//! - `LOCK.APPLY key owner token holds deadline-ms` — `owner` holds `key` exclusively;
//! - `LOCK.APPLY key owner token holds deadline-ms SHARED limit` — `owner` is one of its
//!   shared holders (`limit` -1: none);
//! - `LOCK.APPLY key owner DROP` — `owner`'s shared holding ended (released, or its lease);
//! - `DEL key` — the lock is free.
//!
//! This is the "replicate effects, not commands" rule of Redis's module API
//! (`RedisModule_Replicate`) and of Redis's own scripts since 7.0. Effects of a lock with k
//! holders stay O(1): only the holding that changed is sent. Keyspace notifications for the
//! writes are sent from here too.
//!
//! These run on every write, so they call `RedisModule_Replicate` and
//! `RedisModule_NotifyKeyspaceEvent` directly with a format string and static names: the
//! crate's wrappers allocate a C string per call and a module string per argument. Arguments
//! that are already module strings (the key and the owner a client sent) are passed as such,
//! which Redis shares instead of copying.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_longlong};

use redis_module::{
    Context, ContextFlags, NextArg, RedisError, RedisResult, RedisString, RedisValue, raw,
};

use crate::fence;
use crate::holders::Holder;
use crate::key::LockKey;
use crate::lock::{Holding, Lock, Mode};

/// The internal command that carries a lock's state to replicas and the AOF.
pub const APPLY: &CStr = c"LOCK.APPLY";

/// `VALKEYMODULE_OPTIONS_SKIP_COMMAND_VALIDATION` (Valkey 8.1+, valkey-io/valkey#1357): the
/// server takes `RedisModule_Replicate`'s command as it is instead of looking it up by name on
/// every call. Redis has no such option, and may give the bit another meaning.
const SKIP_COMMAND_VALIDATION: c_int = 1 << 4;

/// On Valkey 8.1 and later, lets every effect skip the command lookup: the module only ever
/// replicates `LOCK.APPLY` and `DEL`, which exist. Found out from `INFO server` at load, like
/// the other optional server features.
pub fn skip_command_lookup(ctx: &Context) {
    let server = ctx.server_info("server");
    let is_valkey = server
        .field("server_name")
        .is_some_and(|name| name.as_slice() == b"valkey");
    let version = server.field("valkey_version").map(|v| v.to_string());
    let major_minor = version.as_deref().and_then(|v| {
        let mut parts = v.split('.').map(str::parse::<u32>);
        Some((parts.next()?.ok()?, parts.next()?.ok()?))
    });
    if is_valkey
        && major_minor >= Some((8, 1))
        && let Some(set_options) = unsafe { raw::RedisModule_SetModuleOptions }
    {
        unsafe { set_options(ctx.get_raw(), SKIP_COMMAND_VALIDATION) };
    }
}

/// Sends `owner`'s holding of `key` as `lock` has it now. An exclusive holding's lease ends at
/// `deadline_ms` (`None`: it keeps the lease it has); a shared holder's is its own.
pub fn replicate_holding(
    ctx: &Context,
    key: &RedisString,
    owner: &RedisString,
    lock: &Lock,
    deadline_ms: Option<i64>,
) {
    let Some(replicate) = (unsafe { raw::RedisModule_Replicate }) else {
        return;
    };
    let ctx = ctx.get_raw();
    let owner_bytes = owner.as_slice();
    let (key, owner) = (key.inner, owner.inner);
    match lock {
        Lock::Exclusive(Holding { token, holds, .. }) => {
            let (token, holds) = (fence::as_integer(*token), c_longlong::from(*holds));
            unsafe {
                match deadline_ms {
                    Some(deadline) => replicate(
                        ctx,
                        APPLY.as_ptr(),
                        c"sslll".as_ptr(),
                        key,
                        owner,
                        token,
                        holds,
                        deadline,
                    ),
                    None => replicate(
                        ctx,
                        APPLY.as_ptr(),
                        c"ssll".as_ptr(),
                        key,
                        owner,
                        token,
                        holds,
                    ),
                };
            }
        }
        Lock::Shared(shared) => {
            let Some(holder) = shared.holders.get(owner_bytes) else {
                return;
            };
            let limit = shared.limit.map_or(-1, c_longlong::from);
            unsafe {
                replicate(
                    ctx,
                    APPLY.as_ptr(),
                    c"sslllcl".as_ptr(),
                    key,
                    owner,
                    fence::as_integer(holder.token),
                    c_longlong::from(holder.holds),
                    holder.deadline_ms,
                    c"SHARED".as_ptr(),
                    limit,
                );
            }
        }
    }
}

/// Sends "`holder`'s shared holding of `key` ended".
pub fn replicate_drop(ctx: &Context, key: &RedisString, holder: &Holder) {
    if let Some(replicate) = unsafe { raw::RedisModule_Replicate } {
        let owner = holder.owner.as_ptr().cast::<c_char>();
        unsafe {
            replicate(
                ctx.get_raw(),
                APPLY.as_ptr(),
                c"sbc".as_ptr(),
                key.inner,
                owner,
                holder.owner.len(),
                c"DROP".as_ptr(),
            );
        }
    }
}

/// True while writes must not reach replicas: `CLIENT PAUSE WRITE` (or `ALL`), and the pause of
/// `FAILOVER` and of a cluster manual failover (`RedisModule_AvoidReplicaTraffic`). Redis holds
/// back clients' writes and its own key expiry then; a module's timer that wrote anyway would
/// trip Redis's assertion and crash the server (Redis 7.0 and 8.2 do; valkey-io/valkey#3645).
#[must_use]
pub fn replication_paused() -> bool {
    unsafe { raw::RedisModule_AvoidReplicaTraffic }.is_some_and(|paused| unsafe { paused() } != 0)
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

/// What one `LOCK.APPLY` says.
enum Effect {
    /// `owner` holds the lock in `mode` with this token and hold count; its lease ends at
    /// the deadline (unix ms; -1: no lease), or stays as it is when `None`.
    Holds {
        owner: RedisString,
        token: u64,
        holds: u64,
        deadline_ms: Option<i64>,
        mode: Mode,
    },
    /// `owner` no longer holds the lock.
    Dropped { owner: RedisString },
}

/// `LOCK.APPLY key owner token holds [[PXAT] deadline-ms] [SHARED limit]` and
/// `LOCK.APPLY key owner DROP`: sets one holding of a lock as a master decided it (see the
/// module docs above), and raises the fencing counter to at least `token`. 0.1.0 wrote
/// `PXAT` before the deadline, and no deadline for "keep the lease"; both still apply.
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
    let effect = parse(&mut args)?;
    let mut key = LockKey::write(ctx, &name)?;
    match effect {
        Effect::Holds {
            owner,
            token,
            holds,
            deadline_ms,
            mode,
        } => {
            let holding = Holding::from_parts(owner.as_slice(), token, holds).ok_or(
                RedisError::Str("ERR invalid owner, fencing token or hold count in LOCK.APPLY"),
            )?;
            fence::counter().observe(token);
            set_holding(&mut key, holding, mode, deadline_ms)?;
        }
        Effect::Dropped { owner } => drop_holding(&mut key, owner.as_slice())?,
    }
    // A replica's own AOF gets the effect too; its sub-replicas get the master's stream.
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}

fn parse(args: &mut impl Iterator<Item = RedisString>) -> Result<Effect, RedisError> {
    let owner = args.next_arg()?;
    let word = args.next_arg()?;
    if word.as_slice().eq_ignore_ascii_case(b"DROP") {
        args.done()?;
        return Ok(Effect::Dropped { owner });
    }
    let token = word.parse_unsigned_integer()?;
    let holds = args.next_u64()?;
    let (mut deadline_ms, mut mode) = (None, Mode::Exclusive);
    while let Some(word) = args.next() {
        let word = word.as_slice();
        if word.eq_ignore_ascii_case(b"SHARED") {
            let limit = args.next_i64()?;
            mode = Mode::Shared(u32::try_from(limit).ok().filter(|n| *n > 0));
        } else if word.eq_ignore_ascii_case(b"PXAT") {
            deadline_ms = Some(args.next_i64()?);
        } else {
            let deadline = std::str::from_utf8(word).ok().and_then(|w| w.parse().ok());
            deadline_ms = Some(deadline.ok_or(RedisError::Str("ERR syntax error"))?);
        }
    }
    Ok(Effect::Holds {
        owner,
        token,
        holds,
        deadline_ms,
        mode,
    })
}

/// Makes `holding` the lock's exclusive holding, or one of its shared holders under `mode`'s
/// limit, and sets the key's lease to match.
fn set_holding(
    key: &mut LockKey,
    holding: Holding,
    mode: Mode,
    deadline_ms: Option<i64>,
) -> Result<(), RedisError> {
    let Mode::Shared(limit) = mode else {
        key.store(Lock::Exclusive(holding))?;
        return deadline_ms.map_or(Ok(()), |deadline| key.set_deadline(deadline));
    };
    let deadline = deadline_ms.unwrap_or(-1);
    let holder = Holder::new(&holding.owner, holding.token, holding.holds, deadline);
    match key.lock_mut() {
        Some(Lock::Shared(shared)) => {
            shared.limit = limit;
            let holders = &mut shared.holders;
            if holders
                .get(&holding.owner)
                .is_some_and(|h| h.token == holding.token)
            {
                holders.update(&holding.owner, holding.holds, deadline);
            } else {
                holders.remove(&holding.owner);
                holders.insert(holder);
            }
        }
        _ => key.store(Lock::new(
            &holding.owner,
            holding.token,
            holding.holds,
            mode,
            deadline,
        ))?,
    }
    key.set_shared_deadline()
}

/// Ends `owner`'s holding: the key goes when nobody holds it any more.
fn drop_holding(key: &mut LockKey, owner: &[u8]) -> Result<(), RedisError> {
    let emptied = match key.lock_mut() {
        Some(Lock::Shared(shared)) => {
            shared.holders.remove(owner);
            shared.holders.is_empty()
        }
        Some(Lock::Exclusive(holding)) => *holding.owner == *owner,
        None => false,
    };
    if emptied {
        key.delete()
    } else if key.lock().is_some() {
        key.set_shared_deadline()
    } else {
        Ok(())
    }
}
