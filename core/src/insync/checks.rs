//! Which of a master's replicas run the module.
//!
//! A replica without the module acknowledges the replication stream's offsets like any other,
//! though it applied none of the lock writes in it (each is an unknown command there), and it
//! keeps the priority it was given, so Sentinel or Cluster may promote it: a grant counted while
//! it is attached could be lost. So a replica **says** that it runs the module, and until it
//! has, nothing the master writes counts ([`Module::Unproven`]).
//!
//! - The replica says it over a connection it opens to its master, the way replication does
//!   (the same address, TLS and credentials: crate `leasehold`'s `probes`), with
//!   `LOCK.REPLCONF`. It proves the claim with the master's **challenge**, a random word the
//!   master sends only in its replication stream: a client that can send commands but cannot
//!   read the stream cannot say it for a replica.
//! - A new challenge is drawn whenever a replica comes online (the server's event does not say
//!   which one, and a replica back at the same address may have come back without the module):
//!   every replica says it again, within a round trip of the next heartbeat. Meanwhile members
//!   stay listed, and writes wait.
//! - A replica that says nothing within [`GRACE_MS`] is **silent**: writes are refused at once
//!   rather than held, and the log and `INFO lock` name it.
//! - A replica that says it after it was silent while lock writes were made missed them: it
//!   waits until the master has sent every lock again ([`Checks::replayed`]) before it may join
//!   the set; meanwhile its own module keeps it unpromotable, so it does not stop writes.
//!   A replica's first word within the grace is believed as it is: one that loads the module in
//!   the first [`GRACE_MS`] after it came online, while locks are written, is not covered.

use std::collections::HashMap;

/// How long a replica online may take to say it runs the module before the master calls it
/// silent, in ms: a heartbeat carries the challenge within a second, and the replica answers at
/// once.
pub const GRACE_MS: u64 = 2_000;

/// How long a replica that was silent about the module is held back once offline, in multiples
/// of the deployment's failover time: Sentinel still promotes a replica whose link has been down
/// up to ten times `down-after-milliseconds` beyond the master's own down time
/// (`sentinelSelectSlave`), and Cluster one disconnected up to `cluster-replica-validity-factor`
/// (10) times `cluster-node-timeout`. Until then no write counts: it may be promoted without
/// them.
pub const HOLD_FACTOR: u64 = 10;

/// How many replicas that were silent are remembered once offline (a replica may come back
/// with the module and must then be sent the locks it missed).
pub const REMEMBERED: usize = 64;

/// The command by which a replica says it runs the module.
pub const REPLCONF: &str = "LOCK.REPLCONF";

/// The command a replica sends, with no arguments, to a master that does not know
/// [`REPLCONF`]: a master that runs a release before 0.7.0 answers the arity error (Redis checks
/// a command's arity before anything else), a master without the module `unknown command`.
pub const OLDER: &str = "LOCK.PROMOTABLE";

/// What a replica's master answered [`REPLCONF`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replied {
    /// `OK`: the master counts this replica as running the module.
    Accepted,
    /// The master runs the module and refused the word (an old challenge, or a release before
    /// 0.7.0): the error.
    Refused(String),
    /// The master does not run the module: it knows neither command.
    WithoutModule,
    /// No answer came: the error (the network's, or a refusal to authenticate).
    Failed(String),
}

/// What the error to [`REPLCONF`] (`told`, `None` for `OK`) says, asking `older` (the error to
/// [`OLDER`]) when the master does not know the command.
#[must_use]
pub fn replied(told: Option<String>, older: impl FnOnce() -> Option<String>) -> Replied {
    let unknown = |error: &str| error.starts_with("ERR unknown command");
    match told {
        None => Replied::Accepted,
        Some(error) if unknown(&error) => match older() {
            Some(error) if unknown(&error) => Replied::WithoutModule,
            Some(error) if error.starts_with("ERR wrong number of arguments") => {
                Replied::Refused("the master runs a release of the module before 0.7.0".into())
            }
            Some(error) => Replied::Failed(error),
            None => Replied::Failed("the master answered LOCK.PROMOTABLE".into()),
        },
        Some(error) if is_server_error(&error) => Replied::Refused(error),
        Some(error) => Replied::Failed(error),
    }
}

/// True for an error a server sent (`ERR ...`, `NOPERM ...`), false for a network's.
fn is_server_error(error: &str) -> bool {
    error
        .split(' ')
        .next()
        .is_some_and(|code| !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase()))
        && !error.starts_with("NOAUTH")
        && !error.starts_with("WRONGPASS")
}

/// What the master knows of one replica's module, for the in-sync set
/// ([`crate::insync::Master`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Module {
    /// It said so for the current challenge: it may join the set and count writes.
    Runs,
    /// It runs the module but waits for the locks it missed: it may not join yet. Its own module
    /// keeps it unpromotable, so writes go on without it.
    Replaying,
    /// It has not said so (for the current challenge): it could be promoted without the lock
    /// writes, so no write counts. `silent` once [`GRACE_MS`] passed.
    Unproven {
        /// It said nothing within [`GRACE_MS`].
        silent: bool,
    },
}

/// A change worth telling the operator about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The replica said nothing within [`GRACE_MS`] of coming online or of a new challenge.
    Silent,
    /// The replica runs the module now, after it was silent, and missed no lock write.
    RunsNow,
    /// The replica runs the module now, and missed lock writes: every lock must be sent again.
    Replay,
}

/// Where one replica stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Has not said it runs the module since it came online; `since` lock writes had been made
    /// then.
    Unproven { since: u64 },
    /// Said it runs the module.
    Runs,
    /// Runs the module after it missed writes: waits for them to be sent again.
    Replaying,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    state: State,
    /// Whether it was online at the last look.
    online: bool,
    /// Since when (unix ms) it has been offline, if it is.
    offline_since_ms: Option<u64>,
    /// Since when (unix ms) it has owed the master a word: since it came online, or since the
    /// challenge changed; `None` once it said it.
    owed_since_ms: Option<u64>,
    /// Whether it was found silent while it had not said it runs the module (the log was told
    /// once): it may have missed lock writes.
    told: bool,
}

impl Entry {
    const fn new(now_ms: u64, writes: u64) -> Self {
        Self {
            state: State::Unproven { since: writes },
            online: false,
            offline_since_ms: None,
            owed_since_ms: Some(now_ms),
            told: false,
        }
    }

    /// True when it owes a word for longer than [`GRACE_MS`] at `now_ms`.
    fn silent(&self, now_ms: u64) -> bool {
        self.owed_since_ms
            .is_some_and(|since| now_ms > since.saturating_add(GRACE_MS))
    }
}

/// The master's knowledge of its replicas' module.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checks {
    replicas: HashMap<String, Entry>,
}

impl Checks {
    /// Takes in which replicas are online at `now_ms` (`ip:port`), `writes` being the module's
    /// lock writes so far; returns those found silent at this look (to log, once each).
    pub fn observe<'a>(
        &mut self,
        now_ms: u64,
        writes: u64,
        online: impl Iterator<Item = &'a str>,
    ) -> Vec<String> {
        let online: Vec<&str> = online.collect();
        for (id, entry) in &mut self.replicas {
            let now_online = online.contains(&id.as_str());
            if !now_online && entry.online {
                entry.offline_since_ms = Some(now_ms);
            }
            if now_online {
                entry.offline_since_ms = None;
            }
            if now_online && !entry.online && entry.state != State::Runs {
                // Back online (remembered as silent, or waiting for a replay): it owes a word
                // from now. One that said it runs the module just before it was seen online
                // stays as it is.
                entry.owed_since_ms = Some(now_ms);
            }
            entry.online = now_online;
        }
        for id in online {
            self.replicas.entry(id.to_owned()).or_insert_with(|| Entry {
                online: true,
                ..Entry::new(now_ms, writes)
            });
        }
        self.forget();
        let mut silent: Vec<String> = self
            .replicas
            .iter_mut()
            .filter(|(_, entry)| entry.online && !entry.told && entry.silent(now_ms))
            .map(|(id, entry)| {
                entry.told = true;
                id.clone()
            })
            .collect();
        silent.sort();
        silent
    }

    /// A replica came online at `now_ms` (`RedisModuleEvent_ReplicaChange`, which does not say
    /// which) and the challenge changed, `writes` being the module's lock writes so far: each
    /// replica owes a word again, and one that stays silent may have missed the writes from now.
    pub fn replica_online(&mut self, now_ms: u64, writes: u64) {
        for entry in self.replicas.values_mut() {
            if entry.state == State::Runs {
                entry.state = State::Unproven { since: writes };
            }
            entry.owed_since_ms.get_or_insert(now_ms);
        }
    }

    /// Replica `id` said it runs the module, for the current challenge, at `now_ms`, `writes`
    /// being the module's lock writes so far; returns what changed that the operator should hear
    /// of.
    pub fn said(&mut self, id: &str, now_ms: u64, writes: u64) -> Option<Found> {
        let entry = self
            .replicas
            .entry(id.to_owned())
            .or_insert_with(|| Entry::new(now_ms, writes));
        let silent = entry.told || entry.silent(now_ms);
        let (state, found) = match entry.state {
            State::Unproven { since } if silent && writes > since => {
                (State::Replaying, Some(Found::Replay))
            }
            State::Unproven { .. } => (State::Runs, silent.then_some(Found::RunsNow)),
            state => (state, None),
        };
        entry.state = state;
        entry.owed_since_ms = None;
        entry.told = false;
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

    /// What is known of `id`'s module at `now_ms`.
    #[must_use]
    pub fn module(&self, id: &str, now_ms: u64) -> Module {
        match self.replicas.get(id) {
            None => Module::Unproven { silent: false },
            Some(entry) if entry.owed_since_ms.is_some() => Module::Unproven {
                silent: entry.silent(now_ms),
            },
            Some(entry) if entry.state == State::Replaying => Module::Replaying,
            Some(_) => Module::Runs,
        }
    }

    /// The replicas online that have not said they run the module (silent first), each with
    /// whether it is silent at `now_ms`, sorted.
    #[must_use]
    pub fn unproven(&self, now_ms: u64) -> Vec<(String, bool)> {
        let mut ids: Vec<(String, bool)> = self
            .replicas
            .iter()
            .filter(|(_, entry)| entry.online)
            .filter_map(|(id, _)| match self.module(id, now_ms) {
                Module::Unproven { silent } => Some((id.clone(), silent)),
                _ => None,
            })
            .collect();
        ids.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ids
    }

    /// The replicas offline that were silent while attached, and went offline less than
    /// `hold_ms` before `now_ms` ([`HOLD_FACTOR`]), sorted: they may still be promoted.
    #[must_use]
    pub fn held_back(&self, now_ms: u64, hold_ms: u64) -> Vec<String> {
        let mut ids: Vec<String> = self
            .replicas
            .iter()
            .filter(|(_, entry)| {
                entry.told
                    && entry
                        .offline_since_ms
                        .is_some_and(|since| now_ms < since.saturating_add(hold_ms))
            })
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// The replicas online waiting for the locks they missed, sorted.
    #[must_use]
    pub fn replaying(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .replicas
            .iter()
            .filter(|(_, entry)| entry.online && entry.state == State::Replaying)
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// Forgets replicas gone offline, but for up to [`REMEMBERED`] that were silent or wait for
    /// a replay (and so may have missed writes).
    fn forget(&mut self) {
        let missed = |entry: &Entry| entry.told || entry.state == State::Replaying;
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

#[cfg(test)]
mod tests;
