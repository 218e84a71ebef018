//! How a lock's writes reach replicas and the AOF: as deterministic effects, never as the
//! command itself.
//!
//! A replica or an AOF replay must not re-evaluate "now" or the fencing counter: it would
//! compute another deadline and another token. So every write is sent as the state it left
//! behind, one holding at a time:
//!
//! - `LOCK.APPLY key owner <packed> [VALUE v]` — `owner` holds `key`, exclusively or shared,
//!   with the token, hold count and lease packed into one binary argument
//!   ([`leasehold_core::packed`]; 0.2.0 sent `token holds deadline-ms [SHARED limit]` as
//!   integers, and `LOCK.APPLY` still takes that form, which AOF rewrites also write), and the
//!   value it proclaims when it leads an election;
//! - `LOCK.APPLY key owner DROP` — `owner`'s shared holding ended (released, or its lease);
//! - `DEL key` — the lock is free.
//!
//! This is the "replicate effects, not commands" rule of Redis's module API
//! (`RedisModule_Replicate`) and of Redis's own scripts since 7.0. Effects of a lock with k
//! holders stay O(1): only the holding that changed is sent. Keyspace notifications for the
//! writes are sent from here too.
//!
//! These run on every write, so they call `RedisModule_Replicate` and
//! `RedisModule_NotifyKeyspaceEvent` directly with a format string and static names: the
//! crate's wrappers allocate a C string per call and a module string per argument. Arguments
//! that are already module strings (the key and the owner a client sent) are passed as such,
//! which Redis shares instead of copying.

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicU64, Ordering};

use leasehold_core::insync::replica::{CHALLENGE, MASTER_DOWN, NOT_BEFORE};
use leasehold_core::outcome::{Event, Lease};
use leasehold_core::packed;
use redis_module::{Context, RedisString, raw};

/// The internal command that carries a lock's state to replicas and the AOF.
pub const APPLY: &CStr = c"LOCK.APPLY";

/// `VALKEYMODULE_OPTIONS_SKIP_COMMAND_VALIDATION` (Valkey 8.1+, valkey-io/valkey#1357): the
/// server takes `RedisModule_Replicate`'s command as it is instead of looking it up by name on
/// every call. Redis has no such option, and may give the bit another meaning.
const SKIP_COMMAND_VALIDATION: c_int = 1 << 4;

/// The module options effects want: on Valkey 8.1 and later, every effect skips the command
/// lookup (the module only ever replicates `LOCK.APPLY` and `DEL`, which exist); elsewhere
/// none. Found out from `INFO server` at load, like the other optional server features.
pub fn module_options(ctx: &Context) -> c_int {
    let server = ctx.server_info("server");
    let is_valkey = server
        .field("server_name")
        .is_some_and(|name| name.as_slice() == b"valkey");
    let version = server.field("valkey_version").map(|v| v.to_string());
    let major_minor = version.as_deref().and_then(|v| {
        let mut parts = v.split('.').map(str::parse::<u32>);
        Some((parts.next()?.ok()?, parts.next()?.ok()?))
    });
    if is_valkey && major_minor >= Some((8, 1)) {
        SKIP_COMMAND_VALIDATION
    } else {
        0
    }
}

/// How many lock writes were sent (holdings, drops and frees) since the module started.
static WRITES: AtomicU64 = AtomicU64::new(0);

/// How many lock writes were sent since the module started: a replica found without the module
/// before and with it after has missed lock writes when this moved in between
/// ([`leasehold_core::insync::checks`]).
#[must_use]
pub fn writes() -> u64 {
    WRITES.load(Ordering::Relaxed)
}

/// A holding as its effect carries it: its token, hold count and lease, and the value its
/// owner proclaims (empty: none, [`leasehold_core::owner::Owner::value`]).
#[derive(Debug, Clone, Copy)]
pub struct Held<'a> {
    /// The holding's fencing token.
    pub token: u64,
    /// Its reentrant hold count.
    pub holds: u32,
    /// Its lease.
    pub lease: Lease,
    /// The value its owner proclaims as an election's leader; empty for a lock's holder.
    pub value: &'a [u8],
}

/// Sends `owner`'s holding of `key`: its token, hold count and lease, and `VALUE v` when its
/// owner proclaims one.
pub fn replicate_holding(ctx: &Context, key: &RedisString, owner: &RedisString, held: Held) {
    let Some(replicate) = (unsafe { raw::RedisModule_Replicate }) else {
        return;
    };
    WRITES.fetch_add(1, Ordering::Relaxed);
    let numbers = packed::pack(held.token, held.holds, held.lease);
    let (ctx, numbers_len) = (ctx.get_raw(), numbers.len());
    let numbers = numbers.as_ptr().cast::<c_char>();
    let value = held.value;
    unsafe {
        if value.is_empty() {
            replicate(
                ctx,
                APPLY.as_ptr(),
                c"ssb".as_ptr(),
                key.inner,
                owner.inner,
                numbers,
                numbers_len,
            );
        } else {
            replicate(
                ctx,
                APPLY.as_ptr(),
                c"ssbcb".as_ptr(),
                key.inner,
                owner.inner,
                numbers,
                numbers_len,
                c"VALUE".as_ptr(),
                value.as_ptr().cast::<c_char>(),
                value.len(),
            );
        }
    }
}

/// Sends "`owner`'s shared holding of `key` ended".
pub fn replicate_drop(ctx: &Context, key: &RedisString, owner: &[u8]) {
    if let Some(replicate) = unsafe { raw::RedisModule_Replicate } {
        WRITES.fetch_add(1, Ordering::Relaxed);
        unsafe {
            replicate(
                ctx.get_raw(),
                APPLY.as_ptr(),
                c"sbc".as_ptr(),
                key.inner,
                owner.as_ptr().cast::<c_char>(),
                owner.len(),
                c"DROP".as_ptr(),
            );
        }
    }
}

/// True while writes must not reach replicas: `CLIENT PAUSE WRITE` (or `ALL`), and the pause of
/// `FAILOVER` and of a cluster manual failover (`RedisModule_AvoidReplicaTraffic`). Redis holds
/// back clients' writes and its own key expiry then; a module's timer that wrote anyway would
/// trip Redis's assertion and crash the server (Redis 7.0 and 8.2 do; valkey-io/valkey#3645).
#[must_use]
pub fn replication_paused() -> bool {
    unsafe { raw::RedisModule_AvoidReplicaTraffic }.is_some_and(|paused| unsafe { paused() } != 0)
}

/// The heartbeat `LOCK.PROMOTABLE until-ms timeout-ms listed...` ([`crate::insync`]): the
/// replicas `listed` may be promoted until `until_ms` (unix ms), for `timeout_ms` from when they
/// hear it; with `not_before_ms`, a replica promoted in this master's place begins no holding
/// before then ([`crate::horizon`]); with `master_down_ms`, a listed replica may be promoted
/// that long after its lease ends on the Sentinels' word that this master went silent before
/// ([`leasehold_core::insync::Promotability::MasterDown`]); `challenge` is what a replica
/// proves it heard (`LOCK.REPLCONF`, [`crate::replica_check`]).
#[must_use]
pub fn heartbeat(
    (until_ms, timeout_ms): (u64, u64),
    listed: &[String],
    (not_before_ms, master_down_ms): (Option<u64>, Option<u64>),
    challenge: &str,
) -> String {
    let mut message = format!("{HEARTBEAT}{until_ms} {timeout_ms} {CHALLENGE}{challenge}");
    if let Some(ms) = not_before_ms {
        message.push_str(&format!(" {NOT_BEFORE}{ms}"));
    }
    if let Some(ms) = master_down_ms {
        message.push_str(&format!(" {MASTER_DOWN}{ms}"));
    }
    for id in listed {
        message.push(' ');
        message.push_str(id);
    }
    message
}

/// Sends the [`heartbeat`] `message` to the replicas.
///
/// It travels as the one argument of a `PING` (`PING "LOCK.PROMOTABLE ..."`), to the replicas
/// only (`A`: the AOF has no use for it): a replica without the module runs it as the `PING` it
/// is, whatever its `propagation-error-behavior`, and a replica with it turns it back into the
/// command ([`crate::filter`]). The challenge is read by no one else: the replication stream
/// reaches only replicas (and clients with `SYNC`, `MONITOR` or the AOF's rights, which are
/// administrators').
pub fn replicate_heartbeat(ctx: &Context, message: &str) {
    if let Some(replicate) = unsafe { raw::RedisModule_Replicate } {
        let message = CString::new(message).unwrap_or_default();
        unsafe {
            replicate(
                ctx.get_raw(),
                c"PING".as_ptr(),
                c"cA".as_ptr(),
                message.as_ptr(),
            );
        }
    }
}

/// How the heartbeat's `PING` argument begins: the command it carries, and a space.
pub const HEARTBEAT: &str = "LOCK.PROMOTABLE ";

/// Asks every replica for its acknowledgement now (`REPLCONF GETACK *`, to the replicas only:
/// `A` keeps it out of the AOF), as `WAIT` asks before the event loop sleeps, instead of
/// waiting for the replicas' own acknowledgement every second.
pub fn ask_for_acknowledgements(ctx: &Context) {
    if let Some(replicate) = unsafe { raw::RedisModule_Replicate } {
        unsafe {
            replicate(
                ctx.get_raw(),
                c"REPLCONF".as_ptr(),
                c"ccA".as_ptr(),
                c"GETACK".as_ptr(),
                c"*".as_ptr(),
            );
        }
    }
}

/// Sends "`key` is free" to replicas and the AOF.
pub fn replicate_free(ctx: &Context, key: &RedisString) {
    if let Some(replicate) = unsafe { raw::RedisModule_Replicate } {
        WRITES.fetch_add(1, Ordering::Relaxed);
        unsafe { replicate(ctx.get_raw(), c"DEL".as_ptr(), c"s".as_ptr(), key.inner) };
    }
}

/// Publishes the keyspace event `event` (module class: `notify-keyspace-events` with `d`):
/// `lock.acquire`, `lock.release`, `lock.renew`, `lock.raise`, `lock.expire` or
/// `lock.proclaim`.
pub fn notify(ctx: &Context, event: Event, key: &RedisString) {
    let name = match event {
        Event::Acquire => c"lock.acquire",
        Event::Release => c"lock.release",
        Event::Renew => c"lock.renew",
        Event::Raise => c"lock.raise",
        Event::Expire => c"lock.expire",
        Event::Proclaim => c"lock.proclaim",
    };
    if let Some(notify) = unsafe { raw::RedisModule_NotifyKeyspaceEvent } {
        let class = raw::NotifyEvent::MODULE.bits();
        unsafe { notify(ctx.get_raw(), class, name.as_ptr(), key.inner) };
    }
}
