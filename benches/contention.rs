//! Contention on one lock: N clients each loop acquire → short critical section → release.
//!
//! Compares, in one run against the same server, four ways to wait for a lock:
//! - `LOCK.ACQUIRE ... WAIT`: blocked in the server, handed over in FIFO order;
//! - polling like redis-py's `Lock`: `SET NX PX`, sleep 100 ms (its default), try again;
//! - the same with a 1 ms sleep;
//! - Redisson-style pub/sub: `SET NX PX`, else wait for the release message (or 100 ms), retry;
//!   the release script publishes after deleting.
//!
//! Reports acquisitions per second; hand-overs per second (grants to another client than the
//! one that released last: a client that re-takes its own lock at once is barging, not a
//! hand-over); release-to-grant latency of the hand-overs (from sending the release to the
//! next holder's grant reply) p50/p99; and fairness: the longest wait divided by
//! (clients - 1) × the mean time between acquisitions, about 1 for a FIFO queue.
//!
//! Run by `make bench` (`LEASEHOLD_BENCH_URL` names the server); prints Markdown rows.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const KEY: &str = "bench:contended";
const CHANNEL: &str = "bench:released";
const LEASE_MS: u64 = 10_000;
const CRITICAL_SECTION: Duration = Duration::from_micros(100);
const RUN_FOR: Duration = Duration::from_secs(3);

/// Release as Redisson does: delete only when owned, then tell the waiters.
const PUBLISHING_RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1 end; return 0";
/// Release as redis-py does: delete only when owned.
const CHECKED_RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]); return 1 end; return 0";

#[derive(Clone, Copy)]
enum Strategy {
    Wait,
    Poll(Duration),
    PubSub,
}

impl Strategy {
    fn name(self) -> String {
        match self {
            Self::Wait => "LOCK.ACQUIRE WAIT (FIFO hand-over)".into(),
            Self::Poll(sleep) => format!("SET NX PX + {} ms polling", sleep.as_millis()),
            Self::PubSub => "SET NX PX + pub/sub notify (Redisson-style)".into(),
        }
    }
}

/// What all clients of one run share: when the last release was sent, and the samples.
struct Shared {
    start: Instant,
    released_at_ns: AtomicU64,
    stop: AtomicBool,
    last_holder: AtomicUsize,
    latencies: Mutex<Vec<u64>>,
    waits: Mutex<Vec<u64>>,
    grants: AtomicU64,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

fn client(url: &str, strategy: Strategy, id: usize, shared: &Shared) -> redis::RedisResult<()> {
    let client = redis::Client::open(url)?;
    let mut con = client.get_connection()?;
    let mut notifications = match strategy {
        Strategy::PubSub => {
            let subscriber = client.get_connection()?;
            subscriber.set_read_timeout(Some(Duration::from_millis(100)))?;
            Some(subscriber)
        }
        _ => None,
    };
    let mut pubsub = notifications.as_mut().map(redis::Connection::as_pubsub);
    if let Some(pubsub) = pubsub.as_mut() {
        pubsub.subscribe(CHANNEL)?;
    }
    let owner = format!("client-{id}");
    let (mut latencies, mut waits) = (Vec::new(), Vec::new());
    while !shared.stop.load(Ordering::Relaxed) {
        let asked = shared.now_ns();
        if !acquire(&mut con, pubsub.as_mut(), strategy, &owner, shared)? {
            break; // stopped while waiting
        }
        let now = shared.now_ns();
        if shared.last_holder.swap(id, Ordering::Relaxed) != id {
            latencies.push(now.saturating_sub(shared.released_at_ns.load(Ordering::Relaxed)));
        }
        waits.push(now - asked);
        thread::sleep(CRITICAL_SECTION);
        shared.grants.fetch_add(1, Ordering::Relaxed);
        shared
            .released_at_ns
            .store(shared.now_ns(), Ordering::Relaxed);
        match strategy {
            Strategy::Wait => redis::cmd("LOCK.RELEASE")
                .arg(KEY)
                .arg(&owner)
                .exec(&mut con)?,
            Strategy::Poll(_) => redis::cmd("EVAL")
                .arg(CHECKED_RELEASE)
                .arg(1)
                .arg(KEY)
                .arg(&owner)
                .exec(&mut con)?,
            Strategy::PubSub => redis::cmd("EVAL")
                .arg(PUBLISHING_RELEASE)
                .arg(2)
                .arg(KEY)
                .arg(CHANNEL)
                .arg(&owner)
                .exec(&mut con)?,
        }
    }
    shared
        .latencies
        .lock()
        .map(|mut all| all.extend(latencies))
        .ok();
    shared.waits.lock().map(|mut all| all.extend(waits)).ok();
    Ok(())
}

/// Waits for the lock the way `strategy` does; false when the run stopped first.
fn acquire(
    con: &mut redis::Connection,
    mut pubsub: Option<&mut redis::PubSub>,
    strategy: Strategy,
    owner: &str,
    shared: &Shared,
) -> redis::RedisResult<bool> {
    while !shared.stop.load(Ordering::Relaxed) {
        let granted = match strategy {
            Strategy::Wait => redis::cmd("LOCK.ACQUIRE")
                .arg(KEY)
                .arg(owner)
                .arg(LEASE_MS)
                .arg("WAIT")
                .arg(1_000)
                .query::<Option<i64>>(con)?
                .is_some(),
            _ => redis::cmd("SET")
                .arg(KEY)
                .arg(owner)
                .arg("NX")
                .arg("PX")
                .arg(LEASE_MS)
                .query::<Option<String>>(con)?
                .is_some(),
        };
        if granted {
            return Ok(true);
        }
        match (strategy, pubsub.as_mut()) {
            (Strategy::Poll(sleep), _) => thread::sleep(sleep),
            (Strategy::PubSub, Some(pubsub)) => {
                let _ = pubsub.get_message(); // a release, or the 100 ms fallback
            }
            _ => {}
        }
    }
    Ok(false)
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index] as f64 / 1e6
}

fn run(url: &str, strategy: Strategy, clients: usize) -> redis::RedisResult<String> {
    let mut con = redis::Client::open(url)?.get_connection()?;
    redis::cmd("DEL").arg(KEY).exec(&mut con)?;
    let shared = Arc::new(Shared {
        start: Instant::now(),
        released_at_ns: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        last_holder: AtomicUsize::new(usize::MAX),
        latencies: Mutex::new(Vec::new()),
        waits: Mutex::new(Vec::new()),
        grants: AtomicU64::new(0),
    });
    let handles: Vec<_> = (0..clients)
        .map(|id| {
            let (url, shared) = (url.to_owned(), Arc::clone(&shared));
            thread::spawn(move || client(&url, strategy, id, &shared))
        })
        .collect();
    thread::sleep(RUN_FOR);
    shared.stop.store(true, Ordering::Relaxed);
    let elapsed = shared.start.elapsed().as_secs_f64();
    for handle in handles {
        handle.join().unwrap_or(Ok(()))?;
    }
    let grants = shared.grants.load(Ordering::Relaxed) as f64;
    let mut latencies = shared
        .latencies
        .lock()
        .map(|l| l.clone())
        .unwrap_or_default();
    let waits = shared.waits.lock().map(|w| w.clone()).unwrap_or_default();
    latencies.sort_unstable();
    let longest_wait = waits.iter().copied().max().unwrap_or(0) as f64 / 1e9;
    let between_acquisitions = elapsed / grants.max(1.0);
    let fairness = longest_wait / ((clients - 1) as f64 * between_acquisitions);
    Ok(format!(
        "| {clients} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.1} |",
        strategy.name(),
        grants / elapsed,
        latencies.len() as f64 / elapsed,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        fairness,
    ))
}

fn main() -> redis::RedisResult<()> {
    let url =
        std::env::var("LEASEHOLD_BENCH_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    println!(
        "| clients | waiting | acquisitions/s | hand-overs/s | hand-over latency p50 (ms) | p99 (ms) | longest wait / fair share |"
    );
    println!("| ---: | --- | ---: | ---: | ---: | ---: | ---: |");
    for clients in [8, 32, 128] {
        for strategy in [
            Strategy::Wait,
            Strategy::Poll(Duration::from_millis(100)),
            Strategy::Poll(Duration::from_millis(1)),
            Strategy::PubSub,
        ] {
            println!("{}", run(&url, strategy, clients)?);
        }
    }
    Ok(())
}
