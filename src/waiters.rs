//! The waiter registry: per lock, the clients blocked in `LOCK.ACQUIRE ... WAIT`, in arrival
//! order.
//!
//! The module keeps its own registry instead of Redis's key-blocking API
//! (`RedisModule_BlockClientOnKeys`): Redis 7.0 lacks the flags that wake clients on `DEL`, and
//! a hand-over must pick exactly the first waiter and grant it in the same step, which
//! key-readiness wake-ups (all waiters race, in no set order) do not give. Plain Rust, generic
//! over the blocked-client handle so it is unit-tested without Redis.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// A client waiting for a lock, and what it asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter<H> {
    /// The blocked client.
    pub handle: H,
    /// The owner it acquires for.
    pub owner: Box<[u8]>,
    /// The lease it asked for, in ms, counted from the grant.
    pub ttl_ms: i64,
}

/// One lock's waiters, and when the timer that checks its lease fires (unix ms).
#[derive(Debug)]
struct Queue<H> {
    waiters: VecDeque<Waiter<H>>,
    timer_at: Option<u64>,
}

/// Every lock's queue of waiters. `H` identifies a blocked client.
#[derive(Debug)]
pub struct Waiters<H> {
    queues: HashMap<Box<[u8]>, Queue<H>>,
    keys: HashMap<H, Box<[u8]>>,
}

impl<H: Copy + Eq + Hash> Waiters<H> {
    /// No waiters at all.
    #[must_use]
    pub fn new() -> Self {
        Self {
            queues: HashMap::new(),
            keys: HashMap::new(),
        }
    }

    /// Queues `waiter` last for the lock `key`.
    pub fn push(&mut self, key: &[u8], waiter: Waiter<H>) {
        self.keys.insert(waiter.handle, key.into());
        self.queues
            .entry(key.into())
            .or_insert_with(|| Queue {
                waiters: VecDeque::new(),
                timer_at: None,
            })
            .waiters
            .push_back(waiter);
    }

    /// Takes the first waiter for `key` off its queue.
    pub fn pop(&mut self, key: &[u8]) -> Option<Waiter<H>> {
        let queue = self.queues.get_mut(key)?;
        let waiter = queue.waiters.pop_front();
        if queue.waiters.is_empty() {
            self.queues.remove(key);
        }
        if let Some(waiter) = &waiter {
            self.keys.remove(&waiter.handle);
        }
        waiter
    }

    /// Removes the waiter `handle` wherever it queues (it timed out, disconnected or was
    /// unblocked); true if it was queued.
    pub fn remove(&mut self, handle: H) -> bool {
        let Some(key) = self.keys.remove(&handle) else {
            return false;
        };
        if let Some(queue) = self.queues.get_mut(&key) {
            queue.waiters.retain(|waiter| waiter.handle != handle);
            if queue.waiters.is_empty() {
                self.queues.remove(&key);
            }
        }
        true
    }

    /// How many clients wait for `key`.
    #[must_use]
    pub fn count(&self, key: &[u8]) -> usize {
        self.queues.get(key).map_or(0, |queue| queue.waiters.len())
    }

    /// How many clients wait, for any lock.
    #[must_use]
    pub fn total(&self) -> usize {
        self.keys.len()
    }

    /// The locks that have waiters.
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.queues.keys().map(AsRef::as_ref)
    }

    /// Notes that `key`'s waiters need a look at unix time `at_ms`. True when the caller must
    /// start a timer for it: `key` has waiters and no timer of theirs fires by then.
    pub fn needs_timer(&mut self, key: &[u8], at_ms: u64) -> bool {
        let Some(queue) = self.queues.get_mut(key) else {
            return false;
        };
        if queue.timer_at.is_some_and(|armed| armed <= at_ms) {
            return false;
        }
        queue.timer_at = Some(at_ms);
        true
    }

    /// Notes that the timer for `key` set for `at_ms` fired.
    pub fn timer_fired(&mut self, key: &[u8], at_ms: u64) {
        if let Some(queue) = self.queues.get_mut(key)
            && queue.timer_at == Some(at_ms)
        {
            queue.timer_at = None;
        }
    }
}

impl<H: Copy + Eq + Hash> Default for Waiters<H> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(handle: u32) -> Waiter<u32> {
        Waiter {
            handle,
            owner: format!("owner-{handle}").into_bytes().into(),
            ttl_ms: 1_000,
        }
    }

    #[test]
    fn waiters_are_served_in_arrival_order_per_key() {
        let mut waiters = Waiters::new();
        waiters.push(b"a", waiter(1));
        waiters.push(b"b", waiter(2));
        waiters.push(b"a", waiter(3));
        assert_eq!(
            (waiters.count(b"a"), waiters.count(b"b"), waiters.total()),
            (2, 1, 3)
        );
        assert_eq!(waiters.pop(b"a").map(|w| w.handle), Some(1));
        assert_eq!(waiters.pop(b"a").map(|w| w.handle), Some(3));
        assert_eq!(waiters.pop(b"a"), None);
        assert_eq!(waiters.keys().collect::<Vec<_>>(), [b"b"]);
    }

    #[test]
    fn a_removed_waiter_is_never_served() {
        let mut waiters = Waiters::new();
        for handle in 1..=3 {
            waiters.push(b"a", waiter(handle));
        }
        assert!(waiters.remove(2));
        assert!(!waiters.remove(2), "removing twice is harmless");
        assert_eq!(waiters.pop(b"a").map(|w| w.handle), Some(1));
        assert_eq!(waiters.pop(b"a").map(|w| w.handle), Some(3));
        assert_eq!(waiters.keys().count(), 0);
    }

    #[test]
    fn one_timer_per_lock_unless_an_earlier_one_is_needed() {
        let mut waiters = Waiters::new();
        assert!(!waiters.needs_timer(b"a", 100), "no waiters, no timer");
        waiters.push(b"a", waiter(1));
        assert!(waiters.needs_timer(b"a", 100));
        assert!(!waiters.needs_timer(b"a", 100));
        assert!(!waiters.needs_timer(b"a", 150), "the armed one fires first");
        assert!(waiters.needs_timer(b"a", 50), "the lease got shorter");
        waiters.timer_fired(b"a", 100);
        assert!(
            !waiters.needs_timer(b"a", 60),
            "the one for 50 is still armed"
        );
        waiters.timer_fired(b"a", 50);
        assert!(waiters.needs_timer(b"a", 60));
    }

    #[test]
    fn empty_queues_leave_nothing_behind() {
        let mut waiters = Waiters::new();
        waiters.push(b"a", waiter(1));
        waiters.remove(1);
        assert_eq!(waiters.keys().count(), 0);
        assert_eq!(waiters.count(b"a"), 0);
        assert!(!waiters.remove(9), "an unknown waiter");
    }
}
