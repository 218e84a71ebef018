//! The connection to a leasehold server or cluster: one shared, reconnecting connection for the
//! quick commands, and a connection of its own for every wait.
//!
//! A blocked `LOCK.ACQUIRE ... WAIT` stalls the connection it was sent on, so a wait never goes
//! over the shared connection: it gets a connection whose response timeout is longer than the
//! wait, and which never retries (a retried wait would queue the client twice, or report a
//! failure for a lock the first attempt got).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{AsyncConnectionConfig, Cmd, FromRedisValue, RedisError};

use crate::error::Result;
use crate::sync::{Learned, Place, Replicas, Sync};

/// How long a quick command (everything but a wait) may take before it fails.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A response timeout that never fires (a year), for waits without limit.
const NO_LIMIT: Duration = Duration::from_secs(365 * 86_400);

/// A connection to one Redis (or Valkey) server, or to one Redis Cluster, with the leasehold
/// module loaded. Cloning is cheap: clones share the connection.
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
    /// How many replicas each master has, for syncing grants.
    learned: Arc<Mutex<Learned>>,
}

enum Inner {
    Server {
        client: redis::Client,
        shared: ConnectionManager,
    },
    Cluster {
        nodes: Vec<String>,
        shared: ClusterConnection,
    },
}

impl Client {
    /// Connects to one server (`redis://host:port[/db]`, `rediss://`, `unix://`). The
    /// connection reconnects by itself after a failure.
    ///
    /// # Errors
    /// A bad URL, or no connection within 5 s.
    pub async fn open(url: &str) -> Result<Self> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(RESPONSE_TIMEOUT));
        let shared = ConnectionManager::new_with_config(client.clone(), config).await?;
        Ok(Self::with(Inner::Server { client, shared }))
    }

    /// Connects to a Redis Cluster through some of its nodes (`redis://host:port`); commands
    /// go to the master of the lock's slot and follow `MOVED` and `ASK`.
    ///
    /// # Errors
    /// Bad URLs, or no node answered.
    pub async fn cluster(nodes: &[&str]) -> Result<Self> {
        let nodes: Vec<String> = nodes.iter().map(|node| (*node).to_owned()).collect();
        let shared = ClusterClientBuilder::new(nodes.clone())
            .response_timeout(RESPONSE_TIMEOUT)
            .connection_timeout(RESPONSE_TIMEOUT)
            .build()?
            .get_async_connection()
            .await?;
        Ok(Self::with(Inner::Cluster { nodes, shared }))
    }

    /// Connects to another server (`redis://host:port`) as the same client, to follow a
    /// failover to a new master: what was learned of the replicas carries over, so the new
    /// master's grants wait for one replica fewer than the old one's, not for none while its
    /// replicas reattach (see [`crate::sync`]).
    ///
    /// # Errors
    /// As [`Client::open`].
    pub async fn reopen(&self, url: &str) -> Result<Self> {
        let reopened = Self::open(url).await?;
        Ok(Self {
            learned: Arc::clone(&self.learned),
            ..reopened
        })
    }

    fn with(inner: Inner) -> Self {
        Self {
            inner: Arc::new(inner),
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

    /// Sends a command that blocks in the server for up to `wait` (`None`: no limit) on a
    /// connection of its own, which gives up `margin` after the wait should have ended and
    /// never retries; returns the reply and the connection, for a `WAIT` that must follow on it.
    pub(crate) async fn query_waiting<T: FromRedisValue>(
        &self,
        command: &Cmd,
        wait: Option<Duration>,
        margin: Duration,
    ) -> Result<(T, Own), RedisError> {
        let mut own = self.own(wait.map(|wait| wait + margin)).await?;
        Ok((own.query(command).await?, own))
    }

    /// A connection of its own whose replies may take up to `timeout` (`None`: no limit), that
    /// never retries.
    async fn own(&self, timeout: Option<Duration>) -> Result<Own, RedisError> {
        Ok(match &*self.inner {
            Inner::Server { client, .. } => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(RESPONSE_TIMEOUT))
                    .set_response_timeout(timeout);
                Own::Server(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                )
            }
            Inner::Cluster { nodes, .. } => Own::Cluster(
                ClusterClientBuilder::new(nodes.clone())
                    .connection_timeout(RESPONSE_TIMEOUT)
                    .response_timeout(timeout.unwrap_or(NO_LIMIT))
                    .retries(0)
                    .build()?
                    .get_async_connection()
                    .await?,
            ),
        })
    }

    /// Sends a quick command whose grant must then be synced, on a connection of its own (the
    /// `WAIT` after it blocks that connection); returns the reply and the connection.
    pub(crate) async fn query_own<T: FromRedisValue>(
        &self,
        command: &Cmd,
        sync: &Sync,
    ) -> Result<(T, Own), RedisError> {
        let mut own = self.own(Some(RESPONSE_TIMEOUT + sync.timeout)).await?;
        Ok((own.query(command).await?, own))
    }

    /// How many replicas a grant of `key` must reach: as `sync` says, or as many as the lock's
    /// master has (asked now and then, never lowered for the same master; see [`crate::sync`]).
    pub(crate) async fn replicas_wanted(&self, key: &str, sync: &Sync) -> Result<u32> {
        let Replicas::Exactly(wanted) = sync.replicas else {
            let place = self.place(key);
            if let Some(known) = self.learned().fresh(place) {
                return Ok(known);
            }
            let info: String = self
                .query_at(place, redis::cmd("INFO").arg("replication"))
                .await?;
            return Ok(self.learned().heard(place, &info));
        };
        Ok(wanted)
    }

    /// Makes the next grant of `key` ask its master again how many replicas it has (never
    /// fewer than before for the same master).
    pub(crate) fn ask_replicas_again(&self, key: &str) {
        self.learned().ask_again(self.place(key));
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

    /// A keyless command to the master at `place` on the shared connection.
    async fn query_at<T: FromRedisValue>(&self, place: Place, command: &Cmd) -> Result<T> {
        Ok(match (&*self.inner, place) {
            (Inner::Cluster { shared, .. }, Some(slot)) => {
                let value = shared
                    .clone()
                    .route_command(command.clone(), master_of(slot))
                    .await?;
                T::from_redis_value(value).map_err(RedisError::from)?
            }
            _ => self.query(command).await?,
        })
    }
}

/// Routing to the master serving `slot`.
fn master_of(slot: Slot) -> RoutingInfo {
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_slot(
        slot,
        SlotAddr::Master,
    )))
}

/// A connection of the client's own: for a wait, or for a grant to sync.
pub(crate) enum Own {
    Server(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Own {
    pub(crate) async fn query<T: FromRedisValue>(
        &mut self,
        command: &Cmd,
    ) -> Result<T, RedisError> {
        match self {
            Self::Server(con) => command.query_async(con).await,
            Self::Cluster(con) => command.query_async(con).await,
        }
    }

    /// `WAIT replicas timeout` (or `WAITAOF 1 replicas timeout`) for what this connection wrote
    /// last — a grant of `key` — at the master of `key`: how many replicas have it.
    pub(crate) async fn wait_for_replicas(
        &mut self,
        key: &str,
        replicas: u32,
        sync: &Sync,
    ) -> Result<u32, RedisError> {
        let mut command = redis::cmd(if sync.aof { "WAITAOF" } else { "WAIT" });
        if sync.aof {
            command.arg(1);
        }
        command.arg(replicas).arg(sync.timeout_ms());
        let reply: redis::Value = match self {
            Self::Server(con) => command.query_async(con).await?,
            Self::Cluster(con) => {
                con.route_command(command, master_of(Slot::for_key(key)))
                    .await?
            }
        };
        if sync.aof {
            // [fsynced locally (0 or 1), replicas that fsynced]
            let (local, acked): (u32, u32) = FromRedisValue::from_redis_value(reply)?;
            return Ok(if local >= 1 { acked } else { 0 });
        }
        Ok(FromRedisValue::from_redis_value(reply)?)
    }
}
