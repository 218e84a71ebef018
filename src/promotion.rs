//! Promotions: every way this server becomes the master it answers for, each taking the
//! fencing counter's reserve (see [`leasehold_core::fence`]: the next token lands a reserve above the
//! clock, so above every token a predecessor issued before).
//!
//! - A replica promoted (`REPLICAOF NO ONE`, `FAILOVER`, `CLUSTER FAILOVER` in every form, a
//!   Cluster election) changes its role: the server's role-change event.
//! - A node that is already a master and is *told* to be one changes nothing in Redis and fires
//!   no event: Sentinel promoting an old master that came back with its own configuration
//!   (so as a master) before Sentinel turned it into a replica sends it `REPLICAOF NO ONE`
//!   (`SLAVEOF NO ONE`), which Redis answers `OK` and otherwise ignores. In Redis Cluster, a
//!   master that takes slots it did not serve (`CLUSTER SETSLOT`, `CLUSTER ADDSLOTS`,
//!   `CLUSTER ADDSLOTSRANGE`: a resharding or an operator reassigning a lost master's slots)
//!   starts answering for locks another master issued tokens for. Only the command filter
//!   ([`crate::filter`]) sees these, and takes the reserve before the command runs (unless the
//!   in-sync set refuses the promotion). `FAILOVER` and `CLUSTER FAILOVER` are matched too,
//!   though their promotions change a role: a reserve more is harmless, since reserves never
//!   stack.
//!
//! A command can be lost on the way, and Sentinel takes an old master's `role:master` as the
//! promotion done whether or not its `SLAVEOF NO ONE` arrived. So a master holds the reserve
//! for every token until it is a replica itself ([`Counter::hold_reserve`]) once it may have
//! been replaced: if it is named master again, unseen, its tokens are still above the other's.
//! It may have been once
//! - it loses a replica (`RedisModuleEvent_ReplicaChange`): that replica may have been promoted
//!   in its place;
//! - a Sentinel opens a second command link to it ([`sentinel_link`]): a Sentinel that names
//!   another master drops its links to this one and opens new ones, and it can only name this
//!   server master again over such a new link (it must read this server's `INFO` first). This
//!   covers a master cut off with no replica online, replaced by a server that was never its
//!   replica (an old master back as one), as `make chaos` found;
//! - it hears a Sentinel's hello name another server master ([`crate::insync`]).
//!
//! [`Counter::hold_reserve`]: leasehold_core::fence::Counter::hold_reserve

use std::collections::HashSet;
use std::os::raw::c_void;
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use leasehold_core::deployment::MAX_SENTINELS;
use redis_module::raw;
use redis_module::server_events::ServerRole;
use redis_module::{Context, ContextFlags, RedisError};
use redis_module_macros::role_changed_event_handler;

use crate::api::subscribe;
use crate::insync;
use crate::session;
use crate::state;

/// A replica was promoted, or a master demoted: a promotion takes the reserve, a demotion
/// forgets the sessions ([`session::on_demoted`]), and the in-sync set changes hands
/// ([`insync::on_role_changed`]). (A demoted
/// master's waiters need nothing from here: Redis unblocks every client blocked in a write
/// command with `-UNBLOCKED` then.)
#[role_changed_event_handler]
fn on_role_changed(ctx: &Context, role: ServerRole) {
    let master = role == ServerRole::Primary;
    sentinel_links().clear();
    if master {
        state::counter().reserve();
    } else {
        state::counter().hold_reserve(false);
        session::on_demoted();
    }
    insync::on_role_changed(ctx, master);
}

/// The Sentinels that opened a command link to this server since its role last changed (or
/// the module started): their connection names, `sentinel-<id>-cmd`.
static SENTINEL_LINKS: LazyLock<Mutex<HashSet<Box<[u8]>>>> = LazyLock::new(Mutex::default);

fn sentinel_links() -> MutexGuard<'static, HashSet<Box<[u8]>>> {
    SENTINEL_LINKS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// A Sentinel named a connection `name` (`CLIENT SETNAME sentinel-<id>-cmd`, or `-pubsub`: the
/// first command on each link it opens; the command filter sees it). On a master, a second
/// command link from the same Sentinel since the role last changed holds the reserve: the
/// Sentinel lost or dropped its first, and may have named another master meanwhile (Sentinel
/// re-creates its links to an old master when it switches to a new one, `sentinel.c`'s
/// `sentinelResetMasterAndChangeAddress`). A link that merely timed out, or that a Sentinel's
/// own promotion of this server closed (`CLIENT KILL TYPE normal`), costs only that the tokens
/// keep to the clock until this server is a replica: the worst case the fencing proof assumes
/// anyway (docs/guarantees.md). At most [`MAX_SENTINELS`] names are kept: past them, every
/// command link holds the reserve.
pub fn sentinel_link(name: &[u8]) {
    if !name.ends_with(b"-cmd") || !Context::dummy().get_flags().contains(ContextFlags::MASTER) {
        return;
    }
    let mut links = sentinel_links();
    if links.len() >= MAX_SENTINELS || !links.insert(name.into()) {
        drop(links);
        state::counter().hold_reserve(true);
    }
}

/// Registers the watch on replicas going offline and coming online (a module has one callback
/// per event).
///
/// # Errors
/// The server lacks the event, or refuses the subscription.
pub fn register(ctx: &Context) -> Result<(), RedisError> {
    subscribe(
        ctx,
        raw::REDISMODULE_EVENT_REPLICA_CHANGE,
        Some(on_replica_change),
        "ERR could not watch replicas going offline",
    )
}

/// `RedisModuleEvent_ReplicaChange`: the in-sync set's status may change; a master whose
/// replica went offline holds the reserve; a replica that came online must say again that it
/// runs the module ([`insync::replica_online`]).
unsafe extern "C" fn on_replica_change(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    insync::status_may_change();
    if subevent == raw::REDISMODULE_SUBEVENT_REPLICA_CHANGE_ONLINE {
        insync::replica_online(&Context::new(ctx));
    } else if subevent == raw::REDISMODULE_SUBEVENT_REPLICA_CHANGE_OFFLINE
        && Context::new(ctx).get_flags().contains(ContextFlags::MASTER)
    {
        state::counter().hold_reserve(true);
    }
}
