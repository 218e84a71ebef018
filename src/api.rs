//! Calling the module API where `redis-module` 2.0.8 has no safe wrapper: a function the
//! server does not export becomes an error reply, never a panic, and a status becomes a
//! `Result`. The raw calls themselves stay in the one file that needs each (keys, blocked
//! clients, replication, the command filter, command docs).

use std::os::raw::c_int;

use redis_module::{RedisError, raw};

/// `Ok` for a module API call that returned `REDISMODULE_OK`, else the error reply `error`.
///
/// # Errors
/// `error` for any other status.
pub fn ok_or_error(status: c_int, error: &'static str) -> Result<(), RedisError> {
    if status == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err(RedisError::Str(error))
    }
}

/// A module API function, or an error reply when this server does not export it (instead of
/// the panic that `unwrap` on a missing function would be).
///
/// # Errors
/// `ERR` naming nothing more than that the server lacks the function.
pub fn api<F>(function: Option<F>) -> Result<F, RedisError> {
    function.ok_or(RedisError::Str(
        "ERR this server lacks a module API function the lock module needs",
    ))
}
