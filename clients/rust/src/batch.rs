//! Group commit of synced writes: the writes to one server that wait for a sync connection at
//! the same moment go out together, on the first connection that comes free, as one pipeline —
//! each write with `NOSYNC`, then one `LOCK.SYNC`, which the server answers once its in-sync set
//! has every write before it (lock module 0.7.0). A held reply blocks its connection, so one
//! `SYNC` per write costs the master a read, a block and a reply per connection per write;
//! a batch costs one of each for all its writes (issue 55). A write alone goes alone, carrying
//! `SYNC` itself: one command, as before batches, which the server undoes itself when it does
//! not count.
//!
//! What the server does for a write with `SYNC` that did not count, the client does for a
//! batch: when `LOCK.SYNC` is refused (`NOREPLICAS`, or `UNBLOCKED` as the master turns
//! replica), each write that was made is answered as the server answers it — a grant (a new
//! holding, a re-entry, a mode change) is first released by its owner (`LOCK.RELEASE`, one
//! hold, as the server would), a renewal does not count. A batch whose replies were lost
//! releases, in the background, every new holding it may have made ([`Undo::if_lost`]).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use redis::{Cmd, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::binding::Write;
use crate::error::Error;
use crate::sync::not_replicated;

/// The most writes one batch carries.
pub(crate) const MOST: usize = 128;

/// The most senders of one server at once. Two keep a write from waiting a whole round trip
/// behind a batch in flight when the other is free, and make batches large under load: 64
/// tasks' acquire-and-release loops ran 48 900 iterations a second with one sender, 48 100 with
/// two, 34 400 with four and 28 700 with sixteen (`benches/client_sync.rs`, 2.6 to 25 writes
/// a batch; issue 55).
pub(crate) const SENDERS: usize = 2;

/// What the client gives back of a synced write that was made but does not count.
#[derive(Clone)]
pub(crate) struct Undo {
    /// The release, as the write's owner, of a grant — a new holding, a re-entry or a mode
    /// change, one hold as the server gives back for a grant it refused; `None` for a write
    /// that stays made but does not count (a renewal, a leader's new value).
    pub(crate) release: Option<Cmd>,
    /// Whether that release is also sent, in the background, when the write's reply was lost:
    /// for a new holding only (a re-entry the server may not have made must not give back a hold
    /// the holder counts on).
    pub(crate) if_lost: bool,
    /// What a write with no release means when it does not count, as the server words it.
    pub(crate) kept: &'static str,
}

impl Undo {
    /// A grant's: `release`, sent also when the reply was lost when `if_lost`.
    pub(crate) const fn grant(release: Cmd, if_lost: bool) -> Self {
        Self {
            release: Some(release),
            if_lost,
            kept: "",
        }
    }

    /// A renewal's: nothing to give back; the lease before it counts.
    pub(crate) const fn renewal() -> Self {
        Self::kept("the renewal does not count: the lease before it does")
    }

    /// A leader's new value's (`LOCK.PROCLAIM`): nothing to give back.
    pub(crate) const fn proclaim() -> Self {
        Self::kept("the value is set here, but a failover may lose it")
    }

    const fn kept(meaning: &'static str) -> Self {
        Self {
            release: None,
            if_lost: false,
            kept: meaning,
        }
    }

    /// The release sent when the write's reply was lost, if any.
    pub(crate) fn when_lost(&self) -> Option<Cmd> {
        self.release.clone().filter(|_| self.if_lost)
    }
}

/// What a write sent in a batch got: its own reply (an error reply too) and when it came, or
/// the batch's failure.
pub(crate) type Outcome = std::result::Result<(Value, Instant), Error>;

/// A write waiting for a batch.
pub(crate) struct Queued {
    id: u64,
    /// The key it is routed by.
    key: String,
    /// The write; its batch adds `SYNC` (alone) or `NOSYNC`. It names no session.
    pub(crate) command: Cmd,
    /// The session it is to be tied to (`None`: to none).
    pub(crate) session: Option<String>,
    pub(crate) undo: Undo,
    /// How long its reply may take once sent.
    pub(crate) timeout: Duration,
    reply: oneshot::Sender<Outcome>,
}

impl Queued {
    /// Its id ([`Queue::push`]).
    pub(crate) const fn id(&self) -> u64 {
        self.id
    }

    /// The write, as a round trip's head carries it ([`crate::binding::Head`]).
    pub(crate) fn write(&self) -> Write<'_> {
        Write {
            key: &self.key,
            command: &self.command,
            session: self.session.as_deref(),
        }
    }

    /// Hands `outcome` to the write's caller. A caller that left does not take it: a new
    /// holding it was granted is given back as `release` says (the command, if any).
    pub(crate) fn answer(self, outcome: Outcome) -> Option<Cmd> {
        let granted = matches!(&outcome, Ok((reply, _)) if made(reply));
        let release = self.undo.when_lost();
        self.reply
            .send(outcome)
            .err()
            .and(release)
            .filter(|_| granted)
    }
}

/// Whether a write's reply says it made something: not null, not an error, not 0 (a renewal
/// of nothing).
pub(crate) fn made(reply: &Value) -> bool {
    !matches!(reply, Value::Nil | Value::ServerError(_) | Value::Int(0))
}

/// Resolves once the caller of every write of `writes` has left.
pub(crate) async fn all_left(writes: &mut [Queued]) {
    futures_util::future::join_all(writes.iter_mut().map(|write| write.reply.closed())).await;
}

/// The error of a batch given up because every caller left.
pub(crate) fn left() -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::Interrupted,
        "every caller of the batch left",
    )
    .into()
}

/// The writes of one server waiting for a batch, and its senders: each borrows a sync
/// connection and sends the writes waiting then as one batch, and the next batch as soon as
/// that one is answered, until none waits. At most [`SENDERS`] run at once, so that writes
/// wait behind a batch in flight and go together, rather than each on a connection of its own.
#[derive(Default)]
pub(crate) struct Queue {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    last_id: u64,
    writes: VecDeque<Queued>,
    senders: usize,
}

impl Queue {
    /// Queues a write: its id (to take it back, [`Queue::withdraw`]), where its outcome comes,
    /// and whether the caller is to start a sender (fewer than [`SENDERS`] run).
    pub(crate) fn push(
        &self,
        key: &str,
        command: Cmd,
        session: Option<String>,
        undo: Undo,
        timeout: Duration,
    ) -> (u64, oneshot::Receiver<Outcome>, bool) {
        let (reply, outcome) = oneshot::channel();
        let mut state = self.lock();
        state.last_id += 1;
        let id = state.last_id;
        state.writes.push_back(Queued {
            id,
            key: key.to_owned(),
            command,
            session,
            undo,
            timeout,
            reply,
        });
        let start = state.senders < SENDERS;
        state.senders += usize::from(start);
        (id, outcome, start)
    }

    /// For a sender: up to [`MOST`] writes, the longest waiting first; none when none waits,
    /// and then the sender stops.
    pub(crate) fn take(&self) -> Vec<Queued> {
        let mut state = self.lock();
        let count = state.writes.len().min(MOST);
        if count == 0 {
            state.senders -= 1;
        }
        state.writes.drain(..count).collect()
    }
    /// Takes back write `id`; false when a batch took it already.
    pub(crate) fn withdraw(&self, id: u64) -> bool {
        let mut state = self.lock();
        let before = state.writes.len();
        state.writes.retain(|write| write.id != id);
        state.writes.len() < before
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the lock was held left the queue whole: every step above is one call.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What a made write of a batch whose `LOCK.SYNC` got `refusal` means for its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Given {
    /// A grant the client released, as the server releases a refused one.
    Released,
    /// A grant whose release failed on the batch's connection: it is sent again in the
    /// background.
    Releasing,
    /// A write that stays made and does not count; what that means, as the server words it.
    Kept(&'static str),
}

/// The error of a made write of a batch whose `LOCK.SYNC` got `refusal`, worded as the server
/// words a refused `SYNC` write ([`crate::sync::released_by_server`],
/// [`crate::sync::renewed_by_server`] read it): [`Error::NotReplicated`].
pub(crate) fn refused(refusal: &redis::RedisError, given: Given) -> Error {
    let detail = refusal.detail().unwrap_or_default();
    let missing = match refusal.code() {
        Some("UNBLOCKED") => "this server is no longer a master",
        _ => detail
            .split("; the writes before it")
            .next()
            .unwrap_or(detail),
    };
    let meaning = match given {
        Given::Released => "the grant was released",
        Given::Releasing => "the grant is being released by the client",
        Given::Kept(meaning) => meaning,
    };
    not_replicated(&format!("NOREPLICAS {missing}; {meaning}"))
}

#[cfg(test)]
mod tests;
