//! The executor: carries out what the core decided for one lock ([`Outcome`]) — the key's
//! lease, the effects for replicas and the AOF, the keyspace events, the answers to waiters
//! and the `INFO lock` counters — in the order the core gave them, and decides nothing. The
//! one place a lock's writes are replicated from.

use leasehold_core::lock::Lock;
use leasehold_core::outcome::{KeyLease, Lease, Outcome, Party, Step};
use redis_module::{Context, RedisError, RedisString};

use crate::blocking::Blocked;
use crate::effects::{Held, notify, replicate_drop, replicate_free, replicate_holding};
use crate::horizon;
use crate::key::{LockKey, selected_db};
use crate::observers;
use crate::stats;
use crate::synced;

/// Carries out `outcome` on the open lock `key` named `name`, whose value the core already
/// changed ([`LockKey::update`]); `caller` is the owner the command named. The reply and the
/// next look are left to the caller.
///
/// # Errors
/// A key that cannot be written.
pub fn carry_out(
    ctx: &Context,
    key: &mut LockKey,
    name: &RedisString,
    caller: Option<&RedisString>,
    outcome: &Outcome<Blocked>,
) -> Result<(), RedisError> {
    if let KeyLease::At(deadline) = outcome.lease {
        key.set_deadline(deadline)?;
        horizon::note(ctx, u64::try_from(deadline).unwrap_or(0));
    }
    for step in &outcome.steps {
        match step {
            Step::Hold {
                owner,
                token,
                holds,
                lease,
            } => {
                let named;
                let owner = match (owner, caller) {
                    (Party::Caller, Some(caller)) => caller,
                    (Party::Owner(owner), _) => {
                        named = ctx.create_string(&**owner);
                        &named
                    }
                    (Party::Caller, None) => continue,
                };
                let held = Held {
                    token: *token,
                    holds: *holds,
                    lease: *lease,
                    value: proclaimed(key.lock(), owner, *lease),
                };
                replicate_holding(ctx, name, owner, held);
            }
            Step::Drop(owner) => replicate_drop(ctx, name, owner),
            Step::Free => replicate_free(ctx, name),
            Step::Notify(event) => notify(ctx, *event, name),
            Step::Answer(waiter, answer) => synced::answer(*waiter, answer),
        }
    }
    stats::count(&outcome.counts);
    if observers::count() > 0 {
        let db = selected_db(ctx);
        observers::wake(db, name.as_slice(), key.lock(), key.remaining_ms());
    }
    Ok(())
}

/// The value `owner` proclaims as the leader of `lock` (after the event) when its holding is
/// the exclusive one an effect with `lease` carries; empty otherwise. The owner's bytes are
/// looked at only when the leader proclaims a value (an election's), not for a lock's holder.
fn proclaimed<'a>(lock: Option<&'a Lock>, owner: &RedisString, lease: Lease) -> &'a [u8] {
    let value = lock.and_then(Lock::leader).and_then(|leader| {
        let value = leader.owner.value();
        let carried = !value.is_empty() && !matches!(lease, Lease::Shared { .. });
        (carried && *leader.owner == *owner.as_slice()).then_some(value)
    });
    value.unwrap_or_default()
}
