//! The server's own configuration and `INFO`, read and set through `RedisModule_Call`: what
//! the in-sync set, the deployment it learns and the state file need of Redis's settings.

use redis_module::{Context, RedisValue};

/// The text of a string reply.
pub fn text(value: RedisValue) -> Option<String> {
    match value {
        RedisValue::SimpleString(text) | RedisValue::BulkString(text) => Some(text),
        RedisValue::StringBuffer(bytes) | RedisValue::VerbatimString((_, bytes)) => {
            String::from_utf8(bytes).ok()
        }
        RedisValue::BulkRedisString(string) => string.try_as_str().ok().map(str::to_owned),
        _ => None,
    }
}

/// `CONFIG GET name`'s value.
pub fn get(ctx: &Context, name: &str) -> Option<String> {
    match ctx.call("CONFIG", &["GET", name]).ok()? {
        RedisValue::Array(mut pair) if pair.len() == 2 => text(pair.pop()?),
        _ => None,
    }
}

/// `CONFIG GET name`'s value as an integer.
pub fn integer(ctx: &Context, name: &str) -> Option<i64> {
    get(ctx, name)?.parse().ok()
}

/// `CONFIG SET name value`, logged when refused.
pub fn set(ctx: &Context, name: &str, value: &str) {
    if let Err(error) = ctx.call("CONFIG", &["SET", name, value]) {
        ctx.log_warning(&format!("lock: CONFIG SET {name} {value} failed: {error}"));
    }
}

/// `INFO section`, as text.
pub fn info(ctx: &Context, section: &str) -> Option<String> {
    text(ctx.call("INFO", &[section]).ok()?)
}

/// The value of `name:` in an `INFO` text, trimmed.
pub fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}
