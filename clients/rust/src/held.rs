//! One owner's holding of one lock — or of a set of locks taken together — on one server (or
//! one cluster master): the commands sent as that owner. [`crate::lock`] makes holdings,
//! [`crate::guard`] keeps them.

use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::{Cmd, FromRedisValue, ParsingError, RedisError, Value};

use crate::backoff::Backoff;
use crate::batch::Undo;
use crate::binding::Write;
use crate::client::{Client, Synced};
use crate::error::{Error, Result};
use crate::pool::is_lost_reply;
use crate::session::{Renewable, Tie, is_no_such_session};
use crate::sync::{Sync, renewed_by_server};

/// What is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Exclusive,
    Shared(Option<u32>),
    /// Every key exclusively, all or none (`LOCK.MACQUIRE`).
    Set,
}

/// `LOCK.ACQUIRE name owner ttl-ms [SHARED [LIMIT n]]`, or for a set `LOCK.MACQUIRE numkeys
/// names... owner ttl-ms`, for options to follow.
pub(crate) fn acquire_command(
    names: &[String],
    owner: &str,
    ttl: Duration,
    mode: Mode,
) -> Result<Cmd> {
    let mut command = set_command("LOCK.ACQUIRE", names, mode);
    command.arg(owner).arg(millis(ttl)?);
    if let Mode::Shared(limit) = mode {
        command.arg("SHARED");
        if let Some(limit) = limit {
            command.arg("LIMIT").arg(limit);
        }
    }
    Ok(command)
}

/// `LOCK.CAMPAIGN name candidate value ttl-ms`, for options to follow: `LOCK.ACQUIRE name
/// candidate ttl-ms` with the value the candidate proclaims once it leads (an election's
/// campaign, [`crate::Election`]).
pub(crate) fn campaign_command(
    name: &str,
    candidate: &str,
    value: &str,
    ttl: Duration,
) -> Result<Cmd> {
    let mut command = redis::cmd("LOCK.CAMPAIGN");
    command
        .arg(name)
        .arg(candidate)
        .arg(value)
        .arg(millis(ttl)?);
    Ok(command)
}

/// `command name`, or for a set its `M` form with `numkeys names...`
/// (`LOCK.RELEASE` → `LOCK.MRELEASE`).
fn set_command(command: &str, names: &[String], mode: Mode) -> Cmd {
    if mode == Mode::Set {
        let mut command = redis::cmd(&command.replacen("LOCK.", "LOCK.M", 1));
        command.arg(names.len()).arg(names);
        command
    } else {
        let mut command = redis::cmd(command);
        command.arg(names.first().map_or("", String::as_str));
        command
    }
}

/// A grant's fencing tokens: `LOCK.ACQUIRE`'s one (an integer) or `LOCK.MACQUIRE`'s, one per
/// key in the order given (an array); none when the lock was busy (null).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tokens(pub(crate) Vec<u64>);

impl Tokens {
    /// True when something was granted.
    pub(crate) fn any(&self) -> bool {
        !self.0.is_empty()
    }

    /// The tokens, or `None` when nothing was granted.
    pub(crate) fn granted(self) -> Option<Vec<u64>> {
        (!self.0.is_empty()).then_some(self.0)
    }
}

impl FromRedisValue for Tokens {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        match value {
            Value::Int(_) => Ok(Self(vec![u64::from_redis_value(value)?])),
            other => Vec::<u64>::from_redis_value(other).map(Self),
        }
    }
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

/// One owner's holding of one lock, or of a set, on one server.
#[derive(Clone)]
pub(crate) struct Held {
    pub(crate) client: Client,
    /// The lock's name, or the set's names.
    pub(crate) names: Vec<String>,
    pub(crate) owner: String,
    /// Whether it holds a set ([`Mode::Set`]): renewed and released whole.
    pub(crate) set: bool,
    /// How its grants and renewals reach the replicas before they count.
    pub(crate) sync: Sync,
    /// For an election's term (a campaign's grant): its epoch, by which it ends
    /// (`LOCK.RESIGN name epoch`, never by its candidate's name: a release by name would end a
    /// later term of the same candidate).
    pub(crate) term: Option<u64>,
    /// Its place in the client's session, when it is tied to one: its renewals and re-entries
    /// are tied to that session (on a connection bound to it, [`crate::binding`]).
    pub(crate) tie: Option<Tie>,
}

impl Held {
    /// The owner of this holding.
    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// `LOCK.ACQUIRE` as this holding's owner in `mode`, one more hold with `reentrant`,
    /// synced: the token, or `None` when the owner no longer holds what it takes (or another
    /// holds it). A new hold the replicas did not acknowledge is given back by the client: when
    /// the server refused its batch (`NOREPLICAS` to `LOCK.SYNC`), or when its own `WAIT`
    /// counted too few.
    ///
    /// # Errors
    /// [`Error::NotReplicated`] when the replicas did not acknowledge it. A mode change the
    /// server refused was given back as a grant is — one hold of this owner's released
    /// ([`crate::sync::released_by_server`]); one the client found short stays made on
    /// the master (it may be lost in a failover).
    pub(crate) async fn acquire(
        &self,
        ttl: Duration,
        mode: Mode,
        reentrant: bool,
    ) -> Result<Option<u64>> {
        let mut command = acquire_command(&self.names, &self.owner, ttl, mode)?;
        if reentrant {
            command.arg("REENTRANT");
        }
        // Tied to no session (on an unbound connection) the server would untie the holding.
        let naming = self.naming();
        // Released when the in-sync set did not have it, as the server releases a refused
        // grant; not when the caller drops this future or the reply is lost: a release sent for
        // a hold the server may not have made would give back one the holder counts on.
        let undo = Undo::grant(self.release_command(), false);
        let write = self.write(&command, naming.as_deref());
        let synced = self.client.synced::<Option<u64>>(write, &self.sync, undo);
        let synced = synced.await;
        self.named(naming.as_deref(), &synced, |synced| synced.reply.is_some())
            .await;
        let synced = match synced {
            Err(Error::Redis(error)) if is_try_again(&error) => return Ok(None),
            other => other?,
        };
        if synced.reply.is_some()
            && let Some(error) = synced.refusal()
        {
            if reentrant {
                let _ = self.release().await;
            }
            return Err(error);
        }
        Ok(synced.reply)
    }

    /// `LOCK.RENEW` (a set: `LOCK.MRENEW`, all or none), synced: true while it holds them all,
    /// false once refused.
    ///
    /// # Errors
    /// [`Error::NotReplicated`] when it was renewed on the master but the replicas did not
    /// acknowledge it in time (the server said so, `NOREPLICAS`, or the client's own `WAIT`
    /// counted too few): the renewal does not count, the lease before it does.
    pub(crate) async fn renew(&self, ttl: Duration) -> Result<bool> {
        let mut command = set_command("LOCK.RENEW", &self.names, self.mode());
        command.arg(&self.owner).arg(millis(ttl)?);
        let naming = self.naming();
        let write = self.write(&command, naming.as_deref());
        let synced = self
            .client
            .synced::<i64>(write, &self.sync, Undo::renewal());
        let synced = synced.await;
        let count = self.count();
        self.named(naming.as_deref(), &synced, |synced| synced.reply == count)
            .await;
        let synced = synced?;
        if synced.reply != self.count() {
            return Ok(false);
        }
        if let Some(error) = synced.refusal() {
            return Err(error);
        }
        Ok(true)
    }

    /// The session a write of this holding is to be tied to, when it is tied to one
    /// ([`Tie::naming`]).
    fn naming(&self) -> Option<String> {
        self.tie.as_ref().and_then(Tie::naming)
    }

    /// `command`, a write of this holding, to be tied to `session` (`None`: to none).
    fn write<'a>(&'a self, command: &'a Cmd, session: Option<&'a str>) -> Write<'a> {
        Write {
            key: self.name(),
            command,
            session,
        }
    }

    /// After a write that named session `id` (`None`: none) came back as `outcome`: made
    /// (`made` says so from its reply) or a renewal the server made but refused to count
    /// (`NOREPLICAS`), the holding is tied to `id`; no reply, it may be; refused because the
    /// server has no such session, a new one is opened.
    async fn named<T>(
        &self,
        id: Option<&str>,
        outcome: &Result<Synced<T>>,
        made: impl FnOnce(&Synced<T>) -> bool,
    ) {
        let (Some(tie), Some(id)) = (&self.tie, id) else {
            return;
        };
        match outcome {
            Ok(synced) if made(synced) => tie.moved(id, true),
            Ok(_) => {}
            Err(Error::Redis(error)) if is_no_such_session(error) => tie.gone(id).await,
            Err(Error::Redis(error)) if is_lost_reply(error) => tie.moved(id, false),
            // The master made the renewal (and tied the holding), but it does not count.
            Err(error) if renewed_by_server(error) => tie.moved(id, true),
            Err(_) => {}
        }
    }

    /// `LOCK.RELEASE` (a set: `LOCK.MRELEASE`; a term: `LOCK.RESIGN`): true if it still held
    /// every lock (a term: if it still led). A release that could not be sent — its connection
    /// had died, a blip or a proxy's restart, while the holding sat idle — is sent once more,
    /// on the fresh connection the client opens: it never reached the server, so its answer is
    /// the first one.
    pub(crate) async fn release(&self) -> Result<bool> {
        let command = self.release_command();
        let released = match self.client.query::<i64>(&command).await {
            Err(Error::Redis(error)) if never_sent(&error) => {
                self.client.query::<i64>(&command).await?
            }
            reply => reply?,
        };
        Ok(released == self.count())
    }

    /// `LOCK.RELEASE name owner` (a set: `LOCK.MRELEASE numkeys names... owner`): one hold of
    /// this owner's. An election's term: `LOCK.RESIGN name epoch`, which ends it whatever its
    /// hold count and hands the election to the next waiting candidate.
    pub(crate) fn release_command(&self) -> Cmd {
        if let Some(epoch) = self.term {
            let mut command = redis::cmd("LOCK.RESIGN");
            command.arg(self.name()).arg(epoch);
            return command;
        }
        let mut command = set_command("LOCK.RELEASE", &self.names, self.mode());
        command.arg(&self.owner);
        command
    }

    /// The key its synced writes are routed by (a set's keys share a slot).
    pub(crate) fn name(&self) -> &str {
        self.names.first().map_or("", String::as_str)
    }

    /// The mode whose commands renew and release it.
    fn mode(&self) -> Mode {
        if self.set { Mode::Set } else { Mode::Exclusive }
    }

    /// How many locks a whole renewal or release counts.
    fn count(&self) -> i64 {
        if self.set {
            i64::try_from(self.names.len()).unwrap_or(i64::MAX)
        } else {
            1
        }
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

impl Renewable for Held {
    fn renew_tied(&self, tie: Tie, ttl: Duration) -> BoxFuture<'static, Result<bool>> {
        let held = Self {
            tie: Some(tie),
            ..self.clone()
        };
        Box::pin(async move { held.renew(ttl).await })
    }
}

/// True when `error` says the command was never sent: writing it to the connection failed
/// (the peer had closed it: broken pipe; or it was not connected at all).
fn never_sent(error: &RedisError) -> bool {
    // The redis crate keeps an I/O error behind an `Arc`, which is what `source` gives.
    type Shared = std::sync::Arc<dyn std::error::Error + Send + std::marker::Sync>;
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<Shared>())
        .and_then(|shared| shared.downcast_ref::<std::io::Error>())
        .is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::NotConnected
            )
        })
}
