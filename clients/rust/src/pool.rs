//! The dedicated connections of one server (or one cluster master): a bounded pool for waits in
//! the server and one for synced writes, lent to one caller (a waiter, or a sender of synced
//! writes) at a time (deadpool), and the synced writes queued for the senders ([`Pools::queue`],
//! group commit).
//!
//! A blocked command (`LOCK.ACQUIRE ... WAIT`, `WAIT`) stalls the connection it was sent on, so
//! neither goes over the shared connection. Two pools, so that waiters — who keep their
//! connection for as long as they wait — never starve a holder's synced renewal. A caller that
//! finds its pool exhausted queues within its own budget. A connection goes back to its pool
//! only once every reply it was sent has been read: one whose reply was lost (the client-side
//! timeout fired, the connection dropped, the caller was cancelled with a command in flight) is
//! closed and never lent again. Each connection remembers the session it is bound to
//! (`LOCK.SESSION USE`, [`crate::binding`]), which ends with it.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use deadpool::Runtime;
use deadpool::managed::{
    self, Metrics, Object, Pool, PoolError, RecycleResult, TimeoutType, Timeouts,
};
use futures_util::future::join;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::binding::{Bound, Write};
use crate::error::Error;
use crate::sync::Sync;

/// How long opening a connection may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a quick command (everything but a wait or a `WAIT`) may take before it fails.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection lent again after lying idle this long is first checked with `PING` (a server's
/// `timeout`, a proxy or a firewall may have closed it meanwhile); one in steady use is not.
const IDLE_CHECK: Duration = Duration::from_secs(30);

/// How a [`crate::Client`] connects: how many dedicated connections it keeps to each server
/// (each master, in a cluster), besides its shared connection — a pool for waits in the server
/// and a pool for synced writes, each opened as needed up to its size and reused — and whether
/// its holdings are tied to a session ([`ClientOptions::sessions`], on by default). A caller
/// that finds its pool exhausted queues for a connection within its own budget: an acquire
/// within its wait (then it answers as a wait that timed out), a synced grant or renewal within
/// the sync timeout (then it is not synced, and nothing was sent:
/// [`crate::Error::NotReplicated`]).
///
/// ```no_run
/// # async fn example() -> leasehold_client::Result<()> {
/// use std::time::Duration;
/// use leasehold_client::{Client, ClientOptions};
///
/// let options = ClientOptions::new()
///     .wait_connections(64)
///     .sync_connections(8)
///     .session_grace(Duration::from_secs(1));
/// let client = Client::open_with("redis://127.0.0.1:6379", options).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientOptions {
    wait: usize,
    sync: usize,
    sessions: bool,
    grace: Option<Duration>,
}

impl ClientOptions {
    /// Connections for waits in the server by default: 32.
    pub const DEFAULT_WAIT_CONNECTIONS: usize = 32;
    /// Connections for synced writes by default: 16.
    pub const DEFAULT_SYNC_CONNECTIONS: usize = 16;

    /// The defaults: 32 connections for waits, 16 for synced writes, sessions on with the
    /// server's grace.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            wait: Self::DEFAULT_WAIT_CONNECTIONS,
            sync: Self::DEFAULT_SYNC_CONNECTIONS,
            sessions: true,
            grace: None,
        }
    }

    /// Whether every holding this client takes on one server is tied to the client's session
    /// (`LOCK.SESSION`; default on). The session is opened on the first acquire, on a
    /// connection of its own (named `leasehold-session`), and kept by a heartbeat every third
    /// of its grace. Each pooled connection is bound to it (`LOCK.SESSION USE`) by the first
    /// write it carries, and again after the session was replaced, in that write's round trip:
    /// synced grants and renewals carry no session argument (with [`crate::Sync::off`] they go
    /// over the shared connection, never bound, and name it: `SESSION id`). If this process
    /// dies or loses the server for longer than the grace, the server releases the holdings
    /// and hands them to their waiters then, not after their leases; the holder is told first:
    /// each holding counts only until the last confirmed heartbeat's send time plus the grace
    /// less 1% and 2 ms ([`crate::Guard::lease_end`]), after which [`crate::Guard::lost`] fires.
    /// Off: holdings rest on their leases alone, as before sessions. Sessions live in the
    /// master's memory: after a failover the new master has the leases only, and the client
    /// ties the holdings it still counts on to a new session. In Redis Cluster and for
    /// [`crate::Redlock`], holdings rest on their leases.
    #[must_use]
    pub const fn sessions(mut self, sessions: bool) -> Self {
        self.sessions = sessions;
        self
    }

    /// The session's grace (ms precision; 100 ms to the server's
    /// `lock.session-max-grace-ms`, 60 s by default): how long after its connection closed the
    /// server keeps the session, and how long a heartbeat may be missing before the client
    /// counts its holdings lost. Default: the server's `lock.session-grace-ms` (3 s). Out of
    /// range, the first acquire fails with the server's error.
    #[must_use]
    pub const fn session_grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// Whether sessions are on ([`ClientOptions::sessions`]).
    pub(crate) const fn has_sessions(&self) -> bool {
        self.sessions
    }

    /// The session's grace asked for, if any ([`ClientOptions::session_grace`]).
    pub(crate) const fn grace(&self) -> Option<Duration> {
        self.grace
    }

    /// At most `connections` (at least 1) for waits in the server (`LOCK.ACQUIRE ... WAIT`,
    /// `LOCK.MACQUIRE ... WAIT`), each kept by its waiter for as long as it waits: the number of
    /// acquires of this client that can wait in the server at once.
    #[must_use]
    pub const fn wait_connections(mut self, connections: usize) -> Self {
        self.wait = if connections == 0 { 1 } else { connections };
        self
    }

    /// At most `connections` (at least 1) for synced writes — a grant made without waiting, a
    /// renewal, a re-entry — and their `WAIT`: the most round trips of synced writes to one
    /// server in flight at once. Concurrent writes share round trips (up to 64 writes each,
    /// before one `WAIT`); another connection is used only while more writes are queued than the
    /// round trips in flight take next, so a synced write waits for at most one round trip
    /// ahead of it.
    #[must_use]
    pub const fn sync_connections(mut self, connections: usize) -> Self {
        self.sync = if connections == 0 { 1 } else { connections };
        self
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self::new()
    }
}

/// What a connection is borrowed for: each has a pool of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// A wait in the server (`... WAIT`), and the sync of what it granted.
    Wait,
    /// A synced write: a grant made without waiting, a renewal, and their `WAIT`.
    Sync,
}

/// Opens the pools' connections to one server. They have no response timeout of their own:
/// every exchange on them is bounded by its caller, which closes the connection when the bound
/// runs out. They never retry (a retried wait would queue twice), nor reconnect by themselves:
/// a connection that failed stays failed, so the session it is bound to stays known.
pub(crate) struct Dialer {
    client: redis::Client,
}

/// A pooled connection, and the session it is bound to ([`crate::binding`]).
pub(crate) struct Pooled {
    connection: MultiplexedConnection,
    bound: Bound,
}

impl managed::Manager for Dialer {
    type Type = Pooled;
    type Error = RedisError;

    async fn create(&self) -> Result<Pooled, RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(None);
        let connection = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(Pooled {
            connection,
            bound: Bound::Unbound,
        })
    }

    async fn recycle(&self, pooled: &mut Pooled, metrics: &Metrics) -> RecycleResult<RedisError> {
        if metrics.last_used() >= IDLE_CHECK {
            redis::cmd("PING")
                .exec_async(&mut pooled.connection)
                .await?;
        }
        Ok(())
    }
}

/// The wait pool and the sync pool of one server, and the synced writes queued for it.
/// Cloning is cheap: clones share them.
#[derive(Clone)]
pub(crate) struct Pools {
    wait: Pool<Dialer>,
    sync: Pool<Dialer>,
    outbox: Arc<Mutex<Outbox>>,
}

/// The most synced writes sent in one round trip.
const MOST_PER_ROUND_TRIP: usize = 64;

/// The synced writes queued for one master (group commit), in a lane per sync setting, and the
/// senders that take them. A sender is a task with a sync connection: it takes the oldest
/// writes of a lane, up to [`MOST_PER_ROUND_TRIP`], and sends them in one round trip before one
/// `LOCK.INSYNC`, `WAIT`, `LOCK.INSYNC` (a `WAIT` covers every write before it on its
/// connection), then takes again, until no lane needs it.
///
/// A lane needs one more sender while it queues more writes than its senders take in their
/// next round trips ([`MOST_PER_ROUND_TRIP`] each); at most the sync pool's size run at once.
/// So a lone write is sent at once, a write queued behind a round trip in flight waits for at
/// most that one, and concurrent writes share round trips instead of each paying its own
/// `WAIT` (every round trip in flight to a master waits for the same replicas: more of them
/// cost the master commands and acknowledgements, and make no write count sooner than the one
/// ahead of it).
struct Outbox {
    next: u64,
    lanes: HashMap<Sync, Lane>,
    /// Senders running, in all lanes.
    senders: usize,
    /// The most senders that may run: the sync pool's size.
    places: usize,
}

/// The writes queued with one sync setting, oldest first, and its senders.
#[derive(Default)]
struct Lane {
    queued: VecDeque<Queued>,
    senders: usize,
}

impl Lane {
    /// Whether it queues more writes than its senders take in their next round trips.
    fn needs_sender(&self) -> bool {
        self.queued.len() > self.senders.saturating_mul(MOST_PER_ROUND_TRIP)
    }
}

/// A synced write waiting to be sent.
pub(crate) struct Queued {
    id: u64,
    /// The key it writes (in a cluster, its slot's master is the one asked).
    pub(crate) key: String,
    /// The write, naming no session.
    pub(crate) command: Cmd,
    /// The session it is to be tied to (`None`: to none), which its connection is bound to
    /// ([`crate::binding`]).
    pub(crate) session: Option<String>,
    /// What undoes it when its caller is gone before its outcome came ([`Undo`]).
    pub(crate) undo: Option<Undo>,
    /// Where its outcome goes.
    pub(crate) done: oneshot::Sender<Result<Sent, Error>>,
}

/// The command that undoes a synced write nobody received the outcome of (its caller dropped
/// its future after a sender took the write): a release as the write's owner, sent when the
/// write granted something (a token, or a set's tokens) — and, with `if_lost`, when its reply
/// was lost too (a grant to a new owner: releasing frees nothing else).
#[derive(Clone)]
pub(crate) struct Undo {
    /// `LOCK.RELEASE name owner` (a set: `LOCK.MRELEASE`), sent on the shared connection.
    pub(crate) release: Cmd,
    /// Also sent when the write's reply was lost (it may have granted).
    pub(crate) if_lost: bool,
}

/// What a synced write got: its reply (an error reply too), why it does not count (`None`: it
/// counts), and when the reply came.
pub(crate) struct Sent {
    pub(crate) reply: Value,
    pub(crate) refused: Option<String>,
    pub(crate) answered: Instant,
}

/// A queued write's place in its master's queue, for [`Pools::withdraw`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    sync: Sync,
    id: u64,
}

impl Pools {
    /// The pools of `client`'s server, of `options`' sizes; connections are opened when first
    /// needed.
    pub(crate) fn new(client: &redis::Client, options: ClientOptions) -> Self {
        let pool = |size: usize| {
            let dialer = Dialer {
                client: client.clone(),
            };
            Pool::builder(dialer)
                .max_size(size)
                .queue_mode(managed::QueueMode::Lifo)
                .runtime(Runtime::Tokio1)
                .build()
                .expect("a runtime is set, so the pool builds")
        };
        Self {
            wait: pool(options.wait),
            sync: pool(options.sync),
            outbox: Arc::new(Mutex::new(Outbox {
                next: 0,
                lanes: HashMap::new(),
                senders: 0,
                places: options.sync,
            })),
        }
    }

    /// Queues `write`, synced as `sync` and undone by `undo` if nobody receives its outcome.
    /// Returns its ticket, where its outcome will come, and whether the caller must start a
    /// sender for its lane ([`Pools::take`]): one is counted for it.
    pub(crate) fn queue(
        &self,
        sync: Sync,
        write: Write<'_>,
        undo: Option<Undo>,
    ) -> (Ticket, oneshot::Receiver<Result<Sent, Error>>, bool) {
        let (done, outcome) = oneshot::channel();
        let mut outbox = self.outbox();
        outbox.next += 1;
        let id = outbox.next;
        let queued = Queued {
            id,
            key: write.key.to_owned(),
            command: write.command.clone(),
            session: write.session.map(str::to_owned),
            undo,
            done,
        };
        let has_place = outbox.senders < outbox.places;
        let lane = outbox.lanes.entry(sync).or_default();
        lane.queued.push_back(queued);
        let start = has_place && lane.needs_sender();
        if start {
            lane.senders += 1;
            outbox.senders += 1;
        }
        (Ticket { sync, id }, outcome, start)
    }

    /// The next round trip of a sender of lane `lane`: the oldest writes, up to
    /// [`MOST_PER_ROUND_TRIP`], of the lane that needs a sender and queued the oldest write —
    /// `lane` is set to it. Empty when no lane needs one: the sender stops, its place given up.
    pub(crate) fn take(&self, lane: &mut Sync) -> Vec<Queued> {
        let mut outbox = self.outbox();
        outbox.leave(*lane);
        let Outbox { lanes, senders, .. } = &mut *outbox;
        let next = lanes
            .iter_mut()
            .filter(|(_, queue)| queue.needs_sender())
            .min_by_key(|(_, queue)| queue.queued.front().map(|queued| queued.id));
        let Some((next, queue)) = next else {
            *senders = senders.saturating_sub(1);
            return Vec::new();
        };
        *lane = *next;
        queue.senders += 1;
        let count = queue.queued.len().min(MOST_PER_ROUND_TRIP);
        queue.queued.drain(..count).collect()
    }

    /// A sender of lane `lane` stopped before [`Pools::take`] stopped it (its task was dropped
    /// or panicked): gives up its place.
    pub(crate) fn give_up(&self, lane: Sync) {
        let mut outbox = self.outbox();
        outbox.leave(lane);
        outbox.senders = outbox.senders.saturating_sub(1);
    }

    /// Takes the write of `ticket` out of the queue; false when a sender already took it.
    pub(crate) fn withdraw(&self, ticket: Ticket) -> bool {
        let mut outbox = self.outbox();
        let Some(lane) = outbox.lanes.get_mut(&ticket.sync) else {
            return false;
        };
        let before = lane.queued.len();
        lane.queued.retain(|queued| queued.id != ticket.id);
        let withdrawn = lane.queued.len() < before;
        if lane.queued.is_empty() && lane.senders == 0 {
            outbox.lanes.remove(&ticket.sync);
        }
        withdrawn
    }

    fn outbox(&self) -> std::sync::MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Borrows a connection for `purpose`, queueing up to `budget` (`None`: as long as it
    /// takes) while all are lent; `None` when the budget ran out first.
    ///
    /// # Errors
    /// A new connection could not be opened.
    pub(crate) async fn borrow(
        &self,
        purpose: Purpose,
        budget: Option<Duration>,
    ) -> Result<Option<Borrowed>, RedisError> {
        let pool = match purpose {
            Purpose::Wait => &self.wait,
            Purpose::Sync => &self.sync,
        };
        let timeouts = Timeouts {
            wait: budget,
            create: Some(CONNECT_TIMEOUT),
            recycle: Some(CONNECT_TIMEOUT),
        };
        match pool.timeout_get(&timeouts).await {
            Ok(object) => Ok(Some(Borrowed(Some(object)))),
            Err(PoolError::Timeout(TimeoutType::Wait)) => Ok(None),
            Err(PoolError::Backend(error)) => Err(error),
            Err(other) => Err(io::Error::other(other.to_string()).into()),
        }
    }
}

impl Outbox {
    /// A sender leaves lane `sync` (to take again, or to stop); a lane left with neither
    /// writes nor senders is forgotten.
    fn leave(&mut self, sync: Sync) {
        if let Some(lane) = self.lanes.get_mut(&sync) {
            lane.senders = lane.senders.saturating_sub(1);
            if lane.queued.is_empty() && lane.senders == 0 {
                self.lanes.remove(&sync);
            }
        }
    }
}

/// A connection borrowed from a pool; it goes back when dropped, unless a reply was lost on it.
pub(crate) struct Borrowed(Option<Object<Dialer>>);

impl Borrowed {
    /// False once a reply was lost on it: it was closed, and the next exchange fails.
    pub(crate) fn is_open(&self) -> bool {
        self.0.is_some()
    }

    /// The session it is bound to, as far as the client knows ([`crate::binding`]); unknown
    /// once it was closed.
    pub(crate) fn bound(&self) -> Bound {
        self.0
            .as_ref()
            .map_or(Bound::Unknown, |pooled| pooled.bound.clone())
    }

    /// Records the session it is bound to (no effect once it was closed).
    pub(crate) fn set_bound(&mut self, bound: Bound) {
        if let Some(pooled) = self.0.as_mut() {
            pooled.bound = bound;
        }
    }

    /// Sends `head`, then `tail` behind it (one write, one round trip; the server runs them in
    /// that order), and reads all their replies — a command's error among them — within
    /// `timeout` (`None`: no limit). Returns `head`'s replies with the moment they came (before
    /// `tail`'s, which may wait in the server), and `tail`'s.
    ///
    /// # Errors
    /// The connection failed or the timeout ran out (it is then closed, as it is when the
    /// caller drops this future before the replies came).
    pub(crate) async fn exchange(
        &mut self,
        head: &Pipeline,
        tail: &Pipeline,
        timeout: Option<Duration>,
    ) -> Result<(Vec<Value>, Instant, Vec<Value>), RedisError> {
        let mut in_flight = InFlight(self.0.take());
        let connection = &mut in_flight.0.as_mut().ok_or_else(lost_earlier)?.connection;
        let mut behind = MultiplexedConnection::clone(connection);
        // `join` polls `head` first: its request is queued on the connection before `tail`'s.
        let both = join(
            async {
                let replies = head.query_async::<Vec<Value>>(connection).await;
                (replies, Instant::now())
            },
            async {
                if tail.is_empty() {
                    return Ok(Vec::new());
                }
                tail.query_async::<Vec<Value>>(&mut behind).await
            },
        );
        let ((head, answered), tail) = match timeout {
            Some(timeout) => tokio::time::timeout(timeout, both)
                .await
                .map_err(|_| RedisError::from(io::Error::from(io::ErrorKind::TimedOut)))?,
            None => both.await,
        };
        // Every reply was read, a command's error reply too: the connection can be lent again.
        let lost = [&head, &tail]
            .into_iter()
            .any(|replies| replies.as_ref().is_err_and(is_lost_reply));
        if !lost {
            self.0 = in_flight.0.take();
        }
        Ok((head?, answered, tail?))
    }
}

/// A connection with commands in flight: closed for good if dropped before its replies came.
struct InFlight(Option<Object<Dialer>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(object) = self.0.take() {
            drop(Object::take(object));
        }
    }
}

/// The error of a second exchange on a connection the first one lost.
fn lost_earlier() -> RedisError {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "the connection was closed after a lost reply",
    )
    .into()
}

/// The reply may have been lost: the server may or may not have done it.
pub(crate) fn is_lost_reply(error: &RedisError) -> bool {
    error.is_timeout() || error.is_io_error() || error.is_connection_dropped()
}
