//! The lease horizon on the server (the rule: [`leasehold_core::horizon`]): a master back from a
//! crash without the grants it counted — Redis's default persistence (snapshots at the `save`
//! points, no AOF), restarted at once by a supervisor — grants no new holding until every lease
//! it may have granted has ended.
//!
//! - Every lock write whose lease ends past the recorded horizon ([`note`], from
//!   [`crate::execute`]) writes the record, before its reply goes out, to `<dbfilename without
//!   its extension>.leases` in the server's `dir` — about once a second under load.
//! - A save in the foreground (`SAVE`, the save of a shutdown that keeps the data, `FLUSHALL`'s,
//!   `DEBUG RELOAD`'s) marks it clean once it succeeded ([`on_persistence`]): the file has
//!   every grant made so far. (A `BGSAVE` runs in a fork, whose file lacks what the server
//!   grants meanwhile: it marks nothing.)
//! - At start ([`start`]) a record that reaches past the clock holds back new holdings until
//!   its horizon (the fencing counter's delayed start, as `lock.restart-delay-ms`); once the
//!   data is loaded ([`on_loading`]), an AOF, which a crashed process wrote before each reply,
//!   lifts it. The log and `INFO lock` (`lock_restart_wait_until_ms`) say so, and `LOCK.ACQUIRE`
//!   answers `TRYAGAIN` with the time left.

use std::fs;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use leasehold_core::fence::Delay;
use leasehold_core::horizon::{Horizon, Loaded};
use redis_module::server_events::LoadingSubevent;
use redis_module::{Context, RedisError, raw};
use redis_module_macros::loading_event_handler;

use crate::api::subscribe;
use crate::clock;
use crate::server_config;
use crate::state;
use crate::state_file;

/// What the server knows of its record.
#[derive(Debug, Default)]
struct Record {
    /// The record as last written (or read at start).
    horizon: Horizon,
    /// The start's decision is pending until the data is loaded: the record read then.
    at_start: Option<Horizon>,
    /// The load under way at start reads an AOF.
    loading_aof: bool,
    /// No new holding before this (unix ms): `lock.restart-delay-ms` from the start.
    configured_until_ms: u64,
    /// No new holding before this (unix ms) for the record's sake; 0: none.
    waiting_until_ms: u64,
    /// The log already says the record cannot be written.
    warned: bool,
}

static RECORD: LazyLock<Mutex<Record>> = LazyLock::new(Mutex::default);

/// The record's [`Horizon::written_after_ms`], for [`note`]'s check without the lock.
static UNTIL_MS: AtomicU64 = AtomicU64::new(0);

/// A save in the foreground is under way in this process.
static SAVING: AtomicBool = AtomicBool::new(false);

/// This server's process id (a fork child runs the same callbacks).
static PID: LazyLock<u32> = LazyLock::new(std::process::id);

fn record() -> MutexGuard<'static, Record> {
    RECORD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// At start, before the data loads: reads the record and, when it reaches past the clock,
/// holds new holdings back until the data is known to lack nothing; `configured_until_ms` is
/// `lock.restart-delay-ms`'s end.
///
/// # Errors
/// The server refuses the subscription to its saves.
pub fn start(ctx: &Context, configured_until_ms: u64) -> Result<(), RedisError> {
    let read = fs::read(state_file::path_of(ctx, "leases"))
        .ok()
        .and_then(|bytes| Horizon::decode(&bytes))
        .unwrap_or_default();
    {
        let mut record = record();
        record.horizon = read;
        record.configured_until_ms = configured_until_ms;
        record.at_start = Some(read);
        UNTIL_MS.store(read.written_after_ms(), Ordering::Relaxed);
    }
    // Until the data is loaded, as if nothing were; final at once when nothing will be (no
    // AOF, no RDB file; a `MODULE LOAD` into a running server loads nothing more either).
    decide(ctx, Loaded::Nothing, !data_on_disk(ctx));
    LazyLock::force(&PID);
    subscribe(
        ctx,
        raw::REDISMODULE_EVENT_PERSISTENCE,
        Some(on_persistence),
        "ERR could not watch the server's saves",
    )
}

/// Holds new holdings back as the record read at start and the data `loaded` say; `last`: the
/// decision is final (logged).
fn decide(ctx: &Context, loaded: Loaded, last: bool) {
    let now = clock::now_ms();
    let mut record = record();
    let Some(read) = record.at_start else {
        return;
    };
    let wait = read.wait_until(loaded, now).unwrap_or(0);
    record.waiting_until_ms = wait;
    hold_back(&record);
    if last {
        record.at_start = None;
    }
    drop(record);
    let what = match loaded {
        Loaded::Aof => "an AOF",
        Loaded::Rdb => "an RDB file",
        Loaded::Nothing => "nothing",
    };
    let left = wait.saturating_sub(now);
    if !last && wait > 0 {
        ctx.log_notice(&format!(
            "lock: the last run granted leases that end up to {left} ms from now: unless the \
             data loaded holds them (an AOF, or a save since), no new holding begins \
             before then"
        ));
    } else if wait > 0 {
        ctx.log_warning(&format!(
            "lock: this server may have granted leases that end up to {left} ms from now, which \
             its data lacks (it loaded {what}, not saved since: a crash, or a shutdown that did not \
             save): no new holding begins before then (INFO lock: lock_restart_wait_until_ms)"
        ));
    } else if last && read.until_ms > now && !read.clean {
        ctx.log_notice(&format!(
            "lock: the data loaded ({what}) holds every grant of the last run: no wait"
        ));
    }
}

/// Whether a start will load data: the AOF is on, or the RDB file exists.
fn data_on_disk(ctx: &Context) -> bool {
    server_config::get(ctx, "appendonly").as_deref() == Some("yes")
        || server_config::get(ctx, "dbfilename")
            .is_some_and(|rdb| std::path::Path::new(&rdb).exists())
}

/// Holds new holdings back until the later of the record's wait and `lock.restart-delay-ms`'s
/// end, saying which ([`Delay`]: the refusal's text names it).
fn hold_back(record: &Record) {
    let (until, why) = if record.waiting_until_ms > record.configured_until_ms {
        (record.waiting_until_ms, Delay::LostLeases)
    } else {
        (record.configured_until_ms, Delay::Configured)
    };
    state::counter().delay_until(until, why);
}

/// The data loads: at start, from disk, the decision waits for its end; a full sync from a
/// master or a later reload changes nothing.
#[loading_event_handler]
fn on_loading(ctx: &Context, event: LoadingSubevent) {
    if record().at_start.is_none() {
        return;
    }
    match event {
        LoadingSubevent::AofStarted => record().loading_aof = true,
        LoadingSubevent::RdbStarted => record().loading_aof = false,
        LoadingSubevent::Ended | LoadingSubevent::Failed => {
            let loaded = if record().loading_aof {
                Loaded::Aof
            } else {
                Loaded::Rdb
            };
            decide(ctx, loaded, true);
        }
        LoadingSubevent::ReplStarted => {}
    }
}

/// A lock write set a lease that ends at `lease_end_ms` (unix ms): past the recorded horizon,
/// the record is written now, before the write's reply goes out.
pub fn note(ctx: &Context, lease_end_ms: u64) {
    if lease_end_ms <= UNTIL_MS.load(Ordering::Relaxed) {
        return;
    }
    let mut record = record();
    if let Some(next) = record.horizon.note(lease_end_ms) {
        write(ctx, &mut record, next);
    }
}

/// Writes `next` and keeps it (logged once when it cannot be written).
fn write(ctx: &Context, record: &mut Record, next: Horizon) {
    let path = state_file::path_of(ctx, "leases");
    match fs::write(&path, next.encode()) {
        Ok(()) => record.warned = false,
        Err(error) if !record.warned => {
            record.warned = true;
            ctx.log_warning(&format!(
                "lock: cannot write {}: {error} (a crash then restarted at once may grant again \
                 locks whose leases still run)",
                path.display()
            ));
        }
        Err(_) => {}
    }
    record.horizon = next;
    UNTIL_MS.store(next.written_after_ms(), Ordering::Relaxed);
}

/// `RedisModuleEvent_Persistence`: a save in the foreground of this process that succeeded
/// marks the record clean (no grant runs while it saves).
unsafe extern "C" fn on_persistence(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if std::process::id() != *PID {
        return;
    }
    match subevent {
        raw::REDISMODULE_SUBEVENT_PERSISTENCE_SYNC_RDB_START => {
            SAVING.store(true, Ordering::Relaxed)
        }
        raw::REDISMODULE_SUBEVENT_PERSISTENCE_ENDED if SAVING.swap(false, Ordering::Relaxed) => {
            let ctx = Context::new(ctx);
            let mut record = record();
            if !record.horizon.clean {
                let clean = Horizon {
                    clean: true,
                    ..record.horizon
                };
                write(&ctx, &mut record, clean);
            }
        }
        _ => SAVING.store(false, Ordering::Relaxed),
    }
}

/// This replica was promoted while its master, back from a crash without the grants it made,
/// waited until `not_before_ms` (unix ms): its data came from that master, so it waits as long,
/// and records it, so that a crash of its own does not end the wait.
pub fn inherit(ctx: &Context, not_before_ms: u64) {
    if not_before_ms <= clock::now_ms() {
        return;
    }
    let mut record = record();
    record.waiting_until_ms = record.waiting_until_ms.max(not_before_ms);
    hold_back(&record);
    let next = record.horizon.reaching(not_before_ms);
    if next != record.horizon {
        write(ctx, &mut record, next);
    }
    drop(record);
    ctx.log_warning(&format!(
        "lock: promoted while its master, back from a crash without the grants it made, began no \
         holding before {not_before_ms} (unix ms): this server, whose data came from it, waits \
         as long (INFO lock: lock_restart_wait_until_ms)"
    ));
}

/// Until when (unix ms) new holdings wait for the record's sake; `None` when they do not.
pub fn waiting_until() -> Option<u64> {
    let until = record().waiting_until_ms;
    (until > clock::now_ms()).then_some(until)
}
