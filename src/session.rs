//! Sessions on this server ([`leasehold_core::session`] has the rules): `LOCK.SESSION`, the
//! log entries that commands naming a session make and that commands, the `unlink` callback
//! and the sweep free, and the end of a session a grace after its connection closed — each
//! holding still tied to it released as `LOCK.RELEASE` would release it (every hold at once),
//! replicated and handed over to its waiters like one.
//!
//! Redis reports a closed connection with `RedisModuleEvent_ClientChange` (with the client's
//! id since Redis 6.0.9, redis#7867), which `redis-module` 2.0.8 does not wrap: its
//! subscription is the one raw call here, with `RedisModule_GetClientId`. Writing inside that
//! event is not allowed, so the end runs from a timer, as every lease end does
//! ([`crate::looks`]).
//!
//! Sessions live in the master's memory only: a replica has none, and a server that stops
//! being a master forgets them (the new master has the holdings' leases).

use std::os::raw::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leasehold_core::args;
use leasehold_core::outcome::Reply;
use leasehold_core::session::{self, Entry, Id, Number, Tie};
use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue, raw};

use crate::api::{api, subscribe};
use crate::clock;
use crate::config;
use crate::effects::replication_paused;
use crate::key::{LockKey, select_db, selected_db};
use crate::looks;
use crate::replies;
use crate::state::{self, sessions};
use crate::stats;

/// How often a session's end is retried while writes are paused, in ms.
const PAUSED_RETRY_MS: u64 = 10;

/// How often the sweep drops log entries whose holdings are gone ([`Sessions::to_sweep`]), in ms.
///
/// [`Sessions::to_sweep`]: leasehold_core::session::Sessions::to_sweep
const SWEEP_MS: u64 = 100;

/// `LOCK.SESSION OPEN [GRACE grace-ms]`: opens a session attached to this connection, that
/// outlives it by `grace-ms` (default `lock.session-grace-ms`). Replies `[id, grace-ms]`.
///
/// `LOCK.SESSION ATTACH id`: attaches the session to this connection (it moves here from any
/// other), keeping every holding tied to it; clients send it as their heartbeat too. Replies
/// the grace in ms.
///
/// `LOCK.SESSION USE <id | NONE>`: what this connection acquires and renews without naming a
/// session is tied to session `id` from now on (refused once it ended), or to none. Replies
/// `OK`.
///
/// `LOCK.SESSION CLOSE id`: ends the session now; replies how many holdings it released.
///
/// # Errors
/// Arity, syntax, an unknown subcommand, a grace out of range, an invalid id, no such session
/// (never opened here, or ended), a session another ACL user opened (`ATTACH`, `CLOSE`), and
/// `READONLY` on a replica.
pub fn command(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let max_grace = config::session_max_grace_ms();
    let parsed = args::session(&args, max_grace).map_err(replies::arg_error)?;
    if parsed == args::Session::Help {
        return Ok(help());
    }
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        return Err(RedisError::Str(
            "READONLY You can't use sessions against a read only replica.",
        ));
    }
    let user = ctx.get_current_user().to_string();
    match parsed {
        args::Session::Open { grace_ms } => {
            let grace_ms = grace_ms.unwrap_or_else(config::session_grace_ms);
            let id = sessions().open(client_id(ctx)?, &user, grace_ms);
            Ok(RedisValue::Array(vec![
                RedisValue::BulkString(session::format_id(id)),
                RedisValue::Integer(i64::try_from(grace_ms).unwrap_or(i64::MAX)),
            ]))
        }
        args::Session::Attach(id) => {
            let grace_ms = sessions()
                .attach(id, client_id(ctx)?, &user)
                .map_err(session_error)?;
            Ok(RedisValue::Integer(
                i64::try_from(grace_ms).unwrap_or(i64::MAX),
            ))
        }
        args::Session::Use(id) => {
            if id.is_some() {
                USED.store(true, Ordering::Relaxed);
            }
            sessions()
                .use_session(client_id(ctx)?, id)
                .map_err(session_error)?;
            Ok(RedisValue::SimpleStringStatic("OK"))
        }
        args::Session::Close(id) => {
            let ties = sessions().close(id, &user).map_err(session_error)?;
            let released = release(ctx, ties)?;
            Ok(RedisValue::Integer(i64::from(released)))
        }
        args::Session::Help => Ok(help()),
    }
}

/// `LOCK.SESSION HELP`: the subcommands, one line each and an indented line on what it does,
/// as Redis's container commands (`CLIENT HELP`, `OBJECT HELP`) reply.
fn help() -> RedisValue {
    const LINES: [&str; 11] = [
        "LOCK.SESSION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "OPEN [GRACE <grace-ms>]",
        "    Open a session on this connection; reply its id and grace (ms).",
        "ATTACH <id>",
        "    Attach the session to this connection (also a client's heartbeat); reply its grace.",
        "USE <id>|NONE",
        "    Tie what this connection acquires and renews to the session, or to none.",
        "CLOSE <id>",
        "    End the session now; reply how many holdings it released.",
        "HELP",
        "    Print this help.",
    ];
    RedisValue::Array(
        LINES
            .iter()
            .map(|line| RedisValue::SimpleStringStatic(line))
            .collect(),
    )
}

/// Some connection has said `LOCK.SESSION USE <id>` since the module loaded (never reset): until
/// then no connection uses a session, and a command that names none is tied to nothing without
/// taking the sessions' lock (issue 55).
static USED: AtomicBool = AtomicBool::new(false);

/// The number of the session a command ties its holdings to, checked before the command
/// changes anything: the one it names (`named`, its `SESSION id`), else the one its connection
/// uses (`LOCK.SESSION USE`), else none.
///
/// # Errors
/// No such session: the one named or used has ended (or never was).
pub fn of_command(ctx: &Context, named: Option<Id>) -> Result<Option<Number>, RedisError> {
    if named.is_none() && !USED.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let sessions = sessions();
    named
        .or_else(|| sessions.used_by(|| client_id(ctx).ok()))
        .map(|id| sessions.number(id).map_err(session_error))
        .transpose()
}

/// Logs a holding of `key` in the selected database in `session`'s log, for the command about
/// to tie it: the tie the holding is to keep ([`Lock::tie`] keeps the one it has for the same
/// session), with the lease end asked for (unix ms). [`settle`] frees it after the command
/// when the holding did not take it.
#[inline]
pub fn log(ctx: &Context, session: Option<Number>, key: &[u8], lease_end_ms: i64) -> Option<Tie> {
    let number = session?;
    sessions().log(number, selected_db(ctx), key, lease_end_ms)
}

/// After a command on `owner`'s holding of `key` (in the selected database): frees the entry
/// of the tie the holding kept before (`was`) and of the one [`log`]ged for the command
/// (`logged`), each unless the holding keeps it now — so a release, an untying or a renewal
/// leaves no entry behind. No lock taken when there is nothing to free: a holding that was not
/// tied and a command tied to no session (inline: no call either), or a holding that keeps
/// what was logged for it.
#[inline]
pub fn settle(
    ctx: &Context,
    key: &LockKey,
    name: &[u8],
    owner: &[u8],
    was: Option<Tie>,
    logged: Option<Tie>,
) {
    if was.is_some() || logged.is_some() {
        free_untaken(ctx, key, name, owner, was, logged);
    }
}

/// [`settle`] where the holding was tied or the command logged a tie.
fn free_untaken(
    ctx: &Context,
    key: &LockKey,
    name: &[u8],
    owner: &[u8],
    was: Option<Tie>,
    logged: Option<Tie>,
) {
    let now = tied_to(key, owner);
    let mut gone = [was, logged]
        .into_iter()
        .flatten()
        .filter(|tie| Some(*tie) != now)
        .peekable();
    if gone.peek().is_none() {
        return;
    }
    let db = selected_db(ctx);
    let mut sessions = sessions();
    for tie in gone {
        sessions.free(tie, db, name);
    }
}

/// The tie `owner`'s holding of the lock `key` keeps, if any.
pub fn tied_to(key: &LockKey, owner: &[u8]) -> Option<Tie> {
    key.lock().and_then(|lock| lock.tie_of(owner))
}

/// The owner whose holding of the lock `key` keeps `tie`, if any.
fn keeper(key: &LockKey, tie: Tie) -> Option<&[u8]> {
    key.lock()?.keeper(tie)
}

/// The id of the open session a holding's `tie` names, for `LOCK.INFO`.
pub fn id_of(tie: Tie) -> Option<String> {
    sessions().id_of(tie.number).map(session::format_id)
}

/// This server stopped being a master: its sessions are forgotten, not ended.
pub fn on_demoted() {
    sessions().clear();
}

/// Releases the holding that still keeps each tie of `ties` (in its entry's database, every hold
/// at once), as `LOCK.RELEASE` would; the caller's database is selected again after. Returns
/// how many were released.
///
/// # Errors
/// A database that cannot be selected.
fn release(ctx: &Context, ties: Vec<(Tie, Entry)>) -> Result<u32, RedisError> {
    let caller_db = selected_db(ctx);
    let mut released = 0;
    for (tie, (db, key)) in ties {
        select_db(ctx, db)?;
        let name = ctx.create_string(&*key);
        // A key of another type now, or a holding untied since: nothing of the session's.
        let Ok(mut key) = LockKey::write(ctx, &name) else {
            continue;
        };
        let Some(owner) = keeper(&key, tie).map(Box::<[u8]>::from) else {
            continue;
        };
        let owner_name = ctx.create_string(&*owner);
        let reply = looks::decide(
            ctx,
            &mut key,
            &name,
            Some(&owner_name),
            clock::now_ms(),
            |scope| {
                scope.end_holding(&owner);
            },
        )?;
        if reply == Reply::Integer(1) {
            released += 1;
        }
    }
    select_db(ctx, caller_db)?;
    stats::sessions_released(released);
    Ok(released)
}

/// A session whose grace may have passed: ends it if it is still detached, releasing its
/// holdings. On a replica, nothing; while writes are paused, again a little later.
fn on_due(ctx: &Context, id: Id) {
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        return;
    }
    if replication_paused() {
        ctx.create_timer(Duration::from_millis(PAUSED_RETRY_MS), on_due, id);
        return;
    }
    let Some(ties) = sessions().end_if_due(id, clock::now_ms()) else {
        return;
    };
    stats::session_expired();
    if let Err(error) = release(ctx, ties) {
        ctx.log_warning(&format!(
            "lock: session {} ended, its holdings not all released: {error:?}",
            session::format_id(id)
        ));
    }
}

/// Every [`SWEEP_MS`]: frees each of the next log entries the registry names whose holding
/// went without the server seeing it (a shared holder's lease ended, a flush, an entry logged
/// by a command that failed) and that no waiter may be granted, so that logs do not grow in a
/// long-lived session. Not while writes are paused (a lookup may expire a key).
fn sweep(ctx: &Context, (): ()) {
    if !replication_paused()
        && let Err(error) = free_gone(ctx)
    {
        ctx.log_warning(&format!(
            "lock: the sweep of session logs stopped: {error:?}"
        ));
    }
    ctx.create_timer(Duration::from_millis(SWEEP_MS), sweep, ());
}

/// The sweep's work: looks up each entry [`Sessions::to_sweep`] names in its database; the
/// caller's database is selected again after.
///
/// [`Sessions::to_sweep`]: leasehold_core::session::Sessions::to_sweep
///
/// # Errors
/// A database that cannot be selected.
fn free_gone(ctx: &Context) -> Result<(), RedisError> {
    let now = i64::try_from(clock::now_ms()).unwrap_or(i64::MAX);
    let due = sessions().to_sweep(now);
    if due.is_empty() {
        return Ok(());
    }
    let caller_db = selected_db(ctx);
    for (tie, (db, key)) in due {
        select_db(ctx, db)?;
        let lease_left = LockKey::read(ctx, &ctx.create_string(&*key))
            .ok()
            .filter(|lock| keeper(lock, tie).is_some())
            .map(|lock| lock.remaining_ms().unwrap_or(0));
        match lease_left {
            Some(left) => sessions().recheck_at(tie, now.saturating_add(left)),
            // A waiter's entry is logged when it queues: kept while anyone waits for the key.
            None if state::has_waiters(db, &key) => {}
            None => sessions().drop_entry(tie),
        }
    }
    select_db(ctx, caller_db)
}

/// A connection closed: each session attached to it ends after its grace, unless attached again.
fn disconnected(ctx: &Context, client: u64) {
    let now = clock::now_ms();
    for (id, end_ms) in sessions().detach(client, now) {
        let delay = Duration::from_millis(end_ms.saturating_sub(now));
        ctx.create_timer(delay, on_due, id);
    }
}

fn session_error(error: session::SessionError) -> RedisError {
    RedisError::String(error.to_string())
}

/// The id of the connection that sent the command (`CLIENT ID`).
///
/// # Errors
/// The server lacks `RedisModule_GetClientId`.
fn client_id(ctx: &Context) -> Result<u64, RedisError> {
    Ok(unsafe { api(raw::RedisModule_GetClientId)?(ctx.get_raw()) })
}

/// Starts the sweep and subscribes to connections closing.
///
/// # Errors
/// The server lacks the event or refuses the subscription.
pub fn register(ctx: &Context) -> Result<(), RedisError> {
    ctx.create_timer(Duration::from_millis(SWEEP_MS), sweep, ());
    subscribe(
        ctx,
        raw::REDISMODULE_EVENT_CLIENT_CHANGE,
        Some(on_client_change),
        "ERR could not watch connections closing",
    )
}

/// `RedisModuleEvent_ClientChange`: `data` is a `RedisModuleClientInfo` (version 1).
unsafe extern "C" fn on_client_change(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED || data.is_null() {
        return;
    }
    let info = unsafe { &*data.cast::<raw::RedisModuleClientInfo>() };
    disconnected(&Context::new(ctx), info.id);
}
