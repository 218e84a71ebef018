//! Model-based test of the machine: random sequences of acquires (exclusive, shared, limited,
//! reentrant, waiting), releases, renewals, lease ends, waiter timeouts and disconnects, keys
//! deleted and promotions, each run through `Scope` exactly as the module runs it — the harness
//! plays Redis: it stores the lock, expires the key at its lease, and fires the looks the
//! machine asks for — and checked against a small reference model after every event:
//!
//! - the same holders, tokens, hold counts and leases (so never two exclusive holders, never
//!   more than the limit), the same replies;
//! - waiters granted in arrival order (FIFO), each answer the model expects;
//! - no barging: a request is never granted a new holding while anyone queues (the model
//!   expects it busy then);
//! - phase-fair batches: after every event, the first waiter could not be granted now (every
//!   shared waiter behind a shared head joined it);
//! - every new fencing token above every token issued before.

use std::collections::VecDeque;

use leasehold_core::fence::Counter;
use leasehold_core::lock::{Lock, Mode};
use leasehold_core::machine::{self, Request, Scope};
use leasehold_core::outcome::{Answer, KeyLease, Next, Outcome, Refusal, Reply, Step};
use leasehold_core::queue::{Waiter, Waiters};
use leasehold_core::session::{Number, Tie};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const NOW: i64 = 1_763_800_000_000;
const DB: i32 = 0;
const KEY: &[u8] = b"lock";

/// A holding as the model keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    owner: String,
    token: u64,
    holds: u32,
    deadline: i64,
    /// Its tie: the one its last acquire or renewal named, unless it kept the tie it had to
    /// that session ([`tied`]).
    tie: Option<Tie>,
}

/// A queued request as the model keeps it.
#[derive(Debug, Clone)]
struct Queued {
    id: u32,
    owner: String,
    mode: Mode,
    reentrant: bool,
    ttl: i64,
    tie: Option<Tie>,
}

/// What the model expects for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    New,
    Again,
    Downgrade,
    Upgrade,
    Busy,
    Null,
    LimitDiffers,
}

/// The reference: holders in a list, the queue in a list, the rules written out plainly.
#[derive(Debug, Default)]
struct Model {
    held: Vec<Held>,
    /// `None`: free or held exclusively; `Some(limit)`: held shared under `limit`.
    shared: Option<Option<u32>>,
    queue: VecDeque<Queued>,
    last_token: u64,
}

impl Model {
    fn holder(&self, owner: &str) -> Option<&Held> {
        self.held.iter().find(|held| held.owner == owner)
    }

    fn decide(&self, owner: &str, mode: Mode, queued: bool) -> Expect {
        if self.held.is_empty() {
            return if queued { Expect::Busy } else { Expect::New };
        }
        let mine = self.holder(owner).is_some();
        match (mode, self.shared) {
            (Mode::Exclusive, None) | (Mode::Exclusive, Some(_)) if !mine => Expect::Busy,
            (Mode::Exclusive, None) => Expect::Again,
            (Mode::Exclusive, Some(_)) if self.held.len() == 1 => Expect::Upgrade,
            (Mode::Exclusive, Some(_)) => Expect::Null,
            (Mode::Shared(_), None) if mine => Expect::Downgrade,
            (Mode::Shared(_), None) => Expect::Busy,
            (Mode::Shared(limit), Some(lock)) if limit != lock => Expect::LimitDiffers,
            (Mode::Shared(_), Some(_)) if mine => Expect::Again,
            (Mode::Shared(limit), Some(_)) => {
                let full = limit.is_some_and(|n| self.held.len() >= n as usize);
                if queued || full {
                    Expect::Busy
                } else {
                    Expect::New
                }
            }
        }
    }

    /// Carries out a granting expectation with the machine's `token`.
    #[allow(clippy::too_many_arguments)]
    fn grant(
        &mut self,
        expect: Expect,
        owner: &str,
        mode: Mode,
        reentrant: bool,
        deadline: i64,
        tie: Option<Tie>,
        token: u64,
    ) {
        let more = u32::from(reentrant);
        match expect {
            Expect::New => {
                assert!(
                    token > self.last_token,
                    "token {token} not above {}",
                    self.last_token
                );
                self.last_token = token;
                self.held.push(Held {
                    owner: owner.into(),
                    token,
                    holds: 1,
                    deadline,
                    tie,
                });
                self.shared = shared_under(mode);
            }
            Expect::Again | Expect::Downgrade => {
                self.shared = shared_under(mode);
                let held = self
                    .held
                    .iter_mut()
                    .find(|h| h.owner == owner)
                    .expect("a holder");
                assert_eq!(held.token, token, "re-entry and downgrade keep the token");
                held.holds = held.holds.saturating_add(more);
                held.deadline = deadline;
                held.tie = if expect == Expect::Again {
                    tied(held.tie, tie)
                } else {
                    tie // a new holding in the other mode
                };
            }
            Expect::Upgrade => {
                assert!(token > self.last_token, "an upgrade takes a new token");
                self.last_token = token;
                self.shared = None;
                let held = &mut self.held[0];
                held.token = token;
                held.holds = held.holds.saturating_add(more);
                held.deadline = deadline;
                held.tie = tie;
            }
            _ => unreachable!(),
        }
    }

    fn expire_shared(&mut self, now: i64) {
        if self.shared.is_some() {
            self.held.retain(|held| held.deadline > now);
            if self.held.is_empty() {
                self.shared = None;
            }
        }
    }

    /// The answers the hand-over owes, in order, as (id, expectation), applied with the
    /// machine's tokens from `granted`.
    fn hand_over(&mut self, now: i64, answers: &mut VecDeque<(u32, Answer)>) {
        while let Some(head) = self.queue.front().cloned() {
            let expect = self.decide(&head.owner, head.mode, false);
            if expect == Expect::Busy {
                return;
            }
            self.queue.pop_front();
            let (id, answer) = answers
                .pop_front()
                .unwrap_or_else(|| panic!("{head:?} should have been answered ({expect:?})"));
            assert_eq!(id, head.id, "FIFO: {head:?} is first");
            match (expect, answer.clone()) {
                (Expect::Null, Answer::Null) => {}
                (Expect::LimitDiffers, Answer::Failed(Refusal::LimitDiffers { .. })) => {}
                (_, Answer::Granted(token)) => {
                    self.grant(
                        expect,
                        &head.owner,
                        head.mode,
                        head.reentrant,
                        now + head.ttl,
                        head.tie,
                        token,
                    );
                }
                _ => panic!("{head:?}: expected {expect:?}, got {answer:?}"),
            }
        }
    }

    /// The key's lease as the model sees it.
    fn key_deadline(&self) -> Option<i64> {
        self.held.iter().map(|held| held.deadline).max()
    }
}

/// The tie a holding that kept `kept` keeps after a request with `asked`: its own when both
/// name one session, else the request's.
fn tied(kept: Option<Tie>, asked: Option<Tie>) -> Option<Tie> {
    match (kept, asked) {
        (Some(kept), Some(asked)) if kept.number == asked.number => Some(kept),
        _ => asked,
    }
}

/// What [`Model::shared`] is for a lock held in `mode`.
fn shared_under(mode: Mode) -> Option<Option<u32>> {
    match mode {
        Mode::Exclusive => None,
        Mode::Shared(limit) => Some(limit),
    }
}

/// The harness: Redis's part (the stored lock, the key's expiry, timers) and the model.
struct Harness {
    lock: Option<Lock>,
    key_deadline: Option<i64>,
    waiters: Waiters<u32>,
    counter: Counter,
    now: i64,
    look_at: Option<i64>,
    model: Model,
    next_id: u32,
    /// The last place a tie was given.
    next_place: u32,
    rng: StdRng,
}

impl Harness {
    fn new(seed: u64) -> Self {
        Self {
            lock: None,
            key_deadline: None,
            waiters: Waiters::new(),
            counter: Counter::new(),
            now: NOW,
            look_at: None,
            model: Model::default(),
            next_id: 0,
            next_place: 0,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    fn run(&mut self, event: impl FnOnce(Scope<'_, u32>)) -> Outcome<u32> {
        let mut outcome = Outcome::new();
        event(Scope {
            lock: &mut self.lock,
            waiters: &mut self.waiters,
            counter: &mut self.counter,
            db: DB,
            key: KEY,
            now_ms: u64::try_from(self.now).unwrap_or(0),
            out: &mut outcome,
        });
        if let KeyLease::At(deadline) = outcome.lease {
            self.key_deadline = Some(deadline);
        }
        if self.lock.is_none() {
            self.key_deadline = None;
        }
        self.arm(outcome.next);
        outcome
    }

    fn arm(&mut self, next: Next) {
        let at = match next {
            Next::Never => return,
            Next::At(at) => at,
            Next::LeaseEnd => match self.key_deadline {
                Some(deadline) => deadline,
                None => return,
            },
        };
        self.look_at = Some(self.look_at.map_or(at, |armed| armed.min(at)));
    }

    /// The answers to waiters in `outcome`, in order.
    fn answers(outcome: &Outcome<u32>) -> VecDeque<(u32, Answer)> {
        outcome
            .steps
            .iter()
            .filter_map(|step| match step {
                Step::Answer(id, answer) => Some((*id, answer.clone())),
                _ => None,
            })
            .collect()
    }

    /// Runs an event that hands over, and has the model hand over alike.
    fn run_and_hand_over(&mut self, event: impl FnOnce(Scope<'_, u32>)) -> Outcome<u32> {
        self.model.expire_shared(self.now);
        let outcome = self.run(event);
        let mut answers = Self::answers(&outcome);
        self.model.hand_over(self.now, &mut answers);
        assert!(answers.is_empty(), "unexpected answers {answers:?}");
        outcome
    }

    fn look(&mut self) {
        self.run_and_hand_over(|scope| scope.look());
    }

    /// No tie, or a new place in the log of one of two sessions.
    fn tie(&mut self) -> Option<Tie> {
        let number = Number::new(self.rng.random_range(0..3))?;
        self.next_place += 1;
        Some(Tie {
            number,
            place: self.next_place,
        })
    }

    fn owner(&mut self) -> String {
        format!("o{}", self.rng.random_range(0..6))
    }

    fn acquire(&mut self, wait: bool) {
        let owner = self.owner();
        let mode = match self.rng.random_range(0..3) {
            0 => Mode::Exclusive,
            1 => Mode::Shared(None),
            _ => Mode::Shared(Some(2)),
        };
        let reentrant = self.rng.random_bool(0.3);
        let ttl = self.rng.random_range(1..50);
        let tie = self.tie();
        let request = Request {
            owner: owner.as_bytes(),
            mode,
            reentrant,
            deadline_ms: self.now + ttl,
            tie,
            value: None,
        };
        self.model.expire_shared(self.now);
        let outcome = self.run(|scope| scope.acquire(&request));
        let mut answers = Self::answers(&outcome);
        self.model.hand_over(self.now, &mut answers);
        let queued = !self.model.queue.is_empty();
        let expect = self.model.decide(&owner, mode, queued);
        match (expect, outcome.reply) {
            (Expect::Busy, Reply::Busy) => {
                if wait {
                    let id = self.next_id;
                    self.next_id += 1;
                    let waiter = Waiter {
                        handle: id,
                        owner: owner.as_bytes().into(),
                        ttl_ms: ttl,
                        mode,
                        reentrant,
                        ties: tie.into_iter().collect(),
                        set: false,
                        value: None,
                    };
                    let next =
                        machine::wait(self.lock.as_ref(), &mut self.waiters, DB, KEY, waiter);
                    self.arm(next);
                    self.model.queue.push_back(Queued {
                        id,
                        owner,
                        mode,
                        reentrant,
                        ttl,
                        tie,
                    });
                }
            }
            (Expect::Null, Reply::Null) => {}
            (Expect::LimitDiffers, Reply::Refused(Refusal::LimitDiffers { .. })) => {}
            (_, Reply::Token(token)) if expect != Expect::Busy => {
                self.model
                    .grant(expect, &owner, mode, reentrant, self.now + ttl, tie, token);
                // A downgrade lets the readers queued behind it join.
                self.model.hand_over(self.now, &mut answers);
            }
            (expect, reply) => panic!("{owner} {mode:?}: expected {expect:?}, got {reply:?}"),
        }
        assert!(answers.is_empty(), "unexpected answers {answers:?}");
    }

    fn release(&mut self) {
        let owner = self.owner();
        self.model.expire_shared(self.now);
        let expected = match self.model.holder(&owner).cloned() {
            None if self.model.held.is_empty() => 0,
            None => -1,
            Some(held) if held.holds > 1 => {
                let held = self
                    .model
                    .held
                    .iter_mut()
                    .find(|h| h.owner == owner)
                    .expect("holder");
                held.holds -= 1;
                1
            }
            Some(_) => {
                self.model.held.retain(|held| held.owner != owner);
                if self.model.held.is_empty() {
                    self.model.shared = None;
                }
                1
            }
        };
        let outcome = self.run_and_hand_over(|scope| scope.release(owner.as_bytes()));
        assert_eq!(
            outcome.reply,
            Reply::Integer(expected),
            "release by {owner}"
        );
    }

    fn renew(&mut self) {
        let owner = self.owner();
        let deadline = self.now + self.rng.random_range(1..50);
        let tie = self.tie();
        self.model.expire_shared(self.now);
        let free = self.model.held.is_empty();
        let expected = match self.model.held.iter_mut().find(|h| h.owner == owner) {
            Some(held) => {
                held.deadline = deadline;
                if tie.is_some() {
                    held.tie = tied(held.tie, tie);
                }
                1
            }
            None if free => 0,
            None => -1,
        };
        let outcome = self.run(|scope| scope.renew(owner.as_bytes(), deadline, tie));
        assert_eq!(outcome.reply, Reply::Integer(expected), "renew by {owner}");
    }

    /// A waiter times out or disconnects; the module looks at the lock on the next turn.
    fn leave(&mut self) {
        if self.model.queue.is_empty() {
            return;
        }
        let gone = self.rng.random_range(0..self.model.queue.len());
        let queued = self.model.queue.remove(gone).expect("a waiter");
        assert_eq!(
            self.waiters.remove(queued.id).map(|(_, (db, _))| db),
            Some(DB)
        );
        self.look();
    }

    /// `DEL key`: the lock is gone; its key event asks for a look.
    fn delete(&mut self) {
        self.lock = None;
        self.key_deadline = None;
        self.model.held.clear();
        self.model.shared = None;
        self.look();
    }

    /// Time passes: Redis expires the key after its lease, and the armed look fires.
    fn tick(&mut self) {
        self.now += self.rng.random_range(0..20);
        if self
            .key_deadline
            .is_some_and(|deadline| self.now > deadline)
        {
            self.lock = None;
            self.key_deadline = None;
            self.model.held.clear();
            self.model.shared = None;
            self.look();
        }
        if self.look_at.is_some_and(|at| at <= self.now) {
            self.look_at = None;
            self.look();
        }
    }

    fn step(&mut self) {
        match self.rng.random_range(0..20) {
            0..4 => self.acquire(false),
            4..9 => self.acquire(true),
            9..12 => self.release(),
            12..13 => self.renew(),
            13..14 => self.leave(),
            14 if self.rng.random_bool(0.2) => self.delete(),
            15 if self.rng.random_bool(0.2) => self.counter.reserve(), // a promotion
            _ => self.tick(),
        }
        self.check();
    }

    /// The machine's lock is the model's, and nobody is left waiting who could hold it.
    fn check(&self) {
        let mut held: Vec<Held> = match &self.lock {
            None => Vec::new(),
            Some(Lock::Exclusive(holding)) => vec![Held {
                owner: String::from_utf8_lossy(&holding.owner).into(),
                token: holding.token,
                holds: holding.holds,
                deadline: self.key_deadline.unwrap_or(i64::MIN),
                tie: holding.tie,
            }],
            Some(Lock::Shared(shared)) => {
                assert_eq!(self.model.shared, Some(shared.limit), "the limit");
                if let Some(limit) = shared.limit {
                    assert!(
                        shared.holders.len() <= limit as usize,
                        "more than {limit} holders"
                    );
                }
                shared
                    .holders
                    .iter()
                    .map(|holder| Held {
                        owner: String::from_utf8_lossy(&holder.owner).into(),
                        token: holder.token,
                        holds: holder.holds,
                        deadline: holder.deadline_ms,
                        tie: holder.tie,
                    })
                    .collect()
            }
        };
        let mut expected = self.model.held.clone();
        held.sort_by(|a, b| a.owner.cmp(&b.owner));
        expected.sort_by(|a, b| a.owner.cmp(&b.owner));
        assert_eq!(held, expected, "the holders at {}", self.now);
        assert_eq!(
            self.key_deadline,
            self.model.key_deadline(),
            "the key's lease"
        );
        if matches!(self.lock, Some(Lock::Exclusive(_))) {
            assert_eq!(self.model.shared, None, "exclusive");
        }
        let queued: Vec<u32> = self.model.queue.iter().map(|q| q.id).collect();
        assert_eq!(self.waiters.count(DB, KEY), queued.len(), "the queue");
        if let Some(head) = self.model.queue.front() {
            assert_eq!(
                self.model.decide(&head.owner, head.mode, false),
                Expect::Busy,
                "{head:?} is left waiting on {:?}",
                self.model.held
            );
        }
    }
}

#[test]
fn random_events_agree_with_the_reference_model() {
    for seed in 0..400 {
        let mut harness = Harness::new(seed);
        for _ in 0..400 {
            harness.step();
        }
    }
}
