//! What a session costs `LOCK.ACQUIRE` on the server, three ways:
//! - no session (the baseline);
//! - `SESSION id` on every command;
//! - each connection bound once with `LOCK.SESSION USE id`, its commands as the baseline's (what
//!   the clients do).
//!
//! Two workloads: free keys (random names among 10^8, so every acquire is granted and every tie
//! kept, the most the session's log holds), and `LOCK.ACQUIRE` and `LOCK.RELEASE` side by side
//! on 100 000 keys (each batch alternates them, on random keys), where ties are made and freed
//! as locks come and go.
//!
//! 4 connections pipeline batches of 64 commands for 0.5 s; 45 rounds, the three ways taking
//! turns (each goes first in a third of the rounds), each run on an empty keyspace with a session
//! of its own, closed and flushed after. The difference is small beside this machine's drift,
//! hence many short rounds. Reports the median ops/s, the median of the per-round throughput
//! ratios to the baseline with the middle half of them, the server's CPU time per command
//! (`INFO cpu`) and the median of the per-round ratios of the baseline's CPU time to it (above 1
//! when cheaper).
//!
//! Then memory: what 100 000 free locks acquired each way add to `used_memory`, per lock (a
//! tied holding's entry in its session's log, beside the lock).
//!
//! Run by `make bench` (`LEASEHOLD_BENCH_URL` names the server); prints Markdown rows.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis::{Connection, RedisResult};

use common::{cpu_seconds, used_memory};

/// A 38-byte owner, as Redisson's `UUID:threadId`.
const OWNER: &str = "8d3c2f4e-1b2a-4c5d-9e8f-0a1b2c3d4e5f:1";
const LEASE_MS: u64 = 30_000;
const CONNECTIONS: usize = 4;
const BATCH: usize = 64;
const RUN: Duration = Duration::from_millis(500);
const ROUNDS: usize = 45;
/// So many names that nearly every key is free.
const FREE_KEYS: u64 = 100_000_000;
/// The keys of acquires and releases side by side.
const CHURN_KEYS: u64 = 100_000;
/// The batches of free locks whose memory is measured ([`memory`]): 100 032 locks.
const MEMORY_BATCHES: u64 = 1_563;

/// How a run's commands are tied to the session.
#[derive(Clone, Copy, PartialEq)]
enum Tie {
    /// Not at all: the baseline.
    None,
    /// `SESSION id` on every command.
    Named,
    /// The connection bound with `LOCK.SESSION USE id` before its first command.
    Used,
}

impl Tie {
    const ALL: [Self; 3] = [Self::None, Self::Named, Self::Used];

    fn name(self) -> &'static str {
        match self {
            Self::None => "no session",
            Self::Named => "`SESSION id` on every command",
            Self::Used => "`LOCK.SESSION USE id` once per connection",
        }
    }
}

/// What a run's batches hold.
#[derive(Clone, Copy)]
enum Workload {
    /// `LOCK.ACQUIRE` of free keys.
    Free,
    /// `LOCK.ACQUIRE` and `LOCK.RELEASE` alternating, on [`CHURN_KEYS`] keys.
    Churn,
}

impl Workload {
    fn name(self) -> String {
        match self {
            Self::Free => "acquire free locks, every tie kept".into(),
            Self::Churn => format!("acquire and release side by side, {CHURN_KEYS} keys"),
        }
    }

    /// Appends a batch of [`BATCH`] commands to `pipe`, each naming `session` when given.
    fn batch(self, pipe: &mut redis::Pipeline, random: &mut StdRng, session: Option<&str>) {
        for n in 0..BATCH {
            let release = matches!(self, Self::Churn) && n % 2 == 1;
            let keys = match self {
                Self::Free => FREE_KEYS,
                Self::Churn => CHURN_KEYS,
            };
            let key = format!("k:{}", random.random_range(0..keys));
            if release {
                pipe.cmd("LOCK.RELEASE").arg(key).arg(OWNER);
                continue;
            }
            pipe.cmd("LOCK.ACQUIRE").arg(key).arg(OWNER).arg(LEASE_MS);
            if let Some(id) = session {
                pipe.arg("SESSION").arg(id);
            }
        }
    }
}

/// A connection whose commands are tied to session `id` as `tie` says: bound to it first for
/// [`Tie::Used`]. Returns it with the id its commands name ([`Tie::Named`]).
fn connect<'a>(url: &str, tie: Tie, id: &'a str) -> RedisResult<(Connection, Option<&'a str>)> {
    let mut con = redis::Client::open(url)?.get_connection()?;
    if tie == Tie::Used {
        redis::cmd("LOCK.SESSION")
            .arg("USE")
            .arg(id)
            .exec(&mut con)?;
    }
    Ok((con, (tie == Tie::Named).then_some(id)))
}

/// Empties the keyspace and opens a session on `admin` for a run: its id.
fn open(admin: &mut Connection) -> RedisResult<String> {
    redis::cmd("FLUSHALL").exec(admin)?;
    let (id, _grace): (String, u64) = redis::cmd("LOCK.SESSION").arg("OPEN").query(admin)?;
    Ok(id)
}

/// One connection's part of a run: batches until `stop`, counting commands in `done`.
fn load(
    url: &str,
    seed: u64,
    workload: Workload,
    tie: Tie,
    id: &str,
    stop: &AtomicBool,
    done: &AtomicU64,
) -> RedisResult<()> {
    let (mut con, named) = connect(url, tie, id)?;
    let mut random = StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::Relaxed) {
        let mut pipe = redis::pipe();
        workload.batch(&mut pipe, &mut random, named);
        pipe.exec(&mut con)?;
        done.fetch_add(BATCH as u64, Ordering::Relaxed);
    }
    Ok(())
}

/// (commands/s, server CPU µs per command) of one run, on an empty keyspace with a session of
/// its own (opened on `admin`, closed after), which `tie` says how the commands use.
fn run(url: &str, admin: &mut Connection, workload: Workload, tie: Tie) -> RedisResult<(f64, f64)> {
    let id = open(admin)?;
    let cpu = cpu_seconds(admin)?;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..CONNECTIONS as u64)
        .map(|n| {
            let (url, id, stop, done) = (
                url.to_owned(),
                id.clone(),
                Arc::clone(&stop),
                Arc::clone(&done),
            );
            thread::spawn(move || load(&url, n + 1, workload, tie, &id, &stop, &done))
        })
        .collect();
    thread::sleep(RUN);
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.join().unwrap_or(Ok(()))?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let count = done.load(Ordering::Relaxed) as f64;
    let cpu_us = (cpu_seconds(admin)? - cpu) * 1e6 / count.max(1.0);
    redis::cmd("LOCK.SESSION")
        .arg("CLOSE")
        .arg(&id)
        .exec(admin)?;
    Ok((count / elapsed, cpu_us))
}

/// What each lock adds to `used_memory`, in bytes, when [`MEMORY_BATCHES`] batches of free
/// locks are acquired on one connection tied as `tie` says, on an empty keyspace with a
/// session of its own.
fn memory(url: &str, admin: &mut Connection, tie: Tie) -> RedisResult<f64> {
    let id = open(admin)?;
    let (mut con, named) = connect(url, tie, &id)?;
    let before = used_memory(admin)?;
    let mut random = StdRng::seed_from_u64(7);
    for _ in 0..MEMORY_BATCHES {
        let mut pipe = redis::pipe();
        Workload::Free.batch(&mut pipe, &mut random, named);
        pipe.exec(&mut con)?;
    }
    let grown = used_memory(admin)? - before;
    redis::cmd("LOCK.SESSION")
        .arg("CLOSE")
        .arg(&id)
        .exec(admin)?;
    Ok(grown as f64 / (MEMORY_BATCHES * BATCH as u64) as f64)
}

/// The value at `fraction` of `samples` (sorted here).
fn percentile(samples: &[f64], fraction: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() as f64 * fraction) as usize).min(sorted.len() - 1)]
}

fn main() -> RedisResult<()> {
    let url =
        std::env::var("LEASEHOLD_BENCH_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let mut admin = redis::Client::open(url.as_str())?.get_connection()?;
    println!(
        "| workload | how | ops/s | vs no session | middle half of the rounds | server CPU µs per command | CPU ratio |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for workload in [Workload::Free, Workload::Churn] {
        // samples[way][round]: (ops/s, CPU µs per command).
        let mut samples = vec![Vec::new(); Tie::ALL.len()];
        for round in 0..ROUNDS {
            for turn in 0..Tie::ALL.len() {
                let at = (turn + round) % Tie::ALL.len();
                samples[at].push(run(&url, &mut admin, workload, Tie::ALL[at])?);
            }
        }
        for (tie, runs) in Tie::ALL.iter().zip(&samples) {
            let rates: Vec<f64> = runs.iter().map(|run| run.0).collect();
            let cpu: Vec<f64> = runs.iter().map(|run| run.1).collect();
            let ratios: Vec<f64> = runs
                .iter()
                .zip(&samples[0])
                .map(|(ours, baseline)| ours.0 / baseline.0)
                .collect();
            let cpu_ratios: Vec<f64> = runs
                .iter()
                .zip(&samples[0])
                .map(|(ours, baseline)| baseline.1 / ours.1)
                .collect();
            println!(
                "| {} | {} | {:.0} | **{:.2}×** | {:.2}×–{:.2}× | {:.2} | {:.2}× |",
                workload.name(),
                tie.name(),
                percentile(&rates, 0.5),
                percentile(&ratios, 0.5),
                percentile(&ratios, 0.25),
                percentile(&ratios, 0.75),
                percentile(&cpu, 0.5),
                percentile(&cpu_ratios, 0.5),
            );
        }
    }
    println!();
    println!("| how | `used_memory` per lock, bytes | vs no session |");
    println!("| --- | ---: | ---: |");
    let baseline = memory(&url, &mut admin, Tie::None)?;
    for tie in Tie::ALL {
        let bytes = memory(&url, &mut admin, tie)?;
        println!("| {} | {bytes:.0} | {:.2}× |", tie.name(), bytes / baseline);
    }
    Ok(())
}
