//! What an acquire hands back: the holding, its fencing token, and what keeps it — a watchdog
//! that renews the lease, a signal that says when it is lost, and release on every path.
//!
//! The watchdog avoids the bugs lock libraries are known for: it stops for good on release, on
//! drop, and as soon as a renewal is refused (it never re-acquires, so it cannot keep a dead
//! holder's lock or bring back an expired one — Redisson #1626, #7272, redis-semaphore #175);
//! a renewal that did not count is retried soon, again and again — at once on a fresh
//! connection when its connection was dead (a blip), 0.5 s after one the replicas did not
//! acknowledge (Redisson #2515, #3194) — and the lock counts as lost only once the lease it
//! last renewed *and synced* has run out; and loss is told to the program through
//! [`Guard::lost`] (Redisson #4698).

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, FromRedisValue};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::followed_by;
use crate::error::{Error, Result};
use crate::held::{Held, Mode};
use crate::lease::Lease;
use crate::pool::is_lost_reply;
use crate::quorum::Quorum;
use crate::session::{Tie, Tying};
use crate::sync::released_by_server;

/// What a guard holds.
pub(crate) enum Holding {
    /// A lock on one server (or one cluster master).
    Node(Held),
    /// A Redlock holding on a majority of independent masters.
    Quorum(Quorum),
}

impl Holding {
    /// The owner that holds it.
    fn owner(&self) -> &str {
        match self {
            Self::Node(held) => held.owner(),
            Self::Quorum(quorum) => quorum.owner(),
        }
    }

    /// Resets the lease to `ttl`: true while still held, false once refused (lost); an error
    /// when it does not count ([`Error::NotReplicated`], no connection).
    async fn renew(&self, ttl: Duration) -> Result<bool> {
        match self {
            Self::Node(held) => held.renew(ttl).await,
            Self::Quorum(quorum) => Ok(quorum.renew(ttl).await),
        }
    }

    /// Ends the holding: true if it still held the lock.
    async fn release(&self) -> Result<bool> {
        match self {
            Self::Node(held) => held.release().await,
            Self::Quorum(quorum) => Ok(quorum.release().await),
        }
    }

    /// Its place in the client's session, when it is tied to one.
    fn tie(&self) -> Option<&Tie> {
        match self {
            Self::Node(held) => held.tie.as_ref(),
            Self::Quorum(_) => None,
        }
    }
}

/// How a guard keeps its lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keeping {
    /// Renew the lease every third of it (the watchdog). Off by default.
    pub watchdog: bool,
    /// With the watchdog, stop renewing so that the holding ends this long after it began.
    pub max_hold: Option<Duration>,
}

/// A held lock. Its fencing token goes with every write to the guarded resource.
///
/// Release it with [`Guard::release`] to learn whether it was still held; dropping it releases
/// it too, in the background, as well as it can (it needs a Tokio runtime for that). With the
/// watchdog on, the lease is renewed every third of it until release, drop, a refused renewal
/// (the lock is no longer held: lost at once), or the cap on the hold time. A renewal that did
/// not count — the replicas did not acknowledge it, or its connection was dead — is tried
/// again soon (0.5 s later, or at once on a fresh connection after no reply), until one counts
/// or the lease last counted ([`Guard::lease_end`]) ends: then the guard is lost.
#[must_use = "dropping a guard releases the lock"]
pub struct Guard {
    holding: Arc<Holding>,
    mode: Mode,
    /// One token, or a set's, one per key.
    tokens: Vec<u64>,
    lease: Arc<Lease>,
    lost: Lost,
    ended: Arc<watch::Sender<bool>>,
    watchdog: Option<JoinHandle<()>>,
    released: bool,
}

/// Completes when a guard's lock is no longer held: lost (a renewal was refused, the lease ran
/// out without one, or the client's session ran past its deadline or was closed — see
/// [`crate::ClientOptions::sessions`]), or released. Cloneable, so a task doing the guarded
/// work can stop when it fires.
#[derive(Clone)]
pub struct Lost(watch::Receiver<bool>);

impl Lost {
    /// Waits until the lock is no longer held.
    pub async fn wait(mut self) {
        let _ = self.0.wait_for(|ended| *ended).await;
    }

    /// True while the lock is not known to be lost or released.
    #[must_use]
    pub fn is_held(&self) -> bool {
        !*self.0.borrow()
    }
}

impl Guard {
    /// A guard for a holding just granted in `mode` with `tokens` (one, or a set's), whose
    /// lease of `ttl` began at `granted` (when the acquire was sent; for a wait, when the
    /// grant's reply came, which the server sends once its in-sync set has the grant — normally
    /// within a replication round trip), tied to the session
    /// `tying` names when the grant named one. A guard whose session's deadline has passed
    /// already is lost from the start ([`Guard::is_held`] is false).
    pub(crate) fn start(
        holding: Holding,
        mode: Mode,
        tokens: Vec<u64>,
        (ttl, granted): (Duration, Instant),
        keeping: Keeping,
        tying: Option<Tying>,
    ) -> Self {
        let lease = Arc::new(Lease::new(granted, ttl));
        Self::keep(
            holding,
            mode,
            tokens,
            (ttl, granted),
            keeping,
            (lease, tying),
        )
    }

    /// [`Guard::start`] on `lease`, which another guard of the same holding may share.
    fn keep(
        mut holding: Holding,
        mode: Mode,
        tokens: Vec<u64>,
        (ttl, granted): (Duration, Instant),
        keeping: Keeping,
        (lease, tying): (Arc<Lease>, Option<Tying>),
    ) -> Self {
        let (ended, lost) = watch::channel(false);
        let ended = Arc::new(ended);
        if let Holding::Node(held) = &mut holding {
            // A re-entry's holding comes with the other guard's tie: it gets one of its own.
            held.tie = None;
            if let Some(tying) = tying {
                let tie = tying.tie(held.clone(), Arc::clone(&lease), Arc::clone(&ended));
                held.tie = Some(tie);
            }
        }
        let holding = Arc::new(holding);
        let watchdog = keeping.watchdog.then(|| {
            tokio::spawn(watchdog(
                Arc::clone(&holding),
                Arc::clone(&lease),
                (ttl, granted, keeping.max_hold),
                Arc::clone(&ended),
            ))
        });
        Self {
            holding,
            mode,
            tokens,
            lease,
            lost: Lost(lost),
            ended,
            watchdog,
            released: false,
        }
    }

    /// The fencing token of this holding: larger than every token of an earlier holding. (An
    /// [`Guard::upgrade`] gives the holding a new one.) For a set, the largest of its tokens:
    /// the one its newly taken locks share.
    #[must_use]
    pub fn token(&self) -> u64 {
        self.tokens.iter().copied().max().unwrap_or(0)
    }

    /// The fencing tokens, one per lock: for a set ([`crate::Lock::multi`]) in the order of its
    /// keys — a key the owner held before keeps its older token — otherwise just
    /// [`Guard::token`].
    #[must_use]
    pub fn tokens(&self) -> &[u64] {
        &self.tokens
    }

    /// The owner of this holding: new for each acquire, unless the lock was given one
    /// ([`crate::Lock::with_owner`]).
    #[must_use]
    pub fn owner(&self) -> &str {
        self.holding.owner()
    }

    /// True while the lock is not known to be lost or released — for a holding tied to the
    /// client's session, also while the session's deadline has not passed (see
    /// [`Guard::lease_end`]).
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.lost.is_held() && !self.session_lost()
    }

    /// When the lease this holder counts on ends, on the client's clock: the grant's (its lease
    /// began when the acquire was sent), or the last renewal's that counted — one the replicas
    /// acknowledged as the lock's [`crate::Sync`] asks — less a clock drift allowance of 1% of
    /// the TTL and 2 ms ([`crate::redlock::DRIFT_FACTOR`]). A renewal that did not count leaves
    /// it as it was, or earlier.
    ///
    /// A holding tied to the client's session ([`crate::ClientOptions::sessions`]) counts no
    /// longer than the session's deadline either: the last confirmed heartbeat's send time plus
    /// the grace less its drift allowance (1% and 2 ms), after which the server may end the
    /// session and release the lock. This is the earlier of the two; once the deadline passes
    /// without a newer heartbeat, the guard is lost ([`Guard::lost`]) and stays lost.
    #[must_use]
    pub fn lease_end(&self) -> Instant {
        let end = self.lease.end();
        let deadline = self.holding.tie().and_then(Tie::deadline);
        deadline.map_or(end, |deadline| end.min(deadline))
    }

    /// True once the client's session reported this holding lost (its deadline passed, or the
    /// client closed the session).
    fn session_lost(&self) -> bool {
        self.holding.tie().is_some_and(Tie::is_lost)
    }

    /// One more hold of this holding (`REENTRANT`, lease reset to `ttl`): same owner, token and
    /// mode, with a guard of its own whose release (or drop) gives that hold back — the lock
    /// is free once every hold is. `None` when this owner no longer holds the lock. The new
    /// guard has no watchdog: this one's, if on, keeps the lease. Synced like a grant.
    ///
    /// # Errors
    /// [`Error::NotReplicated`] (the new hold was given back: by the server, or by the client
    /// when its own `WAIT` counted too few), no connection, a Redlock holding
    /// ([`Error::NotOnRedlock`]) or a set ([`Error::NotOnSet`]).
    pub async fn reenter(&self, ttl: Duration) -> Result<Option<Guard>> {
        let held = self.node("reenter")?;
        let sent = Instant::now();
        let token = self.counted(sent, ttl, held.acquire(ttl, self.mode, true).await)?;
        let holding = || Holding::Node(held.clone());
        let keeping = Keeping::default();
        Ok(token.map(|token| {
            // The server keeps one lease per owner, and one tie: both guards count on them.
            let shared = (
                Arc::clone(&self.lease),
                held.tie.as_ref().and_then(Tie::tying),
            );
            Self::keep(
                holding(),
                self.mode,
                vec![token],
                (ttl, sent),
                keeping,
                shared,
            )
        }))
    }

    /// The outcome of a write sent at `sent` that resets this holding's lease to `ttl`: once
    /// it counted, the lease the holder counts on moves; when it did not (not acknowledged,
    /// no reply), the master may still have made it, so the lease is at most that.
    fn counted<T>(
        &self,
        sent: Instant,
        ttl: Duration,
        outcome: Result<Option<T>>,
    ) -> Result<Option<T>> {
        match &outcome {
            Ok(Some(_)) => self.lease.renewed(sent, ttl),
            Ok(None) => {}
            Err(_) => self.lease.unsure(sent, ttl),
        }
        outcome
    }

    /// Turns a writer's holding into a reader's (same owner and token, lease reset to `ttl`),
    /// letting other readers in. False when this owner no longer holds the lock. Synced like a
    /// grant.
    ///
    /// # Errors
    /// [`Error::NotReplicated`]: refused by the server (`NOREPLICAS`), the changed holding given
    /// back as a grant that did not count is (one hold of this owner's released: the lock,
    /// unless it was re-entered) — the guard is then lost
    /// ([`Guard::lost`]); found short by the client (a fixed count's `WAIT`), the master made
    /// the change and the guard keeps its mode and token: release it. Or no connection, a
    /// Redlock holding ([`Error::NotOnRedlock`]) or a set ([`Error::NotOnSet`]).
    pub async fn downgrade(&mut self, ttl: Duration) -> Result<bool> {
        self.change_mode("downgrade", ttl, Mode::Shared(None)).await
    }

    /// Turns the only reader's holding into a writer's (same owner, lease reset to `ttl`) with
    /// a new token, since exclusive writing starts now. False, with the reader's holding kept,
    /// while others read too; false also when this owner no longer holds the lock. Synced like
    /// a grant.
    ///
    /// # Errors
    /// As [`Guard::downgrade`].
    pub async fn upgrade(&mut self, ttl: Duration) -> Result<bool> {
        self.change_mode("upgrade", ttl, Mode::Exclusive).await
    }

    async fn change_mode(&mut self, what: &'static str, ttl: Duration, mode: Mode) -> Result<bool> {
        let sent = Instant::now();
        let changed = self.node(what)?.acquire(ttl, mode, false).await;
        if let Err(error) = &changed
            && released_by_server(error)
        {
            self.ended.send_replace(true);
        }
        let Some(token) = self.counted(sent, ttl, changed)? else {
            return Ok(false);
        };
        self.mode = mode;
        self.tokens = vec![token];
        Ok(true)
    }

    /// The single-server holding of one lock, for `what` only it supports.
    fn node(&self, what: &'static str) -> Result<&Held> {
        match &*self.holding {
            Holding::Node(held) if held.set => Err(Error::NotOnSet(what)),
            Holding::Node(held) => Ok(held),
            Holding::Quorum(_) => Err(Error::NotOnRedlock(what)),
        }
    }

    /// Runs `command` only while this holding holds the lock, with its fencing token
    /// (`LOCK.GUARD name owner TOKEN token SYNC command ...`): the server checks and runs it in
    /// one step, so a holder whose lease ended, or whose lock was lost and taken again (by
    /// anyone, its own owner too), changes nothing. Returns the command's reply. Synced like a
    /// renewal (the lock's [`crate::Sync`]): by default the reply comes once the master's in-sync
    /// replicas have the write (a command that does not write replies at once). In Redis
    /// Cluster the command's keys must be in the lock's slot (hash tags: `{order:42}:lock`,
    /// `{order:42}:stock`).
    ///
    /// ```no_run
    /// # async fn example(guard: leasehold_client::Guard) -> leasehold_client::Result<()> {
    /// let left: i64 = guard.guard(redis::cmd("DECRBY").arg("stock:42").arg(1)).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the server refused it — the lock is free, held by another owner,
    /// or held with another token: the command did not run; [`Error::NotReplicated`] when it
    /// ran on the master but the replicas did not acknowledge it in time (a failover may lose
    /// its write), or no sync connection was free (nothing was sent); the command's own error;
    /// a set ([`Error::NotOnSet`]: `LOCK.GUARD` checks one lock) or a Redlock holding
    /// ([`Error::NotOnRedlock`]); no connection, no reply in time, or a reply that is not a `T`.
    #[doc(alias = "LOCK.GUARD")]
    pub async fn guard<T: FromRedisValue>(&self, command: &Cmd) -> Result<T> {
        let held = self.node("guard")?;
        let mut guarded = redis::cmd("LOCK.GUARD");
        guarded
            .arg(held.name())
            .arg(held.owner())
            .arg("TOKEN")
            .arg(self.token())
            .arg(held.sync.option());
        let guarded = followed_by(guarded, command);
        held.client.guarded(held.name(), &guarded, &held.sync).await
    }

    /// Runs `command` through the fence `fence` with this holding's fencing token (a set's
    /// largest), as [`crate::Client::fenced`] does: only when no larger token ran a command
    /// through it before, and the fence then keeps this token. Synced as [`Guard::guard`] is.
    /// For a Redlock holding, whose fence is on a server of your choosing, use
    /// [`crate::Client::fenced`] with [`Guard::token`].
    ///
    /// # Errors
    /// [`Error::Stale`] when a larger token wrote first (the command did not run);
    /// [`Error::NotReplicated`] as [`Guard::guard`]; the command's own error; a Redlock holding
    /// ([`Error::NotOnRedlock`]); no connection, no reply in time, or a reply that is not a `T`.
    #[doc(alias = "LOCK.FENCED")]
    pub async fn fenced<T: FromRedisValue>(&self, fence: &str, command: &Cmd) -> Result<T> {
        let Holding::Node(held) = &*self.holding else {
            return Err(Error::NotOnRedlock("fenced"));
        };
        held.client
            .fenced_with(fence, self.token(), command, &held.sync)
            .await
    }

    /// Completes when the lock is known to be lost (see [`Lost`]).
    pub async fn lost(&self) {
        self.lost.clone().wait().await;
    }

    /// A [`Lost`] to hand to the task doing the guarded work.
    #[must_use]
    pub fn lost_signal(&self) -> Lost {
        self.lost.clone()
    }

    /// Resets the lease to `ttl` from now, synced to the replicas like a grant (the lock's
    /// [`crate::Sync`]); once they acknowledged it, [`Guard::lease_end`] moves. Returns false,
    /// and the guard counts as lost, when the lock is no longer held: it expired, or someone
    /// deleted it. A lost lock is never taken back.
    ///
    /// # Errors
    /// [`Error::NotReplicated`]: the master renewed it but the replicas did not acknowledge in
    /// time (the server refused it, `NOREPLICAS`, or a fixed count's `WAIT` counted too few),
    /// so the renewal does not count (a failover may lose it) and the lease end stays the
    /// last synced one — or earlier, `ttl` from now, when `ttl` is shorter than what was left:
    /// the master may have made the renewal. Or the server could not be reached (the same).
    /// Either way the guard still counts as held until [`Guard::lease_end`].
    pub async fn renew(&self, ttl: Duration) -> Result<bool> {
        if self.session_lost() {
            return Ok(false);
        }
        let sent = Instant::now();
        let renewed = self.holding.renew(ttl).await.map(|held| held.then_some(()));
        let renewed = self.counted(sent, ttl, renewed)?.is_some();
        if !renewed {
            self.ended.send_replace(true);
        }
        Ok(renewed)
    }

    /// Stops the watchdog, then releases the lock. Returns whether it was still held: false
    /// means the lease had run out (someone else may have held it since).
    ///
    /// # Errors
    /// The server could not be reached: the lock stays held until its lease runs out.
    pub async fn release(mut self) -> Result<bool> {
        self.stop_watchdog();
        self.untie();
        self.released = true;
        self.ended.send_replace(true);
        self.holding.release().await
    }

    /// The holding is known to be gone (the server said so in reply to another write of its
    /// holder, an election's `LOCK.PROCLAIM`): lost now, the watchdog stops.
    pub(crate) fn lose(&self) {
        self.ended.send_replace(true);
    }

    fn stop_watchdog(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
    }

    /// The guard ends: the client's session no longer keeps its holding.
    fn untie(&self) {
        if let Some(tie) = self.holding.tie() {
            tie.untie();
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.stop_watchdog();
        self.untie();
        self.ended.send_replace(true);
        if self.released {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let holding = Arc::clone(&self.holding);
            runtime.spawn(async move {
                let _ = holding.release().await;
            });
        }
    }
}

/// Renews the lease every third of `ttl` until a renewal is refused, the last lease that counted
/// (granted, or renewed and synced) runs out without another, `max_hold` after `granted`, or
/// `ended` is told some other way (the client's session reported the holding lost); then tells
/// `ended`. A renewal that did not count is tried again soon, again and again, as [`Retry`]
/// says, until one counts or that lease runs out. A holding tied to a session is renewed tied
/// to it (on a connection bound to it, [`crate::binding`]).
async fn watchdog(
    holding: Arc<Holding>,
    lease: Arc<Lease>,
    keeping: (Duration, Instant, Option<Duration>),
    ended: Arc<watch::Sender<bool>>,
) {
    let mut lost = ended.subscribe();
    tokio::select! {
        () = renewing(&holding, &lease, keeping) => {}
        // Lost another way (the client's session ran past its deadline): no more renewals.
        _ = lost.wait_for(|ended| *ended) => {}
    }
    ended.send_replace(true);
}

/// The watchdog's renewals; returns when the holding ends.
async fn renewing(
    holding: &Holding,
    lease: &Lease,
    (ttl, granted, max_hold): (Duration, Instant, Option<Duration>),
) {
    let stop_at = max_hold.map(|cap| granted + cap);
    let mut retry = Retry::new(ttl);
    let mut next = granted + ttl / 3;
    loop {
        let held_until = lease.end();
        tokio::time::sleep_until(next.min(held_until)).await;
        let sent = Instant::now();
        let term = stop_at.map_or(ttl, |stop| ttl.min(stop.saturating_duration_since(sent)));
        if term.is_zero() || sent >= lease.end() {
            break;
        }
        let renewed = tokio::select! {
            renewed = holding.renew(term) => renewed,
            // Still waiting for the replicas when the lease runs out: lost, unless an explicit
            // renewal moved it meanwhile.
            () = tokio::time::sleep_until(held_until) => continue,
        };
        match renewed {
            Ok(true) => {
                lease.renewed(sent, term);
                if stop_at.is_some_and(|stop| sent + term >= stop) {
                    // The last renewal reached the cap: the holding ends with its lease.
                    tokio::time::sleep_until(lease.end()).await;
                    break;
                }
                retry = Retry::new(ttl);
                next = sent + ttl / 3;
            }
            Ok(false) => break,
            Err(error) => {
                lease.unsure(sent, term);
                next = Instant::now() + retry.after(&error);
            }
        }
    }
}

/// The longest pause between two renewal attempts of the watchdog when the first got a reply
/// but did not count: 0.5 s. A synced attempt has already waited up to the sync timeout for
/// the replicas, so a holder whose replica was just lost tries again every 1.5 s (with the
/// default 1 s timeout) until the master drops that replica from its in-sync set.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// When the watchdog tries again after a renewal that did not count.
struct Retry {
    /// The pause after an attempt that got a reply: [`RETRY_PAUSE`], or a tenth of the lease
    /// when that is shorter.
    pause: Duration,
    /// Whether the last attempt got no reply either.
    unanswered: bool,
}

impl Retry {
    /// For renewals of a lease of `ttl`, after one that counted (or the grant).
    fn new(ttl: Duration) -> Self {
        Self {
            pause: RETRY_PAUSE.min(ttl / 10),
            unanswered: false,
        }
    }

    /// How long to wait before the next attempt after one that failed with `error`. At once
    /// after the first that got no reply (its connection was dead — a blip, a proxy restart, a
    /// `CLIENT KILL` — and was dropped: the next attempt goes on a fresh one); the pause after
    /// one that got a reply (not acknowledged by the replicas, a server's error) and after a
    /// second in a row without one (the server is down: no busy loop).
    fn after(&mut self, error: &Error) -> Duration {
        let unanswered = matches!(error, Error::Redis(error) if is_lost_reply(error));
        let at_once = unanswered && !self.unanswered;
        self.unanswered = unanswered;
        if at_once { Duration::ZERO } else { self.pause }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A renewal whose connection was dead: no reply.
    fn unanswered() -> Error {
        Error::Redis(std::io::Error::from(std::io::ErrorKind::ConnectionReset).into())
    }

    /// A renewal the replicas did not acknowledge in time.
    fn not_counted() -> Error {
        Error::not_replicated("not every in-sync replica acknowledged within 1000 ms")
    }

    #[test]
    fn a_renewal_that_did_not_count_is_tried_again_half_a_second_later_however_long_the_lease() {
        let half_a_second = Duration::from_millis(500);
        for lease in [Duration::from_secs(30), Duration::from_secs(3_600)] {
            let mut retry = Retry::new(lease);
            for _ in 0..3 {
                assert_eq!(retry.after(&not_counted()), half_a_second, "{lease:?}");
            }
        }
        let mut short = Retry::new(Duration::from_secs(2));
        assert_eq!(
            short.after(&not_counted()),
            Duration::from_millis(200),
            "a tenth of a shorter lease"
        );
    }

    #[test]
    fn a_renewal_without_a_reply_is_tried_again_at_once_and_a_second_one_after_the_pause() {
        let mut retry = Retry::new(Duration::from_secs(30));
        let pause = Duration::from_millis(500);
        assert_eq!(retry.after(&unanswered()), Duration::ZERO);
        assert_eq!(retry.after(&unanswered()), pause, "the server is down");
        assert_eq!(retry.after(&unanswered()), pause);
        assert_eq!(retry.after(&not_counted()), pause);
        assert_eq!(
            retry.after(&unanswered()),
            Duration::ZERO,
            "the first without a reply after one with a reply"
        );
    }
}
