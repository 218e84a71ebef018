//! Sessions: holdings tied to a client's connection, ended by the server soon after that
//! connection closes — the model of ZooKeeper's ephemeral nodes, etcd's and Consul's sessions
//! and MySQL's `GET_LOCK`, with a grace for blips.
//!
//! - A client **opens** a session on a connection it keeps (`LOCK.SESSION OPEN`); the session
//!   is *attached* to that connection.
//! - A command that names the session (`SESSION id`) **ties** its holding — a lock's key in a
//!   database, and the owner — to it (a waiter's when it is queued), with the lease end it asked
//!   for. A tie ends when the holding is released, when the same owner takes the key without a
//!   session, when another session ties it, or on `FLUSHALL`/`FLUSHDB`. A tie whose holding is gone otherwise — its
//!   lease ended, its key was deleted — is found by a **sweep** that goes round the registry a
//!   few ties at a time, twice as many as were made since it last looked, and names those whose
//!   lease end has passed for the server to look up ([`Sessions::to_sweep`]; a holding still
//!   there gets its current lease end, [`Sessions::recheck_at`], and a waiter's tie is kept
//!   while anyone waits for the key): a session kept for months does not gather the ties of
//!   every lease that ran out, and a live tie costs a comparison, not a lookup.
//! - When the attached connection closes, the session is *detached*; unless some connection
//!   **attaches** it again within its grace (`LOCK.SESSION ATTACH`, which clients also send as
//!   their heartbeat), it **ends** at the close plus the grace, and the server releases each of
//!   its ties' holdings (every hold of a reentrant one) as `LOCK.RELEASE` would.
//! - `LOCK.SESSION CLOSE` ends a session at once.
//!
//! # Why a holder learns first
//! A client that got a reply to `LOCK.SESSION ATTACH` sent at `t` (by its clock) knows the
//! session's connection was attached at some moment after `t`; the server can end the session
//! only a grace after the connection closed, so after `t + grace` in real time. A client that
//! treats its session's holdings as lost at `t + grace` minus its drift allowance — unless a
//! later attach answered — learns of the loss before the server can hand any of them over
//! (docs/guarantees.md, "Sessions").
//!
//! The registry is the master's own memory: it is neither saved nor replicated, so after a
//! restart or a failover the holdings keep only their leases.

use std::collections::{HashMap, HashSet};
use std::fmt;

use foldhash::fast::RandomState;
use indexmap::IndexMap;
use indexmap::map::RawEntryApiV1;
use indexmap::map::raw_entry_v1::RawEntryMut;
use smallvec::SmallVec;

/// The shortest grace a session may ask for, in ms.
pub const MIN_GRACE_MS: u64 = 100;

/// The fewest ties a sweep looks at ([`Sessions::to_sweep`]), however few were made since the
/// last: the registry is gone round even when no tie is made.
pub const SWEEP_MIN: usize = 64;

/// The most ties a sweep looks at: a sweep runs between commands.
pub const SWEEP_MAX: usize = 4096;

/// A holding tied to a session: from when (unix ms) the sweep looks it up — its lease end as
/// last known — and its neighbours in the session's list of ties (indexes in
/// [`Sessions::ties`], [`NONE`] at an end), so that a tie is one entry in one map.
#[derive(Debug, Clone, Copy)]
struct Tied {
    session: Id,
    recheck_ms: i64,
    previous: usize,
    next: usize,
}

/// No tie: the end of a session's list.
const NONE: usize = usize::MAX;

/// A session's id: unique for the life of the server process, and unlike any id of an earlier
/// process (see [`Sessions::new`]).
pub type Id = u64;

/// One holding a session ends: the lock's database, its key and the owner.
pub type Tie = (i32, Box<[u8]>, Box<[u8]>);

/// A tie as one run of bytes — the database (4 bytes), the key's length (4 bytes), the key,
/// the owner — so that one map holds every tie and a lookup encodes into a reused buffer: a
/// command that names no session, or renews a holding tied already, allocates nothing.
fn encode(buffer: &mut Vec<u8>, db: i32, key: &[u8], owner: &[u8]) {
    buffer.clear();
    buffer.extend_from_slice(&db.to_le_bytes());
    buffer.extend_from_slice(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_le_bytes());
    buffer.extend_from_slice(key);
    buffer.extend_from_slice(owner);
}

/// A tie as [`encode`] writes it, kept in the map's entry itself when it is as short as most
/// are (a key and a UUID-sized owner), so that a new tie allocates nothing.
type Encoded = SmallVec<[u8; 64]>;

/// The tie [`encode`] wrote into `bytes`.
fn decode(bytes: &[u8]) -> Option<Tie> {
    let (db, rest) = bytes.split_first_chunk::<4>()?;
    let (length, rest) = rest.split_first_chunk::<4>()?;
    let (key, owner) = rest.split_at_checked(usize::try_from(u32::from_le_bytes(*length)).ok()?)?;
    Some((i32::from_le_bytes(*db), key.into(), owner.into()))
}

/// Why a session command was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionError {
    /// `ERR no such session`: it never existed on this server, or it ended.
    NoSuchSession,
    /// `ERR session belongs to another user`: an ACL user other than the one that opened it.
    OtherUser,
    /// `ERR invalid session id`: not the hexadecimal form of an id.
    InvalidId,
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NoSuchSession => "ERR no such session",
            Self::OtherUser => "ERR session belongs to another user",
            Self::InvalidId => "ERR invalid session id",
        })
    }
}

/// Reads a session id as clients send it: 16 hexadecimal digits.
///
/// # Errors
/// [`SessionError::InvalidId`] for anything else.
pub fn parse_id(text: &[u8]) -> Result<Id, SessionError> {
    if text.len() != 16 {
        return Err(SessionError::InvalidId);
    }
    text.iter().try_fold(0, |id: Id, &digit| {
        let value = char::from(digit)
            .to_digit(16)
            .ok_or(SessionError::InvalidId)?;
        Ok(id << 4 | Id::from(value))
    })
}

/// The form of `id` clients see: 16 hexadecimal digits.
#[must_use]
pub fn format_id(id: Id) -> String {
    format!("{id:016x}")
}

/// One session.
#[derive(Debug)]
struct Session {
    /// The connection it is attached to (a Redis client id); `None` once that closed.
    client: Option<u64>,
    /// The ACL user that opened it.
    user: Box<str>,
    /// How long it outlives its connection, in ms.
    grace_ms: u64,
    /// When its connection closed (unix ms), while detached.
    detached_at: u64,
    /// The first of the holdings it ends (an index in [`Sessions::ties`]), or [`NONE`].
    first_tie: usize,
}

/// Every session of this server, by id, with the connection each is attached to and the
/// session each holding is tied to.
///
/// Its maps hash with foldhash, seeded at random per map (the seed is what keeps a client
/// from choosing keys that collide), not SipHash: after the cache misses of a big map, hashing
/// a tie's key with SipHash was the largest part of what a new tie cost (`perf`).
#[derive(Debug)]
pub struct Sessions {
    sessions: HashMap<Id, Session, RandomState>,
    by_client: HashMap<u64, HashSet<Id>, RandomState>,
    /// The session each holding ([`encode`]d) is tied to, in an order the sweep goes round;
    /// each session's ties are linked into a list through their entries.
    ties: IndexMap<Encoded, Tied, RandomState>,
    /// Where the next sweep starts in `ties`.
    cursor: usize,
    /// Ties made since the last sweep.
    made: usize,
    next: Id,
    /// Where lookups encode their tie.
    scratch: Vec<u8>,
}

impl Sessions {
    /// An empty registry whose ids start at `seed`: a random number, so that a client holding
    /// an id of an earlier process (before a restart) does not find another client's session.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self {
            sessions: HashMap::default(),
            by_client: HashMap::default(),
            ties: IndexMap::default(),
            cursor: 0,
            made: 0,
            next: seed,
            scratch: Vec::new(),
        }
    }

    /// Opens a session for `user`, attached to the connection `client`, outliving it by
    /// `grace_ms`. Returns its id.
    pub fn open(&mut self, client: u64, user: &str, grace_ms: u64) -> Id {
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        self.sessions.insert(
            id,
            Session {
                client: Some(client),
                user: user.into(),
                grace_ms,
                detached_at: 0,
                first_tie: NONE,
            },
        );
        self.by_client.entry(client).or_default().insert(id);
        id
    }

    /// Attaches session `id` of `user` to the connection `client` (from another connection it
    /// moves there: the one it was attached to is no longer its). Returns its grace in ms.
    ///
    /// # Errors
    /// No such session; another user's.
    pub fn attach(&mut self, id: Id, client: u64, user: &str) -> Result<u64, SessionError> {
        let session = Self::owned(&mut self.sessions, id, user)?;
        let previous = session.client.replace(client);
        let grace_ms = session.grace_ms;
        if previous != Some(client) {
            if let Some(previous) = previous {
                self.forget_client(previous, id);
            }
            self.by_client.entry(client).or_default().insert(id);
        }
        Ok(grace_ms)
    }

    /// Checks that session `id` exists, before a command ties a holding to it. Any user may tie
    /// a holding of its own to any session it knows: that only puts its own holding in the
    /// session's hands (attaching or closing a session is what needs its user).
    ///
    /// # Errors
    /// No such session.
    pub fn check(&self, id: Id) -> Result<(), SessionError> {
        if self.sessions.contains_key(&id) {
            Ok(())
        } else {
            Err(SessionError::NoSuchSession)
        }
    }

    /// Ties `owner`'s holding of `key` in `db` to session `id` (checked before), untying it
    /// from any other; the sweep need not look it up before `until_ms` (unix ms: its lease end,
    /// or 0 for a waiter). A new tie costs one lookup, and an allocation only when its key and
    /// owner take more than 56 bytes; tying a holding again to the same session (a renewal)
    /// allocates nothing.
    pub fn tie(&mut self, id: Id, db: i32, key: &[u8], owner: &[u8], until_ms: i64) {
        if !self.sessions.contains_key(&id) {
            return;
        }
        encode(&mut self.scratch, db, key, owner);
        let tied = Tied {
            session: id,
            recheck_ms: until_ms,
            previous: NONE,
            next: NONE,
        };
        let index = match self
            .ties
            .raw_entry_mut_v1()
            .from_key(self.scratch.as_slice())
        {
            RawEntryMut::Occupied(mut entry) if entry.get().session == id => {
                entry.get_mut().recheck_ms = until_ms;
                return;
            }
            RawEntryMut::Occupied(entry) => {
                let index = entry.index();
                self.unlink(index);
                index
            }
            RawEntryMut::Vacant(entry) => {
                let index = entry.index();
                entry.insert(Encoded::from_slice(&self.scratch), tied);
                self.made += 1;
                index
            }
        };
        self.link(index, tied);
    }

    /// Unties `owner`'s holding of `key` in `db` (released, or taken again without a session).
    pub fn untie(&mut self, db: i32, key: &[u8], owner: &[u8]) {
        encode(&mut self.scratch, db, key, owner);
        if let Some(index) = self.ties.get_index_of(self.scratch.as_slice()) {
            self.remove(index);
        }
    }

    /// Unties every holding (`FLUSHALL`, `FLUSHDB`: untying is always safe, the lease stays).
    pub fn untie_all(&mut self) {
        self.ties.clear();
        for session in self.sessions.values_mut() {
            session.first_tie = NONE;
        }
    }

    /// True when any holding is tied to a session: commands that name none skip the rest.
    #[must_use]
    pub fn has_ties(&self) -> bool {
        !self.ties.is_empty()
    }

    /// The session `owner`'s holding of `key` in `db` is tied to, if any.
    #[must_use]
    pub fn tied_to(&mut self, db: i32, key: &[u8], owner: &[u8]) -> Option<Id> {
        encode(&mut self.scratch, db, key, owner);
        self.ties
            .get(self.scratch.as_slice())
            .map(|tied| tied.session)
    }

    /// The ties for the server to look up at `now_ms`: of the next ones round the registry
    /// from where the last sweep stopped — twice as many as were made since (so the sweep
    /// outpaces the ties made, and at most as many ties are gone as live), within
    /// [`SWEEP_MIN`] and [`SWEEP_MAX`] — those whose lease end as last known has passed. The
    /// caller unties ([`Self::untie`]) each whose holding is gone and gives the others their
    /// current lease end ([`Self::recheck_at`]).
    pub fn to_sweep(&mut self, now_ms: i64) -> Vec<Tie> {
        let count = self
            .made
            .saturating_mul(2)
            .clamp(SWEEP_MIN, SWEEP_MAX)
            .min(self.ties.len());
        self.made = 0;
        let start = if self.cursor < self.ties.len() {
            self.cursor
        } else {
            0
        };
        let (earlier, later) = self.ties.as_slice().split_at(start);
        let swept: Vec<Tie> = later
            .iter()
            .chain(earlier.iter())
            .take(count)
            .filter(|(_, tied)| tied.recheck_ms <= now_ms)
            .filter_map(|(tie, _)| decode(tie))
            .collect();
        // Past the end, the round goes on from where it wrapped to, not from the start again.
        self.cursor = start
            .saturating_add(count)
            .checked_rem(self.ties.len())
            .unwrap_or(0);
        swept
    }

    /// The sweep found `owner`'s holding of `key` in `db` still there, its lease ending at
    /// `until_ms` (unix ms): it is not looked up again before.
    pub fn recheck_at(&mut self, db: i32, key: &[u8], owner: &[u8], until_ms: i64) {
        encode(&mut self.scratch, db, key, owner);
        if let Some(tied) = self.ties.get_mut(self.scratch.as_slice()) {
            tied.recheck_ms = until_ms;
        }
    }

    /// The connection `client` closed at `now_ms`: each session attached to it is detached.
    /// Returns them with when each ends (unix ms) unless attached again.
    pub fn detach(&mut self, client: u64, now_ms: u64) -> Vec<(Id, u64)> {
        let Some(ids) = self.by_client.remove(&client) else {
            return Vec::new();
        };
        ids.into_iter()
            .filter_map(|id| {
                let session = self.sessions.get_mut(&id)?;
                session.client = None;
                session.detached_at = now_ms;
                Some((id, now_ms.saturating_add(session.grace_ms)))
            })
            .collect()
    }

    /// Ends session `id` if at `now_ms` it is detached and its grace has passed. Returns the
    /// holdings to release.
    pub fn end_if_due(&mut self, id: Id, now_ms: u64) -> Option<Vec<Tie>> {
        let session = self.sessions.get(&id)?;
        let due = session.client.is_none()
            && now_ms >= session.detached_at.saturating_add(session.grace_ms);
        due.then(|| self.end(id))
    }

    /// Ends session `id` of `user` now (`LOCK.SESSION CLOSE`). Returns the holdings to release.
    ///
    /// # Errors
    /// No such session; another user's.
    pub fn close(&mut self, id: Id, user: &str) -> Result<Vec<Tie>, SessionError> {
        Self::owned(&mut self.sessions, id, user)?;
        Ok(self.end(id))
    }

    /// Forgets every session without ending any (this server stopped being a master: its
    /// holdings belong to the new master, which has their leases).
    pub fn clear(&mut self) {
        self.sessions.clear();
        self.by_client.clear();
        self.ties.clear();
    }

    /// How many holdings are tied to a session (the sweep unties those that are gone).
    #[must_use]
    pub fn ties(&self) -> usize {
        self.ties.len()
    }

    /// How many sessions are open, and how many of them are detached.
    #[must_use]
    pub fn counts(&self) -> (usize, usize) {
        let detached = self
            .sessions
            .values()
            .filter(|session| session.client.is_none())
            .count();
        (self.sessions.len(), detached)
    }

    fn owned<'a>(
        sessions: &'a mut HashMap<Id, Session, RandomState>,
        id: Id,
        user: &str,
    ) -> Result<&'a mut Session, SessionError> {
        let session = sessions.get_mut(&id).ok_or(SessionError::NoSuchSession)?;
        if *session.user == *user {
            Ok(session)
        } else {
            Err(SessionError::OtherUser)
        }
    }

    fn forget_client(&mut self, client: u64, id: Id) {
        if let Some(ids) = self.by_client.get_mut(&client) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_client.remove(&client);
            }
        }
    }

    /// Removes session `id` and returns its ties.
    fn end(&mut self, id: Id) -> Vec<Tie> {
        let Some(first) = self.sessions.get(&id).map(|session| session.first_tie) else {
            return Vec::new();
        };
        let mut indexes = Vec::new();
        let mut index = first;
        while let Some((_, tied)) = self.ties.get_index(index) {
            indexes.push(index);
            index = tied.next;
        }
        // From the last index down, so that no entry still to remove is moved by a removal.
        indexes.sort_unstable_by(|a, b| b.cmp(a));
        let ties = indexes
            .into_iter()
            .filter_map(|index| decode(&self.remove(index)))
            .collect();
        if let Some(client) = self.sessions.remove(&id).and_then(|session| session.client) {
            self.forget_client(client, id);
        }
        ties
    }

    /// Puts the tie at `index` first in its session's list, as `tied` (its session, its recheck
    /// time): one lookup of the session, on every new tie.
    fn link(&mut self, index: usize, tied: Tied) {
        let Some(session) = self.sessions.get_mut(&tied.session) else {
            return;
        };
        let next = std::mem::replace(&mut session.first_tie, index);
        if let Some((_, entry)) = self.ties.get_index_mut(index) {
            *entry = Tied { next, ..tied };
        }
        if let Some((_, first)) = self.ties.get_index_mut(next) {
            first.previous = index;
        }
    }

    /// Takes the tie at `index` out of its session's list (it stays in the map).
    fn unlink(&mut self, index: usize) {
        if let Some((_, &tied)) = self.ties.get_index(index) {
            self.join(tied.session, tied.previous, tied.next);
        }
    }

    /// Makes the tie at `after` follow the one at `before` in `session`'s list; [`NONE`] for
    /// `before` makes `after` the session's first tie, for `after` makes `before` its last.
    fn join(&mut self, session: Id, before: usize, after: usize) {
        match self.ties.get_index_mut(before) {
            Some((_, tied)) => tied.next = after,
            None => {
                if let Some(session) = self.sessions.get_mut(&session) {
                    session.first_tie = after;
                }
            }
        }
        if let Some((_, tied)) = self.ties.get_index_mut(after) {
            tied.previous = before;
        }
    }

    /// Removes the tie at `index` from the map and its session's list; the last entry moves
    /// into its place, and its neighbours are told. Returns its [`encode`]d holding.
    fn remove(&mut self, index: usize) -> Encoded {
        self.unlink(index);
        let Some((tie, _)) = self.ties.swap_remove_index(index) else {
            return Encoded::new();
        };
        if let Some((_, &moved)) = self.ties.get_index(index) {
            self.join(moved.session, moved.previous, index);
            self.join(moved.session, index, moved.next);
        }
        tie
    }
}

#[cfg(test)]
mod tests;
