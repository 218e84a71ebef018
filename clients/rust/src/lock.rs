//! Locks on one server (or one cluster master): the exclusive [`Lock`], the
//! [`ReadWriteLock`] and the [`Semaphore`], all `LOCK.ACQUIRE` with another mode.

use std::time::Duration;

use redis::{Cmd, RedisError};
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::{Guard, Holding, Keeping};
use crate::owner::new_owner;

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

/// What is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Exclusive,
    Shared(Option<u32>),
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
}

/// A lock on one server (or one cluster master), as one owner. Exclusive unless made by
/// [`ReadWriteLock::read`] or [`Semaphore`].
///
/// Every handle has its own owner (a UUID and a counter), so acquiring again with the same
/// handle is the holder asking again: the token stays and the lease is reset (with
/// [`Lock::reentrant`], it also counts one more hold).
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
    name: String,
    owner: String,
    settings: Settings,
}

impl Lock {
    /// An exclusive lock named `name` (the key) with a new owner.
    #[must_use]
    pub fn new(client: &Client, name: &str) -> Self {
        Self::with_mode(client, name, new_owner(), Mode::Exclusive)
    }

    fn with_mode(client: &Client, name: &str, owner: String, mode: Mode) -> Self {
        Self {
            client: client.clone(),
            name: name.to_owned(),
            owner,
            settings: Settings {
                mode,
                reentrant: false,
                waiting: Waiting::Server,
                keeping: Keeping::default(),
                margin: Duration::from_secs(1),
            },
        }
    }

    /// Acquires as `owner` instead of a new one (1 to 256 bytes): for handles in different
    /// processes that must count as the same holder.
    #[must_use]
    pub fn with_owner(mut self, owner: &str) -> Self {
        owner.clone_into(&mut self.owner);
        self
    }

    /// Counts each acquire by the holder as one more hold (`REENTRANT`): it takes as many
    /// releases to free the lock.
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

    /// How long after a wait should have ended the client stops waiting for the server's reply
    /// and finds out for itself whether it got the lock (default 1 s).
    #[must_use]
    pub fn with_timeout_margin(mut self, margin: Duration) -> Self {
        self.settings.margin = margin;
        self
    }

    /// The owner this handle acquires as.
    #[must_use]
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The lock's name (its key).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes the lock now, with a lease of `ttl` (ms precision), or `None` when it is busy.
    ///
    /// # Errors
    /// The server's error (`WRONGTYPE`, a different `LIMIT`), or no connection.
    pub async fn try_acquire(&self, ttl: Duration) -> Result<Option<Guard>> {
        let granted = Instant::now();
        let token: Option<u64> = match self.client.query(&self.command(ttl, None)?).await {
            Err(Error::Redis(error)) if is_try_again(&error) => None,
            other => other?,
        };
        Ok(token.map(|token| self.guard(token, ttl, granted)))
    }

    /// Takes the lock, waiting for it up to `wait`; `None` when it stayed busy. With
    /// [`Waiting::Server`] the client is queued in the server and handed the lock in arrival
    /// order. If the reply does not come (a dropped connection, the client-side timeout), the
    /// client asks again with the same owner — holders get their token back — so it never
    /// holds a lock it was told it did not get; if it cannot even ask, it releases in the
    /// background.
    ///
    /// # Errors
    /// The server's error, or no connection.
    pub async fn acquire_timeout(&self, ttl: Duration, wait: Duration) -> Result<Option<Guard>> {
        self.acquire_until(ttl, Some(Instant::now() + wait)).await
    }

    /// Takes the lock, waiting as long as it takes.
    ///
    /// # Errors
    /// The server's error, or no connection.
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
        let mut attempt = 0;
        loop {
            let left = deadline.map(|end| end.saturating_duration_since(Instant::now()));
            if left.is_some_and(|left| left.is_zero()) {
                return self.try_acquire(ttl).await;
            }
            let outcome = match self.settings.waiting {
                Waiting::Server => self.wait_in_server(ttl, left).await?,
                Waiting::Retry(backoff) => match self.try_acquire(ttl).await? {
                    Some(guard) => Attempt::Granted(guard),
                    None => {
                        let pause = backoff.delay(attempt);
                        tokio::time::sleep(left.map_or(pause, |left| pause.min(left))).await;
                        attempt += 1;
                        Attempt::Again
                    }
                },
            };
            match outcome {
                Attempt::Granted(guard) => return Ok(Some(guard)),
                Attempt::TimedOut => return Ok(None),
                Attempt::Again => {}
            }
        }
    }

    /// One `LOCK.ACQUIRE ... WAIT` for up to `left` (`None`: no limit).
    async fn wait_in_server(&self, ttl: Duration, left: Option<Duration>) -> Result<Attempt> {
        let command = self.command(ttl, Some(left.unwrap_or(Duration::ZERO)))?;
        match self
            .client
            .query_waiting::<Option<u64>>(&command, left, self.settings.margin)
            .await
        {
            // The server replies the moment it hands the lock over: the lease began then.
            Ok(Some(token)) => Ok(Attempt::Granted(self.guard(token, ttl, Instant::now()))),
            Ok(None) => Ok(Attempt::TimedOut),
            Err(error) if is_try_again(&error) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok(Attempt::Again)
            }
            Err(error) if is_lost_reply(&error) => self.recover(ttl).await,
            Err(error) => Err(error.into()),
        }
    }

    /// The reply to a wait never came: the server may have granted the lock meanwhile. Asks
    /// again with the same owner, without waiting (a holder gets its token back), over the
    /// shared connection, which reconnects; if that fails too, releases in the background.
    async fn recover(&self, ttl: Duration) -> Result<Attempt> {
        let backoff = Backoff::default();
        let mut attempt = 0;
        loop {
            match self.try_acquire(ttl).await {
                Ok(Some(guard)) => return Ok(Attempt::Granted(guard)),
                Ok(None) => return Ok(Attempt::Again),
                Err(_) if attempt + 1 < RECOVERY_ATTEMPTS => {
                    tokio::time::sleep(backoff.delay(attempt)).await;
                    attempt += 1;
                }
                Err(error) => {
                    let held = self.held();
                    tokio::spawn(async move { held.release_eventually().await });
                    return Err(error);
                }
            }
        }
    }

    /// `LOCK.ACQUIRE name owner ttl-ms [REENTRANT] [SHARED [LIMIT n]] [WAIT wait-ms]`.
    fn command(&self, ttl: Duration, wait: Option<Duration>) -> Result<Cmd> {
        let mut command = redis::cmd("LOCK.ACQUIRE");
        command.arg(&self.name).arg(&self.owner).arg(millis(ttl)?);
        if self.settings.reentrant {
            command.arg("REENTRANT");
        }
        if let Mode::Shared(limit) = self.settings.mode {
            command.arg("SHARED");
            if let Some(limit) = limit {
                command.arg("LIMIT").arg(limit);
            }
        }
        if let Some(wait) = wait {
            command
                .arg("WAIT")
                .arg(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
        }
        Ok(command)
    }

    fn held(&self) -> Held {
        Held {
            client: self.client.clone(),
            name: self.name.clone(),
            owner: self.owner.clone(),
        }
    }

    fn guard(&self, token: u64, ttl: Duration, granted: Instant) -> Guard {
        let holding = Holding::Node(self.held());
        Guard::start(holding, token, ttl, granted, self.settings.keeping)
    }
}

/// How many times a lost reply is followed up before giving up.
const RECOVERY_ATTEMPTS: u32 = 5;

/// How one try at the lock ended.
enum Attempt {
    Granted(Guard),
    TimedOut,
    Again,
}

/// A lease in whole ms, at least 1.
pub(crate) fn millis(ttl: Duration) -> Result<u64> {
    u64::try_from(ttl.as_millis())
        .ok()
        .filter(|ms| *ms > 0)
        .ok_or(Error::Lease(ttl))
}

/// `TRYAGAIN`: the server could not issue a fencing token yet; a moment later it can.
fn is_try_again(error: &RedisError) -> bool {
    error.code() == Some("TRYAGAIN")
}

/// The reply may have been lost: the server may or may not have done it.
fn is_lost_reply(error: &RedisError) -> bool {
    error.is_timeout() || error.is_io_error() || error.is_connection_dropped()
}

/// One owner's holding of one lock on one server.
#[derive(Clone)]
pub(crate) struct Held {
    client: Client,
    name: String,
    owner: String,
}

impl Held {
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
    async fn release_eventually(&self) {
        for attempt in 0..20 {
            if self.release().await.is_ok() {
                return;
            }
            tokio::time::sleep(Backoff::default().delay(attempt)).await;
        }
    }
}

/// A read-write lock: many readers or one writer, fair between them (a writer queued behind
/// readers goes before readers that come after it). Both sides share the handle's owner, so a
/// writer can downgrade to a reader, and the only reader can upgrade.
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
    /// A read-write lock named `name` with a new owner.
    #[must_use]
    pub fn new(client: &Client, name: &str) -> Self {
        let owner = new_owner();
        Self {
            read: Lock::with_mode(client, name, owner.clone(), Mode::Shared(None)),
            write: Lock::with_mode(client, name, owner, Mode::Exclusive),
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
/// token (`SHARED LIMIT permits`). Every acquire takes a new permit, with an owner of its own.
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
            permit: Lock::with_mode(client, name, String::new(), Mode::Shared(Some(permits))),
        }
    }

    /// Configures how permits are taken and kept, as for a [`Lock`].
    #[must_use]
    pub fn with(mut self, configure: impl FnOnce(Lock) -> Lock) -> Self {
        self.permit = configure(self.permit);
        self
    }

    fn next_permit(&self) -> Lock {
        self.permit.clone().with_owner(&new_owner())
    }

    /// Takes a permit now, with a lease of `ttl`, or `None` when all are taken.
    ///
    /// # Errors
    /// As [`Lock::try_acquire`].
    pub async fn try_acquire(&self, ttl: Duration) -> Result<Option<Guard>> {
        self.next_permit().try_acquire(ttl).await
    }

    /// Takes a permit, waiting up to `wait`.
    ///
    /// # Errors
    /// As [`Lock::acquire_timeout`].
    pub async fn acquire_timeout(&self, ttl: Duration, wait: Duration) -> Result<Option<Guard>> {
        self.next_permit().acquire_timeout(ttl, wait).await
    }

    /// Takes a permit, waiting as long as it takes.
    ///
    /// # Errors
    /// As [`Lock::acquire`].
    pub async fn acquire(&self, ttl: Duration) -> Result<Guard> {
        self.next_permit().acquire(ttl).await
    }
}
