//! `INFO lock`: the counters ([`crate::stats`], section `lock_stats`), the in-sync set
//! (section `lock_insync`) and the sessions (section `lock_sessions`).

use leasehold_core::insync::Promotability;
use redis_module::{InfoContext, RedisResult};
use redis_module_macros::info_command_handler;

use crate::hello;
use crate::horizon;
use crate::insync;
use crate::observers;
use crate::replica_check;
use crate::state;
use crate::stats::{
    ACQUISITIONS, CONTENDED, EXPIRED_LEASES, HANDOVERS, MULTI_ACQUISITIONS, RELEASES, RENEWALS,
    SESSION_RELEASES, SESSIONS_EXPIRED,
};

#[info_command_handler]
fn lock_info(ctx: &InfoContext, _for_crash_report: bool) -> RedisResult<()> {
    let waiting = u64::try_from(state::waiters().total()).unwrap_or(u64::MAX);
    let builder = ctx
        .builder()
        .add_section("stats")
        .field("acquisitions", ACQUISITIONS.get())?
        .field("multi_acquisitions", MULTI_ACQUISITIONS.get())?
        .field("contended_acquisitions", CONTENDED.get())?
        .field("releases", RELEASES.get())?
        .field("renewals", RENEWALS.get())?
        .field("expired_leases", EXPIRED_LEASES.get())?
        .field("waiters", waiting)?
        .field(
            "observers",
            u64::try_from(observers::count()).unwrap_or(u64::MAX),
        )?
        .field("handovers", HANDOVERS.get())?
        .field("last_token", state::counter().last())?
        .field(
            "restart_wait_until_ms",
            horizon::waiting_until().unwrap_or(0),
        )?
        .build_section()?;
    let set = insync::fields();
    let builder = builder.add_section("insync");
    let builder = match &set.members {
        Some(members) => {
            let (lacking, unverified) = replica_check::fields();
            builder
                .field("insync_role", "master")?
                .field(
                    "insync_replicas",
                    u64::try_from(members.len()).unwrap_or(u64::MAX),
                )?
                .field("insync_members", members.join(","))?
                .field("insync_without_module", lacking.join(","))?
                .field("insync_unverified", unverified.join(","))?
                .field(
                    "insync_replaced_by",
                    set.replaced_by.as_deref().unwrap_or(""),
                )?
        }
        None => {
            let (promotable, by) = match set.promotability {
                Promotability::No => (0_u64, "none"),
                Promotability::Lease(_) => (1, "lease"),
                Promotability::Succession => (1, "succession"),
                Promotability::Unguarded => (1, "master-without-module"),
                Promotability::MasterDown => (1, "master-down"),
            };
            builder
                .field("insync_role", "replica")?
                .field("insync_promotable", promotable)?
                .field("insync_promotable_by", by)?
                .field("insync_named", u64::from(set.last_listed))?
                .field(
                    "insync_replication_cycle",
                    set.cycle.as_deref().unwrap_or(""),
                )?
                .field("insync_to_run", set.to_run.unwrap_or(""))?
                .field("insync_way_out", set.way_out.as_deref().unwrap_or(""))?
                .field("insync_said", hello::said())?
                .field(
                    "insync_role_check",
                    set.role_refused
                        .as_deref()
                        .map_or_else(|| "ok".to_owned(), |error| format!("refused: {error}")),
                )?
        }
    };
    let timing = match (set.explicit, set.timeout_too_short) {
        (false, _) => set.failover.source.describe(),
        (true, false) => "lock.insync-timeout-ms".to_owned(),
        (true, true) => format!(
            "lock.insync-timeout-ms, shorter than {} needs",
            set.failover.source.describe()
        ),
    };
    let builder = builder
        .field(
            "insync_sentinels",
            u64::try_from(set.sentinels).unwrap_or(u64::MAX),
        )?
        .field("insync_lease_ms", set.lease_ms)?
        .field("insync_failover_ms", set.failover.ms)?
        .field("insync_timing", timing)?;
    let (open, detached, ties, users) = {
        let sessions = state::sessions();
        let (open, detached) = sessions.counts();
        (open, detached, sessions.ties(), sessions.users())
    };
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    builder
        .field(
            "insync_required",
            u64::try_from(set.required).unwrap_or(u64::MAX),
        )?
        .build_section()?
        .add_section("sessions")
        .field("sessions", count(open))?
        .field("sessions_detached", count(detached))?
        .field("session_ties", count(ties))?
        .field("session_connections", count(users))?
        .field("sessions_expired", SESSIONS_EXPIRED.get())?
        .field("session_releases", SESSION_RELEASES.get())?
        .build_section()?
        .build_info()?;
    Ok(())
}
