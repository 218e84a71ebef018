//! The command filter: every command passes here before Redis looks it up, and a few byte
//! comparisons on its name sort out the handful this module must see.
//!
//! - **Promotions** ([`Seen::Promotion`]): `REPLICAOF NO ONE` / `SLAVEOF NO ONE` (to a replica,
//!   or to a master that is told to stay one, as Sentinel promotes an old master back with its
//!   own configuration — Redis answers `OK` and fires no event), `CLUSTER FAILOVER`,
//!   `PSYNC ... FAILOVER` (the `FAILOVER` command's hand-over to its target) and `FAILOVER`.
//!   The in-sync set decides first whether to refuse one ([`crate::insync::refusal`]: a replica
//!   outside the set, `FAILOVER` under Sentinel): a refused command is turned into
//!   `LOCK.REFUSED`, whose error (`-LOCKREFUSED ...`) names why and the override,
//!   `lock.allow-unsafe-promotion` (one shot); inside `MULTI` (and on Redis 7.0, which does not
//!   say) into an unknown command with the same words, the only way a module can stop a command
//!   before Redis queues it — so Sentinel's promotion transaction (`MULTI`, `SLAVEOF NO ONE`,
//!   `CONFIG REWRITE`, `CLIENT KILL`, `EXEC`) aborts whole with `EXECABORT`. Any other promotion
//!   takes the fencing counter's reserve before it runs ([`crate::promotion`]).
//! - **Slots taken** (`CLUSTER SETSLOT`, `ADDSLOTS`, `ADDSLOTSRANGE`) take the reserve too.
//! - **A Sentinel naming its connection** (`CLIENT SETNAME sentinel-...`, the first command of
//!   each it opens): a hint to look for the Sentinels' links
//!   ([`crate::deployment::sentinel_named`]: a name is anyone's to give, so it is checked there
//!   before anything is believed), and a master a Sentinel opens a second command link to holds
//!   the fencing counter's reserve ([`crate::promotion::sentinel_link`]: its tokens then keep a
//!   reserve above the clock, which is all a forged name can cost).
//! - **A Sentinel's hello** (`PUBLISH __sentinel__:hello ...`, every 2 s): which Sentinel to ask,
//!   if a verified one ([`crate::deployment::heard_hello`]).
//! - **The master's heartbeat** (`PING "LOCK.PROMOTABLE ..."`, [`crate::effects::replicate_heartbeat`]):
//!   turned back into the `LOCK.PROMOTABLE ...` it carries, which refuses any client but the
//!   master. A server without the module runs the `PING`.
//! - **A replica's acknowledgement** (`REPLCONF ACK <offset>`): the in-sync set's status may
//!   have changed ([`crate::insync::status_may_change`]), so held synced writes are looked at
//!   again. Nothing is believed from it: a client sending one costs one more read of `INFO`.
//! - **Someone setting `replica-priority`**: the operator's from now on
//!   ([`crate::insync::operator_priority`]: the module owns that setting, and a value equal to
//!   the one it set could not be told from its own afterwards).
//!
//! A command queued in `MULTI` passes here when it is queued: a reserve taken then rather than
//! when `EXEC` runs it is as good (the promotion was decided), and a refusal then aborts the
//! transaction. The filter matches command names as clients send them: a server that renames
//! these commands (`rename-command`) is outside it (docs/guarantees.md). `redis-module` 2.0.8
//! has no command-filter API, so this is the one place that calls it.

use std::os::raw::{c_char, c_int};
use std::ptr::NonNull;
use std::slice;

use leasehold_core::insync::{Promotion, Refusal};
use redis_module::{Context, RedisError, RedisResult, RedisString, raw};

use crate::api;
use crate::config;
use crate::deployment;
use crate::effects::HEARTBEAT;
use crate::insync;
use crate::promotion;
use crate::state;

/// The channel Sentinels publish their hellos on.
const HELLO_CHANNEL: &[u8] = b"__sentinel__:hello";

/// What the filter made of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen<'a> {
    /// A promotion the in-sync set may refuse; `name` is how to call it in the refusal.
    Promotion(Promotion, &'static str),
    /// Takes the reserve without a question: slots taken, a `CLUSTER FAILOVER` or
    /// `FAILOVER ABORT` (the reserve is harmless where the role stays: reserves never stack).
    Reserve,
    /// A Sentinel naming its connection, with the name (`sentinel-<id>-cmd` or `-pubsub`).
    Sentinel(&'a [u8]),
    /// A Sentinel's hello, with its payload.
    Hello(&'a [u8]),
    /// `replica-priority` set to this.
    Priority(i64),
    /// The master's heartbeat, with the arguments of the `LOCK.PROMOTABLE` it carries.
    Heartbeat(&'a [u8]),
    /// A replica's acknowledgement (`REPLCONF ACK`).
    Acknowledgement,
}

/// Registers the filter.
///
/// # Errors
/// `Err` when the server lacks the command-filter API or refuses the filter.
pub fn register(ctx: &Context) -> Result<(), ()> {
    let registered = unsafe { raw::RedisModule_RegisterCommandFilter }.and_then(|register| {
        let flags = raw::REDISMODULE_CMDFILTER_NOSELF as c_int;
        NonNull::new(unsafe { register(ctx.get_raw(), Some(filter), flags) })
    });
    registered.map(|_| ()).ok_or(())
}

/// Every command passes here before it runs ([the module's doc](self)).
unsafe extern "C" fn filter(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    let arg = |position: usize| unsafe { argument(fctx, position) };
    let Some(name) = arg(0) else {
        return;
    };
    // Only names of 4 to 9 letters can match; most commands stop here.
    if !(4..=9).contains(&name.len()) {
        return;
    }
    match classify(name, |i| arg(i + 1)) {
        Some(Seen::Promotion(promotion, what)) => promote(fctx, promotion, what),
        Some(Seen::Reserve) => state::counter().reserve(),
        Some(Seen::Sentinel(name)) => {
            deployment::sentinel_named();
            promotion::sentinel_link(name);
        }
        Some(Seen::Hello(payload)) => deployment::heard_hello(payload),
        Some(Seen::Priority(priority)) => insync::operator_priority(priority),
        Some(Seen::Acknowledgement) => insync::status_may_change(),
        Some(Seen::Heartbeat(arguments)) => {
            let arguments: Vec<Vec<u8>> = arguments
                .split(|byte| *byte == b' ')
                .map(<[u8]>::to_vec)
                .collect();
            unsafe { rewrite(fctx, b"LOCK.PROMOTABLE", &arguments) };
        }
        None => {}
    }
}

/// A promotion: refused, let through by the one-shot override, or let through with the
/// reserve taken.
fn promote(fctx: *mut raw::RedisModuleCommandFilterCtx, promotion: Promotion, what: &str) {
    if let Some(refusal) = insync::refusal(promotion) {
        let (why, instead) = explain(refusal);
        if !config::take_unsafe_promotion() {
            redis_module::logging::log_warning(format!("lock: {what} refused: {why}"));
            unsafe { refuse(fctx, what, why, instead) };
            return;
        }
        redis_module::logging::log_warning(format!(
            "lock: {what} let through by lock.allow-unsafe-promotion (now no again): {why}"
        ));
    }
    state::counter().reserve();
}

/// `LOCK.REFUSED command reason instead`: the error of a promotion the filter refused
/// ([`refuse`]), in one line.
///
/// # Errors
/// Always: `LOCKREFUSED <command> refused by the lock module: <reason>; <instead>`; arity.
pub fn refused(_ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let [_, command, reason, instead] = args.as_slice() else {
        return Err(RedisError::WrongArity);
    };
    let line = |text: &RedisString| text.to_string_lossy().replace(['\r', '\n'], " ");
    Err(RedisError::String(format!(
        "LOCKREFUSED {} refused by the lock module: {}; {}",
        line(command),
        line(reason),
        line(instead)
    )))
}

/// Why a promotion is refused, and what a person may do instead.
const fn explain(refusal: Refusal) -> (&'static str, &'static str) {
    match refusal {
        Refusal::OutsideSet => (
            "this replica may lack lock grants its master counted (INFO lock)",
            "to promote it anyway: CONFIG SET lock.allow-unsafe-promotion yes",
        ),
        Refusal::Sentinel => (
            "Sentinels watch this server and do not follow FAILOVER",
            "use SENTINEL FAILOVER <master-name>, or CONFIG SET lock.allow-unsafe-promotion yes",
        ),
    }
}

/// What the command `name args...` is to this module, if anything. `arg(i)` is the i-th
/// argument after the name.
fn classify<'a>(name: &[u8], arg: impl Fn(usize) -> Option<&'a [u8]>) -> Option<Seen<'a>> {
    let is = |word: Option<&[u8]>, expected: &str| {
        word.is_some_and(|word| word.eq_ignore_ascii_case(expected.as_bytes()))
    };
    let named = |expected: &str| name.eq_ignore_ascii_case(expected.as_bytes());
    if named("replicaof") || named("slaveof") {
        let what = if named("slaveof") {
            "SLAVEOF NO ONE"
        } else {
            "REPLICAOF NO ONE"
        };
        (is(arg(0), "no") && is(arg(1), "one"))
            .then_some(Seen::Promotion(Promotion::ReplicaofNoOne, what))
    } else if named("cluster") {
        cluster(arg, is)
    } else if named("failover") {
        Some(if is(arg(0), "abort") {
            Seen::Reserve
        } else {
            Seen::Promotion(Promotion::Failover, "FAILOVER")
        })
    } else if named("psync") {
        is(arg(2), "failover")
            .then_some(Seen::Promotion(Promotion::PsyncFailover, "PSYNC FAILOVER"))
    } else if named("publish") {
        if arg(0) == Some(HELLO_CHANNEL) {
            arg(1).map(Seen::Hello)
        } else {
            None
        }
    } else if named("client") {
        let name = arg(1).filter(|name| is(arg(0), "setname") && name.starts_with(b"sentinel-"));
        name.map(Seen::Sentinel)
    } else if named("config") {
        sets_replica_priority(arg).map(Seen::Priority)
    } else if named("replconf") {
        is(arg(0), "ack").then_some(Seen::Acknowledgement)
    } else if named("ping") {
        let heartbeat = arg(0).and_then(|message| message.strip_prefix(HEARTBEAT.as_bytes()));
        heartbeat.filter(|_| arg(1).is_none()).map(Seen::Heartbeat)
    } else {
        None
    }
}

/// `CLUSTER FAILOVER [FORCE | TAKEOVER]` and the subcommands that take slots.
fn cluster<'a>(
    arg: impl Fn(usize) -> Option<&'a [u8]>,
    is: impl Fn(Option<&[u8]>, &str) -> bool,
) -> Option<Seen<'a>> {
    if is(arg(0), "failover") {
        Some(if is(arg(1), "force") {
            Seen::Promotion(Promotion::ForcedClusterFailover, "CLUSTER FAILOVER FORCE")
        } else if is(arg(1), "takeover") {
            Seen::Promotion(
                Promotion::ForcedClusterFailover,
                "CLUSTER FAILOVER TAKEOVER",
            )
        } else {
            // The replica promotes itself only once it caught up with its live master.
            Seen::Reserve
        })
    } else {
        ["setslot", "addslots", "addslotsrange"]
            .iter()
            .any(|subcommand| is(arg(0), subcommand))
            .then_some(Seen::Reserve)
    }
}

/// The `replica-priority` (or its old name `slave-priority`) that `CONFIG args...` sets, if it
/// is a `CONFIG SET` of one to a value Redis accepts (0 to 2^31-1). `arg(i)` is the i-th
/// argument after `CONFIG`.
fn sets_replica_priority<'a>(arg: impl Fn(usize) -> Option<&'a [u8]>) -> Option<i64> {
    if !arg(0)?.eq_ignore_ascii_case(b"set") {
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

/// Turns the refused command `what` into `LOCK.REFUSED what why instead`, which replies
/// `-LOCKREFUSED ...` ([`refused`]). Inside `MULTI` — and where the filter cannot tell (Redis
/// 7.0 has no `RedisModule_CommandFilterGetClientId`) — it becomes the unknown command
/// `<what> refused by the lock module: <why>` instead: Redis refuses that before queueing it, so
/// a transaction around the promotion (Sentinel's `MULTI`, `SLAVEOF NO ONE`, `CONFIG REWRITE`,
/// `CLIENT KILL`, `EXEC`) aborts whole with `EXECABORT`, where a queued `LOCK.REFUSED` would let
/// the rest run.
unsafe fn refuse(
    fctx: *mut raw::RedisModuleCommandFilterCtx,
    what: &str,
    why: &str,
    instead: &str,
) {
    if unsafe { in_transaction(fctx) } == Some(false) {
        unsafe {
            rewrite(
                fctx,
                b"LOCK.REFUSED",
                &[what, why, instead].map(str::as_bytes),
            )
        };
    } else {
        let head = format!("{what} refused by the lock module: {why}");
        unsafe { rewrite(fctx, head.as_bytes(), &[instead.as_bytes()]) };
    }
}

/// Whether the client that sent the filtered command is in `MULTI`; `None` where the server
/// cannot say.
unsafe fn in_transaction(fctx: *mut raw::RedisModuleCommandFilterCtx) -> Option<bool> {
    let id_of = unsafe { raw::RedisModule_CommandFilterGetClientId }?;
    let info = api::client_info(unsafe { id_of(fctx) })?;
    Some(info.flags & u64::from(raw::REDISMODULE_CLIENTINFO_FLAG_MULTI) != 0)
}

/// Replaces the filtered command with `name arguments...`. If the server lacks a call this
/// needs, the command is left as it was.
unsafe fn rewrite(
    fctx: *mut raw::RedisModuleCommandFilterCtx,
    name: &[u8],
    arguments: &[impl AsRef<[u8]>],
) {
    let (Some(count), Some(delete), Some(replace), Some(insert), Some(create)) = (
        unsafe { raw::RedisModule_CommandFilterArgsCount },
        unsafe { raw::RedisModule_CommandFilterArgDelete },
        unsafe { raw::RedisModule_CommandFilterArgReplace },
        unsafe { raw::RedisModule_CommandFilterArgInsert },
        unsafe { raw::RedisModule_CreateString },
    ) else {
        return;
    };
    let string = |bytes: &[u8]| unsafe {
        create(
            std::ptr::null_mut(),
            bytes.as_ptr().cast::<c_char>(),
            bytes.len(),
        )
    };
    unsafe {
        for position in (1..count(fctx)).rev() {
            delete(fctx, position);
        }
        // The filter takes ownership of the strings it is given.
        replace(fctx, 0, string(name));
        for (position, argument) in (1..).zip(arguments) {
            insert(fctx, position, string(argument.as_ref()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Promotion, Seen, classify};

    fn seen(command: &str) -> Option<Seen<'_>> {
        let words: Vec<&[u8]> = command.split(' ').map(str::as_bytes).collect();
        classify(words[0], |i| words.get(i + 1).copied())
    }

    fn promotion(command: &str) -> Option<Promotion> {
        match seen(command) {
            Some(Seen::Promotion(promotion, _)) => Some(promotion),
            _ => None,
        }
    }

    #[test]
    fn every_way_to_be_made_a_master_is_a_promotion() {
        for (command, expected) in [
            ("REPLICAOF NO ONE", Promotion::ReplicaofNoOne),
            ("replicaof no one", Promotion::ReplicaofNoOne),
            ("SLAVEOF No One", Promotion::ReplicaofNoOne),
            ("FAILOVER", Promotion::Failover),
            (
                "failover TO 127.0.0.1 6380 FORCE TIMEOUT 100",
                Promotion::Failover,
            ),
            (
                "cluster failover takeover",
                Promotion::ForcedClusterFailover,
            ),
            ("CLUSTER FAILOVER FORCE", Promotion::ForcedClusterFailover),
            ("PSYNC 8de1a2b 1234 FAILOVER", Promotion::PsyncFailover),
        ] {
            assert_eq!(promotion(command), Some(expected), "{command}");
        }
        assert_eq!(
            seen("SLAVEOF no one"),
            Some(Seen::Promotion(Promotion::ReplicaofNoOne, "SLAVEOF NO ONE"))
        );
    }

    #[test]
    fn slots_taken_and_failovers_that_wait_take_the_reserve() {
        for command in [
            "FAILOVER ABORT",
            "CLUSTER FAILOVER",
            "CLUSTER SETSLOT 42 NODE abc",
            "CLUSTER SETSLOT 42 IMPORTING abc",
            "CLUSTER ADDSLOTS 1 2 3",
            "CLUSTER ADDSLOTSRANGE 0 100",
        ] {
            assert_eq!(seen(command), Some(Seen::Reserve), "{command}");
        }
    }

    #[test]
    fn a_sentinel_is_seen_naming_its_connection_and_by_its_hellos() {
        assert_eq!(
            seen("CLIENT SETNAME sentinel-6a1b2c3d-cmd"),
            Some(Seen::Sentinel(b"sentinel-6a1b2c3d-cmd"))
        );
        assert_eq!(
            seen("client setname sentinel-6a1b2c3d-pubsub"),
            Some(Seen::Sentinel(b"sentinel-6a1b2c3d-pubsub"))
        );
        assert_eq!(seen("CLIENT SETNAME worker-1"), None);
        assert_eq!(seen("CLIENT GETNAME"), None);
        assert_eq!(seen("CLIENT"), None);
        assert_eq!(
            seen("PUBLISH __sentinel__:hello 127.0.0.1,26379,abc,1,g,127.0.0.1,6379,0"),
            Some(Seen::Hello(b"127.0.0.1,26379,abc,1,g,127.0.0.1,6379,0"))
        );
        assert_eq!(seen("PUBLISH news hello"), None);
        assert_eq!(seen("PUBLISH __sentinel__:hello"), None);
    }

    #[test]
    fn an_operator_setting_the_replica_priority_is_seen() {
        let priority = |command: &str| match seen(command) {
            Some(Seen::Priority(priority)) => Some(priority),
            _ => None,
        };
        assert_eq!(priority("CONFIG SET replica-priority 0"), Some(0));
        assert_eq!(priority("config set SLAVE-PRIORITY 25"), Some(25));
        assert_eq!(
            priority("CONFIG SET maxmemory 1mb replica-priority 7"),
            Some(7)
        );
        assert_eq!(priority("CONFIG SET replica-priority -1"), None);
        assert_eq!(priority("CONFIG SET replica-priority 2147483648"), None);
        assert_eq!(priority("CONFIG SET replica-priority ten"), None);
        assert_eq!(priority("CONFIG SET replica-priority"), None);
        assert_eq!(priority("CONFIG GET replica-priority"), None);
        assert_eq!(priority("CONFIG SET lock.replica-priority 5"), None);
    }

    #[test]
    fn a_replicas_acknowledgement_is_seen() {
        for command in ["REPLCONF ACK 1234", "replconf ack 1234 FACK 1200"] {
            assert_eq!(seen(command), Some(Seen::Acknowledgement), "{command}");
        }
    }

    #[test]
    fn other_commands_are_not_seen() {
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
            "REPLCONF GETACK *",
            "REPLCONF listening-port 6380",
        ] {
            assert_eq!(seen(command), None, "{command}");
        }
    }
}
