//! The core's answers as Redis replies: tokens as integers, refusals as Redis-style errors
//! (`TRYAGAIN` for what may succeed if repeated shortly, as Redis Cluster uses it).

use leasehold_core::args::ArgError;
use leasehold_core::election::Leadership;
use leasehold_core::fence::{self, Delay};
use leasehold_core::outcome::Refusal;
use redis_module::{RedisError, RedisValue, redisvalue::RedisValueKey};

/// A fencing token as Redis replies it: an integer, exact below 2^53.
#[must_use]
pub fn token(token: u64) -> RedisValue {
    RedisValue::Integer(fence::as_integer(token))
}

/// A set's fencing tokens (`LOCK.MACQUIRE`): an array, in the order of its keys.
#[must_use]
pub fn tokens(tokens: &[u64]) -> RedisValue {
    RedisValue::Array(tokens.iter().copied().map(token).collect())
}

/// The error reply for `refusal` of `command` (lower case, as Redis names commands in errors).
#[must_use]
pub fn refusal(refusal: Refusal, command: &str) -> RedisError {
    let shown = |limit: Option<u32>| limit.map_or_else(|| "none".to_owned(), |n| n.to_string());
    RedisError::String(match refusal {
        Refusal::LimitDiffers { asked, lock } => format!(
            "ERR LIMIT {} differs from the lock's {}",
            shown(asked),
            shown(lock)
        ),
        Refusal::TooSoon {
            retry_in_ms,
            starting: None,
        } => format!(
            "TRYAGAIN fencing tokens are ahead of this server's clock; retry in {retry_in_ms} ms"
        ),
        Refusal::TooSoon {
            retry_in_ms,
            starting: Some(Delay::LostLeases),
        } => format!(
            "TRYAGAIN the server restarted without the data of leases it granted, which may \
             still run (INFO lock: lock_restart_wait_until_ms); retry in {retry_in_ms} ms"
        ),
        Refusal::TooSoon {
            retry_in_ms,
            starting: Some(Delay::Configured),
        } => format!(
            "TRYAGAIN the server started within lock.restart-delay-ms; retry in {retry_in_ms} ms"
        ),
        Refusal::Exhausted => "ERR fencing tokens exhausted: 2^53 reached".to_owned(),
        Refusal::InvalidExpire => format!("ERR invalid expire time in '{command}' command"),
        Refusal::SlotMoved => {
            "TRYAGAIN the lock's slot moved to another node while waiting".to_owned()
        }
    })
}

/// The error reply for arguments the core's parsers refused ([`leasehold_core::args`]); Redis
/// words a wrong number of arguments itself.
#[must_use]
pub fn arg_error(error: ArgError) -> RedisError {
    match error {
        ArgError::WrongArity => RedisError::WrongArity,
        other => RedisError::String(other.to_string()),
    }
}

/// A reply map with fields in this order (RESP3 map, RESP2 flat array).
#[must_use]
pub fn map<const N: usize>(fields: [(&'static str, RedisValue); N]) -> RedisValue {
    RedisValue::OrderedMap(
        fields
            .into_iter()
            .map(|(field, value)| (RedisValueKey::from(field), value))
            .collect(),
    )
}

/// Who leads an election, as `LOCK.LEADER` and `LOCK.OBSERVE` reply it: a map of `leader` (the
/// candidate; null when nobody leads), `epoch` (its term's fencing token; 0 when nobody
/// leads), `value` (what it proclaims; empty when nobody leads) and `ttl` (its lease left in
/// ms; `-1` when someone made the key persistent, `-2` when nobody leads, as `PTTL` words
/// them). `ttl_ms` is the key's, `None` when it has no expiry.
#[must_use]
pub fn leadership(now: Leadership, ttl_ms: Option<i64>) -> RedisValue {
    match now {
        Leadership::Nobody => map([
            ("leader", RedisValue::Null),
            ("epoch", RedisValue::Integer(0)),
            ("value", RedisValue::StringBuffer(Vec::new())),
            ("ttl", RedisValue::Integer(-2)),
        ]),
        Leadership::Leader(holding) => map([
            ("leader", RedisValue::StringBuffer(holding.owner.to_vec())),
            ("epoch", token(holding.token)),
            (
                "value",
                RedisValue::StringBuffer(holding.owner.value().to_vec()),
            ),
            ("ttl", RedisValue::Integer(ttl_ms.unwrap_or(-1))),
        ]),
    }
}
