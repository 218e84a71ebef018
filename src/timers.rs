//! When each lock needs a look next: one armed timer per lock — a key name in one database —
//! the earliest one needed. A lock needs a look when a lease ends that may let a waiter in, or
//! a shared holder's lease ends and it must leave (see [`crate::looks`]).
//!
//! Only the bookkeeping; the timers themselves are Redis's (`RedisModule_CreateTimer`).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

static TIMERS: LazyLock<Mutex<Timers>> = LazyLock::new(Mutex::default);

fn timers() -> MutexGuard<'static, Timers> {
    TIMERS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Notes that `key` of `db` needs a look at unix time `at_ms`. True when the caller must start
/// a timer for it: none of its timers fires by then.
pub fn needs_timer(db: i32, key: &[u8], at_ms: u64) -> bool {
    timers().needs_timer(db, key, at_ms)
}

/// Notes that the timer for `key` of `db` set for `at_ms` fired.
pub fn fired(db: i32, key: &[u8], at_ms: u64) {
    timers().fired(db, key, at_ms);
}

/// The time (unix ms) each lock's armed timer fires at, by database and key name.
#[derive(Debug, Default)]
struct Timers {
    armed: HashMap<i32, HashMap<Box<[u8]>, u64>>,
}

impl Timers {
    fn needs_timer(&mut self, db: i32, key: &[u8], at_ms: u64) -> bool {
        let keys = self.armed.entry(db).or_default();
        match keys.get_mut(key) {
            Some(armed) if *armed <= at_ms => false,
            Some(armed) => {
                *armed = at_ms;
                true
            }
            None => {
                keys.insert(key.into(), at_ms);
                true
            }
        }
    }

    fn fired(&mut self, db: i32, key: &[u8], at_ms: u64) {
        let Some(keys) = self.armed.get_mut(&db) else {
            return;
        };
        if keys.get(key) == Some(&at_ms) {
            keys.remove(key);
        }
        if keys.is_empty() {
            self.armed.remove(&db);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_timer_per_lock_unless_an_earlier_one_is_needed() {
        let mut timers = Timers::default();
        assert!(timers.needs_timer(0, b"a", 100));
        assert!(!timers.needs_timer(0, b"a", 100));
        assert!(
            !timers.needs_timer(0, b"a", 150),
            "the armed one fires first"
        );
        assert!(timers.needs_timer(0, b"a", 50), "the lease got shorter");
        timers.fired(0, b"a", 100);
        assert!(
            !timers.needs_timer(0, b"a", 60),
            "the one for 50 is still armed"
        );
        timers.fired(0, b"a", 50);
        assert!(timers.needs_timer(0, b"a", 60));
        assert!(
            timers.needs_timer(1, b"a", 60),
            "another database, another lock"
        );
    }

    #[test]
    fn fired_timers_leave_nothing_behind() {
        let mut timers = Timers::default();
        timers.needs_timer(2, b"a", 10);
        timers.fired(2, b"a", 10);
        assert!(timers.armed.is_empty());
    }
}
