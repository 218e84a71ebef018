//! Elections (`LOCK.CAMPAIGN`, `LOCK.LEADER`, `LOCK.OBSERVE`, `LOCK.PROCLAIM`,
//! `LOCK.RESIGN`): a leader role held as a lock is. A campaign is an exclusive acquire with a
//! value, on the lock's own path ([`crate::Lock`]) — waiting in the server in arrival order,
//! grants synced to the in-sync replicas, the client's session, lost-reply recovery — and the
//! term it wins is kept by a [`Guard`]: the watchdog renews it (`LOCK.RENEW name candidate
//! ttl-ms`), its token is the term's epoch, and its lost signal fires before another candidate
//! can be elected. A term ends by its epoch (`LOCK.RESIGN`), never by its candidate's name.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use redis::{FromRedisValue, ParsingError, Value};
use tokio::time::Instant;

use crate::batch::Undo;
use crate::binding::Write;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::{Guard, Lost};
use crate::lock::Lock;
use crate::pool::is_lost_reply;
use crate::sync::Sync;

/// How long one `LOCK.OBSERVE ... BLOCK` waits in the server before the observer asks again (on
/// a wait connection lent back in between): a dead connection shows within this and the margin.
const OBSERVE_BLOCK: Duration = Duration::from_secs(5);

/// An election on one server (or one cluster master): candidates campaign to lead it, one at a
/// time, each term with an **epoch** — a fencing token, larger than every earlier term's — and
/// a value its leader proclaims (its address, say); anyone asks who leads
/// ([`Election::leader`]) or follows every change, a vacancy included ([`Election::observe`]).
///
/// A campaign ([`Election::campaign`]) is `LOCK.CAMPAIGN name candidate value ttl-ms`, the
/// lock's acquire with a value: it waits in the server, in arrival order, and returns a
/// [`Leadership`] once the candidate leads — synced to the master's in-sync replicas, tied to
/// the client's session and renewed by a watchdog every third of the lease, exactly as a
/// [`crate::Lock`]'s guard with the same options (the defaults: [`Sync::to_replicas`],
/// sessions on, [`crate::ClientOptions::sessions`]). A leader whose process dies or is cut off
/// is replaced a session grace later, and is told first ([`Leadership::lost`]). Every campaign
/// is a new candidate (a UUID and a counter), unless the election was given one
/// ([`Election::with_candidate`]).
///
/// ```no_run
/// # async fn example() -> leasehold_client::Result<()> {
/// use std::time::Duration;
/// use leasehold_client::{Client, Election};
///
/// let client = Client::open("redis://127.0.0.1:6379").await?;
/// let election = Election::new(&client, "cron:leader", Duration::from_secs(15))
///     .with_candidate("host-a");
/// let leadership = election.campaign("10.0.0.1:8080").await?; // waits in line
/// tokio::select! {
///     () = leadership.lost() => { /* replaced: stop; the next leader has a larger epoch */ }
///     () = async { /* the nightly jobs, every write carrying leadership.epoch() */ } => {}
/// }
/// leadership.resign().await?; // the next candidate leads at once
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    /// The lock whose holder leads: exclusive, watched.
    lock: Lock,
    ttl: Duration,
}

impl Election {
    /// The election `name` (its key), whose terms have a lease of `ttl` (ms precision, at least
    /// 1 ms), renewed every third of it while the [`Leadership`] lives; a new candidate per
    /// campaign.
    #[must_use]
    pub fn new(client: &Client, name: &str, ttl: Duration) -> Self {
        Self {
            lock: Lock::new(client, name).with_watchdog(true),
            ttl,
        }
    }

    /// Campaigns always as `candidate` (1 to 256 bytes: the host's name, say, which
    /// [`Election::leader`] and observers then show) instead of a new candidate each time. The
    /// hazard, as for [`crate::Lock::with_owner`]: two campaigns as the same candidate are one
    /// — the second gets the first's term at once (the same epoch, with its own value and
    /// lease), and ending either leadership (resign, drop) ends the term for both.
    #[must_use]
    pub fn with_candidate(mut self, candidate: &str) -> Self {
        self.lock = self.lock.with_owner(candidate);
        self
    }

    /// Whether and how a term reaches the replicas before a campaign returns it, and a renewal
    /// before it counts: as for a lock ([`crate::Lock::with_sync`]; default
    /// [`Sync::to_replicas`]), and a proclaim as a renewal ([`Leadership::proclaim`]).
    #[must_use]
    pub fn with_sync(mut self, sync: Sync) -> Self {
        self.lock = self.lock.with_sync(sync);
        self
    }

    /// How long after a wait should have ended the client stops waiting for the server's reply
    /// and finds out for itself whether its candidate leads (default 1 s); also how long after
    /// an observer's wait in the server ([`Observer::next`]) it gives up on the reply.
    #[must_use]
    pub fn with_timeout_margin(mut self, margin: Duration) -> Self {
        self.lock = self.lock.with_timeout_margin(margin);
        self
    }

    /// The election's name (its key).
    #[must_use]
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The candidate every campaign uses, if one was set ([`Election::with_candidate`]);
    /// `None`: a new one per campaign ([`Leadership::candidate`] tells it).
    #[must_use]
    pub fn candidate(&self) -> Option<&str> {
        self.lock.owner()
    }

    /// The lease of a term.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Leads now, proclaiming `value` (0 to 65 536 bytes), or `None` when another candidate
    /// leads. A candidate that leads already (a fixed one, [`Election::with_candidate`]) keeps
    /// its term and epoch, with `value` and a new lease.
    ///
    /// # Errors
    /// As [`crate::Lock::try_acquire`]; the server's error for a value too long, or a key that
    /// is not a lock (`WRONGTYPE`).
    pub async fn try_campaign(&self, value: &str) -> Result<Option<Leadership>> {
        let lock = self.lock.clone().campaigning(value);
        let guard = lock.try_acquire(self.ttl).await?;
        Ok(guard.map(|guard| Leadership::new(guard, value, &lock)))
    }

    /// Leads, proclaiming `value`, waiting in the server up to `wait` for the candidates ahead
    /// to end their terms (in arrival order); `None` when another still leads then. A lost
    /// reply is recovered as for a lock: the client campaigns again as the same candidate (a
    /// leader gets its term back), or, when it cannot even ask, releases what the candidate may
    /// have won in the background (`LOCK.RELEASE name candidate`: the epoch is not known).
    ///
    /// # Errors
    /// As [`crate::Lock::acquire_timeout`].
    pub async fn campaign_timeout(
        &self,
        value: &str,
        wait: Duration,
    ) -> Result<Option<Leadership>> {
        let lock = self.lock.clone().campaigning(value);
        let guard = lock.acquire_timeout(self.ttl, wait).await?;
        Ok(guard.map(|guard| Leadership::new(guard, value, &lock)))
    }

    /// Leads, proclaiming `value`, waiting as long as it takes.
    ///
    /// # Errors
    /// As [`crate::Lock::acquire`].
    pub async fn campaign(&self, value: &str) -> Result<Leadership> {
        let lock = self.lock.clone().campaigning(value);
        let guard = lock.acquire(self.ttl).await?;
        Ok(Leadership::new(guard, value, &lock))
    }

    /// Who leads now (`LOCK.LEADER`), or the vacant state ([`LeaderState::is_vacant`]) when
    /// nobody does. Any exclusive lock's holder counts as a leader, with an empty value.
    ///
    /// # Errors
    /// No connection (a call whose connection was dead — a blip — is sent once more at once,
    /// on a fresh one), or the server's error (`WRONGTYPE`).
    pub async fn leader(&self) -> Result<LeaderState> {
        let mut command = redis::cmd("LOCK.LEADER");
        command.arg(self.name());
        let reply: Observed = read(self.lock.client(), &command).await?;
        Ok(reply.0.map_or_else(LeaderState::vacant, |(state, _)| state))
    }

    /// Follows who leads (`LOCK.OBSERVE`): the current state first, then every change after
    /// what was seen, a vacancy always before the next leader ([`Observer`]).
    #[must_use]
    pub fn observe(&self) -> Observer {
        Observer {
            client: self.lock.client().clone(),
            name: self.name().to_owned(),
            last: None,
            margin: self.lock.margin(),
        }
    }
}

/// A term won by a campaign: its epoch, its value, and what keeps it — the watchdog, renewing
/// its lease every third of it, and a [`Lost`] signal that fires before another candidate can
/// be elected (a renewal refused, the lease last counted ran out, or the client's session ran
/// past its deadline: as for a [`Guard`]). Dropping it resigns in the background.
///
/// Pass [`Leadership::epoch`] with every write the leader makes: a store that keeps the largest
/// epoch it saw and refuses smaller ones fences out a leader that was replaced while it paused.
#[must_use = "dropping a leadership resigns it"]
pub struct Leadership {
    guard: Guard,
    value: String,
    /// The election's name.
    name: String,
    client: Client,
    sync: Sync,
}

impl Leadership {
    fn new(guard: Guard, value: &str, lock: &Lock) -> Self {
        Self {
            guard,
            value: value.to_owned(),
            name: lock.name().to_owned(),
            client: lock.client().clone(),
            sync: lock.sync(),
        }
    }

    /// The term's epoch: its fencing token, larger than every earlier term's and every token
    /// the server issued before.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.guard.token()
    }

    /// The candidate that leads: new for each campaign, unless the election was given one
    /// ([`Election::with_candidate`]).
    #[must_use]
    pub fn candidate(&self) -> &str {
        self.guard.owner()
    }

    /// The election's name (its key).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What this leader proclaims: the campaign's value, or the last [`Leadership::proclaim`]
    /// that counted.
    #[must_use]
    pub fn value(&self) -> &str {
        &self.value
    }

    /// True while the term is not known to be lost or resigned (see [`Guard::is_held`]).
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// When the lease this leader counts on ends, on the client's clock (see
    /// [`Guard::lease_end`]): the grant's or the last renewal's that counted, less the drift
    /// allowance, and no later than the client's session's deadline.
    #[must_use]
    pub fn lease_end(&self) -> Instant {
        self.guard.lease_end()
    }

    /// Completes when the term is known to be lost (or was resigned): before another candidate
    /// can lead.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// A [`Lost`] to hand to the task doing the leader's work.
    #[must_use]
    pub fn lost_signal(&self) -> Lost {
        self.guard.lost_signal()
    }

    /// Proclaims `value` (0 to 65 536 bytes) from now on (`LOCK.PROCLAIM name epoch value`):
    /// the epoch and lease stay; observers learn it at once. Returns false, and the leadership
    /// counts as lost, when this term no longer leads (it ended, or was replaced while this
    /// leader paused): nothing changed, so a replaced leader never overwrites its successor's
    /// value. False too, with nothing sent, once the leadership is known to be lost.
    ///
    /// It is synced as a renewal is: `SYNC` (the reply waits until the in-sync set has the
    /// value), `NOSYNC` with a fixed count's `WAIT` behind it ([`Sync::exactly`]), or `NOSYNC`
    /// alone with syncing off.
    ///
    /// # Errors
    /// [`Error::NotReplicated`]: the master set the value, but the replicas did not acknowledge
    /// it in time (the server's `NOREPLICAS`, or a fixed count's `WAIT` counted too few), so a
    /// failover may lose it; [`Leadership::value`] stays as it was. The server's error (a value
    /// too long), or no connection (the value may or may not have been set).
    pub async fn proclaim(&mut self, value: &str) -> Result<bool> {
        if !self.guard.is_held() {
            return Ok(false);
        }
        let name = &self.name;
        let mut command = redis::cmd("LOCK.PROCLAIM");
        command.arg(name).arg(self.epoch()).arg(value);
        let write = Write {
            key: name,
            command: &command,
            session: None,
        };
        let synced = self
            .client
            .synced::<i64>(write, &self.sync, Undo::proclaim())
            .await?;
        if synced.reply != 1 {
            self.guard.lose();
            return Ok(false);
        }
        if let Some(error) = synced.refusal() {
            return Err(error);
        }
        value.clone_into(&mut self.value);
        Ok(true)
    }

    /// Ends the term (`LOCK.RESIGN name epoch`), whatever the watchdog was doing: the first
    /// waiting candidate leads at once, with a larger epoch. Returns whether this term still
    /// led: false means it had ended already (its lease ran out, its session ended) and
    /// nothing changed — a later term, even of the same candidate, is never ended by it.
    ///
    /// # Errors
    /// The server could not be reached: the term lasts until its lease runs out (or its
    /// session ends).
    pub async fn resign(self) -> Result<bool> {
        self.guard.release().await
    }
}

/// Who leads an election, as [`Election::leader`] and an [`Observer`] tell it: a leader with
/// its epoch, value and lease left, or nobody ([`LeaderState::is_vacant`]: no leader, epoch 0,
/// an empty value, no lease).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderState {
    /// The candidate that leads; `None` when nobody does.
    pub leader: Option<String>,
    /// The term's epoch, its fencing token; 0 when nobody leads.
    pub epoch: u64,
    /// What the leader proclaims (a value that is not UTF-8 is shown lossily); empty for a
    /// plain lock's holder, or when nobody leads.
    pub value: String,
    /// The term's lease left when the server replied (ms precision); `None` when nobody leads,
    /// or when someone made the key persistent.
    pub ttl: Option<Duration>,
}

impl LeaderState {
    /// Nobody leads.
    #[must_use]
    pub fn vacant() -> Self {
        Self {
            leader: None,
            epoch: 0,
            value: String::new(),
            ttl: None,
        }
    }

    /// True when nobody leads.
    #[must_use]
    pub fn is_vacant(&self) -> bool {
        self.leader.is_none()
    }
}

/// Follows who leads an election ([`Election::observe`]): [`Observer::next`] tells the current
/// state first, then each state that differs from the one it told last — a new leader, a new
/// value, or nobody — waiting for it in the server (`LOCK.OBSERVE name LAST epoch value BLOCK
/// ms`). The end of a term always comes before the next: an observer that saw a leader is told
/// that nobody leads before it is told of the next leader, even when the next was elected in
/// the same step. It may miss whole terms between two calls (each call tells the latest state),
/// never their order.
///
/// Each wait borrows a wait connection ([`crate::ClientOptions::wait_connections`]) for at
/// most 5 s, then asks again, so the connection goes back to the pool in between and a dead one
/// shows. Use it as a `Stream` with [`Observer::into_stream`].
pub struct Observer {
    client: Client,
    name: String,
    /// The epoch and value (as the server sent it) of the state told last; `None` before the
    /// first.
    last: Option<(u64, Vec<u8>)>,
    margin: Duration,
}

impl Observer {
    /// The next state: the current one on the first call (`LOCK.OBSERVE name`), then the first
    /// that differs from the one told last, waiting as long as it takes. Cancel-safe: dropping
    /// the future loses nothing (the next call starts from the state told last).
    ///
    /// # Errors
    /// No connection (a call whose connection was dead — a blip — is sent once more at once,
    /// on a fresh one), or the server's error (`WRONGTYPE`). The observer stays where it was:
    /// call again to go on.
    pub async fn next(&mut self) -> Result<LeaderState> {
        let mut again = true;
        loop {
            let observed = match self.observe().await {
                Err(Error::Redis(error)) if again && is_lost_reply(&error) => {
                    again = false;
                    continue;
                }
                other => other?,
            };
            again = true;
            if let Some((state, value)) = observed.0 {
                self.last = Some((state.epoch, value));
                return Ok(state);
            }
        }
    }

    /// One `LOCK.OBSERVE`: at once on the shared connection before anything was told, then
    /// with `LAST` and `BLOCK` on a wait connection.
    async fn observe(&self) -> Result<Observed> {
        let mut command = redis::cmd("LOCK.OBSERVE");
        command.arg(&self.name);
        let Some((epoch, value)) = &self.last else {
            return self.client.query(&command).await;
        };
        let block = u64::try_from(OBSERVE_BLOCK.as_millis()).unwrap_or(u64::MAX);
        command
            .arg("LAST")
            .arg(*epoch)
            .arg(value.as_slice())
            .arg("BLOCK")
            .arg(block);
        let timeout = OBSERVE_BLOCK + self.margin;
        self.client
            .blocking_read(&self.name, &command, timeout)
            .await
    }

    /// The states, one [`Observer::next`] after another, as a `Stream` that never ends: an
    /// error is an item, and the stream goes on from the state told last. Boxed, so it is
    /// `Unpin`: `stream.next().await` works as it is.
    pub fn into_stream(self) -> BoxStream<'static, Result<LeaderState>> {
        let states = futures_util::stream::unfold(self, |mut observer| async move {
            let next = observer.next().await;
            Some((next, observer))
        });
        states.boxed()
    }
}

/// The reply to `command`, a read on the shared connection, sent once more at once when its
/// reply was lost: the shared connection notices it was closed (a blip, a server's `timeout`)
/// only when it is next used, and reconnects then.
async fn read<T: FromRedisValue>(client: &Client, command: &redis::Cmd) -> Result<T> {
    match client.query(command).await {
        Err(Error::Redis(error)) if is_lost_reply(&error) => client.query(command).await,
        reply => reply,
    }
}

/// A reply of `LOCK.LEADER` or `LOCK.OBSERVE`: the leadership map (a map in RESP3, a flat
/// array of field–value pairs in RESP2) with the value's bytes as the server sent them (for
/// `LAST`), or `None` (null: nobody leads, or nothing changed).
struct Observed(Option<(LeaderState, Vec<u8>)>);

impl FromRedisValue for Observed {
    fn from_redis_value(reply: Value) -> Result<Self, ParsingError> {
        let pairs: Vec<(Value, Value)> = match reply {
            Value::Nil => return Ok(Self(None)),
            Value::Map(pairs) => pairs,
            Value::Array(flat) => {
                let mut flat = flat.into_iter();
                let mut pairs = Vec::new();
                while let (Some(field), Some(value)) = (flat.next(), flat.next()) {
                    pairs.push((field, value));
                }
                pairs
            }
            other => return Err(format!("not a leadership map: {other:?}").into()),
        };
        let mut state = LeaderState::vacant();
        let mut value = Vec::new();
        for (field, reply) in pairs {
            match String::from_redis_value(field)?.as_str() {
                "epoch" => state.epoch = u64::from_redis_value(reply)?,
                "leader" => state.leader = Option::<String>::from_redis_value(reply)?,
                "ttl" => {
                    let ms = i64::from_redis_value(reply)?;
                    state.ttl = u64::try_from(ms).ok().map(Duration::from_millis);
                }
                "value" => value = Vec::<u8>::from_redis_value(reply)?,
                _ => {}
            }
        }
        state.value = String::from_utf8_lossy(&value).into_owned();
        Ok(Self(Some((state, value))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn a_leadership_map_reads_in_resp2_and_resp3() {
        let fields = [
            (bulk("epoch"), Value::Int(42)),
            (bulk("leader"), bulk("host-a")),
            (bulk("ttl"), Value::Int(1_500)),
            (bulk("value"), bulk("10.0.0.1:8080")),
        ];
        let expected = LeaderState {
            leader: Some("host-a".to_owned()),
            epoch: 42,
            value: "10.0.0.1:8080".to_owned(),
            ttl: Some(Duration::from_millis(1_500)),
        };
        let flat = fields.iter().cloned().flat_map(|(f, v)| [f, v]).collect();
        for reply in [Value::Array(flat), Value::Map(fields.to_vec())] {
            let Observed(Some((state, value))) = Observed::from_redis_value(reply).unwrap() else {
                panic!("a state");
            };
            assert_eq!(state, expected);
            assert_eq!(value, b"10.0.0.1:8080");
        }
    }

    #[test]
    fn nobody_leads_and_nothing_changed_read_as_such() {
        let vacancy = Value::Array(vec![
            bulk("epoch"),
            Value::Int(0),
            bulk("leader"),
            Value::Nil,
            bulk("ttl"),
            Value::Int(-2),
            bulk("value"),
            bulk(""),
        ]);
        let Observed(Some((state, value))) = Observed::from_redis_value(vacancy).unwrap() else {
            panic!("a state");
        };
        assert_eq!(state, LeaderState::vacant());
        assert!(state.is_vacant() && value.is_empty());
        assert!(Observed::from_redis_value(Value::Nil).unwrap().0.is_none());
        assert!(Observed::from_redis_value(Value::Int(1)).is_err());
    }
}
