//! The `lockfence` data type: a fence, the largest fencing token that wrote through it
//! ([`leasehold_core::fenced`], `LOCK.FENCED`), kept as a key of its own so that Redis saves,
//! replicates, copies, dumps and restores it as it does any key.
//!
//! Modelled, as the lock type ([`crate::datatype`]), on Redis's `src/modules/hellotype.c`:
//! - RDB and `DUMP`: one unsigned integer, the largest token; 0, which no fence holds, is
//!   refused on load (Redis then answers `RESTORE` with `ERR Bad data format`);
//! - AOF rewrite: `LOCK.APPLY fence FENCE token`, the effect a master sends its replicas
//!   ([`replicate_raise`]);
//! - 8 bytes of memory, whatever the number of writes.

use std::os::raw::{c_int, c_void};
use std::ptr;

use leasehold_core::fenced::Fence;
use redis_module::key::RedisKeyWritable;
use redis_module::native_types::RedisType;
use redis_module::{Context, RedisError, RedisString, raw};

use crate::effects::APPLY;

/// The data type's name as `TYPE key` shows it (Redis wants 9 characters).
pub const TYPE_NAME: &str = "lockfence";

/// The type registered with Redis at module load.
pub static FENCE_TYPE: RedisType = RedisType::new(
    TYPE_NAME,
    0,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: None,
        aux_save: None,
        aux_save_triggers: 0,
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

/// The fence kept at the open key `key`; `None` when the key is empty.
///
/// # Errors
/// `WRONGTYPE` when the key holds anything but a fence.
pub fn fence_at(key: &RedisKeyWritable) -> Result<Option<Fence>, RedisError> {
    value(key).map(|fence| fence.copied())
}

/// The fence value at the open key `key`, to change in place; `None` when the key is empty.
fn value<'a>(key: &RedisKeyWritable) -> Result<Option<&'a mut Fence>, RedisError> {
    key.get_value::<Fence>(&FENCE_TYPE)
        .map_err(|_| RedisError::WrongType)
}

/// Raises the fence at the open key `key` to `token` (creating it when the key is empty), and
/// sends replicas and the AOF the same raise, `LOCK.APPLY fence FENCE token`
/// ([`leasehold_core::args::apply_fence`]).
///
/// # Errors
/// `WRONGTYPE`, or a key that cannot be written.
pub fn raise(
    ctx: &Context,
    key: &RedisKeyWritable,
    name: &RedisString,
    token: u64,
) -> Result<(), RedisError> {
    admit(key, token)?;
    let token = ctx.create_string(token.to_string());
    let fence_word = ctx.create_string("FENCE");
    ctx.replicate("LOCK.APPLY", &[name, &fence_word, &token][..]);
    Ok(())
}

/// Carries out `LOCK.APPLY fence FENCE token` from a master or the AOF: the fence raised.
///
/// # Errors
/// `WRONGTYPE`, or a key that cannot be written.
pub fn apply(ctx: &Context, name: &RedisString, token: u64) -> Result<(), RedisError> {
    admit(&ctx.open_key_writable(name), token)
}

/// The fence at `key` admits `token`; an empty key becomes a fence that admitted it.
fn admit(key: &RedisKeyWritable, token: u64) -> Result<(), RedisError> {
    match value(key)? {
        Some(fence) => fence.admit(token),
        None => {
            let fence = Fence::new(token).ok_or(RedisError::Str("ERR token out of range"))?;
            key.set_value(&FENCE_TYPE, fence)?;
        }
    }
    Ok(())
}

/// A token as the integer Redis's module API saves and emits: fences hold at most 2^63 - 1.
fn as_integer(fence: &Fence) -> i64 {
    i64::try_from(fence.largest()).unwrap_or(i64::MAX)
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, _encver: c_int) -> *mut c_void {
    match raw::load_unsigned(rdb).ok().and_then(Fence::new) {
        Some(fence) => Box::into_raw(Box::new(fence)).cast::<c_void>(),
        None => ptr::null_mut(),
    }
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    raw::save_unsigned(rdb, unsafe { &*value.cast::<Fence>() }.largest());
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    let Some(emit) = (unsafe { raw::RedisModule_EmitAOF }) else {
        return;
    };
    let fence = unsafe { &*value.cast::<Fence>() };
    unsafe {
        emit(
            aof,
            APPLY.as_ptr(),
            c"scl".as_ptr(),
            key,
            c"FENCE".as_ptr(),
            as_integer(fence),
        );
    }
}

unsafe extern "C" fn mem_usage(_value: *const c_void) -> usize {
    size_of::<Fence>()
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    let (Some(add_integer), Some(end)) = (unsafe {
        (
            raw::RedisModule_DigestAddLongLong,
            raw::RedisModule_DigestEndSequence,
        )
    }) else {
        return;
    };
    let fence = unsafe { &*value.cast::<Fence>() };
    unsafe {
        add_integer(md, as_integer(fence));
        end(md);
    }
}

unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    Box::into_raw(Box::new(unsafe { *value.cast::<Fence>() })).cast::<c_void>()
}

unsafe extern "C" fn free(value: *mut c_void) {
    drop(unsafe { Box::from_raw(value.cast::<Fence>()) });
}
