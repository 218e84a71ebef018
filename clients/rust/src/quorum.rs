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
use crate::sync::write_error;

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
        let replies = self.each_with_errors(nodes, ttl, command).await;
        replies.into_iter().map(|reply| reply?.ok()).collect()
    }

    /// [`Quorum::each`], keeping each node's error: `None` when a node did not answer within
    /// the node timeout.
    async fn each_with_errors<T: redis::FromRedisValue>(
        &self,
        nodes: &[usize],
        ttl: Duration,
        command: &redis::Cmd,
    ) -> Vec<Option<Result<T>>> {
        let timeout = self.timeout(ttl);
        join_all(nodes.iter().map(|node| async move {
            let client = self.nodes.get(*node)?;
            tokio::time::timeout(timeout, client.query::<T>(command))
                .await
                .ok()
        }))
        .await
    }

    fn all(&self) -> Vec<usize> {
        (0..self.nodes.len()).collect()
    }

    /// `LOCK.ACQUIRE ... NOSYNC` on every node: each node's token, or `None`. (`NOSYNC`: a
    /// node's replicas are no part of Redlock, and a reply held for them would stall the
    /// node's shared connection.)
    ///
    /// # Errors
    /// A lease too short for the drift allowance, or [`Error::ModuleTooOld`] when a node's
    /// module does not know `NOSYNC` (what the others granted is released first).
    pub(crate) async fn acquire(&self, ttl: Duration) -> Result<Vec<Option<u64>>> {
        if drift(ttl) >= ttl {
            return Err(Error::Lease(ttl));
        }
        let mut command = redis::cmd("LOCK.ACQUIRE");
        command
            .arg(&self.name)
            .arg(&self.owner)
            .arg(millis(ttl)?)
            .arg("NOSYNC");
        let replies: Vec<Option<Result<Option<u64>>>> =
            self.each_with_errors(&self.all(), ttl, &command).await;
        let mut tokens = Vec::with_capacity(replies.len());
        let mut too_old = None;
        for reply in replies {
            match reply {
                Some(Err(Error::Redis(error))) => {
                    if let error @ Error::ModuleTooOld { .. } = write_error(error) {
                        too_old = Some(error);
                    }
                    tokens.push(None);
                }
                Some(reply) => tokens.push(reply.ok().flatten()),
                None => tokens.push(None),
            }
        }
        if let Some(error) = too_old {
            self.release().await;
            return Err(error);
        }
        Ok(tokens)
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

    /// `LOCK.RENEW ... NOSYNC` on every node: true if a majority renewed within the validity
    /// time.
    pub(crate) async fn renew(&self, ttl: Duration) -> bool {
        let started = Instant::now();
        let Ok(ms) = millis(ttl) else {
            return false;
        };
        let mut command = redis::cmd("LOCK.RENEW");
        command
            .arg(&self.name)
            .arg(&self.owner)
            .arg(ms)
            .arg("NOSYNC");
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
