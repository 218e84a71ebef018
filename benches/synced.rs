//! What a synced write costs a plain client (the `redis` crate, no package), on a master with
//! one replica, side by side in one run:
//!
//! - `unsynced`: `LOCK.ACQUIRE key owner ttl NOSYNC`, then `LOCK.RELEASE`;
//! - `server-side`: `LOCK.ACQUIRE key owner ttl SYNC` (the server replies once the in-sync set
//!   has the grant), then `LOCK.RELEASE`;
//! - `client-side`: the protocol the packages ran before: `LOCK.ACQUIRE ... NOSYNC`,
//!   `LOCK.INSYNC`, `WAIT 1 1000`, `LOCK.INSYNC` in one round trip, the rule checked, then
//!   `LOCK.RELEASE`;
//! - the floor: `SET key value`, and `SET key value` + `WAIT 1 1000` in one round trip (what one
//!   replica acknowledgement costs with nothing of the module's in the way).
//!
//! One task loops each for [`RUN_FOR`] (the latency of each iteration); then 64 tasks, each on a
//! connection and a lock of its own, loop the lock modes for [`RUN_FOR`] (the throughput).
//! Modes alternate in [`ROUNDS`] rounds so that drift hits each alike. Run by `make bench`
//! (`LEASEHOLD_BENCH_URL` names the master); prints one JSON object per line:
//! `{"case": "one task", "mode", "ops_per_s", "p50_ms", "p99_ms"}` and
//! `{"case": "64 tasks", "mode", "ops_per_s"}`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{RedisResult, Value};

const RUN_FOR: Duration = Duration::from_secs(1);
const ROUNDS: usize = 5;
const TASKS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Mode {
    Unsynced,
    ServerSide,
    ClientSide,
    Set,
    SetWait,
}

impl Mode {
    const fn name(self) -> &'static str {
        match self {
            Self::Unsynced => "unsynced",
            Self::ServerSide => "server-side",
            Self::ClientSide => "client-side",
            Self::Set => "SET",
            Self::SetWait => "SET + WAIT 1",
        }
    }
}

#[tokio::main]
async fn main() -> RedisResult<()> {
    let url =
        std::env::var("LEASEHOLD_BENCH_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redis::Client::open(url)?;
    let modes = [
        Mode::Unsynced,
        Mode::ServerSide,
        Mode::ClientSide,
        Mode::Set,
        Mode::SetWait,
    ];
    let mut con = client.get_multiplexed_async_connection().await?;
    let mut latencies: BTreeMap<Mode, Vec<Duration>> = BTreeMap::new();
    for _ in 0..ROUNDS {
        for mode in modes {
            latencies
                .entry(mode)
                .or_default()
                .extend(loop_for(&mut con, mode, "bench:synced").await?);
        }
    }
    for (mode, mut samples) in latencies {
        samples.sort_unstable();
        let quantile = |q: f64| {
            let at = ((samples.len() - 1) as f64 * q).round() as usize;
            samples[at].as_secs_f64() * 1_000.0
        };
        println!(
            r#"{{"case": "one task", "mode": "{}", "ops_per_s": {:.0}, "p50_ms": {:.4}, "p99_ms": {:.4}}}"#,
            mode.name(),
            samples.len() as f64 / (RUN_FOR.as_secs_f64() * ROUNDS as f64),
            quantile(0.5),
            quantile(0.99)
        );
    }
    let mut connections = Vec::with_capacity(TASKS);
    for _ in 0..TASKS {
        connections.push(client.get_multiplexed_async_connection().await?);
    }
    let mut done: BTreeMap<Mode, usize> = BTreeMap::new();
    for _ in 0..ROUNDS {
        for mode in [Mode::Unsynced, Mode::ServerSide, Mode::ClientSide] {
            let tasks: Vec<_> = connections
                .iter()
                .enumerate()
                .map(|(task, con)| {
                    let mut con = con.clone();
                    tokio::spawn(async move {
                        let key = format!("bench:synced:{task}");
                        loop_for(&mut con, mode, &key).await.map(|done| done.len())
                    })
                })
                .collect();
            for task in tasks {
                *done.entry(mode).or_default() += task.await.expect("a task")?;
            }
        }
    }
    for (mode, done) in done {
        println!(
            r#"{{"case": "64 tasks", "mode": "{}", "ops_per_s": {:.0}}}"#,
            mode.name(),
            done as f64 / (RUN_FOR.as_secs_f64() * ROUNDS as f64)
        );
    }
    Ok(())
}

/// One `mode` iteration after another on `key` for [`RUN_FOR`]: the latency of each.
async fn loop_for(
    con: &mut MultiplexedConnection,
    mode: Mode,
    key: &str,
) -> RedisResult<Vec<Duration>> {
    let mut latencies = Vec::new();
    let started = Instant::now();
    while started.elapsed() < RUN_FOR {
        let sent = Instant::now();
        once(con, mode, key).await?;
        latencies.push(sent.elapsed());
    }
    Ok(latencies)
}

/// One iteration: a grant and its release, or the floor's write.
async fn once(con: &mut MultiplexedConnection, mode: Mode, key: &str) -> RedisResult<()> {
    let acquire = |sync: &str| {
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg(key).arg("owner").arg(10_000).arg(sync);
        cmd
    };
    match mode {
        Mode::Unsynced | Mode::ServerSide => {
            let sync = if mode == Mode::Unsynced {
                "NOSYNC"
            } else {
                "SYNC"
            };
            let _: i64 = acquire(sync).query_async(con).await?;
        }
        Mode::ClientSide => {
            type InSync = (u64, u64, u64, u64, String, String);
            let (_, before, _, after): (i64, InSync, i64, InSync) = redis::pipe()
                .add_command(acquire("NOSYNC"))
                .cmd("LOCK.INSYNC")
                .cmd("WAIT")
                .arg(1)
                .arg(1_000)
                .cmd("LOCK.INSYNC")
                .query_async(con)
                .await?;
            assert!(after.2 >= after.3 && after.1 >= before.0, "counted");
        }
        Mode::Set => {
            let _: Value = redis::cmd("SET")
                .arg(format!("{key}:floor"))
                .arg("v")
                .query_async(con)
                .await?;
            return Ok(());
        }
        Mode::SetWait => {
            let (_, acked): (Value, i64) = redis::pipe()
                .cmd("SET")
                .arg(format!("{key}:floor"))
                .arg("v")
                .cmd("WAIT")
                .arg(1)
                .arg(1_000)
                .query_async(con)
                .await?;
            assert_eq!(acked, 1, "the replica acknowledged");
            return Ok(());
        }
    }
    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg("owner")
        .query_async(con)
        .await?;
    Ok(())
}
