//! What `COMMAND DOCS`, `COMMAND INFO` and `COMMAND GETKEYS` tell about each `LOCK.*` command:
//! summary, complexity, arguments, arity and key specs, set with `RedisModule_SetCommandInfo`
//! (Redis 7.0+). The crate's `#[command]` registration needs Redis 7.2 APIs, so this calls the
//! function directly, with static strings that need no freeing.

use std::ffi::CStr;
use std::ptr;

use redis_module::commands::{BeginSearch, FindKeys, KeySpec, KeySpecFlags};
use redis_module::{Context, RedisError, raw};

use crate::api::{api, ok_or_error};

/// The first release (`since` in `COMMAND DOCS`): every command but `LOCK.RAISE`.
const SINCE_0_1: &CStr = c"0.1.0";

/// The release that brought shared locks (`SHARED`, `LIMIT`) and `LOCK.RAISE`.
const SINCE_0_2: &CStr = c"0.2.0";

/// The release that brought sets (`LOCK.MACQUIRE`, `LOCK.MRELEASE`, `LOCK.MRENEW`).
const SINCE_0_4: &CStr = c"0.4.0";

/// One documented argument.
struct Argument {
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    token: Option<&'static CStr>,
    optional: bool,
    /// Given one or more times (`key [key ...]`).
    multiple: bool,
    since: Option<&'static CStr>,
    /// The arguments of a block.
    subargs: &'static [Argument],
}

/// Where a command's keys are.
#[derive(Clone, Copy)]
enum Keys {
    /// One lock, at position 1.
    One,
    /// `numkeys key [key ...]`: the count at position 1, the keys after it (as `LMPOP`).
    Counted,
}

/// One documented command.
struct Doc {
    keys: Keys,
    command: &'static CStr,
    since: &'static CStr,
    summary: &'static CStr,
    complexity: &'static CStr,
    arity: i32,
    key_flags: KeySpecFlags,
    arguments: &'static [Argument],
}

const fn required(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> Argument {
    Argument {
        name,
        kind,
        token: None,
        optional: false,
        multiple: false,
        since: None,
        subargs: &[],
    }
}

const fn option(
    name: &'static CStr,
    token: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
) -> Argument {
    Argument {
        name,
        kind,
        token: Some(token),
        optional: true,
        multiple: false,
        since: None,
        subargs: &[],
    }
}

const KEY: Argument = required(
    c"key",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
);
const OWNER: Argument = required(
    c"owner",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
);
const TTL: Argument = required(
    c"ttl-ms",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
);
const REENTRANT: Argument = option(
    c"reentrant",
    c"REENTRANT",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
);
const WAIT: Argument = option(
    c"timeout-ms",
    c"WAIT",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
);
const LIMIT: Argument = Argument {
    since: Some(SINCE_0_2),
    ..option(
        c"limit",
        c"LIMIT",
        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
    )
};
const SHARED: Argument = Argument {
    since: Some(SINCE_0_2),
    subargs: &[LIMIT],
    ..option(
        c"shared",
        c"SHARED",
        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
    )
};
const OPTIONAL_OWNER: Argument = Argument {
    optional: true,
    ..required(
        c"owner",
        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
    )
};

const TOKEN: Argument = required(
    c"token",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
);

const NUMKEYS: Argument = required(
    c"numkeys",
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
);
const KEYS: Argument = Argument {
    multiple: true,
    ..KEY
};

/// What every command on a set says about its complexity.
const SET_COMPLEXITY: &CStr = c"O(K) for K keys, plus the hand-over to each freed lock's waiters";

const DOCS: [Doc; 9] = [
    Doc {
        keys: Keys::One,
        command: c"lock.acquire",
        since: SINCE_0_1,
        summary: c"Takes a lock for an owner with a lease, exclusively or shared (read-write lock, semaphore), optionally waiting for it in FIFO order; replies with its fencing token.",
        complexity: c"O(1) for an exclusive lock, O(log N) for a shared lock with N holders",
        arity: -4,
        key_flags: KeySpecFlags::READ_WRITE.union(KeySpecFlags::ACCESS).union(KeySpecFlags::UPDATE),
        arguments: &[KEY, OWNER, TTL, REENTRANT, WAIT, SHARED],
    },
    Doc {
        keys: Keys::One,
        command: c"lock.release",
        since: SINCE_0_1,
        summary: c"Releases one hold of the owner's holding; the last hold ends it and hands the lock to the first waiters that fit.",
        complexity: c"O(1) for an exclusive lock, O(log N) for a shared lock with N holders",
        arity: 3,
        key_flags: KeySpecFlags::READ_WRITE.union(KeySpecFlags::DELETE),
        arguments: &[KEY, OWNER],
    },
    Doc {
        keys: Keys::One,
        command: c"lock.renew",
        since: SINCE_0_1,
        summary: c"Resets the lease of the owner's holding of a lock.",
        complexity: c"O(1) for an exclusive lock, O(log N) for a shared lock with N holders",
        arity: 4,
        key_flags: KeySpecFlags::READ_WRITE.union(KeySpecFlags::UPDATE),
        arguments: &[KEY, OWNER, TTL],
    },
    Doc {
        keys: Keys::One,
        command: c"lock.fence",
        since: SINCE_0_1,
        summary: c"Returns the fencing token of the given owner's holding, or without an owner the exclusive holder's (a shared lock's largest).",
        complexity: c"O(1)",
        arity: -2,
        key_flags: KeySpecFlags::READ_ONLY.union(KeySpecFlags::ACCESS),
        arguments: &[KEY, OPTIONAL_OWNER],
    },
    Doc {
        keys: Keys::One,
        command: c"lock.info",
        since: SINCE_0_1,
        summary: c"Returns the mode, holders (owner, fencing token, remaining lease, hold count) and waiters of a lock.",
        complexity: c"O(1) for an exclusive lock, O(N) for a shared lock with N holders",
        arity: 2,
        key_flags: KeySpecFlags::READ_ONLY.union(KeySpecFlags::ACCESS),
        arguments: &[KEY],
    },
    Doc {
        keys: Keys::One,
        command: c"lock.raise",
        since: SINCE_0_2,
        summary: c"Raises the fencing token of the owner's holding to at least the given one, and the server's counter with it (fencing tokens across Redlock masters).",
        complexity: c"O(1) for an exclusive lock, O(log N) for a shared lock with N holders when the token becomes its largest, O(N) otherwise",
        arity: 4,
        key_flags: KeySpecFlags::READ_WRITE.union(KeySpecFlags::UPDATE),
        arguments: &[KEY, OWNER, TOKEN],
    },
    Doc {
        keys: Keys::Counted,
        command: c"lock.macquire",
        since: SINCE_0_4,
        summary: c"Takes several locks for an owner at once, all or none, optionally waiting for all of them together in FIFO order; replies with their fencing tokens.",
        complexity: SET_COMPLEXITY,
        arity: -5,
        key_flags: KeySpecFlags::READ_WRITE.union(KeySpecFlags::ACCESS).union(KeySpecFlags::UPDATE),
        arguments: &[NUMKEYS, KEYS, OWNER, TTL, WAIT],
    },
    Doc {
        keys: Keys::Counted,
        command: c"lock.mrelease",
        since: SINCE_0_4,
        summary: c"Releases one hold of the owner's holding of each lock; each freed lock goes to its first waiters.",
        complexity: SET_COMPLEXITY,
        arity: -4,
        key_flags: KeySpecFlags::READ_WRITE.union(KeySpecFlags::DELETE),
        arguments: &[NUMKEYS, KEYS, OWNER],
    },
    Doc {
        keys: Keys::Counted,
        command: c"lock.mrenew",
        since: SINCE_0_4,
        summary: c"Resets the lease of every lock the owner holds, when it holds them all; otherwise renews none.",
        complexity: c"O(K) for K keys",
        arity: -5,
        key_flags: KeySpecFlags::READ_WRITE.union(KeySpecFlags::UPDATE),
        arguments: &[NUMKEYS, KEYS, OWNER, TTL],
    },
];

static INFO_VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
};

/// Sets the docs, arity and key spec of every `LOCK.*` command (after they were created).
///
/// # Errors
/// When the server lacks `RedisModule_SetCommandInfo` or rejects the info.
pub fn register(ctx: &Context) -> Result<(), RedisError> {
    DOCS.iter().try_for_each(|doc| describe(ctx, doc))
}

fn describe(ctx: &Context, doc: &Doc) -> Result<(), RedisError> {
    let command = unsafe { api(raw::RedisModule_GetCommand)?(ctx.get_raw(), doc.command.as_ptr()) };
    let find_keys = match doc.keys {
        Keys::One => FindKeys::new_range(0, 1, 0),
        Keys::Counted => FindKeys::new_keys_num(0, 1, 1),
    };
    let key_spec = KeySpec::new(
        None,
        KeySpecFlags::from_bits_truncate(doc.key_flags.bits()),
        BeginSearch::new_index(1),
        find_keys,
    );
    // Both arrays end with an all-zero entry, as the API requires.
    let mut key_specs = [raw::RedisModuleCommandKeySpec::from(&key_spec), unsafe {
        std::mem::zeroed()
    }];
    // Redis copies the info; the argument arrays only need to live until then.
    let mut arrays = Vec::new();
    let arguments = raw_arguments(doc.arguments, &mut arrays);
    let mut info = raw::RedisModuleCommandInfo {
        version: &INFO_VERSION,
        summary: doc.summary.as_ptr(),
        complexity: doc.complexity.as_ptr(),
        since: doc.since.as_ptr(),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity: doc.arity,
        key_specs: key_specs.as_mut_ptr(),
        args: arguments,
    };
    let status = unsafe { api(raw::RedisModule_SetCommandInfo)?(command, &mut info) };
    ok_or_error(status, "ERR the server rejected the command info")
}

/// `arguments` as the API's array, ending with an all-zero entry; the array (and those of
/// nested blocks) is kept in `arrays`.
fn raw_arguments(
    arguments: &'static [Argument],
    arrays: &mut Vec<Vec<raw::RedisModuleCommandArg>>,
) -> *mut raw::RedisModuleCommandArg {
    let mut array: Vec<raw::RedisModuleCommandArg> = arguments
        .iter()
        .map(|argument| raw_argument(argument, arrays))
        .collect();
    array.push(unsafe { std::mem::zeroed() });
    let pointer = array.as_mut_ptr();
    arrays.push(array); // moves the Vec, not the entries it points to
    pointer
}

fn raw_argument(
    argument: &'static Argument,
    arrays: &mut Vec<Vec<raw::RedisModuleCommandArg>>,
) -> raw::RedisModuleCommandArg {
    let is_key = argument.kind == raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY;
    raw::RedisModuleCommandArg {
        name: argument.name.as_ptr(),
        type_: argument.kind,
        key_spec_index: if is_key { 0 } else { -1 },
        token: argument.token.map_or(ptr::null(), CStr::as_ptr),
        summary: ptr::null(),
        since: argument.since.map_or(ptr::null(), CStr::as_ptr),
        flags: if argument.optional {
            raw::REDISMODULE_CMD_ARG_OPTIONAL as i32
        } else {
            0
        } | if argument.multiple {
            raw::REDISMODULE_CMD_ARG_MULTIPLE as i32
        } else {
            0
        },
        deprecated_since: ptr::null(),
        subargs: if argument.subargs.is_empty() {
            ptr::null_mut()
        } else {
            raw_arguments(argument.subargs, arrays)
        },
        display_text: ptr::null(),
    }
}
