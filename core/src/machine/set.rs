//! Events on several locks at once (`LOCK.MACQUIRE`, `LOCK.MRELEASE`, `LOCK.MRENEW`, and the
//! look that grants a waiting set): all or nothing, in one step.
//!
//! A set is granted when every one of its keys is free (or held exclusively by the set's owner
//! already) and, when it waits, when it is first in the queue of every key. Its waiter takes
//! its place in all those queues in one step ([`crate::queue`]), so one arrival order runs
//! through them all: the earliest waiter heads every queue it is in, and is granted as soon as
//! the holders ahead of it release or their leases end. No holder of part of a set ever waits
//! for the rest, so there is no deadlock, whatever order clients name the keys in — unlike
//! taking the locks one by one (Redisson's `RedissonMultiLock`), where {A, B} and {B, A} can
//! each hold one and wait for the other until a lease ends.
//!
//! A single-key event whose hand-over stops at a set waiter that could now be granted reports
//! it ([`Outcome::ready_set`]); the shell then opens the set's keys and runs [`Set::look`].

use std::hash::Hash;

use crate::fence::Counter;
use crate::lock::{self, Lock, Mode, Renew};
use crate::outcome::{Answer, Event, KeyLease, Lease, Next, Outcome, Party, Refusal, Reply, Step};
use crate::queue::{Waiter, Waiters};
use crate::session::Tie;

use super::{Run, Scope, check_in, free_for, lease_deadline};

/// One lock of a set: its key name, its value (`None` while free; changed in place, for the
/// shell to store back) and what the event did to it.
#[derive(Debug)]
pub struct Member<'k, H> {
    /// The lock's key name.
    pub key: &'k [u8],
    /// The lock's value.
    pub lock: Option<Lock>,
    /// What the event did to this lock: its steps, lease, counters, next look, and as reply
    /// its token when the set was granted.
    pub out: Outcome<H>,
}

impl<'k, H> Member<'k, H> {
    /// The lock `key`, now `lock`, before the event.
    #[must_use]
    pub fn new(key: &'k [u8], lock: Option<Lock>) -> Self {
        Self {
            key,
            lock,
            out: Outcome::new(),
        }
    }
}

/// Several distinct locks of one database, the state an event on all of them reads and
/// changes, and the reply it fills in.
pub struct Set<'a, 'k, H> {
    /// The locks, in the order the command named them.
    pub members: &'a mut [Member<'k, H>],
    /// Every lock's waiters.
    pub waiters: &'a mut Waiters<H>,
    /// The server's fencing counter.
    pub counter: &'a mut Counter,
    /// The locks' database.
    pub db: i32,
    /// The time of the event, unix ms.
    pub now_ms: u64,
    /// The answer to the command (start from [`Reply::Nothing`]).
    pub reply: &'a mut Reply,
}

impl<H: Copy + Eq + Hash> Set<'_, '_, H> {
    /// Runs `step` on each member as a single-lock event; `looking_at` is the set being looked
    /// at, which its members' hand-overs do not report as ready again.
    fn each(&mut self, looking_at: Option<H>, mut step: impl FnMut(&mut Run<'_, H>)) {
        for member in self.members.iter_mut() {
            let mut run = Run::new(Scope {
                lock: &mut member.lock,
                waiters: self.waiters,
                counter: self.counter,
                db: self.db,
                key: member.key,
                now_ms: self.now_ms,
                out: &mut member.out,
            });
            run.looking_at = looking_at;
            step(&mut run);
        }
    }

    /// Ends the shared leases that ended and hands each lock to the waiters that fit.
    fn settle(&mut self, looking_at: Option<H>) {
        self.each(looking_at, |run| {
            run.deciding.expire_shared();
            run.hand_over();
        });
    }

    /// Ends the event: when to look at each lock next.
    fn finish(&mut self) {
        self.each(None, |run| run.finish());
    }

    /// Whether `owner` can take every lock now: each is free or already its own exclusively,
    /// and nobody queues for any (unless `first` is the set waiter at the head of them all).
    fn grantable(&self, owner: &[u8], first: Option<H>) -> bool {
        let queue_ok = |key: &[u8]| match first {
            Some(handle) => self.waiters.first(self.db, key).map(|w| w.handle) == Some(handle),
            None => self.waiters.count(self.db, key) == 0,
        };
        self.members
            .iter()
            .all(|member| free_for(member.lock.as_ref(), owner) && queue_ok(member.key))
    }

    /// Gives `owner` (for `party`) every lock with a lease ending at `deadline_ms`: the free
    /// ones with one new fencing token, shared by them all; the ones it holds keep their token
    /// and hold count and have their lease reset, as `LOCK.ACQUIRE` by a holder does. Each
    /// member's reply is its token. Each holding is tied with the tie of `ties` at its place
    /// ([`Lock::tie`]), or untied when `ties` is empty.
    fn grant(
        &mut self,
        owner: &[u8],
        deadline_ms: i64,
        ties: &[Tie],
        party: &Party,
    ) -> Result<(), Refusal> {
        let token = if self.members.iter().any(|member| member.lock.is_none()) {
            Some(self.counter.issue(self.now_ms).map_err(Refusal::from)?)
        } else {
            None
        };
        for (at, member) in self.members.iter_mut().enumerate() {
            let lock = member
                .lock
                .get_or_insert_with(|| Lock::new(owner, token.unwrap_or(0), 1, Mode::Exclusive, 0));
            lock.tie(owner, ties.get(at).copied());
            let Lock::Exclusive(holding) = lock else {
                continue;
            };
            let out = &mut member.out;
            out.lease = KeyLease::At(deadline_ms);
            out.steps.push(Step::Hold {
                owner: party.clone(),
                token: holding.token,
                holds: holding.holds,
                lease: Lease::Until(deadline_ms),
            });
            out.steps.push(Step::Notify(Event::Acquire));
            out.reply = Reply::Token(holding.token);
        }
        if let (Some(_), Some(first)) = (token, self.members.first_mut()) {
            first.out.counts.acquisitions += 1;
            first.out.counts.multi_acquisitions += 1;
        }
        Ok(())
    }

    /// Asks for a look at the first lock in `retry_in_ms` ms, when a token can be issued.
    fn retry_in(&mut self, retry_in_ms: u64) {
        let retry = i64::try_from(retry_in_ms).unwrap_or(i64::MAX);
        let now = i64::try_from(self.now_ms).unwrap_or(i64::MAX);
        if let Some(first) = self.members.first_mut() {
            first.out.next = first.out.next.min(Next::At(now.saturating_add(retry)));
        }
    }

    /// `LOCK.MACQUIRE numkeys key [key ...] owner ttl`: after handing each lock to its
    /// waiters, takes every lock exclusively for `owner` with a lease ending at `deadline_ms`
    /// ([`Reply::Tokens`]), or none: [`Reply::Busy`] when any is held by another, held
    /// shared, or has waiters (the caller then queues with [`Set::wait`] or answers null).
    /// Each holding is tied with the tie of `ties` at its place, or untied when it is empty.
    pub fn acquire(mut self, owner: &[u8], deadline_ms: i64, ties: &[Tie]) {
        self.settle(None);
        *self.reply = if self.grantable(owner, None) {
            match self.grant(owner, deadline_ms, ties, &Party::Caller) {
                Ok(()) => Reply::Tokens,
                Err(refusal) => {
                    if let Refusal::TooSoon { retry_in_ms, .. } = refusal {
                        self.retry_in(retry_in_ms);
                    }
                    Reply::Refused(refusal)
                }
            }
        } else {
            if let Some(first) = self.members.first_mut() {
                first.out.counts.contended += 1;
            }
            Reply::Busy
        };
        self.finish();
    }

    /// Queues `waiter` (a set waiter) last for every lock, after [`Set::acquire`] replied
    /// [`Reply::Busy`] (or [`Refusal::TooSoon`]) and the caller blocked; each member's `next`
    /// says when to look at its lock for it.
    pub fn wait(self, waiter: Waiter<H>) {
        let keys = self.members.iter().map(|member| member.key);
        self.waiters.push(self.db, keys, waiter);
        for member in self.members.iter_mut() {
            let next = check_in(member.lock.as_ref(), true);
            member.out.next = member.out.next.min(next);
        }
    }

    /// A look at the set waiter `handle`, whose keys are the members in the order it named
    /// them: after each lock's hand-over, it is granted every lock in one step when it heads
    /// every queue and every lock is free for it, and answered with their tokens.
    pub fn look(mut self, handle: H) {
        self.settle(Some(handle));
        let first = self.members.first().map(|member| member.key);
        let waiter = first.and_then(|key| self.waiters.first(self.db, key));
        let Some((owner, ttl_ms, ties)) = waiter
            .filter(|waiter| waiter.handle == handle)
            .map(|waiter| (waiter.owner.clone(), waiter.ttl_ms, waiter.ties.clone()))
        else {
            return self.finish();
        };
        if !self.grantable(&owner, Some(handle)) {
            return self.finish();
        }
        let granted = lease_deadline(self.now_ms, ttl_ms)
            .ok_or(Refusal::InvalidExpire)
            .and_then(|deadline| self.grant(&owner, deadline, &ties, &Party::Owner(owner.clone())));
        let answer = match granted {
            Ok(()) => {
                let tokens = self.members.iter().map(|member| match member.out.reply {
                    Reply::Token(token) => token,
                    _ => 0,
                });
                Answer::GrantedSet(tokens.collect())
            }
            Err(Refusal::TooSoon { retry_in_ms, .. }) => {
                // The set keeps its places until a token can be issued.
                self.retry_in(retry_in_ms);
                return self.finish();
            }
            Err(refusal) => Answer::Failed(refusal),
        };
        self.waiters.remove(handle);
        if let Some(first) = self.members.first_mut() {
            if matches!(answer, Answer::GrantedSet(_)) {
                first.out.counts.handovers += 1;
            }
            first.out.steps.push(Step::Answer(handle, answer));
        }
        // The waiters now first may be the same owner's.
        self.each(None, |run| run.hand_over());
        self.finish();
    }

    /// `LOCK.MRELEASE numkeys key [key ...] owner`: releases one hold of `owner`'s holding of
    /// each lock (as `LOCK.RELEASE`, handing each freed lock over); replies how many it
    /// released.
    pub fn release(mut self, owner: &[u8]) {
        let mut released = 0;
        self.each(None, |run| {
            run.release(owner, false);
            if run.deciding.out.reply == Reply::Integer(1) {
                released += 1;
            }
        });
        *self.reply = Reply::Integer(released);
        self.finish();
    }

    /// `LOCK.MRENEW numkeys key [key ...] owner ttl`: when `owner` holds every lock, resets
    /// each lease to end at `deadline_ms` and replies how many (all); otherwise renews none
    /// and replies 0 — a set is held whole or not at all. Each holding is tied with the tie of
    /// `ties` at its place ([`Lock::tie`]; untouched when `ties` is empty).
    pub fn renew(mut self, owner: &[u8], deadline_ms: i64, ties: &[Tie]) {
        self.each(None, |run| run.deciding.expire_shared());
        let all_held = self
            .members
            .iter()
            .all(|member| lock::renew(member.lock.as_ref(), owner) == Renew::Renewed);
        let mut renewed = 0;
        if all_held {
            self.each(None, |run| {
                let at = usize::try_from(renewed).unwrap_or(usize::MAX);
                run.renew(owner, deadline_ms, ties.get(at).copied());
                renewed += 1;
            });
        }
        *self.reply = Reply::Integer(renewed);
        self.finish();
    }
}
