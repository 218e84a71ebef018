//! Grants and renewals synced to replicas before they count: the client sends the write and
//! `WAIT numreplicas timeout` (or `WAITAOF`) behind it on the same connection, and counts the
//! write only once enough replicas have it. Replication is asynchronous: without this, a master
//! can acknowledge a grant (or a renewal) and fail before any replica has it, and the promoted
//! replica grants the same lock again (or ends the lease earlier than its holder believes).
//!
//! How many replicas to wait for, by default, is learned from the master in the write's own
//! round trip: `INFO replication` (its replicas online) goes in the same pipeline, just before
//! the write (for a wait in the server, just after the grant), and a `WAIT` for more replicas
//! follows on the same connection when the count grew. A replica that attached just before the
//! write is waited for. The count is the most replicas any master of the lock had, never
//! lowered: in a split brain an old master still taking writes may keep a replica that Sentinel
//! has not yet moved to the new master, and would otherwise count a grant as synced to it (a
//! ten-minute `make chaos` found exactly that while a new master waited for one replica fewer
//! than the most); and a restarted master that lost its data has none at first, yet its grants
//! are the ones most likely lost. The price: after a failover, writes on the new master are not
//! synced (`NotReplicated`) until it has as many replicas as before — until the old master
//! rejoins as a replica. A master this client saw replaced (a promoted replica reports its old
//! master's replication ID as `master_replid2`) counts none of its writes.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use redis::cluster_routing::Slot;
use redis::{Cmd, FromRedisValue, RedisError, Value};

/// How many replicas must have a grant or a renewal before it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Replicas {
    /// As many as the master has online, learned from it and never lowered for the same master.
    Learned,
    /// This many (0: don't wait). Fewer than the master has is not safe: see [`Sync::exactly`].
    Exactly(u32),
}

/// Whether and how grants and renewals are synced to replicas before they count. The default:
/// to every replica the master has, waiting up to [`Sync::DEFAULT_TIMEOUT`]; a lone server
/// waits for nothing (its `INFO replication` goes in the write's round trip).
///
/// The cost when a replica is down: every grant and every renewal waits the whole timeout and
/// fails ([`crate::Error::NotReplicated`]); a watched holding keeps trying and is reported lost
/// when its last synced lease ends. Bring the replica back; or, accepting that a failover may
/// then lose grants, lower the count ([`Sync::exactly`]) or switch syncing off ([`Sync::off`])
/// for that time.
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

    /// To every replica the master has (learned from it), the default.
    #[must_use]
    pub const fn to_replicas() -> Self {
        Self {
            replicas: Replicas::Learned,
            timeout: Self::DEFAULT_TIMEOUT,
            aof: false,
        }
    }

    /// To exactly `replicas` replicas.
    ///
    /// **Fewer than the master has is not safe**: a failover may promote a replica that did
    /// not acknowledge the grant, and the new master grants the lock again. A ten-minute
    /// `make chaos` run (commit 888e1d5) found 16 double grants among grants synced to one of
    /// two replicas, all after `SENTINEL FAILOVER` (later runs: docs/guarantees.md). Use it
    /// to pin the count for a master whose replicas you know, or with 0 ([`Sync::off`]).
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

    /// The timeout in whole ms for `WAIT` (at least 1: 0 would mean no limit).
    fn timeout_ms(&self) -> u64 {
        u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// `WAIT replicas timeout` (or `WAITAOF 1 replicas timeout`): for every write sent before it
    /// on its connection.
    pub(crate) fn wait_command(&self, replicas: u32) -> Cmd {
        let mut command = redis::cmd(if self.aof { "WAITAOF" } else { "WAIT" });
        if self.aof {
            command.arg(1);
        }
        command.arg(replicas).arg(self.timeout_ms());
        command
    }

    /// How many replicas acknowledged, from the reply to [`Sync::wait_command`] (for `WAITAOF`,
    /// none unless the master fsynced too).
    pub(crate) fn acked(&self, reply: Value) -> Result<u32, RedisError> {
        let reply = reply.extract_error()?;
        if self.aof {
            // [fsynced locally (0 or 1), replicas that fsynced]
            let (local, acked): (u32, u32) = FromRedisValue::from_redis_value(reply)?;
            return Ok(if local >= 1 { acked } else { 0 });
        }
        Ok(FromRedisValue::from_redis_value(reply)?)
    }
}

impl Default for Sync {
    fn default() -> Self {
        Self::to_replicas()
    }
}

/// What the masters at one place (one server, or the master of one slot) said of their
/// replicas.
#[derive(Debug, Clone, Default)]
struct Known {
    /// The most replicas online any master at this place reported.
    most: u32,
    /// Replication IDs of masters that were replaced: a promoted replica reports its old
    /// master's as `master_replid2`.
    replaced: HashSet<String>,
}

/// Where a lock's master is asked: `None` on one server, the lock's slot in a cluster.
pub(crate) type Place = Option<Slot>;

/// The replica counts learned so far, by where they were asked.
#[derive(Debug, Default)]
pub(crate) struct Learned(HashMap<Place, Known>);

impl Learned {
    /// The count learned so far at `place` (0 before the first answer), to send with a write.
    pub(crate) fn known(&self, place: Place) -> u32 {
        self.0.get(&place).map_or(0, |known| known.most)
    }

    /// Takes note of what the master at `place` said (`INFO replication`), and returns the count
    /// to wait for: the most replicas any master at `place` had. `None` for a master this
    /// client saw replaced — an old master still taking writes after a failover (a split
    /// brain), whose replica count says nothing: none of its writes count.
    pub(crate) fn heard(&mut self, place: Place, info: &str) -> Option<u32> {
        let heard = parse(info);
        let known = self.0.entry(place).or_default();
        known.replaced.extend(heard.replaced);
        if known.replaced.contains(&heard.replication_id) {
            return None;
        }
        known.most = known.most.max(heard.online);
        Some(known.most)
    }
}

/// What `INFO replication` says of a server's replication.
struct Heard {
    /// `master_replid`.
    replication_id: String,
    /// `master_replid2` when set: the master this one took over from.
    replaced: Option<String>,
    /// Replicas online; none for a replica.
    online: u32,
}

fn parse(info: &str) -> Heard {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let replication_id = field("master_replid").unwrap_or_default().to_owned();
    let replaced = field("master_replid2")
        .filter(|id| id.bytes().any(|byte| byte != b'0'))
        .map(str::to_owned);
    let online = if field("role") == Some("master") {
        let online = info
            .lines()
            .filter(|line| line.starts_with("slave") && line.contains("state=online"))
            .count();
        u32::try_from(online).unwrap_or(u32::MAX)
    } else {
        0
    };
    Heard {
        replication_id,
        replaced,
        online,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(replid: &str, online: usize) -> String {
        let mut info = format!("# Replication\r\nrole:master\r\nconnected_slaves:{online}\r\n");
        for i in 0..online {
            info += &format!("slave{i}:ip=127.0.0.1,port={i},state=online,offset=1,lag=0\r\n");
        }
        info + &format!(
            "slave9:ip=127.0.0.1,port=9,state=wait_bgsave,offset=0,lag=0\r\nmaster_replid:{replid}\r\n"
        )
    }

    #[test]
    fn the_count_is_what_the_master_has_online() {
        let master = parse(&info("a", 2));
        assert_eq!((master.replication_id.as_str(), master.online), ("a", 2));
        let replica = parse("role:slave\r\nmaster_replid:b\r\n");
        assert_eq!((replica.replication_id.as_str(), replica.online), ("b", 0));
        let none = format!("master_replid2:{}\r\n", "0".repeat(40));
        assert_eq!(parse(&none).replaced, None);
    }

    #[test]
    fn a_master_seen_replaced_counts_no_write() {
        let mut learned = Learned::default();
        assert_eq!(learned.heard(None, &info("a", 2)), Some(2));
        let promoted = info("b", 1) + "master_replid2:a\r\n";
        assert_eq!(learned.heard(None, &promoted), Some(2));
        assert_eq!(
            learned.heard(None, &info("a", 1)),
            None,
            "the old master, back with a replica that has not moved yet"
        );
        assert_eq!(learned.heard(None, &info("b", 2)), Some(2));
    }

    #[test]
    fn the_count_is_the_most_any_master_had_and_never_lowered() {
        let mut learned = Learned::default();
        assert_eq!(learned.known(None), 0, "nothing learned yet");
        assert_eq!(learned.heard(None, &info("a", 2)), Some(2));
        let dropped = learned.heard(None, &info("a", 1));
        assert_eq!(dropped, Some(2), "the same master lost one");
        assert_eq!(learned.known(None), 2);
        let promoted = learned.heard(None, &info("b", 1));
        assert_eq!(
            promoted,
            Some(2),
            "a new master: as many as the most before"
        );
        let restarted = learned.heard(None, &info("c", 0));
        assert_eq!(
            restarted,
            Some(2),
            "a master back without replicas: still 2"
        );
        let cluster = learned.heard(Slot::new(7), &info("d", 0));
        assert_eq!(cluster, Some(0), "per slot in a cluster");
        let lone = Learned::default().heard(None, &info("f", 0));
        assert_eq!(lone, Some(0), "a lone server");
    }
}
