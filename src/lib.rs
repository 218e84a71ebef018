//! leasehold: distributed locks as Redis server commands (module `lock`).
//!
//! `LOCK.ACQUIRE`, `LOCK.RELEASE`, `LOCK.RENEW`, `LOCK.FENCE` and `LOCK.INFO` replace the Lua
//! scripts lock clients ship today: owner checks, leases and fencing tokens run atomically in
//! the server, and the fencing counter is persisted and replicated so tokens only go up.
//! This file only registers things with Redis; each concern has its own module.

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

mod blocking;
mod clock;
mod commands;
mod datatype;
mod effects;
mod fence;
mod handover;
mod key;
mod lock;
mod waiters;

use redis_module::server_events::{FlushSubevent, ServerRole};
use redis_module::{Context, redis_module};
use redis_module_macros::{flush_event_handler, role_changed_event_handler};

use datatype::LOCK_TYPE;

/// The Redis allocator inside the server; the system one for unit tests, which run without it.
#[cfg(not(test))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(test)]
type Allocator = std::alloc::System;

/// A promoted replica may never have received the last tokens its old master issued: the next
/// token skips the reserve (see [`fence`]).
#[role_changed_event_handler]
fn on_role_changed(_ctx: &Context, role: ServerRole) {
    if role == ServerRole::Primary {
        fence::counter().reserve();
    }
}

/// `FLUSHALL`/`FLUSHDB` freed every lock: hand them to their waiters.
#[flush_event_handler]
fn on_flush(ctx: &Context, event: FlushSubevent) {
    handover::on_flush(ctx, event);
}

redis_module! {
    name: "lock",
    version: 1,
    allocator: (Allocator, Allocator {}),
    data_types: [LOCK_TYPE],
    commands: [
        ["lock.acquire", commands::acquire, "write deny-oom blocking", 1, 1, 1, ""],
        ["lock.release", commands::release, "write fast", 1, 1, 1, ""],
        ["lock.renew", commands::renew, "write fast", 1, 1, 1, ""],
        ["lock.fence", commands::fence, "readonly fast", 1, 1, 1, ""],
        ["lock.info", commands::info, "readonly fast", 1, 1, 1, ""],
        ["lock.apply", effects::apply, "write fast", 1, 1, 1, ""],
    ],
    event_handlers: [
        [@GENERIC @EXPIRED @EVICTED: handover::on_key_event],
    ],
}
