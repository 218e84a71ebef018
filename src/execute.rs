//! The executor: carries out what the core decided for one lock ([`Outcome`]) — the key's
//! lease, the effects for replicas and the AOF, the keyspace events, the answers to waiters
//! and the `INFO lock` counters — in the order the core gave them, and decides nothing. The
//! one place a lock's writes are replicated from.

use leasehold_core::outcome::{KeyLease, Outcome, Party, Step};
use redis_module::{Context, RedisError, RedisString};

use crate::blocking::Blocked;
use crate::effects::{notify, replicate_drop, replicate_free, replicate_holding};
use crate::key::LockKey;
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
    }
    for step in &outcome.steps {
        match step {
            Step::Hold {
                owner,
                token,
                holds,
                lease,
            } => {
                let waiter;
                let owner = match (owner, caller) {
                    (Party::Caller, Some(caller)) => caller,
                    (Party::Waiter(owner), _) => {
                        waiter = ctx.create_string(&**owner);
                        &waiter
                    }
                    (Party::Caller, None) => continue,
                };
                replicate_holding(ctx, name, owner, *token, *holds, *lease);
            }
            Step::Drop(owner) => replicate_drop(ctx, name, owner),
            Step::Free => replicate_free(ctx, name),
            Step::Notify(event) => notify(ctx, *event, name),
            Step::Answer(waiter, answer) => synced::answer(*waiter, answer),
        }
    }
    stats::count(&outcome.counts);
    Ok(())
}
