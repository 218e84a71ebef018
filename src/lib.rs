//! leasehold: distributed locks as Redis server commands (module `lock`).
//!
//! `LOCK.ACQUIRE`, `LOCK.RELEASE`, `LOCK.RENEW`, `LOCK.FENCE` and `LOCK.INFO` replace the Lua
//! scripts lock clients ship today — exclusive locks, read-write locks and semaphores: owner
//! checks, leases and fencing tokens run atomically in the server, and the fencing counter is
//! persisted and replicated so tokens only go up.
//! This file only registers things with Redis; each concern has its own module, and every rule
//! lives in the `leasehold-core` crate (`core/`): see ARCHITECTURE.md.

// A panic in a command handler would abort the whole Redis server.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

mod api;
mod apply;
mod blocking;
mod clock;
mod cluster;
mod commands;
mod config;
mod datatype;
mod deployment;
mod docs;
mod effects;
mod election;
mod entry;
mod execute;
mod fences;
mod filter;
mod guard;
mod hello;
mod horizon;
mod info;
mod insync;
mod key;
mod looks;
mod metadata;
mod multi;
mod observers;
mod probes;
mod promotion;
mod replay;
mod replica_check;
mod replies;
mod server_config;
mod session;
mod state;
mod state_file;
mod stats;
mod synced;
mod timers;

use redis_module::configuration::ConfigurationFlags;
use redis_module::server_events::FlushSubevent;
use redis_module::{AclCategory, Context, RedisString, Status, redis_module};
use redis_module_macros::flush_event_handler;

use datatype::LOCK_TYPE;
use fences::FENCE_TYPE;
use metadata::{acl_categories as acl, flags, key_range as keys};

/// The Redis allocator inside the server; the system one for unit tests, which run without it.
#[cfg(not(test))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(test)]
type Allocator = std::alloc::System;

/// `FLUSHALL`/`FLUSHDB` freed every lock: hand them to their waiters.
#[flush_event_handler]
fn on_flush(ctx: &Context, event: FlushSubevent) {
    looks::on_flush(ctx, event);
}

/// After the commands and configuration exist: creates `LOCK.ACQUIRE`, `LOCK.GUARD` and
/// `LOCK.FENCED` ([`entry`]), refuses bad configuration values, delays new holdings by
/// `lock.restart-delay-ms`, starts watching for promotions that change no role (without which
/// tokens could go back, so the module refuses to load), then sets the commands' docs and key
/// specs and the module options (read errors handled by the data type; the replication command
/// lookup skipped where the server allows it), and notes whether it runs in cluster mode.
fn on_load(ctx: &Context, _args: &[RedisString]) -> Status {
    if let Err(error) = entry::register(ctx) {
        ctx.log_warning(&format!("a command cannot be created: {error:?}"));
        return Status::Err;
    }
    if let Err(error) = config::check_loaded() {
        ctx.log_warning(&error);
        return Status::Err;
    }
    let delay = config::restart_delay_ms();
    if let Err(error) = horizon::start(ctx, clock::now_ms().saturating_add(delay)) {
        ctx.log_warning(&format!(
            "the lease horizon cannot be marked at shutdown: {error:?}"
        ));
    }
    if filter::register(ctx).is_err() || promotion::register(ctx).is_err() {
        ctx.log_warning(
            "the command filter and the replica watch that see promotions could not be registered",
        );
        return Status::Err;
    }
    if let Err(error) = synced::register(ctx) {
        ctx.log_warning(&format!("synced writes cannot be settled: {error:?}"));
        return Status::Err;
    }
    if let Err(error) = session::register(ctx) {
        ctx.log_warning(&format!("sessions cannot end on their own: {error:?}"));
    }
    if let Err(error) = docs::register(ctx) {
        ctx.log_warning(&format!("COMMAND DOCS not set: {error}"));
    }
    set_module_options(ctx);
    cluster::note_mode(ctx);
    if let Err(error) = insync::start(ctx) {
        ctx.log_warning(&format!(
            "the in-sync set cannot see its master link: {error:?}"
        ));
        return Status::Err;
    }
    Status::Ok
}

/// Declares what the data type ([`datatype::MODULE_OPTIONS`]: it handles read errors itself)
/// and the effects ([`effects::module_options`]) need, in the one call Redis takes them in.
fn set_module_options(ctx: &Context) {
    if let Some(set) = unsafe { redis_module::raw::RedisModule_SetModuleOptions } {
        let options = datatype::MODULE_OPTIONS | effects::module_options(ctx);
        unsafe { set(ctx.get_raw(), options) };
    }
}

redis_module! {
    name: "lock",
    version: 7,
    allocator: (Allocator, Allocator {}),
    data_types: [LOCK_TYPE, FENCE_TYPE],
    // The `lock` ACL category and the commands' `@read`/`@write`/`@fast` ones (Redis 7.2+ and
    // Valkey; Redis 7.0 has no module ACL categories and only logs a warning).
    acl_categories: ["lock",],
    init: on_load,
    // Flags, key positions and ACL categories come from commands/*.json (crate::metadata).
    // LOCK.ACQUIRE, LOCK.GUARD and LOCK.FENCED are created by on_load (crate::entry), without
    // the crate's argument copies.
    commands: [
        ["lock.release", commands::release, flags("lock.release"), keys("lock.release").0, keys("lock.release").1, keys("lock.release").2, "", acl("lock.release")],
        ["lock.renew", commands::renew, flags("lock.renew"), keys("lock.renew").0, keys("lock.renew").1, keys("lock.renew").2, "", acl("lock.renew")],
        ["lock.fence", commands::fence, flags("lock.fence"), keys("lock.fence").0, keys("lock.fence").1, keys("lock.fence").2, "", acl("lock.fence")],
        ["lock.info", commands::info, flags("lock.info"), keys("lock.info").0, keys("lock.info").1, keys("lock.info").2, "", acl("lock.info")],
        ["lock.raise", commands::raise, flags("lock.raise"), keys("lock.raise").0, keys("lock.raise").1, keys("lock.raise").2, "", acl("lock.raise")],
        ["lock.macquire", multi::acquire, flags("lock.macquire"), keys("lock.macquire").0, keys("lock.macquire").1, keys("lock.macquire").2, "", acl("lock.macquire")],
        ["lock.mrelease", multi::release, flags("lock.mrelease"), keys("lock.mrelease").0, keys("lock.mrelease").1, keys("lock.mrelease").2, "", acl("lock.mrelease")],
        ["lock.mrenew", multi::renew, flags("lock.mrenew"), keys("lock.mrenew").0, keys("lock.mrenew").1, keys("lock.mrenew").2, "", acl("lock.mrenew")],
        ["lock.insync", insync::command, flags("lock.insync"), keys("lock.insync").0, keys("lock.insync").1, keys("lock.insync").2, "", acl("lock.insync")],
        ["lock.sync", synced::command, flags("lock.sync"), keys("lock.sync").0, keys("lock.sync").1, keys("lock.sync").2, "", acl("lock.sync")],
        ["lock.promotable", insync::promotable, flags("lock.promotable"), keys("lock.promotable").0, keys("lock.promotable").1, keys("lock.promotable").2, "", acl("lock.promotable")],
        ["lock.refused", filter::refused, flags("lock.refused"), keys("lock.refused").0, keys("lock.refused").1, keys("lock.refused").2, "", acl("lock.refused")],
        ["lock.replconf", replica_check::replconf, flags("lock.replconf"), keys("lock.replconf").0, keys("lock.replconf").1, keys("lock.replconf").2, "", acl("lock.replconf")],
        ["lock.session", session::command, flags("lock.session"), keys("lock.session").0, keys("lock.session").1, keys("lock.session").2, "", acl("lock.session")],
        ["lock.apply", apply::apply, flags("lock.apply"), keys("lock.apply").0, keys("lock.apply").1, keys("lock.apply").2, "", acl("lock.apply")],
        ["lock.campaign", election::campaign, flags("lock.campaign"), keys("lock.campaign").0, keys("lock.campaign").1, keys("lock.campaign").2, "", acl("lock.campaign")],
        ["lock.leader", election::leader, flags("lock.leader"), keys("lock.leader").0, keys("lock.leader").1, keys("lock.leader").2, "", acl("lock.leader")],
        ["lock.proclaim", election::proclaim, flags("lock.proclaim"), keys("lock.proclaim").0, keys("lock.proclaim").1, keys("lock.proclaim").2, "", acl("lock.proclaim")],
        ["lock.resign", election::resign, flags("lock.resign"), keys("lock.resign").0, keys("lock.resign").1, keys("lock.resign").2, "", acl("lock.resign")],
        ["lock.observe", election::observe, flags("lock.observe"), keys("lock.observe").0, keys("lock.observe").1, keys("lock.observe").2, "", acl("lock.observe")],
    ],
    event_handlers: [
        [@GENERIC @EXPIRED @EVICTED: looks::on_key_event],
    ],
    configurations: [
        i64: [
            ["max-ttl-ms", &config::MAX_TTL_MS, 0, 0, i64::MAX, ConfigurationFlags::DEFAULT, None],
            [
                "max-clock-skew-ms",
                &config::MAX_CLOCK_SKEW_MS,
                config::DEFAULT_MAX_CLOCK_SKEW_MS,
                0,
                config::LARGEST_CLOCK_SKEW_MS,
                ConfigurationFlags::DEFAULT,
                None
            ],
            [
                "restart-delay-ms",
                &config::RESTART_DELAY_MS,
                0,
                0,
                config::LARGEST_RESTART_DELAY_MS,
                ConfigurationFlags::DEFAULT,
                None
            ],
            [
                "max-multi-keys",
                &config::MAX_MULTI_KEYS,
                config::DEFAULT_MAX_MULTI_KEYS,
                1,
                config::LARGEST_MULTI_KEYS,
                ConfigurationFlags::DEFAULT,
                None
            ],
            [
                "min-insync-replicas",
                &config::MIN_INSYNC_REPLICAS,
                1,
                0,
                config::LARGEST_MIN_INSYNC_REPLICAS,
                ConfigurationFlags::DEFAULT,
                None
            ],
            [
                "insync-timeout-ms",
                &config::INSYNC_TIMEOUT_MS,
                0,
                0,
                config::LARGEST_RESTART_DELAY_MS,
                ConfigurationFlags::DEFAULT,
                None
            ],
            [
                "insync-drop-delay-ms",
                &config::INSYNC_DROP_DELAY_MS,
                config::DEFAULT_INSYNC_DROP_DELAY_MS,
                0,
                config::LARGEST_RESTART_DELAY_MS,
                ConfigurationFlags::DEFAULT,
                None
            ],
            [
                "session-grace-ms",
                &config::SESSION_GRACE_MS,
                config::DEFAULT_SESSION_GRACE_MS,
                100,
                config::LARGEST_SESSION_GRACE_MS,
                ConfigurationFlags::DEFAULT,
                None
            ],
            [
                "session-max-grace-ms",
                &config::SESSION_MAX_GRACE_MS,
                config::DEFAULT_SESSION_MAX_GRACE_MS,
                100,
                config::LARGEST_SESSION_GRACE_MS,
                ConfigurationFlags::DEFAULT,
                None
            ],
            ["replica-priority", &config::REPLICA_PRIORITY, -1, -1, i64::from(i32::MAX), ConfigurationFlags::DEFAULT, None],
            [
                "sync-timeout-ms",
                &config::SYNC_TIMEOUT_MS,
                config::DEFAULT_SYNC_TIMEOUT_MS,
                1,
                config::LARGEST_RESTART_DELAY_MS,
                ConfigurationFlags::DEFAULT,
                None
            ],
        ],
        string: [],
        bool: [
            ["insync-strict", &config::INSYNC_STRICT, false, ConfigurationFlags::DEFAULT, None],
            ["allow-unsafe-promotion", &config::ALLOW_UNSAFE_PROMOTION, false, ConfigurationFlags::DEFAULT, None],
            ["sync-writes", &config::SYNC_WRITES, true, ConfigurationFlags::DEFAULT, None],
        ],
        enum: [],
        module_args_as_configuration: true,
    ]
}
