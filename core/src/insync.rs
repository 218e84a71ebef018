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
//!   `LOCK.PROMOTABLE until-ms timeout-ms replica...`: the members that are connected and whose
//!   last acknowledgement is at most [`STALE_ACK_MS`] old may be promoted until `until-ms` (the
//!   master's clock plus `timeout-ms`). That is a *promotability lease*, renewed while the
//!   member keeps up; its length is [`lease_ms`] of the deployment's failover time
//!   ([`crate::deployment`]), so a member outlives a dead master long enough to be promoted.
//! - A member that stopped acknowledging (dead, stopped, cut off) is no longer listed, so its
//!   lease runs out; the master **drops** it `drop_delay_ms` after the last lease it gave the
//!   member ended. A replica refuses to be promoted once its lease has ended (the module's
//!   command filter), so the delay only covers clocks: rates within 1 % over a lease, and a
//!   message heard late. With [`Timing::strict`] it never drops a member.
//! - A write counts once every member acknowledged it and the set has at least the required
//!   size ([`Master::status`]); a server that was never part of a replication group requires
//!   none. Being part of one is kept across restarts by the module, so a master back at once
//!   never counts a write alone.
//! - A master back with its own configuration after Sentinel promoted another server follows
//!   the master the Sentinels name ([`crate::deployment::Record`]), so that they cannot name it
//!   master again without the writes the other counted.
//!
//! # A replica ([`Follower`], in [`replica`])
//! It may be promoted while its lease lasts, or while it succeeds a master that stepped down
//! with it in its set; see [`replica`].
//!
//! # Why a counted write survives a failover
//! A promoted replica `R` was promotable when it was promoted (it refuses otherwise). Take a
//! counted write `w`: every member at the time `w` was counted had acknowledged it.
//! - If `R` holds a lease from a message listing it, and `R` was a member when `w` counted, it
//!   has `w`. If it joined after, the message listing it comes after `w` in the stream, and `R`
//!   applies the stream in order. Messages from before its link to the master came up (a
//!   backlog replayed after a restart or a reconnect) give no lease ([`replica`]), so `R` is
//!   past them. The only way `R` could lack `w` is to hold a lease after the master dropped it
//!   without having rejoined: the master drops it only `drop_delay_ms` after its last lease
//!   ended by the master's clock, and `R`'s lease ends no later by its own (it runs from when
//!   `R` heard the message, which is after the master sent it, and is capped by the master's
//!   `until-ms` for a message heard late).
//! - If `R` succeeds its master `M` ([`replica`]), `R` held a lease from `M` when it found `M`
//!   reporting the replica role, so `M` had not dropped it and `R` has every write `M`
//!   counted; `M` counts nothing while a replica, and a newer master (a Sentinel failover, with
//!   a newer configuration epoch that every Sentinel announces to `R`) or a new list ends the
//!   succession.
//!
//! The same holds for the writes a promoted replica counts: its set starts from what its master
//! listed last ([`Master::inherit`]) and changes by the same rules. The timing and layout
//! assumptions are in docs/guarantees.md.

use std::collections::HashMap;

pub mod checks;
pub mod replica;
pub mod synced;

pub use checks::Module;
pub use replica::{Cycle, Follower, Priority, Promotability, Promotable};

/// How often the master lists its promotable members, in ms.
pub const HEARTBEAT_MS: u64 = 1_000;

/// How old a member's last acknowledgement may be for it to be listed as promotable, in ms.
/// Replicas acknowledge every second and Redis reports the age in whole seconds, so a member
/// that keeps up shows at most 1 s.
pub const STALE_ACK_MS: u64 = 2_000;

/// The promotability lease for a deployment whose failover takes `failover_ms` to promote a
/// replica ([`crate::deployment`]), in ms: a member hears its last message up to a
/// [`HEARTBEAT_MS`] before the master dies, and must still be promotable when the failover
/// picks it.
#[must_use]
pub const fn lease_ms(failover_ms: u64) -> u64 {
    failover_ms.saturating_add(HEARTBEAT_MS)
}

/// The set's timing: the lease from the deployment (or `lock.insync-timeout-ms`), the rest
/// from the module's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The promotability lease each message gives, in ms.
    pub timeout_ms: u64,
    /// `lock.insync-drop-delay-ms`: how long after a member's last lease ended it is dropped,
    /// in ms.
    pub drop_delay_ms: u64,
    /// `lock.insync-strict`: members are never dropped.
    pub strict: bool,
    /// How long after its lease ended a member may be promoted on the Sentinels' word
    /// ([`replica::Promotability::MasterDown`]), in ms: `Some` while the master hears from a
    /// majority of the Sentinels, which it then needs before it drops a member it lost.
    pub master_down_ms: Option<u64>,
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
    /// Whether it said it runs the module ([`checks`]); `INFO` does not tell, so [`parse`]
    /// leaves it unproven.
    pub module: Module,
}

/// What the master's `INFO replication` says: its offset and its replicas.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replication {
    /// `master_repl_offset`.
    pub offset: u64,
    /// One per `slaveN:` line.
    pub replicas: Vec<Replica>,
    /// Replicas no longer attached that were silent about the module while they were
    /// ([`checks::Checks::held_back`]): they may still be promoted, so nothing counts. `INFO`
    /// does not tell, so [`parse`] leaves it empty.
    pub held_back: Vec<String>,
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
        module: Module::Unproven { silent: false },
    })
}

/// One member of the set, as the master keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    id: String,
    /// Whether it was connected and streaming at the last look.
    online: bool,
    /// When (unix ms, the master's clock) it acknowledged last, at the latest.
    acked_at_ms: u64,
    /// When the longest promotability lease it may hold ends (unix ms); 0 for none.
    listed_until_ms: u64,
    /// A shorter lease listed since (the lease's length shrank: learned, or set), and the
    /// replication offset past its message (0 until the next look reads it): it replaces
    /// `listed_until_ms` once the member acknowledged that offset, so it certainly heard it.
    shorter: Option<(u64, u64)>,
    /// While a list it was named in said [`Timing::master_down_ms`]: until when (unix ms) it
    /// may be promoted on the Sentinels' word at the latest, and the shortest
    /// [`replica::master_down_before_ms`] among those lists.
    master_down: Option<(u64, u64)>,
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
    /// The Sentinels name another server master: nothing counts until this one is a replica
    /// ([`crate::deployment::Record`]).
    pub replaced: bool,
    /// How many replicas online have not said they run the module ([`Module::Unproven`]):
    /// nothing counts while any has not.
    pub unproven: usize,
    /// Whether one of them is silent: writes are refused at once.
    pub silent: bool,
}

impl Status {
    /// True when a write that ended at replication offset `written` counts. With members, an
    /// acknowledged offset of 0 never counts: a member is not connected, or the master has no
    /// backlog yet (back at once, before any replica re-attached), so its offset did not move
    /// with the write.
    #[must_use]
    pub const fn counts(&self, written: u64) -> bool {
        !self.replaced
            && self.unproven == 0
            && self.members >= self.required
            && self.acked >= written
            && (self.members == 0 || self.acked > 0)
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
    /// The Sentinels name another server master ([`crate::deployment::Record`]): no write
    /// counts. A demotion, which makes a new set, ends it.
    replaced: bool,
    /// How many replicas online had not said they run the module at the last look (at least
    /// 1 from a replica's coming online until the next look), and whether one was silent.
    unproven: (usize, bool),
}

impl Master {
    /// The set of a replica just promoted at `now_ms`: the members its old master listed last
    /// (`listed`, less `me`), each with a lease that may last `timing.timeout_ms` more. They are
    /// waited for as they re-attach, and dropped like any member that does not. Also the set of
    /// a master back at once, from the members it listed itself before it stopped.
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
                online: true,
                acked_at_ms: now_ms,
                listed_until_ms: now_ms.saturating_add(timing.timeout_ms),
                shorter: None,
                master_down: None,
            })
            .collect();
        Self {
            members,
            grouped: true,
            ..Self::default()
        }
    }

    /// Notes that this server is part of a replication group (it heard a set from a master, or
    /// read one from its AOF).
    pub const fn group(&mut self) {
        self.grouped = true;
    }

    /// Notes whether the Sentinels name another server master ([`crate::deployment::Record`]):
    /// while they do, no write counts ([`Status::counts`]).
    pub const fn replaced(&mut self, replaced: bool) {
        self.replaced = replaced;
    }

    /// Whether the Sentinels name another server master.
    #[must_use]
    pub const fn is_replaced(&self) -> bool {
        self.replaced
    }

    /// Takes in what `INFO replication` said at `now_ms`: members' acknowledgements, replicas
    /// that caught up join, members whose last lease ended `timing.drop_delay_ms` ago leave —
    /// one whose lists said [`Timing::master_down_ms`] only once `answered(from, to)` tells that
    /// a majority of the Sentinels had this master's reply between those times (unix ms)
    /// ([`replica::master_down_before_ms`]), or once that promise ended too.
    /// True when the set changed, or a member came back (an inherited one re-attached): either
    /// is listed at once, so that a new master that dies in its first second leaves successors.
    pub fn observe(
        &mut self,
        now_ms: u64,
        replication: &Replication,
        timing: Timing,
        answered: impl Fn(u64, u64) -> bool,
    ) -> bool {
        let online = |id: &str| {
            replication
                .replicas
                .iter()
                .find(|replica| replica.online && replica.id == id)
        };
        let mut changed = false;
        for member in &mut self.members {
            let replica = online(&member.id);
            changed |= replica.is_some() && !member.online;
            member.online = replica.is_some();
            if let Some(replica) = replica {
                let acked_at = now_ms.saturating_sub(replica.lag_ms);
                member.acked_at_ms = member.acked_at_ms.max(acked_at);
            }
            member.shorten(replication.offset, replica.map(|replica| replica.acked));
        }
        let before = self.members.len();
        if !timing.strict {
            self.members.retain(|member| {
                fresh(member, now_ms)
                    || now_ms < member.listed_until_ms.saturating_add(timing.drop_delay_ms)
                    || member.may_be_promoted_on_the_sentinels_word(now_ms, timing, &answered)
            });
        }
        changed |= self.members.len() != before;
        self.joining.retain(|id, _| online(id).is_some());
        self.unproven = unproven(replication);
        let proven = |replica: &&Replica| replica.online && replica.module == Module::Runs;
        for replica in replication.replicas.iter().filter(proven) {
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
                    online: true,
                    acked_at_ms: now_ms,
                    listed_until_ms: 0,
                    shorter: None,
                    master_down: None,
                });
                self.grouped = true;
                changed = true;
            }
        }
        changed
    }

    /// Removes `id` from the set at once: a replica silent about the module ([`checks`]), which
    /// may have applied none of the lock writes (and no write counts while it is attached, so it
    /// has no lease to wait out). True when it was a member.
    pub fn remove(&mut self, id: &str) -> bool {
        let before = self.members.len();
        self.members.retain(|member| member.id != id);
        self.joining.remove(id);
        self.members.len() != before
    }

    /// The members to list as promotable in a message sent at `now_ms` (those connected, and
    /// whose last acknowledgement is recent), noting the lease each gets. A lease shorter than
    /// one listed before (its length shrank) is noted apart: the member may not hear it, and
    /// the master drops it only after the longer one ([`Master::observe`]).
    pub fn list(&mut self, now_ms: u64, timing: Timing) -> Vec<String> {
        let until = now_ms.saturating_add(timing.timeout_ms);
        let master_down = timing
            .master_down_ms
            .zip(replica::master_down_before_ms(timing.timeout_ms))
            .map(|(extension, before)| (until.saturating_add(extension), before));
        self.members
            .iter_mut()
            .filter(|member| listable(member, now_ms))
            .map(|member| {
                if let Some((end, before)) = master_down {
                    member.master_down = Some(match member.master_down {
                        Some((was_end, was_before)) => (was_end.max(end), was_before.min(before)),
                        None => (end, before),
                    });
                }
                if until >= member.listed_until_ms {
                    member.listed_until_ms = until;
                    member.shorter = None;
                } else {
                    member.shorter = Some((until, 0));
                }
                member.id.clone()
            })
            .collect()
    }

    /// Whether a write can count now, given what `INFO replication` says and
    /// `lock.min-insync-replicas`.
    #[must_use]
    pub fn status(&self, replication: &Replication, min_members: usize) -> Status {
        let (unproven, silent) = unproven(replication);
        let acked = self
            .members
            .iter()
            .map(|member| {
                replication
                    .replicas
                    .iter()
                    .find(|replica| replica.online && replica.id == member.id)
                    .filter(|replica| replica.module == Module::Runs)
                    .map_or(0, |replica| replica.acked)
            })
            .min()
            .unwrap_or(replication.offset);
        Status {
            offset: replication.offset,
            // A client reading `LOCK.INSYNC` counts nothing either.
            acked: if unproven > 0 { 0 } else { acked },
            members: self.members.len(),
            required: self.required(min_members),
            replaced: self.replaced,
            unproven,
            silent,
        }
    }

    /// A replica came online: until the next look tells whether it said it runs the module, no
    /// write counts at once ([`Master::unproven`]).
    pub fn replica_online(&mut self) {
        self.unproven.0 = self.unproven.0.max(1);
    }

    /// How many replicas online had not said they run the module at the last look (at least 1
    /// from a replica's coming online until the next look), and whether one was silent: what a
    /// synced write meets before any replica is asked ([`synced::refused_at_once`]).
    #[must_use]
    pub const fn unproven(&self) -> (usize, bool) {
        self.unproven
    }

    /// How many members a write needs: `lock.min-insync-replicas` (`min_members`) once this
    /// server is part of a replication group, none before.
    #[must_use]
    pub const fn required(&self, min_members: usize) -> usize {
        if self.grouped { min_members } else { 0 }
    }

    /// Whether a replica online waits to join: it must acknowledge an offset first, which the
    /// master then asks for at once rather than at the replica's next acknowledgement, a
    /// second later ([`Master::observe`]). A master that dies in that second leaves a replica
    /// that synced everything it counted unpromotable, and Sentinel's next try comes twice
    /// `failover-timeout` later.
    #[must_use]
    pub fn awaits_acknowledgement(&self) -> bool {
        !self.joining.is_empty()
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

/// A command that would make this server a master of record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Promotion {
    /// `REPLICAOF NO ONE` or `SLAVEOF NO ONE`, to a replica or to a master (which Redis answers
    /// `OK` and ignores, and Sentinel takes as done whatever the answer: so it is never
    /// refused to a master, whose reserve is what keeps its tokens above).
    ReplicaofNoOne,
    /// `CLUSTER FAILOVER FORCE` or `TAKEOVER`: a replica takes over without its master.
    ForcedClusterFailover,
    /// `PSYNC <replid> <offset> FAILOVER`: the master running `FAILOVER` hands over to this
    /// replica (with `FORCE`, whether or not it caught up).
    PsyncFailover,
    /// `FAILOVER` (not `FAILOVER ABORT`), sent to a master.
    Failover,
}

/// Why a promotion is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The replica may not be promoted: it may lack writes its master counted.
    OutsideSet,
    /// Sentinels watch this server and do not follow the `FAILOVER` command (redis#13118).
    Sentinel,
}

/// What decides a promotion on this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// It is a master.
    pub master: bool,
    /// A replica that may be promoted now ([`Follower::promotable`]).
    pub promotable: bool,
    /// Sentinels watch it.
    pub watched_by_sentinel: bool,
}

/// Whether `promotion` is refused on a server standing as `standing`: a replica is promoted
/// only while it may be ([`Follower::promotable`]), and `FAILOVER` is not for a group Sentinel
/// manages. Forms Redis refuses by itself (`CLUSTER FAILOVER` or `PSYNC ... FAILOVER` to a
/// master, `FAILOVER` to a replica) and those that change nothing (`REPLICAOF NO ONE` to a
/// master) are left to it.
#[must_use]
pub const fn refusal(promotion: Promotion, standing: Standing) -> Option<Refusal> {
    match promotion {
        Promotion::ReplicaofNoOne | Promotion::ForcedClusterFailover | Promotion::PsyncFailover
            if !standing.master && !standing.promotable =>
        {
            Some(Refusal::OutsideSet)
        }
        Promotion::Failover if standing.master && standing.watched_by_sentinel => {
            Some(Refusal::Sentinel)
        }
        _ => None,
    }
}

/// How many replicas online have not said they run the module, or are held back, and whether
/// one is silent (one held back is).
fn unproven(replication: &Replication) -> (usize, bool) {
    let held_back = replication.held_back.len();
    replication
        .replicas
        .iter()
        .filter(|replica| replica.online)
        .fold(
            (held_back, held_back > 0),
            |(count, silent), replica| match replica.module {
                Module::Unproven { silent: quiet } => (count + 1, silent || quiet),
                Module::Runs | Module::Replaying => (count, silent),
            },
        )
}

/// True when `member` is connected and its last acknowledgement is recent enough for it to be
/// listed (and, connected or not, for it to be kept).
fn fresh(member: &Member, now_ms: u64) -> bool {
    now_ms.saturating_sub(member.acked_at_ms) <= STALE_ACK_MS
}

impl Member {
    /// Whether this member, lost, may still be promoted at `now_ms` on the Sentinels' word
    /// that its master went silent before its lease ended: its lists promised so, and
    /// `answered` cannot show that a majority of them had the master's reply since
    /// ([`replica::master_down_before_ms`]).
    fn may_be_promoted_on_the_sentinels_word(
        &self,
        now_ms: u64,
        timing: Timing,
        answered: impl Fn(u64, u64) -> bool,
    ) -> bool {
        let Some((end, before)) = self.master_down else {
            return false;
        };
        now_ms < end.saturating_add(timing.drop_delay_ms)
            && !answered(
                self.listed_until_ms.saturating_sub(before),
                now_ms.saturating_sub(replica::MASTER_DOWN_WORD_AGE_MS),
            )
    }

    /// A look at the replication `offset` and what the member `acked` (if connected): the
    /// offset past a shorter lease's message is noted at the look after it was sent, and once
    /// the member acknowledged it, the shorter lease is the one it holds.
    fn shorten(&mut self, offset: u64, acked: Option<u64>) {
        match self.shorter {
            Some((until, 0)) => self.shorter = Some((until, offset.max(1))),
            Some((until, past)) if acked.is_some_and(|acked| acked >= past) => {
                self.listed_until_ms = until;
                self.shorter = None;
            }
            _ => {}
        }
    }
}

/// True when `member` may be listed at `now_ms`: connected, and [`fresh`].
fn listable(member: &Member, now_ms: u64) -> bool {
    member.online && fresh(member, now_ms)
}

#[cfg(test)]
mod tests;
