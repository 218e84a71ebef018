//! The wall clock that leases and the fencing-token floor are measured on.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in milliseconds, the unit of `PEXPIREAT` and `PXAT`. A clock set before 1970
/// reads as 0.
#[must_use]
pub fn now_ms() -> u64 {
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
