//! The in-sync replica set on the server (the rules: [`leasehold_core::insync`]).
//!
//! - On a master, a timer reads `INFO replication` every [`TICK_MS`]: replicas that caught up
//!   join, members gone silent are listed no more and, later, dropped; every
//!   [`HEARTBEAT_MS`] (and at once on a change) `LOCK.PROMOTABLE` lists the members that may be
//!   promoted, in the replication stream. `LOCK.INSYNC` tells a client whether its writes count.
//! - On a replica, `LOCK.PROMOTABLE` from the master says whether this replica may be promoted,
//!   for how long; the same timer makes it unpromotable when that ends: `replica-priority 0`
//!   for Sentinel, `cluster-replica-no-failover yes` in Redis Cluster. The operator's priority
//!   is kept in `lock.replica-priority` (so `CONFIG REWRITE` writes it down and a restart
//!   reads it) and given back when the replica is promotable again — and to a master.
//! - A promoted replica inherits the set its master listed last ([`on_role_changed`]); a
//!   demoted master forgets its set and starts unpromotable.

use std::net::{IpAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use leasehold_core::args;
use leasehold_core::insync::{self, Follower, HEARTBEAT_MS, Master, Priority, Status};
use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use crate::clock;
use crate::config;
use crate::effects;
use crate::replies;

/// How often the set is looked at, in ms.
pub const TICK_MS: u64 = 200;

/// What this server knows of the set.
#[derive(Debug, Default)]
struct InSync {
    /// The set, while a master (and the group flag, always).
    master: Master,
    /// What the master said last, while a replica.
    follower: Follower,
    /// The operator's priority; `None` until first needed.
    priority: Option<Priority>,
    /// When the last `LOCK.PROMOTABLE` was sent (unix ms).
    sent_ms: u64,
    /// Whether this server was a master at its last look.
    is_master: bool,
    /// Whether the log already says that `CONFIG` is out of reach.
    warned: bool,
}

static IN_SYNC: LazyLock<Mutex<InSync>> = LazyLock::new(Mutex::default);

/// Set once Sentinel has connected to this server (from the command filter, which must not
/// wait for the state's lock).
static SENTINEL_SEEN: AtomicBool = AtomicBool::new(false);

/// Sentinel connected to this server ([`crate::promotion`] sees it name its connection): the
/// server belongs to a replication group even if it has never had a replica since it started —
/// a master back without its data, as Sentinel promotes another, must not count its writes
/// alone.
pub fn watched_by_sentinel() {
    SENTINEL_SEEN.store(true, Ordering::Relaxed);
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

/// Starts the timer; a replica makes itself unpromotable at once (it has heard no master yet).
pub fn start(ctx: &Context) {
    in_sync().is_master = is_master(ctx);
    keep_promotability(ctx, clock::now_ms());
    ctx.create_timer(Duration::from_millis(TICK_MS), tick, ());
}

/// Every [`TICK_MS`]: the master's set, or the replica's promotability.
fn tick(ctx: &Context, (): ()) {
    let now = clock::now_ms();
    let master = is_master(ctx);
    in_sync().is_master = master;
    if master {
        look_at_set(ctx, now);
    }
    keep_promotability(ctx, now);
    ctx.create_timer(Duration::from_millis(TICK_MS), tick, ());
}

fn is_master(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::MASTER)
}

/// The master's turn: takes in `INFO replication` and lists the promotable members when due.
fn look_at_set(ctx: &Context, now: u64) {
    let Some(info) = replication_info(ctx) else {
        return;
    };
    let replication = insync::parse(&info);
    let timing = config::insync_timing();
    let mut state = in_sync();
    state.is_master = true;
    let changed = state.master.observe(now, &replication, timing);
    let due = changed || now >= state.sent_ms.saturating_add(HEARTBEAT_MS);
    let has_group = state.master.grouped() || !replication.replicas.is_empty();
    if !due || !has_group || effects::replication_paused() {
        return;
    }
    let listed = state.master.list(now, timing);
    state.sent_ms = now;
    drop(state);
    effects::replicate_promotable(
        ctx,
        now.saturating_add(timing.timeout_ms),
        timing.timeout_ms,
        &listed,
    );
}

/// `INFO replication`, as text.
fn replication_info(ctx: &Context) -> Option<String> {
    text(ctx.call("INFO", &["replication"]).ok()?)
}

/// The text of a string reply.
fn text(value: RedisValue) -> Option<String> {
    match value {
        RedisValue::SimpleString(text) | RedisValue::BulkString(text) => Some(text),
        RedisValue::StringBuffer(bytes) | RedisValue::VerbatimString((_, bytes)) => {
            String::from_utf8(bytes).ok()
        }
        RedisValue::BulkRedisString(string) => string.try_as_str().ok().map(str::to_owned),
        _ => None,
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
    let info = replication_info(ctx).unwrap_or_default();
    let replication = insync::parse(&info);
    let status = in_sync()
        .master
        .status(&replication, config::min_insync_replicas());
    Ok(reply(&status, &info))
}

fn reply(status: &Status, info: &str) -> RedisValue {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map_or_else(String::new, |value| value.trim().to_owned())
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
    {
        let mut state = in_sync();
        state.master.group();
        if !flags.contains(ContextFlags::LOADING) {
            let me = Me::of(ctx);
            state.follower.heard(now, &message, |id| me.is(id));
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
            let me = Me::of(ctx);
            let listed = state.follower.listed().to_vec();
            state.master = Master::inherit(&listed, |id| me.is(id), now, config::insync_timing());
            state.sent_ms = 0;
        } else {
            let mut fresh = Master::default();
            fresh.group();
            state.master = fresh;
        }
        state.follower.forget();
    }
    keep_promotability(ctx, now);
}

/// Sets this server's priority (or Cluster's no-failover flag) to what it should be: the
/// operator's on a master and a promotable replica, "never" on another replica.
fn keep_promotability(ctx: &Context, now: u64) {
    let promotable = is_master(ctx) || in_sync().follower.promotable(now);
    let Some(current) = config_integer(ctx, "replica-priority") else {
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
        if config_text(ctx, "cluster-replica-no-failover").as_deref() != Some(wanted) {
            set_config(ctx, "cluster-replica-no-failover", wanted);
        }
    } else if let Some(priority) = next {
        set_config(ctx, "replica-priority", &priority.to_string());
    }
}

/// `CONFIG GET name`'s value.
fn config_text(ctx: &Context, name: &str) -> Option<String> {
    match ctx.call("CONFIG", &["GET", name]).ok()? {
        RedisValue::Array(mut pair) if pair.len() == 2 => text(pair.pop()?),
        _ => None,
    }
}

fn config_integer(ctx: &Context, name: &str) -> Option<i64> {
    config_text(ctx, name)?.parse().ok()
}

fn set_config(ctx: &Context, name: &str, value: &str) {
    if let Err(error) = ctx.call("CONFIG", &["SET", name, value]) {
        ctx.log_warning(&format!("lock: CONFIG SET {name} {value} failed: {error}"));
    }
}

/// How this server is named in its master's `INFO replication`: the port it announces, and
/// the address it announces or any of its own.
struct Me {
    announced_ip: Option<String>,
    port: Option<u16>,
}

impl Me {
    fn of(ctx: &Context) -> Self {
        let announced_port = config_integer(ctx, "replica-announce-port").filter(|port| *port > 0);
        let port = announced_port
            .or_else(|| config_integer(ctx, "port"))
            .and_then(|port| u16::try_from(port).ok());
        let announced_ip = config_text(ctx, "replica-announce-ip").filter(|ip| !ip.is_empty());
        Self { announced_ip, port }
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
    /// A replica that may be promoted now.
    pub promotable: bool,
}

/// What `INFO lock` shows of the set (as of the last look at this server's role).
pub fn fields() -> Fields {
    let state = in_sync();
    let master = state.is_master;
    Fields {
        members: master.then(|| state.master.members().map(str::to_owned).collect()),
        required: state.master.required(config::min_insync_replicas()),
        promotable: !master && state.follower.promotable(clock::now_ms()),
    }
}
