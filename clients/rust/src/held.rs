//! One owner's holding of one lock on one server (or one cluster master): the commands sent
//! as that owner. [`crate::lock`] makes holdings, [`crate::guard`] keeps them.

use std::time::Duration;

use redis::{Cmd, RedisError};

use crate::backoff::Backoff;
use crate::client::Client;
use crate::error::{Error, Result};

/// What is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Exclusive,
    Shared(Option<u32>),
}

/// `LOCK.ACQUIRE name owner ttl-ms [SHARED [LIMIT n]]`, for options to follow.
pub(crate) fn acquire_command(name: &str, owner: &str, ttl: Duration, mode: Mode) -> Result<Cmd> {
    let mut command = redis::cmd("LOCK.ACQUIRE");
    command.arg(name).arg(owner).arg(millis(ttl)?);
    if let Mode::Shared(limit) = mode {
        command.arg("SHARED");
        if let Some(limit) = limit {
            command.arg("LIMIT").arg(limit);
        }
    }
    Ok(command)
}

/// A lease in whole ms, at least 1.
pub(crate) fn millis(ttl: Duration) -> Result<u64> {
    u64::try_from(ttl.as_millis())
        .ok()
        .filter(|ms| *ms > 0)
        .ok_or(Error::Lease(ttl))
}

/// `TRYAGAIN`: the server could not issue a fencing token yet; a moment later it can.
pub(crate) fn is_try_again(error: &RedisError) -> bool {
    error.code() == Some("TRYAGAIN")
}

/// One owner's holding of one lock on one server.
#[derive(Clone)]
pub(crate) struct Held {
    pub(crate) client: Client,
    pub(crate) name: String,
    pub(crate) owner: String,
}

impl Held {
    /// The owner of this holding.
    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// `LOCK.ACQUIRE` as this holding's owner in `mode`, one more hold with `reentrant`: the
    /// token, or `None` when the owner no longer holds what it takes (or another holds it).
    pub(crate) async fn acquire(
        &self,
        ttl: Duration,
        mode: Mode,
        reentrant: bool,
    ) -> Result<Option<u64>> {
        let mut command = acquire_command(&self.name, &self.owner, ttl, mode)?;
        if reentrant {
            command.arg("REENTRANT");
        }
        match self.client.query(&command).await {
            Err(Error::Redis(error)) if is_try_again(&error) => Ok(None),
            other => other,
        }
    }

    pub(crate) async fn renew(&self, ttl: Duration) -> Result<bool> {
        let mut command = redis::cmd("LOCK.RENEW");
        command.arg(&self.name).arg(&self.owner).arg(millis(ttl)?);
        Ok(self.client.query::<i64>(&command).await? == 1)
    }

    pub(crate) async fn release(&self) -> Result<bool> {
        let mut command = redis::cmd("LOCK.RELEASE");
        command.arg(&self.name).arg(&self.owner);
        Ok(self.client.query::<i64>(&command).await? == 1)
    }

    /// Releases, retrying with backoff while the server cannot be reached (a few seconds).
    pub(crate) async fn release_eventually(&self) {
        for attempt in 0..20 {
            if self.release().await.is_ok() {
                return;
            }
            tokio::time::sleep(Backoff::default().delay(attempt)).await;
        }
    }
}
