//! Grants and renewals synced to replicas before they count. Replication is asynchronous:
//! without this, a master can acknowledge a grant (or a renewal) and fail before any replica has
//! it, and the promoted replica grants the same lock again (or ends the lease earlier than its
//! holder believes).
//!
//! By default ([`Sync::to_replicas`]) a write counts once every replica in the master's in-sync
//! set has it, and the master syncs it itself (lock module 0.7.0 or later): the writes
//! (`LOCK.ACQUIRE`, `LOCK.RENEW`, `LOCK.MACQUIRE`, `LOCK.MRENEW` without waiting) go out in
//! batches with `NOSYNC` and one `LOCK.SYNC` behind each batch (a write alone with `SYNC`), which the
//! server answers once every member of its in-sync set acknowledged them and the set has at least
//! `lock.min-insync-replicas` members — no `WAIT`. Within `lock.sync-timeout-ms` (1 s by
//! default) otherwise, it replies `NOREPLICAS` with what was missing, which the client reports
//! as [`crate::Error::NotReplicated`]:
//!
//! - for a grant (a re-entry and a mode change too), the client has released it, one hold as
//!   its owner, as the server releases a refused `SYNC` grant — a wait's hand-over carries
//!   `SYNC` itself, and the server released it;
//! - for a renewal, it does not count: the holder keeps counting on the lease before it
//!   ([`crate::Guard::lease_end`]).
//!
//! A held reply blocks its connection in the server until it is answered, so a batch goes over
//! a dedicated connection of the client's sync pool (a wait: its wait connection), never over
//! the shared one ([`crate::ClientOptions::sync_connections`]). The client waits for the reply up
//! to [`Sync::timeout`] plus 5 s; a reply that does not come by then (or a batch whose callers
//! all dropped their futures) closes the connection, and the client releases in the background
//! every new holding the batch may have made. A server without replicas replies at once; a master
//! whose set has fewer members than it requires refuses at once. A server that is no longer a
//! master (a failover while the write waited) refuses every write it held (`NOREPLICAS this
//! server is no longer a master`, or Redis's own `UNBLOCKED` as it turns replica: reported the
//! same way).
//!
//! [`Sync::exactly`] and [`Sync::with_aof`] still wait on the client's side: the write carries
//! `NOSYNC` (replied at once), and `WAIT n timeout` (or `WAITAOF 1 n timeout`) goes behind it on
//! the same connection, in the same round trip; a write `WAIT` counted too few replicas for is
//! released by the client (a grant) or not counted (a renewal). With [`Sync::to_replicas`] and
//! AOF, the write carries `SYNC` and `WAITAOF 1 0 timeout` behind it checks the master's own
//! fsync. [`Sync::off`] sends `NOSYNC` and waits for nothing.
//!
//! A module older than 0.7.0 answers `ERR syntax error` to `SYNC` and `NOSYNC`: the client
//! reports [`crate::Error::ModuleTooOld`].

use std::time::Duration;

use redis::{Cmd, FromRedisValue, Pipeline, RedisError, Value};

use crate::error::Error;

/// How many replicas must have a grant or a renewal before it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Replicas {
    /// Every replica in the master's in-sync set, and at least `lock.min-insync-replicas` of
    /// them, as the master itself makes sure before it replies (`SYNC`).
    InSync,
    /// This many, as `WAIT` counts them (0: don't wait). Fewer than the master's in-sync set
    /// is not safe: see [`Sync::exactly`].
    Exactly(u32),
}

/// Whether and how grants and renewals are synced to replicas before they count. The default:
/// to every replica in the master's in-sync set, which the master makes sure of before it
/// replies (`SYNC`, within its `lock.sync-timeout-ms`, 1 s by default); a lone server waits for
/// nothing. A master with fewer in-sync replicas than its `lock.min-insync-replicas` (1 by
/// default) counts no write.
///
/// The cost when a replica is down: until the master drops it from its set (with the module's
/// default settings about 25 s after it went silent), every grant and every renewal waits the
/// server's sync timeout and fails ([`crate::Error::NotReplicated`]); a watched holding keeps
/// trying (the timeout, then 0.5 s, each time), so it keeps its lock if the drop comes before
/// its last synced lease ends, and is reported lost when that lease ends otherwise. Once it is
/// dropped, writes count again while the master keeps at least `lock.min-insync-replicas`.
/// Bring the replica back; or, accepting that a failover may then lose grants, pin the count
/// ([`Sync::exactly`]) or switch syncing off ([`Sync::off`]) for that time.
///
/// Needs the lock module 0.7.0 or later, which syncs writes itself (`SYNC` / `NOSYNC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sync {
    pub(crate) replicas: Replicas,
    pub(crate) timeout: Duration,
    pub(crate) aof: bool,
}

impl Sync {
    /// The client's timeout by default: 1 s, the server's default `lock.sync-timeout-ms`. A
    /// replica that is up acknowledges within a round trip plus its replication lag (well under
    /// a millisecond on a LAN, `make chaos` measures it); a second runs out only when a replica
    /// is down or far behind, and then the grant is not safe anyway.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

    /// To every replica in the master's in-sync set, the default: the write carries `SYNC`,
    /// and the master replies once its in-sync set has it (or refuses with `NOREPLICAS`).
    #[must_use]
    pub const fn to_replicas() -> Self {
        Self {
            replicas: Replicas::InSync,
            timeout: Self::DEFAULT_TIMEOUT,
            aof: false,
        }
    }

    /// To exactly `replicas` replicas, as `WAIT` counts them, whatever the master's in-sync set
    /// and `lock.min-insync-replicas` say: the write carries `NOSYNC` and `WAIT replicas
    /// timeout` follows it in the same round trip.
    ///
    /// **Fewer than the master's in-sync set is not safe**: a failover may promote a replica
    /// that did not acknowledge the grant, and the new master grants the lock again. A
    /// ten-minute `make chaos` run (commit 888e1d5) found 16 double grants among grants synced
    /// to one of two replicas, all after `SENTINEL FAILOVER` (later runs: docs/guarantees.md).
    /// Use it to opt out while a replica is down, or with 0 ([`Sync::off`]).
    #[must_use]
    pub const fn exactly(replicas: u32) -> Self {
        Self {
            replicas: Replicas::Exactly(replicas),
            ..Self::to_replicas()
        }
    }

    /// No syncing: the write carries `NOSYNC`, and a grant is returned, and a renewal counts,
    /// as soon as the master made it.
    #[must_use]
    pub const fn off() -> Self {
        Self::exactly(0)
    }

    /// The timeout (whole ms, at least 1). With [`Sync::exactly`] and with AOF, how long the
    /// `WAIT` (`WAITAOF`) waits. With [`Sync::to_replicas`] the server's `lock.sync-timeout-ms`
    /// decides how long it waits for its replicas; the client then waits for the reply up to
    /// this timeout plus 5 s before it gives up (closing the connection: the server releases a
    /// grant it held, and a renewal does not count), so keep it at least the server's
    /// `lock.sync-timeout-ms`. Either way it also bounds how long a write queues for a free
    /// sync connection ([`crate::ClientOptions::sync_connections`]).
    #[must_use]
    pub const fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Waits also for the AOF: with [`Sync::exactly`], `WAITAOF 1 n timeout` instead of
    /// `WAIT` (the write is in the master's AOF and `n` replicas' AOFs on disk); with
    /// [`Sync::to_replicas`], `WAITAOF 1 0 timeout` behind the synced write (the master's own
    /// AOF on disk, the in-sync set having the write as `SYNC` makes sure). Redis 7.2+, Valkey
    /// 8+, with `appendonly yes`. With `appendfsync everysec` a server fsyncs once a second, so
    /// give it a timeout above 1 s.
    #[must_use]
    pub const fn with_aof(mut self, aof: bool) -> Self {
        self.aof = aof;
        self
    }

    /// True when writes go out in batches, `NOSYNC` each with one `LOCK.SYNC` behind them
    /// ([`crate::batch`]): to the in-sync set, without AOF.
    pub(crate) fn batches(&self) -> bool {
        self.replicas == Replicas::InSync && !self.aof
    }

    /// True when nothing is synced ([`Sync::off`]).
    pub(crate) fn is_off(&self) -> bool {
        self.replicas == Replicas::Exactly(0)
    }

    /// The timeout in whole ms (at least 1).
    pub(crate) fn timeout_ms(&self) -> u64 {
        ms(self.timeout)
    }

    /// `command` with the option that tells the server whether to sync it: `SYNC` for the
    /// in-sync set, `NOSYNC` otherwise.
    pub(crate) fn marked(&self, command: &Cmd) -> Cmd {
        let mut command = command.clone();
        command.arg(self.option());
        command
    }

    /// The option that tells the server whether to sync a write: `SYNC` for the in-sync set,
    /// `NOSYNC` otherwise.
    pub(crate) const fn option(&self) -> &'static str {
        match self.replicas {
            Replicas::InSync => "SYNC",
            Replicas::Exactly(_) => "NOSYNC",
        }
    }

    /// What goes behind a write on its connection, in its round trip: `WAIT n timeout` (or
    /// `WAITAOF 1 n timeout`) for a fixed count `n`, `WAITAOF 1 0 timeout` for the in-sync set
    /// with AOF, nothing otherwise. Read its reply with [`Sync::judge`].
    pub(crate) fn tail(&self) -> Pipeline {
        let mut tail = redis::pipe();
        tail.ignore_errors();
        match self.replicas {
            Replicas::Exactly(0) => {}
            Replicas::Exactly(replicas) => {
                tail.add_command(self.wait(replicas));
            }
            Replicas::InSync if self.aof => {
                tail.add_command(self.wait(0));
            }
            Replicas::InSync => {}
        }
        tail
    }

    /// Whether a write counts by the replies to [`Sync::tail`] (none: it does).
    ///
    /// # Errors
    /// Why it does not count: the `WAIT` counted too few replicas, the master did not fsync, or
    /// a reply is an error or of another shape.
    pub(crate) fn judge(&self, tail: Vec<Value>) -> Result<(), String> {
        let wanted = match self.replicas {
            Replicas::Exactly(0) => return Ok(()),
            Replicas::InSync if !self.aof => return Ok(()),
            Replicas::Exactly(wanted) => wanted,
            Replicas::InSync => 0,
        };
        let reply = tail
            .into_iter()
            .next()
            .ok_or_else(|| format!("no reply to {}", self.wait_name()))?;
        let waited = self.waited(reply)?;
        let timeout = self.timeout_ms();
        if !waited.fsynced {
            return Err(format!(
                "the master did not fsync its AOF within {timeout} ms"
            ));
        }
        if waited.replicas < wanted {
            let acked = waited.replicas;
            return Err(format!(
                "{acked} of the {wanted} replicas asked for acknowledged within {timeout} ms"
            ));
        }
        Ok(())
    }

    /// `WAIT replicas timeout` (or `WAITAOF 1 replicas timeout`): for every write sent before it
    /// on its connection.
    fn wait(&self, replicas: u32) -> Cmd {
        let mut command = redis::cmd(self.wait_name());
        if self.aof {
            command.arg(1);
        }
        command.arg(replicas).arg(self.timeout_ms());
        command
    }

    fn wait_name(&self) -> &'static str {
        if self.aof { "WAITAOF" } else { "WAIT" }
    }

    /// What a `WAIT` (or `WAITAOF`) answered.
    fn waited(&self, reply: Value) -> Result<Waited, String> {
        let failed = |error: RedisError| format!("{} failed: {error}", self.wait_name());
        let reply = reply.extract_error().map_err(failed)?;
        if self.aof {
            // [fsynced locally (0 or 1), replicas that fsynced]
            let (local, replicas): (u32, u32) = read(reply).map_err(failed)?;
            return Ok(Waited {
                replicas,
                fsynced: local >= 1,
            });
        }
        Ok(Waited {
            replicas: read(reply).map_err(failed)?,
            fsynced: true,
        })
    }
}

impl Default for Sync {
    fn default() -> Self {
        Self::to_replicas()
    }
}

/// Whole ms, at least 1 (0 would mean no limit to `WAIT`).
fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

fn read<T: FromRedisValue>(value: Value) -> Result<T, RedisError> {
    Ok(T::from_redis_value(value)?)
}

/// What a `WAIT` (or `WAITAOF`) answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Waited {
    /// Replicas that acknowledged (for `WAITAOF`: fsynced).
    replicas: u32,
    /// The master fsynced its AOF (always true for `WAIT`).
    fsynced: bool,
}

/// The error of a write that carried `SYNC` or `NOSYNC` and got `error`:
/// [`Error::NotReplicated`] for `NOREPLICAS` (the server already released a grant; a renewal
/// does not count) and for `UNBLOCKED` (Redis itself ended the wait of a write it held when the
/// master turned replica: it did not count either), [`Error::ModuleTooOld`] for `ERR syntax
/// error` (a module older than 0.7.0 does not know the options), the error itself otherwise.
pub(crate) fn write_error(error: RedisError) -> Error {
    let whole = |code: &str| match error.detail() {
        Some(detail) => format!("{code} {detail}"),
        None => code.to_owned(),
    };
    match error.code() {
        Some("NOREPLICAS") => not_replicated(&whole("NOREPLICAS")),
        Some("UNBLOCKED") => Error::NotReplicated {
            reason: "this server is no longer a master".to_owned(),
            message: whole("UNBLOCKED"),
        },
        Some("ERR")
            if error
                .detail()
                .is_some_and(|d| d.starts_with("syntax error")) =>
        {
            Error::ModuleTooOld {
                reply: format!("ERR {}", error.detail().unwrap_or_default()),
            }
        }
        _ => Error::Redis(error),
    }
}

/// The error of a guarded or fenced command (`LOCK.GUARD`, `LOCK.FENCED`) that got `error`:
/// [`Error::NotHeld`] for `NOTHELD`, [`Error::Stale`] for `STALE`, [`Error::NotReplicated`] for
/// `NOREPLICAS` (the command ran on the master, but its in-sync set did not acknowledge it);
/// the error itself otherwise — the command's own error among them.
pub(crate) fn guarded_error(error: RedisError) -> Error {
    let message = match error.detail() {
        Some(detail) => format!("{} {detail}", error.code().unwrap_or_default()),
        None => error.code().unwrap_or_default().to_owned(),
    };
    match error.code() {
        Some("NOTHELD") => Error::NotHeld { message },
        Some("STALE") => {
            // STALE token N is below M, the largest token that ran a command through this fence
            let mut words = message.split([' ', ',']);
            let token = words.nth(2).and_then(|n| n.parse().ok()).unwrap_or(0);
            let largest = words.nth(2).and_then(|n| n.parse().ok()).unwrap_or(0);
            Error::Stale {
                token,
                largest,
                message,
            }
        }
        Some("NOREPLICAS") => not_replicated(&message),
        _ => Error::Redis(error),
    }
}

/// [`Error::NotReplicated`] for the server's `NOREPLICAS` reply `message`: the reason is its
/// text up to `; ` (what was missing), the message all of it (what it means for the write).
pub(crate) fn not_replicated(message: &str) -> Error {
    let text = message.strip_prefix("NOREPLICAS").unwrap_or(message).trim();
    let reason = text.split("; ").next().unwrap_or(text).to_owned();
    Error::NotReplicated {
        reason,
        message: message.to_owned(),
    }
}

/// Whether `error` is the server's refusal of a synced grant, which it released before it
/// replied (`NOREPLICAS ...; the grant was released`), or gave up with the master's role
/// (`UNBLOCKED`).
pub(crate) fn released_by_server(error: &Error) -> bool {
    matches!(error, Error::NotReplicated { message, .. }
        if (message.starts_with("NOREPLICAS") && message.contains("the grant was released"))
            || message.starts_with("UNBLOCKED"))
}

/// Whether `error` is the server's refusal of a synced renewal, which it made but which does
/// not count (`NOREPLICAS ...; the renewal does not count: the lease before it does`).
pub(crate) fn renewed_by_server(error: &Error) -> bool {
    matches!(error, Error::NotReplicated { message, .. }
        if message.starts_with("NOREPLICAS") && message.contains("the renewal does not count"))
}

#[cfg(test)]
mod tests;
