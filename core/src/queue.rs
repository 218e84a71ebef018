//! The waiters' queues: per lock — a key name in one database — the requests waiting for it
//! (`LOCK.ACQUIRE ... WAIT`), in arrival order, exclusive and shared ones in one queue. Each is
//! known by an id the shell gives it (`H`: the module uses the blocked client's handle).
//!
//! The module keeps its own queues instead of Redis's key-blocking API
//! (`RedisModule_BlockClientOnKeys`): Redis 7.0 lacks the flags that wake clients on `DEL`, and
//! a hand-over must grant exactly the first waiters, in the same step, which key-readiness
//! wake-ups (all waiters race, in no set order) do not give. Who is granted when is decided by
//! [`crate::machine`].

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use crate::lock::Mode;

/// A client waiting for a lock, and what it asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter<H> {
    /// The blocked client.
    pub handle: H,
    /// The owner it acquires for.
    pub owner: Box<[u8]>,
    /// The lease it asked for, in ms, counted from the grant.
    pub ttl_ms: i64,
    /// Exclusive, or shared with its `LIMIT`.
    pub mode: Mode,
    /// Whether it asked `REENTRANT`.
    pub reentrant: bool,
}

/// One database's queues of waiters, by key name.
type Queues<H> = HashMap<Box<[u8]>, VecDeque<Waiter<H>>>;

/// Every lock's queue of waiters, by database and key name. `H` identifies a blocked client.
#[derive(Debug)]
pub struct Waiters<H> {
    queues: HashMap<i32, Queues<H>>,
    places: HashMap<H, (i32, Box<[u8]>)>,
}

impl<H: Copy + Eq + Hash> Waiters<H> {
    /// No waiters at all.
    #[must_use]
    pub fn new() -> Self {
        Self {
            queues: HashMap::new(),
            places: HashMap::new(),
        }
    }

    /// Queues `waiter` last for the lock `key` of database `db`.
    pub fn push(&mut self, db: i32, key: &[u8], waiter: Waiter<H>) {
        self.places.insert(waiter.handle, (db, key.into()));
        self.queues
            .entry(db)
            .or_default()
            .entry(key.into())
            .or_default()
            .push_back(waiter);
    }

    /// The first waiter for `key` of `db`, left in its place.
    #[must_use]
    pub fn first(&self, db: i32, key: &[u8]) -> Option<&Waiter<H>> {
        self.queue_of(db, key)?.front()
    }

    /// Takes the first waiter for `key` of `db` off its queue.
    pub fn pop(&mut self, db: i32, key: &[u8]) -> Option<Waiter<H>> {
        let waiter = self.queue(db, key)?.pop_front()?;
        self.places.remove(&waiter.handle);
        self.forget_if_empty(db, key);
        Some(waiter)
    }

    /// Removes the waiter `handle` wherever it queues (it timed out, disconnected or was
    /// unblocked); the lock it waited for, if it was queued.
    pub fn remove(&mut self, handle: H) -> Option<(i32, Box<[u8]>)> {
        let (db, key) = self.places.remove(&handle)?;
        if let Some(queue) = self.queue(db, &key) {
            queue.retain(|waiter| waiter.handle != handle);
        }
        self.forget_if_empty(db, &key);
        Some((db, key))
    }

    /// How many clients wait for `key` of `db`.
    #[must_use]
    pub fn count(&self, db: i32, key: &[u8]) -> usize {
        self.queue_of(db, key).map_or(0, VecDeque::len)
    }

    /// How many clients wait, for any lock.
    #[must_use]
    pub fn total(&self) -> usize {
        self.places.len()
    }

    /// The locks that have waiters, as (database, key).
    pub fn keys(&self) -> impl Iterator<Item = (i32, &[u8])> {
        self.queues
            .iter()
            .flat_map(|(db, keys)| keys.keys().map(|key| (*db, key.as_ref())))
    }

    /// The queue of `key` of `db`. Without a lookup when nobody waits for any lock, as on
    /// every command of a server whose clients do not wait.
    fn queue_of(&self, db: i32, key: &[u8]) -> Option<&VecDeque<Waiter<H>>> {
        if self.places.is_empty() {
            return None;
        }
        self.queues.get(&db)?.get(key)
    }

    fn queue(&mut self, db: i32, key: &[u8]) -> Option<&mut VecDeque<Waiter<H>>> {
        self.queues.get_mut(&db)?.get_mut(key)
    }

    fn forget_if_empty(&mut self, db: i32, key: &[u8]) {
        let Some(keys) = self.queues.get_mut(&db) else {
            return;
        };
        if keys.get(key).is_some_and(VecDeque::is_empty) {
            keys.remove(key);
        }
        if keys.is_empty() {
            self.queues.remove(&db);
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
            mode: Mode::Exclusive,
            reentrant: false,
        }
    }

    #[test]
    fn waiters_are_served_in_arrival_order_per_key() {
        let mut waiters = Waiters::new();
        waiters.push(0, b"a", waiter(1));
        waiters.push(0, b"b", waiter(2));
        waiters.push(0, b"a", waiter(3));
        assert_eq!(
            (
                waiters.count(0, b"a"),
                waiters.count(0, b"b"),
                waiters.total()
            ),
            (2, 1, 3)
        );
        assert_eq!(waiters.pop(0, b"a").map(|w| w.handle), Some(1));
        assert_eq!(waiters.pop(0, b"a").map(|w| w.handle), Some(3));
        assert_eq!(waiters.pop(0, b"a"), None);
        assert_eq!(waiters.keys().collect::<Vec<_>>(), [(0, b"b".as_slice())]);
    }

    #[test]
    fn the_same_name_in_two_databases_is_two_locks() {
        let mut waiters = Waiters::new();
        waiters.push(0, b"a", waiter(1));
        waiters.push(3, b"a", waiter(2));
        assert_eq!((waiters.count(0, b"a"), waiters.count(3, b"a")), (1, 1));
        assert_eq!(waiters.pop(3, b"a").map(|w| w.handle), Some(2));
        assert_eq!(waiters.pop(3, b"a"), None);
        assert_eq!(waiters.pop(0, b"a").map(|w| w.handle), Some(1));
    }

    #[test]
    fn a_removed_waiter_is_never_served() {
        let mut waiters = Waiters::new();
        for handle in 1..=3 {
            waiters.push(0, b"a", waiter(handle));
        }
        assert_eq!(waiters.remove(2), Some((0, b"a".as_slice().into())));
        assert_eq!(waiters.remove(2), None, "removing twice is harmless");
        assert_eq!(waiters.pop(0, b"a").map(|w| w.handle), Some(1));
        assert_eq!(waiters.pop(0, b"a").map(|w| w.handle), Some(3));
        assert_eq!(waiters.total(), 0);
    }

    #[test]
    fn empty_queues_leave_nothing_behind() {
        let mut waiters = Waiters::new();
        waiters.push(2, b"a", waiter(1));
        waiters.remove(1);
        assert_eq!(waiters.keys().count(), 0);
        assert!(waiters.queues.is_empty());
        assert_eq!(waiters.count(2, b"a"), 0);
        assert_eq!(waiters.remove(9), None, "an unknown waiter");
    }
}
