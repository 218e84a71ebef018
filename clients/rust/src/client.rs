//! The connection to a leasehold server or cluster: one shared, reconnecting connection for the
//! quick commands, and a connection of its own for every wait.
//!
//! A blocked `LOCK.ACQUIRE ... WAIT` stalls the connection it was sent on, so a wait never goes
//! over the shared connection: it gets a connection whose response timeout is longer than the
//! wait, and which never retries (a retried wait would queue the client twice, or report a
//! failure for a lock the first attempt got).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, FromRedisValue, RedisError};

use crate::error::Result;

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
        Ok(Self {
            inner: Arc::new(Inner::Server { client, shared }),
        })
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
        Ok(Self {
            inner: Arc::new(Inner::Cluster { nodes, shared }),
        })
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
    /// never retries.
    pub(crate) async fn query_waiting<T: FromRedisValue>(
        &self,
        command: &Cmd,
        wait: Option<Duration>,
        margin: Duration,
    ) -> Result<T, RedisError> {
        let timeout = wait.map(|wait| wait + margin);
        match &*self.inner {
            Inner::Server { client, .. } => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(RESPONSE_TIMEOUT))
                    .set_response_timeout(timeout);
                let mut own = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                command.query_async(&mut own).await
            }
            Inner::Cluster { nodes, .. } => {
                let mut own = ClusterClientBuilder::new(nodes.clone())
                    .connection_timeout(RESPONSE_TIMEOUT)
                    .response_timeout(timeout.unwrap_or(NO_LIMIT))
                    .retries(0)
                    .build()?
                    .get_async_connection()
                    .await?;
                command.query_async(&mut own).await
            }
        }
    }
}
