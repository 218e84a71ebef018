//! Calling the module API where `redis-module` 2.0.8 has no safe wrapper: a function the
//! server does not export becomes an error reply, never a panic, and a status becomes a
//! `Result`. The raw calls themselves stay in the one file that needs each (keys, blocked
//! clients, replication, the command filter, command docs).

use std::ffi::CStr;
use std::os::raw::c_int;

use redis_module::redisvalue::RedisValueKey;
use redis_module::{Context, RedisError, RedisValue, raw};

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

/// Subscribes `callback` to the server event `id` (`RedisModule_SubscribeToServerEvent`, data
/// version 1), for the events `redis-module` 2.0.8 does not wrap.
///
/// # Errors
/// The server lacks the call, or refuses the subscription: `error`.
pub fn subscribe(
    ctx: &Context,
    id: u64,
    callback: raw::RedisModuleEventCallback,
    error: &'static str,
) -> Result<(), RedisError> {
    let subscribe = api(unsafe { raw::RedisModule_SubscribeToServerEvent })?;
    let event = raw::RedisModuleEvent { id, dataver: 1 };
    let status = unsafe { subscribe(ctx.get_raw(), event, callback) };
    ok_or_error(status, error)
}

/// What the server says of the client `id` (`RedisModule_GetClientInfoById`): its address and
/// flags; `None` when there is no such client or the server lacks the call.
pub fn client_info(id: u64) -> Option<raw::RedisModuleClientInfo> {
    let info_of = unsafe { raw::RedisModule_GetClientInfoById }?;
    let mut info = raw::RedisModuleClientInfo {
        version: 1,
        flags: 0,
        id: 0,
        addr: [0; 46],
        port: 0,
        db: 0,
    };
    let status = unsafe { info_of(std::ptr::from_mut(&mut info).cast(), id) };
    (status == raw::REDISMODULE_OK as c_int).then_some(info)
}

/// Where the keys of the command `command` (its name first) are, as positions in `command`
/// with their key-spec flags (`REDISMODULE_CMD_KEY_*`), as Redis finds them for the command
/// itself (`RedisModule_GetCommandKeysWithFlags`, Redis 7.0: its key specs or its own lookup);
/// `None` for a command the server does not know, arguments of the wrong arity, or a server
/// without the call.
pub fn command_keys(
    ctx: &Context,
    command: &[redis_module::RedisString],
) -> Option<Vec<(usize, c_int)>> {
    let (keys_of, free) = unsafe {
        (
            raw::RedisModule_GetCommandKeysWithFlags?,
            raw::RedisModule_Free?,
        )
    };
    let mut argv: Vec<*mut raw::RedisModuleString> = command.iter().map(|arg| arg.inner).collect();
    let argc = c_int::try_from(argv.len()).ok()?;
    let (mut count, mut flags): (c_int, *mut c_int) = (0, std::ptr::null_mut());
    let positions = unsafe {
        keys_of(
            ctx.get_raw(),
            argv.as_mut_ptr(),
            argc,
            &mut count,
            &mut flags,
        )
    };
    if positions.is_null() {
        return None;
    }
    let count = usize::try_from(count).unwrap_or(0);
    let at = unsafe { std::slice::from_raw_parts(positions, count) };
    let found = if flags.is_null() {
        at.iter().map(|&at| (at, 0)).collect::<Vec<_>>()
    } else {
        let flags = unsafe { std::slice::from_raw_parts(flags, count) };
        at.iter().copied().zip(flags.iter().copied()).collect()
    };
    unsafe {
        free(positions.cast());
        if !flags.is_null() {
            free(flags.cast());
        }
    }
    Some(
        found
            .into_iter()
            .filter_map(|(at, flags)| Some((usize::try_from(at).ok()?, flags)))
            .collect(),
    )
}

/// Tells Redis, asking where a command's keys are, that argument `position` is a key used as
/// `flags` say (`RedisModule_KeyAtPosWithFlags`, Redis 7.0; `RedisModule_KeyAtPos` without
/// flags where it is missing).
pub fn key_at(ctx: &Context, position: usize, flags: c_int) {
    let Ok(position) = c_int::try_from(position) else {
        return;
    };
    unsafe {
        if let Some(with_flags) = raw::RedisModule_KeyAtPosWithFlags {
            with_flags(ctx.get_raw(), position, flags);
        } else if let Some(at) = raw::RedisModule_KeyAtPos {
            at(ctx.get_raw(), position);
        }
    }
}

/// A command's reply from [`call`], freed when dropped (`RedisModule_FreeCallReply`).
pub struct Called(std::ptr::NonNull<raw::RedisModuleCallReply>);

impl Called {
    /// The error's text when the reply is an error (`-ERR ...`, without the dash).
    #[must_use]
    pub fn error(&self) -> Option<String> {
        let (kind_of, text_of) = unsafe {
            (
                raw::RedisModule_CallReplyType?,
                raw::RedisModule_CallReplyStringPtr?,
            )
        };
        if unsafe { kind_of(self.0.as_ptr()) } != raw::REDISMODULE_REPLY_ERROR as c_int {
            return None;
        }
        let mut len = 0;
        let text = unsafe { text_of(self.0.as_ptr(), &mut len) };
        if text.is_null() {
            return Some(String::new());
        }
        let bytes = unsafe { std::slice::from_raw_parts(text.cast::<u8>(), len) };
        Some(String::from_utf8_lossy(bytes).into_owned())
    }

    /// Sends it to the client of `ctx` as it came (`RedisModule_ReplyWithCallReply`: the same
    /// types and bytes, in the protocol it was asked in).
    ///
    /// # Errors
    /// A server without the call.
    pub fn forward(&self, ctx: &Context) -> Result<(), RedisError> {
        let send = api(unsafe { raw::RedisModule_ReplyWithCallReply })?;
        unsafe { send(ctx.get_raw(), self.0.as_ptr()) };
        Ok(())
    }
}

impl Called {
    /// The reply as a value to send later, outside the command that made it: a held synced
    /// write's reply. A reply must be freed inside its command (Redis reads the command's
    /// context when it frees one), so it is copied: strings as simple or bulk as they came,
    /// integers, nulls, arrays, and RESP3's maps (in key order), sets, booleans, doubles (sent
    /// back by the same formatting), big numbers and verbatim strings (as bulk ones). An error
    /// inside the reply, which no command a guard runs gives, becomes a generic one.
    #[must_use]
    pub fn to_value(&self) -> RedisValue {
        value_of(self.0.as_ptr())
    }
}

/// The value of the call reply `reply` ([`Called::to_value`]).
fn value_of(reply: *mut raw::RedisModuleCallReply) -> RedisValue {
    let kind = unsafe { raw::RedisModule_CallReplyType.map_or(-1, |kind_of| kind_of(reply)) };
    let bytes = |read: Option<
        unsafe extern "C" fn(
            *mut raw::RedisModuleCallReply,
            *mut usize,
        ) -> *const std::os::raw::c_char,
    >| {
        let mut len = 0;
        let text = read.map_or(std::ptr::null(), |read| unsafe { read(reply, &mut len) });
        if text.is_null() {
            Vec::new()
        } else {
            unsafe { std::slice::from_raw_parts(text.cast::<u8>(), len) }.to_vec()
        }
    };
    let length = || unsafe { raw::RedisModule_CallReplyLength.map_or(0, |length| length(reply)) };
    let element = |at: usize| unsafe {
        raw::RedisModule_CallReplyArrayElement.map_or(std::ptr::null_mut(), |get| get(reply, at))
    };
    match isize::try_from(kind).unwrap_or(-1) {
        raw::REDISMODULE_REPLY_STRING => {
            let text = bytes(unsafe { raw::RedisModule_CallReplyStringPtr });
            let simple = bytes(unsafe { raw::RedisModule_CallReplyProto }).first() == Some(&b'+');
            match String::from_utf8(text) {
                Ok(text) if simple => RedisValue::SimpleString(text),
                Ok(text) => RedisValue::StringBuffer(text.into_bytes()),
                Err(not_utf8) => RedisValue::StringBuffer(not_utf8.into_bytes()),
            }
        }
        raw::REDISMODULE_REPLY_INTEGER => RedisValue::Integer(unsafe {
            raw::RedisModule_CallReplyInteger.map_or(0, |integer| integer(reply))
        }),
        raw::REDISMODULE_REPLY_ARRAY => {
            RedisValue::Array((0..length()).map(|at| value_of(element(at))).collect())
        }
        raw::REDISMODULE_REPLY_SET => RedisValue::OrderedSet(
            (0..length())
                .map(|at| unsafe {
                    raw::RedisModule_CallReplySetElement
                        .map_or(std::ptr::null_mut(), |get| get(reply, at))
                })
                .map(|member| key_of(value_of(member)))
                .collect(),
        ),
        raw::REDISMODULE_REPLY_MAP => RedisValue::OrderedMap(
            (0..length())
                .map(|at| {
                    let (mut key, mut value) = (std::ptr::null_mut(), std::ptr::null_mut());
                    if let Some(get) = unsafe { raw::RedisModule_CallReplyMapElement } {
                        unsafe { get(reply, at, &mut key, &mut value) };
                    }
                    (key_of(value_of(key)), value_of(value))
                })
                .collect(),
        ),
        raw::REDISMODULE_REPLY_BOOL => RedisValue::Bool(unsafe {
            raw::RedisModule_CallReplyBool.is_some_and(|boolean| boolean(reply) != 0)
        }),
        raw::REDISMODULE_REPLY_DOUBLE => RedisValue::Float(unsafe {
            raw::RedisModule_CallReplyDouble.map_or(0.0, |double| double(reply))
        }),
        raw::REDISMODULE_REPLY_BIG_NUMBER => RedisValue::BigNumber(
            String::from_utf8_lossy(&bytes(unsafe { raw::RedisModule_CallReplyBigNumber }))
                .into_owned(),
        ),
        raw::REDISMODULE_REPLY_VERBATIM_STRING => {
            let mut len = 0;
            let mut format = std::ptr::null();
            let text = unsafe {
                raw::RedisModule_CallReplyVerbatim
                    .map_or(std::ptr::null(), |read| read(reply, &mut len, &mut format))
            };
            RedisValue::StringBuffer(if text.is_null() {
                Vec::new()
            } else {
                unsafe { std::slice::from_raw_parts(text.cast::<u8>(), len) }.to_vec()
            })
        }
        raw::REDISMODULE_REPLY_ERROR => {
            RedisValue::StaticError("ERR the command replied an error inside its reply")
        }
        _ => RedisValue::Null,
    }
}

/// A map key or set member as a value's key.
fn key_of(value: RedisValue) -> RedisValueKey {
    match value {
        RedisValue::Integer(integer) => RedisValueKey::Integer(integer),
        RedisValue::Bool(boolean) => RedisValueKey::Bool(boolean),
        RedisValue::SimpleString(text) => RedisValueKey::String(text),
        RedisValue::StringBuffer(bytes) => RedisValueKey::BulkString(bytes),
        other => RedisValueKey::BulkString(format!("{other:?}").into_bytes()),
    }
}

impl Drop for Called {
    fn drop(&mut self) {
        if let Some(free) = unsafe { raw::RedisModule_FreeCallReply } {
            unsafe { free(self.0.as_ptr()) };
        }
    }
}

/// Runs `command` (its name first) with `RedisModule_Call` and `format` (`v` first, so that
/// the arguments are passed as they are, without new strings; then RM_Call's own flags: `!`,
/// `C`, `E`, ...); `None` when the server lacks the call, the name holds a NUL, or it gave no
/// reply (`E` in `format` turns those into error replies). Up to [`SHORT`] arguments and
/// names take no allocation.
pub fn call(ctx: &Context, command: &[redis_module::RedisString], format: &CStr) -> Option<Called> {
    let call = unsafe { raw::RedisModule_Call }?;
    let (name, rest) = command.split_first()?;
    let name = name.as_slice();
    if name.contains(&0) {
        return None;
    }
    let mut short_name = [0_u8; SHORT];
    let long_name;
    let name_ptr = if let Some(copy) = short_name
        .get_mut(..name.len())
        .filter(|_| name.len() < SHORT)
    {
        copy.copy_from_slice(name);
        short_name.as_ptr()
    } else {
        long_name = [name, &[0]].concat();
        long_name.as_ptr()
    };
    let mut short_argv = [std::ptr::null_mut(); SHORT];
    let mut long_argv;
    let argv: &mut [*mut raw::RedisModuleString] = match short_argv.get_mut(..rest.len()) {
        Some(argv) => argv,
        None => {
            long_argv = vec![std::ptr::null_mut(); rest.len()];
            &mut long_argv
        }
    };
    for (slot, arg) in argv.iter_mut().zip(rest) {
        *slot = arg.inner;
    }
    let reply = unsafe {
        call(
            ctx.get_raw(),
            name_ptr.cast(),
            format.as_ptr(),
            argv.as_mut_ptr(),
            argv.len(),
        )
    };
    std::ptr::NonNull::new(reply).map(Called)
}

/// How many arguments, and bytes of a command's name, [`call`] passes without allocating.
pub const SHORT: usize = 32;
