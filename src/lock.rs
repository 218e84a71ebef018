//! The lock itself: who holds it, with which fencing token, how many times — and the rules
//! that decide what `LOCK.ACQUIRE`, `LOCK.RELEASE` and `LOCK.RENEW` do to it.
//!
//! This file is plain Rust with no Redis in it, so every rule is unit-tested on its own. The
//! lease is not stored here: it is the key's own expiry (`PTTL key`), which Redis persists,
//! replicates and enforces.

use smallvec::SmallVec;

use crate::fence::MAX_TOKEN;

/// Longest owner accepted, in bytes. Owners are usually a UUID or `host:pid:thread`; the cap
/// keeps a lock's memory bounded.
pub const MAX_OWNER_LEN: usize = 256;

/// Owners up to this many bytes live inside the lock itself — a UUID (36 bytes) with a thread
/// id, as Redisson's owners are — so a typical lock is one 64-byte allocation.
pub const INLINE_OWNER_LEN: usize = 40;

/// An owner identifier, stored inline up to [`INLINE_OWNER_LEN`] bytes.
pub type Owner = SmallVec<[u8; INLINE_OWNER_LEN]>;

/// The value stored under a lock's key while someone holds it.
///
/// A free lock has no key at all: releasing or expiring a lock leaves nothing behind in the
/// keyspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    /// The owner identifier the holder chose (1 to [`MAX_OWNER_LEN`] bytes, any bytes).
    pub owner: Owner,
    /// The fencing token issued when this holding began; unchanged by renewals and re-entry.
    pub token: u64,
    /// The reentrant hold count: how many `LOCK.RELEASE` calls free the lock (at least 1).
    pub holds: u32,
}

/// Why an owner identifier was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidOwner;

/// Checks that `owner` is 1 to [`MAX_OWNER_LEN`] bytes.
///
/// # Errors
/// [`InvalidOwner`] for an empty or longer owner.
pub fn check_owner(owner: &[u8]) -> Result<&[u8], InvalidOwner> {
    if owner.is_empty() || owner.len() > MAX_OWNER_LEN {
        Err(InvalidOwner)
    } else {
        Ok(owner)
    }
}

/// What `LOCK.ACQUIRE` does, decided from the lock's current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// The lock is free: a new holding begins with a new fencing token and a hold count of 1.
    New,
    /// `owner` already holds it: the lease is reset, the token stays `token`, and the hold
    /// count becomes `holds` (one more with `REENTRANT`, unchanged without — so a retried
    /// acquire is harmless).
    Again {
        /// The token of the existing holding.
        token: u64,
        /// The hold count after this acquire.
        holds: u32,
    },
    /// Someone else holds it: nothing changes.
    Busy,
}

/// What `LOCK.RELEASE` does, decided from the lock's current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The last hold was released: the key is deleted.
    Freed,
    /// One hold was released; `holds` remain.
    Decremented {
        /// The hold count left.
        holds: u32,
    },
    /// There is no lock (never taken, released, or its lease expired). Reply `0`.
    Missing,
    /// Another owner holds it: nothing changes. Reply `-1`.
    HeldByOther,
}

/// What `LOCK.RENEW` does, decided from the lock's current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renew {
    /// `owner` holds it: the lease is reset. Reply `1`.
    Renewed,
    /// There is no lock. Reply `0`.
    Missing,
    /// Another owner holds it: nothing changes. Reply `-1`.
    HeldByOther,
}

impl Lock {
    /// A new holding by `owner` with fencing token `token` and a hold count of 1.
    #[must_use]
    pub fn new(owner: &[u8], token: u64) -> Self {
        Self {
            owner: Owner::from_slice(owner),
            token,
            holds: 1,
        }
    }

    /// A lock as an RDB, `RESTORE` or a master's `LOCK.APPLY` describes it, or `None` when
    /// no server could have written it: an empty or oversized owner, a token outside
    /// 1..=2^53-1, or no holds.
    #[must_use]
    pub fn from_parts(owner: &[u8], token: u64, holds: u64) -> Option<Self> {
        let owner = check_owner(owner).ok()?;
        let holds = u32::try_from(holds).ok().filter(|holds| *holds > 0)?;
        (1..=MAX_TOKEN).contains(&token).then(|| Self {
            owner: Owner::from_slice(owner),
            token,
            holds,
        })
    }

    /// True when `owner` is the holder.
    #[must_use]
    pub fn is_held_by(&self, owner: &[u8]) -> bool {
        *self.owner == *owner
    }

    /// Heap bytes this lock owns besides its fixed-size struct (for `MEMORY USAGE`): none
    /// while the owner fits inline.
    #[must_use]
    pub fn heap_size(&self) -> usize {
        if self.owner.spilled() {
            self.owner.capacity()
        } else {
            0
        }
    }
}

/// Decides `LOCK.ACQUIRE key owner ttl [REENTRANT]` on a lock that is `current`.
///
/// A re-entry that would overflow the hold count (2^32 - 1) keeps the count where it is;
/// no real program nests a lock four billion times, and the lock stays held either way.
#[must_use]
pub fn acquire(current: Option<&Lock>, owner: &[u8], reentrant: bool) -> Acquire {
    match current {
        None => Acquire::New,
        Some(lock) if lock.is_held_by(owner) => Acquire::Again {
            token: lock.token,
            holds: if reentrant {
                lock.holds.saturating_add(1)
            } else {
                lock.holds
            },
        },
        Some(_) => Acquire::Busy,
    }
}

/// Decides `LOCK.RELEASE key owner` on a lock that is `current`.
#[must_use]
pub fn release(current: Option<&Lock>, owner: &[u8]) -> Release {
    match current {
        None => Release::Missing,
        Some(lock) if !lock.is_held_by(owner) => Release::HeldByOther,
        Some(lock) if lock.holds <= 1 => Release::Freed,
        Some(lock) => Release::Decremented {
            holds: lock.holds - 1,
        },
    }
}

/// Decides `LOCK.RENEW key owner ttl` on a lock that is `current`.
#[must_use]
pub fn renew(current: Option<&Lock>, owner: &[u8]) -> Renew {
    match current {
        None => Renew::Missing,
        Some(lock) if lock.is_held_by(owner) => Renew::Renewed,
        Some(_) => Renew::HeldByOther,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(owner: &str, token: u64, holds: u32) -> Lock {
        Lock {
            owner: Owner::from_slice(owner.as_bytes()),
            token,
            holds,
        }
    }

    #[test]
    fn owner_must_be_1_to_256_bytes() {
        assert_eq!(check_owner(b""), Err(InvalidOwner));
        assert!(check_owner(b"a").is_ok());
        assert!(check_owner(&[b'x'; MAX_OWNER_LEN]).is_ok());
        assert_eq!(check_owner(&[b'x'; MAX_OWNER_LEN + 1]), Err(InvalidOwner));
        assert!(check_owner(&[0, 255, 10]).is_ok(), "owners are binary-safe");
    }

    #[test]
    fn a_typical_owner_lives_inside_a_64_byte_lock() {
        assert!(size_of::<Lock>() <= 64, "{} bytes", size_of::<Lock>());
        let uuid_and_thread = "8d3c2f4e-1b2a-4c5d-9e8f-0a1b2c3d4e5f:42";
        assert_eq!(held(uuid_and_thread, 1, 1).heap_size(), 0);
        let long = held(&"x".repeat(100), 1, 1);
        assert!(long.heap_size() >= 100);
    }

    #[test]
    fn only_locks_a_server_could_have_written_are_taken_in() {
        assert_eq!(Lock::from_parts(b"a", 7, 2), Some(held("a", 7, 2)));
        assert_eq!(Lock::from_parts(b"", 7, 1), None, "no owner");
        assert_eq!(Lock::from_parts(&[b'x'; MAX_OWNER_LEN + 1], 7, 1), None);
        assert_eq!(Lock::from_parts(b"a", 0, 1), None, "tokens start at 1");
        assert_eq!(
            Lock::from_parts(b"a", MAX_TOKEN + 1, 1),
            None,
            "tokens stay below 2^53"
        );
        assert_eq!(Lock::from_parts(b"a", 7, 0), None, "a held lock has a hold");
        assert_eq!(Lock::from_parts(b"a", 7, u64::from(u32::MAX) + 1), None);
    }

    #[test]
    fn acquire_a_free_lock_starts_a_new_holding() {
        assert_eq!(acquire(None, b"a", false), Acquire::New);
        assert_eq!(acquire(None, b"a", true), Acquire::New);
        assert_eq!(Lock::new(b"a", 7), held("a", 7, 1));
    }

    #[test]
    fn acquire_again_by_the_holder_keeps_the_token() {
        let lock = held("a", 7, 2);
        assert_eq!(
            acquire(Some(&lock), b"a", false),
            Acquire::Again { token: 7, holds: 2 },
            "a retried acquire does not change the hold count"
        );
        assert_eq!(
            acquire(Some(&lock), b"a", true),
            Acquire::Again { token: 7, holds: 3 }
        );
    }

    #[test]
    fn reentry_saturates_the_hold_count() {
        let lock = held("a", 7, u32::MAX);
        assert_eq!(
            acquire(Some(&lock), b"a", true),
            Acquire::Again {
                token: 7,
                holds: u32::MAX
            }
        );
    }

    #[test]
    fn acquire_by_another_owner_is_refused() {
        assert_eq!(acquire(Some(&held("a", 7, 1)), b"b", true), Acquire::Busy);
        assert_eq!(acquire(Some(&held("a", 7, 1)), b"A", false), Acquire::Busy);
    }

    #[test]
    fn release_counts_down_then_frees() {
        assert_eq!(
            release(Some(&held("a", 7, 3)), b"a"),
            Release::Decremented { holds: 2 }
        );
        assert_eq!(release(Some(&held("a", 7, 1)), b"a"), Release::Freed);
    }

    #[test]
    fn release_tells_missing_from_held_by_other() {
        assert_eq!(release(None, b"a"), Release::Missing);
        assert_eq!(release(Some(&held("a", 7, 1)), b"b"), Release::HeldByOther);
    }

    #[test]
    fn renew_only_by_the_holder() {
        assert_eq!(renew(Some(&held("a", 7, 1)), b"a"), Renew::Renewed);
        assert_eq!(renew(Some(&held("a", 7, 1)), b"b"), Renew::HeldByOther);
        assert_eq!(renew(None, b"a"), Renew::Missing);
    }
}
