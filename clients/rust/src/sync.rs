//! Grants and renewals synced to replicas before they count. Replication is asynchronous:
//! without this, a master can acknowledge a grant (or a renewal) and fail before any replica has
//! it, and the promoted replica grants the same lock again (or ends the lease earlier than its
//! holder believes).
//!
//! By default a write counts once every replica in the master's in-sync set has it. The module
//! on the master keeps that set (replicas outside it make themselves unpromotable) and tells it
//! with `LOCK.INSYNC`; the client keeps no count of its own. Behind the writes, on the same
//! connection, in the same round trip and with no `MULTI`, go
//!
//! ```text
//! LOCK.INSYNC -> a      WAIT h timeout      LOCK.INSYNC -> b
//! ```
//!
//! and the writes count when `b.members >= b.required` (the set has at least
//! `lock.min-insync-replicas` replicas) and `b.acked >= a.offset` (every member acknowledged the
//! offset that covers the writes). `h`, the size of the set the last reply from that master
//! gave, only says how long `WAIT` waits: with none yet (0) neither the `WAIT` nor the second
//! `LOCK.INSYNC` is sent (unless `WAITAOF` must see the master's own fsync) and `a` stands for
//! `b`. When the writes do not count, the master has enough members, the `WAIT` counted fewer
//! than them and the sync timeout has time left, one more round trip follows — `WAIT b.members
//! left`, `LOCK.INSYNC -> c` — and `c` is judged in place of `b`.
//!
//! A replica that has just attached counts from when it joins the set (about a second after it
//! caught up); until then the master does not wait for it, and it is not promotable either.
//!
//! A master this client saw replaced (a promoted replica reports its old master's replication
//! ID as `replid2`) counts none of its writes: in a split brain an old master still taking
//! writes may keep a replica that the failover has not moved yet.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use redis::cluster_routing::Slot;
use redis::{Cmd, FromRedisValue, Pipeline, Value};

/// How many replicas must have a grant or a renewal before it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Replicas {
    /// Every replica in the master's in-sync set, and at least `lock.min-insync-replicas` of
    /// them, as the master says in the write's round trip (`LOCK.INSYNC`).
    InSync,
    /// This many, as `WAIT` counts them (0: don't wait). Fewer than the master's in-sync set
    /// is not safe: see [`Sync::exactly`].
    Exactly(u32),
}

/// Whether and how grants and renewals are synced to replicas before they count. The default:
/// to every replica in the master's in-sync set, waiting up to [`Sync::DEFAULT_TIMEOUT`]; a lone
/// server waits for nothing. A master with fewer in-sync replicas than its
/// `lock.min-insync-replicas` (1 by default) counts no write.
///
/// The cost when a replica is down: until the master drops it from its set (with the module's
/// default settings about 25 s after it went silent), every grant and every renewal waits the
/// whole timeout and fails ([`crate::Error::NotReplicated`]); a watched holding keeps trying
/// (the timeout, then 0.5 s, each time), so it keeps its lock if the drop comes before its
/// last synced lease ends, and is reported lost when that lease ends otherwise. Once it is
/// dropped, writes count again while the master keeps at least `lock.min-insync-replicas`.
/// Bring the replica back; or, accepting that a failover may then lose grants, pin the count
/// ([`Sync::exactly`]) or switch syncing off ([`Sync::off`]) for that time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sync {
    pub(crate) replicas: Replicas,
    pub(crate) timeout: Duration,
    pub(crate) aof: bool,
}

impl Sync {
    /// How long a grant or renewal waits for its replicas by default: 1 s. A replica that is up
    /// acknowledges within a round trip plus its replication lag (well under a millisecond on a
    /// LAN, `make chaos` measures it); a second runs out only when a replica is down or far
    /// behind, and then the grant is not safe anyway.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

    /// To every replica in the master's in-sync set, the default.
    #[must_use]
    pub const fn to_replicas() -> Self {
        Self {
            replicas: Replicas::InSync,
            timeout: Self::DEFAULT_TIMEOUT,
            aof: false,
        }
    }

    /// To exactly `replicas` replicas, as `WAIT` counts them, whatever the master's in-sync set
    /// and `lock.min-insync-replicas` say.
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

    /// No syncing: a grant is returned, and a renewal counts, as soon as the master made it.
    #[must_use]
    pub const fn off() -> Self {
        Self::exactly(0)
    }

    /// Waits up to `timeout` for the replicas (whole ms, at least 1).
    #[must_use]
    pub const fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Waits with `WAITAOF 1 n timeout` instead: the write is in the master's AOF and the
    /// replicas' AOFs on disk (Redis 7.2+, Valkey 8+, with `appendonly yes`). With
    /// `appendfsync everysec` a server fsyncs once a second, so give it a timeout above 1 s.
    #[must_use]
    pub const fn with_aof(mut self, aof: bool) -> Self {
        self.aof = aof;
        self
    }

    /// True when nothing is synced ([`Sync::off`]).
    pub(crate) fn is_off(&self) -> bool {
        self.replicas == Replicas::Exactly(0)
    }

    /// The timeout in whole ms (at least 1).
    pub(crate) fn timeout_ms(&self) -> u64 {
        ms(self.timeout)
    }

    /// The commands behind a round trip's writes, `hint` the in-sync count last heard from their
    /// master: `LOCK.INSYNC`, `WAIT hint`, `LOCK.INSYNC` (the first alone for a hint of 0,
    /// unless `WAITAOF` must see the master's own fsync); with a fixed count, its `WAIT` alone
    /// (nothing for 0). Read their replies with [`Check::read`].
    pub(crate) fn tail(&self, hint: u32) -> Pipeline {
        let mut tail = redis::pipe();
        tail.ignore_errors();
        match self.replicas {
            Replicas::InSync => {
                tail.add_command(insync());
                if hint > 0 || self.aof {
                    tail.add_command(self.wait(hint, self.timeout));
                    tail.add_command(insync());
                }
            }
            Replicas::Exactly(0) => {}
            Replicas::Exactly(replicas) => {
                tail.add_command(self.wait(replicas, self.timeout));
            }
        }
        tail
    }

    /// The one more try: `WAIT replicas left`, `LOCK.INSYNC` (read with [`Check::reread`]).
    pub(crate) fn again(&self, replicas: u32, left: Duration) -> Pipeline {
        let mut again = redis::pipe();
        again.ignore_errors();
        again.add_command(self.wait(replicas, left));
        again.add_command(insync());
        again
    }

    /// `WAIT replicas timeout` (or `WAITAOF 1 replicas timeout`): for every write sent before it
    /// on its connection.
    fn wait(&self, replicas: u32, timeout: Duration) -> Cmd {
        let mut command = redis::cmd(self.wait_name());
        if self.aof {
            command.arg(1);
        }
        command.arg(replicas).arg(ms(timeout));
        command
    }

    fn wait_name(&self) -> &'static str {
        if self.aof { "WAITAOF" } else { "WAIT" }
    }

    /// What a `WAIT` (or `WAITAOF`) answered.
    fn waited(&self, reply: Value) -> Result<Waited, String> {
        let failed = |error: redis::RedisError| format!("{} failed: {error}", self.wait_name());
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

/// `LOCK.INSYNC`: the master's in-sync replica set now.
fn insync() -> Cmd {
    redis::cmd("LOCK.INSYNC")
}

/// Whole ms, at least 1 (0 would mean no limit to `WAIT`).
fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

fn read<T: FromRedisValue>(value: Value) -> Result<T, redis::RedisError> {
    Ok(T::from_redis_value(value)?)
}

/// A `LOCK.INSYNC` reply: the master's in-sync replica set at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InSync {
    /// The master's replication offset: it covers every write sent before on the connection.
    offset: u64,
    /// The lowest offset every member acknowledged.
    acked: u64,
    /// How many replicas are in the set.
    members: u32,
    /// How many the master requires (`lock.min-insync-replicas`; 0 for a lone server).
    required: u32,
    /// `master_replid`.
    replid: String,
    /// `master_replid2` when set: the master this one took over from.
    replaced: Option<String>,
}

impl InSync {
    /// Reads a `LOCK.INSYNC` reply: `[offset, acked, members, required, replid, replid2]`.
    ///
    /// # Errors
    /// Why the writes do not count: the server's error (a replica answers one, a server
    /// without the command another) or a reply of another shape.
    fn read(reply: Value) -> Result<Self, String> {
        let failed = |error: redis::RedisError| format!("LOCK.INSYNC failed: {error}");
        let reply = reply.extract_error().map_err(failed)?;
        let (offset, acked, members, required, replid, replid2): (
            u64,
            u64,
            u32,
            u32,
            String,
            String,
        ) = read(reply).map_err(failed)?;
        Ok(Self {
            offset,
            acked,
            members,
            required,
            replid,
            replaced: Some(replid2).filter(|id| id.bytes().any(|byte| byte != b'0')),
        })
    }
}

/// What a `WAIT` (or `WAITAOF`) answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Waited {
    /// Replicas that acknowledged (for `WAITAOF`: fsynced).
    replicas: u32,
    /// The master fsynced its AOF (always true for `WAIT`).
    fsynced: bool,
}

impl Waited {
    /// No `WAIT` was sent.
    const NONE: Self = Self {
        replicas: 0,
        fsynced: true,
    };
}

/// What the master said behind a round trip's writes: whether they count.
#[derive(Debug)]
pub(crate) enum Check {
    /// A fixed count, and what its `WAIT` counted ([`Waited::NONE`] for 0).
    Fixed { wanted: u32, waited: Waited },
    /// The in-sync set: `LOCK.INSYNC` right behind the writes (its offset covers them), what
    /// the last `WAIT` counted, and the `LOCK.INSYNC` after it (`before` when none was sent).
    InSync {
        before: InSync,
        waited: Waited,
        after: InSync,
    },
}

/// Why writes do not count, and whether one more `WAIT` may yet make them count.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// What [`crate::Error::NotReplicated`] says.
    pub(crate) reason: String,
    /// `Some(n)`: one more `WAIT n` may help ([`Sync::again`]).
    pub(crate) again: Option<u32>,
}

impl Check {
    /// Reads the replies to [`Sync::tail`].
    ///
    /// # Errors
    /// Why the writes do not count when a reply is an error or of another shape.
    pub(crate) fn read(sync: &Sync, replies: Vec<Value>) -> Result<Self, String> {
        let mut replies = replies.into_iter();
        let mut next = || {
            replies
                .next()
                .ok_or_else(|| "a reply is missing".to_owned())
        };
        Ok(match sync.replicas {
            Replicas::Exactly(0) => Self::Fixed {
                wanted: 0,
                waited: Waited::NONE,
            },
            Replicas::Exactly(wanted) => Self::Fixed {
                wanted,
                waited: sync.waited(next()?)?,
            },
            Replicas::InSync => {
                let before = InSync::read(next()?)?;
                let mut check = Self::InSync {
                    after: before.clone(),
                    before,
                    waited: Waited::NONE,
                };
                let rest: Vec<Value> = replies.collect();
                if !rest.is_empty() {
                    check.reread(sync, rest)?;
                }
                check
            }
        })
    }

    /// Reads the replies to [`Sync::again`] (or the `WAIT` and the last `LOCK.INSYNC` of
    /// [`Sync::tail`]), in place of the last ones.
    ///
    /// # Errors
    /// Why the writes do not count when a reply is an error or of another shape.
    pub(crate) fn reread(&mut self, sync: &Sync, replies: Vec<Value>) -> Result<(), String> {
        let Self::InSync { waited, after, .. } = self else {
            return Ok(());
        };
        let [wait, insync] = <[Value; 2]>::try_from(replies)
            .map_err(|replies| format!("{} replies instead of 2", replies.len()))?;
        *waited = sync.waited(wait)?;
        *after = InSync::read(insync)?;
        Ok(())
    }

    /// Whether the writes to `places`, synced as `sync` says, count, taking note in `seen` of
    /// what their master said. With `left` of the sync timeout (at least 1 ms), a refusal says
    /// whether one more `WAIT` may help: the master has enough members and the `WAIT` counted
    /// fewer.
    ///
    /// # Errors
    /// Why they do not count.
    pub(crate) fn judge(
        &self,
        sync: &Sync,
        seen: &mut Seen,
        places: &[Place],
        left: Duration,
    ) -> Result<(), Refusal> {
        let timeout = sync.timeout_ms();
        let refused = |reason: String| Refusal {
            reason,
            again: None,
        };
        let (before, waited, after) = match self {
            Self::Fixed { wanted, waited } => {
                if !waited.fsynced {
                    return Err(refused(not_fsynced(timeout)));
                }
                if waited.replicas < *wanted {
                    let acked = waited.replicas;
                    let reason = format!(
                        "{acked} of the {wanted} replicas asked for acknowledged within {timeout} ms"
                    );
                    return Err(refused(reason));
                }
                return Ok(());
            }
            Self::InSync {
                before,
                waited,
                after,
            } => (before, waited, after),
        };
        let replaced = seen.heard(places, after);
        if replaced || after.replid != before.replid {
            let reason = "the master was replaced (a failover): none of its writes count";
            return Err(refused(reason.to_owned()));
        }
        if after.members < after.required {
            let (members, required) = (after.members, after.required);
            return Err(refused(format!(
                "the master has {members} in-sync replicas, fewer than lock.min-insync-replicas ({required})"
            )));
        }
        if after.acked >= before.offset && waited.fsynced {
            return Ok(());
        }
        let reason = if waited.fsynced {
            format!("not every in-sync replica acknowledged within {timeout} ms")
        } else {
            not_fsynced(timeout)
        };
        let again = after.members > waited.replicas && left >= Duration::from_millis(1);
        Err(Refusal {
            reason,
            again: again.then_some(after.members),
        })
    }
}

fn not_fsynced(timeout: u64) -> String {
    format!("the master did not fsync its AOF within {timeout} ms")
}

/// Where a lock's master is asked: `None` on one server, the lock's slot in a cluster.
pub(crate) type Place = Option<Slot>;

/// What this client heard from masters, kept across round trips (and by
/// [`crate::Client::reopen`]): the replication IDs of masters that were replaced, and the
/// in-sync count last heard at each place, the hint for the next `WAIT` there.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    replaced: HashSet<String>,
    members: HashMap<Place, u32>,
}

impl Seen {
    /// The hint for `WAIT` behind writes to `places`: the most in-sync replicas last heard at
    /// them (0 before the first reply).
    pub(crate) fn hint(&self, places: &[Place]) -> u32 {
        let heard = places.iter().filter_map(|place| self.members.get(place));
        heard.copied().max().unwrap_or(0)
    }

    /// Takes note of `insync`, said by the master at `places`; true when that master is one
    /// this client saw replaced.
    fn heard(&mut self, places: &[Place], insync: &InSync) -> bool {
        for place in places {
            self.members.insert(*place, insync.members);
        }
        self.replaced.extend(insync.replaced.iter().cloned());
        self.replaced.contains(&insync.replid)
    }
}

#[cfg(test)]
mod tests;
