//! The connection to a leasehold server or cluster: one shared, reconnecting connection for the
//! quick commands, and pools of dedicated connections ([`crate::pool`]) for waits and synced
//! writes.
//!
//! Synced writes to the in-sync set go out in batches ([`crate::batch`]): the writes waiting for
//! a sync connection when one comes free, each with `NOSYNC`, then `LOCK.SYNC`, which the server
//! answers once its in-sync set has them all, or refuses with `NOREPLICAS` — then the client
//! releases each grant as the server releases a refused one. With a fixed count (or AOF) the
//! write carries `NOSYNC` and a `WAIT` (`WAITAOF`) goes behind it in the same round trip, as a
//! second request in the same write to the socket, so the client sees when the write's reply
//! came (a wait's lease begins then), not only when the `WAIT`'s did. A wait in the server is
//! one round trip on a wait connection: the blocking acquire, synced the same way (the server
//! holds a hand-over's reply until its in-sync set has it). Plain pipelines, never `MULTI`: a
//! write in a transaction cannot be held, nor can a `WAIT` wait. A connection is bound to the
//! write's session in the same round trip when it is not yet ([`crate::binding`]).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, IntoConnectionInfo, RedisError, Value};
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::batch::{self, Given, Queued, Undo};
use crate::binding::{Bound, Head, Write, named};
use crate::error::{Error, Result};
use crate::masters::Masters;
use crate::pool::{Borrowed, ClientOptions, Pools, Purpose, RESPONSE_TIMEOUT};
use crate::session::{Session, Tying};
use crate::sync::{Sync, guarded_error, write_error};

/// A connection to one Redis (or Valkey) server, or to one Redis Cluster, with the leasehold
/// module loaded. Cloning is cheap: clones share the connections.
///
/// Besides one shared connection (for quick commands: grants with syncing off, releases,
/// Redlock), it keeps two bounded pools of dedicated connections per server ([`ClientOptions`]):
/// one for waits in the server, one for synced writes (a grant made without waiting, a renewal,
/// which the server answers once its in-sync set has them). Needs the lock module 0.7.0 or
/// later ([`crate::Error::ModuleTooOld`]). On one server it also keeps a session, which every
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

/// What a synced write got: its reply, and why the client found it does not count (`None`: it
/// counts). A refusal by the server (`NOREPLICAS`) is an error instead
/// ([`crate::Error::NotReplicated`]).
pub(crate) struct Synced<T> {
    pub(crate) reply: T,
    pub(crate) refused: Option<String>,
    /// When the write's reply came (a wait's grant: the lease began just before; a synced
    /// hand-over's reply comes once the in-sync set has it), ahead of a `WAIT`'s.
    pub(crate) answered: Instant,
}

impl<T: FromRedisValue> Synced<T> {
    /// The outcome of a write, its reply read as a `T`.
    ///
    /// # Errors
    /// The write's error reply ([`write_error`]), or a reply of another shape.
    fn of(sent: Sent) -> Result<Self> {
        let reply = sent.reply.extract_error().map_err(write_error)?;
        Ok(Self {
            reply: from_value(reply)?,
            refused: sent.refused,
            answered: sent.answered,
        })
    }
}

impl<T> Synced<T> {
    /// The error of a write the client found does not count (a fixed count's `WAIT`, the AOF's
    /// fsync); `None` when it counts.
    pub(crate) fn refusal(&self) -> Option<Error> {
        self.refused.clone().map(Error::not_replicated)
    }
}

/// What a write sent on a pooled connection got: its reply (an error reply too), why the
/// client found it does not count (`None`: it counts), and when the reply came.
struct Sent {
    reply: Value,
    refused: Option<String>,
    answered: Instant,
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

    /// Connects to another server (`redis://host:port`) with the same options, to follow a
    /// failover to a new master. (A master that was replaced refuses the synced writes it held
    /// itself, [`crate::sync`].)
    ///
    /// # Errors
    /// As [`Client::open`].
    pub async fn reopen(&self, url: &str) -> Result<Self> {
        Self::open_with(url, self.options).await
    }

    fn with(inner: Inner, options: ClientOptions) -> Self {
        Self {
            inner: Arc::new(inner),
            options,
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

    /// Runs `command` only when `token` is at least the largest fencing token that ran a
    /// command through the fence `fence` — a key of the module's own type, made by the first
    /// such command — and raises the fence to `token` (`LOCK.FENCED fence token SYNC command
    /// ...`): check, command and fence in one step. Returns the command's reply. For a token
    /// from a lock elsewhere (another server, a [`crate::Redlock`]); a holding's own is
    /// [`crate::Guard::fenced`]. Synced to the master's in-sync replicas ([`Sync::to_replicas`]):
    /// the reply comes once they have the write, on a sync connection. In Redis Cluster the
    /// command's keys must be in the fence's slot (hash tags).
    ///
    /// ```no_run
    /// # async fn example(client: leasehold_client::Client, token: u64) -> leasehold_client::Result<()> {
    /// let left: i64 = client
    ///     .fenced("fence:stock:42", token, redis::cmd("DECRBY").arg("stock:42").arg(1))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Stale`] when a larger token wrote first (the command did not run);
    /// [`Error::NotReplicated`] when it ran on the master but the replicas did not acknowledge
    /// it in time (a failover may lose its write), or no sync connection was free within the
    /// sync timeout (nothing was sent); the command's own error; no connection, no reply in
    /// time, or a reply that is not a `T`.
    pub async fn fenced<T: FromRedisValue>(
        &self,
        fence: &str,
        token: u64,
        command: &Cmd,
    ) -> Result<T> {
        self.fenced_with(fence, token, command, &Sync::default())
            .await
    }

    /// [`Client::fenced`], synced as `sync` says ([`Sync::off`]: `NOSYNC`, on the shared
    /// connection).
    ///
    /// # Errors
    /// As [`Client::fenced`].
    pub async fn fenced_with<T: FromRedisValue>(
        &self,
        fence: &str,
        token: u64,
        command: &Cmd,
        sync: &Sync,
    ) -> Result<T> {
        let mut fenced = redis::cmd("LOCK.FENCED");
        fenced.arg(fence).arg(token).arg(sync.option());
        self.guarded(fence, &followed_by(fenced, command), sync)
            .await
    }

    /// Sends `command`, a `LOCK.GUARD` or `LOCK.FENCED` that says `SYNC` or `NOSYNC` as `sync`
    /// does, to `key`'s master: with syncing off on the shared connection; otherwise on a sync
    /// connection — the server may hold the reply until its in-sync set has the write — queued
    /// for within the sync timeout, with the `WAIT` of a fixed count behind it. The connection's
    /// session binding stays as it is: these commands tie nothing. No reply within the sync
    /// timeout plus 5 s, the connection is closed.
    ///
    /// # Errors
    /// [`guarded_error`]'s, [`Error::NotReplicated`] for a fixed count's `WAIT` short of it or
    /// no sync connection free; no connection, no reply in time, a reply that is not a `T`.
    pub(crate) async fn guarded<T: FromRedisValue>(
        &self,
        key: &str,
        command: &Cmd,
        sync: &Sync,
    ) -> Result<T> {
        if sync.is_off() {
            let reply = match self.query::<Value>(command).await {
                Err(Error::Redis(error)) => return Err(guarded_error(error)),
                other => other?,
            };
            return Ok(from_value(reply)?);
        }
        let pools = self.pools(key).await?;
        let Some(mut connection) = pools.borrow(Purpose::Sync, Some(sync.timeout)).await? else {
            let timeout = sync.timeout_ms();
            let reason =
                format!("no sync connection was free within {timeout} ms; nothing was sent");
            return Err(Error::not_replicated(reason));
        };
        let timeout = RESPONSE_TIMEOUT + sync.timeout;
        let sent = self
            .exchange_as_is(&mut connection, command, sync, timeout)
            .await?;
        let reply = sent.reply.extract_error().map_err(guarded_error)?;
        if let Some(reason) = sent.refused {
            return Err(Error::not_replicated(reason));
        }
        Ok(from_value(reply)?)
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

    /// Sends `write`, which counts only once synced as `sync` says, tied to its session: with
    /// syncing off on the shared connection (`NOSYNC`, naming its session: `SESSION id`);
    /// to the in-sync set in a batch ([`crate::batch`]) on a sync connection of its master,
    /// bound to its session ([`crate::binding`]): `NOSYNC`, then `LOCK.SYNC` behind the batch;
    /// with a fixed count, alone on a sync connection, `NOSYNC` and the `WAIT` behind it
    /// ([`crate::sync`]). The reply may take the sync timeout plus 5 s; no reply by then, the
    /// connection is closed. A write the client cannot count is given back as `undo` says: a
    /// grant refused by `LOCK.SYNC` is released before its error comes; a new holding whose reply
    /// was lost, or whose caller dropped this future, is released in the background.
    ///
    /// # Errors
    /// [`Error::NotReplicated`]: the in-sync set did not have it in time (`NOREPLICAS`: a grant
    /// was released), or no sync connection was free within the sync timeout (nothing was sent);
    /// [`Error::ModuleTooOld`]; the server's error (`ERR no such session` when its session has
    /// ended: nothing was done); no connection, or no reply in time.
    pub(crate) async fn synced<T: FromRedisValue>(
        &self,
        write: Write<'_>,
        sync: &Sync,
        undo: Undo,
    ) -> Result<Synced<T>> {
        if sync.batches() {
            return Synced::of(self.batched(write, sync, undo).await?);
        }
        let command = sync.marked(write.command);
        let write = Write {
            command: &command,
            ..write
        };
        if sync.is_off() {
            let named = named(write.command, write.session);
            let reply = match self.query::<Value>(&named).await {
                Err(Error::Redis(error)) => return Err(write_error(error)),
                other => other?,
            };
            return Synced::of(Sent {
                reply,
                refused: None,
                answered: Instant::now(),
            });
        }
        let pools = self.pools(write.key).await?;
        let budget = Some(sync.timeout);
        let Some(mut connection) = pools.borrow(Purpose::Sync, budget).await? else {
            return Err(no_sync_connection(sync));
        };
        let mut in_flight = Unfinished {
            client: self,
            undo: undo.when_lost(),
        };
        let timeout = Some(RESPONSE_TIMEOUT + sync.timeout);
        let sent = self.exchange(&mut connection, sync, write, timeout).await;
        in_flight.undo = None;
        Synced::of(sent?)
    }

    /// Queues `write` for a batch of its master's ([`crate::batch`]) and waits for its outcome;
    /// a write no batch took within the sync timeout is taken back (nothing was sent). A caller
    /// that finds no batch being sent ([`Client::lead`]) sends its own. A caller that drops
    /// this future takes its write back if no batch took it; one that did still goes, and a new
    /// holding it made is released.
    async fn batched(&self, write: Write<'_>, sync: &Sync, undo: Undo) -> Result<Sent> {
        let pools = self.pools(write.key).await?;
        let queue = pools.queue();
        let deadline = Instant::now() + sync.timeout;
        let timeout = RESPONSE_TIMEOUT + sync.timeout;
        let session = write.session.map(str::to_owned);
        let if_lost = undo.when_lost();
        let command = write.command.clone();
        let (id, mut outcome, start) = queue.push(write.key, command, session, undo, timeout);
        let mut queued = Withdrawn {
            queue,
            id: Some(id),
        };
        if start {
            self.lead(&pools, (id, if_lost), deadline).await;
        }
        let outcome = match tokio::time::timeout_at(deadline, &mut outcome).await {
            Ok(outcome) => outcome,
            Err(_) if queue.withdraw(id) => {
                queued.id = None;
                return Err(no_sync_connection(sync));
            }
            Err(_) => outcome.await,
        };
        // Answered: a batch took it, so there is nothing to take back.
        queued.id = None;
        answered(outcome)
    }

    /// The caller whose write `id` started a sender ([`batch::Queue::push`]): it borrows a sync
    /// connection by `deadline` and, when its write goes alone, sends it itself (no task between
    /// it and its reply); when others joined, or once its own is answered, a sender in the
    /// background carries on — so that no caller leaving stops a batch others wait on. A caller
    /// dropped with its write in flight closes the connection, and a new holding it may have
    /// been granted (`if_lost`) is released in the background.
    async fn lead(&self, pools: &Pools, (id, if_lost): (u64, Option<Cmd>), deadline: Instant) {
        let mut role = Sender {
            client: self,
            pools,
            connection: None,
            armed: true,
        };
        let budget = deadline.saturating_duration_since(Instant::now());
        let Ok(Some(connection)) = pools.borrow(Purpose::Sync, Some(budget)).await else {
            // The role goes to a sender in the background, which waits as long as it takes.
            return;
        };
        let writes = pools.queue().take();
        if writes.is_empty() {
            // The other sender took them all: this role ended there.
            role.armed = false;
            return;
        }
        if !matches!(&writes[..], [own] if own.id() == id) {
            return role.hand_over(connection, writes);
        }
        let connection = role.connection.insert(connection);
        let mut in_flight = Unfinished {
            client: self,
            undo: if_lost,
        };
        self.sync_batch(connection, writes).await;
        in_flight.undo = None;
        let more = pools.queue().take();
        match role.connection.take() {
            Some(connection) if !more.is_empty() => role.hand_over(connection, more),
            // None waits: the role ended there (the connection goes back to its pool).
            _ => role.armed = false,
        }
    }

    /// A sender of `pools`' batches in the background ([`batch::Queue`]): on `kept` (or a
    /// connection it borrows, as long as that takes), `writes` first, then the writes waiting
    /// each time a batch is answered, until none waits.
    fn send_batches(&self, pools: Pools, mut kept: Option<Borrowed>, mut writes: Vec<Queued>) {
        let client = self.clone();
        tokio::spawn(async move {
            let queue = pools.queue();
            loop {
                // A connection whose reply was lost was closed: the next batch gets another.
                let connection = match kept.take().filter(|connection| !connection.is_lost()) {
                    Some(connection) => Ok(Some(connection)),
                    None => pools.borrow(Purpose::Sync, None).await,
                };
                let mut connection = match connection {
                    Ok(Some(connection)) => connection,
                    Ok(None) => return, // no budget was set: never
                    Err(error) => return fail(queue, writes, &error),
                };
                if writes.is_empty() {
                    writes = queue.take();
                    if writes.is_empty() {
                        return;
                    }
                }
                client
                    .sync_batch(&mut connection, std::mem::take(&mut writes))
                    .await;
                kept = Some(connection);
            }
        });
    }

    /// One round trip of a batch: the writes, bound to their sessions ([`Head`]), then
    /// `LOCK.SYNC`; hands each caller its outcome.
    async fn sync_batch(&self, connection: &mut Borrowed, mut writes: Vec<Queued>) {
        // A write alone carries `SYNC` itself: one command, which the server undoes when it
        // does not count, as before batches.
        let alone = writes.len() == 1;
        let option = if alone {
            Sync::to_replicas()
        } else {
            Sync::off()
        };
        for write in &mut writes {
            write.command.arg(option.option());
        }
        let list: Vec<Write<'_>> = writes.iter().map(Queued::write).collect();
        let head = Head::new(&connection.bound(), &list);
        if head.binds() {
            connection.set_bound(Bound::Unknown);
        }
        let mut tail = redis::pipe();
        if !alone {
            tail.ignore_errors().cmd("LOCK.SYNC");
        }
        let timeout = writes.iter().map(|write| write.timeout).max();
        let exchange = connection.exchange(head.pipeline(), &tail, timeout);
        let exchanged = tokio::select! {
            exchanged = exchange => exchanged,
            // Every caller left: the connection is closed, as a lone write's was.
            () = batch::all_left(&mut writes) => Err(batch::left()),
        };
        let (replies, answered, tail) = match exchanged {
            Ok(exchanged) => exchanged,
            Err(error) => {
                self.heard(&error);
                for write in writes {
                    let release = write.undo.when_lost();
                    write.answer(Err(Error::Redis(error.clone())));
                    self.release_in_background(release);
                }
                return;
            }
        };
        let (replies, bound) = head.read(replies);
        connection.set_bound(bound);
        let refusal = match tail.into_iter().next() {
            None if alone => None,
            Some(Value::Okay) => None,
            Some(Value::ServerError(error)) => Some(RedisError::from(error)),
            other => Some(RedisError::from(std::io::Error::other(format!(
                "LOCK.SYNC answered {other:?}"
            )))),
        };
        let mut replies = replies.into_iter();
        let mut refused = Vec::new();
        for write in writes {
            let reply = replies.next().ok_or_else(no_reply);
            if let Ok(Value::ServerError(error)) = &reply {
                self.heard(&RedisError::from(error.clone()));
            }
            match (reply, &refusal) {
                (Ok(reply), Some(refusal)) if batch::made(&reply) => {
                    refused.push((write, refusal.clone()));
                }
                (reply, _) => {
                    let outcome = reply.map(|reply| (reply, answered));
                    self.answer(write, outcome.map_err(Error::Redis));
                }
            }
        }
        self.give_back(connection, refused).await;
    }

    /// Gives back the writes of a batch whose `LOCK.SYNC` was refused, as the server gives back
    /// a refused `SYNC` write — each grant released by its owner on `connection` (in the
    /// background if that fails), a renewal not counted — then tells their callers.
    async fn give_back(&self, connection: &mut Borrowed, refused: Vec<(Queued, RedisError)>) {
        if refused.is_empty() {
            return;
        }
        let mut releases = redis::pipe();
        releases.ignore_errors();
        for (write, _) in &refused {
            if let Some(release) = &write.undo.release {
                releases.add_command(release.clone());
            }
        }
        let timeout = Some(RESPONSE_TIMEOUT);
        let released = connection
            .exchange(&releases, &redis::pipe(), timeout)
            .await;
        let mut released = released
            .map(|(replies, ..)| replies)
            .unwrap_or_default()
            .into_iter();
        for (write, refusal) in refused {
            let given = match &write.undo.release {
                None => Given::Kept(write.undo.kept),
                Some(release) => match released.next() {
                    Some(reply) if !matches!(reply, Value::ServerError(_)) => Given::Released,
                    _ => {
                        self.release_in_background(Some(release.clone()));
                        Given::Releasing
                    }
                },
            };
            self.answer(write, Err(batch::refused(&refusal, given)));
        }
    }

    /// Hands `write`'s caller its outcome; a new holding a caller that left was granted is
    /// released in the background.
    fn answer(&self, write: Queued, outcome: Result<(Value, Instant)>) {
        self.release_in_background(write.answer(outcome));
    }

    /// Sends `release`, a release as a write's owner, in the background until the server
    /// answers it (20 tries, backing off).
    fn release_in_background(&self, release: Option<Cmd>) {
        let Some(release) = release else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.clone();
        runtime.spawn(async move {
            for attempt in 0..20 {
                if client.query::<Value>(&release).await.is_ok() {
                    return;
                }
                tokio::time::sleep(Backoff::default().delay(attempt)).await;
            }
        });
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
    /// synced as `sync` says (`SYNC`: the server holds a grant's reply until its in-sync set has
    /// it; or `NOSYNC` and the `WAIT` behind it); gives up `margin` after the wait (and the
    /// sync) should have ended.
    ///
    /// # Errors
    /// As [`Client::synced`] (but for a free connection: the caller has one), or a lost reply
    /// (the connection is then closed: the server releases a grant it was holding for it).
    pub(crate) async fn wait_synced<T: FromRedisValue>(
        &self,
        connection: &mut Borrowed,
        write: Write<'_>,
        (wait, margin): (Option<Duration>, Duration),
        sync: &Sync,
    ) -> Result<Synced<T>> {
        let command = sync.marked(write.command);
        let write = Write {
            command: &command,
            ..write
        };
        let syncing = if sync.is_off() {
            Duration::ZERO
        } else {
            sync.timeout
        };
        let timeout = wait.map(|wait| wait + margin + syncing);
        Synced::of(self.exchange(connection, sync, write, timeout).await?)
    }

    /// One round trip of `write` on `connection`, bound first to the session it is to be tied
    /// to ([`Head`]), with what syncs it as `sync` says behind it: its outcome.
    async fn exchange(
        &self,
        connection: &mut Borrowed,
        sync: &Sync,
        write: Write<'_>,
        timeout: Option<Duration>,
    ) -> Result<Sent, RedisError> {
        let head = Head::new(&connection.bound(), &[write]);
        if head.binds() {
            connection.set_bound(Bound::Unknown);
        }
        let tail = sync.tail();
        let replies = connection.exchange(head.pipeline(), &tail, timeout).await;
        let (replies, answered, tail) = replies.inspect_err(|error| self.heard(error))?;
        let (replies, bound) = head.read(replies);
        connection.set_bound(bound);
        let reply = replies.into_iter().next().ok_or_else(no_reply)?;
        if let Value::ServerError(error) = &reply {
            self.heard(&RedisError::from(error.clone()));
        }
        Ok(Sent {
            reply,
            refused: sync.judge(tail).err(),
            answered,
        })
    }

    /// Sends `command`, a read that blocks in the server (`LOCK.OBSERVE ... BLOCK`), as it is
    /// on a wait connection of `key`'s master — queueing for one as long as it takes while all
    /// are lent — and waits for its reply up to `timeout`; no reply by then, the connection is
    /// closed.
    ///
    /// # Errors
    /// The server's error, no connection, no reply in time, or a reply of another shape.
    pub(crate) async fn blocking_read<T: FromRedisValue>(
        &self,
        key: &str,
        command: &Cmd,
        timeout: Duration,
    ) -> Result<T> {
        let pools = self.pools(key).await?;
        let Some(mut connection) = pools.borrow(Purpose::Wait, None).await? else {
            return Err(Error::Redis(no_reply()));
        };
        let off = Sync::off();
        let sent = self.exchange_as_is(&mut connection, command, &off, timeout);
        let reply = sent.await?.reply;
        let reply = reply.extract_error()?;
        Ok(from_value(reply)?)
    }

    /// One round trip of `command` as it is on `connection`, with what syncs it as `sync` says
    /// behind it: its outcome.
    async fn exchange_as_is(
        &self,
        connection: &mut Borrowed,
        command: &Cmd,
        sync: &Sync,
        timeout: Duration,
    ) -> Result<Sent, RedisError> {
        let mut head = redis::pipe();
        head.ignore_errors();
        head.add_command(command.clone());
        let replies = connection
            .exchange(&head, &sync.tail(), Some(timeout))
            .await;
        let (replies, answered, tail) = replies.inspect_err(|error| self.heard(error))?;
        let reply = replies.into_iter().next().ok_or_else(no_reply)?;
        if let Value::ServerError(error) = &reply {
            self.heard(&RedisError::from(error.clone()));
        }
        Ok(Sent {
            reply,
            refused: sync.judge(tail).err(),
            answered,
        })
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
}

/// A synced write in flight ([`Client::synced`]): if its caller drops the future first, the
/// write's connection is closed (the server releases a grant it was holding for it), and `undo`
/// — a release as the write's owner — is sent in the background, in case the reply had come
/// (the grant counted) without being read. `None` once the outcome was read.
struct Unfinished<'a> {
    client: &'a Client,
    undo: Option<Cmd>,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        self.client.release_in_background(self.undo.take());
    }
}

/// A write queued for a batch ([`Client::batched`]): taken back from the queue when its caller
/// leaves before a batch took it.
struct Withdrawn<'a> {
    queue: &'a batch::Queue,
    /// The write's id while it may still be queued.
    id: Option<u64>,
}

impl Drop for Withdrawn<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.queue.withdraw(id);
        }
    }
}

/// What a batched write's caller got: its reply and when it came, as [`Sent`].
///
/// # Errors
/// The batch's failure, or the batch was dropped unanswered.
fn answered(
    outcome: std::result::Result<batch::Outcome, tokio::sync::oneshot::error::RecvError>,
) -> Result<Sent> {
    let (reply, answered) = outcome.map_err(|_| Error::Redis(no_reply()))??;
    Ok(Sent {
        reply,
        refused: None,
        answered,
    })
}

/// Answers `writes`, then every write of `queue`, with `error`, which kept their sender from a
/// connection, and stops the sender.
fn fail(queue: &batch::Queue, mut writes: Vec<Queued>, error: &RedisError) {
    while !writes.is_empty() {
        for write in writes {
            write.answer(Err(Error::Redis(error.clone())));
        }
        writes = queue.take();
    }
}

/// The role of the caller that started a sender ([`Client::lead`]): handed to a sender in the
/// background ([`Sender::hand_over`]) unless it ended (`armed` false: the queue was found empty,
/// [`batch::Queue::take`]); dropped armed, as when its caller leaves, it goes to a new sender,
/// with the connection if it is still open.
struct Sender<'a> {
    client: &'a Client,
    pools: &'a Pools,
    /// The connection its caller's own write went on.
    connection: Option<Borrowed>,
    armed: bool,
}

impl Sender<'_> {
    /// Hands the role, `connection` and the first batch, `writes`, to a sender in the
    /// background.
    fn hand_over(mut self, connection: Borrowed, writes: Vec<Queued>) {
        self.armed = false;
        let pools = self.pools.clone();
        self.client.send_batches(pools, Some(connection), writes);
    }
}

impl Drop for Sender<'_> {
    fn drop(&mut self) {
        if self.armed {
            let connection = self.connection.take();
            let pools = self.pools.clone();
            self.client.send_batches(pools, connection, Vec::new());
        }
    }
}

/// The error of a synced write that found no sync connection free within its sync timeout.
fn no_sync_connection(sync: &Sync) -> Error {
    let timeout = sync.timeout_ms();
    Error::not_replicated(format!("no sync connection was free within {timeout} ms"))
}

/// `head` (`LOCK.GUARD key owner ...`, `LOCK.FENCED fence token ...`) followed by the words of
/// `command`, the command it runs.
pub(crate) fn followed_by(mut head: Cmd, command: &Cmd) -> Cmd {
    for arg in command.args_iter() {
        if let redis::Arg::Simple(bytes) = arg {
            head.arg(bytes);
        }
    }
    head
}

/// The error of a round trip that brought no reply for its write.
fn no_reply() -> RedisError {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "no reply to the write").into()
}

fn from_value<T: FromRedisValue>(value: Value) -> Result<T, RedisError> {
    Ok(T::from_redis_value(value)?)
}
