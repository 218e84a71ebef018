//! What syncing grants to the replicas costs `leasehold-client`, on a master with one replica:
//!
//! - one task loops `try_acquire` → `release` for 3 s, grants synced (the default:
//!   `LOCK.ACQUIRE ... SYNC` on a pooled connection, the server replying once its in-sync set has
//!   the grant) and not (`Sync::off()`: `NOSYNC` on the shared connection);
//! - 64 tasks, each on a lock of its own, loop the same for 3 s, synced and not;
//! - the connections the master accepted (`total_connections_received`) over 1 000 synced
//!   acquire + release after warm-up, and over 1 000 acquires that wait in the server (8
//!   workers on 2 locks, `LOCK.ACQUIRE ... WAIT`).
//!
//! Run by `make bench` (`LEASEHOLD_BENCH_URL` names the master); prints one JSON object per
//! line: `{"case": "acquire+release", "mode", "ops_per_s", "p50_ms", "p99_ms"}` (the latency
//! of acquire + release), `{"case": "64 tasks", "mode", "ops_per_s"}` and
//! `{"case": "connections", "what", "opened"}`.

use std::time::{Duration, Instant};

use leasehold_client::{Client, Lock, Sync};

const RUN_FOR: Duration = Duration::from_secs(3);
const TTL: Duration = Duration::from_secs(10);
const TASKS: usize = 64;

#[tokio::main]
async fn main() -> leasehold_client::Result<()> {
    let url =
        std::env::var("LEASEHOLD_BENCH_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::open(&url).await?;
    let modes = [("synced", Sync::to_replicas()), ("not synced", Sync::off())];
    for (mode, sync) in modes {
        let lock = Lock::new(&client, "bench:client-sync").with_sync(sync);
        let mut latencies = loop_for(&lock).await?;
        latencies.sort_unstable();
        let quantile = |q: f64| {
            let at = ((latencies.len() - 1) as f64 * q).round() as usize;
            latencies[at].as_secs_f64() * 1_000.0
        };
        println!(
            r#"{{"case": "acquire+release", "mode": "{mode}", "ops_per_s": {:.0}, "p50_ms": {:.3}, "p99_ms": {:.3}}}"#,
            latencies.len() as f64 / RUN_FOR.as_secs_f64(),
            quantile(0.5),
            quantile(0.99)
        );
    }
    for (mode, sync) in modes {
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let lock = Lock::new(&client, &format!("bench:task:{task}")).with_sync(sync);
                tokio::spawn(async move { loop_for(&lock).await.map(|done| done.len()) })
            })
            .collect();
        let mut done = 0;
        for task in tasks {
            done += task.await.expect("a task")?;
        }
        println!(
            r#"{{"case": "64 tasks", "mode": "{mode}", "ops_per_s": {:.0}}}"#,
            done as f64 / RUN_FOR.as_secs_f64()
        );
    }
    connections(&client, &url).await
}

/// Acquire + release of `lock` for [`RUN_FOR`]: the latency of each.
async fn loop_for(lock: &Lock) -> leasehold_client::Result<Vec<Duration>> {
    let mut latencies = Vec::new();
    let started = Instant::now();
    while started.elapsed() < RUN_FOR {
        let sent = Instant::now();
        let guard = lock.try_acquire(TTL).await?.expect("a free lock");
        guard.release().await?;
        latencies.push(sent.elapsed());
    }
    Ok(latencies)
}

/// The connections the master accepted over 1 000 synced grants and over 1 000 waits.
async fn connections(client: &Client, url: &str) -> leasehold_client::Result<()> {
    let mut stats = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let lock = Lock::new(client, "bench:connections");
    let before = accepted(&mut stats).await?;
    for _ in 0..1_000 {
        let guard = lock.try_acquire(TTL).await?.expect("a free lock");
        guard.release().await?;
    }
    let opened = accepted(&mut stats).await? - before;
    println!(r#"{{"case": "connections", "what": "1000 synced grants", "opened": {opened}}}"#);

    let before = accepted(&mut stats).await?;
    let workers: Vec<_> = (0..8)
        .map(|worker| {
            let lock = Lock::new(client, &format!("bench:waits:{}", worker % 2));
            tokio::spawn(async move {
                for _ in 0..125 {
                    let wait = Duration::from_secs(30);
                    let guard = lock.acquire_timeout(TTL, wait).await?.expect("granted");
                    guard.release().await?;
                }
                Ok::<_, leasehold_client::Error>(())
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("a worker")?;
    }
    let opened = accepted(&mut stats).await? - before;
    println!(r#"{{"case": "connections", "what": "1000 waits", "opened": {opened}}}"#);
    Ok(())
}

/// The master's `total_connections_received`.
async fn accepted(stats: &mut redis::aio::MultiplexedConnection) -> redis::RedisResult<u64> {
    let info: String = redis::cmd("INFO").arg("stats").query_async(stats).await?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("total_connections_received:"))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0))
}
