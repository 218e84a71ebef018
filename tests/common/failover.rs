//! Failovers, timed: a master killed for good and how long until a replica replaces it, in a
//! Sentinel group or a Redis Cluster, with the module or without it (Redis alone, the baseline);
//! and how long a replica lost for good stops grants synced to the in-sync set. Shared by
//! `tests/failover.rs`, which checks the bounds, and `benches/failover.rs`, which prints the
//! figures beside Redis alone.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use leasehold_client::{Client, Lock};

use super::cluster::{
    add_replica, cluster_timed, no_failover, serves, wait_for_takeover, wait_known,
};
use super::history::History;
use super::sentinel::{Group, Timing};
use super::{acquire_counted, holder, info_field, lock_info, wait_until};

/// Locks taken and counted on the master before it is killed, then looked for on the replica
/// that replaces it.
const LOCKS: usize = 10;

/// Waits until server `index` of `group` has learned the Sentinels' timing — its in-sync lease
/// is `down-after-milliseconds` plus 7 s — and its replicas hold such leases: the master lists
/// them within a second, and counts a shorter lease once a member acknowledged it (within
/// another).
pub fn wait_learned(group: &Group, index: usize, timing: Timing) {
    let mut con = group.servers[index].client();
    let lease = (timing.down_after_ms + 7_000).to_string();
    wait_until("the master learned the Sentinels' timing", || {
        info_field(&mut con, "lock", "lock_insync_lease_ms").as_deref() == Some(lease.as_str())
            && info_field(&mut con, "lock", "lock_insync_timing")
                .is_some_and(|source| source.starts_with("sentinel "))
    });
    thread::sleep(Duration::from_secs(3));
}

/// A Sentinel group (three servers, three Sentinels timed by `timing`, the module loaded or
/// not, all on TLS alone or not) whose master is killed for good: how long until the Sentinels
/// name another master, or `None` if they did not within `within`. With the module, [`LOCKS`]
/// locks taken and counted before the kill must all be on the new master.
pub fn sentinel_replaces_master(
    timing: Timing,
    (module, tls): (bool, bool),
    within: Duration,
) -> Option<Duration> {
    let history = Arc::new(History::new());
    let module_args: Option<&[&str]> = module.then_some(&[]);
    let mut group = if tls {
        Group::tls(&history, module_args, timing)
    } else if module {
        Group::with(&history, &[], timing)
    } else {
        Group::without_module(&history, timing)
    };
    if module {
        wait_learned(&group, 0, timing);
    }
    let mut master = group.servers[0].client();
    let tokens: Vec<(String, i64)> = (0..LOCKS)
        .filter(|_| module)
        .map(|n| {
            let key = format!("order:{n}");
            let token = acquire_counted(&mut master, &key, "holder", 600_000);
            (key, token)
        })
        .collect();
    group.lose(0);
    let died = Instant::now();
    if !group.wait_for_failover(0, within) {
        eprintln!("no failover within {within:?}: {}", group.describe());
        return None;
    }
    let replaced = died.elapsed();
    let promoted = group.master().expect("a master");
    let mut con = group.servers[promoted].client();
    for (key, token) in &tokens {
        assert_eq!(
            lock_info(&mut con, key).map(|info| info.1),
            Some(*token),
            "{key} on the promoted replica"
        );
    }
    Some(replaced)
}

/// A Redis Cluster (three masters, a replica of the first, `cluster-node-timeout`
/// `node_timeout_ms`, the module loaded or not) whose first master is killed for good — with
/// `paused`, 3 s before the end of a `CLIENT PAUSE ... WRITE` that long: how long until the
/// replica took over and every node answering sees `cluster_state:ok`. With the module,
/// [`LOCKS`] counted locks must be on the replica.
pub fn cluster_replaces_master(
    node_timeout_ms: u64,
    (module, paused): (bool, Option<Duration>),
    within: Duration,
) -> Duration {
    let mut nodes = cluster_timed(node_timeout_ms, module);
    let mut replica = add_replica(&nodes[0], node_timeout_ms, module);
    wait_known(&nodes, &replica);
    let mut keys = Vec::new();
    if module {
        wait_until("the replica may be failed over to", || {
            no_failover(&replica) == "no"
        });
        let mut master = nodes[0].client();
        keys = (0..)
            .map(|n| format!("order:{n}"))
            .filter(|key| serves(&nodes[0], key))
            .take(LOCKS)
            .collect();
        for key in &keys {
            acquire_counted(&mut master, key, "holder", 600_000);
        }
    } else {
        wait_until("the replica is in sync", || {
            info_field(&mut replica.client(), "replication", "master_link_status").as_deref()
                == Some("up")
        });
    }
    if let Some(pause) = paused {
        let ms = pause.as_millis().to_string();
        super::call(&mut nodes[0].client(), &["CLIENT", "PAUSE", &ms, "WRITE"]);
        thread::sleep(pause.saturating_sub(Duration::from_secs(3)));
        assert_eq!(
            no_failover(&replica),
            if module { "no" } else { "yes" },
            "the replica may still be failed over to"
        );
    }
    nodes[0].kill();
    let died = Instant::now();
    wait_for_takeover(&nodes[1..], &replica, within);
    let took_over = died.elapsed();
    let mut promoted = replica.client();
    for key in &keys {
        assert_eq!(
            holder(&mut promoted, key).as_deref(),
            Some("holder"),
            "{key}"
        );
    }
    replica.kill();
    took_over
}

/// A Sentinel group with the module (the Sentinels timed by `timing`) loses a replica for good:
/// how long, from the kill, until a grant synced to the in-sync set (the Rust client's default)
/// counts again — the master has dropped it.
pub fn lost_replica_stops_synced_grants(timing: Timing) -> Duration {
    let history = Arc::new(History::new());
    let mut group = Group::with(&history, &[], timing);
    wait_learned(&group, 0, timing);
    let url = format!("redis://127.0.0.1:{}", group.addresses[0]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let client = Client::open(&url).await.expect("client");
        let lock = Lock::new(&client, "job");
        let guard = lock.acquire(Duration::from_secs(5)).await.expect("counted");
        guard.release().await.expect("released");
        group.lose(2);
        let lost = Instant::now();
        loop {
            if let Ok(guard) = lock.acquire(Duration::from_secs(5)).await {
                let back = lost.elapsed();
                guard.release().await.expect("released");
                return back;
            }
            assert!(
                lost.elapsed() < Duration::from_secs(120),
                "synced grants never came back"
            );
        }
    })
}
