//! The `leasehold` data type: how Redis saves, loads, rewrites, copies, measures, digests and
//! frees a lock, and how the fencing counter travels in the RDB.
//!
//! Modelled on Redis's `src/modules/hellotype.c`: `aof_rewrite` emits one command per holding
//! (Redis appends the `PEXPIREAT` that restores the key's lease), `mem_usage` counts heap bytes
//! and `digest` feeds every field, so `DEBUG DIGEST-VALUE` agrees between a master and its
//! replicas. The saved form and its checks are the core's ([`saved`]): `rdb_load` reads bytes
//! anyone allowed to `RESTORE` can write, so it refuses — logging why, never stopping the
//! server — whatever the module could never have written, and a token too far ahead of the
//! clock.

use std::os::raw::{c_char, c_int, c_void};
use std::ptr;

use redis_module::native_types::RedisType;
use redis_module::{Context, ContextFlags, raw};

use leasehold_core::fence;
use leasehold_core::lock::Lock;
use leasehold_core::saved::{self, ENCODING_VERSION, Invalid, Sink, Source};

use crate::clock;
use crate::config;
use crate::effects::APPLY;
use crate::state;
use crate::stats;

/// The data type's name as `TYPE key` and `OBJECT ENCODING` show it (Redis wants 9 characters).
pub const TYPE_NAME: &str = "leasehold";

/// The module options the data type needs: `REDISMODULE_OPTIONS_HANDLE_IO_ERRORS`, so that a
/// short read while loading (a cut or crafted `RESTORE` payload, a damaged RDB file) comes back
/// to [`rdb_load`] as an error instead of stopping the server inside `RedisModule_Load*`
/// (Redis's module API, `RedisModule_SetModuleOptions`).
pub const MODULE_OPTIONS: c_int = raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS as c_int;

/// The type registered with Redis at module load; its encoding is [`saved`]'s.
pub static LOCK_TYPE: RedisType = RedisType::new(
    TYPE_NAME,
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: Some(free_effort),
        unlink: None,
        copy: Some(copy),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink),
        copy2: None,
        aux_save2: Some(aux_save_once_used),
    },
);

/// The server's reads and writes of module data, as [`saved`] uses them. A failed read is
/// `None`: with [`MODULE_OPTIONS`] Redis marks the I/O as failed and returns.
struct Rdb(*mut raw::RedisModuleIO);

impl Source for Rdb {
    type Bytes = redis_module::RedisBuffer;

    fn unsigned(&mut self) -> Option<u64> {
        raw::load_unsigned(self.0).ok()
    }

    fn signed(&mut self) -> Option<i64> {
        raw::load_signed(self.0).ok()
    }

    fn bytes(&mut self) -> Option<Self::Bytes> {
        raw::load_string_buffer(self.0).ok()
    }
}

impl Sink for Rdb {
    fn unsigned(&mut self, value: u64) {
        raw::save_unsigned(self.0, value);
    }

    fn signed(&mut self, value: i64) {
        raw::save_signed(self.0, value);
    }

    fn bytes(&mut self, value: &[u8]) {
        raw::save_slice(self.0, value);
    }
}

/// Why a lock was not loaded.
enum Refused {
    /// The bytes do not hold a lock the module could have written.
    Invalid(Invalid),
    /// A `RESTORE`d lock's token is further ahead of this server's clock than
    /// `lock.max-clock-skew-ms` allows.
    AheadOfClock { token: u64, limit: u64 },
}

/// Reads one lock and raises the fencing counter to its newest token, so a lock moved here by
/// `RESTORE`/`MIGRATE` keeps a token below every later one. A lock that comes from outside
/// this server's own data — a `RESTORE` or `MIGRATE` on a master, not the RDB it loads at
/// start-up, a replica's full sync, `DEBUG RELOAD` or its master's stream — may not carry a
/// token above what a server whose clock is `lock.max-clock-skew-ms` ahead could have issued
/// (the bound of `LOCK.RAISE`): no payload can push the counter further, let alone to 2^53.
fn load_lock(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Result<Lock, Refused> {
    let lock = saved::load(encver, &mut Rdb(rdb)).map_err(Refused::Invalid)?;
    let newest = lock.newest_token(i64::MIN).unwrap_or(0);
    if from_outside(rdb) {
        let limit = fence::raise_limit(clock::now_ms(), config::max_clock_skew_ms());
        if newest > limit {
            return Err(Refused::AheadOfClock {
                token: newest,
                limit,
            });
        }
    }
    state::counter().observe(newest);
    Ok(lock)
}

/// True when a master reads a lock outside loading: `RESTORE` (which `MIGRATE` sends).
fn from_outside(rdb: *mut raw::RedisModuleIO) -> bool {
    let flags = io_context(rdb).map_or(ContextFlags::empty(), |ctx| ctx.get_flags());
    !flags.intersects(ContextFlags::LOADING | ContextFlags::ASYNC_LOADING | ContextFlags::SLAVE)
}

/// The context Redis keeps for this load or save, for its flags and its log.
fn io_context(rdb: *mut raw::RedisModuleIO) -> Option<Context> {
    let get = unsafe { raw::RedisModule_GetContextFromIO }?;
    let ctx = unsafe { get(rdb) };
    (!ctx.is_null()).then(|| Context::new(ctx))
}

/// Logs why a lock was not loaded; Redis then answers `RESTORE` with `ERR Bad data format`,
/// or stops loading the RDB file with its own message.
fn log_refusal(rdb: *mut raw::RedisModuleIO, refused: &Refused) {
    let Some(ctx) = io_context(rdb) else {
        return;
    };
    ctx.log_warning(&match refused {
        Refused::Invalid(invalid) => format!("a lock could not be loaded: {invalid}"),
        Refused::AheadOfClock { token, limit } => format!(
            "RESTORE of a lock refused: its fencing token {token} is above {limit}, the most a \
             server whose clock is lock.max-clock-skew-ms ({} ms) ahead of this one could have \
             issued; raise lock.max-clock-skew-ms if the source server's clock is that far ahead",
            config::max_clock_skew_ms()
        ),
    });
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    match load_lock(rdb, encver) {
        Ok(lock) => Box::into_raw(Box::new(lock)).cast::<c_void>(),
        Err(refused) => {
            log_refusal(rdb, &refused);
            ptr::null_mut()
        }
    }
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    saved::save(unsafe { &*value.cast::<Lock>() }, &mut Rdb(rdb));
}

/// Saves the fencing counter as auxiliary data (Redis 7.0, which has no `aux_save2`).
unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    raw::save_unsigned(rdb, state::counter().last());
}

/// Saves the fencing counter once it issued or loaded a token, and nothing before: Redis 7.2 and
/// later and Valkey then leave the module's field out of the RDB (`aux_save2`, preferred to
/// `aux_save` where known), so that a replica without the module still loads its master's full
/// sync after a `MODULE LOAD` on the master until a lock is taken — Redis stops a server that
/// finds module data it cannot load.
unsafe extern "C" fn aux_save_once_used(rdb: *mut raw::RedisModuleIO, when: c_int) {
    if state::counter().last() > 0 {
        unsafe { aux_save(rdb, when) };
    }
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    match saved::load_counter(encver, &mut Rdb(rdb)) {
        Ok(last) => {
            state::counter().observe(last);
            raw::REDISMODULE_OK as c_int
        }
        Err(invalid) => {
            log_refusal(rdb, &Refused::Invalid(invalid));
            raw::REDISMODULE_ERR as c_int
        }
    }
}

/// Emits one `LOCK.APPLY` per holding: `LOCK.APPLY key owner token holds` for an exclusive
/// lock (Redis follows it with `PEXPIREAT key deadline`), with `VALUE v` for an election's
/// leader, and `LOCK.APPLY key owner token holds deadline SHARED limit` for each shared holder.
unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    let Some(emit) = (unsafe { raw::RedisModule_EmitAOF }) else {
        return;
    };
    let owner = |owner: &[u8]| owner.as_ptr().cast::<c_char>();
    match unsafe { &*value.cast::<Lock>() } {
        Lock::Exclusive(holding) if !holding.owner.value().is_empty() => unsafe {
            let value = holding.owner.value();
            emit(
                aof,
                APPLY.as_ptr(),
                c"sbllcb".as_ptr(),
                key,
                owner(&holding.owner),
                holding.owner.len(),
                fence::as_integer(holding.token),
                i64::from(holding.holds),
                c"VALUE".as_ptr(),
                value.as_ptr().cast::<c_char>(),
                value.len(),
            );
        },
        Lock::Exclusive(holding) => unsafe {
            emit(
                aof,
                APPLY.as_ptr(),
                c"sbll".as_ptr(),
                key,
                owner(&holding.owner),
                holding.owner.len(),
                fence::as_integer(holding.token),
                i64::from(holding.holds),
            );
        },
        Lock::Shared(shared) => {
            let limit = shared.limit.map_or(-1, i64::from);
            for holder in shared.holders.iter() {
                unsafe {
                    emit(
                        aof,
                        APPLY.as_ptr(),
                        c"sblllcl".as_ptr(),
                        key,
                        owner(&holder.owner),
                        holder.owner.len(),
                        fence::as_integer(holder.token),
                        i64::from(holder.holds),
                        holder.deadline_ms,
                        c"SHARED".as_ptr(),
                        limit,
                    );
                }
            }
        }
    }
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    let lock = unsafe { &*value.cast::<Lock>() };
    size_of::<Lock>() + lock.heap_size()
}

/// Feeds every field, one sequence per holding; Redis XORs the sequences together, so the
/// digest does not depend on the order holders are kept in.
unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    let (Some(add_buffer), Some(add_integer), Some(end)) = (unsafe {
        (
            raw::RedisModule_DigestAddStringBuffer,
            raw::RedisModule_DigestAddLongLong,
            raw::RedisModule_DigestEndSequence,
        )
    }) else {
        return;
    };
    let holding = |owner: &[u8], token: u64, holds: u32, deadline: Option<i64>| unsafe {
        add_buffer(md, owner.as_ptr().cast_mut().cast(), owner.len());
        add_integer(md, fence::as_integer(token));
        add_integer(md, i64::from(holds));
        if let Some(deadline) = deadline {
            add_integer(md, deadline);
        }
        end(md);
    };
    match unsafe { &*value.cast::<Lock>() } {
        Lock::Exclusive(lock) => {
            let value = lock.owner.value();
            if !value.is_empty() {
                unsafe { add_buffer(md, value.as_ptr().cast_mut().cast(), value.len()) };
            }
            holding(&lock.owner, lock.token, lock.holds, None);
        }
        Lock::Shared(shared) => {
            unsafe {
                add_integer(md, shared.limit.map_or(-1, i64::from));
                end(md);
            }
            for holder in shared.holders.iter() {
                holding(
                    &holder.owner,
                    holder.token,
                    holder.holds,
                    Some(holder.deadline_ms),
                );
            }
        }
    }
}

unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    let mut lock = unsafe { &*value.cast::<Lock>() }.clone();
    // No session logged the copy's key ([`crate::session`]).
    lock.untie_all();
    Box::into_raw(Box::new(lock)).cast::<c_void>()
}

/// How much work freeing takes: a shared lock with many holders is freed in the background
/// after `UNLINK` or `FLUSHALL ASYNC` (Redis's `lazyfree-lazy-*`), like a big hash.
unsafe extern "C" fn free_effort(_key: *mut raw::RedisModuleString, value: *const c_void) -> usize {
    match unsafe { &*value.cast::<Lock>() } {
        Lock::Exclusive(_) => 1,
        Lock::Shared(shared) => shared.holders.len(),
    }
}

/// Redis is removing a lock key from the keyspace; the event that says why follows. Its
/// holdings are untied and their sessions' log entries freed ([`crate::session`]; skipped while
/// a command up the stack holds the sessions, the sweep frees them then): a key that `RENAME`
/// or `MOVE` takes elsewhere keeps the lock under a name no session logged, so only its lease
/// ends it.
unsafe extern "C" fn unlink(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    // Redis hands back the value it stores for the module, which is ours to change.
    let lock = unsafe { &mut *value.cast_mut().cast::<Lock>() };
    if let Some((db, key)) = unsafe { unlinked_key(ctx) } {
        if let Some(mut sessions) = state::try_sessions() {
            sessions.free_all(db, key, lock.ties().map(|(_, tie)| tie));
        }
        stats::lock_unlinked(db, key);
    }
    lock.untie_all();
}

/// The database and name of the key an `unlink` callback is about.
unsafe fn unlinked_key<'a>(ctx: *mut raw::RedisModuleKeyOptCtx) -> Option<(i32, &'a [u8])> {
    let (name_of, db_of, get) = unsafe {
        (
            raw::RedisModule_GetKeyNameFromOptCtx?,
            raw::RedisModule_GetDbIdFromOptCtx?,
            raw::RedisModule_StringPtrLen?,
        )
    };
    let name = unsafe { name_of(ctx) };
    let mut len = 0;
    let bytes = unsafe { get(name, &mut len) };
    if bytes.is_null() {
        return None;
    }
    let key = unsafe { std::slice::from_raw_parts(bytes.cast::<u8>(), len) };
    Some((unsafe { db_of(ctx) }, key))
}

unsafe extern "C" fn free(value: *mut c_void) {
    drop(unsafe { Box::from_raw(value.cast::<Lock>()) });
}
