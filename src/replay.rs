//! Sends every lock to the replicas again, as the effects its writes send
//! ([`crate::effects`]): for a replica that loaded the module after it missed lock writes
//! ([`leasehold_core::insync::checks`]). It applied none of them (each was an unknown command
//! there) and no partial resync sends them again, so without this it would hold none of the
//! locks its master holds.
//!
//! The master's timer goes through every database with `RedisModule_Scan`, a few ms per tick
//! ([`STEP_BUDGET`]), as `SCAN` does: every key present from start to end is seen at least once,
//! and a lock written meanwhile goes out through its own effects too. Key names are collected
//! first and each lock read after the scan step, since the keyspace may not change during
//! one (reading an expired lease deletes it).

use std::cell::RefCell;
use std::time::{Duration, Instant};

use leasehold_core::lock::Lock;
use leasehold_core::outcome::Lease;
use redis_module::{Context, KeysCursor, RedisString, raw};

use crate::clock;
use crate::effects::{self, Held};
use crate::key::{LockKey, select_db, selected_db};

/// How long one tick may spend sending locks again.
pub const STEP_BUDGET: Duration = Duration::from_millis(5);

/// Where the replay is.
struct Replay {
    /// The database being scanned.
    db: i32,
    cursor: KeysCursor,
}

thread_local! {
    /// The replay in progress (the timer runs on the main thread only).
    static REPLAY: RefCell<Option<Replay>> = const { RefCell::new(None) };
}

/// Starts sending every lock again, from the first database: also when one was under way (a
/// replica that needs it now may have missed what was sent before).
pub fn start() {
    REPLAY.with_borrow_mut(|replay| {
        *replay = Some(Replay {
            db: 0,
            cursor: KeysCursor::new(),
        });
    });
}

/// What [`step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// No replay is under way.
    Idle,
    /// It goes on at the next tick.
    Going,
    /// Every lock was sent again.
    Done,
}

/// Sends locks again for up to [`STEP_BUDGET`], leaving the context on the database it was on.
pub fn step(ctx: &Context) -> Progress {
    let Some(mut replay) = REPLAY.with_borrow_mut(Option::take) else {
        return Progress::Idle;
    };
    let caller_db = selected_db(ctx);
    let started = Instant::now();
    let mut done = false;
    while !done && started.elapsed() < STEP_BUDGET {
        if select_db(ctx, replay.db).is_err() {
            done = true;
            break;
        }
        let names = RefCell::new(Vec::new());
        let more = replay.cursor.scan(ctx, &|ctx, name, key| {
            if key.is_some_and(|key| key.key_type() == raw::KeyType::Module) {
                names.borrow_mut().push(name.safe_clone(ctx));
            }
        });
        for name in names.into_inner() {
            send(ctx, &name);
        }
        if !more {
            replay.db += 1;
            replay.cursor.restart();
        }
    }
    let _ = select_db(ctx, caller_db);
    if done {
        Progress::Done
    } else {
        REPLAY.with_borrow_mut(|slot| *slot = Some(replay));
        Progress::Going
    }
}

/// Sends each holding of the lock at `name`, if it holds one.
fn send(ctx: &Context, name: &RedisString) {
    let Ok(key) = LockKey::read(ctx, name) else {
        return;
    };
    match key.lock() {
        Some(Lock::Exclusive(holding)) => {
            let now = i64::try_from(clock::now_ms()).unwrap_or(i64::MAX);
            let lease = key
                .remaining_ms()
                .map_or(Lease::Kept, |ms| Lease::Until(now.saturating_add(ms)));
            let owner = ctx.create_string(&holding.owner[..]);
            let held = Held {
                token: holding.token,
                holds: holding.holds,
                lease,
                value: holding.owner.value(),
            };
            effects::replicate_holding(ctx, name, &owner, held);
        }
        Some(Lock::Shared(shared)) => {
            for holder in shared.holders.iter() {
                let lease = Lease::Shared {
                    deadline_ms: holder.deadline_ms,
                    limit: shared.limit,
                };
                let owner = ctx.create_string(&holder.owner[..]);
                let held = Held {
                    token: holder.token,
                    holds: holder.holds,
                    lease,
                    value: &[],
                };
                effects::replicate_holding(ctx, name, &owner, held);
            }
        }
        None => {}
    }
}
