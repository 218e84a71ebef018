//! Synced writes on the server: a lock write that counts — a grant, also one a `WAIT` hand-over
//! makes, a renewal, a re-entry — replies only once the in-sync set has it
//! ([`leasehold_core::insync::synced`]), with `SYNC` or by `lock.sync-writes`. The client is
//! blocked meanwhile, as `WAIT` blocks it.
//!
//! - Before the event loop sleeps (`RedisModuleEvent_EventLoop`), while writes are held and a
//!   look can settle one ([`Pending::due`]: new writes, an acknowledgement or a change in the
//!   set heard, or some ms passed): the set's status ([`insync::status`]) settles them, then,
//!   for writes held since the last look, the replicas are asked for their acknowledgement at
//!   once (`REPLCONF GETACK *`, to replicas only), as `WAIT` asks — after the offsets were
//!   read, since a replica's answer does not count the request itself.
//! - A write that counted gets its reply. One that did not gets `NOREPLICAS` with what was
//!   missing, and leaves nothing its client does not know of: a grant is released, by its
//!   owner, as `LOCK.RELEASE` (`LOCK.MRELEASE` for a set) would, just before the error goes out
//!   ([`Undo`]); a renewal's error says to count on the lease from before it. A client that
//!   leaves while its write is held has its grant released the same way: before its null reply
//!   (`CLIENT UNBLOCK`, its `WAIT` timeout), or on the next timer turn once it disconnected.
//! - A server with no set to wait for (no member, none required) replies at once; one whose set
//!   is below its size refuses at once.
//! - Inside `MULTI`, scripts and functions a client cannot block: `SYNC` is refused there, and
//!   `lock.sync-writes` does not apply (such a write replies at once, unsynced).
//! - A grant by a command with `WAIT` is counted by its holder from the reply (the server
//!   replies the moment it grants), which a held grant sends later: such a grant is made
//!   [`Stretch`]ed by the time it may be held, and its lease set to what was asked from the
//!   moment it counted, so that no holder counts on a lease longer than the replicas have.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::raw::c_void;
use std::time::Duration;

use leasehold_core::insync::synced::{Pending, Settled};
use leasehold_core::outcome::Answer;
use redis_module::{
    CallOptionsBuilder, CallResult, Context, ContextFlags, RedisError, RedisResult, RedisString,
    RedisValue, raw,
};

use crate::api::subscribe;
use crate::blocking::{self, Blocked, can_block};
use crate::clock;
use crate::config;
use crate::effects;
use crate::insync;
use crate::key::{select_db, selected_db};
use crate::replica_check;

/// What a write that did not count leaves to undo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undo {
    /// A grant: released by its owner, as `LOCK.RELEASE` (one key) or `LOCK.MRELEASE` would.
    Release {
        /// The database of the keys.
        db: i32,
        /// The locks granted.
        keys: Vec<Vec<u8>>,
        /// Their owner.
        owner: Vec<u8>,
        /// How the grant of a command with `WAIT` was stretched; `None` for one without.
        stretch: Option<Stretch>,
    },
    /// A renewal: nothing; the holder counts on the lease it had before.
    Renewal,
    /// A leader's new value (`LOCK.PROCLAIM`): nothing; the value stays on the master, where a
    /// failover may lose it.
    Proclaim,
    /// A guarded command's write (`LOCK.GUARD`, `LOCK.FENCED`): nothing; it stays on the
    /// master, where a failover may lose it.
    Write,
    /// `LOCK.SYNC`, which stands for the writes its client sent before it: nothing here; its
    /// client releases the grants they made.
    Sync,
}

/// How the grant of a synced command with `WAIT` is made: its holder counts the lease from the
/// reply, which comes up to `stretch_ms` (the sync timeout) after the grant when the grant is
/// held, so the grant is made for `ttl_ms + stretch_ms`; once it counted (or when it goes out
/// unheld) the lease is set to `ttl_ms` from then (`LOCK.RENEW`/`LOCK.MRENEW ... NOSYNC`).
/// Either lease, on the master or a replica, ends no earlier than the one its holder counts.
/// On a server with no set to wait for (no member, none required) nothing is stretched: a grant
/// replies at once. A waiter that queued there and whose grant must be held after all (a
/// replica joined the set meanwhile) has its grant stretched before the replicas are asked,
/// in the same turn of the event loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stretch {
    /// The lease asked for, ms.
    pub ttl_ms: i64,
    /// How much longer the grant is made, ms: the longest the grant may be held.
    pub stretch_ms: i64,
}

impl Stretch {
    /// The stretch of a grant of `ttl_ms` by a command that `waits` (has `WAIT`) and is
    /// `sync`ed: by `lock.sync-timeout-ms`, or 0 on a server with no set to wait for; `None` for
    /// any other command.
    pub fn of(sync: bool, waits: bool, ttl_ms: i64) -> Option<Self> {
        (sync && waits).then(|| Self {
            ttl_ms,
            stretch_ms: if insync::lone() { 0 } else { sync_timeout_ms() },
        })
    }

    /// The lease a grant is made for, ms: `ttl_ms`, stretched by `stretch`.
    pub fn lease_ms(stretch: Option<Self>, ttl_ms: i64) -> i64 {
        stretch.map_or(ttl_ms, |stretch| ttl_ms.saturating_add(stretch.stretch_ms))
    }
}

/// `lock.sync-timeout-ms`, the longest a write is held.
fn sync_timeout_ms() -> i64 {
    i64::try_from(config::sync_timeout_ms()).unwrap_or(i64::MAX)
}

/// A held write.
struct Held {
    blocked: Blocked,
    /// Its reply, once it counted.
    reply: RedisValue,
    undo: Undo,
}

#[derive(Default)]
struct Synced {
    pending: Pending<Held>,
    /// Waiters that asked for a synced grant: what a grant to each would undo.
    waiters: HashMap<Blocked, Undo>,
    /// Grants to release on the next timer turn.
    undo: Vec<Undo>,
    /// Whether that timer is armed.
    armed: bool,
    /// Held grants to stretch before the replicas are asked ([`Stretch`]).
    stretch: Vec<Undo>,
}

thread_local! {
    /// Commands, events and timers all run on the main thread.
    static SYNCED: RefCell<Synced> = RefCell::new(Synced::default());
}

/// Watches the event loop: the held writes are settled before it sleeps.
///
/// # Errors
/// The server refuses the subscription.
pub fn register(ctx: &Context) -> Result<(), RedisError> {
    subscribe(
        ctx,
        raw::REDISMODULE_EVENT_EVENTLOOP,
        Some(on_event_loop),
        "ERR could not watch the event loop",
    )
}

/// Whether the write of a command that said `asked` (`SYNC`, `NOSYNC` or neither) is held.
///
/// # Errors
/// `ERR SYNC ...` for `SYNC` where a client cannot block (`MULTI`, scripts, functions).
pub fn wanted(ctx: &Context, asked: Option<bool>) -> Result<bool, RedisError> {
    let blockable = can_block(ctx);
    if asked == Some(true) && !blockable {
        return Err(RedisError::Str(
            "ERR SYNC cannot be used inside MULTI, scripts or functions",
        ));
    }
    Ok(blockable && config::sync_wanted(asked))
}

/// Whether the reply to a write just made waits for the in-sync set, for a command that said
/// `asked` and whose `SYNC` was already refused where a client cannot block: never on a server
/// with no set to wait for (decided without reading the context's flags: a lone server's write
/// pays nothing for syncing, issue 55), otherwise as [`wanted`] says.
pub fn waits(ctx: &Context, asked: Option<bool>) -> bool {
    !insync::lone() && matches!(wanted(ctx, asked), Ok(true))
}

/// Replies to a write that counts and was to be held (the command's keys closed): at once with
/// `reply` on a server with no set to wait for; with the refusal at once, after undoing it,
/// when the set is below its size; otherwise blocks the client until the set has the write.
///
/// # Errors
/// `NOREPLICAS` when the Sentinels name another master, when the set is below its size, or
/// when the client cannot be blocked.
pub fn hold(ctx: &Context, reply: RedisValue, undo: Undo) -> RedisResult {
    let members = match insync::gate() {
        Ok(members) => members,
        Err(refusal) => return refused(ctx, refusal, &undo),
    };
    if members == 0 {
        rebase(ctx, &undo);
        return Ok(reply);
    }
    match blocking::block::<Leaving>(ctx, 0) {
        Ok(blocked) => {
            held(blocked, reply, undo);
            Ok(RedisValue::NoReply)
        }
        Err(_) => refused(ctx, Settled::NotAcknowledged { timeout_ms: 0 }, &undo),
    }
}

/// `LOCK.SYNC`: replies `OK` once the master's in-sync set has every write made before it —
/// its client's `NOSYNC` writes among them — as a write with `SYNC` waits
/// ([`hold`]); `WAIT`'s counterpart for the in-sync set. A client that pipelines several
/// `NOSYNC` grants and renewals with one `LOCK.SYNC` behind them has them all synced in one held
/// reply, where a `SYNC` on each would hold its connection once per write (issue 55).
///
/// Unlike a write with `SYNC`, nothing is undone here when the set does not acknowledge in time
/// or the client leaves: the writes before it are its client's to release.
///
/// # Errors
/// Arity; `ERR` inside `MULTI`, scripts and functions (a client there cannot block) and on a
/// replica; `NOREPLICAS` as a held write gets it, ending in what it means for the writes before
/// it.
pub fn command(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() != 1 {
        return Err(RedisError::WrongArity);
    }
    if !can_block(ctx) {
        return Err(RedisError::Str(
            "ERR LOCK.SYNC cannot be used inside MULTI, scripts or functions",
        ));
    }
    if !ctx.get_flags().contains(ContextFlags::MASTER) {
        return Err(RedisError::Str(
            "ERR LOCK.SYNC is answered by the master; this server is a replica",
        ));
    }
    hold(ctx, RedisValue::SimpleStringStatic("OK"), Undo::Sync)
}

/// [`hold`] for a grant of `keys` to `owner` (made longer by `stretch` when it waited), whose
/// [`Undo`] is made only when it may be needed: a server with no set to wait for replies at
/// once, with nothing to undo or set back, so an acquire there pays nothing more than it did
/// before synced writes (issue 55).
///
/// # Errors
/// As [`hold`]'s.
pub fn hold_grant(
    ctx: &Context,
    reply: RedisValue,
    keys: &[RedisString],
    owner: &RedisString,
    stretch: Option<Stretch>,
) -> RedisResult {
    if insync::gate() == Ok(0) && stretch.is_none_or(|stretch| stretch.stretch_ms == 0) {
        return Ok(reply);
    }
    hold(ctx, reply, release_of(ctx, keys, owner, stretch))
}

/// A waiter that asked for a synced grant queued (`LOCK.ACQUIRE ... WAIT`, `LOCK.MACQUIRE ...
/// WAIT`): a grant to it is held like a command's ([`answer`]), and `undo` releases it.
pub fn waiting(blocked: Blocked, undo: Undo) {
    SYNCED.with_borrow_mut(|synced| synced.waiters.insert(blocked, undo));
}

/// The core answered a waiter: a grant to one that asked for a synced grant is held, anything
/// else goes out at once.
pub fn answer(blocked: Blocked, answer: &Answer) {
    let granted = matches!(answer, Answer::Granted(_) | Answer::GrantedSet(_));
    let undo = SYNCED.with_borrow_mut(|synced| synced.waiters.remove(&blocked));
    match (undo, blocking::reply_of(answer)) {
        (Some(undo), Ok(reply)) if granted => hand_over(blocked, reply, undo),
        (_, reply) => blocking::unblock(blocked, Box::new(move |_| reply)),
    }
}

/// A synced grant to a waiter, as [`hold`] treats a command's: refused at once (after undoing
/// it) when [`insync::gate`] says so, answered at once on a server with no set to wait for,
/// held otherwise.
fn hand_over(blocked: Blocked, reply: RedisValue, undo: Undo) {
    let answer: blocking::Reply = match insync::gate() {
        Err(refusal) => Box::new(move |ctx| refused(ctx, refusal, &undo)),
        Ok(0) => Box::new(move |ctx| {
            rebase(ctx, &undo);
            Ok(reply)
        }),
        Ok(_) => return held(blocked, reply, stretched(undo)),
    };
    blocking::unblock(blocked, answer);
}

/// A waiter's grant about to be held that was not stretched (it queued on a server with no set
/// to wait for): stretched now, before the first look at it ([`stretch_held`]).
fn stretched(undo: Undo) -> Undo {
    match undo {
        Undo::Release {
            db,
            keys,
            owner,
            stretch:
                Some(Stretch {
                    ttl_ms,
                    stretch_ms: 0,
                }),
        } => {
            let undo = Undo::Release {
                db,
                keys,
                owner,
                stretch: Some(Stretch {
                    ttl_ms,
                    stretch_ms: sync_timeout_ms(),
                }),
            };
            SYNCED.with_borrow_mut(|synced| synced.stretch.push(undo.clone()));
            undo
        }
        undo => undo,
    }
}

/// Makes the grants [`stretched`] queued longer — `ttl_ms + stretch_ms` from now, which is no
/// earlier than from their grant — before the offsets that cover them are read.
fn stretch_held(ctx: &Context) {
    for undo in SYNCED.with_borrow_mut(|synced| std::mem::take(&mut synced.stretch)) {
        if let Undo::Release {
            stretch: Some(stretch),
            ..
        } = &undo
        {
            let lease_ms = Stretch::lease_ms(Some(*stretch), stretch.ttl_ms);
            renew_as_owner(ctx, &undo, lease_ms, "stretched");
        }
    }
}

fn held(blocked: Blocked, reply: RedisValue, undo: Undo) {
    let now = clock::now_ms();
    let timeout_ms = match &undo {
        // Never held longer than the grant was stretched for (the setting may have changed).
        Undo::Release {
            stretch: Some(stretch),
            ..
        } => u64::try_from(stretch.stretch_ms)
            .unwrap_or(0)
            .min(config::sync_timeout_ms()),
        _ => config::sync_timeout_ms(),
    };
    SYNCED.with_borrow_mut(|synced| {
        synced.pending.hold(
            Held {
                blocked,
                reply,
                undo,
            },
            now,
            timeout_ms,
        );
    });
}

/// A blocked client left: a grant held for it is released now while it is `connected` (it is
/// answered null: `CLIENT UNBLOCK`, or its `WAIT` timed out), on the next timer turn once it
/// disconnected.
pub fn left(ctx: &Context, blocked: Blocked, connected: bool) {
    let held = SYNCED.with_borrow_mut(|synced| {
        synced.waiters.remove(&blocked);
        synced.pending.take(|held| held.blocked == blocked)
    });
    match held {
        Some(held) if connected => run_undo(ctx, &held.undo),
        Some(held) => later(ctx, held.undo),
        None => {}
    }
}

/// What a synced write's client leaving does ([`blocking::Leaving`]).
pub struct Leaving;

impl blocking::Leaving for Leaving {
    fn left(ctx: &Context, blocked: Blocked, connected: bool) {
        left(ctx, blocked, connected);
    }
}

unsafe extern "C" fn on_event_loop(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent == raw::REDISMODULE_SUBEVENT_EVENTLOOP_BEFORE_SLEEP
        && !SYNCED.with_borrow(|synced| synced.pending.is_empty())
    {
        settle(&Context::new(ctx));
    }
}

/// Settles the held writes by the set's status when a look is due ([`Pending::due`]), then
/// asks the replicas for their acknowledgement if writes were held since the last time. On a
/// server that is no longer a master, every held write is refused (a replica cannot release
/// anything).
fn settle(ctx: &Context) {
    if !ctx.get_flags().contains(ContextFlags::MASTER) {
        for held in SYNCED.with_borrow_mut(|synced| synced.pending.drain()) {
            let error = format!(
                "NOREPLICAS this server is no longer a master{}",
                demoted_meaning(&held.undo)
            );
            blocking::unblock(
                held.blocked,
                Box::new(move |_| Err(RedisError::String(error))),
            );
        }
        SYNCED.with_borrow_mut(|synced| synced.stretch.clear());
        return;
    }
    stretch_held(ctx);
    let now = clock::now_ms();
    let due = SYNCED.with_borrow_mut(|synced| {
        if insync::status_changed() {
            synced.pending.heard();
        }
        synced.pending.due(now)
    });
    if !due {
        return;
    }
    let status = insync::status(ctx);
    let (settled, ask) = SYNCED
        .with_borrow_mut(|synced| (synced.pending.settle(now, &status), synced.pending.ask()));
    for (held, outcome) in settled {
        let Held {
            blocked,
            reply,
            undo,
        } = held;
        if outcome == Settled::Counted {
            blocking::unblock(
                blocked,
                Box::new(move |ctx| {
                    rebase(ctx, &undo);
                    Ok(reply)
                }),
            );
        } else {
            blocking::unblock(blocked, Box::new(move |ctx| refused(ctx, outcome, &undo)));
        }
    }
    if ask && !effects::replication_paused() {
        effects::ask_for_acknowledgements(ctx);
    }
}

/// Undoes a write that did not count (`outcome`), and returns its error.
fn refused(ctx: &Context, outcome: Settled, undo: &Undo) -> RedisResult {
    run_undo(ctx, undo);
    Err(refusal(outcome, undo))
}

/// The error a write that did not count gets: `NOREPLICAS`, what was missing, what it means.
fn refusal(outcome: Settled, undo: &Undo) -> RedisError {
    let missing = match outcome {
        Settled::TooFew { members, required } => format!(
            "the master has {members} in-sync replicas, fewer than lock.min-insync-replicas \
             ({required})"
        ),
        Settled::Replaced => "the Sentinels name another master (INFO lock: \
            lock_insync_replaced_by), so this server counts no write until it is a replica"
            .to_owned(),
        Settled::Silent => format!(
            "replica {} has not said it runs the lock module (INFO lock: \
             lock_insync_without_module), and could be promoted without the lock writes; load \
             the module on it",
            replica_check::fields().0.join(", ")
        ),
        Settled::NotAcknowledged { timeout_ms: 0 } => "the client could not be blocked".to_owned(),
        Settled::NotAcknowledged { timeout_ms } => {
            let unproven = replica_check::fields().1;
            let why = if unproven.is_empty() {
                String::new()
            } else {
                format!(
                    " (replica {} had not said it runs the lock module)",
                    unproven.join(", ")
                )
            };
            format!("not every in-sync replica acknowledged within {timeout_ms} ms{why}")
        }
        Settled::Counted => String::new(),
    };
    RedisError::String(format!("NOREPLICAS {missing}{}", meaning(undo)))
}

/// What a refusal means for the client: its grant was released, its renewal does not count, or
/// its new value may be lost.
fn meaning(undo: &Undo) -> &'static str {
    match undo {
        Undo::Release { .. } => "; the grant was released",
        Undo::Renewal => "; the renewal does not count: the lease before it does",
        Undo::Proclaim => "; the value is set here, but a failover may lose it",
        Undo::Write => "; the command ran here, but a failover may lose its write",
        Undo::Sync => "; the writes before it do not count: release the grants they made",
    }
}

/// What a refusal on a server that became a replica means: nothing could be released there.
fn demoted_meaning(undo: &Undo) -> &'static str {
    match undo {
        Undo::Release { .. } => {
            "; the grant was not released here: the new master may have it, release it there"
        }
        Undo::Renewal => "; the renewal does not count: the lease before it does",
        Undo::Proclaim => "; the value was set on the old master only",
        Undo::Write => "; the command ran on the old master only",
        Undo::Sync => {
            "; the writes before it do not count: the new master may have their grants, \
             release them there"
        }
    }
}

/// Undoes `undo` on the next timer turn (not in a callback Redis calls while it frees a client,
/// where the keyspace must not change).
fn later(ctx: &Context, undo: Undo) {
    if matches!(
        undo,
        Undo::Renewal | Undo::Proclaim | Undo::Write | Undo::Sync
    ) {
        return;
    }
    let arm = SYNCED.with_borrow_mut(|synced| {
        synced.undo.push(undo);
        !std::mem::replace(&mut synced.armed, true)
    });
    if arm {
        ctx.create_timer(Duration::ZERO, run_later, ());
    }
}

/// The timer turn: releases the grants that did not count, unless writes are paused (then a
/// few ms later).
fn run_later(ctx: &Context, (): ()) {
    if effects::replication_paused() {
        ctx.create_timer(Duration::from_millis(10), run_later, ());
        return;
    }
    let undo = SYNCED.with_borrow_mut(|synced| {
        synced.armed = false;
        std::mem::take(&mut synced.undo)
    });
    for undo in &undo {
        run_undo(ctx, undo);
    }
}

/// Releases a grant that did not count, by its owner (`LOCK.RELEASE`, or `LOCK.MRELEASE` for a
/// set).
fn run_undo(ctx: &Context, undo: &Undo) {
    call_as_owner(
        ctx,
        undo,
        ["LOCK.RELEASE", "LOCK.MRELEASE"],
        &[],
        "released",
    );
}

/// Sets a stretched grant's lease to the one asked for, from now ([`Stretch`]): `LOCK.RENEW`,
/// or `LOCK.MRENEW` for a set, with `NOSYNC` (a shorter lease needs no acknowledgement: the
/// replicas' longer one outlasts it).
fn rebase(ctx: &Context, undo: &Undo) {
    if let Undo::Release {
        stretch: Some(stretch),
        ..
    } = undo
        && stretch.stretch_ms > 0
    {
        renew_as_owner(ctx, undo, stretch.ttl_ms, "set to its lease");
    }
}

/// Sets a grant's lease to `lease_ms` from now, as its owner: `LOCK.RENEW`, or `LOCK.MRENEW`
/// for a set, with `NOSYNC` (no reply waits on it); a failure is logged as the grant not `done`.
fn renew_as_owner(ctx: &Context, undo: &Undo, lease_ms: i64, done: &str) {
    let lease_ms = lease_ms.to_string();
    let extra: [&[u8]; 2] = [lease_ms.as_bytes(), b"NOSYNC"];
    call_as_owner(ctx, undo, ["LOCK.RENEW", "LOCK.MRENEW"], &extra, done);
}

/// Calls `commands[0]` (one key) or `commands[1]` (a set, after `numkeys`) on a grant's keys as
/// its owner, in its database, then `extra`, as a client would; a failure is logged as the
/// grant not being `done`.
fn call_as_owner(ctx: &Context, undo: &Undo, commands: [&str; 2], extra: &[&[u8]], done: &str) {
    let Undo::Release {
        db, keys, owner, ..
    } = undo
    else {
        return;
    };
    let caller_db = selected_db(ctx);
    if select_db(ctx, *db).is_ok() {
        let numkeys = keys.len().to_string();
        let mut args: Vec<&[u8]> = Vec::with_capacity(keys.len() + 2 + extra.len());
        let command = if let [key] = keys.as_slice() {
            args.push(key);
            commands[0]
        } else {
            args.push(numkeys.as_bytes());
            args.extend(keys.iter().map(Vec::as_slice));
            commands[1]
        };
        args.push(owner);
        args.extend_from_slice(extra);
        // Replicated (`!`): called outside a command (before the event loop sleeps, or as a
        // blocked client is answered), the renewal's or release's effects reach the replicas and
        // the AOF only so.
        let options = CallOptionsBuilder::new().replicate().build();
        let called: CallResult<'static> = ctx.call_ext(command, &options, args.as_slice());
        if let Err(error) = called {
            ctx.log_warning(&format!(
                "lock: a synced grant could not be {done}: {error}"
            ));
        }
    }
    let _ = select_db(ctx, caller_db);
}

/// The keys and owner of a command's grant, and how it was stretched, for its [`Undo`].
pub fn release_of(
    ctx: &Context,
    keys: &[RedisString],
    owner: &RedisString,
    stretch: Option<Stretch>,
) -> Undo {
    Undo::Release {
        db: selected_db(ctx),
        keys: keys.iter().map(|key| key.as_slice().to_vec()).collect(),
        owner: owner.as_slice().to_vec(),
        stretch,
    }
}
