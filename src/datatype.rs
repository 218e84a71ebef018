//! The `leasehold` data type: how Redis saves, loads, rewrites, copies, measures, digests and
//! frees a lock, and how the fencing counter travels in the RDB.
//!
//! Modelled on Redis's `src/modules/hellotype.c`: `rdb_load` refuses encodings it does not
//! know, `aof_rewrite` emits one command per holding (Redis appends the `PEXPIREAT` that
//! restores the key's lease), `mem_usage` counts heap bytes and `digest` feeds every field, so
//! `DEBUG DIGEST-VALUE` agrees between a master and its replicas.

use std::os::raw::{c_char, c_int, c_void};
use std::ptr;

use redis_module::native_types::RedisType;
use redis_module::raw;

use leasehold_core::fence::{self, MAX_TOKEN};
use leasehold_core::holders::Holder;
use leasehold_core::lock::{Holding, Lock, Mode};

use crate::effects::APPLY;
use crate::info;
use crate::state;

/// The data type's name as `TYPE key` and `OBJECT ENCODING` show it (Redis wants 9 characters).
pub const TYPE_NAME: &str = "leasehold";

/// The RDB encoding of a lock. Version 2: a kind (0 exclusive, 1 shared); an exclusive lock's
/// owner (string), token and holds (unsigned); a shared lock's limit (unsigned, 0: none),
/// holder count, and per holder its owner, token, holds and deadline (signed, unix ms). The
/// auxiliary field: the fencing counter (unsigned). Version 1 (leasehold 0.1.0) held one
/// exclusive lock's owner, token and holds; it still loads. Another version refuses to load
/// rather than guess.
pub const ENCODING_VERSION: i32 = 2;

/// The encoding of leasehold 0.1.0: exclusive locks only.
const EXCLUSIVE_ONLY_VERSION: i32 = 1;

const EXCLUSIVE: u64 = 0;
const SHARED: u64 = 1;

/// The type registered with Redis at module load.
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
        aux_save2: None,
    },
);

/// Reads one lock; a lock that is not valid (unknown encoding, empty or oversized owner, token
/// outside 1..2^53, no holds, an owner twice) refuses to load. A loaded lock raises the fencing
/// counter, so a lock moved here by `RESTORE`/`MIGRATE` keeps a token below every later one.
fn load_lock(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Option<Lock> {
    let kind = match encver {
        EXCLUSIVE_ONLY_VERSION => EXCLUSIVE,
        ENCODING_VERSION => raw::load_unsigned(rdb).ok()?,
        _ => return None,
    };
    let lock = match kind {
        EXCLUSIVE => Lock::Exclusive(load_holding(rdb)?),
        SHARED => load_shared(rdb)?,
        _ => return None,
    };
    let newest = lock.newest_token(i64::MIN)?;
    state::counter().observe(newest);
    Some(lock)
}

fn load_holding(rdb: *mut raw::RedisModuleIO) -> Option<Holding> {
    let owner = raw::load_string_buffer(rdb).ok()?;
    let token = raw::load_unsigned(rdb).ok()?;
    let holds = raw::load_unsigned(rdb).ok()?;
    Holding::from_parts(owner.as_ref(), token, holds)
}

fn load_shared(rdb: *mut raw::RedisModuleIO) -> Option<Lock> {
    let limit = match raw::load_unsigned(rdb).ok()? {
        0 => None,
        n => Some(u32::try_from(n).ok()?),
    };
    let count = raw::load_unsigned(rdb).ok()?;
    let mut lock: Option<Lock> = None;
    for _ in 0..count {
        let holding = load_holding(rdb)?;
        let deadline = raw::load_signed(rdb).ok()?;
        match &mut lock {
            None => {
                lock = Some(Lock::new(
                    &holding.owner,
                    holding.token,
                    holding.holds,
                    Mode::Shared(limit),
                    deadline,
                ));
            }
            Some(lock) if lock.token_of(&holding.owner, i64::MIN).is_some() => return None,
            Some(lock) => lock.add_holder(Holder::new(
                &holding.owner,
                holding.token,
                holding.holds,
                deadline,
            )),
        }
    }
    lock
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    load_lock(rdb, encver).map_or(ptr::null_mut(), |lock| {
        Box::into_raw(Box::new(lock)).cast::<c_void>()
    })
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    let save_holding = |owner: &[u8], token: u64, holds: u32| {
        raw::save_slice(rdb, owner);
        raw::save_unsigned(rdb, token);
        raw::save_unsigned(rdb, u64::from(holds));
    };
    match unsafe { &*value.cast::<Lock>() } {
        Lock::Exclusive(holding) => {
            raw::save_unsigned(rdb, EXCLUSIVE);
            save_holding(&holding.owner, holding.token, holding.holds);
        }
        Lock::Shared(shared) => {
            raw::save_unsigned(rdb, SHARED);
            raw::save_unsigned(rdb, shared.limit.map_or(0, u64::from));
            raw::save_unsigned(rdb, shared.holders.len() as u64);
            for holder in shared.holders.iter() {
                save_holding(&holder.owner, holder.token, holder.holds);
                raw::save_signed(rdb, holder.deadline_ms);
            }
        }
    }
}

unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    raw::save_unsigned(rdb, state::counter().last());
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    let known = matches!(encver, EXCLUSIVE_ONLY_VERSION | ENCODING_VERSION);
    match raw::load_unsigned(rdb) {
        Ok(last) if known && last <= MAX_TOKEN => {
            state::counter().observe(last);
            raw::REDISMODULE_OK as c_int
        }
        _ => raw::REDISMODULE_ERR as c_int,
    }
}

/// Emits one `LOCK.APPLY` per holding: `LOCK.APPLY key owner token holds` for an exclusive
/// lock (Redis follows it with `PEXPIREAT key deadline`), `LOCK.APPLY key owner token holds
/// deadline SHARED limit` for each shared holder.
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
        Lock::Exclusive(lock) => holding(&lock.owner, lock.token, lock.holds, None),
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
    let lock = unsafe { &*value.cast::<Lock>() };
    Box::into_raw(Box::new(lock.clone())).cast::<c_void>()
}

/// How much work freeing takes: a shared lock with many holders is freed in the background
/// after `UNLINK` or `FLUSHALL ASYNC` (Redis's `lazyfree-lazy-*`), like a big hash.
unsafe extern "C" fn free_effort(_key: *mut raw::RedisModuleString, value: *const c_void) -> usize {
    match unsafe { &*value.cast::<Lock>() } {
        Lock::Exclusive(_) => 1,
        Lock::Shared(shared) => shared.holders.len(),
    }
}

/// Redis is removing a lock key from the keyspace; the event that says why follows.
unsafe extern "C" fn unlink(ctx: *mut raw::RedisModuleKeyOptCtx, _value: *const c_void) {
    let (Some(name_of), Some(db_of)) = (unsafe {
        (
            raw::RedisModule_GetKeyNameFromOptCtx,
            raw::RedisModule_GetDbIdFromOptCtx,
        )
    }) else {
        return;
    };
    let name = unsafe { name_of(ctx) };
    let mut len = 0;
    let Some(get) = (unsafe { raw::RedisModule_StringPtrLen }) else {
        return;
    };
    let bytes = unsafe { get(name, &mut len) };
    if bytes.is_null() {
        return;
    }
    let key = unsafe { std::slice::from_raw_parts(bytes.cast::<u8>(), len) };
    info::lock_unlinked(unsafe { db_of(ctx) }, key);
}

unsafe extern "C" fn free(value: *mut c_void) {
    drop(unsafe { Box::from_raw(value.cast::<Lock>()) });
}
