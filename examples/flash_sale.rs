//! Flash sale ("red packet"): many workers sell items from one shared stock, one at a time,
//! under `LOCK.ACQUIRE`; the storage checks fencing tokens, so a worker whose lease ran out
//! during a pause (a GC pause, a slow disk) cannot write its stale view back.
//!
//! Some workers pause past their lease on purpose. Without fencing their late writes would
//! put back stock that others already sold — an oversell; with it, storage rejects them.
//!
//! ```text
//! cargo run --example flash_sale -- redis://127.0.0.1:6379 16 200
//! ```
//! (URL, workers, items in stock; the server must have the lock module loaded.)

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

/// The lock every worker takes before touching the stock.
const LOCK: &str = "flash-sale:lock";
/// Lease of one sale, in ms.
const LEASE_MS: u64 = 200;
/// How long a pausing worker stalls between reading and writing the stock, in ms: longer
/// than its lease, so someone else takes the lock meanwhile.
const PAUSE_MS: u64 = 400;
/// Workers `0..PAUSING_WORKERS` pause once, on their first sale.
const PAUSING_WORKERS: usize = 2;

/// The storage stand-in: the stock, and the highest fencing token that has written to it.
/// A write carrying a lower token than one already seen is rejected — the check Martin
/// Kleppmann's "How to do distributed locking" asks of any resource behind a lock.
struct Storage {
    state: Mutex<(u64, u64)>,
}

/// A write came with a token older than one the storage has already accepted.
#[derive(Debug)]
struct StaleToken;

impl Storage {
    fn new(stock: u64) -> Self {
        Self {
            state: Mutex::new((stock, 0)),
        }
    }

    fn stock(&self) -> u64 {
        self.state.lock().map(|state| state.0).unwrap_or(0)
    }

    fn write(&self, token: u64, stock: u64) -> Result<(), StaleToken> {
        let mut state = self.state.lock().map_err(|_| StaleToken)?;
        if token < state.1 {
            return Err(StaleToken);
        }
        *state = (stock, token);
        Ok(())
    }
}

/// What a sale ended with.
#[derive(Debug, Default)]
pub struct Report {
    /// Items sold: writes the storage accepted.
    pub sold: u64,
    /// Items left in storage at the end.
    pub left: u64,
    /// Late writes the storage rejected because their fencing token was stale.
    pub stale_writes_rejected: u64,
    /// Times a worker found the lock held and retried.
    pub lock_busy: u64,
}

/// Runs a sale of `stock` items by `workers` threads against the server at `url`.
///
/// # Errors
/// Any connection or command error.
pub fn run(url: &str, workers: usize, stock: u64) -> redis::RedisResult<Report> {
    let client = redis::Client::open(url)?;
    let storage = Storage::new(stock);
    let sold = AtomicU64::new(0);
    let rejected = AtomicU64::new(0);
    let busy = AtomicU64::new(0);
    thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|worker| {
                let (client, storage) = (&client, &storage);
                let (sold, rejected, busy) = (&sold, &rejected, &busy);
                scope.spawn(move || -> redis::RedisResult<()> {
                    let mut con = client.get_connection()?;
                    let owner = uuid::Uuid::new_v4().to_string();
                    let mut pause = worker < PAUSING_WORKERS;
                    while storage.stock() > 0 {
                        let token: Option<u64> = redis::cmd("LOCK.ACQUIRE")
                            .arg(LOCK)
                            .arg(&owner)
                            .arg(LEASE_MS)
                            .query(&mut con)?;
                        let Some(token) = token else {
                            busy.fetch_add(1, Ordering::Relaxed);
                            let backoff = rand::random_range(1..=3);
                            thread::sleep(Duration::from_millis(backoff));
                            continue;
                        };
                        let left = storage.stock();
                        if left > 0 {
                            if pause {
                                pause = false;
                                thread::sleep(Duration::from_millis(PAUSE_MS));
                            }
                            match storage.write(token, left - 1) {
                                Ok(()) => sold.fetch_add(1, Ordering::Relaxed),
                                Err(StaleToken) => rejected.fetch_add(1, Ordering::Relaxed),
                            };
                        }
                        let _: i64 = redis::cmd("LOCK.RELEASE")
                            .arg(LOCK)
                            .arg(&owner)
                            .query(&mut con)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|handle| handle.join().unwrap_or(Ok(())))
    })?;
    Ok(Report {
        sold: sold.into_inner(),
        left: storage.stock(),
        stale_writes_rejected: rejected.into_inner(),
        lock_busy: busy.into_inner(),
    })
}

fn main() -> redis::RedisResult<()> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    let workers = args.next().and_then(|n| n.parse().ok()).unwrap_or(16);
    let stock = args.next().and_then(|n| n.parse().ok()).unwrap_or(200);
    let report = run(&url, workers, stock)?;
    println!("{workers} workers, {stock} items in stock");
    println!("sold: {}  left: {}", report.sold, report.left);
    println!(
        "stale writes rejected by fencing: {}",
        report.stale_writes_rejected
    );
    println!("lock busy, retried: {}", report.lock_busy);
    println!(
        "{}",
        if report.sold + report.left == stock {
            "no oversell"
        } else {
            "OVERSOLD"
        }
    );
    Ok(())
}
