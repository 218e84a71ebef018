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
//!   starts answering for locks another master issued tokens for. Only a command filter sees
//!   these: it reads the name of every command (and the first argument of `REPLICAOF`,
//!   `SLAVEOF` and `CLUSTER`) and takes the reserve before the command runs. `FAILOVER` and
//!   `CLUSTER FAILOVER` are matched too, though their promotions change a role: a reserve
//!   more is harmless, since reserves never stack.
//!
//! A reserve taken when a command is queued in `MULTI` (as Sentinel sends `SLAVEOF NO ONE`)
//! rather than when it runs is as good: the promotion was decided by then, and every token
//! from then on is at least the reserve's. The filter matches command names as clients send
//! them: a server that renames these commands (`rename-command`) is outside it
//! (docs/guarantees.md, "What counts as a promotion").
//!
//! A command can be lost on the way, and Sentinel takes an old master's `role:master` as the
//! promotion done whether or not its `SLAVEOF NO ONE` arrived. So a master that loses a replica
//! (`RedisModuleEvent_ReplicaChange`: that replica may have been promoted in its place) holds
//! the reserve for every token until it is a replica itself ([`Counter::hold_reserve`]): if it
//! is named master again, unseen, its tokens are still above the other's.
//!
//! `redis-module` 2.0.8 has no command-filter API, so this is the one place that calls it.
//!
//! [`Counter::hold_reserve`]: leasehold_core::fence::Counter::hold_reserve

use std::os::raw::{c_int, c_void};
use std::ptr::NonNull;
use std::slice;

use redis_module::raw;
use redis_module::server_events::ServerRole;
use redis_module::{Context, ContextFlags, Status};
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
    if master {
        state::counter().reserve();
    } else {
        state::counter().hold_reserve(false);
        session::on_demoted();
    }
    insync::on_role_changed(ctx, master);
}

/// Registers the filter that sees promotions which change no role, and the watch on replicas
/// going offline.
///
/// # Errors
/// `Status::Err` when the server lacks the command-filter API or the event, or refuses either.
pub fn register(ctx: &Context) -> Status {
    let registered = unsafe { raw::RedisModule_RegisterCommandFilter }.and_then(|register| {
        let flags = raw::REDISMODULE_CMDFILTER_NOSELF as c_int;
        NonNull::new(unsafe { register(ctx.get_raw(), Some(filter), flags) })
    });
    let watched = subscribe(
        ctx,
        raw::REDISMODULE_EVENT_REPLICA_CHANGE,
        Some(on_replica_change),
        "ERR could not watch replicas going offline",
    );
    if registered.is_some() && watched.is_ok() {
        Status::Ok
    } else {
        Status::Err
    }
}

/// `RedisModuleEvent_ReplicaChange`: a master whose replica went offline holds the reserve.
unsafe extern "C" fn on_replica_change(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent == raw::REDISMODULE_SUBEVENT_REPLICA_CHANGE_OFFLINE
        && Context::new(ctx).get_flags().contains(ContextFlags::MASTER)
    {
        state::counter().hold_reserve(true);
    }
}

/// True when the command `name args...` may make this server the master of locks it did not
/// serve. `arg(i)` is the i-th argument after the name.
fn promotes<'a>(name: &[u8], arg: impl Fn(usize) -> Option<&'a [u8]>) -> bool {
    let is = |word: Option<&[u8]>, expected: &str| {
        word.is_some_and(|word| word.eq_ignore_ascii_case(expected.as_bytes()))
    };
    let named = |expected: &str| name.eq_ignore_ascii_case(expected.as_bytes());
    if named("replicaof") || named("slaveof") {
        is(arg(0), "no") && is(arg(1), "one")
    } else if named("cluster") {
        ["setslot", "addslots", "addslotsrange", "failover"]
            .iter()
            .any(|subcommand| is(arg(0), subcommand))
    } else {
        named("failover")
    }
}

/// True when the command `name args...` is a Sentinel naming its connection
/// (`CLIENT SETNAME sentinel-<id>-cmd`, the first command of each it opens): this server is
/// watched by Sentinel, so part of a replication group. `arg(i)` is the i-th argument after the
/// name.
fn names_a_sentinel<'a>(name: &[u8], arg: impl Fn(usize) -> Option<&'a [u8]>) -> bool {
    name.eq_ignore_ascii_case(b"client")
        && arg(0).is_some_and(|sub| sub.eq_ignore_ascii_case(b"setname"))
        && arg(1).is_some_and(|client| client.starts_with(b"sentinel-"))
}

/// The `replica-priority` (or its old name `slave-priority`) that the command `name args...`
/// sets, if it is a `CONFIG SET` of one to a value Redis accepts (0 to 2^31-1). `arg(i)` is the
/// i-th argument after the name.
fn sets_replica_priority<'a>(name: &[u8], arg: impl Fn(usize) -> Option<&'a [u8]>) -> Option<i64> {
    if !name.eq_ignore_ascii_case(b"config") || !arg(0)?.eq_ignore_ascii_case(b"set") {
        return None;
    }
    (1..)
        .step_by(2)
        .map_while(|i| Some((arg(i)?, arg(i + 1)?)))
        .filter(|(parameter, _)| {
            parameter.eq_ignore_ascii_case(b"replica-priority")
                || parameter.eq_ignore_ascii_case(b"slave-priority")
        })
        .filter_map(|(_, value)| std::str::from_utf8(value).ok()?.parse::<i64>().ok())
        .filter(|value| (0..=i64::from(i32::MAX)).contains(value))
        .last()
}

/// Every command passes here before it runs: a few byte comparisons on its name, a reserve
/// when it promotes, a note when Sentinel connects (a server restarted without its data
/// learns so that it belongs to a group: [`insync::watched_by_sentinel`]), and the operator's
/// priority when someone else than this module sets `replica-priority`
/// ([`insync::operator_priority`]: the module owns that setting, and a value equal to the one it
/// set could not be told from its own afterwards).
unsafe extern "C" fn filter(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    let arg = |position: usize| unsafe { argument(fctx, position) };
    let Some(name) = arg(0) else {
        return;
    };
    // Only names of 6 to 9 letters can match; most commands stop here.
    if !(6..=9).contains(&name.len()) {
        return;
    }
    if promotes(name, |i| arg(i + 1)) {
        state::counter().reserve();
    } else if names_a_sentinel(name, |i| arg(i + 1)) {
        insync::watched_by_sentinel();
    } else if let Some(priority) = sets_replica_priority(name, |i| arg(i + 1)) {
        insync::operator_priority(priority);
    }
}

/// The bytes of argument `position` of the filtered command (0: its name), if it has one
/// (`RedisModule_CommandFilterArgGet` answers NULL past the last). They live as long as the
/// filter call.
unsafe fn argument<'a>(
    fctx: *mut raw::RedisModuleCommandFilterCtx,
    position: usize,
) -> Option<&'a [u8]> {
    let position = c_int::try_from(position).ok()?;
    let string = unsafe { raw::RedisModule_CommandFilterArgGet?(fctx, position) };
    if string.is_null() {
        return None;
    }
    let mut len = 0;
    let bytes = unsafe { raw::RedisModule_StringPtrLen?(string, &mut len) };
    if bytes.is_null() {
        return None;
    }
    Some(unsafe { slice::from_raw_parts(bytes.cast::<u8>(), len) })
}

#[cfg(test)]
mod tests {
    use super::{names_a_sentinel, promotes, sets_replica_priority};

    fn check(command: &str) -> bool {
        let words: Vec<&[u8]> = command.split(' ').map(str::as_bytes).collect();
        promotes(words[0], |i| words.get(i + 1).copied())
    }

    #[test]
    fn every_way_to_be_told_to_be_a_master_promotes() {
        for command in [
            "REPLICAOF NO ONE",
            "replicaof no one",
            "SLAVEOF No One",
            "FAILOVER",
            "failover TO 127.0.0.1 6380 FORCE TIMEOUT 100",
            "FAILOVER ABORT",
            "CLUSTER FAILOVER",
            "cluster failover takeover",
            "CLUSTER SETSLOT 42 NODE abc",
            "CLUSTER SETSLOT 42 IMPORTING abc",
            "CLUSTER ADDSLOTS 1 2 3",
            "CLUSTER ADDSLOTSRANGE 0 100",
        ] {
            assert!(check(command), "{command}");
        }
    }

    #[test]
    fn a_sentinel_naming_its_connection_is_seen() {
        let check = |command: &str| {
            let words: Vec<&[u8]> = command.split(' ').map(str::as_bytes).collect();
            names_a_sentinel(words[0], |i| words.get(i + 1).copied())
        };
        assert!(check("CLIENT SETNAME sentinel-6a1b2c3d-cmd"));
        assert!(check("client setname sentinel-6a1b2c3d-pubsub"));
        assert!(!check("CLIENT SETNAME worker-1"));
        assert!(!check("CLIENT GETNAME"));
        assert!(!check("CLIENT"));
    }

    #[test]
    fn an_operator_setting_the_replica_priority_is_seen() {
        let check = |command: &str| {
            let words: Vec<&[u8]> = command.split(' ').map(str::as_bytes).collect();
            sets_replica_priority(words[0], |i| words.get(i + 1).copied())
        };
        assert_eq!(check("CONFIG SET replica-priority 0"), Some(0));
        assert_eq!(check("config set SLAVE-PRIORITY 25"), Some(25));
        assert_eq!(
            check("CONFIG SET maxmemory 1mb replica-priority 7"),
            Some(7)
        );
        assert_eq!(check("CONFIG SET replica-priority -1"), None);
        assert_eq!(check("CONFIG SET replica-priority 2147483648"), None);
        assert_eq!(check("CONFIG SET replica-priority ten"), None);
        assert_eq!(check("CONFIG SET replica-priority"), None);
        assert_eq!(check("CONFIG GET replica-priority"), None);
        assert_eq!(check("CONFIG SET lock.replica-priority 5"), None);
    }

    #[test]
    fn other_commands_do_not() {
        for command in [
            "REPLICAOF 127.0.0.1 6379",
            "SLAVEOF NO",
            "REPLICAOF NO TWO",
            "CLUSTER INFO",
            "CLUSTER",
            "SET k v",
            "GET k",
            "PSYNC ? -1",
            "FAILOVERS",
            "REPLICAOFF NO ONE",
        ] {
            assert!(!check(command), "{command}");
        }
    }
}
