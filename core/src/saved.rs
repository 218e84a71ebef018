//! The saved form of a lock — what the module writes into an RDB file or a `DUMP` payload and
//! reads back at start-up, in a replica's full sync, and from `RESTORE` or `MIGRATE` — and the
//! checks that a lock read from those bytes must pass.
//!
//! The bytes come from outside: anyone allowed to `RESTORE` can craft them, and a damaged disk
//! or network can change them. So [`load`] refuses, with the reason, whatever the module could
//! never have written: not only data that ends early, but also an unknown kind, an empty or
//! oversized owner, a token outside 1..2^53, no holds, a limit that its holders exceed, the
//! same owner twice, a deadline that is not a positive unix time, holders out of token order.
//! What it returns is a lock every command can work on. (Redis's own types do the same for
//! their encodings: `tests/integration/corrupt-dump.tcl` in Redis's repository.)
//!
//! The reads and writes themselves are the server's (`RedisModule_LoadUnsigned` and
//! friends): [`Source`] and [`Sink`] are what the module passes in, so the format is tested and
//! fuzzed here without a server.
//!
//! # Format
//! Encoding version 2: a kind (unsigned: 0 exclusive, 1 shared, 2 an election's leader); for
//! an exclusive lock its owner (string), token and hold count (unsigned); for a leader the same,
//! then the value it proclaims (string, 1 to 64 KiB); for a shared lock its limit (unsigned, 0:
//! none), the number of holders, and per holder in token order its owner, token, hold count
//! and deadline (signed, unix ms). Kind 2 came with elections (0.7.0): a module before it
//! refuses a leader, and loads every other lock. An exclusive lock's lease is the key's expiry, which Redis
//! saves itself. Version 1 (leasehold 0.1.0) held one exclusive lock's owner, token and hold
//! count, with no kind; it still loads. The RDB's auxiliary field is the fencing counter
//! (unsigned).

use std::fmt;

use crate::fence::MAX_TOKEN;
use crate::holders::{Holder, Holders};
use crate::lock::{Holding, Lock, Shared};

/// The encoding this version writes.
pub const ENCODING_VERSION: i32 = 2;

/// The encoding of leasehold 0.1.0: exclusive locks only.
pub const EXCLUSIVE_ONLY_VERSION: i32 = 1;

const EXCLUSIVE: u64 = 0;
const SHARED: u64 = 1;
const LEADER: u64 = 2;

/// Where saved numbers and strings are read from; `None` when the data ends early or cannot
/// be read.
pub trait Source {
    /// A string read, as the source hands it out.
    type Bytes: AsRef<[u8]>;
    /// Reads an unsigned number.
    fn unsigned(&mut self) -> Option<u64>;
    /// Reads a signed number.
    fn signed(&mut self) -> Option<i64>;
    /// Reads a string.
    fn bytes(&mut self) -> Option<Self::Bytes>;
}

/// Where saved numbers and strings are written to.
pub trait Sink {
    /// Writes an unsigned number.
    fn unsigned(&mut self, value: u64);
    /// Writes a signed number.
    fn signed(&mut self, value: i64);
    /// Writes a string.
    fn bytes(&mut self, value: &[u8]);
}

/// Why saved data was refused; nothing was built from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// The data ends before the lock does, or could not be read.
    ShortRead,
    /// An encoding version this module does not know (written by a later one).
    Encoding(i32),
    /// A kind that is neither exclusive nor shared.
    Kind(u64),
    /// An owner of 0 or more than 256 bytes, a token outside 1..2^53, a hold count outside
    /// 1..2^32, or a leader's value empty or longer than 64 KiB.
    Holding,
    /// A limit above 2^32 - 1.
    Limit(u64),
    /// A shared lock with no holders (a free lock has no key).
    NoHolders,
    /// More holders than the lock's limit.
    OverLimit,
    /// The same owner holds twice.
    DuplicateOwner,
    /// A deadline that is not a positive unix time in ms.
    Deadline(i64),
    /// Holders not in token order.
    TokenOrder,
    /// A fencing counter above 2^53 - 1.
    Counter(u64),
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ShortRead => write!(f, "the data ends early"),
            Self::Encoding(version) => write!(f, "unknown encoding version {version}"),
            Self::Kind(kind) => write!(f, "unknown lock kind {kind}"),
            Self::Holding => write!(
                f,
                "an owner, fencing token, hold count or proclaimed value out of range"
            ),
            Self::Limit(limit) => write!(f, "limit {limit} out of range"),
            Self::NoHolders => write!(f, "a shared lock with no holders"),
            Self::OverLimit => write!(f, "more holders than the lock's limit"),
            Self::DuplicateOwner => write!(f, "the same owner holds twice"),
            Self::Deadline(deadline) => write!(f, "lease deadline {deadline} out of range"),
            Self::TokenOrder => write!(f, "holders out of token order"),
            Self::Counter(last) => write!(f, "fencing counter {last} above 2^53 - 1"),
        }
    }
}

/// Writes `lock` in [`ENCODING_VERSION`].
pub fn save(lock: &Lock, sink: &mut impl Sink) {
    match lock {
        Lock::Exclusive(holding) => {
            let value = holding.owner.value();
            sink.unsigned(if value.is_empty() { EXCLUSIVE } else { LEADER });
            save_holding(sink, &holding.owner, holding.token, holding.holds);
            if !value.is_empty() {
                sink.bytes(value);
            }
        }
        Lock::Shared(shared) => {
            sink.unsigned(SHARED);
            sink.unsigned(shared.limit.map_or(0, u64::from));
            sink.unsigned(shared.holders.len() as u64);
            for holder in shared.holders.iter() {
                save_holding(sink, &holder.owner, holder.token, holder.holds);
                sink.signed(holder.deadline_ms);
            }
        }
    }
}

fn save_holding(sink: &mut impl Sink, owner: &[u8], token: u64, holds: u32) {
    sink.bytes(owner);
    sink.unsigned(token);
    sink.unsigned(u64::from(holds));
}

/// Reads a lock saved in encoding `version`.
///
/// # Errors
/// [`Invalid`]: the data ends early, or describes a lock the module could never have written.
pub fn load(version: i32, source: &mut impl Source) -> Result<Lock, Invalid> {
    let kind = match version {
        EXCLUSIVE_ONLY_VERSION => EXCLUSIVE,
        ENCODING_VERSION => read(source.unsigned())?,
        _ => return Err(Invalid::Encoding(version)),
    };
    match kind {
        EXCLUSIVE => Ok(Lock::Exclusive(load_holding(source)?)),
        LEADER => load_leader(source),
        SHARED => load_shared(source),
        _ => Err(Invalid::Kind(kind)),
    }
}

/// Reads the fencing counter saved in encoding `version` (the RDB's auxiliary field).
///
/// # Errors
/// [`Invalid`]: an unknown encoding, no number, or a counter above 2^53 - 1.
pub fn load_counter(version: i32, source: &mut impl Source) -> Result<u64, Invalid> {
    if !matches!(version, EXCLUSIVE_ONLY_VERSION | ENCODING_VERSION) {
        return Err(Invalid::Encoding(version));
    }
    let last = read(source.unsigned())?;
    if last > MAX_TOKEN {
        return Err(Invalid::Counter(last));
    }
    Ok(last)
}

fn read<T>(value: Option<T>) -> Result<T, Invalid> {
    value.ok_or(Invalid::ShortRead)
}

fn load_holding(source: &mut impl Source) -> Result<Holding, Invalid> {
    let owner = read(source.bytes())?;
    let token = read(source.unsigned())?;
    let holds = read(source.unsigned())?;
    Holding::from_parts(owner.as_ref(), b"", token, holds).ok_or(Invalid::Holding)
}

/// An election's leader: a holding, then the value it proclaims (never empty: a leader with
/// none is saved as an exclusive lock).
fn load_leader(source: &mut impl Source) -> Result<Lock, Invalid> {
    let holding = load_holding(source)?;
    let value = read(source.bytes())?;
    let (owner, value) = (&*holding.owner, value.as_ref());
    if value.is_empty() {
        return Err(Invalid::Holding);
    }
    Holding::from_parts(owner, value, holding.token, u64::from(holding.holds))
        .map(Lock::Exclusive)
        .ok_or(Invalid::Holding)
}

fn load_shared(source: &mut impl Source) -> Result<Lock, Invalid> {
    let limit = match read(source.unsigned())? {
        0 => None,
        n => Some(u32::try_from(n).map_err(|_| Invalid::Limit(n))?),
    };
    let count = read(source.unsigned())?;
    if count == 0 {
        return Err(Invalid::NoHolders);
    }
    if limit.is_some_and(|limit| count > u64::from(limit)) {
        return Err(Invalid::OverLimit);
    }
    let mut holders = Holders::default();
    let mut last_token = 0;
    for _ in 0..count {
        let holding = load_holding(source)?;
        let deadline_ms = read(source.signed())?;
        if deadline_ms <= 0 {
            return Err(Invalid::Deadline(deadline_ms));
        }
        if holding.token < last_token {
            return Err(Invalid::TokenOrder);
        }
        if holders.get(&holding.owner).is_some() {
            return Err(Invalid::DuplicateOwner);
        }
        last_token = holding.token;
        holders.insert(Holder::new(
            &holding.owner,
            holding.token,
            holding.holds,
            deadline_ms,
        ));
    }
    Ok(Lock::Shared(Box::new(Shared { limit, holders })))
}

#[cfg(any(test, feature = "fuzzing"))]
pub mod tape;

#[cfg(test)]
mod tests;
