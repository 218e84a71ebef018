//! `LOCK.APPLY`: a master's effect (see [`crate::effects`]) carried out on a replica or while
//! loading the AOF. The core sets the holding as the master decided it
//! ([`leasehold_core::machine::apply`]); nothing is decided again.

use leasehold_core::lock::{Holding, Mode};
use leasehold_core::machine::{self, Applied};
use leasehold_core::outcome::{KeyLease, Lease};
use leasehold_core::packed;
use redis_module::{
    Context, ContextFlags, NextArg, RedisError, RedisResult, RedisString, RedisValue,
};

use crate::key::LockKey;
use crate::state;

/// `LOCK.APPLY key owner <packed>`, `LOCK.APPLY key owner token holds [[PXAT] deadline-ms]
/// [SHARED limit]` and `LOCK.APPLY key owner DROP`: sets one holding of a lock as a master
/// decided it, and raises the fencing counter to at least its token. Masters send the packed
/// form ([`leasehold_core::packed`]); AOF rewrites write the integers, as 0.2.0 sent them;
/// 0.1.0 wrote `PXAT` before the deadline, and no deadline for "keep the lease". All apply.
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
    let effect = parse(&owner, &mut args)?;
    let mut key = LockKey::write(ctx, &name)?;
    let lease = key.update(|lock| machine::apply(lock, &mut state::counter(), effect))?;
    if let KeyLease::At(deadline) = lease {
        key.set_deadline(deadline)?;
    }
    // A replica's own AOF gets the effect too; its sub-replicas get the master's stream.
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// The effect after the key and owner: `DROP`, a packed holding, or `token holds [[PXAT]
/// deadline] [SHARED limit]` (`limit` -1: none).
fn parse<'a>(
    owner: &'a RedisString,
    args: &mut impl Iterator<Item = RedisString>,
) -> Result<Applied<'a>, RedisError> {
    let word = args.next_arg()?;
    if word.as_slice().eq_ignore_ascii_case(b"DROP") {
        args.done()?;
        return Ok(Applied::Dropped {
            owner: owner.as_slice(),
        });
    }
    if let Some((token, holds, lease)) = packed::unpack(word.as_slice()) {
        args.done()?;
        let (mode, deadline_ms) = match lease {
            Lease::Until(deadline) => (Mode::Exclusive, Some(deadline)),
            Lease::Kept => (Mode::Exclusive, None),
            Lease::Shared { deadline_ms, limit } => (Mode::Shared(limit), Some(deadline_ms)),
        };
        return holds_as(owner, token, u64::from(holds), mode, deadline_ms);
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
    holds_as(owner, token, holds, mode, deadline_ms)
}

/// `owner`'s holding as the effect describes it, checked as a loaded one is.
fn holds_as(
    owner: &RedisString,
    token: u64,
    holds: u64,
    mode: Mode,
    deadline_ms: Option<i64>,
) -> Result<Applied<'_>, RedisError> {
    let holding = Holding::from_parts(owner.as_slice(), token, holds).ok_or(RedisError::Str(
        "ERR invalid owner, fencing token or hold count in LOCK.APPLY",
    ))?;
    Ok(Applied::Holds {
        holding,
        mode,
        deadline_ms,
    })
}
