//! Model-based test of sets (`LOCK.MACQUIRE`) among single-key locks: random single-key and
//! set acquires (waiting or not, keys in any order), releases of one key or a set, renewals of
//! a set, lease ends, waiters leaving and keys deleted, on four exclusive locks, each run
//! through the machine as the module runs it — the harness plays Redis and the shell: it
//! stores each lock, expires keys at their lease, and runs the looks the machine asks for
//! (a lock whose first waiter is a set is looked at through the set, [`Set::look`]) — and
//! checked against a reference model after every event:
//!
//! - atomicity: a set is granted all its keys in one answer, or none; every key it took free
//!   shares one new token, above every token before; a key it held keeps its token;
//! - FIFO per key: a waiter is granted only when it is first in the queue of every key it waits
//!   for, and no request is granted a key that anyone queues for (no barging);
//! - no deadlock: after every event no waiter could be granted — every waiter still queued
//!   waits for a holder (whose lease ends) or for a waiter ahead of it;
//! - the same holders, tokens and leases as the model.

use std::collections::BTreeMap;

use leasehold_core::fence::Counter;
use leasehold_core::lock::{Lock, Mode};
use leasehold_core::machine::{self, Member, Request, Scope, Set};
use leasehold_core::outcome::{Answer, KeyLease, Next, Outcome, Reply, Step};
use leasehold_core::queue::{Waiter, Waiters};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};

const NOW: i64 = 1_763_800_000_000;
const DB: i32 = 0;
const KEYS: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];

/// A holding as the model keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    owner: String,
    token: u64,
    deadline: i64,
}

/// A waiter as the model keeps it.
#[derive(Debug, Clone)]
struct Queued {
    id: u32,
    owner: String,
    keys: Vec<usize>,
    ttl: i64,
    set: bool,
}

/// The reference: each key's holder, and one list of waiters in arrival order.
#[derive(Debug, Default)]
struct Model {
    held: [Option<Held>; 4],
    queue: Vec<Queued>,
    last_token: u64,
}

impl Model {
    fn free_for(&self, key: usize, owner: &str) -> bool {
        self.held[key]
            .as_ref()
            .is_none_or(|held| held.owner == owner)
    }

    fn queued_on(&self, key: usize) -> impl Iterator<Item = &Queued> {
        self.queue.iter().filter(move |q| q.keys.contains(&key))
    }

    /// Whether the waiter could be granted now: first on every key, every key free for it.
    fn grantable(&self, waiter: &Queued) -> bool {
        waiter.keys.iter().all(|&key| {
            self.queued_on(key).next().map(|q| q.id) == Some(waiter.id)
                && self.free_for(key, &waiter.owner)
        })
    }

    /// Gives `owner` the keys with the machine's `tokens`, checking the token rules.
    fn grant(&mut self, owner: &str, keys: &[usize], tokens: &[u64], deadline: i64) {
        assert_eq!(keys.len(), tokens.len(), "one token per key");
        let new: Vec<u64> = keys
            .iter()
            .zip(tokens)
            .filter(|(key, _)| self.held[**key].is_none())
            .map(|(_, token)| *token)
            .collect();
        if let Some(&token) = new.first() {
            assert!(new.iter().all(|t| *t == token), "one new token: {new:?}");
            assert!(
                token > self.last_token,
                "{token} not above {}",
                self.last_token
            );
            self.last_token = token;
        }
        for (&key, &token) in keys.iter().zip(tokens) {
            if let Some(held) = &self.held[key] {
                assert_eq!((&held.owner[..], held.token), (owner, token), "kept");
            }
            let owner = owner.into();
            self.held[key] = Some(Held {
                owner,
                token,
                deadline,
            });
        }
    }

    /// Applies the machine's answers to waiters of one event, checking each was the model's
    /// to give. The answers come per lock, so those on different locks are taken in whichever
    /// order the model can give them.
    fn answered(&mut self, answers: &[(u32, Answer)], now: i64) {
        let mut left: Vec<&(u32, Answer)> = answers.iter().collect();
        while !left.is_empty() {
            let next = left
                .iter()
                .position(|(id, _)| self.queue.iter().any(|q| q.id == *id && self.grantable(q)))
                .unwrap_or_else(|| panic!("{left:?} granted out of turn: {:?}", self.queue));
            let (id, answer) = left.remove(next);
            let at = self.queue.iter().position(|q| q.id == *id).expect("queued");
            let waiter = self.queue.remove(at);
            let tokens = match answer {
                Answer::GrantedSet(tokens) if waiter.set => tokens.to_vec(),
                Answer::Granted(token) if !waiter.set => vec![*token],
                _ => panic!("{waiter:?}: {answer:?}"),
            };
            self.grant(&waiter.owner, &waiter.keys, &tokens, now + waiter.ttl);
        }
    }
}

/// The harness: Redis's and the shell's part, and the model.
struct Harness {
    locks: [Option<Lock>; 4],
    deadlines: [Option<i64>; 4],
    looks: BTreeMap<usize, i64>,
    waiters: Waiters<u32>,
    counter: Counter,
    now: i64,
    model: Model,
    next_id: u32,
    rng: StdRng,
}

fn index(key: &[u8]) -> usize {
    KEYS.iter().position(|k| *k == key).expect("a key")
}

impl Harness {
    fn new(seed: u64) -> Self {
        Self {
            locks: Default::default(),
            deadlines: [None; 4],
            looks: BTreeMap::new(),
            waiters: Waiters::new(),
            counter: Counter::new(),
            now: NOW,
            model: Model::default(),
            next_id: 0,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// Stores what an event left on `key` and arms its looks; the answers it gave.
    fn carry_out(&mut self, key: usize, out: &Outcome<u32>) -> Vec<(u32, Answer)> {
        if let KeyLease::At(deadline) = out.lease {
            self.deadlines[key] = Some(deadline);
        }
        if self.locks[key].is_none() {
            self.deadlines[key] = None;
        }
        let at = match out.next {
            Next::At(at) => Some(at),
            Next::LeaseEnd | Next::Never => None, // the key's expiry brings a look
        };
        if out.ready_set.is_some() {
            self.looks.insert(key, self.now);
        } else if let Some(at) = at {
            let armed = self.looks.entry(key).or_insert(at);
            *armed = (*armed).min(at);
        }
        out.steps
            .iter()
            .filter_map(|step| match step {
                Step::Answer(id, answer) => Some((*id, answer.clone())),
                _ => None,
            })
            .collect()
    }

    fn single(&mut self, key: usize, event: impl FnOnce(Scope<'_, u32>)) -> Outcome<u32> {
        let mut out = Outcome::new();
        event(Scope {
            lock: &mut self.locks[key],
            waiters: &mut self.waiters,
            counter: &mut self.counter,
            db: DB,
            key: KEYS[key],
            now_ms: u64::try_from(self.now).expect("after 1970"),
            out: &mut out,
        });
        let answers = self.carry_out(key, &out);
        self.model.answered(&answers, self.now);
        out
    }

    /// Runs an event on the locks `keys`; its reply, and each member's reply.
    fn set(&mut self, keys: &[usize], event: impl FnOnce(Set<'_, '_, u32>)) -> (Reply, Vec<Reply>) {
        let mut members: Vec<Member<'_, u32>> = keys
            .iter()
            .map(|&key| Member::new(KEYS[key], self.locks[key].take()))
            .collect();
        let mut reply = Reply::Nothing;
        event(Set {
            members: &mut members,
            waiters: &mut self.waiters,
            counter: &mut self.counter,
            db: DB,
            now_ms: u64::try_from(self.now).expect("after 1970"),
            reply: &mut reply,
        });
        let mut answers = Vec::new();
        let mut replies = Vec::new();
        let outs: Vec<(usize, Outcome<u32>)> = members
            .into_iter()
            .map(|member| {
                let key = index(member.key);
                self.locks[key] = member.lock;
                (key, member.out)
            })
            .collect();
        for (key, out) in outs {
            answers.extend(self.carry_out(key, &out));
            replies.push(out.reply);
        }
        self.model.answered(&answers, self.now);
        (reply, replies)
    }

    /// A look at `key`, through its first waiter's set when that is a set.
    fn look(&mut self, key: usize) {
        let first = self
            .waiters
            .first(DB, KEYS[key])
            .filter(|w| w.set)
            .map(|w| w.handle);
        match first.and_then(|handle| Some((handle, self.waiters.place_of(handle)?.1.to_vec()))) {
            Some((handle, keys)) => {
                let keys: Vec<usize> = keys.iter().map(|key| index(key)).collect();
                self.set(&keys, |set| set.look(handle));
            }
            None => {
                self.single(key, |scope| scope.look());
            }
        }
    }

    /// Runs the looks that are due, as the event loop does.
    fn run_looks(&mut self) {
        for _ in 0..1_000 {
            let due: Vec<usize> = self
                .looks
                .iter()
                .filter(|(_, at)| **at <= self.now)
                .map(|(key, _)| *key)
                .collect();
            if due.is_empty() {
                return;
            }
            for key in due {
                self.looks.remove(&key);
                self.look(key);
            }
        }
        panic!("looks never settle");
    }

    fn owner(&mut self) -> String {
        format!("o{}", self.rng.random_range(0..4))
    }

    fn some_keys(&mut self) -> Vec<usize> {
        let mut keys = vec![0, 1, 2, 3];
        keys.shuffle(&mut self.rng);
        keys.truncate(self.rng.random_range(1..=3));
        keys
    }

    fn queue(&mut self, owner: String, keys: Vec<usize>, ttl: i64, set: bool) -> Waiter<u32> {
        let id = self.next_id;
        self.next_id += 1;
        self.model.queue.push(Queued {
            id,
            owner: owner.clone(),
            keys,
            ttl,
            set,
        });
        Waiter {
            handle: id,
            owner: owner.into_bytes().into(),
            ttl_ms: ttl,
            mode: Mode::Exclusive,
            reentrant: false,
            ties: Default::default(),
            set,
            value: None,
        }
    }

    fn acquire(&mut self, wait: bool) {
        let (owner, key, ttl) = (
            self.owner(),
            self.rng.random_range(0..4),
            self.rng.random_range(1..40),
        );
        let request = Request {
            owner: owner.as_bytes(),
            mode: Mode::Exclusive,
            reentrant: false,
            deadline_ms: self.now + ttl,
            tie: None,
            value: None,
        };
        let out = self.single(key, |scope| scope.acquire(&request));
        let grantable = self.model.queued_on(key).next().is_none()
            && self.model.free_for(key, &owner)
            || self.model.held[key]
                .as_ref()
                .is_some_and(|held| held.owner == owner);
        match out.reply {
            Reply::Token(token) => {
                assert!(grantable, "{owner} took {key} while busy");
                self.model.grant(&owner, &[key], &[token], self.now + ttl);
            }
            Reply::Busy => {
                assert!(!grantable, "{owner} refused {key}");
                if wait {
                    let waiter = self.queue(owner, vec![key], ttl, false);
                    machine::wait(
                        self.locks[key].as_ref(),
                        &mut self.waiters,
                        DB,
                        KEYS[key],
                        waiter,
                    );
                }
            }
            reply => panic!("{reply:?}"),
        }
    }

    fn macquire(&mut self, wait: bool) {
        let (owner, keys, ttl) = (self.owner(), self.some_keys(), self.rng.random_range(1..40));
        self.macquire_keys(owner, keys, ttl, wait);
    }

    fn macquire_keys(&mut self, owner: String, keys: Vec<usize>, ttl: i64, wait: bool) {
        let deadline = self.now + ttl;
        let (reply, replies) = self.set(&keys, |set| set.acquire(owner.as_bytes(), deadline, &[]));
        let grantable = keys.iter().all(|&key| {
            self.model.queued_on(key).next().is_none() && self.model.free_for(key, &owner)
        });
        match reply {
            Reply::Tokens => {
                assert!(grantable, "{owner} took {keys:?} while busy");
                let tokens: Vec<u64> = replies
                    .iter()
                    .map(|reply| match reply {
                        Reply::Token(token) => *token,
                        reply => panic!("{reply:?}"),
                    })
                    .collect();
                self.model.grant(&owner, &keys, &tokens, deadline);
            }
            Reply::Busy => {
                assert!(!grantable, "{owner} refused {keys:?}");
                if wait {
                    let waiter = self.queue(owner, keys.clone(), ttl, true);
                    let (_, _) = self.set(&keys, |set| set.wait(waiter));
                }
            }
            reply => panic!("{reply:?}"),
        }
    }

    fn release_one(&mut self, owner: &str, key: usize) -> i64 {
        match &self.model.held[key] {
            Some(held) if held.owner == owner => {
                self.model.held[key] = None;
                1
            }
            Some(_) => -1,
            None => 0,
        }
    }

    fn release(&mut self) {
        let (owner, key) = (self.owner(), self.rng.random_range(0..4));
        let expected = self.release_one(&owner, key);
        let out = self.single(key, |scope| scope.release(owner.as_bytes()));
        assert_eq!(out.reply, Reply::Integer(expected));
    }

    fn mrelease(&mut self) {
        let (owner, keys) = (self.owner(), self.some_keys());
        let expected = keys
            .iter()
            .filter(|&&key| self.release_one(&owner, key) == 1)
            .count();
        let (reply, _) = self.set(&keys, |set| set.release(owner.as_bytes()));
        assert_eq!(
            reply,
            Reply::Integer(i64::try_from(expected).expect("small"))
        );
    }

    fn mrenew(&mut self) {
        let (owner, keys) = (self.owner(), self.some_keys());
        let deadline = self.now + self.rng.random_range(1..40);
        let all = keys.iter().all(|&key| {
            self.model.held[key]
                .as_ref()
                .is_some_and(|held| held.owner == owner)
        });
        if all {
            for &key in &keys {
                self.model.held[key].as_mut().expect("held").deadline = deadline;
            }
        }
        let (reply, _) = self.set(&keys, |set| set.renew(owner.as_bytes(), deadline, &[]));
        let renewed = if all { keys.len() } else { 0 };
        assert_eq!(
            reply,
            Reply::Integer(i64::try_from(renewed).expect("small"))
        );
    }

    /// A waiter times out or disconnects; the shell looks at each of its keys.
    fn leave(&mut self) {
        if self.model.queue.is_empty() {
            return;
        }
        let gone = self
            .model
            .queue
            .remove(self.rng.random_range(0..self.model.queue.len()));
        let (_, (_, keys)) = self.waiters.remove(gone.id).expect("queued");
        assert_eq!(
            keys.iter().map(|key| index(key)).collect::<Vec<_>>(),
            gone.keys
        );
        for key in gone.keys {
            self.looks.insert(key, self.now);
        }
    }

    /// The key is gone (`DEL`, expiry): its key event asks for a look.
    fn drop_key(&mut self, key: usize) {
        self.locks[key] = None;
        self.deadlines[key] = None;
        self.model.held[key] = None;
        self.looks.insert(key, self.now);
    }

    fn tick(&mut self) {
        self.now += self.rng.random_range(0..15);
        for key in 0..4 {
            if self.deadlines[key].is_some_and(|deadline| self.now > deadline) {
                self.drop_key(key);
            }
        }
    }

    fn step(&mut self) {
        let event = self.rng.random_range(0..20);
        if std::env::var_os("TRACE").is_some() {
            eprintln!("{event} {:?} {:?}", self.model.held, self.model.queue);
        }
        match event {
            0..2 => self.acquire(false),
            2..5 => self.acquire(true),
            5..7 => self.macquire(false),
            7..10 => self.macquire(true),
            10..12 => self.release(),
            12..14 => self.mrelease(),
            14 => self.mrenew(),
            15 => self.leave(),
            16 if self.rng.random_bool(0.2) => {
                let key = self.rng.random_range(0..4);
                self.drop_key(key);
            }
            _ => self.tick(),
        }
        self.run_looks();
        self.check();
    }

    /// The machine's locks are the model's, its queues hold the model's waiters, and no waiter
    /// could be granted.
    fn check(&self) {
        for (key, lock) in self.locks.iter().enumerate() {
            let held = lock.as_ref().map(|lock| match lock {
                Lock::Exclusive(holding) => Held {
                    owner: String::from_utf8_lossy(&holding.owner).into(),
                    token: holding.token,
                    deadline: self.deadlines[key].expect("a lease"),
                },
                Lock::Shared(_) => panic!("no shared locks here"),
            });
            assert_eq!(held, self.model.held[key], "key {key} at {}", self.now);
            let queued = self.model.queued_on(key).count();
            assert_eq!(self.waiters.count(DB, KEYS[key]), queued, "queue of {key}");
        }
        for waiter in &self.model.queue {
            assert!(
                !self.model.grantable(waiter),
                "{waiter:?} left waiting on {:?}",
                self.model.held
            );
        }
        if let Some(earliest) = self.model.queue.first() {
            let heads = earliest
                .keys
                .iter()
                .all(|&key| self.model.queued_on(key).next().map(|q| q.id) == Some(earliest.id));
            assert!(heads, "the earliest waiter heads all its queues");
        }
    }
}

#[test]
fn sets_and_single_locks_agree_with_the_reference_model() {
    for seed in 0..300 {
        let mut harness = Harness::new(seed);
        for _ in 0..400 {
            harness.step();
        }
        assert!(harness.model.last_token > 0);
    }
}

/// {A, B} and {B, A}, asked for again and again by clients that wait and release what they
/// get: every set is granted in turn, and nobody ever holds one key while waiting for the
/// other (the harness checks after each round that no waiter could be granted).
#[test]
fn crossed_sets_never_deadlock() {
    let mut harness = Harness::new(7);
    let mut tokens = 0;
    for round in 0..2_000 {
        let keys = if round % 2 == 0 {
            vec![0, 1]
        } else {
            vec![1, 0]
        };
        let owner = format!("o{}", round % 4);
        harness.macquire_keys(owner, keys, 10, true);
        harness.run_looks();
        harness.check();
        if let Some(holder) = harness.model.held[0].clone() {
            let (reply, _) = harness.set(&[0, 1], |set| set.release(holder.owner.as_bytes()));
            harness.model.held = Default::default();
            assert_eq!(reply, Reply::Integer(2), "{holder:?} held both");
            tokens += 1;
        }
        harness.tick();
        harness.run_looks();
        harness.check();
    }
    assert!(tokens > 1_500, "{tokens} grants");
    assert!(harness.model.queue.len() <= 1, "the queue drains");
}
