//! One owner's holding of one name on a set of independent masters (Redlock): the commands
//! sent to every node at once, and the majority and validity rules. [`crate::redlock`] makes
//! quorum holdings, [`crate::guard`] keeps them.

use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::held::millis;
use crate::lease::drift;

/// One owner's holding of one name on a set of nodes.
#[derive(Clone)]
pub(crate) struct Quorum {
    pub(crate) nodes: Vec<Client>,
    pub(crate) name: String,
    pub(crate) owner: String,
    pub(crate) node_timeout: Option<Duration>,
}

impl Quorum {
    /// The owner of this holding.
    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    pub(crate) fn majority(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// True while a lease of `ttl` begun at `started` is still valid for the client, clock drift
    /// allowed for.
    pub(crate) fn still_valid(&self, started: Instant, ttl: Duration) -> bool {
        started.elapsed() + drift(ttl) < ttl
    }

    fn timeout(&self, ttl: Duration) -> Duration {
        self.node_timeout.unwrap_or_else(|| {
            (ttl / 10).clamp(Duration::from_millis(5), Duration::from_millis(500))
        })
    }

    /// Sends `command` built for each node in `nodes` at once; each reply, or `None` when the
    /// node failed or did not answer within the node timeout.
    async fn each<T: redis::FromRedisValue>(
        &self,
        nodes: &[usize],
        ttl: Duration,
        command: &redis::Cmd,
    ) -> Vec<Option<T>> {
        let timeout = self.timeout(ttl);
        join_all(nodes.iter().map(|node| async move {
            let client = self.nodes.get(*node)?;
            tokio::time::timeout(timeout, client.query::<T>(command))
                .await
                .ok()?
                .ok()
        }))
        .await
    }

    fn all(&self) -> Vec<usize> {
        (0..self.nodes.len()).collect()
    }

    /// `LOCK.ACQUIRE` on every node: each node's token, or `None`.
    pub(crate) async fn acquire(&self, ttl: Duration) -> Result<Vec<Option<u64>>> {
        if drift(ttl) >= ttl {
            return Err(Error::Lease(ttl));
        }
        let mut command = redis::cmd("LOCK.ACQUIRE");
        command.arg(&self.name).arg(&self.owner).arg(millis(ttl)?);
        let replies: Vec<Option<Option<u64>>> = self.each(&self.all(), ttl, &command).await;
        Ok(replies.into_iter().map(Option::flatten).collect())
    }

    /// `LOCK.RAISE ... token` on `nodes`: how many confirmed a token of at least `token`.
    pub(crate) async fn raise(&self, nodes: &[usize], token: u64) -> usize {
        let mut command = redis::cmd("LOCK.RAISE");
        command.arg(&self.name).arg(&self.owner).arg(token);
        let replies: Vec<Option<Option<u64>>> =
            self.each(nodes, Duration::from_secs(1), &command).await;
        replies
            .into_iter()
            .filter(|reply| reply.flatten().is_some_and(|raised| raised >= token))
            .count()
    }

    /// `LOCK.RENEW` on every node: true if a majority renewed within the validity time.
    pub(crate) async fn renew(&self, ttl: Duration) -> bool {
        let started = Instant::now();
        let Ok(ms) = millis(ttl) else {
            return false;
        };
        let mut command = redis::cmd("LOCK.RENEW");
        command.arg(&self.name).arg(&self.owner).arg(ms);
        let replies: Vec<Option<i64>> = self.each(&self.all(), ttl, &command).await;
        let renewed = replies
            .into_iter()
            .filter(|reply| *reply == Some(1))
            .count();
        renewed >= self.majority() && self.still_valid(started, ttl)
    }

    /// `LOCK.RELEASE` on every node: true if a majority still held it.
    pub(crate) async fn release(&self) -> bool {
        let mut command = redis::cmd("LOCK.RELEASE");
        command.arg(&self.name).arg(&self.owner);
        let replies: Vec<Option<i64>> = self
            .each(&self.all(), Duration::from_secs(1), &command)
            .await;
        replies
            .into_iter()
            .filter(|reply| *reply == Some(1))
            .count()
            >= self.majority()
    }
}
