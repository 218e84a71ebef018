//! What `COMMAND DOCS`, `COMMAND INFO` and `COMMAND GETKEYS` tell about each `LOCK.*` command —
//! summary, complexity, history, arguments, arity and key specs — from its metadata
//! ([`crate::metadata`], `commands/*.json`), set with `RedisModule_SetCommandInfo` (Redis 7.0+).
//! The crate's `#[command]` registration needs Redis 7.2 APIs, so this calls the function
//! directly; Redis copies what it is given, so the C strings only live until then.

use std::ffi::{CString, c_char};
use std::ptr;

use redis_module::commands::{BeginSearch, FindKeys, KeySpec, KeySpecFlags};
use redis_module::{Context, RedisError, raw};

use crate::api::{api, ok_or_error};
use crate::metadata::{self, Argument, Command};

static INFO_VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
};

/// Sets the docs, arity and key specs of every command (after they were created).
///
/// # Errors
/// When the server lacks `RedisModule_SetCommandInfo`, or rejects the info.
pub fn register(ctx: &Context) -> Result<(), RedisError> {
    metadata::COMMANDS
        .iter()
        .try_for_each(|command| describe(ctx, command))
}

/// What the raw info points into, kept until Redis has copied it.
#[derive(Default)]
struct Arena {
    strings: Vec<CString>,
    arguments: Vec<Vec<raw::RedisModuleCommandArg>>,
}

impl Arena {
    fn string(&mut self, text: &str) -> *const c_char {
        let string = CString::new(text).unwrap_or_default();
        let pointer = string.as_ptr();
        self.strings.push(string); // moves the CString, not the bytes it points to
        pointer
    }

    fn optional(&mut self, text: Option<&String>) -> *const c_char {
        text.map_or(ptr::null(), |text| self.string(text))
    }
}

fn describe(ctx: &Context, command: &Command) -> Result<(), RedisError> {
    let mut arena = Arena::default();
    let name = arena.string(&command.name.to_ascii_lowercase());
    let handle = unsafe { api(raw::RedisModule_GetCommand)?(ctx.get_raw(), name) };
    // Every array ends with an all-zero entry, as the API requires.
    let mut key_specs: Vec<raw::RedisModuleCommandKeySpec> = command
        .key_specs
        .iter()
        .map(|spec| raw::RedisModuleCommandKeySpec::from(&key_spec(spec)))
        .chain(std::iter::once(unsafe { std::mem::zeroed() }))
        .collect();
    let mut history: Vec<raw::RedisModuleCommandHistoryEntry> = command
        .history
        .iter()
        .map(|(since, changes)| raw::RedisModuleCommandHistoryEntry {
            since: arena.string(since),
            changes: arena.string(changes),
        })
        .chain(std::iter::once(unsafe { std::mem::zeroed() }))
        .collect();
    let arguments = raw_arguments(&command.arguments, &mut arena);
    let mut info = raw::RedisModuleCommandInfo {
        version: &INFO_VERSION,
        summary: arena.string(&command.summary),
        complexity: arena.string(&command.complexity),
        since: arena.string(&command.since),
        history: history.as_mut_ptr(),
        tips: ptr::null(),
        arity: command.arity,
        key_specs: key_specs.as_mut_ptr(),
        args: arguments,
    };
    let status = unsafe { api(raw::RedisModule_SetCommandInfo)?(handle, &mut info) };
    ok_or_error(status, "ERR the server rejected the command info")
}

/// A key spec of the metadata as the crate's type; flags it does not know are left out.
fn key_spec(spec: &metadata::KeySpec) -> KeySpec {
    let flags = spec
        .flags
        .iter()
        .filter_map(|flag| {
            let long = match flag.as_str() {
                "RW" => "read_write",
                "RO" => "read_only",
                "OW" => "overwrite",
                "RM" => "remove",
                other => other,
            };
            KeySpecFlags::try_from(long).ok()
        })
        .fold(KeySpecFlags::empty(), |all, flag| all | flag);
    let metadata::BeginSearch::Index { pos } = spec.begin_search;
    let find_keys = match spec.find_keys {
        metadata::FindKeys::Range {
            lastkey,
            step,
            limit,
        } => FindKeys::new_range(lastkey, step, limit),
        metadata::FindKeys::Keynum {
            keynumidx,
            firstkey,
            step,
        } => FindKeys::new_keys_num(keynumidx, firstkey, step),
    };
    KeySpec::new(None, flags, BeginSearch::new_index(pos), find_keys)
}

/// `arguments` as the API's array, ending with an all-zero entry; the array (and those of
/// nested blocks) is kept in the arena.
fn raw_arguments(arguments: &[Argument], arena: &mut Arena) -> *mut raw::RedisModuleCommandArg {
    let mut array: Vec<raw::RedisModuleCommandArg> = arguments
        .iter()
        .map(|argument| raw_argument(argument, arena))
        .collect();
    array.push(unsafe { std::mem::zeroed() });
    let pointer = array.as_mut_ptr();
    arena.arguments.push(array); // moves the Vec, not the entries it points to
    pointer
}

fn raw_argument(argument: &Argument, arena: &mut Arena) -> raw::RedisModuleCommandArg {
    let kind = match argument.kind.as_str() {
        "key" => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
        "integer" => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
        "pure-token" => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
        "block" => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
        "oneof" => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
        _ => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    };
    let is_key = kind == raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY;
    let flag = |set: bool, flag: u32| if set { flag as i32 } else { 0 };
    raw::RedisModuleCommandArg {
        name: arena.string(&argument.name),
        type_: kind,
        key_spec_index: if is_key { 0 } else { -1 },
        token: arena.optional(argument.token.as_ref()),
        summary: ptr::null(),
        since: arena.optional(argument.since.as_ref()),
        flags: flag(argument.optional, raw::REDISMODULE_CMD_ARG_OPTIONAL)
            | flag(argument.multiple, raw::REDISMODULE_CMD_ARG_MULTIPLE),
        deprecated_since: ptr::null(),
        subargs: if argument.arguments.is_empty() {
            ptr::null_mut()
        } else {
            raw_arguments(&argument.arguments, arena)
        },
        display_text: ptr::null(),
    }
}
