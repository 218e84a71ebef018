//! The module's configuration, set at load (`--loadmodule path max-ttl-ms 60000`), in
//! `redis.conf` (`lock.max-ttl-ms 60000`) or with `CONFIG SET lock.max-ttl-ms 60000`, and read
//! with `CONFIG GET lock.max-ttl-ms`; the same for `lock.max-clock-skew-ms`,
//! `lock.max-multi-keys`, `lock.restart-delay-ms` and the in-sync set's settings
//! (`lock.min-insync-replicas`, `lock.insync-timeout-ms`, `lock.insync-drop-delay-ms`,
//! `lock.insync-strict`, `lock.replica-priority`, `lock.allow-unsafe-promotion`), the synced
//! writes' (`lock.sync-writes`, `lock.sync-timeout-ms`) and the sessions'
//! (`lock.session-grace-ms`, `lock.session-max-grace-ms`):
//! docs/operations/configuration.md.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use leasehold_core::args::Limits;
use leasehold_core::insync::Timing;

/// `lock.min-insync-replicas`: how many replicas the in-sync set must have for a write to count
/// (Kafka's `min.insync.replicas`, less the leader): 1 by default, which keeps a master and two
/// replicas at a majority. A server that was never part of a replication group requires none.
pub static MIN_INSYNC_REPLICAS: AtomicI64 = AtomicI64::new(1);

/// The largest `lock.min-insync-replicas`.
pub const LARGEST_MIN_INSYNC_REPLICAS: i64 = 1_000;

/// `lock.insync-timeout-ms`: the promotability lease a master gives each member with every
/// `LOCK.PROMOTABLE`, in ms: a replica that hears nothing from its master for this long makes
/// itself unpromotable. 0 (the default): learned from the deployment — the failover time of
/// the Sentinels that watch this server or of its Redis Cluster, plus a heartbeat
/// ([`leasehold_core::deployment`], [`leasehold_core::insync::lease_ms`]). Any other value is the
/// operator's and wins (the module logs a warning, and `INFO lock` says so, when it is shorter
/// than the deployment needs). 0 to a day.
pub static INSYNC_TIMEOUT_MS: AtomicI64 = AtomicI64::new(0);

/// `lock.insync-drop-delay-ms`: how long after a silent member's last promotability lease ended
/// the master drops it from the set, in ms. A replica refuses to be promoted once its lease
/// ended, so the delay covers only clocks: rates within 1 % over a lease and a message heard
/// late ([`leasehold_core::insync::replica::CLOCK_SKEW_MS`]). 1 000 by default, 0 to a day.
pub static INSYNC_DROP_DELAY_MS: AtomicI64 = AtomicI64::new(DEFAULT_INSYNC_DROP_DELAY_MS);

/// The default of `lock.insync-drop-delay-ms`.
pub const DEFAULT_INSYNC_DROP_DELAY_MS: i64 = 1_000;

/// `lock.insync-strict`: when `yes`, the master never drops a member (the rule for layouts where
/// a Sentinel majority may form on a side without a majority of the data nodes); `no` by
/// default.
pub static INSYNC_STRICT: AtomicBool = AtomicBool::new(false);

/// `lock.sync-writes`: when `yes` (the default), every lock write that counts — a grant, a
/// renewal, a re-entry — replies only once the in-sync set has it, unless the command says
/// `NOSYNC`; when `no`, only those that say `SYNC` do ([`crate::synced`]). A server with no
/// in-sync set to wait for (never part of a replication group) replies at once either way.
pub static SYNC_WRITES: AtomicBool = AtomicBool::new(true);

/// `lock.sync-timeout-ms`: how long a synced write waits for every member's acknowledgement
/// before it is refused (and a grant released), in ms: 1 000 by default — a replica
/// acknowledges within a round trip when asked, and every second on its own. 1 to a day.
pub static SYNC_TIMEOUT_MS: AtomicI64 = AtomicI64::new(DEFAULT_SYNC_TIMEOUT_MS);

/// The default of `lock.sync-timeout-ms`.
pub const DEFAULT_SYNC_TIMEOUT_MS: i64 = 1_000;

/// Whether a write whose command said `asked` (`SYNC`: `Some(true)`, `NOSYNC`:
/// `Some(false)`) waits for the in-sync set: `lock.sync-writes` when it said neither.
#[must_use]
pub fn sync_wanted(asked: Option<bool>) -> bool {
    asked.unwrap_or_else(|| SYNC_WRITES.load(Ordering::Relaxed))
}

/// `lock.sync-timeout-ms` in ms.
#[must_use]
pub fn sync_timeout_ms() -> u64 {
    u64::try_from(SYNC_TIMEOUT_MS.load(Ordering::Relaxed)).unwrap_or(1)
}

/// `lock.allow-unsafe-promotion`: when `yes`, the next promotion the module would refuse — of a
/// replica outside its master's in-sync set, or `FAILOVER` under Sentinel — goes through, and the
/// setting turns itself back to `no` (`no` by default); meanwhile the replica shows Sentinel its
/// operator's `replica-priority`, so that `SENTINEL FAILOVER` may pick it. For a person who must
/// promote such a server anyway.
pub static ALLOW_UNSAFE_PROMOTION: AtomicBool = AtomicBool::new(false);

/// `lock.session-grace-ms`: how long a session outlives its connection when `LOCK.SESSION OPEN`
/// names no grace, in ms: 3 000 by default — a reconnect takes milliseconds, and a client that
/// stalls for seconds still gets them, while a crashed holder's locks pass on within 3 s where
/// etcd's, ZooKeeper's and Consul's defaults take 10 s to a minute. 100 to
/// [`LARGEST_SESSION_GRACE_MS`]; capped by `lock.session-max-grace-ms`.
pub static SESSION_GRACE_MS: AtomicI64 = AtomicI64::new(DEFAULT_SESSION_GRACE_MS);

/// The default of `lock.session-grace-ms`.
pub const DEFAULT_SESSION_GRACE_MS: i64 = 3_000;

/// `lock.session-max-grace-ms`: the longest grace a session may ask for, in ms: 60 000 by
/// default, 100 to [`LARGEST_SESSION_GRACE_MS`].
pub static SESSION_MAX_GRACE_MS: AtomicI64 = AtomicI64::new(DEFAULT_SESSION_MAX_GRACE_MS);

/// The default of `lock.session-max-grace-ms`.
pub const DEFAULT_SESSION_MAX_GRACE_MS: i64 = 60_000;

/// The largest grace of either setting: a day, in ms.
pub const LARGEST_SESSION_GRACE_MS: i64 = 86_400_000;

/// `lock.session-max-grace-ms` in ms.
#[must_use]
pub fn session_max_grace_ms() -> u64 {
    u64::try_from(SESSION_MAX_GRACE_MS.load(Ordering::Relaxed)).unwrap_or(0)
}

/// The grace of a session that names none: `lock.session-grace-ms`, at most
/// `lock.session-max-grace-ms`, in ms.
#[must_use]
pub fn session_grace_ms() -> u64 {
    u64::try_from(SESSION_GRACE_MS.load(Ordering::Relaxed))
        .unwrap_or(0)
        .min(session_max_grace_ms())
}

/// `lock.replica-priority`: the operator's `replica-priority`, which the module gives a replica
/// whenever it may be promoted (and 0 otherwise); -1 (the default) takes the server's own at
/// start. The module writes the operator's value here, so `CONFIG REWRITE` keeps it. In Redis
/// Cluster, 0 keeps `cluster-replica-no-failover yes` always.
pub static REPLICA_PRIORITY: AtomicI64 = AtomicI64::new(-1);

/// `lock.insync-timeout-ms` when the operator set one (not 0), in ms.
#[must_use]
pub fn insync_timeout_ms() -> Option<u64> {
    u64::try_from(INSYNC_TIMEOUT_MS.load(Ordering::Relaxed))
        .ok()
        .filter(|ms| *ms > 0)
}

/// The in-sync set's timing, its lease `lease_ms` unless `lock.insync-timeout-ms` says
/// otherwise.
#[must_use]
pub fn insync_timing(lease_ms: u64) -> Timing {
    Timing {
        timeout_ms: insync_timeout_ms().unwrap_or(lease_ms),
        drop_delay_ms: u64::try_from(INSYNC_DROP_DELAY_MS.load(Ordering::Relaxed)).unwrap_or(0),
        strict: INSYNC_STRICT.load(Ordering::Relaxed),
        master_down_ms: None,
    }
}

/// Takes the one-shot `lock.allow-unsafe-promotion`: true (and back to `no`) when it was
/// `yes`.
pub fn take_unsafe_promotion() -> bool {
    ALLOW_UNSAFE_PROMOTION.swap(false, Ordering::Relaxed)
}

/// Whether `lock.allow-unsafe-promotion` is `yes` now (not taken).
pub fn unsafe_promotion_allowed() -> bool {
    ALLOW_UNSAFE_PROMOTION.load(Ordering::Relaxed)
}

/// `lock.min-insync-replicas` as a count.
#[must_use]
pub fn min_insync_replicas() -> usize {
    usize::try_from(MIN_INSYNC_REPLICAS.load(Ordering::Relaxed)).unwrap_or(0)
}

/// `lock.max-ttl-ms`: the longest lease `LOCK.ACQUIRE` and `LOCK.RENEW` accept, in ms; 0 (the
/// default) means no cap. Redis validates the range (0 to 2^63 - 1) on `CONFIG SET`.
pub static MAX_TTL_MS: AtomicI64 = AtomicI64::new(0);

/// `lock.max-clock-skew-ms`: how far, in ms, the clocks of independent servers may differ, for
/// `LOCK.RAISE` (a token from a server whose clock is ahead of this one's). 10 000 by default,
/// at most a day.
pub static MAX_CLOCK_SKEW_MS: AtomicI64 = AtomicI64::new(DEFAULT_MAX_CLOCK_SKEW_MS);

/// `lock.restart-delay-ms`: for how long after the module starts (the server starting, or
/// `MODULE LOAD`) no new holding begins, in ms; 0 (the default) for none. Read at start. Set it
/// to the longest lease clients take where a master can come back without the last grants it
/// acknowledged before a failover (the delayed restart of the Redlock algorithm; see
/// [`leasehold_core::fence::Counter::delay_until`]). At most a day.
pub static RESTART_DELAY_MS: AtomicI64 = AtomicI64::new(0);

/// The largest `lock.restart-delay-ms`: a day.
pub const LARGEST_RESTART_DELAY_MS: i64 = 86_400_000;

/// `lock.max-multi-keys`: the most keys one `LOCK.MACQUIRE`, `LOCK.MRELEASE` or `LOCK.MRENEW`
/// takes; 64 by default, 1 to [`LARGEST_MULTI_KEYS`].
pub static MAX_MULTI_KEYS: AtomicI64 = AtomicI64::new(DEFAULT_MAX_MULTI_KEYS);

/// The default of `lock.max-multi-keys`.
pub const DEFAULT_MAX_MULTI_KEYS: i64 = 64;

/// The largest `lock.max-multi-keys`.
pub const LARGEST_MULTI_KEYS: i64 = 100_000;

/// The default of `lock.max-clock-skew-ms`: 10 s.
pub const DEFAULT_MAX_CLOCK_SKEW_MS: i64 = 10_000;

/// The largest `lock.max-clock-skew-ms`: a day.
pub const LARGEST_CLOCK_SKEW_MS: i64 = 86_400_000;

/// `lock.max-clock-skew-ms` as an unsigned number of ms.
#[must_use]
pub fn max_clock_skew_ms() -> u64 {
    u64::try_from(MAX_CLOCK_SKEW_MS.load(Ordering::Relaxed)).unwrap_or(0)
}

/// `lock.max-multi-keys` as a count.
#[must_use]
pub fn max_multi_keys() -> usize {
    usize::try_from(MAX_MULTI_KEYS.load(Ordering::Relaxed)).unwrap_or(0)
}

/// `lock.restart-delay-ms` as an unsigned number of ms.
#[must_use]
pub fn restart_delay_ms() -> u64 {
    u64::try_from(RESTART_DELAY_MS.load(Ordering::Relaxed)).unwrap_or(0)
}

/// What the configuration allows, for the core's argument checks.
#[must_use]
pub fn limits() -> Limits {
    Limits {
        max_ttl_ms: MAX_TTL_MS.load(Ordering::Relaxed),
        max_keys: max_multi_keys(),
    }
}

/// Checks the values given at load. `redis-module` passes a `--loadmodule` argument to Redis
/// as the configuration's default, which Redis does not range-check like `CONFIG SET`.
///
/// # Errors
/// A message naming the configuration whose value is out of range.
pub fn check_loaded() -> Result<(), String> {
    let max_ttl = MAX_TTL_MS.load(Ordering::Relaxed);
    if max_ttl < 0 {
        return Err(format!("lock.max-ttl-ms must be 0 or more, not {max_ttl}"));
    }
    let skew = MAX_CLOCK_SKEW_MS.load(Ordering::Relaxed);
    if !(0..=LARGEST_CLOCK_SKEW_MS).contains(&skew) {
        return Err(format!(
            "lock.max-clock-skew-ms must be 0 to {LARGEST_CLOCK_SKEW_MS}, not {skew}"
        ));
    }
    let delay = RESTART_DELAY_MS.load(Ordering::Relaxed);
    if !(0..=LARGEST_RESTART_DELAY_MS).contains(&delay) {
        return Err(format!(
            "lock.restart-delay-ms must be 0 to {LARGEST_RESTART_DELAY_MS}, not {delay}"
        ));
    }
    for (name, value, range) in [
        (
            "min-insync-replicas",
            &MIN_INSYNC_REPLICAS,
            0..=LARGEST_MIN_INSYNC_REPLICAS,
        ),
        (
            "insync-timeout-ms",
            &INSYNC_TIMEOUT_MS,
            0..=LARGEST_RESTART_DELAY_MS,
        ),
        (
            "insync-drop-delay-ms",
            &INSYNC_DROP_DELAY_MS,
            0..=LARGEST_RESTART_DELAY_MS,
        ),
        (
            "replica-priority",
            &REPLICA_PRIORITY,
            -1..=i64::from(i32::MAX),
        ),
        (
            "session-grace-ms",
            &SESSION_GRACE_MS,
            100..=LARGEST_SESSION_GRACE_MS,
        ),
        (
            "sync-timeout-ms",
            &SYNC_TIMEOUT_MS,
            1..=LARGEST_RESTART_DELAY_MS,
        ),
        (
            "session-max-grace-ms",
            &SESSION_MAX_GRACE_MS,
            100..=LARGEST_SESSION_GRACE_MS,
        ),
    ] {
        let value = value.load(Ordering::Relaxed);
        if !range.contains(&value) {
            return Err(format!(
                "lock.{name} must be {} to {}, not {value}",
                range.start(),
                range.end()
            ));
        }
    }
    let keys = MAX_MULTI_KEYS.load(Ordering::Relaxed);
    if !(1..=LARGEST_MULTI_KEYS).contains(&keys) {
        return Err(format!(
            "lock.max-multi-keys must be 1 to {LARGEST_MULTI_KEYS}, not {keys}"
        ));
    }
    Ok(())
}
