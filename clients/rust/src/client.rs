//! The connection to a leasehold server or cluster: one shared, reconnecting connection for the
//! quick commands, and pools of dedicated connections ([`crate::pool`]) for waits and synced
//! writes, with the round trip that syncs a write to the replicas ([`crate::sync`]).
//!
//! A synced write is one round trip on a sync connection: the write, then `LOCK.INSYNC`, `WAIT
//! h`, `LOCK.INSYNC` ([`crate::sync`]), and one more `WAIT` and `LOCK.INSYNC` on the same
//! connection when that may still make it count. Synced writes queue per master, and a sender
//! task sends every write queued with the same sync setting (up to 64) in one round trip,
//! before one `LOCK.INSYNC`, `WAIT`, `LOCK.INSYNC` (group commit, [`Pools::take`]); each
//! caller waits for its write's outcome. A wait in the server is one round
//! trip on a wait connection: the blocking acquire, then the same commands, which the server
//! runs only once the acquire was answered. The writes and what follows them go as two requests
//! in one write to the socket, so the client sees when the writes' replies came (a wait's lease
//! begins then), not only when the `WAIT`'s did. Plain pipelines, never `MULTI`: a `WAIT` in a
//! transaction does not wait.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::{Cmd, FromRedisValue, IntoConnectionInfo, RedisError, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::binding::{Bound, Head, Write, named};
use crate::error::{Error, Result};
use crate::masters::Masters;
use crate::pool::{
    Borrowed, ClientOptions, Pools, Purpose, Queued, RESPONSE_TIMEOUT, Sent, Ticket, Undo,
    is_lost_reply,
};
use crate::session::{Session, Tying};
use crate::sync::{Check, Place, Seen, Sync};

/// A connection to one Redis (or Valkey) server, or to one Redis Cluster, with the leasehold
/// module loaded. Cloning is cheap: clones share the connections.
///
/// Besides one shared connection (for quick commands: grants with syncing off, releases,
/// Redlock), it keeps two bounded pools of dedicated connections per server ([`ClientOptions`]):
/// one for waits in the server, one for synced writes (a grant made without waiting, a renewal,
/// and the `WAIT` for their replicas). On one server it also keeps a session, which every
/// holding is tied to ([`ClientOptions::sessions`]): one for the client and all its clones,
/// which each pooled connection is bound to (`LOCK.SESSION USE`) by its first write.
///
/// ```no_run
/// # async fn example() -> leasehold_client::Result<()> {
/// let server = leasehold_client::Client::open("redis://127.0.0.1:6379").await?;
/// let cluster = leasehold_client::Client::cluster(&["redis://127.0.0.1:7000"]).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    options: ClientOptions,
    /// What this client heard from the masters (those replaced, their in-sync counts), for
    /// syncing writes.
    seen: Arc<Mutex<Seen>>,
    /// The session its holdings are tied to; `None` with sessions off and in a cluster.
    session: Option<Arc<Session>>,
}

enum Inner {
    Server {
        shared: ConnectionManager,
        pools: Pools,
    },
    Cluster {
        shared: ClusterConnection,
        masters: Box<Masters>,
    },
}

/// What a synced write got: its reply, and why it does not count (`None`: it counts).
pub(crate) struct Synced<T> {
    pub(crate) reply: T,
    pub(crate) refused: Option<String>,
    /// When the write's reply came (a wait's grant: the lease began just before), ahead of
    /// the `WAIT`'s.
    pub(crate) answered: Instant,
}

impl<T: FromRedisValue> Synced<T> {
    /// The outcome of a write sent on a pooled connection, its reply read as a `T`.
    fn of(sent: Sent) -> Result<Self, RedisError> {
        Ok(Self {
            reply: from_value(sent.reply.extract_error()?)?,
            refused: sent.refused,
            answered: sent.answered,
        })
    }
}

impl<T> Synced<T> {
    /// The error of a write that does not count; `None` when it counts.
    pub(crate) fn refusal(&self) -> Option<Error> {
        let reason = self.refused.clone()?;
        Some(Error::NotReplicated { reason })
    }
}

impl Client {
    /// Connects to one server (`redis://host:port[/db]`, `rediss://`, `unix://`) with the
    /// default pool sizes ([`ClientOptions::new`]). The shared connection reconnects by itself
    /// after a failure.
    ///
    /// # Errors
    /// A bad URL, or no connection within 5 s.
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_with(url, ClientOptions::new()).await
    }

    /// Connects to one server, as [`Client::open`], with the pool sizes of `options`.
    ///
    /// # Errors
    /// As [`Client::open`].
    pub async fn open_with(url: &str, options: ClientOptions) -> Result<Self> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(RESPONSE_TIMEOUT));
        let shared = ConnectionManager::new_with_config(client.clone(), config).await?;
        let pools = Pools::new(&client, options);
        let session = options
            .has_sessions()
            .then(|| Arc::new(Session::new(client, options.grace())));
        Ok(Self {
            session,
            ..Self::with(Inner::Server { shared, pools }, options)
        })
    }

    /// Connects to a Redis Cluster through some of its nodes (`redis://host:port`) with the
    /// default pool sizes; commands go to the master of the lock's slot. The shared connection
    /// follows `MOVED` and `ASK`; each master gets pools of its own.
    ///
    /// # Errors
    /// Bad URLs, or no node answered.
    pub async fn cluster(nodes: &[&str]) -> Result<Self> {
        Self::cluster_with(nodes, ClientOptions::new()).await
    }

    /// Connects to a Redis Cluster, as [`Client::cluster`], with the pool sizes of `options`
    /// (per master).
    ///
    /// # Errors
    /// As [`Client::cluster`].
    pub async fn cluster_with(nodes: &[&str], options: ClientOptions) -> Result<Self> {
        let seed = nodes.first().copied().unwrap_or_default();
        let seed = seed.into_connection_info()?;
        let shared = ClusterClientBuilder::new(nodes.to_vec())
            .response_timeout(RESPONSE_TIMEOUT)
            .connection_timeout(RESPONSE_TIMEOUT)
            .build()?
            .get_async_connection()
            .await?;
        let masters = Box::new(Masters::new(seed, options));
        Ok(Self::with(Inner::Cluster { shared, masters }, options))
    }

    /// Connects to another server (`redis://host:port`) as the same client, with the same pool
    /// sizes, to follow a failover to a new master: what this client heard carries over, so a
    /// master it saw replaced still counts none of its writes (see [`crate::sync`]).
    ///
    /// # Errors
    /// As [`Client::open`].
    pub async fn reopen(&self, url: &str) -> Result<Self> {
        let reopened = Self::open_with(url, self.options).await?;
        Ok(Self {
            seen: Arc::clone(&self.seen),
            ..reopened
        })
    }

    fn with(inner: Inner, options: ClientOptions) -> Self {
        Self {
            inner: Arc::new(inner),
            options,
            seen: Arc::default(),
            session: None,
        }
    }

    /// The id of this client's session (16 hex digits, as `LOCK.INFO` shows it for each holding
    /// tied to it), or `None` when none is open: before the first acquire, after
    /// [`Client::close`], with sessions off, and in a cluster.
    #[must_use]
    pub fn session_id(&self) -> Option<String> {
        self.session.as_ref().and_then(|session| session.id())
    }

    /// Closes the session (`LOCK.SESSION CLOSE`) and its connection: every holding tied to it
    /// is reported lost ([`crate::Guard::lost`]) first, then the server releases them all at
    /// once and hands them to their waiters. Returns how many the server released (0 with no
    /// session open). The client stays usable: the next acquire opens a new session. Every
    /// clone of this client shares the session, so it is closed for all of them.
    ///
    /// # Errors
    /// No connection, or the server's error: the holdings count as lost all the same, and the
    /// server releases them a grace after the session's connection closed.
    pub async fn close(&self) -> Result<u64> {
        match &self.session {
            Some(session) => Ok(session.close().await?),
            None => Ok(0),
        }
    }

    /// The session an acquire ties its holding to, opened now if none is open; `None` with
    /// sessions off and in a cluster.
    ///
    /// # Errors
    /// The session could not be opened.
    pub(crate) async fn tying(&self) -> Result<Option<Tying>> {
        match &self.session {
            Some(session) => Ok(Some(session.tying().await?)),
            None => Ok(None),
        }
    }

    /// Sends a quick command on the shared connection.
    pub(crate) async fn query<T: FromRedisValue>(&self, command: &Cmd) -> Result<T> {
        Ok(match &*self.inner {
            Inner::Server { shared, .. } => command.query_async(&mut shared.clone()).await?,
            Inner::Cluster { shared, .. } => command.query_async(&mut shared.clone()).await?,
        })
    }

    /// Sends `write`, which counts only once synced as `sync` says, tied to its session, and
    /// syncs it: with syncing off on the shared connection (naming its session, `SESSION id`),
    /// otherwise queued for its master and sent by a sender task on a sync connection bound to
    /// its session ([`crate::binding`]), in one round trip with what syncs it, together with
    /// the other writes queued meanwhile ([`Pools::take`]). If the caller drops this future, a
    /// write still queued is withdrawn; one already taken is sent all the same, and `undo` (a
    /// release) is sent if it granted something nobody received ([`Undo`]).
    ///
    /// # Errors
    /// The server's error (`ERR no such session` when its session has ended: nothing was
    /// done), no connection, or [`Error::NotReplicated`] when no sender took the write within
    /// the sync timeout (nothing was sent).
    pub(crate) async fn synced<T: FromRedisValue>(
        &self,
        write: Write<'_>,
        sync: &Sync,
        undo: Option<Undo>,
    ) -> Result<Synced<T>> {
        if sync.is_off() {
            let reply = self.query(&named(write.command, write.session)).await?;
            return Ok(Synced {
                reply,
                refused: None,
                answered: Instant::now(),
            });
        }
        let pools = self.pools(write.key).await?;
        let (ticket, outcome, start) = pools.queue(*sync, write, undo.clone());
        let mut pending = Pending {
            client: self,
            pools: &pools,
            ticket,
            outcome: Some(outcome),
            undo,
        };
        if start {
            tokio::spawn(self.clone().send_queued(pools.clone(), *sync));
        }
        let sent = pending.outcome(sync.timeout).await?;
        Ok(Synced::of(sent)?)
    }

    /// A sender: takes the writes queued for `pools`' master, starting in lane `lane`, a round
    /// trip at a time on a sync connection, until no lane needs it ([`Pools::take`]), and tells
    /// each write's caller its outcome — or, if the caller is gone, undoes a grant
    /// ([`Client::unclaimed`]). A round trip lost, the connection is closed and the next one
    /// borrowed; no connection, the taken writes are told why.
    async fn send_queued(self, pools: Pools, lane: Sync) {
        let mut sender = Sender {
            pools: &pools,
            lane,
            stopped: false,
        };
        let mut connection: Option<Borrowed> = None;
        loop {
            let borrowed = match connection.take() {
                Some(connection) => Ok(Some(connection)),
                None => {
                    // Taken first: the oldest write's timeout bounds the wait.
                    let budget = Some(sender.lane.timeout);
                    pools.borrow(Purpose::Sync, budget).await
                }
            };
            let queued = pools.take(&mut sender.lane);
            if queued.is_empty() {
                sender.stopped = true;
                return;
            }
            let sync = sender.lane;
            let mut borrowed = match borrowed {
                Ok(Some(borrowed)) => borrowed,
                Ok(None) => {
                    let timeout = sync.timeout_ms();
                    let reason = format!("no sync connection was free within {timeout} ms");
                    let refused = || Error::NotReplicated {
                        reason: reason.clone(),
                    };
                    self.deliver(queued, |_| Err(refused()));
                    continue;
                }
                Err(error) => {
                    self.deliver(queued, |_| Err(Error::Redis(error.clone())));
                    continue;
                }
            };
            let writes: Vec<Write<'_>> = queued
                .iter()
                .map(|queued| Write {
                    key: &queued.key,
                    command: &queued.command,
                    session: queued.session.as_deref(),
                })
                .collect();
            let timeout = Some(RESPONSE_TIMEOUT + sync.timeout);
            let sent = self.exchange(&mut borrowed, &sync, &writes, timeout).await;
            drop(writes);
            match sent {
                Ok(sent) => {
                    let mut sent = sent.into_iter();
                    self.deliver(queued, |_| sent.next().ok_or_else(|| no_reply().into()));
                }
                Err(error) => self.deliver(queued, |_| Err(Error::Redis(error.clone()))),
            }
            // A lost reply closed it: the next round trip borrows another.
            if borrowed.is_open() {
                connection = Some(borrowed);
            }
        }
    }

    /// Tells each of `queued` its outcome, `outcome` of it; an outcome nobody receives is
    /// undone ([`Client::unclaimed`]).
    fn deliver(&self, queued: Vec<Queued>, mut outcome: impl FnMut(&Queued) -> Result<Sent>) {
        for queued in queued {
            let sent = outcome(&queued);
            if let Err(sent) = queued.done.send(sent) {
                self.unclaimed(queued.undo, &sent);
            }
        }
    }

    /// A synced write's `outcome` that its caller never received: when it granted something
    /// (or, with [`Undo::if_lost`], its reply was lost), sends `undo`'s release in the
    /// background, retrying with backoff while the server cannot be reached (a few seconds).
    fn unclaimed(&self, undo: Option<Undo>, outcome: &Result<Sent>) {
        let Some(undo) = undo else {
            return;
        };
        let release = match outcome {
            Ok(sent) => granted(&sent.reply),
            Err(Error::Redis(error)) => undo.if_lost && is_lost_reply(error),
            Err(_) => false,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if release {
            let client = self.clone();
            runtime.spawn(async move {
                for attempt in 0..20 {
                    if client.query::<Value>(&undo.release).await.is_ok() {
                        return;
                    }
                    tokio::time::sleep(Backoff::default().delay(attempt)).await;
                }
            });
        }
    }

    /// Borrows a wait connection to `key`'s master, queueing up to `budget` (`None`: as long as
    /// it takes); `None` when the budget ran out first.
    ///
    /// # Errors
    /// No connection.
    pub(crate) async fn wait_connection(
        &self,
        key: &str,
        budget: Option<Duration>,
    ) -> Result<Option<Borrowed>, RedisError> {
        self.pools(key).await?.borrow(Purpose::Wait, budget).await
    }

    /// Sends `write`, which blocks in the server up to `wait` (`None`: no limit), on
    /// `connection`, bound to the write's session first if it is not ([`crate::binding`]), and
    /// syncs what it granted as `sync` says in the same round trip; gives up `margin` after the
    /// wait (and the sync) should have ended.
    ///
    /// # Errors
    /// The server's error (`ERR no such session` when the write's session has ended: nothing
    /// was done), or a lost reply (the connection is then closed).
    pub(crate) async fn wait_synced<T: FromRedisValue>(
        &self,
        connection: &mut Borrowed,
        write: Write<'_>,
        (wait, margin): (Option<Duration>, Duration),
        sync: &Sync,
    ) -> Result<Synced<T>, RedisError> {
        let syncing = if sync.is_off() {
            Duration::ZERO
        } else {
            sync.timeout
        };
        let timeout = wait.map(|wait| wait + margin + syncing);
        let sent = self.exchange(connection, sync, &[write], timeout).await?;
        Synced::of(sent.into_iter().next().ok_or_else(no_reply)?)
    }

    /// One round trip of `writes` on `connection`, bound first to the session they are to be
    /// tied to ([`Head`]), with what syncs them as `sync` says behind them, and one more round
    /// trip when that may still make them count; each write's outcome, in order.
    async fn exchange(
        &self,
        connection: &mut Borrowed,
        sync: &Sync,
        writes: &[Write<'_>],
        timeout: Option<Duration>,
    ) -> Result<Vec<Sent>, RedisError> {
        let places: Vec<Place> = writes.iter().map(|write| self.place(write.key)).collect();
        let head = Head::new(&connection.bound(), writes);
        if head.binds() {
            connection.set_bound(Bound::Unknown);
        }
        let tail = sync.tail(self.seen().hint(&places));
        let replies = connection.exchange(head.pipeline(), &tail, timeout).await;
        let (replies, answered, tail) = replies.inspect_err(|error| self.heard(error))?;
        let (replies, bound) = head.read(replies);
        connection.set_bound(bound);
        for reply in &replies {
            if let Value::ServerError(error) = reply {
                self.heard(&RedisError::from(error.clone()));
            }
        }
        let refused = self
            .refused(connection, sync, &places, tail, answered)
            .await?;
        Ok(replies
            .into_iter()
            .map(|reply| Sent {
                reply,
                refused: refused.clone(),
                answered,
            })
            .collect())
    }

    /// Why writes to `places`, answered at `answered`, do not count by `tail`, the replies to
    /// what synced them ([`Sync::tail`]), after one more `WAIT` on `connection` when the sync
    /// timeout has time left for one that may help; `None` when they count.
    ///
    /// # Errors
    /// The reply to that one more `WAIT` was lost.
    async fn refused(
        &self,
        connection: &mut Borrowed,
        sync: &Sync,
        places: &[Place],
        tail: Vec<Value>,
        answered: Instant,
    ) -> Result<Option<String>, RedisError> {
        let mut check = match Check::read(sync, tail) {
            Ok(check) => check,
            Err(reason) => return Ok(Some(reason)),
        };
        let left = sync.timeout.saturating_sub(answered.elapsed());
        let refusal = match check.judge(sync, &mut self.seen(), places, left) {
            Ok(()) => return Ok(None),
            Err(refusal) => refusal,
        };
        let Some(replicas) = refusal.again else {
            return Ok(Some(refusal.reason));
        };
        let again = sync.again(replicas, left);
        let timeout = Some(RESPONSE_TIMEOUT + left);
        let (replies, _, _) = connection.exchange(&again, &redis::pipe(), timeout).await?;
        if let Err(reason) = check.reread(sync, replies) {
            return Ok(Some(reason));
        }
        let judged = check.judge(sync, &mut self.seen(), places, Duration::ZERO);
        Ok(judged.err().map(|refusal| refusal.reason))
    }

    /// The pools of `key`'s master.
    async fn pools(&self, key: &str) -> Result<Pools, RedisError> {
        match &*self.inner {
            Inner::Server { pools, .. } => Ok(pools.clone()),
            Inner::Cluster { shared, masters } => masters.pools(key, shared).await,
        }
    }

    /// Takes note of an error on a pooled connection: in a cluster, the slots may have moved.
    fn heard(&self, error: &RedisError) {
        if let Inner::Cluster { masters, .. } = &*self.inner {
            masters.heard(error);
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn place(&self, key: &str) -> Place {
        match &*self.inner {
            Inner::Server { .. } => None,
            Inner::Cluster { .. } => Some(Slot::for_key(key)),
        }
    }
}

/// A caller's write queued for a sender ([`Client::synced`]): waits for its outcome, and if
/// dropped first, withdraws the write while it is queued, or undoes an outcome that came but
/// was not received ([`Client::unclaimed`]; one still to come is undone by its sender).
struct Pending<'a> {
    client: &'a Client,
    pools: &'a Pools,
    ticket: Ticket,
    /// `None` once the outcome was received, or the write withdrawn.
    outcome: Option<oneshot::Receiver<Result<Sent>>>,
    undo: Option<Undo>,
}

impl Pending<'_> {
    /// The write's outcome. Still queued after `budget`, it is withdrawn and not synced.
    ///
    /// # Errors
    /// The round trip's error, [`Error::NotReplicated`] when withdrawn, or a lost reply when
    /// its sender was gone before the outcome came.
    async fn outcome(&mut self, budget: Duration) -> Result<Sent> {
        let Some(outcome) = self.outcome.as_mut() else {
            return Err(no_reply().into());
        };
        let came = match tokio::time::timeout(budget, &mut *outcome).await {
            Ok(came) => came,
            Err(_) if self.pools.withdraw(self.ticket) => {
                self.outcome = None;
                let timeout = budget.as_millis().max(1);
                let reason = format!("no sync connection was free within {timeout} ms");
                return Err(Error::NotReplicated { reason });
            }
            // A sender took it: its outcome comes.
            Err(_) => outcome.await,
        };
        self.outcome = None;
        came.map_err(|_| {
            let error = std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the round trip that carried the write was cancelled",
            );
            Error::Redis(error.into())
        })?
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let Some(mut outcome) = self.outcome.take() else {
            return;
        };
        if self.pools.withdraw(self.ticket) {
            return;
        }
        // Closed, no outcome can come any more: either it is here, or its sender undoes it.
        outcome.close();
        if let Ok(sent) = outcome.try_recv() {
            self.client.unclaimed(self.undo.take(), &sent);
        }
    }
}

/// A running sender's place in its master's outbox: given up if its task ends before
/// [`Pools::take`] stopped it (dropped with the runtime, or a panic), so writes queued later
/// start another.
struct Sender<'a> {
    pools: &'a Pools,
    /// The lane it sends, as [`Pools::take`] moved it.
    lane: Sync,
    stopped: bool,
}

impl Drop for Sender<'_> {
    fn drop(&mut self) {
        if !self.stopped {
            self.pools.give_up(self.lane);
        }
    }
}

/// Whether a grant's reply granted something: a token (`LOCK.ACQUIRE`) or a set's tokens
/// (`LOCK.MACQUIRE`), not a null (busy) or an error.
fn granted(reply: &Value) -> bool {
    match reply {
        Value::Int(_) => true,
        Value::Array(tokens) => !tokens.is_empty(),
        _ => false,
    }
}

/// The error of a round trip that brought no reply for its write.
fn no_reply() -> RedisError {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "no reply to the write").into()
}

fn from_value<T: FromRedisValue>(value: Value) -> Result<T, RedisError> {
    Ok(T::from_redis_value(value)?)
}
