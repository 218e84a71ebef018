//! The lock itself — free, held exclusively by one owner, or held shared by 1 to n owners (a
//! read-write lock's readers, a semaphore's permits) — and the rules that decide what
//! `LOCK.ACQUIRE`, `LOCK.RELEASE` and `LOCK.RENEW` do to it.
//!
//! This file is plain Rust with no Redis in it, so every rule is unit-tested on its own. An
//! exclusive holding's lease is the key's own expiry (`PTTL key`), which Redis persists,
//! replicates and enforces; each shared holder has its own deadline, and the key expires with
//! the last of them. The waiting order (first come, first served, across both kinds — the
//! phase-fair order of `ZooKeeper`'s shared-lock recipe) is kept by [`crate::queue`], and the
//! hand-over to waiters by [`crate::machine`].

use crate::fence::MAX_TOKEN;
use crate::holders::{Holder, Holders};
use crate::owner::{Owner, check_owner, check_value};
use crate::session::Tie;

/// An exclusive holding. Its lease is the key's expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The owner identifier the holder chose (1 to [`crate::owner::MAX_OWNER_LEN`] bytes, any
    /// bytes), with the value it proclaims when it leads an election ([`Owner::value`]).
    pub owner: Owner,
    /// The fencing token issued when this holding began; unchanged by renewals and re-entry.
    pub token: u64,
    /// The reentrant hold count: how many `LOCK.RELEASE` calls free the lock (at least 1).
    pub holds: u32,
    /// The session it is tied to and its entry there ([`crate::session`]), on the master that
    /// tied it: neither saved nor replicated.
    pub tie: Option<Tie>,
}

/// A lock held shared: its holders, and the `LIMIT` they were granted under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shared {
    /// At most this many holders (`LIMIT n`, a semaphore); `None` for a read-write lock's
    /// readers, unlimited.
    pub limit: Option<u32>,
    /// The holders, at least one.
    pub holders: Holders,
}

/// The value stored under a lock's key while someone holds it. A free lock has no key at all:
/// releasing or expiring a lock leaves nothing behind in the keyspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lock {
    /// One owner holds it.
    Exclusive(Holding),
    /// 1 to `limit` owners hold it together.
    Shared(Box<Shared>),
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The only holder (a lock, a read-write lock's writer).
    Exclusive,
    /// One of many (`SHARED`): a reader, or with a limit (`LIMIT n`) a semaphore permit.
    Shared(Option<u32>),
}

/// What `LOCK.ACQUIRE` does, decided from the lock's current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// A new holding begins, with a new fencing token and a hold count of 1.
    New,
    /// `owner` holds it in this mode already: the lease is reset, the token stays `token`, and
    /// the hold count becomes `holds` (one more with `REENTRANT`, unchanged without — so a
    /// retried acquire is harmless).
    Again {
        /// The token of the existing holding.
        token: u64,
        /// The hold count after this acquire.
        holds: u32,
    },
    /// The exclusive holder asks `SHARED`: it becomes a shared holder with the same token.
    Downgrade {
        /// The hold count after this acquire.
        holds: u32,
    },
    /// The only shared holder asks for the lock exclusively: it becomes the exclusive holder
    /// with a new token, since exclusive writing starts now.
    Upgrade {
        /// The hold count after this acquire.
        holds: u32,
    },
    /// Others hold it in a conflicting mode, the limit is reached, or others queue first:
    /// nothing changes (wait, or null).
    Busy,
    /// A shared holder asks for the lock exclusively while others hold it too: null at once,
    /// even with `WAIT` — two waiting upgraders would wait for each other forever.
    UpgradeRefused,
    /// `SHARED` with another `LIMIT` than the lock was granted under (`None`: no limit).
    LimitDiffers {
        /// The lock's limit.
        limit: Option<u32>,
    },
}

/// What `LOCK.RELEASE` does, decided from the lock's current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The last hold of the last holder was released: the key is deleted.
    Freed,
    /// The last hold of a shared holder was released; others still hold the lock.
    Left,
    /// One hold was released; `holds` remain.
    Decremented {
        /// The hold count left.
        holds: u32,
    },
    /// There is no lock (never taken, released, or its lease expired). Reply `0`.
    Missing,
    /// Others hold it, not `owner`: nothing changes. Reply `-1`.
    HeldByOther,
}

/// What `LOCK.RENEW` does, decided from the lock's current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renew {
    /// `owner` holds it: its lease is reset. Reply `1`.
    Renewed,
    /// There is no lock. Reply `0`.
    Missing,
    /// Others hold it, not `owner`: nothing changes. Reply `-1`.
    HeldByOther,
}

impl Holding {
    /// A holding as an RDB, `RESTORE` or a master's `LOCK.APPLY` describes it (`value` empty
    /// unless it is an election's leader), or `None` when no server could have written it: an
    /// empty or oversized owner, an oversized value, a token outside 1..=2^53-1, or no holds.
    #[must_use]
    pub fn from_parts(owner: &[u8], value: &[u8], token: u64, holds: u64) -> Option<Self> {
        let owner = check_owner(owner).ok()?;
        let value = check_value(value).ok()?;
        let holds = u32::try_from(holds).ok().filter(|holds| *holds > 0)?;
        (1..=MAX_TOKEN).contains(&token).then(|| Self {
            owner: Owner::with_value(owner, value),
            token,
            holds,
            tie: None,
        })
    }
}

impl Lock {
    /// A lock that `owner` just took in `mode`, with token `token` and `holds` holds; a shared
    /// holding's lease ends at `deadline_ms`.
    #[must_use]
    pub fn new(owner: &[u8], token: u64, holds: u32, mode: Mode, deadline_ms: i64) -> Self {
        match mode {
            Mode::Exclusive => Self::Exclusive(Holding {
                owner: Owner::new(owner),
                token,
                holds,
                tie: None,
            }),
            Mode::Shared(limit) => {
                let mut holders = Holders::default();
                holders.insert(Holder::new(owner, token, holds, deadline_ms));
                Self::Shared(Box::new(Shared { limit, holders }))
            }
        }
    }

    /// The election's leader: the exclusive holding. A lock held shared has none.
    #[must_use]
    pub fn leader(&self) -> Option<&Holding> {
        match self {
            Self::Exclusive(holding) => Some(holding),
            Self::Shared(_) => None,
        }
    }

    /// The leader whose term is `epoch` (its holding's fencing token) proclaims `value` from
    /// now on (`LOCK.CAMPAIGN`, `LOCK.PROCLAIM`); its owner, or `None` when no such term leads.
    pub fn proclaim(&mut self, epoch: u64, value: &[u8]) -> Option<&[u8]> {
        match self {
            Self::Exclusive(holding) if holding.token == epoch => {
                holding.owner = Owner::with_value(&holding.owner, value);
                Some(&holding.owner)
            }
            _ => None,
        }
    }

    /// `owner`'s token, if it holds the lock and (shared) its lease has not ended by `now_ms`.
    #[must_use]
    pub fn token_of(&self, owner: &[u8], now_ms: i64) -> Option<u64> {
        match self {
            Self::Exclusive(holding) => (*holding.owner == *owner).then_some(holding.token),
            Self::Shared(shared) => shared
                .holders
                .get(owner)
                .filter(|holder| holder.deadline_ms > now_ms)
                .map(|holder| holder.token),
        }
    }

    /// `owner`'s reentrant hold count, if it holds the lock.
    #[must_use]
    pub fn holds_of(&self, owner: &[u8]) -> Option<u32> {
        match self {
            Self::Exclusive(holding) => (*holding.owner == *owner).then_some(holding.holds),
            Self::Shared(shared) => shared.holders.get(owner).map(|holder| holder.holds),
        }
    }

    /// The tie `owner`'s holding keeps, if it holds the lock and its holding is tied.
    #[must_use]
    pub fn tie_of(&self, owner: &[u8]) -> Option<Tie> {
        match self {
            Self::Exclusive(holding) if *holding.owner == *owner => holding.tie,
            Self::Exclusive(_) => None,
            Self::Shared(shared) => shared.holders.get(owner)?.tie,
        }
    }

    /// Ties `owner`'s holding with `tie` — unless it is tied to that session already, when it
    /// keeps the entry it has — or with `None` unties it.
    pub fn tie(&mut self, owner: &[u8], tie: Option<Tie>) {
        let kept = match self {
            Self::Exclusive(holding) if *holding.owner == *owner => &mut holding.tie,
            Self::Exclusive(_) => return,
            Self::Shared(shared) => match shared.holders.tie_mut(owner) {
                Some(kept) => kept,
                None => return,
            },
        };
        if kept.map(|kept| kept.number) != tie.map(|tie| tie.number) {
            *kept = tie;
        }
    }

    /// Every tie its holdings keep, with their owners.
    pub fn ties(&self) -> impl Iterator<Item = (&[u8], Tie)> {
        let (exclusive, shared) = match self {
            Self::Exclusive(holding) => (Some(holding), None),
            Self::Shared(shared) => (None, Some(shared.holders.iter())),
        };
        let exclusive = exclusive.and_then(|holding| Some((&*holding.owner, holding.tie?)));
        let shared = shared
            .into_iter()
            .flatten()
            .filter_map(|holder| Some((&*holder.owner, holder.tie?)));
        exclusive.into_iter().chain(shared)
    }

    /// The owner whose holding keeps `tie` (there is one at most: a tie's place is unique in
    /// its session while its entry is there).
    #[must_use]
    pub fn keeper(&self, tie: Tie) -> Option<&[u8]> {
        self.ties()
            .find(|(_, kept)| *kept == tie)
            .map(|(owner, _)| owner)
    }

    /// Unties every holding (a copy of the lock under another key, which no session logged).
    pub fn untie_all(&mut self) {
        match self {
            Self::Exclusive(holding) => holding.tie = None,
            Self::Shared(shared) => shared.holders.untie_all(),
        }
    }

    /// The largest token among the holders whose lease has not ended by `now_ms`.
    #[must_use]
    pub fn newest_token(&self, now_ms: i64) -> Option<u64> {
        match self {
            Self::Exclusive(holding) => Some(holding.token),
            Self::Shared(shared) => shared
                .holders
                .iter_newest_first()
                .find(|holder| holder.deadline_ms > now_ms)
                .map(|holder| holder.token),
        }
    }

    /// Adds a new shared holder (after [`Acquire::New`] on a shared lock).
    pub fn add_holder(&mut self, holder: Holder) {
        if let Self::Shared(shared) = self {
            shared.holders.insert(holder);
        }
    }

    /// Sets `owner`'s hold count and, for a shared holding, its lease (after
    /// [`Acquire::Again`], or a release that leaves holds).
    pub fn set_holds(&mut self, owner: &[u8], holds: u32, deadline_ms: Option<i64>) {
        match self {
            Self::Exclusive(holding) => holding.holds = holds,
            Self::Shared(shared) => {
                let deadline = deadline_ms
                    .or_else(|| shared.holders.get(owner).map(|holder| holder.deadline_ms));
                if let Some(deadline) = deadline {
                    shared.holders.update(owner, holds, deadline);
                }
            }
        }
    }

    /// The exclusive holder becomes a shared holder under `limit`, keeping its token
    /// ([`Acquire::Downgrade`]).
    pub fn downgrade(&mut self, limit: Option<u32>, holds: u32, deadline_ms: i64) {
        if let Self::Exclusive(holding) = self {
            *self = Self::new(
                &holding.owner,
                holding.token,
                holds,
                Mode::Shared(limit),
                deadline_ms,
            );
        }
    }

    /// The only shared holder, `owner`, becomes the exclusive holder with `token`
    /// ([`Acquire::Upgrade`]).
    pub fn upgrade(&mut self, owner: &[u8], token: u64, holds: u32) {
        *self = Self::new(owner, token, holds, Mode::Exclusive, 0);
    }

    /// Ends `owner`'s shared holding ([`Release::Left`], or its lease ended).
    pub fn remove_holder(&mut self, owner: &[u8]) -> Option<Holder> {
        match self {
            Self::Exclusive(_) => None,
            Self::Shared(shared) => shared.holders.remove(owner),
        }
    }

    /// Raises `owner`'s holding's token to `token` if that is larger (`LOCK.RAISE`); the
    /// holding's token afterwards, or `None` if `owner` does not hold the lock.
    ///
    pub fn raise(&mut self, owner: &[u8], token: u64) -> Option<u64> {
        match self {
            Self::Exclusive(holding) if *holding.owner == *owner => {
                holding.token = holding.token.max(token);
                Some(holding.token)
            }
            Self::Exclusive(_) => None,
            Self::Shared(shared) => shared.holders.raise(owner, token),
        }
    }

    /// When the key's lease ends: for a shared lock the last of its holders' deadlines;
    /// `None` for an exclusive lock, whose lease is the key's expiry itself.
    #[must_use]
    pub fn shared_deadline(&self) -> Option<i64> {
        match self {
            Self::Exclusive(_) => None,
            Self::Shared(shared) => shared.holders.latest_deadline(),
        }
    }

    /// Heap bytes this lock owns besides its fixed-size value (for `MEMORY USAGE`).
    #[must_use]
    pub fn heap_size(&self) -> usize {
        match self {
            Self::Exclusive(holding) => holding.owner.heap_size(),
            Self::Shared(shared) => size_of::<Shared>() + shared.holders.heap_size(),
        }
    }
}

/// Decides `LOCK.ACQUIRE key owner ttl [REENTRANT] [SHARED [LIMIT n]]` on a lock that is
/// `current` (shared holders whose lease ended already removed), with `queued` true when
/// clients wait for it. A request that waits in the queue itself is decided with `queued`
/// false when its turn comes.
///
/// A re-entry that would overflow the hold count (2^32 - 1) keeps the count where it is;
/// no real program nests a lock four billion times, and the lock stays held either way.
#[must_use]
pub fn acquire(
    current: Option<&Lock>,
    owner: &[u8],
    mode: Mode,
    reentrant: bool,
    queued: bool,
) -> Acquire {
    let again = |holds: u32| {
        if reentrant {
            holds.saturating_add(1)
        } else {
            holds
        }
    };
    match (current, mode) {
        (None, _) if queued => Acquire::Busy,
        (None, _) => Acquire::New,
        (Some(Lock::Exclusive(holding)), _) if *holding.owner != *owner => Acquire::Busy,
        (Some(Lock::Exclusive(holding)), Mode::Exclusive) => Acquire::Again {
            token: holding.token,
            holds: again(holding.holds),
        },
        (Some(Lock::Exclusive(holding)), Mode::Shared(_)) => Acquire::Downgrade {
            holds: again(holding.holds),
        },
        (Some(Lock::Shared(shared)), Mode::Exclusive) => match shared.holders.get(owner) {
            Some(holder) if shared.holders.len() == 1 => Acquire::Upgrade {
                holds: again(holder.holds),
            },
            Some(_) => Acquire::UpgradeRefused,
            None => Acquire::Busy,
        },
        (Some(Lock::Shared(shared)), Mode::Shared(limit)) if limit != shared.limit => {
            Acquire::LimitDiffers {
                limit: shared.limit,
            }
        }
        (Some(Lock::Shared(shared)), Mode::Shared(limit)) => match shared.holders.get(owner) {
            Some(holder) => Acquire::Again {
                token: holder.token,
                holds: again(holder.holds),
            },
            None if queued || limit.is_some_and(|n| shared.holders.len() >= n as usize) => {
                Acquire::Busy
            }
            None => Acquire::New,
        },
    }
}

impl Acquire {
    /// True for the decisions that begin a holding, which needs a new fencing token.
    #[must_use]
    pub fn needs_token(self) -> bool {
        matches!(self, Self::New | Self::Upgrade { .. })
    }

    /// True for the decisions after which `owner` holds the lock.
    #[must_use]
    pub fn grants(self) -> bool {
        matches!(
            self,
            Self::New | Self::Again { .. } | Self::Downgrade { .. } | Self::Upgrade { .. }
        )
    }
}

/// Carries out a granting decision of [`acquire`] for `owner` in `mode` on `lock` (`None` when
/// the lock is free and its key does not exist yet): `token` is the new token when the decision
/// [needs one](Acquire::needs_token), and a shared holding's lease ends at `deadline_ms`.
/// Returns the lock to store under the key when there was none.
pub fn grant(
    lock: Option<&mut Lock>,
    owner: &[u8],
    mode: Mode,
    decision: Acquire,
    token: u64,
    deadline_ms: i64,
) -> Option<Lock> {
    let Some(lock) = lock else {
        return decision
            .grants()
            .then(|| Lock::new(owner, token, 1, mode, deadline_ms));
    };
    match (decision, mode) {
        (Acquire::New, _) => lock.add_holder(Holder::new(owner, token, 1, deadline_ms)),
        (Acquire::Again { holds, .. }, _) => lock.set_holds(owner, holds, Some(deadline_ms)),
        (Acquire::Downgrade { holds }, Mode::Shared(limit)) => {
            lock.downgrade(limit, holds, deadline_ms);
        }
        (Acquire::Upgrade { holds }, _) => lock.upgrade(owner, token, holds),
        _ => {}
    }
    None
}

/// Decides `LOCK.RELEASE key owner` on a lock that is `current`: one hold less, or with `whole`
/// (a session ending, [`crate::session`]) every hold of the holding at once.
#[must_use]
pub fn release(current: Option<&Lock>, owner: &[u8], whole: bool) -> Release {
    let one_hold_less = |holds: u32, last: Release| {
        if holds <= 1 || whole {
            last
        } else {
            Release::Decremented { holds: holds - 1 }
        }
    };
    match current {
        None => Release::Missing,
        Some(Lock::Exclusive(holding)) if *holding.owner == *owner => {
            one_hold_less(holding.holds, Release::Freed)
        }
        Some(Lock::Exclusive(_)) => Release::HeldByOther,
        Some(Lock::Shared(shared)) => match shared.holders.get(owner) {
            Some(holder) if shared.holders.len() == 1 => {
                one_hold_less(holder.holds, Release::Freed)
            }
            Some(holder) => one_hold_less(holder.holds, Release::Left),
            None => Release::HeldByOther,
        },
    }
}

/// Decides `LOCK.RENEW key owner ttl` on a lock that is `current`.
#[must_use]
pub fn renew(current: Option<&Lock>, owner: &[u8]) -> Renew {
    match current {
        None => Renew::Missing,
        Some(lock) if lock.token_of(owner, i64::MIN).is_some() => Renew::Renewed,
        Some(_) => Renew::HeldByOther,
    }
}

#[cfg(test)]
mod tests;
