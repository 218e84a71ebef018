//! The dedicated connections of one server (or one cluster master): a bounded pool for waits in
//! the server and one for synced writes, each connection lent to one caller (a waiter, or the
//! sender of a batch of synced writes) at a time (deadpool).
//!
//! A blocked command stalls the connection it was sent on: a wait (`LOCK.ACQUIRE ... WAIT`), a
//! synced write whose reply the server holds until its in-sync set has it (`SYNC`,
//! [`crate::sync`]), a `WAIT`. So none goes over the shared connection. Two pools, so that
//! waiters — who keep their connection for as long as they wait — never starve a holder's
//! synced renewal. A caller that finds its pool exhausted queues within its own budget. A
//! connection goes back to its pool only once every reply it was sent has been read: one whose
//! reply was lost (the client-side timeout fired, the connection dropped, the caller was
//! cancelled with a command in flight) is closed and never lent again — and the server, seeing
//! it closed, releases a grant it was holding for it until synced. Each connection remembers
//! the session it is bound to (`LOCK.SESSION USE`, [`crate::binding`]), which ends with it.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use deadpool::Runtime;
use deadpool::managed::{
    self, Metrics, Object, Pool, PoolError, RecycleResult, TimeoutType, Timeouts,
};
use futures_util::future::join;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Pipeline, RedisError, Value};
use tokio::time::Instant;

use crate::batch::Queue;
use crate::binding::Bound;

/// How long opening a connection may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a quick command (everything but a wait or a synced write) may take before it fails;
/// also the margin a synced write's reply gets beyond its sync timeout.
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
    /// renewal, a re-entry, a mode change — each carrying one batch at a time: the writes that
    /// waited for it, then `LOCK.SYNC`, whose reply the server holds until the in-sync set has
    /// them, stalling the connection meanwhile (with a fixed count, one write and its `WAIT`;
    /// a guarded command alone). Batches to the in-sync set use at most two of them at once, so
    /// that under load the writes wait behind a batch in flight and go together. A write that
    /// finds no batch to go with queues for one up to its sync timeout
    /// ([`crate::Sync::timeout`]), then fails with [`crate::Error::NotReplicated`], unsent.
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
    /// A wait in the server (`... WAIT`), synced as the write it is.
    Wait,
    /// A synced write: a grant made without waiting, a renewal, and a fixed count's `WAIT`.
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

/// The wait pool and the sync pool of one server, and the synced writes waiting for a batch
/// ([`crate::batch`]). Cloning is cheap: clones share them.
#[derive(Clone)]
pub(crate) struct Pools {
    wait: Pool<Dialer>,
    sync: Pool<Dialer>,
    queue: Arc<Queue>,
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
            queue: Arc::default(),
        }
    }

    /// The synced writes waiting for a batch.
    pub(crate) fn queue(&self) -> &Queue {
        &self.queue
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

/// A connection borrowed from a pool; it goes back when dropped, unless a reply was lost on it.
pub(crate) struct Borrowed(Option<Object<Dialer>>);

impl Borrowed {
    /// The session it is bound to, as far as the client knows ([`crate::binding`]); unknown
    /// once it was closed.
    pub(crate) fn bound(&self) -> Bound {
        self.0
            .as_ref()
            .map_or(Bound::Unknown, |pooled| pooled.bound.clone())
    }

    /// Whether it was closed after a lost reply.
    pub(crate) fn is_lost(&self) -> bool {
        self.0.is_none()
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
