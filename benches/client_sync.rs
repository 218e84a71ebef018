//! What syncing grants to the replicas costs `leasehold-client`, on a master with one replica,
//! beside a plain client (the `redis` crate, no package) sending the same commands, in one run:
//!
//! - one task loops `try_acquire` → `release` (the package), or `LOCK.ACQUIRE` → `LOCK.RELEASE`
//!   on one connection (the plain client), grants synced (the default: `LOCK.ACQUIRE ... SYNC`,
//!   the server replying once its in-sync set has the grant) and not (`Sync::off()`, `NOSYNC`);
//!   and the plain client on a connection bound to a session (`LOCK.SESSION USE`), as the
//!   package's connections are (`plain synced, tied`);
//! - 64 tasks, each on a lock of its own, loop the same; the plain client gives each task a
//!   connection of its own (a synced reply blocks its connection). `synced, 64 sync connections`
//!   is the package with a sync pool as large as the tasks: what the pool's size costs;
//! - the connections the master accepted (`total_connections_received`) over 1 000 synced
//!   acquire + release after warm-up, and over 1 000 acquires that wait in the server (8
//!   workers on 2 locks, `LOCK.ACQUIRE ... WAIT`).
//!
//! The modes take turns over [`ROUNDS`] rounds, so that drift on a shared machine hits each
//! alike; compare them as ratios. Each 64-task row also counts where the time went: this
//! process's CPU time and the master's (`INFO cpu`) per iteration, in µs.
//!
//! Run by `make bench` (`LEASEHOLD_BENCH_URL` names the master); prints one JSON object per
//! line: `{"case": "acquire+release", "mode", "ops_per_s", "p50_ms", "p99_ms"}` (the latency
//! of acquire + release), `{"case": "64 tasks", "mode", "ops_per_s", "client_cpu_us",
//! "server_cpu_us"}` and `{"case": "connections", "what", "opened"}`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use leasehold_client::{Client, ClientOptions, Lock, Sync};
use redis::aio::MultiplexedConnection;

const RUN_FOR: Duration = Duration::from_secs(1);
const ROUNDS: usize = 5;
const TTL: Duration = Duration::from_secs(10);
const TASKS: usize = 64;

/// The 64-task modes, in the order they take turns.
const MANY: [Mode; 5] = [
    Mode::Synced,
    Mode::SyncedWide,
    Mode::NotSynced,
    Mode::PlainSynced,
    Mode::PlainNotSynced,
];

/// Who sends the commands, and how they are synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Mode {
    Synced,
    SyncedWide,
    NotSynced,
    PlainSynced,
    PlainNotSynced,
    PlainTied,
}

impl Mode {
    const fn name(self) -> &'static str {
        match self {
            Self::Synced => "synced",
            Self::SyncedWide => "synced, 64 sync connections",
            Self::NotSynced => "not synced",
            Self::PlainSynced => "plain synced",
            Self::PlainNotSynced => "plain not synced",
            Self::PlainTied => "plain synced, tied",
        }
    }
}

/// What the modes run on: the package's clients and the plain client's connections.
struct Setup {
    client: Client,
    wide: Client,
    plain: Vec<MultiplexedConnection>,
    /// A plain connection bound to a session (`LOCK.SESSION USE`), as the package's are.
    tied: MultiplexedConnection,
}

impl Setup {
    /// One iteration after another for [`RUN_FOR`] on lock `key`: the latency of each.
    async fn loop_for(
        &self,
        mode: Mode,
        key: &str,
        task: usize,
    ) -> leasehold_client::Result<Vec<Duration>> {
        match mode {
            Mode::Synced | Mode::SyncedWide | Mode::NotSynced => {
                let client = if mode == Mode::SyncedWide {
                    &self.wide
                } else {
                    &self.client
                };
                let sync = if mode == Mode::NotSynced {
                    Sync::off()
                } else {
                    Sync::to_replicas()
                };
                package_loop(&Lock::new(client, key).with_sync(sync)).await
            }
            Mode::PlainTied => Ok(plain_loop(&mut self.tied.clone(), key, "SYNC").await?),
            Mode::PlainSynced | Mode::PlainNotSynced => {
                let sync = if mode == Mode::PlainSynced {
                    "SYNC"
                } else {
                    "NOSYNC"
                };
                let mut con = self.plain[task].clone();
                Ok(plain_loop(&mut con, key, sync).await?)
            }
        }
    }
}

#[tokio::main]
async fn main() -> leasehold_client::Result<()> {
    let url =
        std::env::var("LEASEHOLD_BENCH_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::open(&url).await?;
    let wide = Client::open_with(&url, ClientOptions::new().sync_connections(TASKS)).await?;
    let plain_client = redis::Client::open(url.as_str())?;
    let mut plain = Vec::with_capacity(TASKS);
    for _ in 0..TASKS {
        plain.push(plain_client.get_multiplexed_async_connection().await?);
    }
    let mut stats = plain_client.get_multiplexed_async_connection().await?;
    // The session lives while `stats`, which opened it, stays connected.
    let (session, _): (String, u64) = redis::cmd("LOCK.SESSION")
        .arg("OPEN")
        .query_async(&mut stats)
        .await?;
    let mut tied = plain_client.get_multiplexed_async_connection().await?;
    redis::cmd("LOCK.SESSION")
        .arg("USE")
        .arg(&session)
        .exec_async(&mut tied)
        .await?;
    let setup = std::sync::Arc::new(Setup {
        client: client.clone(),
        wide,
        plain,
        tied,
    });

    // `LEASEHOLD_BENCH_MODE=<name>` runs that 64-task mode alone, once, for a profiler to watch.
    if let Ok(name) = std::env::var("LEASEHOLD_BENCH_MODE") {
        let mode = MANY.into_iter().find(|mode| mode.name() == name);
        let mode = mode.expect("LEASEHOLD_BENCH_MODE names a mode");
        let count = run_tasks(&setup, mode).await?;
        println!("{} iterations/s", count as f64 / RUN_FOR.as_secs_f64());
        return Ok(());
    }
    let one = [
        Mode::Synced,
        Mode::NotSynced,
        Mode::PlainSynced,
        Mode::PlainNotSynced,
        Mode::PlainTied,
    ];
    let mut latencies: BTreeMap<Mode, Vec<Duration>> = BTreeMap::new();
    for _ in 0..ROUNDS {
        for mode in one {
            let found = setup.loop_for(mode, "bench:client-sync", 0).await?;
            latencies.entry(mode).or_default().extend(found);
        }
    }
    for (mode, mut samples) in latencies {
        samples.sort_unstable();
        let quantile = |q: f64| {
            let at = ((samples.len() - 1) as f64 * q).round() as usize;
            samples[at].as_secs_f64() * 1_000.0
        };
        println!(
            r#"{{"case": "acquire+release", "mode": "{}", "ops_per_s": {:.0}, "p50_ms": {:.3}, "p99_ms": {:.3}}}"#,
            mode.name(),
            samples.len() as f64 / (RUN_FOR.as_secs_f64() * ROUNDS as f64),
            quantile(0.5),
            quantile(0.99)
        );
    }

    // Iterations, this process's CPU seconds and the master's, per mode.
    let mut done: BTreeMap<Mode, (usize, f64, f64)> = BTreeMap::new();
    for _ in 0..ROUNDS {
        for mode in MANY {
            let (client_cpu, server_cpu) =
                (own_cpu_seconds(), server_cpu_seconds(&mut stats).await?);
            let count = run_tasks(&setup, mode).await?;
            let entry = done.entry(mode).or_default();
            entry.0 += count;
            entry.1 += own_cpu_seconds() - client_cpu;
            entry.2 += server_cpu_seconds(&mut stats).await? - server_cpu;
        }
    }
    for (mode, (count, client_cpu, server_cpu)) in done {
        println!(
            r#"{{"case": "64 tasks", "mode": "{}", "ops_per_s": {:.0}, "client_cpu_us": {:.1}, "server_cpu_us": {:.1}}}"#,
            mode.name(),
            count as f64 / (RUN_FOR.as_secs_f64() * ROUNDS as f64),
            client_cpu * 1e6 / count as f64,
            server_cpu * 1e6 / count as f64,
        );
    }
    connections(&client, &mut stats).await
}

/// [`TASKS`] tasks looping `mode`, each on a lock of its own, for [`RUN_FOR`]: how many
/// iterations they made.
async fn run_tasks(setup: &std::sync::Arc<Setup>, mode: Mode) -> leasehold_client::Result<usize> {
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let setup = std::sync::Arc::clone(setup);
            tokio::spawn(async move {
                let key = format!("bench:task:{task}");
                setup
                    .loop_for(mode, &key, task)
                    .await
                    .map(|done| done.len())
            })
        })
        .collect();
    let mut count = 0;
    for task in tasks {
        count += task.await.expect("a task")?;
    }
    Ok(count)
}

/// Acquire + release of `lock` for [`RUN_FOR`]: the latency of each.
async fn package_loop(lock: &Lock) -> leasehold_client::Result<Vec<Duration>> {
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

/// `LOCK.ACQUIRE key owner ttl <sync>` then `LOCK.RELEASE` on `con` for [`RUN_FOR`]: the
/// latency of each pair.
async fn plain_loop(
    con: &mut MultiplexedConnection,
    key: &str,
    sync: &str,
) -> redis::RedisResult<Vec<Duration>> {
    let mut latencies = Vec::new();
    let started = Instant::now();
    while started.elapsed() < RUN_FOR {
        let sent = Instant::now();
        let _: u64 = redis::cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg("owner")
            .arg(TTL.as_millis() as u64)
            .arg(sync)
            .query_async(con)
            .await?;
        let _: i64 = redis::cmd("LOCK.RELEASE")
            .arg(key)
            .arg("owner")
            .query_async(con)
            .await?;
        latencies.push(sent.elapsed());
    }
    Ok(latencies)
}

/// This process's CPU seconds so far (user + system, from `/proc/self/stat`, in clock ticks
/// of 10 ms).
fn own_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses: utime is the 12th, stime the 13th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |at: usize| {
        fields
            .get(at)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// The master's CPU seconds so far (`used_cpu_user` + `used_cpu_sys`).
async fn server_cpu_seconds(stats: &mut MultiplexedConnection) -> redis::RedisResult<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(stats).await?;
    Ok(info
        .lines()
        .filter(|line| line.starts_with("used_cpu_user:") || line.starts_with("used_cpu_sys:"))
        .filter_map(|line| line.split_once(':')?.1.trim().parse::<f64>().ok())
        .sum())
}

/// The connections the master accepted over 1 000 synced grants and over 1 000 waits.
async fn connections(
    client: &Client,
    stats: &mut MultiplexedConnection,
) -> leasehold_client::Result<()> {
    let lock = Lock::new(client, "bench:connections");
    let before = accepted(stats).await?;
    for _ in 0..1_000 {
        let guard = lock.try_acquire(TTL).await?.expect("a free lock");
        guard.release().await?;
    }
    let opened = accepted(stats).await? - before;
    println!(r#"{{"case": "connections", "what": "1000 synced grants", "opened": {opened}}}"#);

    let before = accepted(stats).await?;
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
    let opened = accepted(stats).await? - before;
    println!(r#"{{"case": "connections", "what": "1000 waits", "opened": {opened}}}"#);
    Ok(())
}

/// The master's `total_connections_received`.
async fn accepted(stats: &mut MultiplexedConnection) -> redis::RedisResult<u64> {
    let info: String = redis::cmd("INFO").arg("stats").query_async(stats).await?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("total_connections_received:"))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0))
}
