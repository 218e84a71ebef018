//! What one event did to one lock, as plain values: the answer to the command, the ordered
//! steps for the shell to carry out (effects for replicas and the AOF, keyspace events,
//! answers to waiters), the key's new lease, the counters and when to look at the lock next.
//!
//! [`crate::machine`] fills an [`Outcome`]; the module carries it out and decides nothing.
//! Nothing here allocates for a command that no waiter is involved in: the steps of one
//! command fit inline.

use smallvec::SmallVec;

use crate::fence::{Delay, Refused};
use crate::lock::Mode;
use crate::owner::Owner;

/// The answer to the command behind an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// No command: a timer, a key event, a waiter leaving.
    Nothing,
    /// The holding's fencing token (`LOCK.ACQUIRE`, `LOCK.RAISE`).
    Token(u64),
    /// Null: the lock is not the caller's (a refused upgrade, `LOCK.RAISE` by a non-holder).
    Null,
    /// An integer (`LOCK.RELEASE`, `LOCK.RENEW`: 1 done, 0 no lock, -1 held by another).
    Integer(i64),
    /// The lock is busy: null, or the caller waits if it asked `WAIT` and can block
    /// ([`crate::machine::wait`]).
    Busy,
    /// An error; nothing changed for the caller.
    Refused(Refusal),
    /// A set was granted (`LOCK.MACQUIRE`): each key's token is the reply in its member's
    /// outcome ([`crate::machine::Member`]).
    Tokens,
}

/// Why a request was refused with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `SHARED` with another `LIMIT` than the lock's (`None`: no limit).
    LimitDiffers {
        /// The request's limit.
        asked: Option<u32>,
        /// The lock's limit.
        lock: Option<u32>,
    },
    /// The lock is free but no fencing token can be issued for `retry_in_ms` ms: the counter
    /// is ahead of this server's clock, or (`starting`) the server's start is delayed (see
    /// [`crate::fence`]). A command may wait for it.
    TooSoon {
        /// When a token can be issued, in ms from now.
        retry_in_ms: u64,
        /// Why the start is delayed, when it is that and not the clock.
        starting: Option<Delay>,
    },
    /// The token space is used up (2^53).
    Exhausted,
    /// A waiter's lease would end past the largest time Redis stores.
    InvalidExpire,
    /// The lock's slot moved to another node while the waiter waited (Redis Cluster).
    SlotMoved,
}

/// The answer a waiter gets when it leaves its queue other than by timing out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// It holds the lock now, with this fencing token.
    Granted(u64),
    /// It holds every lock of its set now, with these fencing tokens, in the order it named
    /// the keys.
    GrantedSet(Box<[u64]>),
    /// Null: it asked for the lock exclusively while it held it shared with others.
    Null,
    /// An error reply.
    Failed(Refusal),
}

/// Who a holding written by an event belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Party {
    /// The owner the command named.
    Caller,
    /// Another owner: a waiter granted in this event, or the leader whose epoch the command
    /// named (`LOCK.PROCLAIM`).
    Owner(Box<[u8]>),
}

/// The lease a holding has after a write, as its effect carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// An exclusive holding whose lease (the key's expiry) did not change.
    Kept,
    /// An exclusive holding whose lease ends at this unix time, in ms.
    Until(i64),
    /// A shared holding: its own lease's end (unix ms) and the lock's `LIMIT`.
    Shared {
        /// When this holder's lease ends, unix ms.
        deadline_ms: i64,
        /// The lock's limit (`None`: none).
        limit: Option<u32>,
    },
}

/// A keyspace event (module class), published for the lock's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `lock.acquire`: a holding began or was taken again.
    Acquire,
    /// `lock.release`.
    Release,
    /// `lock.renew`.
    Renew,
    /// `lock.raise`.
    Raise,
    /// `lock.expire`: a shared holder's lease ended.
    Expire,
    /// `lock.proclaim`: an election's leader proclaimed a new value.
    Proclaim,
}

/// One thing the shell does, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<H> {
    /// Replicate a holding as it is now (`LOCK.APPLY key owner token holds ...`).
    Hold {
        /// Whose holding.
        owner: Party,
        /// Its fencing token.
        token: u64,
        /// Its reentrant hold count.
        holds: u32,
        /// Its lease.
        lease: Lease,
    },
    /// Replicate the end of this owner's shared holding (`LOCK.APPLY key owner DROP`).
    Drop(Owner),
    /// Replicate "the lock is free" (`DEL key`).
    Free,
    /// Publish a keyspace event.
    Notify(Event),
    /// Answer the waiter with this id and take it off its queue (it already is).
    Answer(H, Answer),
}

/// How many of each counter of `INFO lock` an event adds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// New holdings (a new token each), by a command or a hand-over.
    pub acquisitions: u32,
    /// `LOCK.ACQUIRE` calls that found the lock busy.
    pub contended: u32,
    /// Successful releases.
    pub releases: u32,
    /// Successful renewals.
    pub renewals: u32,
    /// Locks handed to a waiter.
    pub handovers: u32,
    /// Shared holders whose lease ended.
    pub expired_leases: u32,
    /// Sets granted (`LOCK.MACQUIRE`) with a new token; each also counts once in
    /// `acquisitions`.
    pub multi_acquisitions: u32,
}

/// When the lock needs a look again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Not for now: nobody waits, and no shared lease must end.
    Never,
    /// At this unix time, in ms.
    At(i64),
    /// When the exclusive lease ends: the key's expiry, which only the keyspace knows.
    LeaseEnd,
}

impl Next {
    /// The earlier of two looks (a lease end counts as later than a fixed time: the shell
    /// schedules both when it sees both).
    #[must_use]
    pub fn min(self, other: Self) -> Self {
        match (self, other) {
            (Self::Never, next) | (next, Self::Never) => next,
            (Self::At(a), Self::At(b)) => Self::At(a.min(b)),
            (Self::At(at), Self::LeaseEnd) | (Self::LeaseEnd, Self::At(at)) => Self::At(at),
            (Self::LeaseEnd, Self::LeaseEnd) => Self::LeaseEnd,
        }
    }
}

/// The key's lease after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyLease {
    /// Unchanged (or the key is gone).
    Kept,
    /// Ends at this unix time, in ms (`PEXPIREAT`).
    At(i64),
}

/// Everything one event decided for one lock. The lock value itself was changed in place (see
/// [`crate::machine`]); this is the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome<H> {
    /// The answer to the command.
    pub reply: Reply,
    /// What to replicate, publish and answer, in this order.
    pub steps: SmallVec<[Step<H>; 2]>,
    /// The key's lease afterwards.
    pub lease: KeyLease,
    /// The counters to add.
    pub counts: Counts,
    /// When to look at the lock again.
    pub next: Next,
    /// A set waiter heads the lock's queue and the lock is free for it: the set needs a look
    /// ([`crate::machine::Set::look`]) as soon as may be.
    pub ready_set: Option<H>,
}

impl<H> Outcome<H> {
    /// Nothing done yet.
    #[must_use]
    pub fn new() -> Self {
        Self {
            reply: Reply::Nothing,
            steps: SmallVec::new(),
            lease: KeyLease::Kept,
            counts: Counts::default(),
            next: Next::Never,
            ready_set: None,
        }
    }
}

impl<H> Default for Outcome<H> {
    fn default() -> Self {
        Self::new()
    }
}

/// The limit a request asked for (`None` for an exclusive request or `SHARED` without one).
#[must_use]
pub fn asked_limit(mode: Mode) -> Option<u32> {
    match mode {
        Mode::Shared(limit) => limit,
        Mode::Exclusive => None,
    }
}

impl From<Refused> for Refusal {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::AheadOfClock { retry_in_ms } => Self::TooSoon {
                retry_in_ms,
                starting: None,
            },
            Refused::Starting { retry_in_ms, why } => Self::TooSoon {
                retry_in_ms,
                starting: Some(why),
            },
            Refused::Exhausted => Self::Exhausted,
        }
    }
}
