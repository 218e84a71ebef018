//! Synced writes: a lock write's reply held until the in-sync set has the write (`SYNC`, or
//! `lock.sync-writes`), so that any client gets a grant no failover loses, with one command.
//!
//! The rule is the one a client could run itself with `LOCK.INSYNC`, `WAIT` and `LOCK.INSYNC`
//! ([`Status::counts`]): a write counts once the set has its required size and every member
//! acknowledged a replication offset past it.
//!
//! - A held write's offset is the master's replication offset at the first look after it was
//!   held (crate `leasehold`'s `synced` looks before the event loop sleeps, when the write's
//!   effects have gone out): it covers the write.
//! - It counts once [`Status::counts`] it; it is refused at once while the Sentinels name
//!   another master or the set is smaller than required (no acknowledgement can make it
//!   count), and after its timeout otherwise.
//! - Each look that finds writes held since the last asks the replicas for their
//!   acknowledgement at once ([`Pending::ask`]), as `WAIT` does with `REPLCONF GETACK`: one
//!   request for every write held in the same turn of the event loop.
//! - A look reads the set's status (`INFO replication`, a few µs), so one is made only when it
//!   can settle something ([`Pending::due`]): writes were held since the last, a replica
//!   acknowledged or the set may have changed ([`Pending::heard`]), or [`LOOK_EVERY_MS`] passed
//!   (timeouts, and what changes with time alone). Under load that is about one look per
//!   acknowledgement rather than one per turn of the event loop (issue 55: three per batch).

use crate::insync::Status;

/// The longest the held writes go without a look while nothing is heard, ms.
pub const LOOK_EVERY_MS: u64 = 10;

/// Why a held write did or did not count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Every member acknowledged it, and the set has its required size.
    Counted,
    /// The set has `members`, fewer than the `required`.
    TooFew {
        /// Members of the set.
        members: usize,
        /// `lock.min-insync-replicas`.
        required: usize,
    },
    /// The Sentinels name another server master: this one counts nothing until it is a replica.
    Replaced,
    /// A replica online has not said it runs the module for longer than
    /// [`crate::insync::checks::GRACE_MS`]: it could be promoted without the lock writes.
    Silent,
    /// Not every member acknowledged it within `timeout_ms`.
    NotAcknowledged {
        /// The timeout, in ms.
        timeout_ms: u64,
    },
}

/// Why a write on a master whose set has `members` of the `required`, that the Sentinels
/// replaced or not (`replaced`), and with a `silent` replica or not, is refused whatever its
/// replicas acknowledge; `None` when their acknowledgements can make it count.
#[must_use]
pub const fn refused_at_once(
    members: usize,
    required: usize,
    replaced: bool,
    silent: bool,
) -> Option<Settled> {
    if replaced {
        Some(Settled::Replaced)
    } else if silent {
        Some(Settled::Silent)
    } else if members < required {
        Some(Settled::TooFew { members, required })
    } else {
        None
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry<T> {
    held: T,
    /// When it is refused at the latest (unix ms).
    deadline_ms: u64,
    timeout_ms: u64,
    /// The replication offset that covers it; `None` until the first look after it.
    offset: Option<u64>,
}

/// The writes whose replies are held, each with what the caller keeps of it (`T`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending<T> {
    entries: Vec<Entry<T>>,
    /// Whether writes were held since the replicas were last asked.
    unasked: bool,
    /// Whether something the status depends on may have changed since the last look.
    heard: bool,
    /// When the status was last read (unix ms).
    looked_ms: u64,
}

impl<T> Default for Pending<T> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            unasked: false,
            heard: false,
            looked_ms: 0,
        }
    }
}

impl<T> Pending<T> {
    /// Holds a write at `now_ms`, refused `timeout_ms` later unless it counted.
    pub fn hold(&mut self, held: T, now_ms: u64, timeout_ms: u64) {
        self.entries.push(Entry {
            held,
            deadline_ms: now_ms.saturating_add(timeout_ms),
            timeout_ms,
            offset: None,
        });
        self.unasked = true;
    }

    /// True once per batch of writes held since the last call: the replicas are to be asked
    /// for their acknowledgement now.
    pub fn ask(&mut self) -> bool {
        std::mem::take(&mut self.unasked)
    }

    /// Something the status depends on may have changed: a replica acknowledged an offset, one
    /// came or went, the set or the settings changed. The next [`Self::due`] is true.
    pub fn heard(&mut self) {
        self.heard = true;
    }

    /// True when a look at `now_ms` can settle something: writes are held and either some were
    /// held since the last look, something was [`Self::heard`], or [`LOOK_EVERY_MS`] passed.
    #[must_use]
    pub fn due(&self, now_ms: u64) -> bool {
        !self.entries.is_empty()
            && (self.unasked
                || self.heard
                || now_ms.saturating_sub(self.looked_ms) >= LOOK_EVERY_MS)
    }

    /// Takes the writes settled at `now_ms` given the set's `status` (read at `now_ms`), in the
    /// order they were held.
    pub fn settle(&mut self, now_ms: u64, status: &Status) -> Vec<(T, Settled)> {
        self.heard = false;
        self.looked_ms = now_ms;
        let mut settled = Vec::new();
        let mut kept = Vec::with_capacity(self.entries.len());
        for mut entry in self.entries.drain(..) {
            let offset = *entry.offset.get_or_insert(status.offset);
            let at_once = refused_at_once(
                status.members,
                status.required,
                status.replaced,
                status.silent,
            );
            let outcome = if at_once.is_some() {
                at_once
            } else if status.counts(offset) {
                Some(Settled::Counted)
            } else if now_ms >= entry.deadline_ms {
                Some(Settled::NotAcknowledged {
                    timeout_ms: entry.timeout_ms,
                })
            } else {
                None
            };
            match outcome {
                Some(outcome) => settled.push((entry.held, outcome)),
                None => kept.push(entry),
            }
        }
        self.entries = kept;
        settled
    }

    /// Takes the first held write that `which` picks (its client left).
    pub fn take(&mut self, which: impl Fn(&T) -> bool) -> Option<T> {
        let at = self.entries.iter().position(|entry| which(&entry.held))?;
        Some(self.entries.remove(at).held)
    }

    /// Takes every held write (this server stopped being a master).
    pub fn drain(&mut self) -> Vec<T> {
        self.entries.drain(..).map(|entry| entry.held).collect()
    }

    /// True when no write is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests;
