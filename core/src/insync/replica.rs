//! A replica's side of the in-sync set: whether it may be promoted, and the priority it shows
//! Sentinel.
//!
//! - **A lease.** The master's `LOCK.PROMOTABLE until-ms timeout-ms listed...` lists this
//!   replica: it may be promoted until `min(heard + timeout, until)` by its own clock, `heard`
//!   being when the message came. A message that does not list it ends its lease at once. So a
//!   replica that hears nothing from its master for `timeout` ms — the master is gone, or the
//!   link is cut — becomes unpromotable on its own, and a message delivered late (a replica
//!   that was stopped) gives no more than the master meant. A replica starts unpromotable.
//! - **History gives no lease to data from disk.** A replica restarted from an older RDB or AOF
//!   may lack writes it acknowledged before, which the master counted with it in the set; the
//!   backlog it replays then has messages listing it before those writes. While its data is
//!   what it loaded from its own disk, such a message — sent before its link to the master came
//!   up — can end a lease but not give one: only a message sent at least [`CLOCK_SKEW_MS`] after
//!   the link came up (the master's clock against this replica's) does, and by then the replica
//!   has applied the backlog before it. A replica whose data came whole from a master (a full
//!   sync since it started) lost nothing it acknowledged, so every message listing it gives a
//!   lease, capped by the master's `until-ms` as always: one that switched masters in a
//!   failover is promotable from the new master's first list, not a second later (a new master
//!   killed within that second left nobody promotable: `make chaos` at Sentinel's defaults).
//! - **Succession.** A replica that still holds a lease from its master `M` and finds `M`
//!   reporting the replica role (`M` restarted with a configuration that makes it a replica, or
//!   was demoted) has every write `M` counted: `M` had not dropped it, and counts nothing while
//!   a replica. It stays promotable while `M` reports the replica role, without a lease: until a
//!   list comes (a master listing it or not), its master changes, a full sync replaces its data,
//!   or a Sentinel announces a configuration epoch newer than the one known when its lease was
//!   given (a failover promoted someone else, who may drop this replica). Only where Sentinels
//!   watch, whose epochs tell a replica that a newer master exists; the module asks `M` for its
//!   role ([`Follower::wants_to_ask_master`]). So a group where every server became a replica — a
//!   master restarted with its original `replicaof` while its old master follows it — keeps a
//!   promotable member, and Sentinel's next failover promotes it.
//!
//! - **A replication cycle.** A master restarted with its original `replicaof` may name a server
//!   that now replicates from it: each waits for the other, and no write flows (a replica whose
//!   own link is down answers `PSYNC` with `-NOMASTERLINK`; one that synced just before the
//!   cycle closed shows its link up, with no master behind it). A replica asks its master who
//!   it is whenever that master has been silent for two heartbeats, so it sees either; a
//!   replica whose master replicates from a third server asks that one too, and so sees a
//!   cycle it follows from outside (its master and that server replicate from each other).
//!   Sentinel fails the old master over only once it has reported the replica role for
//!   `down-after-milliseconds` + 20 s, and then skips every replica whose link has been down
//!   for over ten times `down-after-milliseconds` plus the time since (`sentinelSelectSlave` in
//!   `sentinel.c`): below about 2.3 s of `down-after-milliseconds` it never promotes anyone,
//!   with this module or without it. A successor in such a cycle, or following it from
//!   outside, has every counted write, so
//!   it names what a person must run
//!   ([`Follower::to_run`]): `REPLICAOF NO ONE` on it, after which Sentinel reads no link down
//!   and its next failover promotes it. It names it only once the cycle has lasted
//!   [`CYCLE_SEEN_MS`]: until Sentinel has read the old master's replica role (it reads a
//!   master's `INFO` every 10 s), it turns a replica that became a master back into one
//!   (`+convert-to-slave`). The module does not run it itself: a failover is Sentinel's to
//!   decide, and one it began meanwhile could promote another member too.
//!
//! Sentinel is told through `replica-priority` ([`Priority`]): the operator's while promotable,
//! 0 (never promoted) otherwise.

use crate::insync::HEARTBEAT_MS;

/// How long before its lease ends a replica shows Sentinel and Cluster that it may not be
/// promoted, in ms (a quarter of the lease when that is less): during a failover Sentinel reads
/// replicas' `INFO` every second, and Cluster checks `cluster-replica-no-failover` every 100 ms,
/// so neither picks a replica whose lease ends before its promotion arrives (which the command
/// filter would refuse, stalling a Sentinel failover for `failover-timeout`).
pub const LEAD_MS: u64 = 1_500;

/// How far apart a master's and its replicas' clocks may be, in ms: a message the master sent
/// before a replica's link came up can give no lease even read on a clock that far behind. The
/// same bound covers a message heard late (docs/guarantees.md).
pub const CLOCK_SKEW_MS: u64 = 1_000;

/// How long a replica sees a replication cycle before it names what to run, in ms: Sentinel's
/// `INFO` period (10 s), so that Sentinel has read the old master's replica role by then, and
/// 2 s for the reply to come.
pub const CYCLE_SEEN_MS: u64 = 12_000;

/// `LOCK.PROMOTABLE until-ms timeout-ms [replica ...]`, the master's message to its replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promotable {
    /// When the leases end at the latest, by the master's clock (unix ms).
    pub until_ms: u64,
    /// How long a lease lasts from when the message arrives, in ms.
    pub timeout_ms: u64,
    /// The members that may be promoted (`ip:port`).
    pub listed: Vec<String>,
    /// A master back from a crash without the grants it made begins no holding before this
    /// (unix ms, [`crate::horizon`]): neither may a replica promoted in its place, whose data
    /// came from it. Sent as the item [`NOT_BEFORE`]`<ms>` among the replicas, which a replica
    /// of an older release takes for a replica's name that is never its own.
    pub not_before_ms: Option<u64>,
    /// The master's challenge, which a replica that runs the module proves it heard
    /// (`LOCK.REPLCONF`, [`crate::insync::checks`]). Sent as the item [`CHALLENGE`]`<word>`.
    pub challenge: Option<String>,
    /// How long after its lease ended a listed replica may still be promoted on the Sentinels'
    /// word that the master went silent before it ended, in ms ([`Promotability::MasterDown`]):
    /// sent only while the master hears from a majority of the Sentinels, which it then needs
    /// before it drops a member it lost ([`master_down_before_ms`]). Sent as the item
    /// [`MASTER_DOWN`]`<ms>`.
    pub master_down_ms: Option<u64>,
}

/// The prefix of the item of [`Promotable::not_before_ms`].
pub const NOT_BEFORE: &str = "notbefore:";

/// The prefix of the item of [`Promotable::challenge`].
pub const CHALLENGE: &str = "challenge:";

/// The prefix of the item of [`Promotable::master_down_ms`].
pub const MASTER_DOWN: &str = "masterdown:";

/// How fresh the Sentinels' answers must be for a replica to be promoted on their word, in ms:
/// each is asked every 2 s ([`crate::deployment::SENTINEL_ASK_MS`]), and one answer may be late.
pub const SENTINELS_WORD_MS: u64 = 4_000;

/// For a lease of `timeout_ms`: how long before a replica's lease ended a majority of the
/// Sentinels must have had their last valid `PING` reply from its master for it to be promoted
/// once the lease has ended ([`Promotability::MasterDown`]) — the lease less 3 s, since the
/// master dies at most a heartbeat after its last list, and the Sentinels ping every second.
/// `None` when that is too short to cover both clocks ([`CLOCK_SKEW_MS`] each) and half a
/// second.
#[must_use]
pub const fn master_down_margin_ms(timeout_ms: u64) -> Option<u64> {
    let margin = timeout_ms.saturating_sub(3_000);
    if margin > 2 * CLOCK_SKEW_MS + 500 {
        Some(margin)
    } else {
        None
    }
}

/// The master's half of [`Promotability::MasterDown`], for a lease of `timeout_ms`: a member
/// it lost whose lease ended at `until` (the master's clock) may leave the set only once a
/// majority of the Sentinels had a valid `PING` reply from the master at some time from
/// `until - before` (this `before`) to [`MASTER_DOWN_WORD_AGE_MS`] ago. Such a Sentinel cannot
/// also say, to the member, that its last reply came [`master_down_margin_ms`] before the lease
/// ended (`before` is shorter by both clocks and half a second) unless it said so before that
/// reply — and a word that old is stale once the member may be dropped. So a member the master
/// may have dropped, and counted writes without, is never promoted on the Sentinels' word.
#[must_use]
pub const fn master_down_before_ms(timeout_ms: u64) -> Option<u64> {
    match master_down_margin_ms(timeout_ms) {
        Some(margin) => Some(margin - 2 * CLOCK_SKEW_MS - 500),
        None => None,
    }
}

/// How old the Sentinels' word that they had the master's reply must be before the master
/// drops a member on it ([`master_down_before_ms`]), in ms: older than [`SENTINELS_WORD_MS`]
/// by both clocks and half a second.
pub const MASTER_DOWN_WORD_AGE_MS: u64 = SENTINELS_WORD_MS + 2 * CLOCK_SKEW_MS + 500;

impl Promotable {
    /// When the master sent it, by its clock (unix ms).
    #[must_use]
    pub const fn sent_ms(&self) -> u64 {
        self.until_ms.saturating_sub(self.timeout_ms)
    }
}

/// Whether a replica may be promoted, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Promotability {
    /// It may not: not listed, its lease ended, or it never heard a list since it started.
    No,
    /// It holds a lease until this unix ms.
    Lease(u64),
    /// It succeeds a master that now reports the replica role.
    Succession,
    /// Its master does not run the lock module: there is nothing to protect
    /// ([`Follower::master_without_module`]).
    Unguarded,
    /// Its lease ended, but a majority of the Sentinels have had no reply from its master since
    /// well before ([`Follower::sentinels_said`]): the master dropped no member and counted
    /// nothing more (it drops a member it lost only once a majority had its reply after that,
    /// [`master_down_before_ms`]), so this replica has every counted write. For as long as the
    /// master's last list said ([`Promotable::master_down_ms`]): Sentinel's next try after a
    /// failover that failed.
    MasterDown,
}

/// A replication cycle a replica's master reported, as the replica sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cycle {
    /// The master replicates from this very replica.
    ThroughMe,
    /// The master replicates from `via` (`ip:port`, as the master's `ROLE` names it), which
    /// replicates from the master: this replica follows the cycle from outside.
    Outside {
        /// The server the master replicates from.
        via: String,
    },
}

/// A replica's view: what its master said last about who may be promoted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Follower {
    /// The members listed last.
    listed: Vec<String>,
    /// Whether the last list named this replica.
    named: bool,
    /// Until when (unix ms, this server's clock) this replica may be promoted; 0: it may not.
    promotable_until_ms: u64,
    /// When the last message came (unix ms).
    heard_ms: u64,
    /// The lease length the last message gave, in ms.
    timeout_ms: u64,
    /// When the link to the master last came up (unix ms); 0 when not seen.
    link_up_ms: u64,
    /// Whether this server's data came whole from a master by a full sync since it started,
    /// rather than from its own RDB or AOF (which may be older than what it acknowledged).
    synced_whole: bool,
    /// Whether the load under way is a full sync from the master.
    loading_from_master: bool,
    /// The Sentinels' newest configuration epoch when the lease was last given.
    lease_epoch: Option<u64>,
    /// While in succession: the configuration epoch it began under.
    succession: Option<u64>,
    /// The master's last message said it begins no holding before this (unix ms).
    not_before_ms: Option<u64>,
    /// Since when (unix ms) the master has reported a replication cycle, and the cycle.
    cycle: Option<(u64, Cycle)>,
    /// The challenge the master's last message carried.
    challenge: Option<String>,
    /// The master was found without the lock module, and has sent no list since: there is
    /// nothing to protect, so this replica may be promoted as Redis would.
    unguarded: bool,
    /// The last message's [`Promotable::master_down_ms`].
    master_down_ms: Option<u64>,
    /// Since when (unix ms) a majority of the Sentinels have had no reply from the master, and
    /// when they said so ([`Follower::sentinels_said`]).
    silent: Option<(u64, u64)>,
}

impl Follower {
    /// The master's message `LOCK.PROMOTABLE until-ms timeout-ms listed...` arrived at `now_ms`,
    /// when the Sentinels' newest configuration epoch known was `epoch`; `me` tells whether an
    /// `ip:port` is this server.
    pub fn heard(
        &mut self,
        now_ms: u64,
        message: &Promotable,
        epoch: Option<u64>,
        me: impl Fn(&str) -> bool,
    ) {
        let listed = message.listed.iter().any(|id| me(id));
        let history = !self.synced_whole
            && self.link_up_ms > 0
            && message.sent_ms() < self.link_up_ms.saturating_add(CLOCK_SKEW_MS);
        if !listed {
            self.promotable_until_ms = 0;
        } else if !history {
            self.promotable_until_ms = now_ms
                .saturating_add(message.timeout_ms)
                .min(message.until_ms);
            self.lease_epoch = epoch;
        }
        self.heard_ms = now_ms;
        self.timeout_ms = message.timeout_ms;
        self.succession = None;
        self.cycle = None;
        self.named = listed;
        self.listed.clone_from(&message.listed);
        self.not_before_ms = message.not_before_ms;
        self.challenge.clone_from(&message.challenge);
        self.unguarded = false;
        self.master_down_ms = message.master_down_ms;
    }

    /// At `now_ms`, the Sentinels' fresh answers say since when a majority of them have had no
    /// valid `PING` reply from this replica's master (`None`: no such majority, or they name
    /// another master).
    pub const fn sentinels_said(&mut self, now_ms: u64, silent_since_ms: Option<u64>) {
        self.silent = match silent_since_ms {
            Some(since) => Some((now_ms, since)),
            None => None,
        };
    }

    /// Whether the Sentinels' word makes this replica promotable at `now_ms` although its lease
    /// ended ([`Promotability::MasterDown`]).
    const fn master_down(&self, now_ms: u64) -> bool {
        let (Some(extension), Some((said_ms, since)), Some(margin)) = (
            self.master_down_ms,
            self.silent,
            master_down_margin_ms(self.timeout_ms),
        ) else {
            return false;
        };
        let ended = self.promotable_until_ms;
        self.named
            && ended > 0
            && now_ms < ended.saturating_add(extension)
            && now_ms.saturating_sub(said_ms) <= SENTINELS_WORD_MS
            && since.saturating_add(margin) <= ended
    }

    /// The heartbeat a master whose writes are paused answered when asked (it sends nothing in
    /// the stream meanwhile), heard at `now_ms` once this replica applied the master's offset:
    /// taken as [`Follower::heard`] takes one from the stream — unless a Sentinel announced a
    /// configuration epoch newer than the one this replica's last lease was given under. Then
    /// a failover promoted another server, which counts writes without the paused master's
    /// word, and may drop this replica once the lease it inherited ends.
    pub fn heard_paused(
        &mut self,
        now_ms: u64,
        message: &Promotable,
        epoch: Option<u64>,
        me: impl Fn(&str) -> bool,
    ) {
        if let (Some(epoch), Some(given)) = (epoch, self.lease_epoch)
            && epoch > given
        {
            return;
        }
        self.heard(now_ms, message, epoch, me);
    }

    /// This replica's master answered that it does not know the lock module's commands: until
    /// it sends a list (it loaded the module) or the master changes, this replica may be
    /// promoted as Redis would ([`Promotability::Unguarded`]): the master granted no lock, so
    /// no promotion can lose one. Loading the module on replicas before their master keeps
    /// failover that way.
    pub const fn master_without_module(&mut self) {
        self.unguarded = true;
    }

    /// The challenge the master's last message carried, which `LOCK.REPLCONF` proves.
    #[must_use]
    pub fn challenge(&self) -> Option<&str> {
        self.challenge.as_deref()
    }

    /// The link to the master came up at `now_ms`: messages sent before it are history.
    pub const fn linked(&mut self, now_ms: u64) {
        self.link_up_ms = now_ms;
    }

    /// Whether the module should ask the master who it is at `now_ms`: while in succession (to
    /// see the master become a master again), and while the master has been silent for two
    /// heartbeats — its link down, or up but with no list coming: it may have become a replica,
    /// of this very server even (a replication cycle, whose links Redis may show up).
    #[must_use]
    pub const fn wants_to_ask_master(&self, now_ms: u64) -> bool {
        self.succession.is_some() || now_ms.saturating_sub(self.heard_ms) > 2 * HEARTBEAT_MS
    }

    /// The master reported at `now_ms` that it is a master (`master`) or a replica — in a
    /// replication `cycle` or not — when the Sentinels' newest configuration epoch known was
    /// `epoch` (`None`: no Sentinel watches). A replica master starts a succession if this
    /// replica's lease still lasts and no newer epoch came since it was given; a master ends
    /// one.
    pub fn master_reported(
        &mut self,
        now_ms: u64,
        master: bool,
        cycle: Option<Cycle>,
        epoch: Option<u64>,
    ) {
        self.cycle = match (self.cycle.take(), cycle) {
            (_, None) => None,
            _ if master => None,
            (Some((since, seen)), Some(cycle)) if seen == cycle => Some((since, cycle)),
            (_, Some(cycle)) => Some((now_ms, cycle)),
        };
        if master {
            self.succession = None;
        } else if self.succession.is_none()
            && now_ms < self.promotable_until_ms
            && let (Some(epoch), Some(lease_epoch)) = (epoch, self.lease_epoch)
            && epoch == lease_epoch
        {
            self.succession = Some(epoch);
        }
    }

    /// A Sentinel announced the configuration epoch `epoch`: one newer than the succession
    /// began under ends it (a failover promoted another server).
    pub const fn epoch_seen(&mut self, epoch: u64) {
        if let Some(began) = self.succession
            && epoch > began
        {
            self.succession = None;
        }
    }

    /// This replica's master changed: a succession ends (its lease, if any, stands: a master
    /// it is moved to inherited it with a longer one).
    pub fn interrupted(&mut self) {
        self.succession = None;
        self.cycle = None;
        self.unguarded = false;
    }

    /// This server starts loading its data: by a full sync from its master (`from_master`),
    /// or from its own RDB or AOF (a start, `DEBUG RELOAD`). Either ends a lease and a
    /// succession — they spoke of the data replaced, and the master may send older data than
    /// it counted (restarted since, or a replica of a server without those writes) — and until
    /// a full sync has loaded ([`Follower::loaded`]), messages sent before the link came up give
    /// no lease. The master's next list gives one again.
    pub fn loading(&mut self, from_master: bool) {
        self.interrupted();
        self.promotable_until_ms = 0;
        self.synced_whole = false;
        self.loading_from_master = from_master;
    }

    /// The load [`Follower::loading`] began ended, `complete` or failed (a failed full sync
    /// leaves the data it had before, or none).
    pub const fn loaded(&mut self, complete: bool) {
        self.synced_whole = complete && self.loading_from_master;
        self.loading_from_master = false;
    }

    /// Whether the master reported last that it replicates from this server.
    #[must_use]
    pub const fn in_cycle(&self) -> bool {
        self.cycle.is_some()
    }

    /// What a person must run on this replica at `now_ms` to end a replication cycle, if
    /// anything: `REPLICAOF NO ONE` while it succeeds the master it has seen in a cycle for
    /// [`CYCLE_SEEN_MS`] (it has every write that master counted) — and, seen from outside,
    /// only when the master's last list did not name the server the master replicates from,
    /// which then succeeds nobody. So at most one server names it: the master replicates from
    /// one server, which names it if it succeeds, and a replica outside names it only when that
    /// one cannot. A replica in a cycle without succession cannot tell which server has them.
    #[must_use]
    pub fn to_run(&self, now_ms: u64) -> Option<&'static str> {
        let (since, cycle) = self.cycle.as_ref()?;
        let mine = match cycle {
            Cycle::ThroughMe => true,
            Cycle::Outside { via } => !self.listed.contains(via),
        };
        (mine && self.succession.is_some() && now_ms.saturating_sub(*since) >= CYCLE_SEEN_MS)
            .then_some("REPLICAOF NO ONE")
    }

    /// Whether and why this replica may be promoted at `now_ms`.
    #[must_use]
    pub const fn promotability(&self, now_ms: u64) -> Promotability {
        if self.unguarded {
            Promotability::Unguarded
        } else if self.succession.is_some() {
            Promotability::Succession
        } else if now_ms < self.promotable_until_ms {
            Promotability::Lease(self.promotable_until_ms)
        } else if self.master_down(now_ms) {
            Promotability::MasterDown
        } else {
            Promotability::No
        }
    }

    /// True while this replica may be promoted, at `now_ms`.
    #[must_use]
    pub const fn promotable(&self, now_ms: u64) -> bool {
        !matches!(self.promotability(now_ms), Promotability::No)
    }

    /// What to show Sentinel and Cluster at `now_ms`: promotable, and for [`LEAD_MS`] (or a
    /// quarter of the lease) more.
    #[must_use]
    pub const fn shown_promotable(&self, now_ms: u64) -> bool {
        let lead = if LEAD_MS < self.timeout_ms / 4 {
            LEAD_MS
        } else {
            self.timeout_ms / 4
        };
        self.promotable(now_ms.saturating_add(lead))
    }

    /// Until when (unix ms) its master's last message said it begins no holding: a replica
    /// promoted in its place waits as long.
    #[must_use]
    pub const fn not_before_ms(&self) -> Option<u64> {
        self.not_before_ms
    }

    /// The members its master listed last.
    #[must_use]
    pub fn listed(&self) -> &[String] {
        &self.listed
    }

    /// How long, at `now_ms`, since its master's last list came, in ms (since it started when
    /// none came).
    #[must_use]
    pub const fn silent_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.heard_ms)
    }

    /// Whether the last list named this replica: of the replicas of a master that died for
    /// good, the one so named with the highest replication offset has every write it counted.
    #[must_use]
    pub const fn named(&self) -> bool {
        self.named
    }

    /// Forgets what its master said: a new master, or none (where its data came from stays).
    pub fn forget(&mut self) {
        *self = Self {
            synced_whole: self.synced_whole,
            loading_from_master: self.loading_from_master,
            ..Self::default()
        };
    }
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
