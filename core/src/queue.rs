//! The waiters' queues: per lock — a key name in one database — the requests waiting for it
//! (`LOCK.ACQUIRE ... WAIT`, `LOCK.MACQUIRE ... WAIT`), in arrival order, exclusive and shared
//! ones in one queue. Each is known by an id the shell gives it (`H`: the module uses the
//! blocked client's handle).
//!
//! A request for several locks at once (a set, `LOCK.MACQUIRE`) takes its place in the queue
//! of each of its keys under its one id, in the same step. So every queue keeps one arrival
//! order across all of them: the earliest waiter of all heads each of its queues, which is why
//! sets waiting for overlapping keys in any order never deadlock.
//!
//! The module keeps its own queues instead of Redis's key-blocking API
//! (`RedisModule_BlockClientOnKeys`): Redis 7.0 lacks the flags that wake clients on `DEL`, and
//! a hand-over must grant exactly the first waiters, in the same step, which key-readiness
//! wake-ups (all waiters race, in no set order) do not give. Who is granted when is decided by
//! [`crate::machine`].

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use smallvec::SmallVec;

use crate::lock::Mode;
use crate::session::Tie;

/// A client waiting for a lock (or a set of locks), and what it asked for.
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
    /// The ties its holdings keep when it is granted (`SESSION`): none, or one per key (the
    /// entries its session logged when it queued).
    pub ties: Ties,
    /// Whether it waits for a set (`LOCK.MACQUIRE`): granted all its keys in one step, or
    /// none ([`crate::machine::Set`]).
    pub set: bool,
    /// The value it proclaims once granted, as a candidate of an election (`LOCK.CAMPAIGN`).
    pub value: Option<Box<[u8]>>,
}

/// The ties of a waiter's holdings: none, one, or one per key of a set.
pub type Ties = SmallVec<[Tie; 1]>;

/// The key names a waiter queues for: one, or a set's.
pub type Keys = SmallVec<[Box<[u8]>; 1]>;

/// Where a waiter queues, and its request.
#[derive(Debug)]
struct Place<H> {
    db: i32,
    keys: Keys,
    waiter: Waiter<H>,
}

/// One database's queues of waiters' ids, by key name.
type Queues<H> = HashMap<Box<[u8]>, VecDeque<H>>;

/// Every lock's queue of waiters, by database and key name. `H` identifies a blocked client.
#[derive(Debug)]
pub struct Waiters<H> {
    queues: HashMap<i32, Queues<H>>,
    places: HashMap<H, Place<H>>,
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

    /// Queues `waiter` last for each of the locks `keys` of database `db` (one key, or a set's
    /// distinct keys), all in this one step.
    pub fn push<K: AsRef<[u8]>>(
        &mut self,
        db: i32,
        keys: impl IntoIterator<Item = K>,
        waiter: Waiter<H>,
    ) {
        let keys: Keys = keys.into_iter().map(|key| key.as_ref().into()).collect();
        let queues = self.queues.entry(db).or_default();
        for key in &keys {
            queues
                .entry(key.clone())
                .or_default()
                .push_back(waiter.handle);
        }
        self.places
            .insert(waiter.handle, Place { db, keys, waiter });
    }

    /// The first waiter for `key` of `db`, left in its place.
    #[must_use]
    #[inline]
    pub fn first(&self, db: i32, key: &[u8]) -> Option<&Waiter<H>> {
        let handle = self.queue_of(db, key)?.front()?;
        self.places.get(handle).map(|place| &place.waiter)
    }

    /// Takes the first waiter for `key` of `db` off its queue (a set's off all of its
    /// queues).
    pub fn pop(&mut self, db: i32, key: &[u8]) -> Option<Waiter<H>> {
        let handle = *self.queue_of(db, key)?.front()?;
        self.remove(handle).map(|(waiter, _)| waiter)
    }

    /// Removes the waiter `handle` wherever it queues (it was granted, timed out, disconnected
    /// or was unblocked): its request, and the database and keys it waited for.
    pub fn remove(&mut self, handle: H) -> Option<(Waiter<H>, (i32, Keys))> {
        let Place { db, keys, waiter } = self.places.remove(&handle)?;
        for key in &keys {
            if let Some(queue) = self.queue(db, key) {
                if queue.front() == Some(&handle) {
                    queue.pop_front();
                } else {
                    queue.retain(|queued| *queued != handle);
                }
            }
            self.forget_if_empty(db, key);
        }
        Some((waiter, (db, keys)))
    }

    /// The database and keys the waiter `handle` queues for, if it queues.
    #[must_use]
    pub fn place_of(&self, handle: H) -> Option<(i32, &[Box<[u8]>])> {
        self.places
            .get(&handle)
            .map(|place| (place.db, place.keys.as_slice()))
    }

    /// Whether the waiter `handle` is first in the queue of every key it waits for.
    #[must_use]
    pub fn heads_all(&self, handle: H) -> bool {
        self.places.get(&handle).is_some_and(|place| {
            place.keys.iter().all(|key| {
                self.queue_of(place.db, key)
                    .and_then(VecDeque::front)
                    .is_some_and(|first| *first == handle)
            })
        })
    }

    /// How many clients wait for `key` of `db`.
    #[must_use]
    #[inline]
    pub fn count(&self, db: i32, key: &[u8]) -> usize {
        self.queue_of(db, key).map_or(0, VecDeque::len)
    }

    /// How many clients wait, for any lock.
    #[must_use]
    #[inline]
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
    #[inline]
    fn queue_of(&self, db: i32, key: &[u8]) -> Option<&VecDeque<H>> {
        if self.places.is_empty() {
            return None;
        }
        self.queues.get(&db)?.get(key)
    }

    fn queue(&mut self, db: i32, key: &[u8]) -> Option<&mut VecDeque<H>> {
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
            ties: Ties::new(),
            set: false,
            value: None,
        }
    }

    #[test]
    fn waiters_are_served_in_arrival_order_per_key() {
        let mut waiters = Waiters::new();
        waiters.push(0, [b"a"], waiter(1));
        waiters.push(0, [b"b"], waiter(2));
        waiters.push(0, [b"a"], waiter(3));
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
        waiters.push(0, [b"a"], waiter(1));
        waiters.push(3, [b"a"], waiter(2));
        assert_eq!((waiters.count(0, b"a"), waiters.count(3, b"a")), (1, 1));
        assert_eq!(waiters.pop(3, b"a").map(|w| w.handle), Some(2));
        assert_eq!(waiters.pop(3, b"a"), None);
        assert_eq!(waiters.pop(0, b"a").map(|w| w.handle), Some(1));
    }

    #[test]
    fn a_removed_waiter_is_never_served() {
        let mut waiters = Waiters::new();
        for handle in 1..=3 {
            waiters.push(0, [b"a"], waiter(handle));
        }
        let (waiter, (db, keys)) = waiters.remove(2).expect("queued");
        assert_eq!(
            (waiter.handle, db, keys.as_slice()),
            (2, 0, [b"a".as_slice().into()].as_slice())
        );
        assert!(waiters.remove(2).is_none(), "removing twice is harmless");
        assert_eq!(waiters.pop(0, b"a").map(|w| w.handle), Some(1));
        assert_eq!(waiters.pop(0, b"a").map(|w| w.handle), Some(3));
        assert_eq!(waiters.total(), 0);
    }

    #[test]
    fn empty_queues_leave_nothing_behind() {
        let mut waiters = Waiters::new();
        waiters.push(2, [b"a"], waiter(1));
        waiters.remove(1);
        assert_eq!(waiters.keys().count(), 0);
        assert!(waiters.queues.is_empty());
        assert_eq!(waiters.count(2, b"a"), 0);
        assert!(waiters.remove(9).is_none(), "an unknown waiter");
    }

    #[test]
    fn a_set_queues_for_each_of_its_keys_in_one_arrival_order() {
        let mut waiters = Waiters::new();
        waiters.push(0, [b"b"], waiter(1));
        waiters.push(
            0,
            [b"a", b"b"],
            Waiter {
                set: true,
                ..waiter(2)
            },
        );
        waiters.push(
            0,
            [b"b", b"a"],
            Waiter {
                set: true,
                ..waiter(3)
            },
        );
        assert_eq!(
            (
                waiters.count(0, b"a"),
                waiters.count(0, b"b"),
                waiters.total()
            ),
            (2, 3, 3)
        );
        assert!(!waiters.heads_all(2), "1 is ahead of it on b");
        assert_eq!(waiters.pop(0, b"b").map(|w| w.handle), Some(1));
        assert!(waiters.heads_all(2) && !waiters.heads_all(3));
        let (set, (_, keys)) = waiters.remove(2).expect("queued");
        assert!(set.set && keys.len() == 2);
        assert!(waiters.heads_all(3), "taken off both of its queues");
        assert_eq!(waiters.pop(0, b"a").map(|w| w.handle), Some(3));
        assert_eq!((waiters.count(0, b"b"), waiters.total()), (0, 0));
        assert!(waiters.queues.is_empty());
    }
}
