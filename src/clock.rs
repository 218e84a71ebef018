//! The wall clock that leases and the fencing-token floor are measured on.

use std::time::{SystemTime, UNIX_EPOCH};

use redis_module::raw;

/// Unix time in milliseconds, the unit of `PEXPIREAT` and `PXAT`. A clock set before 1970
/// reads as 0.
///
/// Inside the server, its own `RedisModule_Milliseconds` (`mstime()`: the same realtime clock,
/// in whole ms) in a few instructions, where `SystemTime` and `duration_since` take about 80
/// on every command; `SystemTime` outside it (unit tests).
#[must_use]
pub fn now_ms() -> u64 {
    if let Some(milliseconds) = unsafe { raw::RedisModule_Milliseconds } {
        return u64::try_from(unsafe { milliseconds() }).unwrap_or(0);
    }
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            // In u64, not `as_millis`'s u128: the same value (saturated past u64::MAX ms).
            elapsed
                .as_secs()
                .saturating_mul(1000)
                .saturating_add(u64::from(elapsed.subsec_millis()))
        })
}
