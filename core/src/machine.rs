//! One entry point per event that can change a lock — a command (`acquire`, `release`,
//! `renew`, `raise`), a look (a lease timer, a key deleted, expired or flushed, a waiter
//! leaving), a waiter joining its queue, a Cluster slot moving away, a master's effect reaching
//! a replica — each deciding everything about the lock and returning it as an [`Outcome`].
//!
//! An event works on a [`Scope`]: the lock's value (`None` while free; changed in place, as the
//! shell stores it back), the waiters' queues, the fencing counter, the time, and the
//! [`Outcome`] it fills in (passed in, so that it is never copied on the way back). It never
//! calls out: the shell carries out the outcome afterwards.
//!
//! # The hand-over rule
//! When a lock can take another holder, its first waiters get it in the same event, in arrival
//! order, so nobody who arrives later (or without waiting) takes it in between: a request is
//! busy while anyone queues for the lock ([`crate::lock::acquire`]'s `queued`). A shared waiter
//! at the head brings every shared waiter behind it up to the next exclusive one (and up to the
//! limit): the phase-fair order of `ZooKeeper`'s shared-lock recipe, in which no writer starves
//! behind a stream of readers and no reader behind writers. Every event that may free room —
//! a release, a downgrade, a lease ending, a key deleted, a waiter at the head leaving — hands
//! over before it returns, and `acquire` hands over before it looks at the request.

use std::hash::Hash;

use crate::fence::Counter;
use crate::holders::Holder;
use crate::lock::{self, Acquire, Holding, Lock, Mode, Release, Renew};
use crate::outcome::{
    Answer, Event, KeyLease, Lease, Next, Outcome, Party, Refusal, Reply, Step, asked_limit,
};
use crate::queue::{Waiter, Waiters};
use crate::session::Tie;

mod set;

pub use set::{Member, Set};

/// What `LOCK.ACQUIRE` asks for.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The owner it acquires for (1 to 256 bytes, checked by the caller).
    pub owner: &'a [u8],
    /// Exclusive, or shared with its `LIMIT`.
    pub mode: Mode,
    /// `REENTRANT`: one more hold for a holder.
    pub reentrant: bool,
    /// When a lease granted now ends, unix ms ([`lease_deadline`]).
    pub deadline_ms: i64,
    /// The tie the holding is to keep (`SESSION`: the session and the place of the entry it
    /// logged for the holding, [`crate::session`]), unless it is tied to that session already
    /// ([`Lock::tie`]); `None` unties it.
    pub tie: Option<Tie>,
    /// `LOCK.CAMPAIGN`'s value: what the holder, an election's leader, proclaims once granted
    /// ([`Lock::proclaim`]); `None` keeps the value a holder had (`LOCK.ACQUIRE`).
    pub value: Option<&'a [u8]>,
}

/// One lock, the state an event on it reads and changes, and the outcome the event fills.
pub struct Scope<'a, H> {
    /// The lock's value; `None` while it is free (its key does not exist). Changed in place.
    pub lock: &'a mut Option<Lock>,
    /// Every lock's waiters.
    pub waiters: &'a mut Waiters<H>,
    /// The server's fencing counter.
    pub counter: &'a mut Counter,
    /// The lock's database.
    pub db: i32,
    /// The lock's key name.
    pub key: &'a [u8],
    /// The time of the event, unix ms.
    pub now_ms: u64,
    /// What the event decided, filled in by it (start from [`Outcome::new`]).
    pub out: &'a mut Outcome<H>,
}

/// When a lease of `ttl_ms` given at `now_ms` ends, unix ms; `None` for a lease that is not
/// positive or ends past the largest time Redis stores (`i64` ms).
#[must_use]
pub fn lease_deadline(now_ms: u64, ttl_ms: i64) -> Option<i64> {
    i64::try_from(now_ms)
        .ok()
        .filter(|_| ttl_ms > 0)
        .and_then(|now| now.checked_add(ttl_ms))
}

/// The lock with what deciding changes on the way: the counter and the outcome.
struct Deciding<'a, H> {
    lock: &'a mut Option<Lock>,
    counter: &'a mut Counter,
    now_ms: u64,
    out: &'a mut Outcome<H>,
}

/// What trying to grant one request came to.
enum Tried {
    /// The owner holds the lock now, with this token.
    Held(u64),
    /// Busy: nothing changed.
    Busy,
    /// A refused upgrade: null, nothing changed.
    Null,
    /// An error: nothing changed.
    Refused(Refusal),
}

impl<H> Deciding<'_, H> {
    fn now(&self) -> i64 {
        i64::try_from(self.now_ms).unwrap_or(i64::MAX)
    }

    /// Ends the shared holdings whose lease ended; the lock is free after the last.
    #[inline]
    fn expire_shared(&mut self) {
        if matches!(self.lock, Some(Lock::Shared(_))) {
            self.expire_shared_holders();
        }
    }

    /// [`Self::expire_shared`] on a lock held shared.
    fn expire_shared_holders(&mut self) {
        let now = self.now();
        let Some(Lock::Shared(shared)) = self.lock.as_mut() else {
            return;
        };
        if shared
            .holders
            .soonest()
            .is_none_or(|holder| holder.deadline_ms > now)
        {
            return;
        }
        while let Some(holder) = shared.holders.pop_expired(now) {
            self.out.steps.push(Step::Drop(holder.owner));
            self.out.steps.push(Step::Notify(Event::Expire));
            self.out.counts.expired_leases += 1;
        }
        self.set_lease(None);
    }

    /// After the holdings changed: the key's lease is the exclusive `deadline_ms` or the last
    /// shared holder's; a lock with no holder left is freed.
    fn set_lease(&mut self, exclusive_deadline_ms: Option<i64>) {
        self.out.lease = match self.lock.as_ref() {
            Some(Lock::Shared(shared)) if shared.holders.is_empty() => {
                *self.lock = None;
                self.out.steps.push(Step::Free);
                KeyLease::Kept
            }
            Some(lock) => lock
                .shared_deadline()
                .or(exclusive_deadline_ms)
                .map_or(self.out.lease, KeyLease::At),
            None => KeyLease::Kept,
        };
    }

    /// Decides `request` and, when it is granted, carries it out on the lock, the holding tied
    /// as the request says ([`Lock::tie`]).
    fn try_grant(&mut self, request: &Request, queued: bool) -> Tried {
        let Request {
            owner,
            mode,
            reentrant,
            deadline_ms,
            tie,
            value,
        } = *request;
        let decision = lock::acquire(self.lock.as_ref(), owner, mode, reentrant, queued);
        match decision {
            Acquire::Busy => return Tried::Busy,
            Acquire::UpgradeRefused => return Tried::Null,
            Acquire::LimitDiffers { limit } => {
                let asked = asked_limit(mode);
                return Tried::Refused(Refusal::LimitDiffers { asked, lock: limit });
            }
            _ => {}
        }
        let token = if decision.needs_token() {
            match self.counter.issue(self.now_ms) {
                Ok(token) => token,
                Err(refused) => return Tried::Refused(refused.into()),
            }
        } else {
            0
        };
        // A lock made now holds `owner` alone, untied, with `token`: it is not looked up again
        // (every owner comparison reads up to 38 bytes) unless it is to be tied or proclaim.
        let made = match lock::grant(
            self.lock.as_mut(),
            owner,
            mode,
            decision,
            token,
            deadline_ms,
        ) {
            Some(new) => {
                *self.lock = Some(new);
                true
            }
            None => false,
        };
        if let Some(lock) = self.lock.as_mut() {
            if !made || tie.is_some() {
                lock.tie(owner, tie);
            }
            if let Some(value) = value {
                let epoch = lock.leader().filter(|leader| *leader.owner == *owner);
                if let Some(epoch) = epoch.map(|leader| leader.token) {
                    lock.proclaim(epoch, value);
                }
            }
        }
        if decision.needs_token() {
            self.out.counts.acquisitions += 1;
        }
        self.set_lease(Some(deadline_ms));
        if made && matches!(self.lock, Some(Lock::Exclusive(_))) {
            return Tried::Held(token);
        }
        self.lock
            .as_ref()
            .and_then(|lock| lock.token_of(owner, i64::MIN))
            .map_or(Tried::Refused(Refusal::Exhausted), Tried::Held)
    }

    /// `owner`'s holding as an effect carries it; an exclusive holding's lease is
    /// `deadline_ms` (`None`: kept).
    fn holding(&self, owner: &[u8], deadline_ms: Option<i64>) -> Option<(u64, u32, Lease)> {
        match self.lock.as_ref()? {
            Lock::Exclusive(holding) => Some((
                holding.token,
                holding.holds,
                deadline_ms.map_or(Lease::Kept, Lease::Until),
            )),
            Lock::Shared(shared) => shared.holders.get(owner).map(|holder| {
                let lease = Lease::Shared {
                    deadline_ms: holder.deadline_ms,
                    limit: shared.limit,
                };
                (holder.token, holder.holds, lease)
            }),
        }
    }

    /// Replicates `owner`'s holding for `party` and publishes `event`.
    fn wrote(&mut self, party: Party, owner: &[u8], deadline_ms: Option<i64>, event: Event) {
        if let Some((token, holds, lease)) = self.holding(owner, deadline_ms) {
            self.out.steps.push(Step::Hold {
                owner: party,
                token,
                holds,
                lease,
            });
        }
        self.out.steps.push(Step::Notify(event));
    }
}

/// A scope with its decisions under way.
struct Run<'a, H> {
    deciding: Deciding<'a, H>,
    waiters: &'a mut Waiters<H>,
    db: i32,
    key: &'a [u8],
    /// The set whose look this is: not reported as ready again.
    looking_at: Option<H>,
}

impl<'a, H: Copy + Eq + Hash> Run<'a, H> {
    #[inline]
    fn new(scope: Scope<'a, H>) -> Self {
        Self {
            deciding: Deciding {
                lock: scope.lock,
                counter: scope.counter,
                now_ms: scope.now_ms,
                out: scope.out,
            },
            waiters: scope.waiters,
            db: scope.db,
            key: scope.key,
            looking_at: None,
        }
    }

    fn waiting(&self) -> bool {
        self.waiters.total() > 0 && self.waiters.count(self.db, self.key) > 0
    }

    /// Grants the first waiters while they can be granted. A set waiter is granted only with
    /// all its keys ([`Set::look`]): the hand-over stops at it, and reports it ready when this
    /// lock is free for it. Where no client waits for any lock, one load and no call.
    #[inline]
    fn hand_over(&mut self) {
        if self.waiters.total() > 0 {
            self.hand_over_waiters();
        }
    }

    /// [`Self::hand_over`] where clients wait.
    fn hand_over_waiters(&mut self) {
        let now_ms = self.deciding.now_ms;
        while let Some(first) = self.waiters.first(self.db, self.key) {
            if first.set {
                let ready = free_for(self.deciding.lock.as_ref(), &first.owner);
                if ready && self.looking_at != Some(first.handle) {
                    self.deciding.out.ready_set = Some(first.handle);
                }
                return;
            }
            let Some(deadline) = lease_deadline(now_ms, first.ttl_ms) else {
                self.answer_first(Answer::Failed(Refusal::InvalidExpire));
                continue;
            };
            let request = Request {
                owner: &first.owner,
                mode: first.mode,
                reentrant: first.reentrant,
                deadline_ms: deadline,
                tie: first.ties.first().copied(),
                value: first.value.as_deref(),
            };
            let tried = self.deciding.try_grant(&request, false);
            let answer = match tried {
                Tried::Busy => return,
                Tried::Refused(Refusal::TooSoon { retry_in_ms, .. }) => {
                    // The waiter keeps its place until a token can be issued.
                    let retry = i64::try_from(retry_in_ms).unwrap_or(i64::MAX);
                    let at = self.deciding.now().saturating_add(retry);
                    self.deciding.out.next = self.deciding.out.next.min(Next::At(at));
                    return;
                }
                Tried::Held(token) => {
                    let hold = self.deciding.holding(&first.owner, Some(deadline));
                    let Some(waiter) = self.waiters.pop(self.db, self.key) else {
                        return;
                    };
                    if let Some((token, holds, lease)) = hold {
                        self.deciding.out.steps.push(Step::Hold {
                            owner: Party::Owner(waiter.owner),
                            token,
                            holds,
                            lease,
                        });
                    }
                    let out = &mut self.deciding.out;
                    out.steps.push(Step::Notify(Event::Acquire));
                    out.steps
                        .push(Step::Answer(waiter.handle, Answer::Granted(token)));
                    out.counts.handovers += 1;
                    continue;
                }
                Tried::Null => Answer::Null,
                Tried::Refused(refusal) => Answer::Failed(refusal),
            };
            self.answer_first(answer);
        }
    }

    /// Takes the first waiter off its queue with `answer`.
    fn answer_first(&mut self, answer: Answer) {
        if let Some(waiter) = self.waiters.pop(self.db, self.key) {
            self.deciding
                .out
                .steps
                .push(Step::Answer(waiter.handle, answer));
        }
    }

    /// Ends the outcome: when to look at the lock next.
    #[inline]
    fn finish(&mut self) {
        let waiting = self.waiting();
        let next = check_in(self.deciding.lock.as_ref(), waiting);
        let out = &mut *self.deciding.out;
        out.next = out.next.min(next);
    }
}

impl<H: Copy + Eq + Hash> Run<'_, H> {
    /// [`Scope::release`] (every hold with `whole`), without its end.
    fn release(&mut self, owner: &[u8], whole: bool) {
        let deciding = &mut self.deciding;
        deciding.expire_shared();
        let decision = lock::release(deciding.lock.as_ref(), owner, whole);
        deciding.out.reply = Reply::Integer(match decision {
            Release::Missing => 0,
            Release::HeldByOther => -1,
            Release::Freed => {
                *deciding.lock = None;
                deciding.out.lease = KeyLease::Kept;
                deciding.out.steps.push(Step::Free);
                1
            }
            Release::Left => {
                if let Some(holder) = deciding.lock.as_mut().and_then(|l| l.remove_holder(owner)) {
                    deciding.out.steps.push(Step::Drop(holder.owner));
                }
                deciding.set_lease(None);
                1
            }
            Release::Decremented { holds } => {
                if let Some(lock) = deciding.lock.as_mut() {
                    lock.set_holds(owner, holds, None);
                }
                if let Some((token, holds, lease)) = deciding.holding(owner, None) {
                    deciding.out.steps.push(Step::Hold {
                        owner: Party::Caller,
                        token,
                        holds,
                        lease,
                    });
                }
                1
            }
        });
        if deciding.out.reply == Reply::Integer(1) {
            deciding.out.steps.push(Step::Notify(Event::Release));
            deciding.out.counts.releases += 1;
        }
        if matches!(decision, Release::Freed | Release::Left) {
            self.hand_over();
        }
    }

    /// [`Scope::renew`], without its end.
    fn renew(&mut self, owner: &[u8], deadline_ms: i64, tie: Option<Tie>) {
        let deciding = &mut self.deciding;
        deciding.expire_shared();
        let decision = lock::renew(deciding.lock.as_ref(), owner);
        deciding.out.reply = Reply::Integer(match decision {
            Renew::Missing => 0,
            Renew::HeldByOther => -1,
            Renew::Renewed => {
                if let Some(lock) = deciding.lock.as_mut() {
                    let holds = lock.holds_of(owner).unwrap_or(1);
                    lock.set_holds(owner, holds, Some(deadline_ms));
                    if tie.is_some() {
                        lock.tie(owner, tie);
                    }
                }
                deciding.set_lease(Some(deadline_ms));
                deciding.wrote(Party::Caller, owner, Some(deadline_ms), Event::Renew);
                deciding.out.counts.renewals += 1;
                1
            }
        });
    }
}

/// Whether a set's `owner` can take `lock` now: it is free, or held exclusively by `owner`.
fn free_for(lock: Option<&Lock>, owner: &[u8]) -> bool {
    match lock {
        None => true,
        Some(Lock::Exclusive(holding)) => *holding.owner == *owner,
        Some(Lock::Shared(_)) => false,
    }
}

/// When a lock needs a look with nothing else happening: when its first shared lease ends,
/// when its exclusive lease ends if someone waits, else never.
fn check_in(lock: Option<&Lock>, waiting: bool) -> Next {
    match lock {
        Some(Lock::Shared(shared)) => shared
            .holders
            .soonest()
            .map_or(Next::Never, |holder| Next::At(holder.deadline_ms)),
        Some(Lock::Exclusive(_)) if waiting => Next::LeaseEnd,
        _ => Next::Never,
    }
}

impl<H: Copy + Eq + Hash> Scope<'_, H> {
    /// `LOCK.ACQUIRE key owner ttl [REENTRANT] [SHARED [LIMIT n]]`: hands over to the lock's
    /// waiters first, then decides the request ([`crate::lock::acquire`]) and grants it with
    /// a new fencing token when a holding begins. [`Reply::Busy`] when it must wait; the
    /// caller then queues it with [`wait`] or answers null.
    #[inline]
    pub fn acquire(self, request: &Request) {
        let mut run = Run::new(self);
        run.deciding.expire_shared();
        run.hand_over();
        let queued = run.waiting();
        let (owner, deadline_ms) = (request.owner, request.deadline_ms);
        let deciding = &mut run.deciding;
        deciding.out.reply = match deciding.try_grant(request, queued) {
            Tried::Held(token) => {
                deciding.wrote(Party::Caller, owner, Some(deadline_ms), Event::Acquire);
                Reply::Token(token)
            }
            Tried::Busy => {
                deciding.out.counts.contended += 1;
                Reply::Busy
            }
            Tried::Null => Reply::Null,
            Tried::Refused(refusal) => {
                if let Refusal::TooSoon { retry_in_ms, .. } = refusal {
                    let retry = i64::try_from(retry_in_ms).unwrap_or(i64::MAX);
                    deciding.out.next = Next::At(deciding.now().saturating_add(retry));
                }
                Reply::Refused(refusal)
            }
        };
        if matches!(run.deciding.out.reply, Reply::Token(_)) {
            // A writer that downgraded lets the readers queued first join it.
            run.hand_over();
        }
        run.finish();
    }

    /// `LOCK.RELEASE key owner`: releases one hold of `owner`'s holding
    /// ([`crate::lock::release`]); when a holding ends, the waiters that fit now are granted.
    /// Replies 1 released, 0 no lock, -1 held by another.
    pub fn release(self, owner: &[u8]) {
        let mut run = Run::new(self);
        run.release(owner, false);
        run.finish();
    }

    /// A session that `owner`'s holding is tied to ended ([`crate::session`]): the holding
    /// ends, every hold of it at once, as a release would end it — effects, events, counters
    /// and the hand-over alike. Replies as [`Scope::release`].
    pub fn end_holding(self, owner: &[u8]) {
        let mut run = Run::new(self);
        run.release(owner, true);
        run.finish();
    }

    /// `LOCK.RENEW key owner ttl [SESSION id]`: `owner`'s lease ends at `deadline_ms` now, and
    /// with a `tie` its holding is tied ([`Lock::tie`]). A lease that has ended is not brought
    /// back. Replies 1 renewed, 0 no lock, -1 held by another.
    pub fn renew(self, owner: &[u8], deadline_ms: i64, tie: Option<Tie>) {
        let mut run = Run::new(self);
        run.renew(owner, deadline_ms, tie);
        run.finish();
    }

    /// `LOCK.RAISE key owner token`: `owner`'s holding's token becomes at least `token`
    /// (checked against [`crate::fence::raise_limit`] by the caller), and so does the counter.
    /// Replies the holding's token afterwards, or null when `owner` holds nothing.
    pub fn raise(self, owner: &[u8], token: u64) {
        let mut run = Run::new(self);
        let deciding = &mut run.deciding;
        deciding.expire_shared();
        let raised = deciding
            .lock
            .as_mut()
            .and_then(|lock| lock.raise(owner, token));
        deciding.out.reply = match raised {
            Some(raised) => {
                deciding.counter.observe(raised);
                deciding.wrote(Party::Caller, owner, None, Event::Raise);
                Reply::Token(raised)
            }
            None => Reply::Null,
        };
        run.finish();
    }

    /// `LOCK.PROCLAIM key epoch value`: the leader whose term is `epoch` proclaims `value` from
    /// now on, its epoch and lease unchanged ([`Lock::proclaim`]). Replies 1, or 0 when no term
    /// `epoch` leads (it ended, or never began).
    pub fn proclaim(self, epoch: u64, value: &[u8]) {
        let mut run = Run::new(self);
        let deciding = &mut run.deciding;
        let leader = deciding
            .lock
            .as_mut()
            .and_then(|lock| lock.proclaim(epoch, value));
        let leader: Option<Box<[u8]>> = leader.map(Box::from);
        deciding.out.reply = Reply::Integer(match leader {
            Some(owner) => {
                deciding.wrote(Party::Owner(owner.clone()), &owner, None, Event::Proclaim);
                1
            }
            None => 0,
        });
        run.finish();
    }

    /// `LOCK.RESIGN key epoch`: the term `epoch` ends, as its leader's release of every hold
    /// would end it, and the next waiting candidate leads in the same step, with a new epoch.
    /// Replies 1, or 0 when no term `epoch` leads.
    pub fn resign(self, epoch: u64) {
        let mut run = Run::new(self);
        let leader = run.deciding.lock.as_ref().and_then(Lock::leader);
        let leader: Option<Box<[u8]>> = leader
            .filter(|leader| leader.token == epoch)
            .map(|leader| Box::from(&*leader.owner));
        match leader {
            Some(owner) => run.release(&owner, true),
            None => run.deciding.out.reply = Reply::Integer(0),
        }
        run.finish();
    }

    /// A look at the lock: its lease timer fired, its key was deleted, expired, evicted or
    /// flushed, or a waiter left its queue. Ends shared leases that ended and hands over.
    pub fn look(self) {
        let mut run = Run::new(self);
        run.deciding.expire_shared();
        run.hand_over();
        run.finish();
    }

    /// The lock's slot moved, or is moving, to another node (Redis Cluster): every waiter
    /// leaves with [`Refusal::SlotMoved`], which clients retry on the slot's new node.
    pub fn turn_away(self) {
        let mut run = Run::new(self);
        while run.waiting() {
            run.answer_first(Answer::Failed(Refusal::SlotMoved));
        }
    }
}

/// Queues `waiter` last for the lock `key` of `db` (now `lock`), after [`Scope::acquire`]
/// replied [`Reply::Busy`] (or [`Refusal::TooSoon`]) and the caller blocked. Returns when to
/// look at the lock for it.
pub fn wait<H: Copy + Eq + Hash>(
    lock: Option<&Lock>,
    waiters: &mut Waiters<H>,
    db: i32,
    key: &[u8],
    waiter: Waiter<H>,
) -> Next {
    waiters.push(db, [key], waiter);
    check_in(lock, true)
}

/// What one `LOCK.APPLY` from a master (or the AOF) says.
#[derive(Debug, Clone)]
pub enum Applied<'a> {
    /// `holding` is the lock's in `mode`; its lease ends at `deadline_ms` (unix ms), or keeps
    /// the key's lease when `None` (exclusive only: [`crate::args::apply`] refuses a shared
    /// holding without a deadline).
    Holds {
        /// The holding, already checked ([`Holding::from_parts`]).
        holding: Holding,
        /// Exclusive, or shared with its limit.
        mode: Mode,
        /// When the lease ends.
        deadline_ms: Option<i64>,
    },
    /// `owner` no longer holds the lock.
    Dropped {
        /// The owner whose holding ended.
        owner: &'a [u8],
    },
}

/// Why [`apply`] refused an effect: it would give a shared lock more holders than its limit,
/// which no master does (it refuses to grant beyond the limit, and a lock keeps its limit
/// while held), and which the RDB would then refuse to load ([`crate::saved`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverLimit;

/// Sets one holding of `lock` as a master decided it, on a replica or from the AOF, and raises
/// `counter` to at least its token: nothing is decided again, so a replica ends with the same
/// tokens and deadlines. Returns the key's lease afterwards; `lock` is `None` when it is free.
///
/// # Errors
/// [`OverLimit`]; nothing changes then.
pub fn apply(
    lock: &mut Option<Lock>,
    counter: &mut Counter,
    effect: Applied,
) -> Result<KeyLease, OverLimit> {
    Ok(match effect {
        Applied::Holds {
            holding,
            mode: Mode::Exclusive,
            deadline_ms,
        } => {
            counter.observe(holding.token);
            *lock = Some(Lock::Exclusive(holding));
            deadline_ms.map_or(KeyLease::Kept, KeyLease::At)
        }
        Applied::Holds {
            holding,
            mode: Mode::Shared(limit),
            deadline_ms,
        } => {
            let deadline = deadline_ms.unwrap_or(-1);
            match lock {
                Some(Lock::Shared(shared)) => {
                    let new = usize::from(shared.holders.get(&holding.owner).is_none());
                    if limit.is_some_and(|limit| shared.holders.len() + new > limit as usize) {
                        return Err(OverLimit);
                    }
                    counter.observe(holding.token);
                    shared.limit = limit;
                    let Holding {
                        owner,
                        token,
                        holds,
                        ..
                    } = holding;
                    shared
                        .holders
                        .put(Holder::new(&owner, token, holds, deadline));
                }
                _ => {
                    counter.observe(holding.token);
                    *lock = Some(Lock::new(
                        &holding.owner,
                        holding.token,
                        holding.holds,
                        Mode::Shared(limit),
                        deadline,
                    ));
                }
            }
            shared_lease(lock.as_ref())
        }
        Applied::Dropped { owner } => {
            let emptied = match lock.as_mut() {
                Some(Lock::Shared(shared)) => {
                    shared.holders.remove(owner);
                    shared.holders.is_empty()
                }
                Some(Lock::Exclusive(holding)) => *holding.owner == *owner,
                None => false,
            };
            if emptied {
                *lock = None;
            }
            shared_lease(lock.as_ref())
        }
    })
}

fn shared_lease(lock: Option<&Lock>) -> KeyLease {
    lock.and_then(Lock::shared_deadline)
        .map_or(KeyLease::Kept, KeyLease::At)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared_effect(owner: &[u8], token: u64, limit: Option<u32>) -> Applied<'static> {
        Applied::Holds {
            holding: Holding::from_parts(owner, b"", token, 1).expect("a holding"),
            mode: Mode::Shared(limit),
            deadline_ms: Some(1_000),
        }
    }

    #[test]
    fn an_effect_beyond_the_limit_changes_nothing() {
        let (mut lock, mut counter) = (None, Counter::new());
        let first = apply(&mut lock, &mut counter, shared_effect(b"a", 5, Some(1)));
        assert_eq!(first, Ok(KeyLease::At(1_000)));
        let before = lock.clone();
        let second = apply(&mut lock, &mut counter, shared_effect(b"b", 9, Some(1)));
        assert_eq!(second, Err(OverLimit));
        assert_eq!((&lock, counter.last()), (&before, 5));
        let again = apply(&mut lock, &mut counter, shared_effect(b"a", 5, Some(1)));
        assert!(again.is_ok(), "the same holder again is not one more");
    }
}
