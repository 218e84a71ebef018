//! Which of a master's replicas run the module.
//!
//! A replica without the module acknowledges the replication stream's offsets like any other,
//! though it applied none of the lock writes in it (each is an unknown command there), and a
//! full sync from a master that holds locks stops it (Redis cannot load the module's data).
//! So the master asks every replica it sees online whether the module runs there (the server
//! knows a module's command even before `AUTH`: crate `leasehold`'s `probes`), and only a
//! replica found to run it joins the set or counts a write ([`Checks::runs`]).
//!
//! - A replica is asked when first seen online, again after any replica comes online (a
//!   restart may have left the module out of its configuration; the master cannot tell which
//!   replica came back) or after it was seen offline, and every [`ASK_AGAIN_MS`] while the
//!   answer was no, or none (a replica the master cannot reach at the address it announces).
//!   Until the first answer it does not count.
//! - A replica found running the module after it was found without it (or could not be
//!   asked) while lock writes were made missed them: it waits until the master has sent every
//!   lock again ([`Checks::replayed`]). Its first answer is believed as it is: a replica that
//!   loads the module between coming online and being asked, a few hundred ms, while locks are
//!   written, is not covered.

use std::collections::HashMap;

/// How long the master waits before it asks a replica again, in ms: one that did not answer,
/// or said it lacks the module (an operator may load it any time).
pub const ASK_AGAIN_MS: u64 = 1_000;

/// How many replicas found without the module are remembered once offline (a replica may come
/// back with the module and must then be sent the locks it missed).
pub const REMEMBERED: usize = 64;

/// What asking a replica found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The module runs there.
    Runs,
    /// The server does not know the module's commands.
    Lacks,
    /// No answer: the error.
    Unknown(String),
}

/// The command a master sends a replica, with no arguments, to ask whether the module runs
/// there: Redis checks that a command exists, then its arity, before `AUTH`, ACLs or loading
/// (`processCommand`), so the error tells without credentials and runs nothing.
pub const ASK: &str = "LOCK.PROMOTABLE";

/// What the error reply `error` (`ERR unknown command ...`) to [`ASK`] says.
#[must_use]
pub fn read_error(error: &str) -> Answer {
    let detail = error.strip_prefix("ERR ").unwrap_or(error);
    if detail.starts_with("unknown command") {
        Answer::Lacks
    } else if detail.starts_with("wrong number of arguments") {
        Answer::Runs
    } else {
        Answer::Unknown(error.to_owned())
    }
}

/// A change worth telling the operator about, from [`Checks::answer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The replica lacks the module (first found so).
    Lacks,
    /// The replica could not be asked (first so): the error.
    Unreachable(String),
    /// The replica runs the module now, and missed no lock write.
    RunsNow,
    /// The replica runs the module now, and missed lock writes: every lock must be sent again.
    Replay,
}

/// Where one replica stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not answered yet.
    Unchecked,
    /// Runs the module.
    Runs,
    /// Lacks the module since the lock write numbered `since` (the module's write count).
    Lacks { since: u64 },
    /// Could not be asked since write `since`.
    Unreachable { since: u64 },
    /// Runs the module after it missed writes: waits for them to be sent again.
    Replaying,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    state: State,
    /// Whether it was online at the last look.
    online: bool,
    /// Whether it must be asked again before it counts (it came online since it answered).
    again: bool,
    /// When it was last asked (unix ms).
    asked_ms: u64,
}

/// The master's knowledge of its replicas' module.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checks {
    replicas: HashMap<String, Entry>,
}

impl Checks {
    /// Takes in which replicas are online at `now_ms` (`ip:port`), and returns those to ask now.
    pub fn observe<'a>(
        &mut self,
        now_ms: u64,
        online: impl Iterator<Item = &'a str>,
    ) -> Vec<String> {
        for entry in self.replicas.values_mut() {
            entry.online = false;
        }
        for id in online {
            let entry = self.replicas.entry(id.to_owned()).or_insert(Entry {
                state: State::Unchecked,
                online: false,
                again: false,
                asked_ms: 0,
            });
            entry.online = true;
        }
        for entry in self.replicas.values_mut().filter(|entry| !entry.online) {
            entry.again = true;
        }
        self.forget();
        self.replicas
            .iter_mut()
            .filter(|(_, entry)| entry.online && entry.due(now_ms))
            .map(|(id, entry)| {
                entry.asked_ms = now_ms;
                id.clone()
            })
            .collect()
    }

    /// A replica came online (`RedisModuleEvent_ReplicaChange`, which does not say which): each
    /// must be asked again before it counts.
    pub fn replica_online(&mut self) {
        for entry in self.replicas.values_mut() {
            entry.again = true;
            entry.asked_ms = 0;
        }
    }

    /// Takes in what asking `id` found, `writes` being the module's lock writes so far; returns
    /// what changed that the operator should hear of.
    pub fn answer(&mut self, id: &str, answer: Answer, writes: u64) -> Option<Found> {
        let entry = self.replicas.get_mut(id)?;
        let before = entry.state;
        entry.again = false;
        let (state, found) = match (answer, before) {
            (Answer::Runs, State::Lacks { since } | State::Unreachable { since }) => {
                if writes > since {
                    (State::Replaying, Some(Found::Replay))
                } else {
                    (State::Runs, Some(Found::RunsNow))
                }
            }
            (Answer::Runs, State::Replaying) => (State::Replaying, None),
            (Answer::Runs, _) => (State::Runs, None),
            (Answer::Lacks, State::Lacks { since } | State::Unreachable { since }) => (
                State::Lacks { since },
                (!matches!(before, State::Lacks { .. })).then_some(Found::Lacks),
            ),
            (Answer::Lacks, _) => (State::Lacks { since: writes }, Some(Found::Lacks)),
            (Answer::Unknown(_), State::Lacks { since }) => (State::Lacks { since }, None),
            (Answer::Unknown(_), State::Unreachable { since }) => {
                (State::Unreachable { since }, None)
            }
            (Answer::Unknown(error), _) => (
                State::Unreachable { since: writes },
                Some(Found::Unreachable(error)),
            ),
        };
        entry.state = state;
        found
    }

    /// Every lock was sent again since the last [`Found::Replay`]: the replicas waiting for it
    /// may count.
    pub fn replayed(&mut self) {
        for entry in self.replicas.values_mut() {
            if entry.state == State::Replaying {
                entry.state = State::Runs;
            }
        }
    }

    /// Whether `id` may join the set and count writes: found running the module, and not
    /// waiting to be asked again or for a replay.
    #[must_use]
    pub fn runs(&self, id: &str) -> bool {
        self.replicas
            .get(id)
            .is_some_and(|entry| entry.state == State::Runs && !entry.again)
    }

    /// The replicas online that lack the module.
    pub fn lacking(&self) -> impl Iterator<Item = &str> {
        self.online(|state| matches!(state, State::Lacks { .. }))
    }

    /// The replicas online not known to run the module yet: not asked, not reachable, or
    /// waiting for the locks they missed.
    pub fn unverified(&self) -> impl Iterator<Item = &str> {
        self.online(|state| {
            matches!(
                state,
                State::Unchecked | State::Unreachable { .. } | State::Replaying
            )
        })
    }

    fn online(&self, which: impl Fn(State) -> bool) -> impl Iterator<Item = &str> {
        self.replicas
            .iter()
            .filter(move |(_, entry)| entry.online && which(entry.state))
            .map(|(id, _)| id.as_str())
    }

    /// Forgets replicas gone offline, but for up to [`REMEMBERED`] that lacked the module, could
    /// not be asked or wait for a replay (and so may have missed writes).
    fn forget(&mut self) {
        let missed = |entry: &Entry| {
            matches!(
                entry.state,
                State::Lacks { .. } | State::Unreachable { .. } | State::Replaying
            )
        };
        self.replicas
            .retain(|_, entry| entry.online || missed(entry));
        let mut offline: Vec<String> = self
            .replicas
            .iter()
            .filter(|(_, entry)| !entry.online)
            .map(|(id, _)| id.clone())
            .collect();
        offline.sort();
        for id in offline.iter().skip(REMEMBERED) {
            self.replicas.remove(id);
        }
    }
}

impl Entry {
    /// Whether to ask at `now_ms`: never answered or to be asked again, or lacking the module
    /// or unreachable, each at most every [`ASK_AGAIN_MS`].
    fn due(&self, now_ms: u64) -> bool {
        let waiting = self.again
            || matches!(
                self.state,
                State::Unchecked | State::Lacks { .. } | State::Unreachable { .. }
            );
        waiting && now_ms >= self.asked_ms.saturating_add(ASK_AGAIN_MS)
    }
}

#[cfg(test)]
mod tests;
