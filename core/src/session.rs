//! Sessions: holdings tied to a client's connection, ended by the server soon after that
//! connection closes — the model of ZooKeeper's ephemeral nodes, etcd's and Consul's sessions
//! and MySQL's `GET_LOCK`, with a grace for blips.
//!
//! - A client **opens** a session on a connection it keeps (`LOCK.SESSION OPEN`); the session
//!   is *attached* to that connection.
//! - A command tied to the session — naming it (`SESSION id`), or sent on a connection that
//!   uses it — **ties** its holding to it: the session
//!   **logs** where the holding is — the lock's database and its key — at a place in
//!   its log that does not move, and the holding itself keeps the session's number and that
//!   place, its [`Tie`] ([`crate::lock::Lock::tie`]; a waiter's holding when it is granted,
//!   logged when it queues). A holding tied to the session already keeps its tie.
//!   When the holding ends or keeps its tie no more — released, taken again without a session
//!   or with another, its key deleted, expired or renamed — its entry is freed through the tie
//!   it kept ([`Sessions::free`]): no lookup, no map of every tie. A session ends a holding only
//!   while the holding keeps its tie.
//! - Entries whose holding went without the server seeing it (a shared holder's lease ending,
//!   a flush) are freed by a **sweep** that goes round the logs a few places at a time, twice
//!   as many as were filled since it last looked, and names those whose lease end has passed
//!   for the server to look up ([`Sessions::to_sweep`]; a holding still tied gets its current
//!   lease end, [`Sessions::recheck_at`], and a waiter's entry is kept while anyone waits for
//!   the key).
//! - When the attached connection closes, the session is *detached*; unless some connection
//!   **attaches** it again within its grace (`LOCK.SESSION ATTACH`, which clients also send as
//!   their heartbeat), it **ends** at the close plus the grace, and the server releases each
//!   holding of its log that still keeps its tie (every hold of a reentrant one) as
//!   `LOCK.RELEASE` would.
//! - A connection that **uses** a session (`LOCK.SESSION USE`) ties what it acquires and renews
//!   to it without naming it: a client binds each connection of its pool once, and its
//!   commands carry no session argument. Once the session has ended, those commands are refused
//!   (`ERR no such session`) until the connection uses another, so a holder never takes an untied
//!   lock it believes tied. Closing such a connection detaches nothing.
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
//! The registry and the ties holdings keep are the master's own memory: neither is saved
//! nor replicated, so after a restart or a failover the holdings keep only their leases.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::num::NonZeroU32;

use foldhash::fast::RandomState;
use indexmap::IndexMap;

/// The shortest grace a session may ask for, in ms.
pub const MIN_GRACE_MS: u64 = 100;

/// The fewest log places a sweep looks at ([`Sessions::to_sweep`]), however few were logged
/// since the last: the logs are gone round even when nothing is logged.
pub const SWEEP_MIN: usize = 64;

/// The most log places a sweep looks at: a sweep runs between commands.
pub const SWEEP_MAX: usize = 4096;

/// A session's id: unique for the life of the server process, and unlike any id of an earlier
/// process (see [`Sessions::new`]).
pub type Id = u64;

/// A session's number: the low 32 bits of its id, never 0, unique among the sessions of a
/// server process until four billion more have been opened.
pub type Number = NonZeroU32;

/// What a holding tied to a session keeps: the session's number and the place of the
/// holding's entry in the session's log, so that ending the holding finds its entry without a
/// lookup. 8 bytes, which an exclusive lock's allocation has room for (Redis's jemalloc rounds
/// its 56 bytes up to 64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tie {
    /// The session's number.
    pub number: Number,
    /// The entry's place in the session's log.
    pub place: u32,
}

/// Where a holding a session logged is: the lock's database and its key. Its holder is the one
/// that keeps the entry's tie ([`crate::lock::Lock::ties`]): a tie's place is unique in its
/// session while the entry is there, so no owner need be kept.
pub type Entry = (i32, Box<[u8]>);

/// One entry of a session's log: where a holding tied to it is, and from when the sweep looks it
/// up — its lease end as last known, 0 for a waiter's. 24 bytes and the key's own allocation:
/// a tied holding is about as many more bytes as its key rounded up to jemalloc's size class,
/// plus 24 (`benches/sessions.rs` measures it).
#[derive(Debug)]
struct Logged {
    /// Unix seconds, the lease end rounded up: the sweep may look later, never sooner.
    recheck_s: u32,
    db: i32,
    key: Box<[u8]>,
}

impl Logged {
    fn entry(&self) -> Entry {
        (self.db, self.key.clone())
    }

    /// Whether the sweep looks it up at `now_ms` (unix ms).
    fn due(&self, now_ms: i64) -> bool {
        i64::from(self.recheck_s) * 1_000 <= now_ms
    }
}

/// The unix second of `ms` (unix ms), rounded up, in a log entry's range.
fn seconds(ms: i64) -> u32 {
    u32::try_from(u64::try_from(ms).unwrap_or(0).div_ceil(1_000)).unwrap_or(u32::MAX)
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

/// The number of session `id` ([`Number`]); `None` for an id no session gets.
fn number_of(id: Id) -> Option<Number> {
    // The low 32 bits, as they are.
    #[allow(clippy::cast_possible_truncation)]
    Number::new(id as u32)
}

/// One session.
#[derive(Debug)]
struct Session {
    id: Id,
    /// The connection it is attached to (a Redis client id); `None` once that closed.
    client: Option<u64>,
    /// The ACL user that opened it.
    user: Box<str>,
    /// How long it outlives its connection, in ms.
    grace_ms: u64,
    /// When its connection closed (unix ms), while detached.
    detached_at: u64,
    /// Where the holdings tied to it are (and some that are no longer), at places that do not
    /// move; `None` at a free place.
    log: Vec<Option<Logged>>,
    /// The free places of `log`, the last freed last.
    free: Vec<u32>,
    /// Where the sweep goes on in `log`.
    swept_to: usize,
}

impl Session {
    /// Puts `logged` at a free place of the log, or a new one at its end.
    fn place(&mut self, logged: Logged) -> Option<u32> {
        match self.free.pop() {
            Some(place) => {
                *self.log.get_mut(place as usize)? = Some(logged);
                Some(place)
            }
            None => {
                let place = u32::try_from(self.log.len()).ok()?;
                self.log.push(Some(logged));
                Some(place)
            }
        }
    }

    /// Frees `place`; false when it was free.
    fn free(&mut self, place: u32) -> bool {
        let freed = self
            .log
            .get_mut(place as usize)
            .and_then(Option::take)
            .is_some();
        if freed {
            self.free.push(place);
        }
        freed
    }
}

/// Every session of this server, by number, with the connection each is attached to.
///
/// Its maps hash with foldhash, seeded at random per map (the seed is what keeps a client
/// from choosing ids that collide), not SipHash: a command that names a session looks it up.
#[derive(Debug)]
pub struct Sessions {
    /// In the order the sweep goes round them.
    sessions: IndexMap<Number, Session, RandomState>,
    by_client: HashMap<u64, HashSet<Number>, RandomState>,
    /// The session each connection that sent `LOCK.SESSION USE` uses, by Redis client id: kept
    /// after the session ends, so that the connection's commands are refused.
    uses: HashMap<u64, Id, RandomState>,
    /// The session the next sweep starts in (an index in `sessions`).
    cursor: usize,
    /// Entries logged since the last sweep.
    made: usize,
    /// Entries in every log.
    logged: usize,
    next: Id,
}

impl Sessions {
    /// An empty registry whose ids start at `seed`: a random number, so that a client holding
    /// an id of an earlier process (before a restart) does not find another client's session.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self {
            sessions: IndexMap::default(),
            by_client: HashMap::default(),
            uses: HashMap::default(),
            cursor: 0,
            made: 0,
            logged: 0,
            next: seed,
        }
    }

    /// Opens a session for `user`, attached to the connection `client`, outliving it by
    /// `grace_ms`. Returns its id.
    pub fn open(&mut self, client: u64, user: &str, grace_ms: u64) -> Id {
        let (id, number) = loop {
            let id = self.next;
            self.next = self.next.wrapping_add(1);
            if let Some(number) = number_of(id).filter(|n| !self.sessions.contains_key(n)) {
                break (id, number);
            }
        };
        self.sessions.insert(
            number,
            Session {
                id,
                client: Some(client),
                user: user.into(),
                grace_ms,
                detached_at: 0,
                log: Vec::new(),
                free: Vec::new(),
                swept_to: 0,
            },
        );
        self.by_client.entry(client).or_default().insert(number);
        id
    }

    /// Attaches session `id` of `user` to the connection `client` (from another connection it
    /// moves there: the one it was attached to is no longer its). Returns its grace in ms.
    ///
    /// # Errors
    /// No such session; another user's.
    pub fn attach(&mut self, id: Id, client: u64, user: &str) -> Result<u64, SessionError> {
        let (number, session) = self.owned(id, user)?;
        let previous = session.client.replace(client);
        let grace_ms = session.grace_ms;
        if previous != Some(client) {
            if let Some(previous) = previous {
                self.forget_client(previous, number);
            }
            self.by_client.entry(client).or_default().insert(number);
        }
        Ok(grace_ms)
    }

    /// The number of session `id`, for a command to tie a holding to it. Any user may tie a
    /// holding of its own to any session it knows: that only puts its own holding in the
    /// session's hands (attaching or closing a session is what needs its user).
    ///
    /// # Errors
    /// No such session.
    pub fn number(&self, id: Id) -> Result<Number, SessionError> {
        number_of(id)
            .filter(|number| self.sessions.get(number).is_some_and(|s| s.id == id))
            .ok_or(SessionError::NoSuchSession)
    }

    /// The connection `client` uses session `id` from now on (`LOCK.SESSION USE`), or none:
    /// [`Self::used_by`]. As with [`Self::number`], any user may.
    ///
    /// # Errors
    /// No such session; the connection's session is then unchanged.
    pub fn use_session(&mut self, client: u64, id: Option<Id>) -> Result<(), SessionError> {
        match id {
            Some(id) => {
                self.number(id)?;
                self.uses.insert(client, id);
            }
            None => {
                self.uses.remove(&client);
            }
        }
        Ok(())
    }

    /// The session the connection `client` uses, if it sent `LOCK.SESSION USE` (it may have
    /// ended since). `client` is asked for only when some connection uses one: a server where
    /// none does pays nothing for it.
    #[must_use]
    pub fn used_by(&self, client: impl FnOnce() -> Option<u64>) -> Option<Id> {
        if self.uses.is_empty() {
            return None;
        }
        self.uses.get(&client()?).copied()
    }

    /// The id of the open session numbered `number`, for `LOCK.INFO`.
    #[must_use]
    pub fn id_of(&self, number: Number) -> Option<Id> {
        self.sessions.get(&number).map(|session| session.id)
    }

    /// Logs where a holding a command may tie to session `number` is — a holding of `key` in
    /// `db` — at a free place of its log: the tie the holding is to keep. The sweep need not look
    /// it up before `until_ms` (unix ms: the lease end asked for). A command that does not tie
    /// the holding with it frees it ([`Self::free`]); one that cannot (an error) leaves it to
    /// the sweep. `None` when the session does not exist or its log is full (2^32 places).
    pub fn log(&mut self, number: Number, db: i32, key: &[u8], until_ms: i64) -> Option<Tie> {
        let logged = Logged {
            recheck_s: seconds(until_ms),
            db,
            key: key.into(),
        };
        let place = self.sessions.get_mut(&number)?.place(logged)?;
        self.made += 1;
        self.logged += 1;
        Some(Tie { number, place })
    }

    /// The holding of `tie`'s entry — a holding of `key` in `db` — does not keep it (it ended,
    /// was tied otherwise, or kept the tie it had): the entry goes, if it names that key (a
    /// holding `SWAPDB` moved keeps a tie whose entry names another database, and another
    /// holding's entry may be there since).
    pub fn free(&mut self, tie: Tie, db: i32, key: &[u8]) {
        let Some(session) = self.sessions.get_mut(&tie.number) else {
            return;
        };
        let theirs = session
            .log
            .get(tie.place as usize)
            .and_then(Option::as_ref)
            .is_some_and(|logged| logged.db == db && *logged.key == *key);
        if theirs && session.free(tie.place) {
            self.logged -= 1;
        }
    }

    /// The entries for the server to look up at `now_ms`: of the next places round the logs
    /// from where the last sweep stopped — twice as many as were logged since (so the sweep
    /// outpaces the logging), within [`SWEEP_MIN`] and [`SWEEP_MAX`] — the entries whose lease
    /// end as last known has passed, each with its tie. The caller frees ([`Self::drop_entry`])
    /// each whose holding no longer keeps the tie and gives the others their current lease end
    /// ([`Self::recheck_at`]).
    pub fn to_sweep(&mut self, now_ms: i64) -> Vec<(Tie, Entry)> {
        let mut budget = self.made.saturating_mul(2).clamp(SWEEP_MIN, SWEEP_MAX);
        self.made = 0;
        let mut swept = Vec::new();
        // The session it starts in is come back to at most up to where it started.
        let mut first_start: Option<(Number, usize)> = None;
        for _ in 0..=self.sessions.len() {
            if budget == 0 {
                break;
            }
            if self.cursor >= self.sessions.len() {
                self.cursor = 0;
            }
            let Some((&number, session)) = self.sessions.get_index_mut(self.cursor) else {
                break;
            };
            let start = session.swept_to.min(session.log.len());
            let stop = match first_start {
                Some(first_start) if first_start.0 == number => first_start.1,
                Some(_) => session.log.len(),
                None => {
                    first_start = Some((number, start));
                    session.log.len()
                }
            };
            let end = start.saturating_add(budget).min(stop.max(start));
            budget -= end - start;
            let due = session
                .log
                .get(start..end)
                .unwrap_or_default()
                .iter()
                .zip(start..)
                .filter_map(|(slot, at)| Some((slot.as_ref()?, u32::try_from(at).ok()?)))
                .filter(|(logged, _)| logged.due(now_ms))
                .map(|(logged, place)| (Tie { number, place }, logged.entry()));
            swept.extend(due);
            if end < session.log.len() {
                session.swept_to = end;
            } else {
                session.swept_to = 0;
                self.cursor += 1;
            }
        }
        swept
    }

    /// The sweep found the holding of `tie`'s entry still keeping it, its lease ending at
    /// `until_ms` (unix ms): it is not looked up again before.
    pub fn recheck_at(&mut self, tie: Tie, until_ms: i64) {
        if let Some(logged) = self.entry(tie) {
            logged.recheck_s = seconds(until_ms);
        }
    }

    /// The sweep found no holding keeping `tie`: its entry goes.
    pub fn drop_entry(&mut self, tie: Tie) {
        if let Some(session) = self.sessions.get_mut(&tie.number)
            && session.free(tie.place)
        {
            self.logged -= 1;
        }
    }

    /// The lock `key` of `db` is gone: the entries of the ties its holdings kept are freed, as
    /// [`Self::free`] frees each.
    pub fn free_all(&mut self, db: i32, key: &[u8], ties: impl Iterator<Item = Tie>) {
        for tie in ties {
            self.free(tie, db, key);
        }
    }

    /// The connection `client` closed at `now_ms`: each session attached to it is detached
    /// (the session it used is not). Returns them with when each ends (unix ms) unless
    /// attached again.
    pub fn detach(&mut self, client: u64, now_ms: u64) -> Vec<(Id, u64)> {
        self.uses.remove(&client);
        let Some(numbers) = self.by_client.remove(&client) else {
            return Vec::new();
        };
        numbers
            .into_iter()
            .filter_map(|number| {
                let session = self.sessions.get_mut(&number)?;
                session.client = None;
                session.detached_at = now_ms;
                Some((session.id, now_ms.saturating_add(session.grace_ms)))
            })
            .collect()
    }

    /// Ends session `id` if at `now_ms` it is detached and its grace has passed. Returns its
    /// log, each entry with its tie: the holdings to release, those of them that still keep it.
    pub fn end_if_due(&mut self, id: Id, now_ms: u64) -> Option<Vec<(Tie, Entry)>> {
        let number = self.number(id).ok()?;
        let session = self.sessions.get(&number)?;
        let due = session.client.is_none()
            && now_ms >= session.detached_at.saturating_add(session.grace_ms);
        due.then(|| self.end(number))
    }

    /// Ends session `id` of `user` now (`LOCK.SESSION CLOSE`). Returns what
    /// [`Self::end_if_due`] does.
    ///
    /// # Errors
    /// No such session; another user's.
    pub fn close(&mut self, id: Id, user: &str) -> Result<Vec<(Tie, Entry)>, SessionError> {
        let (number, _) = self.owned(id, user)?;
        Ok(self.end(number))
    }

    /// Forgets every session without ending any (this server stopped being a master: its
    /// holdings belong to the new master, which has their leases). A connection that used one
    /// keeps its id, and is refused as after any end.
    pub fn clear(&mut self) {
        self.sessions.clear();
        self.by_client.clear();
        self.logged = 0;
    }

    /// How many entries the logs hold: every holding tied to an open session, and those that
    /// are gone and the sweep has not dropped yet.
    #[must_use]
    pub fn ties(&self) -> usize {
        self.logged
    }

    /// How many connections use a session (`LOCK.SESSION USE`), ended ones included.
    #[must_use]
    pub fn users(&self) -> usize {
        self.uses.len()
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

    /// Session `id` with its number, if it is `user`'s.
    fn owned(&mut self, id: Id, user: &str) -> Result<(Number, &mut Session), SessionError> {
        let number = self.number(id)?;
        let session = self
            .sessions
            .get_mut(&number)
            .ok_or(SessionError::NoSuchSession)?;
        if *session.user == *user {
            Ok((number, session))
        } else {
            Err(SessionError::OtherUser)
        }
    }

    fn forget_client(&mut self, client: u64, number: Number) {
        if let Some(numbers) = self.by_client.get_mut(&client) {
            numbers.remove(&number);
            if numbers.is_empty() {
                self.by_client.remove(&client);
            }
        }
    }

    fn entry(&mut self, tie: Tie) -> Option<&mut Logged> {
        self.sessions
            .get_mut(&tie.number)?
            .log
            .get_mut(tie.place as usize)?
            .as_mut()
    }

    /// Removes session `number` and returns its log.
    fn end(&mut self, number: Number) -> Vec<(Tie, Entry)> {
        let Some(session) = self.sessions.swap_remove(&number) else {
            return Vec::new();
        };
        if let Some(client) = session.client {
            self.forget_client(client, number);
        }
        self.logged -= session.log.len() - session.free.len();
        session
            .log
            .iter()
            .zip(0..)
            .filter_map(|(slot, place)| Some((Tie { number, place }, slot.as_ref()?.entry())))
            .collect()
    }
}

#[cfg(test)]
mod tests;
