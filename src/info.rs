//! The counters a user would graph, shown by `INFO lock` (section `lock_stats`).
//!
//! Every counter counts since the server started. A rising `expired_leases` means holders
//! outlive their TTL: their work takes longer than the lease, and only fencing keeps it safe.

use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::{InfoContext, RedisResult, raw};
use redis_module_macros::info_command_handler;

use crate::blocking::waiters;
use crate::fence;
use crate::key::is_lock;

/// One counter of the `lock_stats` section.
pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    /// Counts one more.
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// New holdings granted (a new fencing token each), directly or by hand-over.
pub static ACQUISITIONS: Counter = Counter::new();
/// `LOCK.ACQUIRE` calls that found the lock held by another owner (then waited or got null).
pub static CONTENDED: Counter = Counter::new();
/// Successful `LOCK.RELEASE` calls.
pub static RELEASES: Counter = Counter::new();
/// Successful `LOCK.RENEW` calls.
pub static RENEWALS: Counter = Counter::new();
/// Locks handed to a waiting client.
pub static HANDOVERS: Counter = Counter::new();
/// Leases that ended by expiry rather than by release (Redis 7.2+ and Valkey, which have the
/// key server event; always 0 on Redis 7.0).
pub static EXPIRED_LEASES: Counter = Counter::new();

#[info_command_handler]
fn lock_info(ctx: &InfoContext, _for_crash_report: bool) -> RedisResult<()> {
    let waiting = u64::try_from(waiters().total()).unwrap_or(u64::MAX);
    ctx.builder()
        .add_section("stats")
        .field("acquisitions", ACQUISITIONS.get())?
        .field("contended_acquisitions", CONTENDED.get())?
        .field("releases", RELEASES.get())?
        .field("renewals", RENEWALS.get())?
        .field("expired_leases", EXPIRED_LEASES.get())?
        .field("waiters", waiting)?
        .field("handovers", HANDOVERS.get())?
        .field("last_token", fence::counter().last())?
        .build_section()?
        .build_info()?;
    Ok(())
}

/// Counts expired leases from the key server event (Redis 7.2+, Valkey). On a server without
/// it the subscription fails quietly and the counter stays 0.
pub fn count_expired_leases(ctx: *mut raw::RedisModuleCtx) {
    let Some(subscribe) = (unsafe { raw::RedisModule_SubscribeToServerEvent }) else {
        return;
    };
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_KEY,
        dataver: 1,
    };
    // Redis 7.0 refuses the event id it does not know: expired_leases then stays 0.
    let _ = unsafe { subscribe(ctx, event, Some(on_key_removed)) };
}

unsafe extern "C" fn on_key_removed(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_KEY_EXPIRED {
        return;
    }
    let info = data.cast::<raw::RedisModuleKeyInfoV1>();
    if let Some(info) = unsafe { info.as_ref() }
        && is_lock(info.key)
    {
        EXPIRED_LEASES.bump();
    }
}
