//! The `leasehold` data type: how Redis saves, loads, rewrites, copies, measures and digests a
//! lock, and how the fencing counter travels in the RDB.
//!
//! Modelled on Redis's `src/modules/hellotype.c`: `rdb_load` refuses encodings it does not
//! know, `aof_rewrite` emits one command per key (Redis appends the `PEXPIREAT` that restores
//! the lease), `mem_usage` counts heap bytes and `digest` feeds every field, so
//! `DEBUG DIGEST-VALUE` agrees between a master and its replicas.

use std::os::raw::{c_char, c_int, c_void};
use std::ptr;

use redis_module::native_types::RedisType;
use redis_module::raw;

use crate::effects::APPLY;
use crate::fence::{self, MAX_TOKEN};
use crate::lock::Lock;

/// The data type's name as `TYPE key` and `OBJECT ENCODING` show it (Redis wants 9 characters).
pub const TYPE_NAME: &str = "leasehold";

/// The RDB encoding of a lock: owner (string), token (unsigned), holds (unsigned); and of the
/// auxiliary field: the fencing counter (unsigned). An RDB with another version refuses to
/// load rather than guess.
pub const ENCODING_VERSION: i32 = 1;

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
        free_effort: None,
        unlink: None,
        copy: Some(copy),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
        aux_save2: None,
    },
);

/// Reads one lock; a lock that is not valid (unknown encoding, empty or oversized owner, token
/// outside 1..2^53, no holds) refuses to load. A loaded lock raises the fencing counter, so a
/// lock moved here by `RESTORE`/`MIGRATE` keeps a token below every later one.
fn load_lock(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Option<Lock> {
    if encver != ENCODING_VERSION {
        return None;
    }
    let owner = raw::load_string_buffer(rdb).ok()?;
    let token = raw::load_unsigned(rdb).ok()?;
    let holds = raw::load_unsigned(rdb).ok()?;
    let lock = Lock::from_parts(owner.as_ref(), token, holds)?;
    fence::counter().observe(lock.token);
    Some(lock)
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    load_lock(rdb, encver).map_or(ptr::null_mut(), |lock| {
        Box::into_raw(Box::new(lock)).cast::<c_void>()
    })
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    let lock = unsafe { &*value.cast::<Lock>() };
    raw::save_slice(rdb, &lock.owner);
    raw::save_unsigned(rdb, lock.token);
    raw::save_unsigned(rdb, u64::from(lock.holds));
}

unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    raw::save_unsigned(rdb, fence::counter().last());
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    match raw::load_unsigned(rdb) {
        Ok(last) if encver == ENCODING_VERSION && last <= MAX_TOKEN => {
            fence::counter().observe(last);
            raw::REDISMODULE_OK as c_int
        }
        _ => raw::REDISMODULE_ERR as c_int,
    }
}

/// Emits `LOCK.APPLY key owner token holds`; Redis follows it with `PEXPIREAT key deadline`.
unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    let lock = unsafe { &*value.cast::<Lock>() };
    let Some(emit) = (unsafe { raw::RedisModule_EmitAOF }) else {
        return;
    };
    unsafe {
        emit(
            aof,
            APPLY.as_ptr(),
            c"sbll".as_ptr(),
            key,
            lock.owner.as_ptr().cast::<c_char>(),
            lock.owner.len(),
            fence::as_integer(lock.token),
            i64::from(lock.holds),
        );
    }
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    let lock = unsafe { &*value.cast::<Lock>() };
    size_of::<Lock>() + lock.heap_size()
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    let lock = unsafe { &*value.cast::<Lock>() };
    let (Some(add_buffer), Some(add_integer), Some(end)) = (unsafe {
        (
            raw::RedisModule_DigestAddStringBuffer,
            raw::RedisModule_DigestAddLongLong,
            raw::RedisModule_DigestEndSequence,
        )
    }) else {
        return;
    };
    unsafe {
        add_buffer(md, lock.owner.as_ptr().cast_mut().cast(), lock.owner.len());
        add_integer(md, fence::as_integer(lock.token));
        add_integer(md, i64::from(lock.holds));
        end(md);
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

unsafe extern "C" fn free(value: *mut c_void) {
    drop(unsafe { Box::from_raw(value.cast::<Lock>()) });
}
