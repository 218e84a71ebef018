//! Locks on one server (or one cluster master): the exclusive [`Lock`], the
//! [`ReadWriteLock`] and the [`Semaphore`], all `LOCK.ACQUIRE` with another mode, and sets of
//! locks taken together ([`Lock::multi`], `LOCK.MACQUIRE`).

use std::time::Duration;

use redis::Cmd;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::batch::Undo;
use crate::binding::Write;
use crate::client::{Client, Synced};
use crate::error::{Error, Result};
use crate::guard::{Guard, Holding, Keeping};
use crate::held::{Held, Mode, Tokens, acquire_command, campaign_command, is_try_again};
use crate::lease;
use crate::owner::new_owner;
use crate::pool::is_lost_reply;
use crate::session::{Tying, is_no_such_session};
use crate::sync::Sync;

/// How an acquire that finds the lock busy waits for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Blocked in the server (`LOCK.ACQUIRE ... WAIT`), granted in arrival order the moment the
    /// lock is free. The default.
    Server,
    /// Retried with backoff (`LOCK.ACQUIRE` without `WAIT`): for proxies or servers where a
    /// blocking command is unwanted. Not fair: a retry can come after a newcomer.
    Retry(Backoff),
}

/// How a lock handle acquires and keeps its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Settings {
    mode: Mode,
    reentrant: bool,
    waiting: Waiting,
    keeping: Keeping,
    /// How long after a wait should have ended the client gives up on the server's reply.
    margin: Duration,
    /// How grants and renewals reach the replicas before they count.
    sync: Sync,
}

/// A lock on one server (or one cluster master). Exclusive unless made by
/// [`ReadWriteLock::read`] or [`Semaphore`].
///
/// Every acquire is a new owner (a UUID and a counter), kept by the [`Guard`] it returns: a
/// handle shared by any number of tasks — cloned, or behind an `Arc` — excludes them like a
/// mutex (Redisson's owner is the client and thread, redis-py's a new token per acquire, the
/// same idea). A holder takes one more hold with [`Guard::reenter`], never by acquiring again.
/// [`Lock::with_owner`] fixes the owner instead, for holders in several processes that must
/// count as one.
///
/// ```no_run
/// # async fn example() -> leasehold_client::Result<()> {
/// use std::time::Duration;
/// use leasehold_client::{Client, Lock};
///
/// let client = Client::open("redis://127.0.0.1:6379").await?;
/// let lock = Lock::new(&client, "order:42").with_watchdog(true);
/// if let Some(guard) = lock.acquire_timeout(Duration::from_secs(10), Duration::from_secs(5)).await? {
///     let token = guard.token(); // send it with every write to the order
///     // ... the work; the watchdog renews the lease meanwhile
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    client: Client,
    /// The lock's name, or a set's names.
    names: Vec<String>,
    /// The owner every acquire uses, if one was set; otherwise each acquire makes a new one.
    owner: Option<String>,
    settings: Settings,
    /// What a candidate proclaims: set, every acquire is a campaign (`LOCK.CAMPAIGN name
    /// candidate value ttl-ms`, an exclusive acquire with a value), and a holding ends by its
    /// term's epoch (`LOCK.RESIGN`). Set by an election only.
    value: Option<String>,
}

impl Lock {
    /// An exclusive lock named `name` (the key), a new owner per acquire.
    #[must_use]
    pub fn new(client: &Client, name: &str) -> Self {
        Self::with_mode(client, name, Mode::Exclusive)
    }

    /// A set of locks named `names` (distinct keys, in one slot in Redis Cluster: hash tags
    /// such as `{order:42}:payment`), taken together, exclusively, all or none
    /// (`LOCK.MACQUIRE`): a waiting set is granted all its locks in one step, in arrival order
    /// with every other waiter of any of them, so sets asked for in any key order never
    /// deadlock. The guard holds every token ([`Guard::tokens`]); its watchdog renews all the
    /// leases together and counts the set as lost as soon as one is (`LOCK.MRENEW`); release
    /// frees them all (`LOCK.MRELEASE`). A new owner per acquire, as for [`Lock::new`].
    /// Re-entering, upgrading and downgrading are for single locks ([`Error::NotOnSet`]).
    ///
    /// ```no_run
    /// # async fn example() -> leasehold_client::Result<()> {
    /// use std::time::Duration;
    /// use leasehold_client::{Client, Lock};
    ///
    /// let client = Client::open("redis://127.0.0.1:6379").await?;
    /// let transfer = Lock::multi(&client, &["{bank}:account:a", "{bank}:account:b"]);
    /// let guard = transfer.acquire(Duration::from_secs(10)).await?;
    /// let [from, to] = guard.tokens() else { unreachable!() };
    /// // ... debit with `from`, credit with `to`
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn multi(client: &Client, names: &[&str]) -> Self {
        let mut lock = Self::with_mode(client, names.first().copied().unwrap_or(""), Mode::Set);
        lock.names = names.iter().map(|name| (*name).to_owned()).collect();
        lock
    }

    fn with_mode(client: &Client, name: &str, mode: Mode) -> Self {
        Self {
            client: client.clone(),
            names: vec![name.to_owned()],
            owner: None,
            value: None,
            settings: Settings {
                mode,
                reentrant: false,
                waiting: Waiting::Server,
                keeping: Keeping::default(),
                margin: Duration::from_secs(1),
                sync: Sync::to_replicas(),
            },
        }
    }

    /// Acquires always as `owner` (1 to 256 bytes) instead of a new owner each time: for
    /// handles in different processes that must count as the same holder. The hazard: every
    /// task using this handle (or another with the same owner) is then the holder too, and is
    /// granted the lock while another holds it — the mutual exclusion between them is gone.
    #[must_use]
    pub fn with_owner(mut self, owner: &str) -> Self {
        self.owner = Some(owner.to_owned());
        self
    }

    /// With [`Lock::with_owner`], counts each acquire by that owner as one more hold
    /// (`REENTRANT`): it takes as many releases to free the lock. (Without a fixed owner every
    /// acquire is a new owner; a holder re-enters with [`Guard::reenter`].)
    #[must_use]
    pub fn reentrant(mut self, reentrant: bool) -> Self {
        self.settings.reentrant = reentrant;
        self
    }

    /// Renews the lease every third of it while the guard lives (see [`Guard`]).
    #[must_use]
    pub fn with_watchdog(mut self, watchdog: bool) -> Self {
        self.settings.keeping.watchdog = watchdog;
        self
    }

    /// With the watchdog, ends the holding at most `max_hold` after it began.
    #[must_use]
    pub fn with_max_hold(mut self, max_hold: Duration) -> Self {
        self.settings.keeping.max_hold = Some(max_hold);
        self
    }

    /// How a busy lock is waited for (default: in the server).
    #[must_use]
    pub fn with_waiting(mut self, waiting: Waiting) -> Self {
        self.settings.waiting = waiting;
        self
    }

    /// Whether and how a grant reaches the replicas before an acquire returns it, and a
    /// renewal before it counts (default: every replica in the master's in-sync set, which the
    /// master makes sure of before it replies, within its `lock.sync-timeout-ms` — see
    /// [`Sync`]). A grant that does not count is released (by the server when it refused it,
    /// `NOREPLICAS`; by the client when its own `WAIT` counted too few) and the acquire fails
    /// with [`Error::NotReplicated`], or, with a wait budget left, tries again within it; a
    /// renewal that does not count is not counted on ([`Guard::renew`], the watchdog). Releases
    /// never wait. Syncing to fewer replicas than the master's in-sync set is not safe (see
    /// [`Sync::exactly`]).
    #[must_use]
    pub fn with_sync(mut self, sync: Sync) -> Self {
        self.settings.sync = sync;
        self
    }

    /// How long after a wait should have ended the client stops waiting for the server's reply
    /// and finds out for itself whether it got the lock (default 1 s).
    #[must_use]
    pub fn with_timeout_margin(mut self, margin: Duration) -> Self {
        self.settings.margin = margin;
        self
    }

    /// The owner every acquire of this handle uses, if one was set with [`Lock::with_owner`];
    /// `None`: a new one per acquire ([`Guard::owner`] tells it).
    #[must_use]
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The same lock whose acquires are campaigns proclaiming `value` (`LOCK.CAMPAIGN`): an
    /// election's, for one campaign. Its guards hold terms, which end by their epochs
    /// (`LOCK.RESIGN`).
    pub(crate) fn campaigning(mut self, value: &str) -> Self {
        self.value = Some(value.to_owned());
        self
    }

    /// The client it acquires with.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// How its grants and renewals are synced.
    pub(crate) fn sync(&self) -> Sync {
        self.settings.sync
    }

    /// How long after a wait should have ended the client gives up on the server's reply.
    pub(crate) fn margin(&self) -> Duration {
        self.settings.margin
    }

    /// The owner of the next acquisition: the fixed one, or a new one.
    fn next_owner(&self) -> String {
        self.owner.clone().unwrap_or_else(new_owner)
    }

    /// The lock's name (its key); for a set, its first key.
    #[must_use]
    pub fn name(&self) -> &str {
        self.names.first().map_or("", String::as_str)
    }

    /// The names of a set's locks (one name for a single lock).
    #[must_use]
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Takes the lock now, with a lease of `ttl` (ms precision), or `None` when it is busy.
    ///
    /// With sessions on ([`crate::ClientOptions::sessions`]) the grant is tied to the client's
    /// session, opened by the first acquire: the pooled connection it goes over is bound to
    /// the session (`LOCK.SESSION USE`, once per connection and session, in the same round
    /// trip). A session the server no longer has (after a failover or a restart, or ended) is
    /// replaced and the acquire sent again.
    ///
    /// # Errors
    /// The server's error (`WRONGTYPE`, a different `LIMIT`), no connection, the session could
    /// not be opened, [`Error::NotReplicated`] (see [`Lock::with_sync`]),
    /// [`Error::ModuleTooOld`], or [`Error::SessionExpired`]. After a lost reply the client
    /// releases in the background whatever it may have been granted, as it does when the caller
    /// drops this future with the grant in flight.
    pub async fn try_acquire(&self, ttl: Duration) -> Result<Option<Guard>> {
        let owner = self.next_owner();
        let tried = self.try_acquire_as(&owner, ttl).await;
        if let Err(Error::Redis(error)) = &tried
            && is_lost_reply(error)
        {
            self.release_in_background(&owner);
        }
        tried
    }

    async fn try_acquire_as(&self, owner: &str, ttl: Duration) -> Result<Option<Guard>> {
        let mut reopened = 0;
        loop {
            let tying = self.client.tying().await?;
            let granted = Instant::now();
            let command = self.command(owner, ttl, None)?;
            let write = Write {
                key: self.name(),
                command: &command,
                session: tying.as_ref().map(Tying::id),
            };
            let sync = &self.settings.sync;
            // A grant nobody received (the caller dropped this future with the write in flight)
            // is released, as one whose reply was lost is ([`Lock::try_acquire`]).
            let undo = Undo::grant(self.held(owner).release_command(), true);
            let synced = self.client.synced(write, sync, undo);
            let synced = match (synced.await, &tying) {
                (Err(Error::Redis(error)), _) if is_try_again(&error) => return Ok(None),
                // The server has no such session (a failover, a restart): nothing was done.
                (Err(Error::Redis(error)), Some(tying))
                    if is_no_such_session(&error) && reopened < SESSION_REOPENS =>
                {
                    tying.gone().await?;
                    reopened += 1;
                    continue;
                }
                (other, _) => other?,
            };
            let tokens = self.acknowledged(owner, synced, (granted, ttl)).await?;
            return match tokens {
                Some(tokens) => Ok(Some(
                    self.guard(owner, tokens, (ttl, granted), tying).await?,
                )),
                None => Ok(None),
            };
        }
    }

    /// The tokens of a grant once it counts (`None`: nothing was granted). When the client
    /// found it does not (a fixed count's `WAIT`, the AOF), or its reply came only after the
    /// lease it `began` with (for `ttl`) had ended, releases it (owner-checked) and fails with
    /// [`Error::NotReplicated`]. (A grant whose batch the server refused, `NOREPLICAS`, came as
    /// that error, already released.)
    async fn acknowledged(
        &self,
        owner: &str,
        synced: Synced<Tokens>,
        (began, ttl): (Instant, Duration),
    ) -> Result<Option<Vec<u64>>> {
        // A grant acknowledged only after the lease it began with ended is one nobody can
        // count on: the lock may have been handed on meanwhile.
        let ended = began + lease::counted(ttl) <= Instant::now();
        let late =
            || Error::not_replicated("the replicas acknowledged it only after its lease ended");
        if synced.reply.any()
            && let Some(error) = synced.refusal().or_else(|| ended.then(late))
        {
            let _ = self.held(owner).release().await;
            return Err(error);
        }
        Ok(synced.reply.granted())
    }

    /// Takes the lock, waiting for it up to `wait`; `None` when it stayed busy. With
    /// [`Waiting::Server`] the client is queued in the server and handed the lock in arrival
    /// order. If the reply does not come (a dropped connection, the client-side timeout), the
    /// client asks again with this acquisition's owner — a holder gets its token back — so it never
    /// holds a lock it was told it did not get; if it cannot even ask, it releases in the
    /// background.
    ///
    /// # Errors
    /// The server's error, no connection, [`Error::NotReplicated`] for a grant that did not
    /// count with no budget left to try again (see [`Lock::with_sync`]), or
    /// [`Error::ModuleTooOld`].
    pub async fn acquire_timeout(&self, ttl: Duration, wait: Duration) -> Result<Option<Guard>> {
        self.acquire_until(ttl, Some(Instant::now() + wait)).await
    }

    /// Takes the lock, waiting as long as it takes.
    ///
    /// # Errors
    /// The server's error, no connection, [`Error::NotReplicated`] for a grant that did not
    /// count (see [`Lock::with_sync`]), or [`Error::ModuleTooOld`].
    pub async fn acquire(&self, ttl: Duration) -> Result<Guard> {
        loop {
            if let Some(guard) = self.acquire_until(ttl, None).await? {
                return Ok(guard);
            }
        }
    }

    async fn acquire_until(
        &self,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Guard>> {
        let owner = self.next_owner();
        let mut attempt = 0;
        loop {
            let left = deadline.map(|end| end.saturating_duration_since(Instant::now()));
            if left.is_some_and(|left| left.is_zero()) {
                return self.try_acquire_as(&owner, ttl).await;
            }
            let outcome = match self.settings.waiting {
                Waiting::Server => self.wait_in_server(&owner, ttl, deadline).await,
                Waiting::Retry(backoff) => match self.try_acquire_as(&owner, ttl).await {
                    Ok(Some(guard)) => Ok(Attempt::Granted(guard)),
                    Ok(None) => {
                        let pause = backoff.delay(attempt);
                        tokio::time::sleep(left.map_or(pause, |left| pause.min(left))).await;
                        attempt += 1;
                        Ok(Attempt::Again)
                    }
                    Err(error) => Err(error),
                },
            };
            // A grant the replicas did not get, or that came after the session's deadline, was
            // released: try again within the budget.
            let budget_left = deadline.is_some_and(|end| Instant::now() < end);
            let outcome = match outcome {
                Err(Error::NotReplicated { .. } | Error::SessionExpired) if budget_left => {
                    Attempt::Again
                }
                other => other?,
            };
            match outcome {
                Attempt::Granted(guard) => return Ok(Some(guard)),
                Attempt::TimedOut => return Ok(None),
                Attempt::Again => {}
            }
        }
    }

    /// One `LOCK.ACQUIRE ... WAIT` as `owner` until `deadline` (`None`: no limit), on a wait
    /// connection borrowed within the same budget.
    async fn wait_in_server(
        &self,
        owner: &str,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Attempt> {
        let left = || deadline.map(|end| end.saturating_duration_since(Instant::now()));
        let tying = self.client.tying().await?;
        let Some(mut connection) = self.client.wait_connection(self.name(), left()).await? else {
            return Ok(Attempt::TimedOut);
        };
        let left = left();
        if left.is_some_and(|left| left.is_zero()) {
            return Ok(Attempt::TimedOut);
        }
        let wait = Some(left.unwrap_or(Duration::ZERO));
        let command = self.command(owner, ttl, wait)?;
        let write = Write {
            key: self.name(),
            command: &command,
            session: tying.as_ref().map(Tying::id),
        };
        let wait = (left, self.settings.margin);
        let synced = self
            .client
            .wait_synced(&mut connection, write, wait, &self.settings.sync)
            .await;
        drop(connection);
        match synced {
            // The server replies once the in-sync set has the hand-over (normally within a
            // replication round trip of it): the lease began just before (a fixed count's
            // `WAIT` behind the grant comes later).
            Ok(synced) => {
                let granted = synced.answered;
                match self.acknowledged(owner, synced, (granted, ttl)).await? {
                    Some(tokens) => {
                        let guard = self.guard(owner, tokens, (ttl, granted), tying);
                        Ok(Attempt::Granted(guard.await?))
                    }
                    None => Ok(Attempt::TimedOut),
                }
            }
            // The server has no such session (a failover, a restart): nothing was done.
            Err(Error::Redis(error)) if is_no_such_session(&error) => {
                if let Some(tying) = &tying {
                    tying.gone().await?;
                }
                Ok(Attempt::Again)
            }
            Err(Error::Redis(error)) if is_try_again(&error) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok(Attempt::Again)
            }
            // The connection was closed: the server releases a grant it was holding for it
            // until synced; one already made is found by asking again.
            Err(Error::Redis(error)) if is_lost_reply(&error) => self.recover(owner, ttl).await,
            // Refused by the server (`NOREPLICAS`): the grant was released there.
            Err(error) => Err(error),
        }
    }

    /// The reply to a wait never came: the server may have granted the lock meanwhile. Asks
    /// again as the same `owner`, without waiting (a holder gets its token back), over the
    /// shared connection, which reconnects; if that fails too, releases in the background.
    async fn recover(&self, owner: &str, ttl: Duration) -> Result<Attempt> {
        let backoff = Backoff::default();
        let mut attempt = 0;
        loop {
            match self.try_acquire_as(owner, ttl).await {
                Ok(Some(guard)) => return Ok(Attempt::Granted(guard)),
                Ok(None) => return Ok(Attempt::Again),
                Err(_) if attempt + 1 < RECOVERY_ATTEMPTS => {
                    tokio::time::sleep(backoff.delay(attempt)).await;
                    attempt += 1;
                }
                Err(error) => {
                    self.release_in_background(owner);
                    return Err(error);
                }
            }
        }
    }

    /// `LOCK.ACQUIRE name owner ttl-ms [REENTRANT] [SHARED [LIMIT n]] [WAIT wait-ms]`,
    /// `LOCK.MACQUIRE numkeys names... owner ttl-ms [WAIT wait-ms]`, or a campaign's
    /// `LOCK.CAMPAIGN name owner value ttl-ms [WAIT wait-ms]`: the session it is tied to goes
    /// with it apart ([`Write`]), as the connection's binding or `SESSION id`.
    fn command(&self, owner: &str, ttl: Duration, wait: Option<Duration>) -> Result<Cmd> {
        let mut command = match &self.value {
            Some(value) => campaign_command(self.name(), owner, value, ttl)?,
            None => acquire_command(&self.names, owner, ttl, self.settings.mode)?,
        };
        if self.settings.reentrant {
            command.arg("REENTRANT");
        }
        if let Some(wait) = wait {
            command
                .arg("WAIT")
                .arg(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
        }
        Ok(command)
    }

    fn held(&self, owner: &str) -> Held {
        Held {
            client: self.client.clone(),
            names: self.names.clone(),
            owner: owner.to_owned(),
            set: self.settings.mode == Mode::Set,
            sync: self.settings.sync,
            term: None,
            tie: None,
        }
    }

    /// Releases what `owner` may hold, retrying in the background while the server cannot be
    /// reached (after a reply that never came).
    fn release_in_background(&self, owner: &str) {
        let held = self.held(owner);
        tokio::spawn(async move { held.release_eventually().await });
    }

    /// The guard of a grant to `owner` of `tokens`, whose lease of `ttl` began at `granted`,
    /// tied to the session `tying` names, if any.
    ///
    /// # Errors
    /// [`Error::SessionExpired`]: the session's deadline passed before the grant came; the
    /// grant was released (owner-checked).
    async fn guard(
        &self,
        owner: &str,
        tokens: Vec<u64>,
        lease: (Duration, Instant),
        tying: Option<Tying>,
    ) -> Result<Guard> {
        let mut held = self.held(owner);
        if self.value.is_some() {
            // A term ends by its epoch, not by its candidate's name.
            held.term = tokens.first().copied();
        }
        let holding = Holding::Node(held);
        let (mode, keeping) = (self.settings.mode, self.settings.keeping);
        let guard = Guard::start(holding, mode, tokens, lease, keeping, tying);
        if guard.is_held() {
            return Ok(guard);
        }
        let _ = guard.release().await;
        Err(Error::SessionExpired)
    }
}

/// How many times the session is opened again for one acquire the server answered "no such
/// session" (a failover or a restart between opening it and using it).
const SESSION_REOPENS: u32 = 2;

/// How many times a lost reply is followed up before giving up.
const RECOVERY_ATTEMPTS: u32 = 5;

/// How one try at the lock ended.
enum Attempt {
    Granted(Guard),
    TimedOut,
    Again,
}

/// A read-write lock: many readers or one writer, fair between them (a writer queued behind
/// readers goes before readers that come after it). Every acquire on either side is a new
/// owner, as for [`Lock`]; a writer downgrades to a reader, and the only reader upgrades, through
/// its guard ([`Guard::downgrade`], [`Guard::upgrade`]).
///
/// ```no_run
/// # async fn example() -> leasehold_client::Result<()> {
/// use std::time::Duration;
/// use leasehold_client::{Client, ReadWriteLock};
///
/// let client = Client::open("redis://127.0.0.1:6379").await?;
/// let report = ReadWriteLock::new(&client, "report:2026-11");
/// let reading = report.read().acquire_timeout(Duration::from_secs(30), Duration::from_secs(5)).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReadWriteLock {
    read: Lock,
    write: Lock,
}

impl ReadWriteLock {
    /// A read-write lock named `name`, a new owner per acquire.
    #[must_use]
    pub fn new(client: &Client, name: &str) -> Self {
        Self {
            read: Lock::with_mode(client, name, Mode::Shared(None)),
            write: Lock::with_mode(client, name, Mode::Exclusive),
        }
    }

    /// Both sides sync their grants as `sync` says (see [`Lock::with_sync`]).
    #[must_use]
    pub fn with_sync(self, sync: Sync) -> Self {
        Self {
            read: self.read.with_sync(sync),
            write: self.write.with_sync(sync),
        }
    }

    /// Both sides acquire always as `owner`, with the hazard [`Lock::with_owner`] tells.
    #[must_use]
    pub fn with_owner(self, owner: &str) -> Self {
        Self {
            read: self.read.with_owner(owner),
            write: self.write.with_owner(owner),
        }
    }

    /// The reader side (`SHARED`). Configure it like any [`Lock`].
    #[must_use]
    pub fn read(&self) -> &Lock {
        &self.read
    }

    /// The writer side (exclusive).
    #[must_use]
    pub fn write(&self) -> &Lock {
        &self.write
    }
}

/// A semaphore: at most `permits` holders at once, each permit with its own lease and fencing
/// token (`SHARED LIMIT permits`). Every acquire takes a new permit, with an owner of its own
/// (as every acquire of a [`Lock`]).
///
/// ```no_run
/// # async fn example() -> leasehold_client::Result<()> {
/// use std::time::Duration;
/// use leasehold_client::{Client, Semaphore};
///
/// let client = Client::open("redis://127.0.0.1:6379").await?;
/// let pool = Semaphore::new(&client, "pool:db", 10);
/// let permit = pool.acquire(Duration::from_secs(30)).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    permit: Lock,
}

impl Semaphore {
    /// A semaphore named `name` with `permits` permits (1 to 2^31 - 1).
    #[must_use]
    pub fn new(client: &Client, name: &str, permits: u32) -> Self {
        Self {
            permit: Lock::with_mode(client, name, Mode::Shared(Some(permits))),
        }
    }

    /// Configures how permits are taken and kept, as for a [`Lock`].
    #[must_use]
    pub fn with(mut self, configure: impl FnOnce(Lock) -> Lock) -> Self {
        self.permit = configure(self.permit);
        self
    }

    /// Takes a permit now, with a lease of `ttl`, or `None` when all are taken.
    ///
    /// # Errors
    /// As [`Lock::try_acquire`].
    pub async fn try_acquire(&self, ttl: Duration) -> Result<Option<Guard>> {
        self.permit.try_acquire(ttl).await
    }

    /// Takes a permit, waiting up to `wait`.
    ///
    /// # Errors
    /// As [`Lock::acquire_timeout`].
    pub async fn acquire_timeout(&self, ttl: Duration, wait: Duration) -> Result<Option<Guard>> {
        self.permit.acquire_timeout(ttl, wait).await
    }

    /// Takes a permit, waiting as long as it takes.
    ///
    /// # Errors
    /// As [`Lock::acquire`].
    pub async fn acquire(&self, ttl: Duration) -> Result<Guard> {
        self.permit.acquire(ttl).await
    }
}
