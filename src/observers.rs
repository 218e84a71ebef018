//! Observers of elections: clients blocked in `LOCK.OBSERVE ... BLOCK`, by key, each with what
//! it saw last. Whenever a lock is written ([`crate::execute::carry_out`], a master's
//! `LOCK.APPLY` on a replica) or its key is deleted, expires, is evicted, renamed or restored
//! ([`crate::looks::on_key_event`]), its observers are told the next state that differs from
//! what they saw ([`leasehold_core::election::observe`]); the others wait on.
//!
//! An observer is a blocked client of its own (`RedisModule_BlockClient`, through
//! [`crate::blocking`]): Redis's blocking on keys serves a module's clients only while the key
//! exists before Redis 7.2, and a vacancy is a key that does not exist.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use leasehold_core::election::{Leadership, Seen, observe};
use leasehold_core::lock::Lock;
use redis_module::Context;

use crate::blocking::{self, Blocked};
use crate::replies;

/// What an observer saw last: the epoch (0: nobody led) and the value.
type Last = (u64, Box<[u8]>);

/// An observed key: its database and name.
type Place = (i32, Box<[u8]>);

/// Every observer: by database and key name (looked up by a key's bytes, with no copy, on
/// every write while anyone observes), and where each observes and what it saw.
#[derive(Default)]
struct Observers {
    by_key: HashMap<i32, HashMap<Box<[u8]>, Vec<Blocked>>>,
    watching: HashMap<Blocked, (Place, Last)>,
}

impl Observers {
    /// The observers of `key` of `db`, if any.
    fn of(&self, db: i32, key: &[u8]) -> Option<&Vec<Blocked>> {
        self.by_key.get(&db)?.get(key)
    }
}

static OBSERVERS: LazyLock<Mutex<Observers>> = LazyLock::new(Mutex::default);

/// How many clients observe, read without the lock on every lock write.
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn observers() -> MutexGuard<'static, Observers> {
    OBSERVERS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How many clients are blocked in `LOCK.OBSERVE` (`INFO lock`'s `lock_observers`).
#[must_use]
pub fn count() -> usize {
    COUNT.load(Ordering::Relaxed)
}

/// Whether anyone observes `key` of `db`.
#[must_use]
pub fn watched(db: i32, key: &[u8]) -> bool {
    count() > 0 && observers().of(db, key).is_some()
}

/// Every key observed, with its database (`FLUSHALL` and `FLUSHDB` look at them all).
#[must_use]
pub fn keys() -> Vec<Place> {
    let observers = observers();
    let keys = observers.by_key.iter();
    keys.flat_map(|(db, keys)| keys.keys().map(|key| (*db, key.clone())))
        .collect()
}

/// `blocked` observes `key` of `db`, having seen `last` (epoch 0: nobody led).
pub fn watch(blocked: Blocked, db: i32, key: &[u8], last: (u64, &[u8])) {
    let place: Place = (db, Box::from(key));
    let mut observers = observers();
    let keys = observers.by_key.entry(db).or_default();
    keys.entry(place.1.clone()).or_default().push(blocked);
    let last = (last.0, Box::from(last.1));
    if observers.watching.insert(blocked, (place, last)).is_none() {
        COUNT.fetch_add(1, Ordering::Relaxed);
    }
}

/// `blocked` observes no more (it timed out, was unblocked, or disconnected).
fn forget(observers: &mut Observers, blocked: Blocked) {
    let Some((place, _)) = observers.watching.remove(&blocked) else {
        return;
    };
    COUNT.fetch_sub(1, Ordering::Relaxed);
    let (db, key) = place;
    let Some(keys) = observers.by_key.get_mut(&db) else {
        return;
    };
    if let Some(waiting) = keys.get_mut(&key) {
        waiting.retain(|other| *other != blocked);
        if waiting.is_empty() {
            keys.remove(&key);
        }
    }
    if keys.is_empty() {
        observers.by_key.remove(&db);
    }
}

/// Tells each observer of `key` of `db` the state of `lock` (its key's lease `ttl_ms` left,
/// `None` without an expiry) when that differs from what it saw, and unblocks it. Callers on a
/// lock write's path check [`count`] first, and look nothing up while nobody observes.
pub fn wake(db: i32, key: &[u8], lock: Option<&Lock>, ttl_ms: Option<i64>) {
    let now = Leadership::of(lock);
    let mut observers = observers();
    let Some(blocked) = observers.of(db, key).cloned() else {
        return;
    };
    for blocked in blocked {
        let Some((_, (epoch, value))) = observers.watching.get(&blocked) else {
            continue;
        };
        let Some(told) = observe(Some(Seen::new(*epoch, value)), now) else {
            continue;
        };
        let reply = replies::leadership(told, ttl_ms);
        forget(&mut observers, blocked);
        blocking::unblock(blocked, Box::new(move |_| Ok(reply)));
    }
}

/// An observer leaving without being told (timeout, `CLIENT UNBLOCK`, disconnect).
pub struct Observing;

impl blocking::Leaving for Observing {
    fn left(_ctx: &Context, blocked: Blocked, _connected: bool) {
        forget(&mut observers(), blocked);
    }
}
