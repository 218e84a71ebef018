//! `LOCK.APPLY`: a master's effect (see [`crate::effects`]) carried out on a replica or while
//! loading the AOF. The core sets the holding as the master decided it
//! ([`leasehold_core::machine::apply`]); nothing is decided again.

use leasehold_core::args;
use leasehold_core::machine;
use leasehold_core::outcome::KeyLease;
use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use crate::fences;
use crate::key::{LockKey, selected_db};
use crate::observers;
use crate::replies;
use crate::state;

/// `LOCK.APPLY key owner <packed> [VALUE v]`, `LOCK.APPLY key owner token holds [[PXAT]
/// deadline-ms] [SHARED limit] [VALUE v]` and `LOCK.APPLY key owner DROP`: sets one holding of
/// a lock as a master decided it (with the value an election's leader proclaims), raises the
/// fencing counter to at least its token, and tells the lock's observers. `LOCK.APPLY fence
/// FENCE token` raises a fence ([`crate::fences`]) as `LOCK.FENCED` did on the master. Masters send the packed
/// form ([`leasehold_core::packed`]); AOF rewrites write the integers, as 0.2.0 sent them;
/// 0.1.0 wrote `PXAT` before the deadline, and no deadline for "keep the lease". All apply.
///
/// Runs only from the master's replication stream or while loading the AOF; a client gets an
/// error, so no client can make the server adopt a token of its choosing.
///
/// # Errors
/// `ERR` when a client calls it; arity, syntax and range errors; a holding beyond the lock's
/// `LIMIT`; `WRONGTYPE`.
pub fn apply(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if !ctx
        .get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
    {
        return Err(RedisError::Str(
            "ERR LOCK.APPLY only carries a master's writes to replicas and the AOF; clients cannot call it",
        ));
    }
    if let Some((fence, token)) = args::apply_fence(&args) {
        fences::apply(ctx, fence, token)?;
        ctx.replicate_verbatim();
        return Ok(RedisValue::SimpleStringStatic("OK"));
    }
    let parsed = args::apply(&args).map_err(replies::arg_error)?;
    let mut key = LockKey::write(ctx, parsed.key)?;
    let lease = key.update(|lock| machine::apply(lock, &mut state::counter(), parsed.effect))?;
    let lease = lease.map_err(|_| {
        RedisError::Str("ERR LOCK.APPLY would give the lock more holders than its LIMIT")
    })?;
    if let KeyLease::At(deadline) = lease {
        key.set_deadline(deadline)?;
    }
    if observers::count() > 0 {
        let db = selected_db(ctx);
        observers::wake(db, parsed.key.as_slice(), key.lock(), key.remaining_ms());
    }
    // A replica's own AOF gets the effect too; its sub-replicas get the master's stream.
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}
