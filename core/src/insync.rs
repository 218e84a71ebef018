//! The in-sync replica set: which replicas must have a write before a client counts it, and
//! which replicas may be promoted. The model is Kafka's ISR (a write with `acks=all` counts once
//! every member has it, `min.insync.replicas` refuses writes below it, and only members may be
//! elected leader), held here by the master's module and carried to its replicas in the
//! replication stream.
//!
//! # The master ([`Master`])
//! - A replica **joins** once it is online and has acknowledged the replication offset the
//!   master had when it first saw the replica online (and anything at all): it has caught up.
//! - Every [`HEARTBEAT_MS`], and at once when the set changes, the master sends its replicas
//!   `LOCK.PROMOTABLE until-ms timeout-ms replica...`: the members whose last acknowledgement is
//!   at most [`STALE_ACK_MS`] old may be promoted until `until-ms` (the master's clock plus
//!   `timeout-ms`). That is a *promotability lease*, renewed while the member keeps up.
//! - A member that stopped acknowledging (dead, stopped, cut off) is no longer listed, so its
//!   lease runs out; the master **drops** it `drop_delay_ms` after the last lease it gave the
//!   member ended — once the member has made itself unpromotable and Sentinel has had time to
//!   read that (its `INFO` period: 10 s). With [`Timing::strict`] it never drops a member.
//! - A write counts once every member acknowledged it and the set has at least the required
//!   size ([`Master::status`]); a server that was never part of a replication group requires
//!   none.
//!
//! # A replica ([`Follower`])
//! It may be promoted while it is listed and its lease lasts: until
//! `min(heard + timeout, until)` by its own clock, `heard` being when the message came. So a
//! replica that hears nothing from its master for `timeout` ms — the master is gone, or the link
//! is cut — makes itself unpromotable on its own, and a message delivered late (a replica that
//! was stopped) gives no more than the master meant. A replica starts unpromotable.
//!
//! # Why a counted write survives a failover
//! A promoted replica `R` was promotable when Sentinel chose it, so it was a member then with a
//! lease from a message listing it. Take a counted write `w`: every member at the time `w` was
//! counted had acknowledged it. If `R` was a member then, it has `w`. If `R` joined after, the
//! message listing it comes after `w` in the stream, and `R` applies the stream in order. If `R`
//! was dropped before `w` was counted and joined again, the same holds for the rejoin. The only
//! way `R` could lack `w` is to be promotable after the master dropped it without having
//! rejoined: the master drops it only `drop_delay_ms` after its last lease ended (by the
//! master's clock), and Sentinel reads a replica's priority at least every 10 s. The timing
//! assumptions are in docs/guarantees.md: clocks that differ by less than `drop_delay_ms` minus
//! Sentinel's `INFO` period, for a message delivered late; and a failover that picks a replica
//! within `timeout` of the master's death (`down-after-milliseconds` plus the election).

use std::collections::HashMap;

/// How often the master lists its promotable members, in ms.
pub const HEARTBEAT_MS: u64 = 1_000;

/// How old a member's last acknowledgement may be for it to be listed as promotable, in ms.
/// Replicas acknowledge every second and Redis reports the age in whole seconds, so a member
/// that keeps up shows at most 1 s.
pub const STALE_ACK_MS: u64 = 2_000;

/// The set's timing, from the module's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// `lock.insync-timeout-ms`: the promotability lease each message gives, in ms.
    pub timeout_ms: u64,
    /// `lock.insync-drop-delay-ms`: how long after a member's last lease ended it is dropped,
    /// in ms.
    pub drop_delay_ms: u64,
    /// `lock.insync-strict`: members are never dropped.
    pub strict: bool,
}

/// What the master's `INFO replication` says of one replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    /// `ip:port`, as the master and Sentinel name it.
    pub id: String,
    /// `state=online`: it streams (not waiting for or loading a full sync).
    pub online: bool,
    /// The replication offset it acknowledged last.
    pub acked: u64,
    /// How long ago it acknowledged last, in ms (Redis reports whole seconds).
    pub lag_ms: u64,
}

/// What the master's `INFO replication` says: its offset and its replicas.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replication {
    /// `master_repl_offset`.
    pub offset: u64,
    /// One per `slaveN:` line.
    pub replicas: Vec<Replica>,
}

/// Reads `INFO replication`. Lines it does not know are skipped, and so is a replica whose
/// line has no `ip` or `port`.
#[must_use]
pub fn parse(info: &str) -> Replication {
    let mut replication = Replication::default();
    for line in info.lines().map(str::trim_end) {
        if let Some(offset) = line.strip_prefix("master_repl_offset:") {
            replication.offset = offset.parse().unwrap_or(0);
        } else if let Some((name, fields)) = line.split_once(':')
            && let Some(number) = name.strip_prefix("slave")
            && !number.is_empty()
            && number.bytes().all(|byte| byte.is_ascii_digit())
            && let Some(replica) = replica(fields)
        {
            replication.replicas.push(replica);
        }
    }
    replication
}

/// One `slaveN:` line's fields: `ip=..,port=..,state=..,offset=..,lag=..`.
fn replica(fields: &str) -> Option<Replica> {
    let field = |name: &str| {
        fields
            .split(',')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
    };
    Some(Replica {
        id: format!("{}:{}", field("ip")?, field("port")?),
        online: field("state") == Some("online"),
        acked: field("offset").and_then(|o| o.parse().ok()).unwrap_or(0),
        lag_ms: field("lag")
            .and_then(|lag| lag.parse::<u64>().ok())
            .map_or(u64::MAX, |seconds| seconds.saturating_mul(1_000)),
    })
}

/// One member of the set, as the master keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    id: String,
    /// When (unix ms, the master's clock) it acknowledged last, at the latest.
    acked_at_ms: u64,
    /// When the last promotability lease the master gave it ends (unix ms); 0 for none.
    listed_until_ms: u64,
}

/// What [`Master::status`] answers: what a client needs to count a write (`LOCK.INSYNC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The master's replication offset now.
    pub offset: u64,
    /// The lowest offset every member acknowledged (`offset` with no members; 0 when a member
    /// is not connected).
    pub acked: u64,
    /// How many members the set has.
    pub members: usize,
    /// How many it must have for a write to count.
    pub required: usize,
}

impl Status {
    /// True when a write that ended at replication offset `written` counts.
    #[must_use]
    pub const fn counts(&self, written: u64) -> bool {
        self.members >= self.required && self.acked >= written
    }
}

/// The master's in-sync set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Master {
    members: Vec<Member>,
    /// Replicas online but not members yet, with the offset each must acknowledge to join.
    joining: HashMap<String, u64>,
    /// Whether this server is part of a replication group: it had a member, inherited a set,
    /// or heard one from a master. Until then no member is required.
    grouped: bool,
}

impl Master {
    /// The set of a replica just promoted at `now_ms`: the members its old master listed last
    /// (`listed`, less `me`), each with a lease that may last `timing.timeout_ms` more. They are
    /// waited for as they re-attach, and dropped like any member that does not.
    #[must_use]
    pub fn inherit(
        listed: &[String],
        me: impl Fn(&str) -> bool,
        now_ms: u64,
        timing: Timing,
    ) -> Self {
        let members = listed
            .iter()
            .filter(|id| !me(id))
            .map(|id| Member {
                id: id.clone(),
                acked_at_ms: now_ms,
                listed_until_ms: now_ms.saturating_add(timing.timeout_ms),
            })
            .collect();
        Self {
            members,
            joining: HashMap::new(),
            grouped: true,
        }
    }

    /// Notes that this server is part of a replication group (it heard a set from a master, or
    /// read one from its AOF).
    pub const fn group(&mut self) {
        self.grouped = true;
    }

    /// Takes in what `INFO replication` said at `now_ms`: members' acknowledgements, replicas
    /// that caught up join, members whose last lease ended `timing.drop_delay_ms` ago leave.
    /// True when the set changed.
    pub fn observe(&mut self, now_ms: u64, replication: &Replication, timing: Timing) -> bool {
        let online = |id: &str| {
            replication
                .replicas
                .iter()
                .find(|replica| replica.online && replica.id == id)
        };
        for member in &mut self.members {
            if let Some(replica) = online(&member.id) {
                let acked_at = now_ms.saturating_sub(replica.lag_ms);
                member.acked_at_ms = member.acked_at_ms.max(acked_at);
            }
        }
        let before = self.members.len();
        if !timing.strict {
            self.members.retain(|member| {
                fresh(member, now_ms)
                    || now_ms < member.listed_until_ms.saturating_add(timing.drop_delay_ms)
            });
        }
        let mut changed = self.members.len() != before;
        self.joining.retain(|id, _| online(id).is_some());
        for replica in replication.replicas.iter().filter(|r| r.online) {
            if self.members.iter().any(|member| member.id == replica.id) {
                continue;
            }
            // At least 1: a replica that acknowledged nothing yet (a diskless sync's stream
            // starts at its first acknowledgement) has not caught up, whatever the offset was.
            let target = *self
                .joining
                .entry(replica.id.clone())
                .or_insert(replication.offset.max(1));
            if replica.acked >= target {
                self.joining.remove(&replica.id);
                self.members.push(Member {
                    id: replica.id.clone(),
                    acked_at_ms: now_ms,
                    listed_until_ms: 0,
                });
                self.grouped = true;
                changed = true;
            }
        }
        changed
    }

    /// The members to list as promotable in a message sent at `now_ms` (those whose last
    /// acknowledgement is recent), noting the lease each gets.
    pub fn list(&mut self, now_ms: u64, timing: Timing) -> Vec<String> {
        let until = now_ms.saturating_add(timing.timeout_ms);
        self.members
            .iter_mut()
            .filter(|member| fresh(member, now_ms))
            .map(|member| {
                member.listed_until_ms = until;
                member.id.clone()
            })
            .collect()
    }

    /// Whether a write can count now, given what `INFO replication` says and
    /// `lock.min-insync-replicas`.
    #[must_use]
    pub fn status(&self, replication: &Replication, min_members: usize) -> Status {
        let acked = self
            .members
            .iter()
            .map(|member| {
                replication
                    .replicas
                    .iter()
                    .find(|replica| replica.online && replica.id == member.id)
                    .map_or(0, |replica| replica.acked)
            })
            .min()
            .unwrap_or(replication.offset);
        Status {
            offset: replication.offset,
            acked,
            members: self.members.len(),
            required: self.required(min_members),
        }
    }

    /// How many members a write needs: `lock.min-insync-replicas` (`min_members`) once this
    /// server is part of a replication group, none before.
    #[must_use]
    pub const fn required(&self, min_members: usize) -> usize {
        if self.grouped { min_members } else { 0 }
    }

    /// The members' ids (`ip:port`), in the order they joined.
    pub fn members(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|member| member.id.as_str())
    }

    /// Whether this server is part of a replication group.
    #[must_use]
    pub const fn grouped(&self) -> bool {
        self.grouped
    }
}

/// True when `member`'s last acknowledgement is recent enough for it to be listed.
fn fresh(member: &Member, now_ms: u64) -> bool {
    now_ms.saturating_sub(member.acked_at_ms) <= STALE_ACK_MS
}

/// A replica's view: what its master said last about who may be promoted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Follower {
    /// The members listed last.
    listed: Vec<String>,
    /// Until when (unix ms, this server's clock) this replica may be promoted; 0: it may not.
    promotable_until_ms: u64,
}

impl Follower {
    /// The master's message `LOCK.PROMOTABLE until-ms timeout-ms listed...` arrived at `now_ms`;
    /// `me` tells whether an `ip:port` is this server.
    pub fn heard(&mut self, now_ms: u64, message: &Promotable, me: impl Fn(&str) -> bool) {
        let listed = message.listed.iter().any(|id| me(id));
        self.promotable_until_ms = if listed {
            now_ms
                .saturating_add(message.timeout_ms)
                .min(message.until_ms)
        } else {
            0
        };
        self.listed.clone_from(&message.listed);
    }

    /// True while this replica may be promoted, at `now_ms`.
    #[must_use]
    pub const fn promotable(&self, now_ms: u64) -> bool {
        now_ms < self.promotable_until_ms
    }

    /// The members its master listed last.
    #[must_use]
    pub fn listed(&self) -> &[String] {
        &self.listed
    }

    /// Forgets everything: a new master, or none.
    pub fn forget(&mut self) {
        *self = Self::default();
    }
}

/// `LOCK.PROMOTABLE until-ms timeout-ms [replica ...]`, the master's message to its replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promotable {
    /// When the leases end at the latest, by the master's clock (unix ms).
    pub until_ms: u64,
    /// How long a lease lasts from when the message arrives, in ms.
    pub timeout_ms: u64,
    /// The members that may be promoted (`ip:port`).
    pub listed: Vec<String>,
}

/// The operator's `replica-priority` and the one this module set last: the module makes a
/// replica unpromotable with priority 0 and gives it back the operator's priority when it is
/// promotable again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    operator: i64,
    applied: Option<i64>,
}

impl Priority {
    /// The operator's priority at the start (`lock.replica-priority`, or the server's own).
    #[must_use]
    pub const fn new(operator: i64) -> Self {
        Self {
            operator,
            applied: None,
        }
    }

    /// The operator's priority.
    #[must_use]
    pub const fn operator(&self) -> i64 {
        self.operator
    }

    /// The server's priority is `current`; returns the one to set, if another, for a replica
    /// that is `promotable` or not. A priority that is not the one this module set last was set
    /// by someone else (`CONFIG SET`): it becomes the operator's.
    pub fn next(&mut self, current: i64, promotable: bool) -> Option<i64> {
        if self.applied.is_some_and(|applied| applied != current) {
            self.operator = current;
        }
        let wanted = if promotable { self.operator } else { 0 };
        self.applied = Some(wanted);
        (wanted != current).then_some(wanted)
    }
}

#[cfg(test)]
mod tests;
