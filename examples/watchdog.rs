//! Long jobs under a watched lock, with the Rust client (`clients/rust`): each worker takes the
//! nightly report's lock with the watchdog on and works for several leases — the watchdog keeps
//! renewing — writing each step to storage that checks fencing tokens. One worker's renewals
//! stop (as in a frozen process): its lease runs out, another worker takes over, and when the
//! frozen one wakes up its late write carries an old token and is rejected.
//!
//! ```text
//! cargo run --example watchdog -- redis://127.0.0.1:6379 4
//! ```
//! (URL and workers; the server must have the lock module loaded.)

use std::sync::Mutex;
use std::time::Duration;

use leasehold_client::{Client, Guard, Lock};

/// The lock of the job.
const LOCK: &str = "report:nightly";
/// The lease: every worker works longer than this.
const LEASE: Duration = Duration::from_millis(300);
/// One step of the job; a job is `STEPS` of them, two leases' worth.
const STEP: Duration = Duration::from_millis(150);
const STEPS: u32 = 4;

/// Storage that accepts a write only with a token at least as large as any it has seen.
#[derive(Default)]
pub struct Storage {
    highest: Mutex<u64>,
}

impl Storage {
    /// Writes a step for the holder of `token`; false when a newer holder has written already.
    pub fn write(&self, token: u64) -> bool {
        let mut highest = self
            .highest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if token < *highest {
            return false;
        }
        *highest = token;
        true
    }
}

/// What the run did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Jobs finished with every step accepted.
    pub jobs: u32,
    /// Late writes the storage turned down.
    pub stale_writes_rejected: u32,
}

/// Runs `workers` workers against the server at `url`, one job each; the last one freezes.
///
/// # Errors
/// When the server cannot be reached.
pub async fn run(url: &str, workers: u32) -> leasehold_client::Result<Report> {
    let client = Client::open(url).await?;
    let storage = std::sync::Arc::new(Storage::default());
    let frozen = {
        let lock = Lock::new(&client, LOCK);
        let guard = lock.acquire(LEASE).await?;
        let storage = std::sync::Arc::clone(&storage);
        tokio::spawn(async move { frozen_worker(guard, &storage).await })
    };
    let mut tasks = Vec::new();
    for _ in 0..workers.saturating_sub(1) {
        let lock = Lock::new(&client, LOCK).with_watchdog(true);
        let storage = std::sync::Arc::clone(&storage);
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire(LEASE).await?;
            let finished = watched_job(&guard, &storage).await;
            guard.release().await?;
            Ok::<bool, leasehold_client::Error>(finished)
        }));
    }
    let mut report = Report::default();
    for task in tasks {
        if task.await.unwrap_or(Ok(false))? {
            report.jobs += 1;
        }
    }
    if !frozen.await.unwrap_or(true) {
        report.stale_writes_rejected += 1;
    }
    Ok(report)
}

/// Works for `STEPS` steps while the watchdog renews the lease; stops if the lock is lost.
async fn watched_job(guard: &Guard, storage: &Storage) -> bool {
    for _ in 0..STEPS {
        tokio::select! {
            () = guard.lost() => return false,
            () = tokio::time::sleep(STEP) => {}
        }
        if !storage.write(guard.token()) {
            return false;
        }
    }
    true
}

/// Holds the lock without renewals, freezes past the lease, then writes: the storage has seen
/// a newer holder's token by then. Returns whether the late write got through.
async fn frozen_worker(guard: Guard, storage: &Storage) -> bool {
    assert!(
        storage.write(guard.token()),
        "the first holder writes first"
    );
    tokio::time::sleep(LEASE * 3).await;
    let accepted = storage.write(guard.token());
    drop(guard);
    accepted
}

#[tokio::main]
async fn main() -> leasehold_client::Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let workers = args.next().and_then(|n| n.parse().ok()).unwrap_or(4);
    let report = run(&url, workers).await?;
    println!("{report:?}");
    Ok(())
}
