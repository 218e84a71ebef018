//! What the benchmarks share: the server's counters, read with `INFO`.

#![allow(dead_code)] // each benchmark reads the counters it reports

use redis::{Connection, RedisResult};

/// The server's CPU seconds so far (`used_cpu_user` + `used_cpu_sys`).
pub fn cpu_seconds(con: &mut Connection) -> RedisResult<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query(con)?;
    Ok(info
        .lines()
        .filter(|line| line.starts_with("used_cpu_user:") || line.starts_with("used_cpu_sys:"))
        .filter_map(|line| line.split_once(':')?.1.trim().parse::<f64>().ok())
        .sum())
}

/// The server's `used_memory`, in bytes.
pub fn used_memory(con: &mut Connection) -> RedisResult<i64> {
    let info: String = redis::cmd("INFO").arg("memory").query(con)?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0))
}
