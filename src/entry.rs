//! The entry points of the commands every lock and guarded write goes through — `LOCK.ACQUIRE`,
//! `LOCK.GUARD` and `LOCK.FENCED` — created without `redis-module`'s command glue, which
//! retains every argument, collects them into a new `Vec` and frees each one after the command:
//! about 600 instructions a call, a twentieth of a free lock's acquire (issue 55). Here the
//! handler borrows the arguments the server passes, which live for the whole command, from a
//! buffer on the stack. The commands' flags, keys and ACL categories come from their metadata,
//! as the other commands' do in `lib.rs`.

use std::ffi::CString;
use std::mem::ManuallyDrop;
use std::os::raw::c_int;
use std::ptr;
use std::slice;

use redis_module::{Context, RedisError, RedisResult, RedisString, raw};

use crate::api::{api, ok_or_error};
use crate::commands;
use crate::guard;
use crate::metadata::{acl_categories, flags, key_range};

/// Arguments up to this many (the command's name included) are borrowed from a buffer on the
/// stack, more from the heap: every valid `LOCK.ACQUIRE` fits.
const INLINE_ARGS: usize = 16;

/// Creates `LOCK.ACQUIRE`, `LOCK.GUARD` and `LOCK.FENCED`, with their flags, keys and ACL
/// categories.
///
/// # Errors
/// The server refuses a command, or cannot find it once created; a server that refuses its
/// ACL categories is logged, as `redis-module` does for the other commands.
pub fn register(ctx: &Context) -> Result<(), RedisError> {
    create(ctx, "lock.acquire", Some(acquire))?;
    create(ctx, "lock.guard", Some(guard))?;
    create(ctx, "lock.fenced", Some(fenced))
}

/// An entry point the server calls, `extern "C"`, that runs `$handler` ([`run`]).
macro_rules! entry_point {
    ($(#[$doc:meta])* $name:ident => $handler:path) => {
        $(#[$doc])*
        extern "C" fn $name(
            ctx: *mut raw::RedisModuleCtx,
            argv: *mut *mut raw::RedisModuleString,
            argc: c_int,
        ) -> c_int {
            run(ctx, argv, argc, $handler)
        }
    };
}

entry_point!(
    /// `LOCK.ACQUIRE`: [`commands::acquire`].
    acquire => commands::acquire
);
entry_point!(
    /// `LOCK.GUARD`: [`guard::guard`].
    guard => guard::guard
);
entry_point!(
    /// `LOCK.FENCED`: [`guard::fenced`].
    fenced => guard::fenced
);

/// Replies with what `handler` makes of the arguments as the server passed them.
fn run(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: fn(&Context, &[RedisString]) -> RedisResult,
) -> c_int {
    let context = Context::new(ctx);
    with_args(ctx, argv, argc, |args| {
        context.reply(handler(&context, args)) as c_int
    })
}

/// Creates the command `name` with the entry point `handler`.
fn create(ctx: &Context, name: &str, handler: raw::RedisModuleCmdFunc) -> Result<(), RedisError> {
    let refused = || RedisError::String(format!("ERR could not create the command {name}"));
    let c_name = CString::new(name).map_err(|_| refused())?;
    let c_flags = CString::new(flags(name)).map_err(|_| refused())?;
    let (first, last, step) = key_range(name);
    let status = unsafe {
        api(raw::RedisModule_CreateCommand)?(
            ctx.get_raw(),
            c_name.as_ptr(),
            handler,
            c_flags.as_ptr(),
            first,
            last,
            step,
        )
    };
    ok_or_error(status, "ERR could not create a command").map_err(|_| refused())?;
    let categories = acl_categories(name);
    let Some(set_categories) = (unsafe { raw::RedisModule_SetCommandACLCategories }) else {
        // Redis 7.0 has no module ACL categories: the commands go without, as the others do.
        return Ok(());
    };
    if categories.is_empty() {
        return Ok(());
    }
    let command = unsafe { api(raw::RedisModule_GetCommand)?(ctx.get_raw(), c_name.as_ptr()) };
    if command.is_null() {
        return Err(RedisError::String(format!(
            "ERR could not find the command {name}"
        )));
    }
    let c_categories = CString::new(categories).map_err(|_| refused())?;
    if unsafe { set_categories(command, c_categories.as_ptr()) } != raw::REDISMODULE_OK as c_int {
        ctx.log_warning(&format!(
            "Warning: failed to set command `{name}` ACL categories `{categories}`"
        ));
    }
    Ok(())
}

/// Runs `run` on the `argc` arguments at `argv`, borrowed: the server keeps them for the whole
/// command, so they are neither retained nor freed.
fn with_args<R>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    run: impl FnOnce(&[RedisString]) -> R,
) -> R {
    let argv: &[*mut raw::RedisModuleString] = match usize::try_from(argc) {
        Ok(len) if !argv.is_null() => unsafe { slice::from_raw_parts(argv, len) },
        _ => &[],
    };
    let borrow = |arg: *mut raw::RedisModuleString| {
        ManuallyDrop::new(RedisString::from_redis_module_string(ctx, arg))
    };
    if argv.len() <= INLINE_ARGS {
        let mut inline: [ManuallyDrop<RedisString>; INLINE_ARGS] =
            std::array::from_fn(|_| borrow(ptr::null_mut()));
        for (slot, &arg) in inline.iter_mut().zip(argv) {
            *slot = borrow(arg);
        }
        run(strings(inline.get(..argv.len()).unwrap_or_default()))
    } else {
        let heap: Vec<ManuallyDrop<RedisString>> = argv.iter().map(|&arg| borrow(arg)).collect();
        run(strings(&heap))
    }
}

/// The borrowed strings as `RedisString`s, which they are: `ManuallyDrop` only keeps their
/// `Drop` (which would free them) from running.
fn strings(args: &[ManuallyDrop<RedisString>]) -> &[RedisString] {
    // `ManuallyDrop<T>` is `repr(transparent)` over `T`.
    unsafe { slice::from_raw_parts(args.as_ptr().cast::<RedisString>(), args.len()) }
}
