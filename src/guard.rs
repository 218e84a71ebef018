//! `LOCK.GUARD` and `LOCK.FENCED`: one Redis command run only while a lock is held, or only
//! with a fencing token no smaller than the largest that wrote through a fence — the check a
//! resource must make for fencing tokens to protect it (Kleppmann, "How to do distributed
//! locking", 2016), for a resource that lives in Redis itself. Check and command run in one
//! step: nothing runs between them.
//!
//! The command runs through `RedisModule_Call` as the calling user (its ACL rights checked,
//! `C`), in script mode (`S`: what scripts may not run is refused, and writes stop where
//! `min-replicas-to-write` stops a script's), refused when over `maxmemory` if it may grow
//! memory (`M`), replicated and written to the AOF as itself (`!`), and replies in the caller's
//! protocol (`0`), forwarded as it came. Blocking commands, transactions and scripts are
//! refused before anything runs; so are the module's own commands and a command on the lock's
//! or fence's own key.
//!
//! A write counts like a lock write for `SYNC` ([`crate::synced`]): its reply waits for the
//! in-sync set. In Redis Cluster the commands answer the `getkeys-api` request with the lock's
//! or fence's key and the command's own keys (Redis's key lookup for it), so a client is
//! redirected to the node of their slot, and keys of two slots get `CROSSSLOT`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::raw::c_int;

use leasehold_core::args::{self, Guarded};
use leasehold_core::lock::Lock;
use redis_module::{
    CallOptionsBuilder, CallReply, CallResult, Context, RedisError, RedisResult, RedisString,
    RedisValue, raw,
};

use crate::api;
use crate::clock;
use crate::fences;
use crate::key::LockKey;
use crate::replies;
use crate::synced::{self, Undo};

/// `LOCK.GUARD key owner [TOKEN token] [SYNC | NOSYNC] command [arg ...]`: runs `command` only
/// while `owner` holds the lock `key` (exclusively or as one of its shared holders, its lease
/// not ended), and with `TOKEN` only while its holding has that fencing token. Replies with the
/// command's own reply.
///
/// # Errors
/// `NOTHELD` when the lock is free, held by another owner, or held with another token (each
/// said); arity, owner, token, no command; a refused command ([`Inner::check`]); the command's
/// own errors (`NOPERM` for what the user's ACL does not allow, `OOM`, its arity); `SYNC` where
/// a client cannot block; `NOREPLICAS` for a write the in-sync set did not get (the write stays).
pub fn guard(ctx: &Context, args: &[RedisString]) -> RedisResult {
    if keys_asked(ctx, args, true) {
        return Ok(RedisValue::NoReply);
    }
    let parsed = args::guard(args).map_err(replies::arg_error)?;
    sync_allowed(ctx, parsed.sync)?;
    let inner = Inner::check(ctx, &parsed)?;
    {
        let key = LockKey::read(ctx, parsed.key)?;
        held(key.lock(), &parsed)?;
    }
    let reply = inner.run(ctx, parsed.command)?;
    inner.reply(ctx, parsed.sync, reply)
}

/// `LOCK.FENCED fence token [SYNC | NOSYNC] command [arg ...]`: runs `command` only when
/// `token` is at least the largest token that ran a command through the fence `fence` (a key
/// of the module's `lockfence` type, created by the first such command), and raises the fence
/// to `token` once the command ran without an error. Replies with the command's own reply.
///
/// # Errors
/// `STALE` with the fence's largest token when `token` is smaller; arity, token, no command;
/// `WRONGTYPE` when `fence` is not a fence; a refused command ([`Inner::check`]); the command's
/// own errors (the fence is not raised then); `SYNC` where a client cannot block; `NOREPLICAS`
/// for a write the in-sync set did not get (the write and the raised fence stay).
pub fn fenced(ctx: &Context, args: &[RedisString]) -> RedisResult {
    if keys_asked(ctx, args, false) {
        return Ok(RedisValue::NoReply);
    }
    let parsed = args::fenced(args).map_err(replies::arg_error)?;
    sync_allowed(ctx, parsed.sync)?;
    let inner = Inner::check(ctx, &parsed)?;
    let token = parsed.token.unwrap_or(0);
    if let Some(fence) = fences::fence_at(&ctx.open_key_writable(parsed.key))? {
        fence.check(token).map_err(|largest| {
            RedisError::String(format!(
                "STALE token {token} is below {largest}, the largest token that ran a command \
                 through this fence"
            ))
        })?;
    }
    let reply = inner.run(ctx, parsed.command)?;
    // Opened again: the command may have emptied the database (`FLUSHALL`) under an open key.
    fences::raise(ctx, &ctx.open_key_writable(parsed.key), parsed.key, token)?;
    inner.reply(ctx, parsed.sync, reply)
}

/// `SYNC`'s refusal where a client cannot block (`MULTI`, scripts, functions), before anything
/// runs.
///
/// # Errors
/// `ERR SYNC ...` ([`synced::wanted`]).
fn sync_allowed(ctx: &Context, asked: Option<bool>) -> Result<(), RedisError> {
    if asked == Some(true) {
        synced::wanted(ctx, asked)?;
    }
    Ok(())
}

/// Whether `LOCK.GUARD`'s owner holds `lock` (with the token it named): the refusal otherwise.
fn held(lock: Option<&Lock>, parsed: &Guarded<'_, RedisString>) -> Result<(), RedisError> {
    let owner = parsed.owner.map_or(&[][..], |owner| owner.as_slice());
    let now = i64::try_from(clock::now_ms()).unwrap_or(i64::MAX);
    let why = match lock.map(|lock| lock.token_of(owner, now)) {
        None => "the lock is free".to_owned(),
        Some(None) => "the lock is held by another owner".to_owned(),
        Some(Some(token)) => match parsed.token {
            Some(asked) if asked != token => {
                format!("the owner holds the lock with token {token}, not {asked}")
            }
            _ => return Ok(()),
        },
    };
    Err(RedisError::String(format!(
        "NOTHELD {why}; the command did not run"
    )))
}

/// A guarded command, checked before anything runs.
struct Inner {
    /// Whether it may write (its `write` flag): only then does its reply wait for the in-sync
    /// set.
    writes: bool,
}

impl Inner {
    /// Checks the command of `parsed` before it runs: a command this server knows, not one of
    /// the module's own, not blocking, not a transaction or script command (nor anything else
    /// scripts may not run, `noscript`), and not on the lock's or fence's own key.
    ///
    /// # Errors
    /// `ERR` saying which of these it is.
    fn check(ctx: &Context, parsed: &Guarded<'_, RedisString>) -> Result<Self, RedisError> {
        let name = parsed
            .command
            .first()
            .ok_or(RedisError::Str("ERR no command to run"))?;
        if name
            .as_slice()
            .get(..5)
            .is_some_and(|prefix| prefix.eq_ignore_ascii_case(b"lock."))
        {
            return Err(RedisError::Str(
                "ERR the lock module's own commands cannot be guarded",
            ));
        }
        // Lower-cased for an error only: a command that runs pays nothing for it.
        let shown = || String::from_utf8_lossy(name.as_slice()).to_lowercase();
        let flags = flags_of(ctx, name)
            .ok_or_else(|| RedisError::String(format!("ERR unknown command '{}'", shown())))?;
        if let Some(why) = flags.refused {
            return Err(RedisError::String(format!(
                "ERR '{}' cannot be guarded: {why}",
                shown()
            )));
        }
        // Redis's key lookup only when an argument names the key: most commands do not.
        let own = parsed.key.as_slice();
        let names_own = |at: usize| {
            parsed
                .command
                .get(at)
                .is_some_and(|arg| arg.as_slice() == own)
        };
        if (1..parsed.command.len()).any(names_own)
            && api::command_keys(ctx, parsed.command)
                .unwrap_or_default()
                .iter()
                .any(|&(at, _)| names_own(at))
        {
            return Err(RedisError::Str(
                "ERR the command may not touch the lock's or fence's own key",
            ));
        }
        Ok(Self {
            writes: flags.writes,
        })
    }

    /// Runs `command`: its reply, or its error.
    fn run(&self, ctx: &Context, command: &[RedisString]) -> Result<api::Called, RedisError> {
        // As the user (`C`), in script mode (`S`), refused over `maxmemory` (`M`), errors as
        // replies (`E`), replicated (`!`), in the caller's protocol (`0`).
        let reply = api::call(ctx, command, c"v!CSME0")
            .ok_or(RedisError::Str("ERR the command could not be run"))?;
        match reply.error() {
            None => Ok(reply),
            // Redis 7.0 words a refusal by the caller's ACL as an `ERR`; later versions, and
            // the command itself, as `NOPERM`.
            Some(text) if text.starts_with("ERR acl verification failed") => Err(RedisError::Str(
                "NOPERM this user has no permissions to run the guarded command on its keys",
            )),
            Some(text) => Err(RedisError::String(text)),
        }
    }

    /// Replies with `reply` as it came: at once (forwarded, not copied), or, when the command
    /// writes and its client `asked` for `SYNC` or left it to the default, once the in-sync set
    /// has the write ([`synced::waits`]).
    fn reply(&self, ctx: &Context, asked: Option<bool>, reply: api::Called) -> RedisResult {
        if self.writes && synced::waits(ctx, asked) {
            // Copied now: a reply must be freed inside the command that made it.
            synced::hold(ctx, reply.to_value(), Undo::Write)
        } else {
            reply.forward(ctx)?;
            Ok(RedisValue::NoReply)
        }
    }
}

/// What a command's flags say of guarding it.
#[derive(Debug, Clone, Copy)]
struct Flags {
    /// `write`.
    writes: bool,
    /// Why it cannot be guarded: `blocking`, or `noscript` (transactions, scripts, `WATCH`,
    /// `SUBSCRIBE`, ...).
    refused: Option<&'static str>,
}

thread_local! {
    /// The flags of each command seen, by lower-case name, as `COMMAND INFO` gave them: a
    /// server's commands and their flags do not change while the module is loaded (modules
    /// loaded later add commands, which are looked up when first guarded).
    static FLAGS: RefCell<HashMap<Vec<u8>, Flags>> = RefCell::new(HashMap::new());
}

/// The flags of the command `name`; `None` for a command this server does not know (not kept,
/// so unknown names cannot fill memory).
fn flags_of(ctx: &Context, name: &RedisString) -> Option<Flags> {
    let mut lower = [0; 32];
    if let Some(lower) = lower.get_mut(..name.as_slice().len()) {
        lower.copy_from_slice(name.as_slice());
        lower.make_ascii_lowercase();
        if let Some(flags) = FLAGS.with_borrow(|known| known.get(&*lower).copied()) {
            return Some(flags);
        }
    }
    let lower = name.as_slice().to_ascii_lowercase();
    let info: CallResult<'static> = ctx.call_ext(
        "COMMAND",
        &CallOptionsBuilder::new().build(),
        &[&ctx.create_string("INFO"), name][..],
    );
    let flags = flags_in(&info.ok()?)?;
    FLAGS.with_borrow_mut(|known| known.insert(lower, flags));
    Some(flags)
}

/// The flags in `COMMAND INFO name`'s reply: an array of one command's array, whose third
/// element is its flags; `None` for a null (unknown command).
fn flags_in(reply: &CallReply<'_>) -> Option<Flags> {
    let CallReply::Array(commands) = reply else {
        return None;
    };
    let Some(Ok(CallReply::Array(command))) = commands.get(0) else {
        return None;
    };
    let Some(Ok(CallReply::Array(flags))) = command.get(2) else {
        return None;
    };
    let named: Vec<Vec<u8>> = flags
        .iter()
        .filter_map(|flag| match flag {
            Ok(CallReply::String(flag)) => Some(flag.as_bytes().to_vec()),
            _ => None,
        })
        .collect();
    let has = |wanted: &[u8]| named.iter().any(|flag| flag.as_slice() == wanted);
    let refused = if has(b"blocking") {
        Some("a blocking command cannot run inside another")
    } else if has(b"noscript") {
        Some("transactions, scripts and what scripts may not run are refused")
    } else {
        None
    };
    Some(Flags {
        writes: has(b"write"),
        refused,
    })
}

/// Answers Redis when it asks where the keys are rather than running the command (Redis
/// Cluster's routing, `COMMAND GETKEYS`, ACL key checks): the lock's or fence's key, then the
/// guarded command's keys as Redis finds them for it. Arguments that do not parse answer the
/// first key alone (the command itself then refuses them).
fn keys_asked(ctx: &Context, args: &[RedisString], guard: bool) -> bool {
    if !ctx.is_keys_position_request() {
        return false;
    }
    if args.len() > 1 {
        let own = if guard {
            raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS
        } else {
            raw::REDISMODULE_CMD_KEY_RW
                | raw::REDISMODULE_CMD_KEY_ACCESS
                | raw::REDISMODULE_CMD_KEY_UPDATE
        };
        api::key_at(ctx, 1, c_int::try_from(own).unwrap_or(0));
    }
    if let Some(start) = args::guarded_command_at(args, guard)
        && let Some(command) = args.get(start..)
    {
        for (at, flags) in api::command_keys(ctx, command).unwrap_or_default() {
            api::key_at(ctx, start + at, flags);
        }
    }
    true
}
