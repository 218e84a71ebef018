//! The module's process-wide state: the fencing counter, every lock's waiters and the
//! sessions, each behind a mutex. Redis runs commands, loading and events on one thread, so neither is ever
//! contended; a panic elsewhere cannot poison them into refusing service.
//!
//! Hold a guard only while the core decides ([`scope`]): carrying out an outcome may re-enter
//! the module (a keyspace event), which takes them again.

use std::hash::{BuildHasher, RandomState};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError, TryLockError};

use leasehold_core::fence::Counter;
use leasehold_core::lock::Lock;
use leasehold_core::machine::{Member, Scope, Set};
use leasehold_core::outcome::{Outcome, Reply};
use leasehold_core::queue::Waiters;
use leasehold_core::session::Sessions;

use crate::blocking::Blocked;

static COUNTER: Mutex<Counter> = Mutex::new(Counter::new());

static WAITERS: LazyLock<Mutex<Waiters<Blocked>>> = LazyLock::new(Mutex::default);

/// Ids start at a random number ([`Sessions::new`]).
static SESSIONS: LazyLock<Mutex<Sessions>> =
    LazyLock::new(|| Mutex::new(Sessions::new(RandomState::new().hash_one(0_u8))));

/// The sessions ([`crate::session`]).
pub fn sessions() -> MutexGuard<'static, Sessions> {
    SESSIONS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The sessions, unless they are in use further up the stack (a callback Redis makes while a
/// command holds them).
pub fn try_sessions() -> Option<MutexGuard<'static, Sessions>> {
    match SESSIONS.try_lock() {
        Ok(sessions) => Some(sessions),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// The server's fencing counter.
pub fn counter() -> MutexGuard<'static, Counter> {
    COUNTER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The clients blocked for each lock.
pub fn waiters() -> MutexGuard<'static, Waiters<Blocked>> {
    WAITERS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// True when clients wait for `key` of `db`. Cheap when nobody waits for any lock.
#[must_use]
pub fn has_waiters(db: i32, key: &[u8]) -> bool {
    waiters().count(db, key) > 0
}

/// Runs `decide` on the lock `key` of `db` (its value `lock`) at unix time `now_ms`, with the
/// counter and the waiters, filling in `out`; the guards are gone when it returns.
#[inline]
pub fn scope(
    lock: &mut Option<Lock>,
    db: i32,
    key: &[u8],
    now_ms: u64,
    out: &mut Outcome<Blocked>,
    decide: impl FnOnce(Scope<'_, Blocked>),
) {
    let (mut waiters, mut counter) = (waiters(), counter());
    decide(Scope {
        lock,
        waiters: &mut waiters,
        counter: &mut counter,
        db,
        key,
        now_ms,
        out,
    });
}

/// Runs `decide` on the locks `members` of `db` at unix time `now_ms`, with the counter and
/// the waiters; returns the reply it decided. The guards are gone when it returns.
pub fn set_scope(
    members: &mut [Member<'_, Blocked>],
    db: i32,
    now_ms: u64,
    decide: impl FnOnce(Set<'_, '_, Blocked>),
) -> Reply {
    let (mut waiters, mut counter) = (waiters(), counter());
    let mut reply = Reply::Nothing;
    decide(Set {
        members,
        waiters: &mut waiters,
        counter: &mut counter,
        db,
        now_ms,
        reply: &mut reply,
    });
    reply
}
