//! The connection to a leasehold server or cluster: one shared, reconnecting connection for the
//! quick commands, and pools of dedicated connections ([`crate::pool`]) for waits and synced
//! writes, with the round trip that syncs a write to the replicas ([`crate::sync`]).
//!
//! A synced write is one round trip on a sync connection: `INFO replication`, the write, `WAIT
//! k` with `k` the count learned so far; the `INFO` reply updates the count and, if it grew, one
//! more `WAIT` follows on the same connection (a `WAIT` covers every write before it there).
//! Writes that wait for a sync connection at the same time share that round trip: whoever gets
//! a connection sends them all, behind one `INFO` and before one `WAIT` ([`Pools::queue`]). A
//! wait in the server is one round trip on a wait connection: the blocking acquire, then `INFO
//! replication` and `WAIT k`, which the server runs only once the acquire was answered. The
//! write and what follows it go as two requests in one write to the socket, so the client sees
//! when the write's reply came (a wait's lease begins then), not only when the `WAIT`'s did.
//! Plain pipelines, never `MULTI`: a `WAIT` in a transaction does not wait.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::{Cmd, FromRedisValue, IntoConnectionInfo, Pipeline, RedisError, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::masters::Masters;
use crate::pool::{Borrowed, ClientOptions, Pools, Purpose, Sent};
use crate::sync::{Learned, Place, Replicas, Sync};

/// How long a quick command (everything but a wait or a `WAIT`) may take before it fails.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to one Redis (or Valkey) server, or to one Redis Cluster, with the leasehold
/// module loaded. Cloning is cheap: clones share the connections.
///
/// Besides one shared connection (for quick commands: grants with syncing off, releases,
/// Redlock), it keeps two bounded pools of dedicated connections per server ([`ClientOptions`]):
/// one for waits in the server, one for synced writes (a grant made without waiting, a renewal,
/// and the `WAIT` for their replicas).
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
    /// How many replicas each master has, for syncing writes.
    learned: Arc<Mutex<Learned>>,
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

/// What a synced write got: its reply, and how many replicas acknowledged it of how many
/// wanted.
pub(crate) struct Synced<T> {
    pub(crate) reply: T,
    pub(crate) acked: u32,
    pub(crate) wanted: u32,
    /// When the write's reply came (a wait's grant: the lease began just before), ahead of
    /// the `WAIT`'s.
    pub(crate) answered: Instant,
}

impl<T: FromRedisValue> Synced<T> {
    /// The outcome of a write sent on a pooled connection, its reply read as a `T`.
    fn of(sent: Sent) -> Result<Self, RedisError> {
        Ok(Self {
            reply: from_value(sent.reply.extract_error()?)?,
            acked: sent.acked,
            wanted: sent.wanted,
            answered: sent.answered,
        })
    }
}

impl<T> Synced<T> {
    /// True when enough replicas acknowledged it.
    pub(crate) fn acknowledged(&self) -> bool {
        self.acked >= self.wanted
    }

    /// The error of a write that was not acknowledged.
    pub(crate) fn not_replicated(&self) -> Error {
        Error::NotReplicated {
            acked: self.acked,
            wanted: self.wanted,
        }
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
        Ok(Self::with(Inner::Server { shared, pools }, options))
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
    /// sizes, to follow a failover to a new master: what was learned of the replicas carries
    /// over, so the new master's grants wait for as many replicas as the old one had, not for
    /// none while its replicas reattach (see [`crate::sync`]).
    ///
    /// # Errors
    /// As [`Client::open`].
    pub async fn reopen(&self, url: &str) -> Result<Self> {
        let reopened = Self::open_with(url, self.options).await?;
        Ok(Self {
            learned: Arc::clone(&self.learned),
            ..reopened
        })
    }

    fn with(inner: Inner, options: ClientOptions) -> Self {
        Self {
            inner: Arc::new(inner),
            options,
            learned: Arc::default(),
        }
    }

    /// Sends a quick command on the shared connection.
    pub(crate) async fn query<T: FromRedisValue>(&self, command: &Cmd) -> Result<T> {
        Ok(match &*self.inner {
            Inner::Server { shared, .. } => command.query_async(&mut shared.clone()).await?,
            Inner::Cluster { shared, .. } => command.query_async(&mut shared.clone()).await?,
        })
    }

    /// Sends `command`, a write to `key` that counts only once synced as `sync` says, and
    /// syncs it: with syncing off on the shared connection, otherwise on a sync connection with
    /// the replica count learned in the same round trip, together with the other writes that
    /// wait for a sync connection meanwhile.
    ///
    /// # Errors
    /// The server's error, no connection, or [`Error::NotReplicated`] when no sync connection
    /// was free within the sync timeout (nothing was sent).
    pub(crate) async fn synced<T: FromRedisValue>(
        &self,
        key: &str,
        command: &Cmd,
        sync: &Sync,
    ) -> Result<Synced<T>> {
        if sync.is_off() {
            let reply = self.query(command).await?;
            return Ok(Synced {
                reply,
                acked: 0,
                wanted: 0,
                answered: Instant::now(),
            });
        }
        let pools = self.pools(key).await?;
        let (id, mut outcome) = pools.queue(*sync, key, command);
        let borrowed = tokio::select! {
            biased;
            sent = &mut outcome => return self.outcome(sent),
            borrowed = pools.borrow(Purpose::Sync, Some(sync.timeout)) => borrowed,
        };
        match borrowed {
            Ok(Some(connection)) => self.send_queued(connection, &pools, sync).await,
            Ok(None) if pools.withdraw(sync, id) => {
                let wanted = self.wanted(key, sync);
                return Err(Error::NotReplicated { acked: 0, wanted });
            }
            Err(error) if pools.withdraw(sync, id) => return Err(error.into()),
            // Another caller took it to send: its outcome comes.
            Ok(None) | Err(_) => {}
        }
        self.outcome(outcome.await)
    }

    /// A queued write's outcome; a sender gone before it (cancelled with it in flight) is a
    /// lost reply.
    fn outcome<T: FromRedisValue>(
        &self,
        sent: Result<Result<Sent, RedisError>, oneshot::error::RecvError>,
    ) -> Result<Synced<T>> {
        let sent = sent.map_err(|_| {
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the round trip that carried the write was cancelled",
            ))
        })??;
        Ok(Synced::of(sent)?)
    }

    /// Sends everything queued with `sync` on `connection`, a round trip at a time, until
    /// nothing is left or the connection is lost; each write's outcome goes to its caller.
    async fn send_queued(&self, mut connection: Borrowed, pools: &Pools, sync: &Sync) {
        loop {
            let queued = pools.take(sync);
            if queued.is_empty() {
                return;
            }
            let writes: Vec<(&str, &Cmd)> = queued
                .iter()
                .map(|queued| (queued.key.as_str(), &queued.command))
                .collect();
            let timeout = Some(RESPONSE_TIMEOUT + sync.timeout);
            let round = Round {
                sync,
                learn_after: false,
            };
            match self
                .exchange(&mut connection, &round, &writes, timeout)
                .await
            {
                Ok(sent) => {
                    for (queued, sent) in queued.into_iter().zip(sent) {
                        let _ = queued.done.send(Ok(sent));
                    }
                }
                Err(error) => {
                    for queued in queued {
                        let _ = queued.done.send(Err(error.clone()));
                    }
                    return;
                }
            }
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

    /// Sends `command`, which blocks in the server up to `wait` (`None`: no limit), on
    /// `connection`, and syncs what it granted as `sync` says in the same round trip; gives up
    /// `margin` after the wait (and the sync) should have ended.
    ///
    /// # Errors
    /// The server's error, or a lost reply (the connection is then closed).
    pub(crate) async fn wait_synced<T: FromRedisValue>(
        &self,
        connection: &mut Borrowed,
        key: &str,
        command: &Cmd,
        (wait, margin): (Option<Duration>, Duration),
        sync: &Sync,
    ) -> Result<Synced<T>, RedisError> {
        let round = Round {
            sync,
            learn_after: true,
        };
        let syncing = if sync.is_off() {
            Duration::ZERO
        } else {
            sync.timeout
        };
        let timeout = wait.map(|wait| wait + margin + syncing);
        let sent = self
            .exchange(connection, &round, &[(key, command)], timeout)
            .await?;
        Synced::of(sent.into_iter().next().ok_or_else(no_reply)?)
    }

    /// One round trip of `writes` (each a key and its command) on `connection` as `round`
    /// says, and one more `WAIT` if the replica count grew; each write's outcome, in order.
    async fn exchange(
        &self,
        connection: &mut Borrowed,
        round: &Round<'_>,
        writes: &[(&str, &Cmd)],
        timeout: Option<Duration>,
    ) -> Result<Vec<Sent>, RedisError> {
        let known = writes
            .iter()
            .map(|(key, _)| self.wanted(key, round.sync))
            .max()
            .unwrap_or(0);
        let (head, tail) = round.pipelines(writes.iter().map(|(_, command)| *command), known);
        let replies = connection.exchange(&head, &tail, timeout).await;
        let (head, answered, tail) = replies.inspect_err(|error| self.heard(error))?;
        let (mut head, mut tail) = (head.into_iter(), tail.into_iter());
        let info_before = round.learns() && !round.learn_after;
        let info = if info_before { head.next() } else { None };
        let replies: Vec<Value> = head.collect();
        for reply in &replies {
            if let Value::ServerError(error) = reply {
                self.heard(&RedisError::from(error.clone()));
            }
        }
        let info = match info {
            Some(info) => Some(info),
            None if round.learn_after && round.learns() => tail.next(),
            None => None,
        };
        let info = info.map(from_value::<String>).transpose()?;
        // `None`: a master this client saw replaced, none of whose writes count.
        let wanted: Vec<Option<u32>> = writes
            .iter()
            .map(|(key, _)| match &info {
                Some(info) => self.learned().heard(self.place(key), info),
                None => Some(known),
            })
            .collect();
        let mut acked = match tail.next() {
            Some(wait) => round.sync.acked(wait)?,
            None => 0,
        };
        let most = wanted.iter().flatten().copied().max().unwrap_or(0);
        if most > known {
            let mut again = redis::pipe();
            again.add_command(round.sync.wait_command(most));
            let timeout = RESPONSE_TIMEOUT + round.sync.timeout;
            let (replies, _, _) = connection
                .exchange(&again, &redis::pipe(), Some(timeout))
                .await?;
            acked = round
                .sync
                .acked(replies.into_iter().next().unwrap_or(Value::Nil))?;
        }
        Ok(replies
            .into_iter()
            .zip(wanted)
            .map(|(reply, wanted)| Sent {
                reply,
                acked: if wanted.is_some() { acked } else { 0 },
                wanted: wanted.unwrap_or(known.max(1)),
                answered,
            })
            .collect())
    }

    /// The replica count to send with a write to `key` under `sync`: as it says, or as many as
    /// learned so far for the lock's master.
    fn wanted(&self, key: &str, sync: &Sync) -> u32 {
        match sync.replicas {
            Replicas::Learned => self.learned().known(self.place(key)),
            Replicas::Exactly(replicas) => replicas,
        }
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

    fn learned(&self) -> std::sync::MutexGuard<'_, Learned> {
        self.learned.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn place(&self, key: &str) -> Place {
        match &*self.inner {
            Inner::Server { .. } => None,
            Inner::Cluster { .. } => Some(Slot::for_key(key)),
        }
    }
}

/// One synced round trip: what to learn and wait for around its writes.
struct Round<'a> {
    sync: &'a Sync,
    /// `INFO replication` after the write (a wait in the server: its grant comes later) rather
    /// than before it.
    learn_after: bool,
}

impl Round<'_> {
    /// True when the replica count is learned (not given).
    fn learns(&self) -> bool {
        self.sync.replicas == Replicas::Learned
    }

    /// `commands` with `INFO replication` (when the count is learned) before them, or after
    /// them for a wait, and `WAIT known` (when above 0) last: the head up to the writes, the
    /// tail after them.
    fn pipelines<'c>(
        &self,
        commands: impl Iterator<Item = &'c Cmd>,
        known: u32,
    ) -> (Pipeline, Pipeline) {
        let info = || redis::cmd("INFO").arg("replication").clone();
        let (mut head, mut tail) = (redis::pipe(), redis::pipe());
        head.ignore_errors();
        tail.ignore_errors();
        if self.learns() && !self.learn_after {
            head.add_command(info());
        }
        for command in commands {
            head.add_command(command.clone());
        }
        if self.learns() && self.learn_after {
            tail.add_command(info());
        }
        if known > 0 {
            tail.add_command(self.sync.wait_command(known));
        }
        (head, tail)
    }
}

/// The error of a round trip that brought no reply for its write.
fn no_reply() -> RedisError {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "no reply to the write").into()
}

fn from_value<T: FromRedisValue>(value: Value) -> Result<T, RedisError> {
    Ok(T::from_redis_value(value)?)
}
