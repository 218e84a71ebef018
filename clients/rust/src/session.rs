//! The client's session (`LOCK.SESSION`): every holding a [`crate::Client`] takes on its server
//! is tied to one session of the client's, kept attached to a connection of its own. When that
//! connection closes — the process was killed, the host or the network went away — and nothing
//! attaches the session again within its grace, the server ends it and releases the holdings,
//! handing each to its first waiter with a larger fencing token, instead of after its lease.
//!
//! # The holder learns first
//! A reply to `LOCK.SESSION ATTACH` (or `OPEN`) sent at `t` on the client's clock means the
//! session was attached at some moment after `t`, so the server cannot end it before `t +
//! grace`. The client counts on the session until then, less the clock drift allowance it uses
//! for leases ([`lease::drift`] of the grace: 1% and 2 ms): that is the session's *deadline*.
//! A holding tied to the session counts until the earlier of its lease's end and the deadline
//! ([`crate::Guard::lease_end`]); when the deadline passes without a newer confirmed `ATTACH`,
//! the holding is reported lost ([`crate::Guard::lost`]) — before the server can hand it over.
//! That does not rest on noticing that the connection dropped: a killed connection may only
//! show on the next write to it.
//!
//! # What keeps the session
//! - It is opened on the first acquire, on a connection the pools never lend
//!   (`CLIENT SETNAME leasehold-session`, `CLIENT NO-EVICT on`).
//! - A heartbeat every third of the grace sends `LOCK.SESSION ATTACH` on it, opening a new
//!   connection first when it dropped (a blip, a server's `timeout`, `CLIENT KILL`): each
//!   confirmed `ATTACH` moves the deadline on, from when it was sent.
//! - When the server has no such session (a failover: the new master has none; or it ended),
//!   a new session is opened and every holding still counted on is tied to it by a renewal
//!   that names it and keeps the lease's end ([`Shared::retie`]): renewed, it counts by the new
//!   session; refused, it is lost. One whose deadline passed was reported lost already and is
//!   never taken back.
//!
//! # How a write names the session
//! A grant, renewal or re-entry *names* the session it is to be tied to by the pooled
//! connection it goes over, bound to that session with `LOCK.SESSION USE` once per connection
//! and session, in the write's own round trip ([`crate::binding`]); the write carries `SESSION
//! id` only in that binding round trip, and on the shared connection (syncing off). Either way
//! the server ties the holding exactly as it did when every write carried `SESSION id`, and
//! answers `ERR no such session`, changing nothing, once the session has ended. The session's
//! own connection is never bound: `ATTACH` on it is what keeps the session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::future::{BoxFuture, join_all};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, FromRedisValue, RedisError, Value};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::Result;
use crate::lease::{self, Lease};
use crate::pool::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT, is_lost_reply};

/// The name of a session's connection (`CLIENT SETNAME`), as `CLIENT LIST` shows it.
pub const CONNECTION_NAME: &str = "leasehold-session";

/// The server's reply when it has no session of that id: it never had one (a new master after a
/// failover, a restart), or the session ended.
pub(crate) fn is_no_such_session(error: &RedisError) -> bool {
    error.detail() == Some("no such session") || error.to_string().contains("no such session")
}

/// A holding the session can renew, to tie it to the session in use ([`Shared::retie`]).
pub(crate) trait Renewable: Send + Sync {
    /// Renews the holding for `ttl` in the place `tie` gives it in the session: the renewal
    /// names (is tied to) the session [`Tie::naming`] says and moves the tie by its outcome
    /// ([`Tie::moved`], [`Tie::gone`]). True while it holds, false once refused.
    fn renew_tied(&self, tie: Tie, ttl: Duration) -> BoxFuture<'static, Result<bool>>;
}

/// The client's session: its heartbeat and the task that reports holdings lost when their
/// session's deadline passes, both stopped when the last clone of the client is dropped.
pub(crate) struct Session {
    shared: Arc<Shared>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Session {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Session {
    /// A session of the server `redis` reaches, to be opened on the first acquire, with a
    /// grace of `grace` (`None`: the server's `lock.session-grace-ms`). Needs a Tokio runtime.
    pub(crate) fn new(redis: redis::Client, grace: Option<Duration>) -> Self {
        let shared = Arc::new(Shared {
            redis,
            grace,
            state: Mutex::default(),
            opening: tokio::sync::Mutex::new(()),
            beat: Notify::new(),
            expiry: Notify::new(),
        });
        let tasks = [
            tokio::spawn(heartbeat(Arc::clone(&shared))),
            tokio::spawn(expire(Arc::clone(&shared))),
        ];
        Self { shared, tasks }
    }

    /// The session a new holding is tied to, opened now if none is.
    ///
    /// # Errors
    /// It could not be opened: no connection, or the server refused (a grace out of range, a
    /// server without sessions, a replica).
    pub(crate) async fn tying(&self) -> Result<Tying, RedisError> {
        let id = self.shared.ensure().await?;
        Ok(Tying {
            shared: Arc::clone(&self.shared),
            id,
        })
    }

    /// The id of the session in use, if one is open.
    pub(crate) fn id(&self) -> Option<String> {
        self.shared.current_id()
    }

    /// Ends the session (`LOCK.SESSION CLOSE`): the holdings tied to it are reported lost first,
    /// then the server releases them. Returns how many it released.
    ///
    /// # Errors
    /// No connection, or the server's error; the holdings count as lost all the same.
    pub(crate) async fn close(&self) -> Result<u64, RedisError> {
        self.shared.close().await
    }
}

/// The session an acquire names (is tied to, see the module's docs), to tie the guard it makes
/// to.
pub(crate) struct Tying {
    shared: Arc<Shared>,
    id: String,
}

impl Tying {
    /// The session's id, as the server gave it.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The server said it has no such session: opens a new one, unless that was done already.
    ///
    /// # Errors
    /// The new session could not be opened.
    pub(crate) async fn gone(&self) -> Result<(), RedisError> {
        self.shared.reopen(&self.id).await
    }

    /// Ties `holding`, just granted with this session, to it: `lease` is the lease it counts
    /// on and `ended` tells its guard it is lost. A holding whose session's deadline has
    /// already passed is lost at once (`ended` is told now).
    pub(crate) fn tie(
        self,
        holding: impl Renewable + 'static,
        lease: Arc<Lease>,
        ended: Arc<watch::Sender<bool>>,
    ) -> Tie {
        let now = Instant::now();
        let mut state = self.shared.state();
        let number = state.next;
        state.next += 1;
        let deadline = state.deadlines.get(&self.id).copied();
        let lost_at = match deadline {
            Some(deadline) if deadline > now => None,
            other => Some(other.unwrap_or(now)),
        };
        if lost_at.is_some() {
            ended.send_replace(true);
        }
        // The task that reports holdings lost looks again at its time, which comes no later
        // than this holding's deadline (a session's holdings share it): waking it for every
        // grant, to scan every tied holding, cost a tenth of a grant with 64 tasks.
        let wake = lost_at.is_none()
            && deadline.is_some_and(|deadline| state.expiry_at.is_none_or(|at| deadline < at));
        let current = state.current.as_ref().map(|current| current.id.as_str());
        let retie = current != Some(self.id.as_str());
        state.tied.insert(
            number,
            Tied {
                session: self.id,
                retie,
                holding: Arc::new(holding),
                lease,
                ended,
                lost_at,
            },
        );
        drop(state);
        if wake {
            self.shared.expiry.notify_one();
        }
        Tie {
            shared: self.shared,
            number,
        }
    }
}

/// A guard's holding in the session: which session it counts by, until it is released.
#[derive(Clone)]
pub(crate) struct Tie {
    shared: Arc<Shared>,
    number: u64,
}

impl Tie {
    /// The session a renewal or a re-entry of this holding names: the one it is tied to, or the
    /// client's session in use when it is still to be tied to that one. `None` once it was
    /// reported lost or released.
    pub(crate) fn naming(&self) -> Option<String> {
        let state = self.shared.state();
        let tied = state.tied.get(&self.number)?;
        if tied.lost_at.is_some() {
            return None;
        }
        match &state.current {
            Some(current) if tied.retie || tied.session != current.id => Some(current.id.clone()),
            _ => Some(tied.session.clone()),
        }
    }

    /// A renewal (or re-entry) that named session `id` was made by the master, which tied the
    /// holding to `id` (`sure`), or may have been (no reply): the holding counts by `id`'s
    /// deadline from now on — unsure, it is tied again at the next heartbeat. If the deadline
    /// it counted by has passed meanwhile it is lost, and stays lost.
    pub(crate) fn moved(&self, id: &str, sure: bool) {
        let now = Instant::now();
        let mut state = self.shared.state();
        let State {
            tied, deadlines, ..
        } = &mut *state;
        let Some(tied) = tied.get_mut(&self.number) else {
            return;
        };
        if tied.lost_at.is_some() || (tied.session == id && !tied.retie) {
            return;
        }
        let deadline = deadlines.get(&tied.session).copied().unwrap_or(now);
        if deadline <= now {
            tied.lost(deadline);
            return;
        }
        if tied.session != id || sure {
            tied.session = id.to_owned();
            tied.retie = !sure;
        }
    }

    /// The server has no session `id`, which this holding named: opens a new one if `id` is
    /// the one in use (the holdings are tied to it then).
    pub(crate) async fn gone(&self, id: &str) {
        let _ = self.shared.reopen(id).await;
    }

    /// Until when the holding counts by its session: that session's deadline, or when it was
    /// reported lost. `None` once released.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let state = self.shared.state();
        let tied = state.tied.get(&self.number)?;
        Some(tied.lost_at.unwrap_or_else(|| {
            let deadline = state.deadlines.get(&tied.session).copied();
            deadline.unwrap_or_else(Instant::now)
        }))
    }

    /// True once the holding was reported lost by its session (or closed with it).
    pub(crate) fn is_lost(&self) -> bool {
        self.deadline()
            .is_some_and(|deadline| deadline <= Instant::now())
    }

    /// The session this holding is tied to (for a re-entry's guard), if it still counts.
    pub(crate) fn tying(&self) -> Option<Tying> {
        let state = self.shared.state();
        let tied = state.tied.get(&self.number)?;
        tied.lost_at.is_none().then(|| Tying {
            shared: Arc::clone(&self.shared),
            id: tied.session.clone(),
        })
    }

    /// The guard ended (released or dropped): the session no longer keeps the holding.
    pub(crate) fn untie(&self) {
        // No need to wake the task that reports holdings lost: one holding fewer moves its
        // next look no earlier.
        self.shared.state().tied.remove(&self.number);
    }
}

/// What the client and its session's tasks share.
struct Shared {
    /// Opens the session's connections.
    redis: redis::Client,
    /// The grace asked for; `None`: the server's default.
    grace: Option<Duration>,
    state: Mutex<State>,
    /// Held while a session is opened or closed: one at a time.
    opening: tokio::sync::Mutex<()>,
    /// Wakes the heartbeat: a session was opened or closed.
    beat: Notify,
    /// Wakes the task that reports holdings lost: a holding was tied or untied.
    expiry: Notify,
}

#[derive(Default)]
struct State {
    /// The session in use; `None` before the first acquire and after a close.
    current: Option<Current>,
    /// Until when the client counts on each session with holdings (and the one in use): its
    /// last confirmed `ATTACH` (or `OPEN`), sent at `t`, plus the grace less the drift allowance.
    deadlines: HashMap<String, Instant>,
    /// The holdings of live guards, by a number of their own.
    tied: HashMap<u64, Tied>,
    next: u64,
    /// A pass that ties holdings to the session in use is under way.
    retying: bool,
    /// When the task that reports holdings lost looks next ([`Shared::expire_due`]); `None`:
    /// only when woken. A holding tied with a later deadline need not wake it.
    expiry_at: Option<Instant>,
}

/// The session in use.
struct Current {
    id: String,
    grace: Duration,
    /// Its connection; `None` after it failed (the next heartbeat opens another).
    connection: Option<MultiplexedConnection>,
}

/// A live guard's holding.
struct Tied {
    /// The session it counts by.
    session: String,
    /// It is still to be tied to the session in use by a renewal that names it (it was granted
    /// with an earlier session, or a renewal that named this one got no reply).
    retie: bool,
    /// Renews it (its guard's commands, without a tie of their own).
    holding: Arc<dyn Renewable>,
    lease: Arc<Lease>,
    /// Its guard's end signal.
    ended: Arc<watch::Sender<bool>>,
    /// When it was reported lost; `None` while it counts.
    lost_at: Option<Instant>,
}

impl Tied {
    /// Reports the holding lost, its session's deadline being `at`.
    fn lost(&mut self, at: Instant) {
        self.lost_at = Some(at);
        self.ended.send_replace(true);
    }
}

/// What a heartbeat found.
enum Beat {
    /// The session is attached: its deadline moved on.
    Attached,
    /// The server has no such session.
    Gone,
    /// No reply (the connection failed or timed out; it is dropped) or another error.
    Failed,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn current_id(&self) -> Option<String> {
        let state = self.state();
        state.current.as_ref().map(|current| current.id.clone())
    }

    /// The session in use, opened now if there is none.
    async fn ensure(&self) -> Result<String, RedisError> {
        if let Some(id) = self.current_id() {
            return Ok(id);
        }
        let _opening = self.opening.lock().await;
        if let Some(id) = self.current_id() {
            return Ok(id);
        }
        self.open().await
    }

    /// The server has no session `old`: opens a new one if `old` is still the one in use, and
    /// ties the holdings to it.
    async fn reopen(self: &Arc<Self>, old: &str) -> Result<(), RedisError> {
        let _opening = self.opening.lock().await;
        if self.current_id().as_deref() != Some(old) {
            return Ok(());
        }
        self.open().await?;
        self.retie();
        Ok(())
    }

    /// Opens a session on a new connection and puts it in use (the caller holds `opening`).
    async fn open(&self) -> Result<String, RedisError> {
        let mut open = redis::cmd("LOCK.SESSION");
        open.arg("OPEN");
        if let Some(grace) = self.grace {
            open.arg("GRACE")
                .arg(u64::try_from(grace.as_millis()).unwrap_or(u64::MAX));
        }
        let (sent, connection, reply) = within(RESPONSE_TIMEOUT, self.dial(&open)).await?;
        let (id, grace_ms): (String, u64) = FromRedisValue::from_redis_value(reply)?;
        let grace = Duration::from_millis(grace_ms);
        let mut state = self.state();
        state.deadlines.insert(id.clone(), deadline(sent, grace));
        state.current = Some(Current {
            id: id.clone(),
            grace,
            connection: Some(connection),
        });
        drop(state);
        self.beat.notify_one();
        Ok(id)
    }

    /// Opens a connection for the session, names it and asks the server not to evict it, then
    /// sends `command`, in one round trip. Returns when it was sent, the connection, and the
    /// command's reply.
    ///
    /// # Errors
    /// No connection, `CLIENT SETNAME` or `command` failed.
    async fn dial(
        &self,
        command: &Cmd,
    ) -> Result<(Instant, MultiplexedConnection, Value), RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(None);
        let sent = Instant::now();
        let mut connection = self
            .redis
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        // An old server lacks `NO-EVICT`: its error is ignored.
        pipe.cmd("CLIENT").arg("NO-EVICT").arg("on");
        pipe.cmd("CLIENT").arg("SETNAME").arg(CONNECTION_NAME);
        pipe.add_command(command.clone());
        let replies: Vec<Value> = pipe.query_async(&mut connection).await?;
        let mut replies = replies.into_iter().skip(1);
        replies.next().unwrap_or(Value::Nil).extract_error()?;
        let reply = replies.next().unwrap_or(Value::Nil).extract_error()?;
        Ok((sent, connection, reply))
    }

    /// One heartbeat of session `id`: `LOCK.SESSION ATTACH` on its connection, or on a new one
    /// when it has none, within a third of the grace.
    async fn attach(&self, id: &str, grace: Duration) -> Beat {
        let connection = {
            let state = self.state();
            let current = state.current.as_ref().filter(|current| current.id == id);
            current.and_then(|current| current.connection.clone())
        };
        let mut attach = redis::cmd("LOCK.SESSION");
        attach.arg("ATTACH").arg(id);
        let sent = Instant::now();
        let beat = async {
            match connection {
                Some(mut connection) => {
                    let reply: Value = attach.query_async(&mut connection).await?;
                    Ok::<_, RedisError>((reply.extract_error()?, None))
                }
                None => {
                    let (_, connection, reply) = self.dial(&attach).await?;
                    Ok((reply, Some(connection)))
                }
            }
        };
        let outcome = within(beat_timeout(grace), beat).await;
        let (reply, fresh) = match outcome {
            Ok(replied) => replied,
            Err(error) if is_no_such_session(&error) => return Beat::Gone,
            Err(error) => {
                if is_lost_reply(&error) {
                    self.disconnect(id);
                }
                return Beat::Failed;
            }
        };
        let Ok(grace_ms) = u64::from_redis_value(reply) else {
            return Beat::Failed;
        };
        let mut state = self.state();
        let confirmed = deadline(sent, Duration::from_millis(grace_ms));
        if let Some(deadline) = state.deadlines.get_mut(id) {
            *deadline = (*deadline).max(confirmed);
        }
        if let Some(current) = state.current.as_mut().filter(|current| current.id == id)
            && fresh.is_some()
        {
            current.connection = fresh;
        }
        Beat::Attached
    }

    /// Drops the connection of session `id` (the next heartbeat opens another).
    fn disconnect(&self, id: &str) {
        let mut state = self.state();
        if let Some(current) = state.current.as_mut().filter(|current| current.id == id) {
            current.connection = None;
        }
    }

    /// Starts a pass that ties every holding still counted on, but tied to an earlier session,
    /// to the one in use, unless one is under way: a renewal that names it, for what is left of
    /// the lease (its end stays). Renewed, the holding counts by the new session; refused, it
    /// is lost; no reply, it is tried again after the next heartbeat.
    fn retie(self: &Arc<Self>) {
        let stale = {
            let mut state = self.state();
            let Some(id) = state.current.as_ref().map(|current| current.id.clone()) else {
                return;
            };
            let stale: Vec<(u64, Arc<dyn Renewable>, Arc<Lease>)> = state
                .tied
                .iter()
                .filter(|(_, tied)| tied.lost_at.is_none() && (tied.retie || tied.session != id))
                .map(|(number, tied)| {
                    let holding = Arc::clone(&tied.holding);
                    (*number, holding, Arc::clone(&tied.lease))
                })
                .collect();
            if stale.is_empty() || state.retying {
                return;
            }
            state.retying = true;
            stale
        };
        let shared = Arc::clone(self);
        tokio::spawn(async move {
            let renewals = stale
                .iter()
                .map(|(number, holding, lease)| shared.renew(*number, &**holding, lease));
            join_all(renewals).await;
            shared.state().retying = false;
            shared.expiry.notify_one();
        });
    }

    /// Renews tied holding `number` for what is left of `lease`, naming the session in use:
    /// renewed, it counts by that session; refused, it is lost; not counted (no reply, not
    /// acknowledged), its lease is at most that renewal's.
    async fn renew(self: &Arc<Self>, number: u64, holding: &dyn Renewable, lease: &Lease) {
        let sent = Instant::now();
        let left = lease.end().saturating_duration_since(sent);
        if left < Duration::from_millis(1) {
            return;
        }
        let tie = Tie {
            shared: Arc::clone(self),
            number,
        };
        match holding.renew_tied(tie, left).await {
            Ok(true) => lease.renewed(sent, left),
            Ok(false) => self.lost(number),
            Err(_) => lease.unsure(sent, left),
        }
    }

    /// Reports holding `number` lost now (a renewal was refused).
    fn lost(&self, number: u64) {
        let mut state = self.state();
        if let Some(tied) = state.tied.get_mut(&number)
            && tied.lost_at.is_none()
        {
            tied.lost(Instant::now());
        }
    }

    /// Reports lost every holding whose session's deadline has passed, forgets the deadlines
    /// no holding needs, and returns the next deadline a holding counts by.
    fn expire_due(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut state = self.state();
        let State {
            current,
            deadlines,
            tied,
            ..
        } = &mut *state;
        let mut next: Option<Instant> = None;
        for holding in tied.values_mut().filter(|tied| tied.lost_at.is_none()) {
            let deadline = deadlines.get(&holding.session).copied().unwrap_or(now);
            if deadline <= now {
                holding.lost(deadline);
            } else {
                next = Some(next.map_or(deadline, |next| next.min(deadline)));
            }
        }
        let in_use = current.as_ref().map(|current| current.id.as_str());
        deadlines.retain(|id, _| {
            Some(id.as_str()) == in_use || tied.values().any(|tied| tied.session == *id)
        });
        state.expiry_at = next;
        next
    }

    /// Closes the session in use: its holdings are reported lost, then `LOCK.SESSION CLOSE`
    /// releases them. Returns how many the server released.
    async fn close(&self) -> Result<u64, RedisError> {
        let _opening = self.opening.lock().await;
        let now = Instant::now();
        let current = {
            let mut state = self.state();
            let Some(current) = state.current.take() else {
                return Ok(0);
            };
            let State {
                deadlines, tied, ..
            } = &mut *state;
            if let Some(deadline) = deadlines.get_mut(&current.id) {
                *deadline = (*deadline).min(now);
            }
            for holding in tied.values_mut() {
                if holding.session == current.id && holding.lost_at.is_none() {
                    holding.lost(now);
                }
            }
            current
        };
        self.beat.notify_one();
        let mut close = redis::cmd("LOCK.SESSION");
        close.arg("CLOSE").arg(&current.id);
        let closed = within(RESPONSE_TIMEOUT, async {
            match current.connection {
                Some(mut connection) => close.query_async::<Value>(&mut connection).await,
                None => self.dial(&close).await.map(|(_, _, reply)| reply),
            }
        })
        .await;
        match closed.and_then(Value::extract_error) {
            Ok(reply) => Ok(u64::from_redis_value(reply)?),
            Err(error) if is_no_such_session(&error) => Ok(0),
            Err(error) => Err(error),
        }
    }
}

/// The deadline of a session of `grace` whose `ATTACH` (or `OPEN`) sent at `sent` was answered.
fn deadline(sent: Instant, grace: Duration) -> Instant {
    sent + grace.saturating_sub(lease::drift(grace))
}

/// How long a heartbeat waits for its reply before it drops the connection: a third of the
/// grace, at least 100 ms, at most the quick commands' timeout.
fn beat_timeout(grace: Duration) -> Duration {
    (grace / 3).clamp(Duration::from_millis(100), RESPONSE_TIMEOUT)
}

/// `future`'s outcome, or a timeout error after `limit`.
async fn within<T>(
    limit: Duration,
    future: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, RedisError> {
    tokio::time::timeout(limit, future)
        .await
        .map_err(|_| RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)))?
}

/// The heartbeat: `LOCK.SESSION ATTACH` every third of the grace on the session's connection;
/// after a failure once more at once (on a new connection), then every tenth of the grace;
/// a new session when the server has none. Idle while no session is open.
async fn heartbeat(shared: Arc<Shared>) {
    let mut failures: u32 = 0;
    loop {
        let current = {
            let state = shared.state();
            let current = state.current.as_ref();
            current.map(|current| (current.id.clone(), current.grace))
        };
        let Some((id, grace)) = current else {
            shared.beat.notified().await;
            continue;
        };
        let pause = match failures {
            0 => grace / 3,
            1 => Duration::ZERO,
            _ => grace / 10,
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            // A session was opened or closed meanwhile: start over with the one in use.
            () = shared.beat.notified() => continue,
        }
        match shared.attach(&id, grace).await {
            Beat::Attached => {
                failures = 0;
                shared.retie();
            }
            Beat::Gone => match shared.reopen(&id).await {
                Ok(()) => failures = 0,
                Err(_) => failures = failures.saturating_add(1),
            },
            Beat::Failed => failures = failures.saturating_add(1),
        }
    }
}

/// Reports holdings lost as their sessions' deadlines pass.
async fn expire(shared: Arc<Shared>) {
    loop {
        let next = shared.expire_due();
        let woken = shared.expiry.notified();
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = woken => {}
                }
            }
            None => woken.await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_counts_until_its_grace_less_the_drift_allowance() {
        let sent = Instant::now();
        let grace = Duration::from_millis(500);
        assert_eq!(deadline(sent, grace), sent + Duration::from_millis(493));
        let grace = Duration::from_secs(3);
        assert_eq!(deadline(sent, grace), sent + Duration::from_millis(2_968));
    }

    #[test]
    fn heartbeats_wait_a_third_of_the_grace_for_their_reply() {
        assert_eq!(
            beat_timeout(Duration::from_millis(600)),
            Duration::from_millis(200)
        );
        assert_eq!(
            beat_timeout(Duration::from_millis(100)),
            Duration::from_millis(100)
        );
        assert_eq!(beat_timeout(Duration::from_secs(60)), RESPONSE_TIMEOUT);
    }
}
