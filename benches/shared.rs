//! Shared locks — read-write locks and semaphores — against the Lua scripts of Redisson's
//! `RReadWriteLock` and `RPermitExpirableSemaphore`, re-stated here with the same Redis calls,
//! in one run on the same server.
//!
//! 1. **Cost as holders pile up.** A lock already held shared by 1, 100 or 10 000 owners
//!    (38-byte owners, as Redisson's `UUID:threadId`); 4 connections pipeline batches of 64
//!    units for 1.5 s: a unit is the acquire of a new holding and its release, or the renewal
//!    of one of the holders. Reports units per second (median of 3 rounds, ours and the script
//!    alternating), their ratio, and ours at N holders relative to ours at 1 (the median of
//!    the per-round ratios, each round measuring ours at 1 holder right before).
//! 2. **Memory per holder** with 10 000 holders: `used_memory` grown, per holder.
//! 3. **Readers and writers on one lock.** R readers and W writers loop acquire → 100 µs →
//!    release for 3 s: leasehold's `WAIT` (FIFO, phase-fair) against Redisson's scripts retried
//!    every 1 ms. Reports grants per second of each role, p99 wait, and the longest wait over
//!    (clients - 1) × the mean time between grants: about 1 or below when nobody starves.
//!
//! Run by `make bench` (`LEASEHOLD_BENCH_URL` names the server); prints Markdown tables.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis::{Connection, Pipeline, RedisResult, Value};

use common::used_memory;

const HOLDERS: [usize; 3] = [1, 100, 10_000];
const CONNECTIONS: usize = 4;
const BATCH: usize = 64;
const RUN: Duration = Duration::from_millis(1_500);
const ROUNDS: usize = 3;
const LEASE_MS: u64 = 600_000;

/// Redisson's read lock (`RedissonReadLock.tryLockInnerAsync`): a hash of mode and owners'
/// hold counts, plus one timeout key per hold. KEYS: lock, the owner's timeout prefix. ARGV:
/// lease, owner, owner's write-lock name. Nil when granted.
const READ_LOCK: &str = "
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':1', 1)
  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  local timeout = KEYS[2] .. ':' .. holds
  redis.call('set', timeout, 1)
  redis.call('pexpire', timeout, ARGV[1])
  local left = redis.call('pttl', KEYS[1])
  redis.call('pexpire', KEYS[1], math.max(left, ARGV[1]))
  return nil
end
return redis.call('pttl', KEYS[1])";

/// Redisson's read unlock (`RedissonReadLock.unlockInnerAsync`): with other readers left it
/// reads the timeout key of every hold of every reader to find the longest lease. KEYS: lock,
/// channel, owner's timeout prefix, key prefix, unlock latch. ARGV: message, owner, publish
/// command, latch lifetime.
const READ_UNLOCK: &str = "
local done = redis.call('get', KEYS[5])
if done ~= false then return tonumber(done) end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call(ARGV[3], KEYS[2], ARGV[1])
  redis.call('set', KEYS[5], 1, 'px', ARGV[4])
  return 1
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
local holds = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if holds == 0 then redis.call('hdel', KEYS[1], ARGV[2]) end
redis.call('del', KEYS[3] .. ':' .. (holds + 1))
if redis.call('hlen', KEYS[1]) > 1 then
  local longest = -3
  for _, owner in ipairs(redis.call('hkeys', KEYS[1])) do
    local count = tonumber(redis.call('hget', KEYS[1], owner))
    if type(count) == 'number' then
      for i = count, 1, -1 do
        local left = redis.call('pttl', KEYS[4] .. ':' .. owner .. ':rwlock_timeout:' .. i)
        longest = math.max(left, longest)
      end
    end
  end
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    redis.call('set', KEYS[5], 0, 'px', ARGV[4])
    return 0
  end
  if mode == 'write' then
    redis.call('set', KEYS[5], 0, 'px', ARGV[4])
    return 0
  end
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[4])
return 1";

/// Redisson's read-lock watchdog renewal (`RedissonReadLock.renewExpirationAsync`): renews
/// the timeout key of every hold of every reader. KEYS: lock, key prefix. ARGV: lease, owner.
const READ_RENEW: &str = "
if redis.call('hget', KEYS[1], ARGV[2]) == false then return 0 end
redis.call('pexpire', KEYS[1], ARGV[1])
if redis.call('hlen', KEYS[1]) > 1 then
  for _, owner in ipairs(redis.call('hkeys', KEYS[1])) do
    local count = tonumber(redis.call('hget', KEYS[1], owner))
    if type(count) == 'number' then
      for i = count, 1, -1 do
        redis.call('pexpire', KEYS[2] .. ':' .. owner .. ':rwlock_timeout:' .. i, ARGV[1])
      end
    end
  end
end
return 1";

/// Redisson's write lock (`RedissonWriteLock.tryLockInnerAsync`). KEYS: lock. ARGV: lease,
/// owner's write-lock name. Nil when granted.
const WRITE_LOCK: &str = "
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])";

/// Redisson's write unlock (`RedissonWriteLock.unlockInnerAsync`). KEYS: lock, channel, unlock
/// latch. ARGV: message, lease, owner's write-lock name, publish command, latch lifetime.
const WRITE_UNLOCK: &str = "
local done = redis.call('get', KEYS[3])
if done ~= false then return tonumber(done) end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call(ARGV[4], KEYS[2], ARGV[1])
  redis.call('set', KEYS[3], 1, 'px', ARGV[5])
  return 1
end
if mode == 'write' then
  if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
  local holds = redis.call('hincrby', KEYS[1], ARGV[3], -1)
  if holds > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[3], 0, 'px', ARGV[5])
    return 0
  end
  redis.call('hdel', KEYS[1], ARGV[3])
  if redis.call('hlen', KEYS[1]) == 1 then
    redis.call('del', KEYS[1])
    redis.call(ARGV[4], KEYS[2], ARGV[1])
  else
    redis.call('hset', KEYS[1], 'mode', 'read')
  end
  redis.call('set', KEYS[3], 1, 'px', ARGV[5])
  return 1
end
return nil";

/// Redisson's permit acquire (`RedissonPermitExpirableSemaphore.tryAcquireAsync`): a counter of
/// free permits and a sorted set of taken ones by deadline. KEYS: counter, timeouts, channel.
/// ARGV: permits, deadline, now, "never", publish command, permit id. `OK` when granted.
const SEMAPHORE_ACQUIRE: &str = "
local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1])
if #expired > 0 then
  redis.call('zrem', KEYS[2], unpack(expired))
  local free = redis.call('incrby', KEYS[1], #expired)
  if tonumber(free) > 0 then redis.call(ARGV[5], KEYS[3], free) end
end
local free = redis.call('get', KEYS[1])
if free ~= false and tonumber(free) >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  for i = 6, #ARGV, 1 do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]) end
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then redis.call('pexpire', KEYS[2], ttl) end
  return 'OK'
end
local soonest = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if soonest[1] ~= nil and soonest[2] ~= ARGV[4] then return ':' .. tostring(soonest[2]) end
return nil";

/// Redisson's permit release (`RedissonPermitExpirableSemaphore.tryReleaseAsync`). KEYS:
/// counter, channel, timeouts. ARGV: permit id, permits, now, publish command.
const SEMAPHORE_RELEASE: &str = "
local deadline = redis.call('zscore', KEYS[3], ARGV[1])
if tonumber(redis.call('zrem', KEYS[3], ARGV[1])) ~= 1 then return 0 end
local free = redis.call('incrby', KEYS[1], ARGV[2])
redis.call(ARGV[4], KEYS[2], free)
if tonumber(deadline) <= tonumber(ARGV[3]) then return 0 end
return 1";

/// The scripts' SHA1s once loaded.
#[derive(Clone)]
struct Scripts {
    read_lock: String,
    read_unlock: String,
    read_renew: String,
    write_lock: String,
    write_unlock: String,
    semaphore_acquire: String,
    semaphore_release: String,
}

impl Scripts {
    fn load(con: &mut Connection) -> RedisResult<Self> {
        let mut load = |script: &str| -> RedisResult<String> {
            redis::cmd("SCRIPT").arg("LOAD").arg(script).query(con)
        };
        Ok(Self {
            read_lock: load(READ_LOCK)?,
            read_unlock: load(READ_UNLOCK)?,
            read_renew: load(READ_RENEW)?,
            write_lock: load(WRITE_LOCK)?,
            write_unlock: load(WRITE_UNLOCK)?,
            semaphore_acquire: load(SEMAPHORE_ACQUIRE)?,
            semaphore_release: load(SEMAPHORE_RELEASE)?,
        })
    }
}

/// A 38-byte owner, as Redisson's `UUID:threadId`, from a 2-character `kind` and a number.
fn owner(kind: &str, n: u64) -> String {
    format!("8d3c2f4e-1b2a-4c5d-9e8f-{kind:.2}{n:010}:1")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(0))
}

/// The contenders of part 1, each with its lock key and how it takes, gives back and renews a
/// shared holding.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Contender {
    ReadLock,
    RedissonReadLock,
    Semaphore,
    RedissonSemaphore,
}

impl Contender {
    const KEY_READ: &'static str = "{rw}";
    const KEY_SEMAPHORE: &'static str = "{sem}";

    fn acquire(self, pipe: &mut Pipeline, scripts: &Scripts, owner: &str) {
        match self {
            Self::ReadLock => {
                pipe.cmd("LOCK.ACQUIRE")
                    .arg(Self::KEY_READ)
                    .arg(owner)
                    .arg(LEASE_MS)
                    .arg("SHARED");
            }
            Self::Semaphore => {
                pipe.cmd("LOCK.ACQUIRE")
                    .arg(Self::KEY_SEMAPHORE)
                    .arg(owner)
                    .arg(LEASE_MS)
                    .arg("SHARED")
                    .arg("LIMIT")
                    .arg(1_000_000);
            }
            Self::RedissonReadLock => {
                pipe.cmd("EVALSHA")
                    .arg(&scripts.read_lock)
                    .arg(2)
                    .arg(Self::KEY_READ)
                    .arg(format!("{}:{owner}:rwlock_timeout", Self::KEY_READ))
                    .arg(LEASE_MS)
                    .arg(owner)
                    .arg(format!("{owner}:write"));
            }
            Self::RedissonSemaphore => {
                pipe.cmd("EVALSHA")
                    .arg(&scripts.semaphore_acquire)
                    .arg(3)
                    .arg(Self::KEY_SEMAPHORE)
                    .arg("{sem}:timeout")
                    .arg("redisson_sc:{sem}")
                    .arg(1)
                    .arg(now_ms() + LEASE_MS)
                    .arg(now_ms())
                    .arg(922_337_203_685_477_u64)
                    .arg("publish")
                    .arg(owner);
            }
        }
    }

    fn release(self, pipe: &mut Pipeline, scripts: &Scripts, owner: &str, request: u64) {
        match self {
            Self::ReadLock | Self::Semaphore => {
                let key = if self == Self::ReadLock {
                    Self::KEY_READ
                } else {
                    Self::KEY_SEMAPHORE
                };
                pipe.cmd("LOCK.RELEASE").arg(key).arg(owner);
            }
            Self::RedissonReadLock => {
                pipe.cmd("EVALSHA")
                    .arg(&scripts.read_unlock)
                    .arg(5)
                    .arg(Self::KEY_READ)
                    .arg("redisson_rwlock:{rw}")
                    .arg(format!("{}:{owner}:rwlock_timeout", Self::KEY_READ))
                    .arg(Self::KEY_READ)
                    .arg(format!("redisson_unlock_latch:{{rw}}:{request}"))
                    .arg(0)
                    .arg(owner)
                    .arg("publish")
                    .arg(4_500);
            }
            Self::RedissonSemaphore => {
                pipe.cmd("EVALSHA")
                    .arg(&scripts.semaphore_release)
                    .arg(3)
                    .arg(Self::KEY_SEMAPHORE)
                    .arg("redisson_sc:{sem}")
                    .arg("{sem}:timeout")
                    .arg(owner)
                    .arg(1)
                    .arg(now_ms())
                    .arg("publish");
            }
        }
    }

    /// Renewal of a holder's lease (the read locks only: a semaphore permit has a fixed one).
    fn renew(self, pipe: &mut Pipeline, scripts: &Scripts, owner: &str) {
        match self {
            Self::RedissonReadLock => {
                pipe.cmd("EVALSHA")
                    .arg(&scripts.read_renew)
                    .arg(2)
                    .arg(Self::KEY_READ)
                    .arg(Self::KEY_READ)
                    .arg(LEASE_MS)
                    .arg(owner);
            }
            _ => {
                pipe.cmd("LOCK.RENEW")
                    .arg(Self::KEY_READ)
                    .arg(owner)
                    .arg(LEASE_MS);
            }
        }
    }

    /// Empties the server, then gives the lock `holders` holders.
    fn populate(self, con: &mut Connection, scripts: &Scripts, holders: usize) -> RedisResult<()> {
        redis::cmd("FLUSHALL").exec(con)?;
        if self == Self::RedissonSemaphore {
            redis::cmd("SET")
                .arg(Self::KEY_SEMAPHORE)
                .arg(1_000_000)
                .exec(con)?;
        }
        self.add(con, scripts, holders)
    }

    /// Adds `holders` holders to the lock as it is.
    fn add(self, con: &mut Connection, scripts: &Scripts, holders: usize) -> RedisResult<()> {
        for chunk in (0..holders as u64).collect::<Vec<_>>().chunks(1_000) {
            let mut pipe = redis::pipe();
            for n in chunk {
                self.acquire(&mut pipe, scripts, &owner("aa", *n));
            }
            pipe.query::<Vec<Value>>(con)?;
        }
        Ok(())
    }
}

/// Where a unit of work stands: its connection, its number there, and the holders the lock
/// was given.
#[derive(Clone, Copy)]
struct Step {
    connection: usize,
    n: u64,
    holders: usize,
}

/// One unit of work for a contender.
type Unit<'a> = dyn Fn(Contender, &mut Pipeline, Step) + Sync + 'a;

/// Units per second over [`RUN`], from [`CONNECTIONS`] connections sending batches of
/// [`BATCH`] units of `contender`'s on a lock with `holders` holders.
fn rate(url: &str, contender: Contender, holders: usize, unit: &Unit) -> RedisResult<f64> {
    let started = Instant::now();
    let counts: Vec<RedisResult<u64>> = thread::scope(|scope| {
        let workers: Vec<_> = (0..CONNECTIONS)
            .map(|connection| {
                scope.spawn(move || -> RedisResult<u64> {
                    let mut con = redis::Client::open(url)?.get_connection()?;
                    let mut done = 0;
                    while started.elapsed() < RUN {
                        let mut pipe = redis::pipe();
                        for _ in 0..BATCH {
                            let step = Step {
                                connection,
                                n: done,
                                holders,
                            };
                            unit(contender, &mut pipe, step);
                            done += 1;
                        }
                        pipe.query::<Vec<Value>>(&mut con)?;
                    }
                    Ok(done)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().unwrap_or(Ok(0)))
            .collect()
    });
    let mut total = 0;
    for count in counts {
        total += count?;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// The medians of [`ROUNDS`] rounds of `ours` and `theirs` at `holders`, and of the per-round
/// ratio of ours at `holders` to ours at 1 holder; each round runs all three in turn, so that
/// drift on a shared machine hits them alike.
fn compare(
    url: &str,
    scripts: &Scripts,
    holders: usize,
    (ours, theirs): (Contender, Contender),
    unit: &Unit,
) -> RedisResult<(f64, f64, f64)> {
    let mut con = redis::Client::open(url)?.get_connection()?;
    let mut measure = |contender: Contender, holders: usize| -> RedisResult<f64> {
        contender.populate(&mut con, scripts, holders)?;
        rate(url, contender, holders, unit)
    };
    let (mut mine, mut other, mut vs_one) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let at_one = if holders == 1 {
            None
        } else {
            Some(measure(ours, 1)?)
        };
        let rate = measure(ours, holders)?;
        mine.push(rate);
        other.push(measure(theirs, holders)?);
        vs_one.push(at_one.map_or(1.0, |one| rate / one));
    }
    Ok((median(&mut mine), median(&mut other), median(&mut vs_one)))
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN)
}

fn costs(url: &str, scripts: &Scripts) -> RedisResult<()> {
    println!(
        "| holders | operation | leasehold /s | Redisson /s | ratio | leasehold vs 1 holder |"
    );
    println!("| ---: | --- | ---: | ---: | ---: | ---: |");
    let acquire_release = |contender: Contender, pipe: &mut Pipeline, step: Step| {
        let holder = owner(&format!("b{}", step.connection), step.n);
        let request = step.n * CONNECTIONS as u64 + step.connection as u64;
        contender.acquire(pipe, scripts, &holder);
        contender.release(pipe, scripts, &holder, request);
    };
    let renew = |contender: Contender, pipe: &mut Pipeline, step: Step| {
        let mut rng = StdRng::seed_from_u64(step.n * 31 + step.connection as u64);
        let holder = owner("aa", rng.random_range(0..step.holders as u64));
        contender.renew(pipe, scripts, &holder);
    };
    let read = (Contender::ReadLock, Contender::RedissonReadLock);
    let semaphore = (Contender::Semaphore, Contender::RedissonSemaphore);
    let cases: [(&str, (Contender, Contender), &Unit); 3] = [
        ("read lock: acquire + release", read, &acquire_release),
        ("read lock: renew a holder", read, &renew),
        ("semaphore: acquire + release", semaphore, &acquire_release),
    ];
    for holders in HOLDERS {
        for (what, pair, unit) in &cases {
            let (ours, theirs, vs_one) = compare(url, scripts, holders, *pair, *unit)?;
            println!(
                "| {holders} | {what} | {ours:.0} | {theirs:.0} | {:.2}× | {vs_one:.2}× |",
                ours / theirs
            );
        }
    }
    Ok(())
}

fn memory(url: &str, scripts: &Scripts) -> RedisResult<()> {
    let holders = 10_000;
    let mut con = redis::Client::open(url)?.get_connection()?;
    println!("| lock with {holders} holders | bytes per holder (used_memory) |");
    println!("| --- | ---: |");
    for (name, contender) in [
        ("leasehold read lock (`SHARED`)", Contender::ReadLock),
        (
            "leasehold semaphore (`SHARED LIMIT n`)",
            Contender::Semaphore,
        ),
        (
            "Redisson RReadWriteLock (hash + a timeout key per hold)",
            Contender::RedissonReadLock,
        ),
        (
            "Redisson RPermitExpirableSemaphore (counter + sorted set)",
            Contender::RedissonSemaphore,
        ),
    ] {
        contender.populate(&mut con, scripts, 0)?;
        let before = used_memory(&mut con)?;
        contender.add(&mut con, scripts, holders)?;
        let after = used_memory(&mut con)?;
        println!(
            "| {name} | {:.0} |",
            (after - before) as f64 / holders as f64
        );
    }
    Ok(())
}

/// Part 3: how a client of a readers-and-writers run waits.
#[derive(Clone, Copy)]
enum Waiting {
    Leasehold,
    RedissonPolling,
}

/// What the clients of one run record.
struct Record {
    stop: AtomicBool,
    reader_waits: Mutex<Vec<u64>>,
    writer_waits: Mutex<Vec<u64>>,
}

const CONTENDED: &str = "{contended}";
const CRITICAL_SECTION: Duration = Duration::from_micros(100);

fn contend(
    url: &str,
    scripts: &Scripts,
    waiting: Waiting,
    id: usize,
    writer: bool,
    record: &Record,
) -> RedisResult<()> {
    let mut con = redis::Client::open(url)?.get_connection()?;
    let name = owner("dd", id as u64);
    let mut waits = Vec::new();
    let mut request = 0_u64;
    while !record.stop.load(Ordering::Relaxed) {
        let asked = Instant::now();
        let mut granted = false;
        while !granted && !record.stop.load(Ordering::Relaxed) {
            granted = match waiting {
                Waiting::Leasehold => {
                    let mut acquire = redis::cmd("LOCK.ACQUIRE");
                    acquire
                        .arg(CONTENDED)
                        .arg(&name)
                        .arg(10_000)
                        .arg("WAIT")
                        .arg(1_000);
                    if !writer {
                        acquire.arg("SHARED");
                    }
                    acquire.query::<Option<i64>>(&mut con)?.is_some()
                }
                Waiting::RedissonPolling => {
                    let reply: Option<i64> = if writer {
                        redis::cmd("EVALSHA")
                            .arg(&scripts.write_lock)
                            .arg(1)
                            .arg(CONTENDED)
                            .arg(10_000)
                            .arg(format!("{name}:write"))
                            .query(&mut con)?
                    } else {
                        redis::cmd("EVALSHA")
                            .arg(&scripts.read_lock)
                            .arg(2)
                            .arg(CONTENDED)
                            .arg(format!("{CONTENDED}:{name}:rwlock_timeout"))
                            .arg(10_000)
                            .arg(&name)
                            .arg(format!("{name}:write"))
                            .query(&mut con)?
                    };
                    let granted = reply.is_none();
                    if !granted {
                        thread::sleep(Duration::from_millis(1));
                    }
                    granted
                }
            };
        }
        if !granted {
            break;
        }
        waits.push(u64::try_from(asked.elapsed().as_nanos()).unwrap_or(u64::MAX));
        thread::sleep(CRITICAL_SECTION);
        request += 1;
        match (waiting, writer) {
            (Waiting::Leasehold, _) => redis::cmd("LOCK.RELEASE")
                .arg(CONTENDED)
                .arg(&name)
                .exec(&mut con)?,
            (Waiting::RedissonPolling, true) => redis::cmd("EVALSHA")
                .arg(&scripts.write_unlock)
                .arg(3)
                .arg(CONTENDED)
                .arg("redisson_rwlock:{contended}")
                .arg(format!("latch:{id}:{request}"))
                .arg(0)
                .arg(10_000)
                .arg(format!("{name}:write"))
                .arg("publish")
                .arg(4_500)
                .exec(&mut con)?,
            (Waiting::RedissonPolling, false) => redis::cmd("EVALSHA")
                .arg(&scripts.read_unlock)
                .arg(5)
                .arg(CONTENDED)
                .arg("redisson_rwlock:{contended}")
                .arg(format!("{CONTENDED}:{name}:rwlock_timeout"))
                .arg(CONTENDED)
                .arg(format!("latch:{id}:{request}"))
                .arg(0)
                .arg(&name)
                .arg("publish")
                .arg(4_500)
                .exec(&mut con)?,
        }
    }
    let all = if writer {
        &record.writer_waits
    } else {
        &record.reader_waits
    };
    all.lock().map(|mut all| all.extend(waits)).ok();
    Ok(())
}

fn readers_and_writers(url: &str, scripts: &Scripts) -> RedisResult<()> {
    println!(
        "| readers + writers | waiting | reader grants/s | writer grants/s | reader p99 wait (ms) | writer p99 wait (ms) | longest reader wait / fair share | longest writer wait / fair share |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (readers, writers) in [(6, 2), (30, 2)] {
        for (name, waiting) in [
            ("LOCK.ACQUIRE WAIT (FIFO, phase-fair)", Waiting::Leasehold),
            (
                "Redisson scripts, retried every 1 ms",
                Waiting::RedissonPolling,
            ),
        ] {
            redis::cmd("FLUSHALL").exec(&mut redis::Client::open(url)?.get_connection()?)?;
            let record = Arc::new(Record {
                stop: AtomicBool::new(false),
                reader_waits: Mutex::new(Vec::new()),
                writer_waits: Mutex::new(Vec::new()),
            });
            let started = Instant::now();
            let clients: Vec<_> = (0..readers + writers)
                .map(|id| {
                    let (url, record) = (url.to_owned(), Arc::clone(&record));
                    let scripts = scripts.clone();
                    thread::spawn(move || {
                        contend(&url, &scripts, waiting, id, id >= readers, &record)
                    })
                })
                .collect();
            thread::sleep(Duration::from_secs(3));
            record.stop.store(true, Ordering::Relaxed);
            let elapsed = started.elapsed().as_secs_f64();
            for client in clients {
                client.join().unwrap_or(Ok(()))?;
            }
            let mut reader_waits = record
                .reader_waits
                .lock()
                .map(|w| w.clone())
                .unwrap_or_default();
            let mut writer_waits = record
                .writer_waits
                .lock()
                .map(|w| w.clone())
                .unwrap_or_default();
            reader_waits.sort_unstable();
            writer_waits.sort_unstable();
            let grants = (reader_waits.len() + writer_waits.len()) as f64;
            let fair_share = (readers + writers - 1) as f64 * elapsed / grants.max(1.0);
            let p99 = |waits: &[u64]| {
                waits
                    .get(waits.len().saturating_sub(1) * 99 / 100)
                    .map_or(f64::NAN, |w| *w as f64 / 1e6)
            };
            let longest = |waits: &[u64]| {
                waits
                    .last()
                    .map_or(f64::NAN, |w| *w as f64 / 1e9 / fair_share)
            };
            println!(
                "| {readers} + {writers} | {name} | {:.0} | {:.0} | {:.2} | {:.2} | {:.1} | {:.1} |",
                reader_waits.len() as f64 / elapsed,
                writer_waits.len() as f64 / elapsed,
                p99(&reader_waits),
                p99(&writer_waits),
                longest(&reader_waits),
                longest(&writer_waits),
            );
        }
    }
    Ok(())
}

fn main() -> RedisResult<()> {
    let url =
        std::env::var("LEASEHOLD_BENCH_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let scripts = Scripts::load(&mut redis::Client::open(url.as_str())?.get_connection()?)?;
    costs(&url, &scripts)?;
    println!();
    memory(&url, &scripts)?;
    println!();
    readers_and_writers(&url, &scripts)?;
    Ok(())
}
