//! The arguments of every `LOCK.*` command, parsed from the bytes a client (or a master, or the
//! AOF) sent: the grammar, the ranges and the errors, with no Redis in them, so that they are
//! tested and fuzzed on their own (`fuzz/`). The module hands in its arguments as they came
//! (`args[0]` is the command's name) and gets back references into them.
//!
//! Errors are Redis's own where Redis has one: `ERR syntax error` for an unknown or repeated
//! option (RedisJSON and `SET` do the same), `ERR value is not an integer or out of range` as
//! `SET ... PX` words it, `BLPOP`'s timeout errors, `LMPOP`'s `numkeys` errors. Numbers are read
//! as Redis reads them (`string2ll`): the decimal form of a 64-bit integer and nothing else.

use std::collections::HashSet;
use std::fmt;
use std::ops::Deref;

use crate::election::Seen;
use crate::insync::Promotable;
use crate::insync::replica::{CHALLENGE, MASTER_DOWN, NOT_BEFORE};
use crate::lock::{Holding, Mode};
use crate::machine::Applied;
use crate::outcome::Lease;
use crate::owner::{MAX_VALUE_LEN, check_owner, check_value};
use crate::packed;
use crate::session::{self, SessionError};

/// What the server's configuration allows, for the checks that depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `lock.max-ttl-ms`: the longest lease in ms; 0 for no cap.
    pub max_ttl_ms: i64,
    /// `lock.max-multi-keys`: the most keys of one set command.
    pub max_keys: usize,
}

/// Why a command's arguments were refused. Each is one Redis error reply ([`fmt::Display`]
/// gives its text), but [`ArgError::WrongArity`], which Redis words itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgError {
    /// Too few or too many arguments.
    WrongArity,
    /// `ERR syntax error`: an unknown or repeated option, or an option's value missing.
    Syntax,
    /// `ERR value is not an integer or out of range`.
    NotInteger,
    /// `ERR timeout is not an integer or out of range`.
    TimeoutNotInteger,
    /// `ERR timeout is negative`.
    TimeoutNegative,
    /// `ERR owner must be 1 to 256 bytes`.
    Owner,
    /// `ERR value must be at most 65536 bytes` (an election's proclaimed value).
    Value,
    /// `ERR ttl-ms exceeds lock.max-ttl-ms (<cap>)`.
    TtlAboveCap(i64),
    /// `ERR token out of range`.
    Token,
    /// `ERR numkeys should be greater than 0`.
    NumKeys,
    /// `ERR numkeys exceeds lock.max-multi-keys (<n>)`.
    TooManyKeys(usize),
    /// `ERR Number of keys can't be greater than number of args`.
    KeysBeyondArgs,
    /// `ERR duplicate key '<key>'`.
    DuplicateKey(String),
    /// `ERR <option> is not supported by LOCK.MACQUIRE`.
    NotSupported(&'static str),
    /// `ERR invalid owner, fencing token, hold count or value in LOCK.APPLY`.
    Effect,
    /// `ERR invalid lease deadline in LOCK.APPLY`.
    EffectDeadline,
    /// `ERR invalid replica in LOCK.PROMOTABLE`: not an `ip:port` of at most
    /// [`MAX_REPLICA_ID`] bytes, or more than [`MAX_LISTED`] of them.
    Replica,
    /// `ERR invalid ip-address in LOCK.REPLCONF`: empty, longer than 255 bytes, or with a space
    /// or a comma.
    IpAddress,
    /// A session id or grace refused ([`SessionError`]).
    Session(SessionError),
    /// `ERR grace-ms must be <min> to lock.session-max-grace-ms (<max>)`.
    Grace(u64, u64),
    /// `ERR unknown subcommand '<name>'. Try LOCK.SESSION HELP.`, as Redis words it.
    UnknownSubcommand(String),
    /// `ERR no command to run`: `LOCK.GUARD` or `LOCK.FENCED` without a command after its
    /// options.
    NoCommand,
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WrongArity => write!(f, "ERR wrong number of arguments"),
            Self::Syntax => write!(f, "ERR syntax error"),
            Self::NotInteger => write!(f, "ERR value is not an integer or out of range"),
            Self::TimeoutNotInteger => write!(f, "ERR timeout is not an integer or out of range"),
            Self::TimeoutNegative => write!(f, "ERR timeout is negative"),
            Self::Owner => write!(f, "ERR owner must be 1 to 256 bytes"),
            Self::Value => write!(f, "ERR value must be at most {MAX_VALUE_LEN} bytes"),
            Self::TtlAboveCap(cap) => write!(f, "ERR ttl-ms exceeds lock.max-ttl-ms ({cap})"),
            Self::Token => write!(f, "ERR token out of range"),
            Self::NumKeys => write!(f, "ERR numkeys should be greater than 0"),
            Self::TooManyKeys(most) => {
                write!(f, "ERR numkeys exceeds lock.max-multi-keys ({most})")
            }
            Self::KeysBeyondArgs => {
                write!(f, "ERR Number of keys can't be greater than number of args")
            }
            Self::DuplicateKey(key) => write!(f, "ERR duplicate key '{key}'"),
            Self::NotSupported(option) => {
                write!(f, "ERR {option} is not supported by LOCK.MACQUIRE")
            }
            Self::Effect => write!(
                f,
                "ERR invalid owner, fencing token, hold count or value in LOCK.APPLY"
            ),
            Self::EffectDeadline => write!(f, "ERR invalid lease deadline in LOCK.APPLY"),
            Self::Replica => write!(f, "ERR invalid replica in LOCK.PROMOTABLE"),
            Self::IpAddress => write!(f, "ERR invalid ip-address in LOCK.REPLCONF"),
            Self::Session(error) => write!(f, "{error}"),
            Self::UnknownSubcommand(name) => {
                write!(f, "ERR unknown subcommand '{name}'. Try LOCK.SESSION HELP.")
            }
            Self::NoCommand => write!(f, "ERR no command to run"),
            Self::Grace(min, max) => write!(
                f,
                "ERR grace-ms must be {min} to lock.session-max-grace-ms ({max})"
            ),
        }
    }
}

/// `LOCK.ACQUIRE key owner ttl-ms [REENTRANT] [WAIT timeout-ms] [SHARED [LIMIT n]]
/// [SESSION id] [SYNC | NOSYNC]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquire<'a, A> {
    /// The lock's key.
    pub key: &'a A,
    /// Who asks: 1 to 256 bytes.
    pub owner: &'a A,
    /// The lease asked for, in ms (checked for being positive when its deadline is computed).
    pub ttl_ms: i64,
    /// `REENTRANT`: a holder's acquire counts one more hold.
    pub reentrant: bool,
    /// `WAIT timeout-ms`: wait this long (0: no limit) when the lock is busy.
    pub wait_ms: Option<i64>,
    /// Exclusive, or `SHARED` with its `LIMIT`.
    pub mode: Mode,
    /// `SESSION id`: the session the holding is tied to ([`crate::session`]).
    pub session: Option<session::Id>,
    /// `SYNC` (`Some(true)`) or `NOSYNC` (`Some(false)`): whether the reply waits until the
    /// in-sync set has the write ([`crate::insync::synced`]); `None`: `lock.sync-writes`.
    pub sync: Option<bool>,
    /// `LOCK.CAMPAIGN`'s value, which the candidate proclaims once it leads (at most
    /// [`MAX_VALUE_LEN`] bytes); `None` for `LOCK.ACQUIRE`.
    pub value: Option<&'a A>,
}

/// `LOCK.PROCLAIM key epoch value [SYNC | NOSYNC]` and `LOCK.RESIGN key epoch` (no value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Term<'a, A> {
    /// The election's key.
    pub key: &'a A,
    /// The epoch of the term the caller leads.
    pub epoch: u64,
    /// `LOCK.PROCLAIM`'s new value.
    pub value: Option<&'a A>,
    /// `LOCK.PROCLAIM`'s `SYNC` or `NOSYNC` (as [`Acquire::sync`]).
    pub sync: Option<bool>,
}

/// `LOCK.OBSERVE key [LAST epoch value] [BLOCK timeout-ms]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observe<'a, A> {
    /// The election's key.
    pub key: &'a A,
    /// What the observer saw last (`LAST`); `None`: it learns the state at once.
    pub last: Option<Seen<'a>>,
    /// `BLOCK timeout-ms`: wait this long (0: no limit) for a change.
    pub block_ms: Option<i64>,
}

/// `LOCK.RELEASE key owner`, and `LOCK.RENEW key owner ttl-ms [SESSION id]` (with `ttl_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held<'a, A> {
    /// The lock's key.
    pub key: &'a A,
    /// The holder: 1 to 256 bytes.
    pub owner: &'a A,
    /// `LOCK.RENEW`'s new lease in ms; 0 for `LOCK.RELEASE`.
    pub ttl_ms: i64,
    /// `LOCK.RENEW`'s `SESSION id`: the session the holding is tied to from now on.
    pub session: Option<session::Id>,
    /// `LOCK.RENEW`'s `SYNC` or `NOSYNC` (as [`Acquire::sync`]); `None` for `LOCK.RELEASE`.
    pub sync: Option<bool>,
}

/// `LOCK.RAISE key owner token`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raise<'a, A> {
    /// The lock's key.
    pub key: &'a A,
    /// The holder: 1 to 256 bytes.
    pub owner: &'a A,
    /// The token to raise the holding's to: 1 to the caller's `max_token`.
    pub token: u64,
}

/// `LOCK.FENCE key [owner]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence<'a, A> {
    /// The lock's key.
    pub key: &'a A,
    /// Whose token: 1 to 256 bytes; `None` for the newest holding's.
    pub owner: Option<&'a A>,
}

/// `LOCK.MACQUIRE numkeys key [key ...] owner ttl-ms [WAIT timeout-ms] [SESSION id]
/// [SYNC | NOSYNC]`, and `LOCK.MRELEASE` and `LOCK.MRENEW` (without `WAIT`; `ttl_ms` 0 for
/// `LOCK.MRELEASE`, which takes no `SESSION`, `SYNC` or `NOSYNC` either).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Set<'a, A> {
    /// The locks' keys, distinct, in the order given.
    pub keys: &'a [A],
    /// Who asks: 1 to 256 bytes.
    pub owner: &'a A,
    /// The lease asked for, in ms.
    pub ttl_ms: i64,
    /// `WAIT timeout-ms`: wait this long (0: no limit) when a lock is busy.
    pub wait_ms: Option<i64>,
    /// `SESSION id`: the session the holdings are tied to.
    pub session: Option<session::Id>,
    /// `SYNC` or `NOSYNC` (as [`Acquire::sync`]); `None` for `LOCK.MRELEASE`.
    pub sync: Option<bool>,
}

/// `LOCK.GUARD key owner [TOKEN token] [SYNC | NOSYNC] command [arg ...]` and `LOCK.FENCED
/// fence token [SYNC | NOSYNC] command [arg ...]`: a command that runs only while a lock is
/// held, or only with a token no smaller than a fence's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guarded<'a, A> {
    /// The lock's key (`LOCK.GUARD`) or the fence's (`LOCK.FENCED`).
    pub key: &'a A,
    /// `LOCK.GUARD`'s owner, who must hold the lock; `None` for `LOCK.FENCED`.
    pub owner: Option<&'a A>,
    /// `LOCK.GUARD`'s `TOKEN`: the token the holding must have; `LOCK.FENCED`'s token, at least
    /// the fence's largest. 1 to 2^63 - 1.
    pub token: Option<u64>,
    /// `SYNC` or `NOSYNC` (as [`Acquire::sync`]).
    pub sync: Option<bool>,
    /// The command and its arguments, at least the name.
    pub command: &'a [A],
}

/// `LOCK.APPLY key owner <effect>`: a master's effect on one holding.
#[derive(Debug, Clone)]
pub struct Apply<'a, A> {
    /// The lock's key.
    pub key: &'a A,
    /// What it does to the holding.
    pub effect: Applied<'a>,
}

/// The arguments after the command's name, taken one by one.
struct Args<'a, A> {
    rest: &'a [A],
}

impl<'a, A: Deref<Target = [u8]>> Args<'a, A> {
    fn new(args: &'a [A]) -> Self {
        Self {
            rest: args.get(1..).unwrap_or_default(),
        }
    }

    /// The next argument, if any.
    fn next(&mut self) -> Option<&'a A> {
        let (first, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(first)
    }

    /// The next argument that must be there.
    fn required(&mut self) -> Result<&'a A, ArgError> {
        self.next().ok_or(ArgError::WrongArity)
    }

    /// An option's value: `ERR syntax error` when it is missing.
    fn value(&mut self) -> Result<&'a A, ArgError> {
        self.next().ok_or(ArgError::Syntax)
    }

    /// Checks that nothing is left.
    fn done(&self) -> Result<(), ArgError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(ArgError::WrongArity)
        }
    }

    /// The next `n` arguments.
    fn take(&mut self, n: usize) -> Result<&'a [A], ArgError> {
        let (taken, rest) = self
            .rest
            .split_at_checked(n)
            .ok_or(ArgError::KeysBeyondArgs)?;
        self.rest = rest;
        Ok(taken)
    }
}

/// Parses `LOCK.ACQUIRE`'s arguments (`args[0]` its name).
///
/// # Errors
/// Arity, options (`ERR syntax error`, timeout and `LIMIT` values), the TTL (an integer within
/// `lock.max-ttl-ms`), the owner, in that order.
pub fn acquire<'a, A: Deref<Target = [u8]>>(
    args: &'a [A],
    limits: &Limits,
) -> Result<Acquire<'a, A>, ArgError> {
    let mut args = Args::new(args);
    let (key, owner, ttl) = (args.required()?, args.required()?, args.required()?);
    let (reentrant, wait_ms, mode, write) = acquire_options(&mut args, false)?;
    Ok(Acquire {
        key,
        owner: checked_owner(owner)?,
        ttl_ms: ttl_of(ttl, limits)?,
        reentrant,
        wait_ms,
        mode,
        session: write.session,
        sync: write.sync,
        value: None,
    })
}

/// Parses `LOCK.CAMPAIGN key candidate value ttl-ms [WAIT timeout-ms] [SESSION id] [SYNC |
/// NOSYNC]` as the exclusive `LOCK.ACQUIRE` it is, with the value the candidate proclaims.
///
/// # Errors
/// Arity, options (`REENTRANT`, `SHARED` and `LIMIT` among them: `ERR syntax error`), the TTL,
/// the candidate (as an owner), the value, in that order.
pub fn campaign<'a, A: Deref<Target = [u8]>>(
    args: &'a [A],
    limits: &Limits,
) -> Result<Acquire<'a, A>, ArgError> {
    let mut args = Args::new(args);
    let (key, candidate) = (args.required()?, args.required()?);
    let (value, ttl) = (args.required()?, args.required()?);
    let (_, wait_ms, _, write) = acquire_options(&mut args, true)?;
    let ttl_ms = ttl_of(ttl, limits)?;
    let candidate = checked_owner(candidate)?;
    check_value(value).map_err(|_| ArgError::Value)?;
    Ok(Acquire {
        key,
        owner: candidate,
        ttl_ms,
        reentrant: false,
        wait_ms,
        mode: Mode::Exclusive,
        session: write.session,
        sync: write.sync,
        value: Some(value),
    })
}

/// `LOCK.ACQUIRE`'s options: `REENTRANT`, `WAIT`, `SHARED`, `LIMIT` and the write options, in
/// any order, each once; for an `election` (`LOCK.CAMPAIGN`) `WAIT` and the write options only.
fn acquire_options<A: Deref<Target = [u8]>>(
    args: &mut Args<'_, A>,
    election: bool,
) -> Result<(bool, Option<i64>, Mode, WriteOptions), ArgError> {
    let (mut reentrant, mut wait_ms, mut shared, mut limit) = (false, None, false, None);
    let mut write = WriteOptions::default();
    while let Some(option) = args.next() {
        if write.take(option, args)? {
            continue;
        }
        if is(option, b"WAIT") && wait_ms.is_none() {
            wait_ms = Some(timeout(args.value()?)?);
        } else if election {
            return Err(ArgError::Syntax);
        } else if is(option, b"REENTRANT") && !reentrant {
            reentrant = true;
        } else if is(option, b"SHARED") && !shared {
            shared = true;
        } else if is(option, b"LIMIT") && limit.is_none() {
            limit = Some(limit_of(args.value()?)?);
        } else {
            return Err(ArgError::Syntax);
        }
    }
    let mode = match (shared, limit) {
        (true, limit) => Mode::Shared(limit),
        (false, None) => Mode::Exclusive,
        (false, Some(_)) => return Err(ArgError::Syntax),
    };
    Ok((reentrant, wait_ms, mode, write))
}

/// Parses `LOCK.PROCLAIM key epoch value [SYNC | NOSYNC]` (`with_value`) or `LOCK.RESIGN key
/// epoch`.
///
/// # Errors
/// Arity, syntax (an option other than one `SYNC` or `NOSYNC`), an epoch that is not an integer
/// from 0, the value.
pub fn term<A: Deref<Target = [u8]>>(
    args: &[A],
    with_value: bool,
) -> Result<Term<'_, A>, ArgError> {
    let mut args = Args::new(args);
    let (key, epoch) = (args.required()?, args.required()?);
    let (value, mut sync) = (with_value.then(|| args.required()).transpose()?, None);
    while let Some(option) = args.rest.first().filter(|_| with_value) {
        sync = Some(sync_option(option, sync).ok_or(ArgError::Syntax)?);
        args.next();
    }
    args.done()?;
    let epoch = unsigned(epoch).ok_or(ArgError::NotInteger)?;
    if let Some(value) = value {
        check_value(value).map_err(|_| ArgError::Value)?;
    }
    Ok(Term {
        key,
        epoch,
        value,
        sync,
    })
}

/// Parses `LOCK.OBSERVE key [LAST epoch value] [BLOCK timeout-ms]`: `LAST 0 <any>` says the
/// observer saw nobody lead.
///
/// # Errors
/// Arity, syntax (an unknown or repeated option, `LAST` without both words), an epoch that is
/// not an integer from 0, the value, `BLOCK`'s timeout as `LOCK.ACQUIRE`'s `WAIT`.
pub fn observe<A: Deref<Target = [u8]>>(args: &[A]) -> Result<Observe<'_, A>, ArgError> {
    let mut args = Args::new(args);
    let key = args.required()?;
    let (mut last, mut block_ms) = (None, None);
    while let Some(option) = args.next() {
        if is(option, b"LAST") && last.is_none() {
            let epoch = unsigned(args.value()?).ok_or(ArgError::NotInteger)?;
            let value = args.value()?;
            check_value(value).map_err(|_| ArgError::Value)?;
            last = Some(Seen::new(epoch, value));
        } else if is(option, b"BLOCK") && block_ms.is_none() {
            block_ms = Some(timeout(args.value()?)?);
        } else {
            return Err(ArgError::Syntax);
        }
    }
    Ok(Observe {
        key,
        last,
        block_ms,
    })
}

/// Parses `LOCK.RELEASE key owner`.
///
/// # Errors
/// Arity, the owner.
pub fn release<A: Deref<Target = [u8]>>(args: &[A]) -> Result<Held<'_, A>, ArgError> {
    let mut args = Args::new(args);
    let key = args.required()?;
    let owner = last_owner(&mut args)?;
    Ok(Held {
        key,
        owner,
        ttl_ms: 0,
        session: None,
        sync: None,
    })
}

/// Parses `LOCK.RENEW key owner ttl-ms [SESSION id] [SYNC | NOSYNC]`.
///
/// # Errors
/// Arity, syntax, the session id, the owner, the TTL.
pub fn renew<'a, A: Deref<Target = [u8]>>(
    args: &'a [A],
    limits: &Limits,
) -> Result<Held<'a, A>, ArgError> {
    let mut args = Args::new(args);
    let key = args.required()?;
    let (owner, ttl_ms, WriteOptions { session, sync }) = owner_ttl_and_options(&mut args, limits)?;
    Ok(Held {
        key,
        owner,
        ttl_ms,
        session,
        sync,
    })
}

/// Parses `LOCK.RAISE key owner token`, with tokens up to `max_token` accepted.
///
/// # Errors
/// Arity, the owner, a token that is not an integer from 1 to `max_token`.
pub fn raise<A: Deref<Target = [u8]>>(
    args: &[A],
    max_token: u64,
) -> Result<Raise<'_, A>, ArgError> {
    let mut args = Args::new(args);
    let (key, owner, token) = (args.required()?, args.required()?, args.required()?);
    args.done()?;
    let owner = checked_owner(owner)?;
    let token = unsigned(token)
        .filter(|token| (1..=max_token).contains(token))
        .ok_or(ArgError::Token)?;
    Ok(Raise { key, owner, token })
}

/// Parses `LOCK.FENCE key [owner]`.
///
/// # Errors
/// Arity, the owner.
pub fn fence<A: Deref<Target = [u8]>>(args: &[A]) -> Result<Fence<'_, A>, ArgError> {
    let mut args = Args::new(args);
    let key = args.required()?;
    let owner = args.next();
    args.done()?;
    Ok(Fence {
        key,
        owner: owner.map(checked_owner).transpose()?,
    })
}

/// Parses `LOCK.GUARD key owner [TOKEN token] [SYNC | NOSYNC] command [arg ...]`. The options
/// are the words before the command: a command named `TOKEN`, `SYNC` or `NOSYNC` cannot be
/// guarded (Redis's `SYNC` is refused anyway, as a replication command).
///
/// # Errors
/// Arity, the owner, a token that is not 1 to 2^63 - 1, no command.
pub fn guard<A: Deref<Target = [u8]>>(args: &[A]) -> Result<Guarded<'_, A>, ArgError> {
    let mut args = Args::new(args);
    let (key, owner) = (args.required()?, args.required()?);
    let owner = checked_owner(owner)?;
    guarded(args, key, Some(owner), None)
}

/// Parses `LOCK.FENCED fence token [SYNC | NOSYNC] command [arg ...]`.
///
/// # Errors
/// Arity, a token that is not 1 to 2^63 - 1, no command.
pub fn fenced<A: Deref<Target = [u8]>>(args: &[A]) -> Result<Guarded<'_, A>, ArgError> {
    let mut args = Args::new(args);
    let (key, token) = (args.required()?, args.required()?);
    let token = guard_token(token)?;
    guarded(args, key, None, Some(token))
}

/// The options before a guarded command — `TOKEN token` for `LOCK.GUARD` (no `token` yet),
/// `SYNC` or `NOSYNC`, each at most once — and the command.
fn guarded<'a, A: Deref<Target = [u8]>>(
    mut args: Args<'a, A>,
    key: &'a A,
    owner: Option<&'a A>,
    mut token: Option<u64>,
) -> Result<Guarded<'a, A>, ArgError> {
    let with_token = owner.is_some();
    let mut sync = None;
    loop {
        let Some(word) = args.rest.first() else {
            return Err(ArgError::NoCommand);
        };
        if with_token && token.is_none() && is(word, b"TOKEN") {
            args.next();
            token = Some(guard_token(args.value()?)?);
        } else if let Some(asked) = sync_option(word, sync) {
            args.next();
            sync = Some(asked);
        } else {
            return Ok(Guarded {
                key,
                owner,
                token,
                sync,
                command: args.rest,
            });
        }
    }
}

/// A guarded command's token: 1 to 2^63 - 1.
fn guard_token(token: &[u8]) -> Result<u64, ArgError> {
    unsigned(token)
        .filter(|token| *token > 0)
        .ok_or(ArgError::Token)
}

/// Where the command of `LOCK.GUARD` (`guard`) or `LOCK.FENCED` starts in `args` (counting the
/// command's own name), for Redis's `getkeys-api` request; `None` when the arguments do not
/// parse (the command itself then refuses them).
pub fn guarded_command_at<A: Deref<Target = [u8]>>(args: &[A], guard: bool) -> Option<usize> {
    let parsed = if guard {
        self::guard(args)
    } else {
        fenced(args)
    }
    .ok()?;
    Some(args.len() - parsed.command.len())
}

/// Parses `LOCK.INFO key`: the key.
///
/// # Errors
/// Arity.
pub fn info<A: Deref<Target = [u8]>>(args: &[A]) -> Result<&A, ArgError> {
    let mut args = Args::new(args);
    let key = args.required()?;
    args.done()?;
    Ok(key)
}

/// Parses `LOCK.MACQUIRE numkeys key [key ...] owner ttl-ms [WAIT timeout-ms] [SESSION id]
/// [SYNC | NOSYNC]`.
///
/// # Errors
/// The keys ([`ArgError::NumKeys`] and the rest of [`keys`]), arity, options (`REENTRANT`,
/// `SHARED` and `LIMIT` are not supported by sets), the owner, the TTL.
pub fn macquire<'a, A: Deref<Target = [u8]>>(
    args: &'a [A],
    limits: &Limits,
) -> Result<Set<'a, A>, ArgError> {
    let mut args = Args::new(args);
    let keys = keys_of(&mut args, limits)?;
    let (owner, ttl) = (args.required()?, args.required()?);
    let (mut wait_ms, mut write) = (None, WriteOptions::default());
    while let Some(option) = args.next() {
        if write.take(option, &mut args)? {
            continue;
        }
        if is(option, b"WAIT") && wait_ms.is_none() {
            wait_ms = Some(timeout(args.value()?)?);
        } else if let Some(name) = ["REENTRANT", "SHARED", "LIMIT"]
            .into_iter()
            .find(|name| is(option, name.as_bytes()))
        {
            return Err(ArgError::NotSupported(name));
        } else {
            return Err(ArgError::Syntax);
        }
    }
    let owner = checked_owner(owner)?;
    Ok(Set {
        keys,
        owner,
        ttl_ms: ttl_of(ttl, limits)?,
        wait_ms,
        session: write.session,
        sync: write.sync,
    })
}

/// Parses `LOCK.MRELEASE numkeys key [key ...] owner`.
///
/// # Errors
/// The keys, arity, the owner.
pub fn mrelease<'a, A: Deref<Target = [u8]>>(
    args: &'a [A],
    limits: &Limits,
) -> Result<Set<'a, A>, ArgError> {
    let mut args = Args::new(args);
    let keys = keys_of(&mut args, limits)?;
    let owner = last_owner(&mut args)?;
    Ok(Set {
        keys,
        owner,
        ttl_ms: 0,
        wait_ms: None,
        session: None,
        sync: None,
    })
}

/// Parses `LOCK.MRENEW numkeys key [key ...] owner ttl-ms [SESSION id] [SYNC | NOSYNC]`.
///
/// # Errors
/// The keys, arity, syntax, the session id, the owner, the TTL.
pub fn mrenew<'a, A: Deref<Target = [u8]>>(
    args: &'a [A],
    limits: &Limits,
) -> Result<Set<'a, A>, ArgError> {
    let mut args = Args::new(args);
    let keys = keys_of(&mut args, limits)?;
    let (owner, ttl_ms, WriteOptions { session, sync }) = owner_ttl_and_options(&mut args, limits)?;
    Ok(Set {
        keys,
        owner,
        ttl_ms,
        wait_ms: None,
        session,
        sync,
    })
}

/// `LOCK.SESSION OPEN [GRACE grace-ms]`, `LOCK.SESSION ATTACH id`, `LOCK.SESSION USE <id | NONE>`,
/// `LOCK.SESSION CLOSE id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Session {
    /// Open a session that outlives its connection by `grace_ms` (`None`: the default,
    /// `lock.session-grace-ms`).
    Open {
        /// `GRACE grace-ms`.
        grace_ms: Option<u64>,
    },
    /// Attach the session to this connection (also the clients' heartbeat).
    Attach(session::Id),
    /// Tie what this connection acquires and renews to the session from now on (`None`: to
    /// none, `USE NONE`).
    Use(Option<session::Id>),
    /// End the session now, releasing its holdings.
    Close(session::Id),
    /// The subcommands, as Redis's own container commands list them (`CLIENT HELP`).
    Help,
}

/// Parses `LOCK.SESSION`'s subcommand and its arguments; a grace must be from
/// [`session::MIN_GRACE_MS`] to `max_grace_ms`.
///
/// # Errors
/// Arity, an unknown subcommand, syntax, the grace, the session id.
pub fn session<A: Deref<Target = [u8]>>(
    args: &[A],
    max_grace_ms: u64,
) -> Result<Session, ArgError> {
    let mut args = Args::new(args);
    let subcommand = args.required()?;
    let parsed = if is(subcommand, b"OPEN") {
        let grace_ms = match args.next() {
            None => None,
            Some(option) if is(option, b"GRACE") => Some(
                unsigned(args.value()?)
                    .filter(|grace| (session::MIN_GRACE_MS..=max_grace_ms).contains(grace))
                    .ok_or(ArgError::Grace(session::MIN_GRACE_MS, max_grace_ms))?,
            ),
            Some(_) => return Err(ArgError::Syntax),
        };
        Session::Open { grace_ms }
    } else if is(subcommand, b"ATTACH") {
        Session::Attach(session_id(args.required()?)?)
    } else if is(subcommand, b"USE") {
        let id = args.required()?;
        Session::Use(if is(id, b"NONE") {
            None
        } else {
            Some(session_id(id)?)
        })
    } else if is(subcommand, b"CLOSE") {
        Session::Close(session_id(args.required()?)?)
    } else if is(subcommand, b"HELP") {
        Session::Help
    } else {
        return Err(ArgError::UnknownSubcommand(
            String::from_utf8_lossy(subcommand).into_owned(),
        ));
    };
    args.done()?;
    Ok(parsed)
}

/// The `owner` that ends `LOCK.RELEASE` and `LOCK.MRELEASE`.
fn last_owner<'a, A: Deref<Target = [u8]>>(args: &mut Args<'a, A>) -> Result<&'a A, ArgError> {
    let owner = args.required()?;
    args.done()?;
    checked_owner(owner)
}

/// The options every lock write takes, in any order among its own: `SESSION id`, and `SYNC`
/// or `NOSYNC`.
#[derive(Default)]
struct WriteOptions {
    session: Option<session::Id>,
    sync: Option<bool>,
}

impl WriteOptions {
    /// Takes `option` (and `SESSION`'s id from `args`) when it is one of them and was not given
    /// before: true then.
    ///
    /// # Errors
    /// `SESSION` without an id, or with an invalid one.
    fn take<A: Deref<Target = [u8]>>(
        &mut self,
        option: &[u8],
        args: &mut Args<'_, A>,
    ) -> Result<bool, ArgError> {
        if is(option, b"SESSION") && self.session.is_none() {
            self.session = Some(session_id(args.value()?)?);
        } else if let Some(asked) = sync_option(option, self.sync) {
            self.sync = Some(asked);
        } else {
            return Ok(false);
        }
        Ok(true)
    }
}

/// The `owner ttl-ms [SESSION id] [SYNC | NOSYNC]` that end `LOCK.RENEW` and `LOCK.MRENEW`:
/// arity, the options (in any order), then the owner, then the TTL.
fn owner_ttl_and_options<'a, A: Deref<Target = [u8]>>(
    args: &mut Args<'a, A>,
    limits: &Limits,
) -> Result<(&'a A, i64, WriteOptions), ArgError> {
    let (owner, ttl) = (args.required()?, args.required()?);
    let mut write = WriteOptions::default();
    while let Some(option) = args.next() {
        if !write.take(option, args)? {
            return Err(ArgError::Syntax);
        }
    }
    let owner = checked_owner(owner)?;
    Ok((owner, ttl_of(ttl, limits)?, write))
}

/// `SYNC` (true) or `NOSYNC` (false) when `option` is one and neither came before (`sync`).
fn sync_option(option: &[u8], sync: Option<bool>) -> Option<bool> {
    if sync.is_some() {
        None
    } else if is(option, b"SYNC") {
        Some(true)
    } else if is(option, b"NOSYNC") {
        Some(false)
    } else {
        None
    }
}

/// A session id ([`session::parse_id`]).
fn session_id(id: &[u8]) -> Result<session::Id, ArgError> {
    session::parse_id(id).map_err(ArgError::Session)
}

/// Where the keys of a `numkeys key [key ...]` command are, as positions in `args` (counting
/// the command's name), for Redis's `getkeys-api` request: any arguments, however bad, get an
/// answer (the command itself then refuses them).
pub fn key_positions<A: Deref<Target = [u8]>>(args: &[A]) -> std::ops::RangeInclusive<usize> {
    let numkeys = args
        .get(1)
        .and_then(|numkeys| integer(numkeys))
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    2..=numkeys.saturating_add(1).min(args.len().saturating_sub(1))
}

/// The keys of a `numkeys key [key ...]` command, as `LMPOP` and `SINTERCARD` take them.
fn keys_of<'a, A: Deref<Target = [u8]>>(
    args: &mut Args<'a, A>,
    limits: &Limits,
) -> Result<&'a [A], ArgError> {
    let numkeys = integer(args.required()?)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or(ArgError::NumKeys)?;
    if numkeys > limits.max_keys {
        return Err(ArgError::TooManyKeys(limits.max_keys));
    }
    let keys = args.take(numkeys)?;
    let mut seen = HashSet::with_capacity(numkeys);
    if let Some(twice) = keys.iter().find(|key| !seen.insert(&***key)) {
        return Err(ArgError::DuplicateKey(
            String::from_utf8_lossy(twice).into_owned(),
        ));
    }
    Ok(keys)
}

/// The fence form of `LOCK.APPLY`, `LOCK.APPLY fence FENCE token` (0.7.0): a fence raised to
/// `token` by `LOCK.FENCED`, as a master sends it and an AOF rewrite writes it. `None` for the
/// lock forms ([`apply`]): none of them is four arguments with `FENCE` (upper case, no owner
/// is taken for it here) before an integer, since a lone decimal token needs a hold count.
pub fn apply_fence<A: Deref<Target = [u8]>>(args: &[A]) -> Option<(&A, u64)> {
    match args {
        [_, key, word, token] if **word == *b"FENCE" => Some((key, guard_token(token).ok()?)),
        _ => None,
    }
}

/// Parses `LOCK.APPLY key owner <packed> [VALUE v]`, `LOCK.APPLY key owner token holds
/// [[PXAT] deadline-ms] [SHARED limit] [VALUE v]` (`limit` -1: none) and `LOCK.APPLY key
/// owner DROP`: the forms a master sends and an AOF holds ([`crate::packed`]; 0.2.0 wrote the
/// integers, 0.1.0 `PXAT`; `VALUE`, the value an election's leader proclaims, came with
/// 0.7.0). The holding is checked as a loaded one is; a deadline must be a positive unix time
/// in ms, a shared holding has one, and only an exclusive one has a value.
///
/// # Errors
/// Arity, syntax, integers, [`ArgError::Effect`], [`ArgError::EffectDeadline`].
pub fn apply<A: Deref<Target = [u8]>>(args: &[A]) -> Result<Apply<'_, A>, ArgError> {
    let mut args = Args::new(args);
    let (key, owner, word) = (args.required()?, args.required()?, args.required()?);
    if is(word, b"DROP") {
        args.done()?;
        let effect = Applied::Dropped { owner: &owner[..] };
        return Ok(Apply { key, effect });
    }
    let (token, holds, options) = match packed::unpack(word) {
        Some((token, holds, lease)) => {
            let (mode, deadline_ms) = match lease {
                Lease::Until(deadline) => (Mode::Exclusive, Some(deadline)),
                Lease::Kept => (Mode::Exclusive, None),
                Lease::Shared { deadline_ms, limit } => (Mode::Shared(limit), Some(deadline_ms)),
            };
            let value = effect_value(&mut args)?;
            (token, u64::from(holds), (mode, deadline_ms, value))
        }
        None => {
            let token = unsigned(word).ok_or(ArgError::NotInteger)?;
            let holds = unsigned(args.required()?).ok_or(ArgError::NotInteger)?;
            (token, holds, effect_options(&mut args)?)
        }
    };
    let (mode, deadline_ms, value) = options;
    if deadline_ms.is_some_and(|deadline| deadline <= 0)
        || (deadline_ms.is_none() && mode != Mode::Exclusive)
    {
        return Err(ArgError::EffectDeadline);
    }
    let holding = Holding::from_parts(owner, value, token, holds)
        .filter(|_| value.is_empty() || mode == Mode::Exclusive)
        .ok_or(ArgError::Effect)?;
    let effect = Applied::Holds {
        holding,
        mode,
        deadline_ms,
    };
    Ok(Apply { key, effect })
}

/// The longest replica id (`ip:port`) `LOCK.PROMOTABLE` takes: an IPv6 address and a port with
/// room to spare (`replica-announce-ip` may be a host name, up to 255 bytes).
pub const MAX_REPLICA_ID: usize = 300;

/// The most replicas one `LOCK.PROMOTABLE` lists.
pub const MAX_LISTED: usize = 1_000;

/// Parses `LOCK.PROMOTABLE until-ms timeout-ms [replica ...]`, the message in which a master
/// lists the replicas that may be promoted ([`crate::insync`]): `until-ms` a positive unix time,
/// `timeout-ms` positive, each replica an `ip:port` of at most [`MAX_REPLICA_ID`] bytes, at most
/// [`MAX_LISTED`] of them.
///
/// # Errors
/// Arity, integers, [`ArgError::Replica`].
pub fn promotable<A: Deref<Target = [u8]>>(args: &[A]) -> Result<Promotable, ArgError> {
    let mut args = Args::new(args);
    let positive = |word: &A| {
        unsigned(word)
            .filter(|n| *n > 0)
            .ok_or(ArgError::NotInteger)
    };
    let until_ms = positive(args.required()?)?;
    let timeout_ms = positive(args.required()?)?;
    let (mut listed, mut not_before_ms, mut challenge) = (Vec::new(), None, None);
    let mut master_down_ms = None;
    while let Some(id) = args.next() {
        let id = std::str::from_utf8(id)
            .ok()
            .filter(|id| id.len() <= MAX_REPLICA_ID && id.contains(':'))
            .ok_or(ArgError::Replica)?;
        if let Some(ms) = id.strip_prefix(NOT_BEFORE) {
            not_before_ms = Some(unsigned(ms.as_bytes()).ok_or(ArgError::NotInteger)?);
            continue;
        }
        if let Some(word) = id.strip_prefix(CHALLENGE) {
            challenge = Some(word.to_owned());
            continue;
        }
        if let Some(ms) = id.strip_prefix(MASTER_DOWN) {
            master_down_ms = Some(unsigned(ms.as_bytes()).ok_or(ArgError::NotInteger)?);
            continue;
        }
        if listed.len() == MAX_LISTED {
            return Err(ArgError::Replica);
        }
        listed.push(id.to_owned());
    }
    Ok(Promotable {
        until_ms,
        timeout_ms,
        listed,
        not_before_ms,
        challenge,
        master_down_ms,
    })
}

/// `LOCK.REPLCONF challenge <word> listening-port <port> [ip-address <ip>]`: a replica says
/// to its master that it runs the module ([`crate::insync::checks`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replconf<'a> {
    /// The challenge the replica heard last in the replication stream.
    pub challenge: &'a [u8],
    /// The port the replica announces (`REPLCONF listening-port`).
    pub port: u16,
    /// The address it announces (`replica-announce-ip`), if any.
    pub ip: Option<&'a str>,
}

/// The longest `ip-address` `LOCK.REPLCONF` takes, as `replica-announce-ip` (a host name at
/// most).
pub const MAX_IP_ADDRESS: usize = 255;

/// Parses `LOCK.REPLCONF challenge <word> listening-port <port> [ip-address <ip>]`, options in
/// any order, each once: `port` 1 to 65535, `ip` 1 to [`MAX_IP_ADDRESS`] bytes of UTF-8 without
/// a space or a comma (`INFO replication` separates fields with them).
///
/// # Errors
/// Arity (fewer than 5 arguments), `ERR syntax error` (an option unknown, repeated or missing),
/// integers, [`ArgError::IpAddress`].
pub fn replconf<A: Deref<Target = [u8]>>(args: &[A]) -> Result<Replconf<'_>, ArgError> {
    if args.len() < 5 {
        return Err(ArgError::WrongArity);
    }
    let mut args = Args::new(args);
    let (mut challenge, mut port, mut ip) = (None, None, None);
    while let Some(option) = args.next() {
        let value: &[u8] = args.value()?;
        let slot_taken = if is(option, b"challenge") {
            challenge.replace(value).is_some()
        } else if is(option, b"listening-port") {
            let number = unsigned(value)
                .and_then(|n| u16::try_from(n).ok())
                .filter(|n| *n > 0)
                .ok_or(ArgError::NotInteger)?;
            port.replace(number).is_some()
        } else if is(option, b"ip-address") {
            let text = std::str::from_utf8(value)
                .ok()
                .filter(|ip| (1..=MAX_IP_ADDRESS).contains(&ip.len()))
                .filter(|ip| !ip.contains([' ', ',']))
                .ok_or(ArgError::IpAddress)?;
            ip.replace(text).is_some()
        } else {
            true
        };
        if slot_taken {
            return Err(ArgError::Syntax);
        }
    }
    Ok(Replconf {
        challenge: challenge.ok_or(ArgError::Syntax)?,
        port: port.ok_or(ArgError::Syntax)?,
        ip,
    })
}

/// The integer form's `[[PXAT] deadline-ms] [SHARED limit]`.
fn effect_options<'a, A: Deref<Target = [u8]>>(
    args: &mut Args<'a, A>,
) -> Result<(Mode, Option<i64>, &'a [u8]), ArgError> {
    let (mut deadline_ms, mut mode, mut value) = (None, Mode::Exclusive, &[][..]);
    while let Some(word) = args.next() {
        if is(word, b"SHARED") {
            let limit = integer(args.value()?).ok_or(ArgError::NotInteger)?;
            mode = Mode::Shared(u32::try_from(limit).ok().filter(|n| *n > 0));
        } else if is(word, b"PXAT") {
            deadline_ms = Some(integer(args.value()?).ok_or(ArgError::NotInteger)?);
        } else if is(word, b"VALUE") {
            value = args.value()?;
        } else {
            deadline_ms = Some(integer(word).ok_or(ArgError::Syntax)?);
        }
    }
    Ok((mode, deadline_ms, value))
}

/// A packed effect's `VALUE v` (an election's leader, [`crate::lock::Lock::proclaim`]), if
/// any: empty when absent.
fn effect_value<'a, A: Deref<Target = [u8]>>(args: &mut Args<'a, A>) -> Result<&'a [u8], ArgError> {
    let Some(word) = args.next() else {
        return Ok(&[]);
    };
    if !is(word, b"VALUE") {
        return Err(ArgError::Syntax);
    }
    let value = args.value()?;
    args.done()?;
    Ok(value)
}

/// Reads a 64-bit integer as Redis does (`string2ll`): its decimal form exactly — an optional
/// `-`, then `0` alone or digits not starting with `0` — within `i64`; nothing else.
#[must_use]
pub fn integer(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes.split_first()? {
        (b'-', digits) => (true, digits),
        _ => (false, bytes),
    };
    match digits {
        [] => return None,
        [b'0'] => return (!negative).then_some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    let mut value: i64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(digit - b'0');
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(digit)?
        } else {
            value.checked_add(digit)?
        };
    }
    Some(value)
}

/// A non-negative integer as [`integer`] reads it.
fn unsigned(bytes: &[u8]) -> Option<u64> {
    integer(bytes).and_then(|n| u64::try_from(n).ok())
}

fn is(word: &[u8], option: &[u8]) -> bool {
    word.eq_ignore_ascii_case(option)
}

fn checked_owner<A: Deref<Target = [u8]>>(owner: &A) -> Result<&A, ArgError> {
    check_owner(owner)
        .map(|_| owner)
        .map_err(|_| ArgError::Owner)
}

/// A lease in ms: an integer (checked for being positive when its deadline is computed) within
/// `lock.max-ttl-ms`.
fn ttl_of(ttl: &[u8], limits: &Limits) -> Result<i64, ArgError> {
    let ttl_ms = integer(ttl).ok_or(ArgError::NotInteger)?;
    if limits.max_ttl_ms > 0 && ttl_ms > limits.max_ttl_ms {
        return Err(ArgError::TtlAboveCap(limits.max_ttl_ms));
    }
    Ok(ttl_ms)
}

/// A `LIMIT`: an integer from 1 to 2^31 - 1.
fn limit_of(limit: &[u8]) -> Result<u32, ArgError> {
    integer(limit)
        .filter(|n| (1..=i64::from(i32::MAX)).contains(n))
        .and_then(|n| u32::try_from(n).ok())
        .ok_or(ArgError::NotInteger)
}

/// A `WAIT` timeout in ms: 0 (no limit) or more, as `BLPOP` takes its timeout.
fn timeout(timeout: &[u8]) -> Result<i64, ArgError> {
    match integer(timeout) {
        None => Err(ArgError::TimeoutNotInteger),
        Some(ms) if ms < 0 => Err(ArgError::TimeoutNegative),
        Some(ms) => Ok(ms),
    }
}

#[cfg(test)]
mod tests;
