//! Sets of locks: `LOCK.MACQUIRE` against taking the locks one by one.
//!
//! First, free keys: one unit is taking K free locks (K = 2, 8) and releasing them, by
//! - `LOCK.MACQUIRE` + `LOCK.MRELEASE` (two round trips);
//! - K `LOCK.ACQUIRE` pipelined, then K `LOCK.RELEASE` pipelined (two round trips; not atomic);
//! - Redisson's `RedissonMultiLock`: its lock script once per key, in order, each a round trip
//!   (`tryLock` lock by lock), then its unlock script for every key, pipelined.
//!
//! 4 connections loop units for 1.5 s; medians of 3 rounds, the approaches taking turns. Also
//! the server's CPU time per unit (`INFO cpu`).
//!
//! Then contention: 16 clients on 8 keys, each looping take a random pair (in random order) →
//! 100 µs → release, for 3 s, by `LOCK.MACQUIRE ... WAIT` and one by one as
//! `RedissonMultiLock.lock()` does it: each key with a wait of up to K × 1.5 s in all
//! (`LOCK.ACQUIRE ... WAIT`, fair per key), and when one does not come in time, release the ones
//! held and start again. Reports sets/s, the wait from asking to holding the pair (p50, p99),
//! the longest wait — counting waits still unanswered when the run ends — over the fair share
//! ((clients - 1) × the mean time between grants of `LOCK.MACQUIRE`'s run, which does not
//! deadlock; `benches/contention.rs` uses the same measure), how often a client gave up a pair
//! half held, and stalls: waits (also unanswered ones) longer than 10 × the fair share.
//!
//! Run by `make bench` (`LEASEHOLD_BENCH_URL` names the server); prints Markdown rows.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::cpu_seconds;

const LEASE_MS: u64 = 10_000;
const OWNER: &str = "8d3c2f4e-1b2a-4c5d-9e8f-0a1b2c3d4e5f:1";
const CONNECTIONS: usize = 4;
const UNIT_RUN: Duration = Duration::from_millis(1_500);
const ROUNDS: usize = 3;
const CLIENTS: usize = 16;
const KEYS: usize = 8;
const CRITICAL_SECTION: Duration = Duration::from_micros(100);
const CONTENTION_RUN: Duration = Duration::from_secs(3);
/// `RedissonMultiLock.lock()`'s wait for a whole set: 1.5 s per lock.
const MULTILOCK_WAIT_PER_KEY_MS: u64 = 1_500;

/// Redisson's `RedissonLock.tryLockInnerAsync`: a hash of owner → hold count, with a TTL.
/// ARGV: lease ms, owner. Null when taken.
const REDISSON_LOCK: &str = "if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
     redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; \
     return redis.call('pttl', KEYS[1]);";
/// Redisson's `RedissonLock.unlockInnerAsync`. KEYS: lock, channel. ARGV: message, lease ms,
/// owner.
const REDISSON_UNLOCK: &str = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; \
     local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
     if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; \
     else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end; return nil;";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Approach {
    Set,
    Pipelined,
    Redisson,
}

impl Approach {
    fn name(self, keys: usize) -> String {
        match self {
            Self::Set => "`LOCK.MACQUIRE` + `LOCK.MRELEASE`".into(),
            Self::Pipelined => {
                format!("{keys} × `LOCK.ACQUIRE` + {keys} × `LOCK.RELEASE`, pipelined")
            }
            Self::Redisson => format!(
                "Redisson `RedissonMultiLock`: {keys} lock scripts in turn, unlocks pipelined"
            ),
        }
    }
}

/// A small xorshift for random key names.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One unit of `approach`: take `keys` (free) and release them.
fn unit(
    con: &mut redis::Connection,
    approach: Approach,
    keys: &[String],
    scripts: &(String, String),
) -> redis::RedisResult<()> {
    match approach {
        Approach::Set => {
            let tokens: Option<Vec<i64>> = redis::cmd("LOCK.MACQUIRE")
                .arg(keys.len())
                .arg(keys)
                .arg(OWNER)
                .arg(LEASE_MS)
                .query(con)?;
            assert!(tokens.is_some(), "free keys");
            redis::cmd("LOCK.MRELEASE")
                .arg(keys.len())
                .arg(keys)
                .arg(OWNER)
                .exec(con)
        }
        Approach::Pipelined => {
            let mut acquire = redis::pipe();
            for key in keys {
                acquire
                    .cmd("LOCK.ACQUIRE")
                    .arg(key)
                    .arg(OWNER)
                    .arg(LEASE_MS);
            }
            acquire.exec(con)?;
            let mut release = redis::pipe();
            for key in keys {
                release.cmd("LOCK.RELEASE").arg(key).arg(OWNER);
            }
            release.exec(con)
        }
        Approach::Redisson => {
            for key in keys {
                let busy: Option<i64> = redis::cmd("EVALSHA")
                    .arg(&scripts.0)
                    .arg(1)
                    .arg(key)
                    .arg(LEASE_MS)
                    .arg(OWNER)
                    .query(con)?;
                assert!(busy.is_none(), "free keys");
            }
            let mut release = redis::pipe();
            for key in keys {
                release
                    .cmd("EVALSHA")
                    .arg(&scripts.1)
                    .arg(2)
                    .arg(key)
                    .arg(format!("redisson_lock__channel:{key}"))
                    .arg(0)
                    .arg(LEASE_MS)
                    .arg(OWNER);
            }
            release.exec(con)
        }
    }
}

/// (units/s, server CPU µs per unit) of `approach` on sets of `keys` free keys.
fn units(
    url: &str,
    approach: Approach,
    keys: usize,
    scripts: &(String, String),
) -> redis::RedisResult<(f64, f64)> {
    let mut admin = redis::Client::open(url)?.get_connection()?;
    let cpu = cpu_seconds(&mut admin)?;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..CONNECTIONS)
        .map(|n| {
            let (url, stop, done, scripts) = (
                url.to_owned(),
                Arc::clone(&stop),
                Arc::clone(&done),
                scripts.clone(),
            );
            thread::spawn(move || -> redis::RedisResult<()> {
                let mut con = redis::Client::open(url)?.get_connection()?;
                let mut random = Random(0x9e37_79b9_7f4a_7c15 ^ (n as u64 + 1));
                while !stop.load(Ordering::Relaxed) {
                    let base = random.next();
                    let names: Vec<String> =
                        (0..keys).map(|i| format!("{{m{base}}}:{i}")).collect();
                    unit(&mut con, approach, &names, &scripts)?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    thread::sleep(UNIT_RUN);
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.join().unwrap_or(Ok(()))?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let count = done.load(Ordering::Relaxed) as f64;
    let cpu_us = (cpu_seconds(&mut admin)? - cpu) * 1e6 / count.max(1.0);
    Ok((count / elapsed, cpu_us))
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn free_keys(url: &str) -> redis::RedisResult<()> {
    let mut con = redis::Client::open(url)?.get_connection()?;
    let load = |script: &str, con: &mut redis::Connection| -> redis::RedisResult<String> {
        redis::cmd("SCRIPT").arg("LOAD").arg(script).query(con)
    };
    let scripts = (
        load(REDISSON_LOCK, &mut con)?,
        load(REDISSON_UNLOCK, &mut con)?,
    );
    println!("| keys | approach | sets/s | vs `LOCK.MACQUIRE` | server CPU µs per set |");
    println!("| ---: | --- | ---: | ---: | ---: |");
    for keys in [2, 8] {
        let approaches = [Approach::Set, Approach::Pipelined, Approach::Redisson];
        let mut samples: Vec<Vec<(f64, f64)>> = vec![Vec::new(); approaches.len()];
        for round in 0..ROUNDS {
            for turn in 0..approaches.len() {
                let at = (turn + round) % approaches.len();
                redis::cmd("FLUSHALL").exec(&mut con)?;
                samples[at].push(units(url, approaches[at], keys, &scripts)?);
            }
        }
        let ours = median(samples[0].iter().map(|s| s.0).collect());
        for (approach, runs) in approaches.iter().zip(&samples) {
            let rate = median(runs.iter().map(|s| s.0).collect());
            let cpu = median(runs.iter().map(|s| s.1).collect());
            println!(
                "| {keys} | {} | {rate:.0} | {:.2}× | {cpu:.1} |",
                approach.name(keys),
                rate / ours
            );
        }
    }
    Ok(())
}

/// What the clients of one contention run share.
struct Shared {
    start: Instant,
    stop: AtomicBool,
    waits: Mutex<Vec<u64>>,
    /// Waits the end of the run cut short, ns.
    unanswered: Mutex<Vec<u64>>,
    grants: AtomicU64,
    rollbacks: AtomicU64,
}

/// Takes `pair` for `owner` one key at a time as `RedissonMultiLock.lock()` does; false when the
/// run stopped first.
fn one_by_one(
    con: &mut redis::Connection,
    pair: &[String],
    owner: &str,
    shared: &Shared,
) -> redis::RedisResult<bool> {
    while !shared.stop.load(Ordering::Relaxed) {
        let deadline =
            Instant::now() + Duration::from_millis(MULTILOCK_WAIT_PER_KEY_MS * pair.len() as u64);
        let mut held = Vec::new();
        for key in pair {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .as_millis()
                .max(1);
            let token: Option<i64> = redis::cmd("LOCK.ACQUIRE")
                .arg(key)
                .arg(owner)
                .arg(LEASE_MS)
                .arg("WAIT")
                .arg(u64::try_from(left).unwrap_or(u64::MAX))
                .query(con)?;
            if token.is_none() {
                break;
            }
            held.push(key);
        }
        if held.len() == pair.len() {
            return Ok(true);
        }
        // One did not come in time: give back what is held, and start again.
        shared.rollbacks.fetch_add(1, Ordering::Relaxed);
        for key in held {
            redis::cmd("LOCK.RELEASE").arg(key).arg(owner).exec(con)?;
        }
    }
    Ok(false)
}

fn contender(url: &str, set: bool, id: usize, shared: &Shared) -> redis::RedisResult<()> {
    let mut con = redis::Client::open(url)?.get_connection()?;
    let mut random = Random(0x2545_f491_4f6c_dd1d ^ (id as u64 + 1));
    let owner = format!("client-{id}");
    let mut waits = Vec::new();
    while !shared.stop.load(Ordering::Relaxed) {
        let first = random.below(KEYS);
        let second = (first + 1 + random.below(KEYS - 1)) % KEYS;
        let pair = [format!("{{c}}:{first}"), format!("{{c}}:{second}")];
        let asked = Instant::now();
        let granted = if set {
            redis::cmd("LOCK.MACQUIRE")
                .arg(2)
                .arg(&pair)
                .arg(&owner)
                .arg(LEASE_MS)
                .arg("WAIT")
                .arg(10_000)
                .query::<Option<Vec<i64>>>(&mut con)?
                .is_some()
        } else {
            one_by_one(&mut con, &pair, &owner, shared)?
        };
        if !granted {
            if shared.stop.load(Ordering::Relaxed) {
                let wait = u64::try_from(asked.elapsed().as_nanos()).unwrap_or(u64::MAX);
                shared.unanswered.lock().map(|mut all| all.push(wait)).ok();
            }
            continue;
        }
        waits.push(u64::try_from(asked.elapsed().as_nanos()).unwrap_or(u64::MAX));
        thread::sleep(CRITICAL_SECTION);
        shared.grants.fetch_add(1, Ordering::Relaxed);
        redis::cmd("LOCK.MRELEASE")
            .arg(2)
            .arg(&pair)
            .arg(&owner)
            .exec(&mut con)?;
    }
    shared.waits.lock().map(|mut all| all.extend(waits)).ok();
    Ok(())
}

fn percentile_ms(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index] as f64 / 1e6
}

/// One contention run; its Markdown row and its fair share in ns (`fair_share_ns`: the one to
/// measure against, else its own).
fn contention(
    url: &str,
    set: bool,
    fair_share_ns: Option<f64>,
) -> redis::RedisResult<(String, f64)> {
    redis::cmd("FLUSHALL").exec(&mut redis::Client::open(url)?.get_connection()?)?;
    let shared = Arc::new(Shared {
        start: Instant::now(),
        stop: AtomicBool::new(false),
        waits: Mutex::new(Vec::new()),
        unanswered: Mutex::new(Vec::new()),
        grants: AtomicU64::new(0),
        rollbacks: AtomicU64::new(0),
    });
    let handles: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let (url, shared) = (url.to_owned(), Arc::clone(&shared));
            thread::spawn(move || contender(&url, set, id, &shared))
        })
        .collect();
    thread::sleep(CONTENTION_RUN);
    shared.stop.store(true, Ordering::Relaxed);
    let elapsed = shared.start.elapsed().as_secs_f64();
    for handle in handles {
        handle.join().unwrap_or(Ok(()))?;
    }
    let grants = shared.grants.load(Ordering::Relaxed) as f64;
    let mut waits = shared.waits.lock().map(|w| w.clone()).unwrap_or_default();
    waits.sort_unstable();
    let unanswered = shared
        .unanswered
        .lock()
        .map(|w| w.clone())
        .unwrap_or_default();
    let fair_share_ns =
        fair_share_ns.unwrap_or((CLIENTS - 1) as f64 * elapsed * 1e9 / grants.max(1.0));
    let all = || waits.iter().chain(&unanswered);
    let longest = all().copied().max().unwrap_or(0) as f64;
    let stalls = all()
        .filter(|wait| **wait as f64 > 10.0 * fair_share_ns)
        .count();
    let name = if set {
        "`LOCK.MACQUIRE ... WAIT` (one step, FIFO across keys)"
    } else {
        "one by one, as `RedissonMultiLock.lock()` (each key `LOCK.ACQUIRE ... WAIT`, give back and retry after 1.5 s per key)"
    };
    let row = format!(
        "| {name} | {:.0} | {:.2} | {:.2} | {:.1} | {} | {stalls} |",
        grants / elapsed,
        percentile_ms(&waits, 0.5),
        percentile_ms(&waits, 0.99),
        longest / fair_share_ns,
        shared.rollbacks.load(Ordering::Relaxed),
    );
    Ok((row, fair_share_ns))
}

fn main() -> redis::RedisResult<()> {
    let url =
        std::env::var("LEASEHOLD_BENCH_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    free_keys(&url)?;
    println!();
    println!(
        "| {CLIENTS} clients, random pairs of {KEYS} keys | sets/s | wait p50 (ms) | p99 (ms) | longest wait / fair share | pairs given back half held | stalls (> 10× fair share) |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let (ours, fair_share_ns) = contention(&url, true, None)?;
    println!("{ours}");
    println!("{}", contention(&url, false, Some(fair_share_ns))?.0);
    Ok(())
}
