//! Elections as server commands: `LOCK.CAMPAIGN`, `LOCK.LEADER`, `LOCK.PROCLAIM`,
//! `LOCK.RESIGN` and `LOCK.OBSERVE`. An election is a lock held by its leader
//! ([`leasehold_core::election`]): a campaign is `LOCK.ACQUIRE` with a value, on the same code
//! path ([`commands::acquire_as`]), so leases, `WAIT`'s fair queue, sessions, synced grants,
//! replication and persistence are the locks' own; a term's epoch is its fencing token.

use leasehold_core::args;
use leasehold_core::election::{self, Leadership, Seen};
use redis_module::{Context, RedisResult, RedisString, RedisValue};

use crate::blocking;
use crate::clock;
use crate::commands::{self, held_if, reply_for};
use crate::config;
use crate::key::{LockKey, selected_db};
use crate::looks;
use crate::observers::{self, Observing};
use crate::replies;
use crate::session;
use crate::synced::{self, Undo};

/// `LOCK.CAMPAIGN key candidate value ttl-ms [WAIT timeout-ms] [SESSION id] [SYNC | NOSYNC]`:
/// `candidate` asks to lead the election `key` for `ttl-ms`, proclaiming `value`, as
/// `LOCK.ACQUIRE key candidate ttl-ms` asks for the lock: with `WAIT` it queues, in arrival
/// order, until it leads or `timeout-ms` passes. A leader that campaigns again keeps its epoch,
/// with the new lease and value.
///
/// Replies with the term's epoch (its fencing token: larger than every epoch before it, across
/// restarts and failovers), or null when another leads.
///
/// # Errors
/// As `LOCK.ACQUIRE`'s; `ERR value must be at most 65536 bytes`.
pub fn campaign(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let parsed = args::campaign(&args, &config::limits()).map_err(replies::arg_error)?;
    commands::acquire_as(ctx, &parsed, "lock.campaign")
}

/// `LOCK.LEADER key`: who leads the election `key` — a map of `leader`, `epoch`, `value` and
/// `ttl` ([`replies::leadership`]) — or null when nobody does (the lock is free, or held
/// shared). Read-only; O(1).
///
/// # Errors
/// Arity, `WRONGTYPE`.
pub fn leader(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let name = args::info(&args).map_err(replies::arg_error)?;
    let key = LockKey::read(ctx, name)?;
    Ok(match Leadership::of(key.lock()) {
        Leadership::Nobody => RedisValue::Null,
        now => replies::leadership(now, key.remaining_ms()),
    })
}

/// `LOCK.PROCLAIM key epoch value [SYNC | NOSYNC]`: the leader of term `epoch` proclaims `value`
/// from now on, its epoch and lease unchanged. Replies `1`, or `0` when term `epoch` does not
/// lead (it ended, or another term leads): a stale leader cannot overwrite its successor's
/// value. Held until the in-sync set has it with `SYNC`, or by `lock.sync-writes` unless
/// `NOSYNC`, as a renewal is.
///
/// # Errors
/// Arity, syntax, an epoch that is not an integer, the value's length, `WRONGTYPE`; `SYNC` where
/// a client cannot block; `NOREPLICAS` for a value the in-sync set did not get.
pub fn proclaim(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let parsed = args::term(&args, true).map_err(replies::arg_error)?;
    let sync = synced::wanted(ctx, parsed.sync)?;
    let value = parsed.value.map_or(&[][..], |value| value.as_slice());
    let mut key = LockKey::write(ctx, parsed.key)?;
    let reply = looks::decide(ctx, &mut key, parsed.key, None, clock::now_ms(), |scope| {
        scope.proclaim(parsed.epoch, value);
    })?;
    drop(key);
    held_if(
        ctx,
        sync,
        reply_for(reply, "lock.proclaim")?,
        1,
        Undo::Proclaim,
    )
}

/// `LOCK.RESIGN key epoch`: ends term `epoch` — the lock is released whole — and hands the
/// election to the next waiting candidate in the same step, with a new epoch. Replies `1`, or
/// `0` when term `epoch` does not lead.
///
/// # Errors
/// Arity, an epoch that is not an integer, `WRONGTYPE`.
pub fn resign(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let parsed = args::term(&args, false).map_err(replies::arg_error)?;
    let mut key = LockKey::write(ctx, parsed.key)?;
    let leader: Option<Box<[u8]>> = key
        .lock()
        .and_then(|lock| lock.leader())
        .filter(|leader| leader.token == parsed.epoch)
        .map(|leader| Box::from(&*leader.owner));
    let was = leader
        .as_deref()
        .and_then(|owner| session::tied_to(&key, owner));
    let reply = looks::decide(ctx, &mut key, parsed.key, None, clock::now_ms(), |scope| {
        scope.resign(parsed.epoch);
    })?;
    if let Some(owner) = leader {
        session::settle(ctx, &key, parsed.key, &owner, was, None);
    }
    reply_for(reply, "lock.resign")
}

/// `LOCK.OBSERVE key [LAST epoch value] [BLOCK timeout-ms]`: who leads the election `key` —
/// at once without `LAST`; with `LAST`, the next state that differs from what the caller saw
/// (`epoch` 0: nobody led), where the end of a term comes before the next term
/// ([`election::observe`]). With `BLOCK`, waits up to `timeout-ms` (0: no limit) for it; null
/// when nothing changed (in time). The reply is [`replies::leadership`]'s map, whose `epoch` and
/// `value` the next call passes as `LAST`. Read-only; works on replicas.
///
/// # Errors
/// Arity, syntax, an epoch that is not an integer, the value's length, `BLOCK`'s timeout,
/// `WRONGTYPE`.
pub fn observe(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let parsed = args::observe(&args).map_err(replies::arg_error)?;
    let key = LockKey::read(ctx, parsed.key)?;
    if let Some(told) = election::observe(parsed.last, Leadership::of(key.lock())) {
        return Ok(replies::leadership(told, key.remaining_ms()));
    }
    match parsed.block_ms {
        Some(timeout_ms) if blocking::can_block(ctx) => {
            let blocked = blocking::block::<Observing>(ctx, timeout_ms)?;
            let last = match parsed.last {
                Some(Seen::Leader { epoch, value }) => (epoch, value),
                _ => (0, &[][..]),
            };
            observers::watch(blocked, selected_db(ctx), parsed.key.as_slice(), last);
            Ok(RedisValue::NoReply)
        }
        _ => Ok(RedisValue::Null),
    }
}
