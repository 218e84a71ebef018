//! What syncing grants to the replicas costs `leasehold-client`: one task loops
//! `try_acquire` → `release` on a master with one replica for 3 s, with grants synced (the
//! default: `WAIT 1` on the grant's own connection) and not (`Sync::off()`, on the shared
//! connection).
//!
//! Run by `make bench` (`LEASEHOLD_BENCH_URL` names the master); prints one JSON object per
//! mode: `{"mode", "ops_per_s", "p50_ms", "p99_ms"}`, the latency of acquire + release.

use std::time::{Duration, Instant};

use leasehold_client::{Client, Lock, Sync};

const RUN_FOR: Duration = Duration::from_secs(3);
const TTL: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> leasehold_client::Result<()> {
    let url =
        std::env::var("LEASEHOLD_BENCH_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::open(&url).await?;
    for (mode, sync) in [("synced", Sync::to_replicas()), ("not synced", Sync::off())] {
        let lock = Lock::new(&client, "bench:client-sync").with_sync(sync);
        let mut latencies = Vec::new();
        let started = Instant::now();
        while started.elapsed() < RUN_FOR {
            let sent = Instant::now();
            let guard = lock.try_acquire(TTL).await?.expect("a free lock");
            guard.release().await?;
            latencies.push(sent.elapsed());
        }
        latencies.sort_unstable();
        let quantile = |q: f64| {
            let at = ((latencies.len() - 1) as f64 * q).round() as usize;
            latencies[at].as_secs_f64() * 1_000.0
        };
        println!(
            r#"{{"mode": "{mode}", "ops_per_s": {:.0}, "p50_ms": {:.3}, "p99_ms": {:.3}}}"#,
            latencies.len() as f64 / started.elapsed().as_secs_f64(),
            quantile(0.5),
            quantile(0.99)
        );
    }
    Ok(())
}
