//! The in-sync replica set on the server (the rules: [`leasehold_core::insync`]).
//!
//! - Every [`TICK_MS`] a timer looks: what the deployment says of failover times
//!   ([`crate::deployment`]), which sets the lease; on a master, `INFO replication`: replicas
//!   that caught up join, members gone quiet are listed no more and, later, dropped; every
//!   [`HEARTBEAT_MS`] (and at once on a change) `LOCK.PROMOTABLE` lists the members that may be
//!   promoted, in the replication stream. `LOCK.INSYNC` tells a client whether its writes count.
//! - On a replica, `LOCK.PROMOTABLE` from the master says whether this replica may be promoted,
//!   for how long; the link's coming up marks what is history, a full sync or a new master ends
//!   a succession, and a master gone quiet is asked for its role (`ROLE`, [`crate::probes`]),
//!   with the credentials the server replicates with; a refused question is logged once and
//!   shown by `INFO lock` (`lock_insync_role_check`). The same
//!   timer shows Sentinel and Cluster whether the replica may be promoted, ahead of its lease's
//!   end ([`Follower::shown_promotable`]): `replica-priority 0` for Sentinel, `cluster-replica-no-failover yes` in
//!   Redis Cluster. The operator's priority is kept in `lock.replica-priority` (so
//!   `CONFIG REWRITE` writes it down and a restart reads it) and given back when the replica is
//!   promotable again — and to a master. The command filter ([`crate::promotion`]) asks
//!   [`refusal`] before any promotion, so none rests on Sentinel having read the priority.
//! - A promoted replica inherits the set its master listed last ([`on_role_changed`]); a
//!   demoted master forgets its set and starts unpromotable.
//! - A master the verified Sentinels no longer name ([`crate::deployment`]) counts no write
//!   until it is a replica ([`note_if_replaced`]): it changes nothing in Redis — Sentinel
//!   turns it into a replica itself.
//! - That this server belongs to a replication group, and the failover time learned, are kept
//!   across restarts ([`crate::state_file`]).

use std::cell::Cell;
use std::net::{IpAddr, UdpSocket};
use std::os::raw::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use leasehold_core::args;
use leasehold_core::deployment::{Failover, Record, SENTINEL_FORGET_MS, Said, Source};
use leasehold_core::insync::replica::SENTINELS_WORD_MS;
use leasehold_core::insync::synced::{self, Settled};
use leasehold_core::insync::{
    self, Cycle, Follower, HEARTBEAT_MS, Master, Priority, Promotability, Promotion, Refusal,
    Standing, Status, Timing,
};
use redis_module::server_events::LoadingSubevent;
use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue, raw};
use redis_module_macros::loading_event_handler;

use crate::api::subscribe;
use crate::clock;
use crate::config;
use crate::deployment;
use crate::effects;
use crate::hello;
use crate::horizon;
use crate::probes::{self, Answer, Question};
use crate::replica_check;
use crate::replies;
use crate::server_config;
use crate::state;
use crate::state_file::{self, Kept};

/// How often the set is looked at, in ms.
pub const TICK_MS: u64 = 200;

/// How often this server asks another who it is, at most, in ms.
const ASK_PERIOD_MS: u64 = 1_000;

/// What this server knows of the set.
#[derive(Debug, Default)]
struct InSync {
    /// The set, while a master (and the group flag, always).
    master: Master,
    /// What the master said last, while a replica.
    follower: Follower,
    /// Whether the Sentinels still name this server master, while a master.
    record: Record,
    /// The operator's priority; `None` until first needed.
    priority: Option<Priority>,
    /// When the last `LOCK.PROMOTABLE` was sent (unix ms).
    sent_ms: u64,
    /// Whether this server was a master at its last look.
    is_master: bool,
    /// The timing of the last look.
    timing: Option<Timing>,
    /// A replica's master (`host:port`) at the last look.
    master_address: Option<String>,
    /// A replica's master's own master, while the master answers that it replicates.
    behind: Behind,
    /// When this replica last asked another server its role (unix ms).
    asked_ms: u64,
    /// This server's `run_id`, read at start.
    run_id: String,
    /// The address the Sentinels name this server by, when it is not one it knows as its own
    /// (NAT, a mapped port): learned from the run id they read from this server.
    named_as: Option<String>,
    /// The master that replaced this one, while the Sentinels name it (logged once).
    replaced_by: Option<String>,
    /// Why this replica's master did not say its role last, if it did not (`NOPERM ...`:
    /// succession is off); logged once.
    role_refused: Option<String>,
    /// How this server knew itself at the last look: when that changes (`CONFIG SET
    /// replica-announce-port`, ...), what the Sentinels' word meant is checked again.
    me: Option<Me>,
    /// What the state file holds.
    kept: Kept,
    /// This master's members, sorted (kept for its next start).
    members: Vec<String>,
    /// Whether the log already says that `CONFIG` is out of reach.
    warned: bool,
    /// Whether the log already says that `lock.insync-timeout-ms` is too short.
    warned_timeout: bool,
}

/// What a replica knows of the server its master replicates from (`via`), asked as its master
/// is: whether it answered that it replicates from the master — a replication cycle this
/// replica follows from outside ([`Follower::master_reported`]).
#[derive(Debug, Default)]
struct Behind {
    /// The master's master (`host:port`), as the master reported it last.
    via: Option<String>,
    /// Whether `via` answered last that it is a replica of this replica's master.
    closes_cycle: bool,
    /// Whether the next question goes to `via` rather than to the master.
    ask_via: bool,
}

impl InSync {
    /// Notes the master's members, sorted, for the state file ([`keep`]).
    fn note_members(&mut self) {
        self.members = self.master.members().map(str::to_owned).collect();
        self.members.sort();
    }
}

static IN_SYNC: LazyLock<Mutex<InSync>> = LazyLock::new(Mutex::default);

/// Set once a verified Sentinel has connected to this server ([`crate::deployment`]): the
/// server belongs to a replication group even if it has never had a replica since it started —
/// a master back without its data, as Sentinel promotes another, must not count its writes
/// alone.
static SENTINEL_SEEN: AtomicBool = AtomicBool::new(false);

/// When (unix ms) a verified Sentinel was last seen connected to this server (its links are
/// looked for every 10 s) — or the start, when the state file says Sentinels watched it
/// before: `FAILOVER` is refused while that is less than [`SENTINEL_FORGET_MS`] ago
/// ([`watched_by_sentinel`]).
static SENTINEL_LAST_MS: AtomicU64 = AtomicU64::new(0);

/// Whether Sentinels watch this server at `now_ms`: one was seen connected within
/// [`SENTINEL_FORGET_MS`] (a Sentinel that lost its link reconnects within seconds), so a
/// server taken out of Sentinel's care takes `FAILOVER` again a minute later.
fn watched_by_sentinel(now_ms: u64) -> bool {
    now_ms.saturating_sub(SENTINEL_LAST_MS.load(Ordering::Relaxed)) < SENTINEL_FORGET_MS
}

/// Someone other than this module set `replica-priority` to `priority` ([`crate::promotion`]
/// sees the `CONFIG SET`): it is the operator's from now on, given to this replica whenever it
/// may be promoted, and written to `lock.replica-priority` so that `CONFIG REWRITE` keeps it.
pub fn operator_priority(priority: i64) {
    config::REPLICA_PRIORITY.store(priority, Ordering::Relaxed);
}

fn in_sync() -> MutexGuard<'static, InSync> {
    let mut state = IN_SYNC.lock().unwrap_or_else(PoisonError::into_inner);
    if SENTINEL_SEEN.load(Ordering::Relaxed) {
        state.master.group();
    }
    state
}

/// Reads what the last start kept, watches the link to the master, and starts the timer; a
/// replica makes itself unpromotable at once (it has heard no master yet).
///
/// # Errors
/// The server refuses the subscription to the master link's changes.
pub fn start(ctx: &Context) -> Result<(), RedisError> {
    let kept = state_file::load(ctx);
    deployment::start(kept.failover());
    {
        let mut state = in_sync();
        if kept.grouped {
            state.master.group();
        }
        if is_master(ctx) && !kept.members.is_empty() {
            // Back as a master: its members may still hold the leases it gave them and be
            // promoted, so writes wait for them as for an inherited set.
            let me = Me::of(ctx);
            let timing = config::insync_timing(insync::lease_ms(deployment::failover().ms));
            let now = clock::now_ms();
            state.master = Master::inherit(&kept.members, |id| me.is(id), now, timing);
            state.members.clone_from(&kept.members);
        }
        if kept.sentinels {
            SENTINEL_LAST_MS.store(clock::now_ms(), Ordering::Relaxed);
        }
        state.kept = kept;
        state.is_master = is_master(ctx);
        state.run_id = server_config::info(ctx, "server")
            .and_then(|info| server_config::info_field(&info, "run_id").map(str::to_owned))
            .unwrap_or_default();
    }
    keep_promotability(ctx, clock::now_ms());
    ctx.create_timer(Duration::from_millis(TICK_MS), tick, ());
    subscribe(
        ctx,
        raw::REDISMODULE_EVENT_MASTER_LINK_CHANGE,
        Some(on_master_link),
        "ERR could not watch the link to the master",
    )
}

/// Every [`TICK_MS`]: the deployment, then the master's set or the replica's master, then the
/// priority shown and what the state file keeps.
fn tick(ctx: &Context, (): ()) {
    let now = clock::now_ms();
    let master = is_master(ctx);
    let answers = probes::answers();
    let (failover, _) = deployment::look(ctx, now, &answers);
    if deployment::sentinel_connected() {
        SENTINEL_SEEN.store(true, Ordering::Relaxed);
        SENTINEL_LAST_MS.store(now, Ordering::Relaxed);
    }
    let timing = config::insync_timing(insync::lease_ms(failover.ms));
    warn_if_too_short(ctx, &failover, timing);
    {
        let mut state = in_sync();
        state.is_master = master;
        state.timing = Some(timing);
    }
    if master {
        look_at_set(ctx, now, timing);
        note_if_replaced(ctx);
    } else {
        look_at_master(ctx, now, &answers);
    }
    keep_promotability(ctx, now);
    keep(ctx, &failover);
    ctx.create_timer(Duration::from_millis(TICK_MS), tick, ());
}

fn is_master(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::MASTER)
}

/// Logs once when the operator's `lock.insync-timeout-ms` is shorter than the lease the
/// deployment needs: a failover could then find no replica to promote.
fn warn_if_too_short(ctx: &Context, failover: &Failover, timing: Timing) {
    let short = too_short(failover, timing);
    let mut state = in_sync();
    if short && !state.warned_timeout {
        ctx.log_warning(&format!(
            "lock: lock.insync-timeout-ms {} is shorter than this deployment's failovers need \
             ({} ms: {}): a failover may find no replica it may promote",
            timing.timeout_ms,
            insync::lease_ms(failover.ms),
            failover.source.describe()
        ));
    }
    state.warned_timeout = short;
}

/// True when the operator's lease is shorter than the one `failover` needs.
fn too_short(failover: &Failover, timing: Timing) -> bool {
    config::insync_timeout_ms().is_some() && timing.timeout_ms < insync::lease_ms(failover.ms)
}

/// The master's turn: takes in `INFO replication`, each replica marked with what is known of
/// its module ([`crate::replica_check`]), and lists the promotable members when due, with the
/// challenge.
fn look_at_set(ctx: &Context, now: u64, timing: Timing) {
    let Some(info) = server_config::info(ctx, "replication") else {
        return;
    };
    status_may_change();
    let looked = replica_check::look(ctx, now, insync::parse(&info));
    let replication = looked.replication;
    let mut state = in_sync();
    let names_me = names_me(ctx, &state);
    let answered = |from, to| deployment::master_answered_between(&names_me, from, to);
    // The promise of promotion on the Sentinels' word, while their word flows.
    let timing = Timing {
        master_down_ms: answered(now.saturating_sub(SENTINELS_WORD_MS), now)
            .then(|| deployment::master_down_ms(timing.timeout_ms)),
        ..timing
    };
    let mut changed = false;
    for id in &looked.silent {
        state.master.group();
        changed |= state.master.remove(id);
    }
    changed |= state.master.observe(now, &replication, timing, answered);
    if changed {
        state.note_members();
    }
    let paused = effects::replication_paused();
    if state.master.awaits_acknowledgement() && !paused {
        // In a timer turn of its own: beside this turn's heartbeat, Redis would wrap the two
        // in a MULTI, which reaches the AOF empty (the request goes to replicas only).
        ctx.create_timer(Duration::ZERO, ask_for_acknowledgements, ());
    }
    let due = changed || now >= state.sent_ms.saturating_add(HEARTBEAT_MS);
    let has_group = state.master.grouped() || !replication.replicas.is_empty();
    if !paused {
        replica_check::paused_heartbeat(None);
    }
    if !due || !has_group {
        return;
    }
    let listed = state.master.list(now, timing);
    state.sent_ms = now;
    drop(state);
    let message = effects::heartbeat(
        (now.saturating_add(timing.timeout_ms), timing.timeout_ms),
        &listed,
        (horizon::waiting_until(), timing.master_down_ms),
        &replica_check::challenge(),
    );
    if paused {
        // Not once the Sentinels name another master: it counts without this one's word.
        let replaced = in_sync().master.is_replaced();
        replica_check::paused_heartbeat((!replaced).then_some((message, replication.offset)));
    } else {
        effects::replicate_heartbeat(ctx, &message);
    }
}

/// Asks the replicas for their acknowledgement ([`effects::ask_for_acknowledgements`]), from a
/// timer turn of its own.
fn ask_for_acknowledgements(ctx: &Context, (): ()) {
    effects::ask_for_acknowledgements(ctx);
}

/// What tells, of a Sentinel's answer, that it names this server: its address
/// (or the one the Sentinels name this server by), or its run id.
fn names_me(ctx: &Context, state: &InSync) -> impl Fn(&Said) -> bool + use<> {
    let me = Me::of(ctx);
    let named_as = state.named_as.clone();
    let run_id = state.run_id.clone();
    move |said: &Said| {
        said.master
            .as_ref()
            .is_some_and(|(master, _)| me.names(master, named_as.as_deref()))
            || said.runid.as_deref() == Some(run_id.as_str())
    }
}

/// A master the verified Sentinels' newest word no longer names
/// ([`leasehold_core::deployment::Record`]) counts no write until it is a replica, and holds the
/// fencing counter's reserve: the Sentinels may name it master again without a command it sees
/// (a lost `SLAVEOF NO ONE`), after the one they named issued tokens. It changes nothing in
/// Redis: Sentinel makes it a replica itself some seconds later. A word that names this server's
/// run id by an address it does not know as its own (NAT, a mapped port) teaches it that
/// address.
fn note_if_replaced(ctx: &Context) {
    let named = deployment::named_master();
    let me = Me::of(ctx);
    let mut state = in_sync();
    if state.me.as_ref() != Some(&me) {
        state.record.readdressed();
        state.me = Some(me.clone());
    }
    let named_as = state.named_as.clone();
    let is_me = |id: &str| me.names(id, named_as.as_deref());
    let names_me = named
        .as_ref()
        .is_some_and(|named| named.names_me(is_me, &state.run_id));
    if named.is_some() && !names_me {
        deployment::hasten();
    }
    if let Some(named) = named.as_ref().filter(|_| names_me)
        && !me.names(&named.master, named_as.as_deref())
    {
        ctx.log_notice(&format!(
            "lock: the Sentinels name this server {} (by its run id)",
            named.master
        ));
        state.named_as = Some(named.master.clone());
    }
    let replaced_by = state.record.replaced_by(named.as_ref(), names_me);
    if replaced_by.is_some() {
        state::counter().hold_reserve(true);
    }
    if let Some(master) = replaced_by.as_ref().filter(|_| state.replaced_by.is_none()) {
        ctx.log_warning(&format!(
            "lock: the Sentinels name {master} master, not this server: it counts no lock write \
             (synced grants get NOREPLICAS) until it replicates — Sentinel makes it a replica of \
             {master} itself — so that no grant rests on data {master} may lack"
        ));
    }
    state.master.replaced(replaced_by.is_some());
    state.replaced_by = replaced_by;
}

/// Whether this server may ask another who it is at `now`: it did not within the last
/// [`ASK_PERIOD_MS`].
fn may_ask(state: &InSync, now: u64) -> bool {
    now >= state.asked_ms.saturating_add(ASK_PERIOD_MS)
}

/// Asks `host:port` its role (`ROLE`, answered by [`probes`]) unless this server asked within
/// the last [`ASK_PERIOD_MS`]; with the credentials the server replicates with when it is this
/// replica's own master (`own`), without any otherwise.
fn ask_role(ctx: &Context, mut state: MutexGuard<InSync>, now: u64, address: &str, own: bool) {
    if !may_ask(&state, now) {
        return;
    }
    let Some(peer) = deployment::peer(ctx, address, own) else {
        return;
    };
    state.asked_ms = now;
    drop(state);
    probes::ask(Question::Role(peer));
}

/// A replica's turn: notes a new master (which ends a succession) and a newer Sentinel epoch,
/// tells the master that the module runs here ([`hello`]), takes the master's role as asked,
/// and asks again while the master is quiet.
fn look_at_master(ctx: &Context, now: u64, answers: &[Answer]) {
    let info = server_config::info(ctx, "replication").unwrap_or_default();
    let host = server_config::info_field(&info, "master_host").map(str::to_owned);
    let port = server_config::info_field(&info, "master_port").and_then(|p| p.parse::<u16>().ok());
    let address = host.as_ref().zip(port).map(|(h, p)| format!("{h}:{p}"));
    let epoch = deployment::config_epoch();
    let mut state = in_sync();
    if state.master_address != address {
        state.follower.interrupted();
        state.master_address.clone_from(&address);
        state.behind = Behind::default();
    }
    if let Some(epoch) = epoch {
        state.follower.epoch_seen(epoch);
    }
    let silent_since = address.as_deref().and_then(|master| {
        deployment::master_silent_since(master, now.saturating_sub(SENTINELS_WORD_MS))
    });
    state.follower.sentinels_said(now, silent_since);
    let link_up = server_config::info_field(&info, "master_link_status") == Some("up");
    let challenge = state.follower.challenge().map(str::to_owned);
    let master = address.as_deref().filter(|_| link_up);
    let quiet = state.follower.wants_to_ask_master(now);
    let heard = hello::look(ctx, now, (master, challenge.as_deref()), quiet, answers);
    if heard.without_module {
        state.follower.master_without_module();
    }
    if let Some((heartbeat, offset)) = heard.paused {
        hear_paused(ctx, &mut state, (now, epoch), &heartbeat, (offset, &info));
    }
    for answer in answers {
        let Answer::Role {
            address: asked,
            role,
        } = answer
        else {
            continue;
        };
        if Some(asked) == address.as_ref() {
            note_role_refused(ctx, &mut state, asked, role);
        }
        let Ok(identity) = role else {
            continue;
        };
        if Some(asked) == address.as_ref() {
            let of_me = identity
                .master_address
                .as_deref()
                .is_some_and(|id| Me::of(ctx).names(id, state.named_as.as_deref()));
            let via = identity.master_address.clone().filter(|_| !of_me);
            if state.behind.via != via {
                state.behind = Behind {
                    via,
                    ..Behind::default()
                };
            }
            let cycle = if of_me {
                Some(Cycle::ThroughMe)
            } else {
                state
                    .behind
                    .via
                    .clone()
                    .filter(|_| !identity.master && state.behind.closes_cycle)
                    .map(|via| Cycle::Outside { via })
            };
            let before = (state.follower.in_cycle(), state.follower.to_run(now));
            state
                .follower
                .master_reported(now, identity.master, cycle, epoch);
            let via = state.behind.via.as_deref();
            log_cycle(ctx, (asked, via), before, &state.follower, now);
        } else if state.behind.via.as_ref() == Some(asked) {
            state.behind.closes_cycle = !identity.master && identity.master_address == address;
        }
    }
    if !state.follower.wants_to_ask_master(now) || !may_ask(&state, now) {
        return;
    }
    // The master and, while it replicates from another server, that server, in turn.
    let behind = &mut state.behind;
    let (next, own) = if behind.ask_via {
        (behind.via.clone(), false)
    } else {
        (address, true)
    };
    behind.ask_via = !behind.ask_via && behind.via.is_some();
    if let Some(next) = next {
        ask_role(ctx, state, now, &next, own);
    }
}

/// The master, its writes paused, answered the `heartbeat` it could not send, at its
/// replication `offset`: taken as if it came in the stream once this replica has applied that
/// offset (its `INFO replication` in `info`) — then it has every write the master counted
/// before, as a heartbeat in the stream would tell.
fn hear_paused(
    ctx: &Context,
    state: &mut InSync,
    (now, epoch): (u64, Option<u64>),
    heartbeat: &str,
    (offset, info): (u64, &str),
) {
    let applied = server_config::info_field(info, "master_repl_offset")
        .and_then(|applied| applied.parse::<u64>().ok())
        .unwrap_or(0);
    if applied < offset {
        return;
    }
    let words: Vec<&[u8]> = heartbeat.split(' ').map(str::as_bytes).collect();
    if let Ok(message) = args::promotable(&words) {
        let me = Me::of(ctx);
        state
            .follower
            .heard_paused(now, &message, epoch, |id| me.is(id));
    }
}

/// Notes whether this replica's master answered `ROLE` (`role`), and logs the first refusal:
/// succession (rule 9) needs the answer, so while the master refuses it the rule is off, and
/// `INFO lock` says so. A network's error (the master may be down) changes nothing.
fn note_role_refused<T>(ctx: &Context, state: &mut InSync, master: &str, role: &Result<T, String>) {
    let error = match role {
        Ok(_) => None,
        Err(error) if refused_by_server(error) => Some(error),
        Err(_) => return,
    };
    if let Some(error) = error
        && state.role_refused.is_none()
    {
        ctx.log_warning(&format!(
            "lock: cannot ask the master {master} its role ({error}): while it does not answer, \
             this replica cannot succeed it (INFO lock: lock_insync_role_check); the user \
             masteruser names needs +role beside +psync +replconf +ping"
        ));
    }
    state.role_refused = error.cloned();
}

/// True when `error` is a server's refusal (`NOPERM ...`, `NOAUTH ...`), not a network's.
fn refused_by_server(error: &str) -> bool {
    ["NOPERM", "NOAUTH", "WRONGPASS", "ERR"]
        .iter()
        .any(|code| error.starts_with(code))
}

/// Logs a replication cycle through `master` when it is first seen — `master` replicates from
/// this server, or from `via`, which replicates from `master` — and what to run once the
/// follower names it; `(was, named)`: whether it was seen and what was named before this
/// answer ([`leasehold_core::insync::replica`]).
fn log_cycle(
    ctx: &Context,
    (master, via): (&str, Option<&str>),
    (was, named): (bool, Option<&str>),
    follower: &Follower,
    now: u64,
) {
    if !was && follower.in_cycle() {
        let closed_by = via.map_or_else(
            || "this server".to_owned(),
            |via| format!("{via}, which replicates from {master}"),
        );
        let succeeds = if follower.promotability(now) == Promotability::Succession {
            format!(
                "This server succeeds {master} and has every write it counted: INFO lock names \
                 what to run here in lock_insync_to_run once Sentinel has seen the cycle (12 s)"
            )
        } else {
            format!(
                "This server does not succeed {master} (it held no lease when {master} became a \
                 replica), so it cannot tell who has every counted write: if no server's INFO \
                 lock shows lock_insync_to_run, see 'No replica can be promoted' in the \
                 troubleshooting guide"
            )
        };
        ctx.log_warning(&format!(
            "lock: replication cycle: this server replicates from {master}, which replicates \
             from {closed_by}, so none of them can sync; Sentinel skips replicas whose link has \
             been down for over ten times down-after-milliseconds, and may promote nobody. \
             {succeeds}"
        ));
    }
    if let (None, Some(command)) = (named, follower.to_run(now)) {
        ctx.log_warning(&format!(
            "lock: replication cycle with {master}: this server succeeds it and has every write \
             it counted; run {command} here, and Sentinel's next failover promotes it"
        ));
    }
}

/// `RedisModuleEvent_MasterLinkChange`: the link to the master came up, so messages the master
/// sent before now are history ([`leasehold_core::insync::replica`]).
unsafe extern "C" fn on_master_link(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent == raw::REDISMODULE_SUBEVENT_MASTER_LINK_UP {
        in_sync().follower.linked(clock::now_ms());
    }
}

/// This server loads its data: by a full sync from its master (its lease and succession end,
/// and the master's next list gives a lease again), or from its own RDB or AOF, which may lack
/// writes it acknowledged ([`leasehold_core::insync::replica`]).
#[loading_event_handler]
fn on_loading(_ctx: &Context, event: LoadingSubevent) {
    let mut state = in_sync();
    let follower = &mut state.follower;
    match event {
        LoadingSubevent::ReplStarted => follower.loading(true),
        LoadingSubevent::RdbStarted | LoadingSubevent::AofStarted => follower.loading(false),
        LoadingSubevent::Ended => follower.loaded(true),
        LoadingSubevent::Failed => follower.loaded(false),
    }
}

/// `LOCK.INSYNC`: on a master, `[offset, acked, members, required, replid, replid2]`: what a
/// client needs to count the writes it sent before on this connection (they count when
/// `members >= required` and, from a later call, `acked >= offset`).
///
/// # Errors
/// Arity; `ERR` on a replica.
pub fn command(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() != 1 {
        return Err(RedisError::WrongArity);
    }
    if !is_master(ctx) {
        return Err(RedisError::Str(
            "ERR LOCK.INSYNC is answered by the master; this server is a replica",
        ));
    }
    let info = server_config::info(ctx, "replication").unwrap_or_default();
    Ok(reply(&status_of(&info), &info))
}

thread_local! {
    /// Whether something [`status`] reads may have changed since [`status_changed`] was last taken.
    static CHANGED: Cell<bool> = const { Cell::new(false) };
}

/// Something [`status`] reads may have changed: a replica acknowledged an offset (`REPLCONF
/// ACK`, seen by the command filter), one came or went (`RedisModuleEvent_ReplicaChange`), or
/// the set was looked at.
/// [`crate::synced`] reads the status again only then, or when writes were held since its
/// last read, or some ms later.
pub fn status_may_change() {
    CHANGED.set(true);
}

/// True once after each [`status_may_change`].
pub fn status_changed() -> bool {
    CHANGED.replace(false)
}

/// Whether a master's writes count now ([`Master::status`]): what `LOCK.INSYNC` answers, and
/// what [`crate::synced`] holds replies until.
pub fn status(ctx: &Context) -> Status {
    status_of(&server_config::info(ctx, "replication").unwrap_or_default())
}

fn status_of(info: &str) -> Status {
    let replication = replica_check::marked(insync::parse(info));
    in_sync()
        .master
        .status(&replication, config::min_insync_replicas())
}

/// What a synced write meets before any replica is asked, without reading `INFO`: refused at
/// once ([`synced::refused_at_once`]: the Sentinels name another master, or the set is below its
/// size), or how many members must acknowledge it (0: it counts now).
///
/// # Errors
/// The refusal.
pub fn gate() -> Result<usize, Settled> {
    let state = in_sync();
    let members = state.master.members().count();
    let required = state.master.required(config::min_insync_replicas());
    let (unproven, silent) = state.master.unproven();
    synced::refused_at_once(members, required, state.master.is_replaced(), silent)
        .map_or(Ok(members + unproven), Err)
}

/// True on a master with nothing to wait for, without reading `INFO`: no member, none required,
/// and no replica that has not said it runs the module. A write there counts at once.
pub fn lone() -> bool {
    // `Ok(0)`: no member and none unproven, so none required either (fewer than required is
    // refused).
    gate() == Ok(0)
}

/// A replica came online (`RedisModuleEvent_ReplicaChange`): a new challenge that every replica
/// must answer ([`replica_check::replica_online`]), no write counts at once until the next look,
/// and the heartbeat that carries the challenge goes out now rather than at the next tick.
pub fn replica_online(ctx: &Context) {
    replica_check::replica_online();
    in_sync().master.replica_online();
    ctx.create_timer(Duration::from_millis(1), heartbeat_now, ());
}

/// The timer [`replica_online`] arms: the master's look, with the heartbeat due.
fn heartbeat_now(ctx: &Context, (): ()) {
    let timing = {
        let mut state = in_sync();
        state.sent_ms = 0;
        state.timing
    };
    if let Some(timing) = timing.filter(|_| is_master(ctx)) {
        look_at_set(ctx, clock::now_ms(), timing);
    }
}

fn reply(status: &Status, info: &str) -> RedisValue {
    let field = |name: &str| {
        server_config::info_field(info, name)
            .unwrap_or_default()
            .to_owned()
    };
    let integer = |n: u64| RedisValue::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    let count = |n: usize| RedisValue::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    RedisValue::Array(vec![
        integer(status.offset),
        integer(status.acked),
        count(status.members),
        count(status.required),
        RedisValue::BulkString(field("master_replid")),
        RedisValue::BulkString(field("master_replid2")),
    ])
}

/// `LOCK.PROMOTABLE until-ms timeout-ms [replica ...]`: the master's list of the replicas that
/// may be promoted ([`leasehold_core::insync::Follower::heard`]). From the AOF it only notes
/// that this server belongs to a replication group.
///
/// # Errors
/// `ERR` when a client calls it; arity and range errors.
pub fn promotable(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let flags = ctx.get_flags();
    if !flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING) {
        return Err(RedisError::Str(
            "ERR LOCK.PROMOTABLE only carries a master's in-sync set to its replicas; clients cannot call it",
        ));
    }
    let message = args::promotable(&args).map_err(replies::arg_error)?;
    let now = clock::now_ms();
    let epoch = deployment::config_epoch();
    {
        let mut state = in_sync();
        state.master.group();
        if !flags.contains(ContextFlags::LOADING) {
            let me = Me::of(ctx);
            state.follower.heard(now, &message, epoch, |id| me.is(id));
            if let Some(challenge) = &message.challenge {
                hello::heard(ctx, challenge);
            }
        }
    }
    keep_promotability(ctx, now);
    Ok(RedisValue::SimpleStringStatic("OK"))
}

/// A replica was promoted (`master`), or a master demoted.
pub fn on_role_changed(ctx: &Context, master: bool) {
    let now = clock::now_ms();
    {
        let mut state = in_sync();
        if master {
            if let Some(not_before_ms) = state.follower.not_before_ms() {
                horizon::inherit(ctx, not_before_ms);
            }
            let me = Me::of(ctx);
            let listed = state.follower.listed().to_vec();
            let lease = insync::lease_ms(deployment::failover().ms);
            let timing = config::insync_timing(lease);
            state.master = Master::inherit(&listed, |id| me.is(id), now, timing);
            state.note_members();
            state.sent_ms = 0;
            state.record.promoted();
        } else {
            let mut fresh = Master::default();
            fresh.group();
            state.master = fresh;
        }
        state.follower.forget();
        state.master_address = None;
        state.replaced_by = None;
        state.role_refused = None;
    }
    keep_promotability(ctx, now);
}

/// Whether `promotion` is refused on this server now ([`insync::refusal`]).
pub fn refusal(promotion: Promotion) -> Option<Refusal> {
    let now = clock::now_ms();
    let state = in_sync();
    let standing = Standing {
        master: Context::dummy().get_flags().contains(ContextFlags::MASTER),
        promotable: state.follower.promotable(now),
        watched_by_sentinel: watched_by_sentinel(now),
    };
    insync::refusal(promotion, standing)
}

/// Sets this server's priority (or Cluster's no-failover flag) to what it should be: the
/// operator's on a master, on a replica shown promotable ([`Follower::shown_promotable`]) and
/// while `lock.allow-unsafe-promotion` lets one promotion through; "never" on another replica.
fn keep_promotability(ctx: &Context, now: u64) {
    let promotable = is_master(ctx)
        || config::unsafe_promotion_allowed()
        || in_sync().follower.shown_promotable(now);
    let Some(current) = server_config::integer(ctx, "replica-priority") else {
        if !std::mem::replace(&mut in_sync().warned, true) {
            ctx.log_warning(
                "lock: CONFIG GET replica-priority failed (CONFIG renamed or disabled?): this \
                 server cannot make itself unpromotable while outside the in-sync set",
            );
        }
        return;
    };
    let cluster = ctx.get_flags().contains(ContextFlags::CLUSTER);
    // Decided under the state's lock, carried out (`CONFIG SET`) after it.
    let (operator, next) = {
        let mut state = in_sync();
        let configured = config::REPLICA_PRIORITY.load(Ordering::Relaxed);
        let priority = state.priority.get_or_insert_with(|| {
            Priority::new(if configured >= 0 { configured } else { current })
        });
        if configured >= 0 && configured != priority.operator() {
            *priority = Priority::new(configured);
        }
        let next = if cluster {
            None
        } else {
            priority.next(current, promotable)
        };
        config::REPLICA_PRIORITY.store(priority.operator(), Ordering::Relaxed);
        (priority.operator(), next)
    };
    if cluster {
        // The module owns cluster-replica-no-failover; an operator priority of 0 keeps it on.
        let wanted = if promotable && operator != 0 {
            "no"
        } else {
            "yes"
        };
        if server_config::get(ctx, "cluster-replica-no-failover").as_deref() != Some(wanted) {
            server_config::set(ctx, "cluster-replica-no-failover", wanted);
        }
    } else if let Some(priority) = next {
        server_config::set(ctx, "replica-priority", &priority.to_string());
    }
}

/// Writes the state file when what it should hold changed: grouped, and the failover time
/// learned (never a default or a kept one, so a lone server writes nothing).
fn keep(ctx: &Context, failover: &Failover) {
    let learned = matches!(
        failover.source,
        Source::Sentinel { .. } | Source::Cluster { .. }
    );
    let next = {
        let state = in_sync();
        let mut next = state.kept.clone();
        next.grouped = state.master.grouped();
        next.members = if state.is_master {
            state.members.clone()
        } else {
            Vec::new()
        };
        next.sentinels = watched_by_sentinel(clock::now_ms());
        if learned {
            next.failover_ms = Some(failover.ms);
            next.failover_source = Some(failover.source.describe());
        }
        (next != state.kept).then_some(next)
    };
    if let Some(next) = next {
        state_file::save(ctx, &next);
        in_sync().kept = next;
    }
}

/// How this server is named in its master's `INFO replication`: the port it announces, and
/// the address it announces or any of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Me {
    announced_ip: Option<String>,
    port: Option<u16>,
}

impl Me {
    fn of(ctx: &Context) -> Self {
        let port = hello::announced_port(ctx);
        let announced_ip =
            server_config::get(ctx, "replica-announce-ip").filter(|ip| !ip.is_empty());
        Self { announced_ip, port }
    }

    /// True when `id` names this server ([`Me::is`]) or is the address the Sentinels name it by
    /// (`named_as`, learned by asking who is there).
    fn names(&self, id: &str, named_as: Option<&str>) -> bool {
        self.is(id) || named_as == Some(id)
    }

    /// True when `id` (`ip:port`) names this server: its port, and its announced address or,
    /// when it announces none, an address of this host (one a socket can bind to).
    fn is(&self, id: &str) -> bool {
        let Some((host, port)) = id.rsplit_once(':') else {
            return false;
        };
        if port.parse::<u16>().ok() != self.port {
            return false;
        }
        match &self.announced_ip {
            Some(announced) => announced == host,
            None => host
                .parse::<IpAddr>()
                .is_ok_and(|ip| UdpSocket::bind((ip, 0)).is_ok()),
        }
    }
}

/// The `lock_insync` fields of `INFO lock`.
pub struct Fields {
    /// A master: its members (`ip:port`); a replica: `None`.
    pub members: Option<Vec<String>>,
    /// How many members a write needs now.
    pub required: usize,
    /// A replica: whether and why it may be promoted now.
    pub promotability: Promotability,
    /// A replica: whether its master's last list named it.
    pub last_listed: bool,
    /// The lease in force, in ms.
    pub lease_ms: u64,
    /// The lease is `lock.insync-timeout-ms`'s, not learned.
    pub explicit: bool,
    /// The failover time learned and where from.
    pub failover: Failover,
    /// `lock.insync-timeout-ms` is set, and shorter than the deployment needs.
    pub timeout_too_short: bool,
    /// A replica in a replication cycle: its master's address.
    pub cycle: Option<String>,
    /// A replica: what a person must run on it to end a replication cycle.
    pub to_run: Option<&'static str>,
    /// A replica that may not be promoted and whose master has been silent for a lease: what a
    /// person may run to promote it anyway, and what that costs ([`way_out`]).
    pub way_out: Option<String>,
    /// A master: the one the Sentinels name instead of it, while they do.
    pub replaced_by: Option<String>,
    /// A replica: why its master did not answer its role, if it did not.
    pub role_refused: Option<String>,
    /// How many verified Sentinels are heard from.
    pub sentinels: usize,
}

/// What `INFO lock` shows of the set (as of the last look at this server's role).
pub fn fields() -> Fields {
    let failover = deployment::failover();
    let now = clock::now_ms();
    let state = in_sync();
    let master = state.is_master;
    let timing = state
        .timing
        .unwrap_or_else(|| config::insync_timing(insync::lease_ms(failover.ms)));
    let promotability = if master {
        Promotability::No
    } else {
        state.follower.promotability(now)
    };
    let to_run = if master {
        None
    } else {
        state.follower.to_run(now)
    };
    let stranded = !master
        && promotability == Promotability::No
        && to_run.is_none()
        && state.follower.silent_ms(now) > timing.timeout_ms;
    Fields {
        members: master.then(|| state.master.members().map(str::to_owned).collect()),
        required: state.master.required(config::min_insync_replicas()),
        promotability,
        last_listed: !master && state.follower.named(),
        lease_ms: timing.timeout_ms,
        explicit: config::insync_timeout_ms().is_some(),
        timeout_too_short: too_short(&failover, timing),
        failover,
        cycle: (!master && state.follower.in_cycle())
            .then(|| state.master_address.clone())
            .flatten(),
        to_run,
        way_out: stranded.then(way_out),
        replaced_by: state.replaced_by.clone().filter(|_| master),
        role_refused: state.role_refused.clone().filter(|_| !master),
        sentinels: deployment::sentinels(),
    }
}

/// What a person may run on a replica the module keeps from being promoted while its master is
/// silent — `lock.allow-unsafe-promotion`, then the promotion the deployment makes — and what
/// it costs (docs/operations/troubleshooting.md, "No replica can be promoted").
fn way_out() -> String {
    let promote = match deployment::named_master() {
        Some(named) => format!("SENTINEL FAILOVER {} on a Sentinel", named.group),
        None if Context::dummy().get_flags().contains(ContextFlags::CLUSTER) => {
            "CLUSTER FAILOVER FORCE here".to_owned()
        }
        None => "REPLICAOF NO ONE here".to_owned(),
    };
    format!(
        "CONFIG SET lock.allow-unsafe-promotion yes here, then {promote}; it may lack lock \
         grants its master counted, so a lock may be held twice (fencing tokens stay larger)"
    )
}
