//! Grants and renewals synced to replicas before they count (`Sync`): on a real master and
//! replicas, with a replica running, stopped (`SIGSTOP`), the master turned replica, and a
//! replica killed for good. The server syncs the writes itself (module 0.7.0+): the client
//! sends each write with `NOSYNC` and one `LOCK.SYNC` behind a batch of them, no `LOCK.INSYNC`
//! and no `WAIT`, releases the grants of a batch the server refused and reports its
//! `NOREPLICAS` as `NotReplicated`; a fixed count still waits with `WAIT` behind `NOSYNC`.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod replicated;

use std::time::Duration;

use common::{Server, call, holder, lock_info};
use leasehold_client::{Client, Error, Lock, Sync};
use redis::Value;
use replicated::{calls, group, insync_replicas, pair, pair_with, wait_insync};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(10);
const QUICK: Duration = Duration::from_millis(200);

async fn client(server: &Server) -> Client {
    Client::open(&server.url()).await.expect("connect")
}

/// `WAIT` calls the server has run.
fn waits(server: &Server) -> u64 {
    calls(server, "wait")
}

fn fence(server: &Server, key: &str) -> Value {
    call(&mut server.client(), &["LOCK.FENCE", key])
}

fn int(token: u64) -> Value {
    Value::Int(i64::try_from(token).expect("below 2^53"))
}

/// Makes `master` wait up to 200 ms for its replicas before it refuses a synced write
/// (`lock.sync-timeout-ms`).
fn quick(master: &Server) {
    let set = ["CONFIG", "SET", "lock.sync-timeout-ms", "200"];
    assert_eq!(call(&mut master.client(), &set), Value::Okay);
}

/// A lock whose grants the client waits for with a 200 ms sync timeout (the server's must be
/// set apart, [`quick`]), after a synced grant on it.
async fn synced_once(client: &Client) -> Lock {
    let lock = Lock::new(client, "k").with_sync(Sync::to_replicas().timeout(QUICK));
    let guard = lock.try_acquire(TTL).await.expect("synced");
    assert!(guard.expect("free").release().await.expect("release"));
    lock
}

/// True when `outcome` is a refusal whose reason contains `reason`.
fn refused<T>(outcome: &leasehold_client::Result<T>, reason: &str) -> bool {
    matches!(outcome, Err(Error::NotReplicated { reason: why, .. }) if why.contains(reason))
}

/// The reason of a refusal, or what came instead.
fn outcome(outcome: &leasehold_client::Result<Option<leasehold_client::Guard>>) -> String {
    match outcome {
        Ok(guard) => format!("granted: {:?}", guard.as_ref().map(|g| g.token())),
        Err(error) => error.to_string(),
    }
}

const UNACKNOWLEDGED: &str = "not every in-sync replica acknowledged within 200 ms";

#[tokio::test(flavor = "multi_thread")]
async fn a_lone_server_waits_for_nothing() {
    let server = Server::start(&[]);
    let lock = Lock::new(&client(&server).await, "k");
    let guard = lock.try_acquire(TTL).await.expect("acquire").expect("free");
    assert!(guard.renew(TTL).await.expect("renew"));
    assert!(guard.release().await.expect("release"));
    assert_eq!(waits(&server), 0, "no replicas: no WAIT");
    assert_eq!(
        calls(&server, "lock.insync"),
        0,
        "the server syncs: nothing to ask"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_is_on_the_replica_when_it_is_returned_immediate_or_handed_over() {
    let (master, replica) = pair();
    let client = client(&master).await;
    let before = waits(&master);
    let guard = Lock::new(&client, "k")
        .try_acquire(TTL)
        .await
        .expect("acquire");
    let guard = guard.expect("free");
    assert_eq!(
        fence(&replica, "k"),
        int(guard.token()),
        "already on the replica"
    );
    assert_eq!(waits(&master), before, "the server synced it: no WAIT");
    assert_eq!(calls(&master, "lock.insync"), 0);

    let waiting = tokio::spawn({
        let lock = Lock::new(&client, "k");
        async move { lock.acquire_timeout(TTL, Duration::from_secs(5)).await }
    });
    common::queued(&mut master.client(), "k", 1);
    assert!(guard.release().await.expect("release"));
    let handed = waiting
        .await
        .expect("task")
        .expect("wait")
        .expect("granted");
    assert_eq!(
        fence(&replica, "k"),
        int(handed.token()),
        "the hand-over too"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_the_replica_does_not_get_is_released_and_reported() {
    let (master, replica) = pair();
    quick(&master);
    let client = client(&master).await;
    let lock = synced_once(&client).await;
    replica.signal("STOP");
    let releases = calls(&master, "lock.release");
    let tried = lock.try_acquire(TTL).await;
    assert!(refused(&tried, UNACKNOWLEDGED), "{}", outcome(&tried));
    let message = outcome(&tried);
    assert!(
        message.contains("NOREPLICAS") && message.contains("the grant was released"),
        "the server's whole refusal: {message}"
    );
    assert_eq!(holder(&mut master.client(), "k"), None, "released");
    assert!(
        calls(&master, "lock.release") <= releases + 1,
        "by the server (at most its own release), not by the client too"
    );

    // With a wait budget it tries again within it, and gets it once the replica is back.
    let resume = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        replica.signal("CONT");
        replica
    });
    let guard = lock
        .acquire_timeout(TTL, Duration::from_secs(5))
        .await
        .expect("acquire");
    let replica = resume.await.expect("resumed");
    let guard = guard.expect("granted after the replica came back");
    assert_eq!(fence(&replica, "k"), int(guard.token()));
    assert!(
        Lock::new(&client, "other")
            .with_sync(Sync::off())
            .try_acquire(TTL)
            .await
            .is_ok(),
        "sync off"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_the_replica_does_not_get_has_every_grant_released_and_reported() {
    let (master, replica) = pair();
    quick(&master);
    let options = leasehold_client::ClientOptions::new().sync_connections(1);
    let client = Client::open_with(&master.url(), options)
        .await
        .expect("connect");
    synced_once(&client).await;
    replica.signal("STOP");
    let syncs = calls(&master, "lock.sync");
    let tasks: Vec<_> = (0..8)
        .map(|n| {
            // Queued up to 2 s for the one connection: the server refuses each batch at 200 ms.
            let sync = Sync::to_replicas().timeout(Duration::from_secs(2));
            let lock = Lock::new(&client, &format!("k{n}")).with_sync(sync);
            tokio::spawn(async move { lock.try_acquire(TTL).await })
        })
        .collect();
    for task in tasks {
        let tried = task.await.expect("task");
        assert!(refused(&tried, UNACKNOWLEDGED), "{}", outcome(&tried));
        assert!(
            outcome(&tried).contains("the grant was released"),
            "{}",
            outcome(&tried)
        );
    }
    let mut con = master.client();
    for n in 0..8 {
        assert_eq!(holder(&mut con, &format!("k{n}")), None, "k{n} released");
    }
    let syncs = calls(&master, "lock.sync") - syncs;
    assert!(
        syncs < 8,
        "{syncs} LOCK.SYNC for 8 grants over one connection: batched"
    );
    replica.signal("CONT");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_master_turned_replica_refuses_the_grants_it_held() {
    let (master, replica) = pair();
    let client = client(&master).await;
    let lock = Lock::new(&client, "k").with_sync(Sync::to_replicas().timeout(TTL));
    let set = ["CONFIG", "SET", "lock.sync-timeout-ms", "10000"];
    assert_eq!(call(&mut master.client(), &set), Value::Okay);
    replica.signal("STOP");
    let tried = tokio::spawn(async move { lock.try_acquire(TTL).await });
    common::wait_until("the grant is held", || {
        holder(&mut master.client(), "k").is_some()
    });
    // A failover demotes the master while the grant waits for its replica.
    let port = replica.port.to_string();
    call(&mut master.client(), &["REPLICAOF", "127.0.0.1", &port]);
    let tried = tokio::time::timeout(Duration::from_secs(5), tried)
        .await
        .expect("refused at once, not after the sync timeout")
        .expect("task");
    assert!(
        refused(&tried, "this server is no longer a master"),
        "{}",
        outcome(&tried)
    );
    replica.signal("CONT");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fixed_count_waits_with_wait_behind_nosync() {
    let (master, replica) = pair();
    let client = client(&master).await;
    let lock = Lock::new(&client, "k").with_sync(Sync::exactly(1));
    let before = waits(&master);
    let guard = lock.try_acquire(TTL).await.expect("acquire").expect("free");
    assert_eq!(
        fence(&replica, "k"),
        int(guard.token()),
        "WAIT 1 counted it"
    );
    assert!(guard.renew(TTL).await.expect("renew"));
    assert_eq!(waits(&master) - before, 2, "one WAIT per write");

    // Two replicas asked of one: the client finds it short and releases the grant itself.
    let two = Lock::new(&client, "two").with_sync(Sync::exactly(2).timeout(QUICK));
    let tried = two.try_acquire(TTL).await;
    assert!(
        refused(
            &tried,
            "1 of the 2 replicas asked for acknowledged within 200 ms"
        ),
        "{}",
        outcome(&tried)
    );
    assert_eq!(holder(&mut master.client(), "two"), None, "released");
    assert!(guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread")]
async fn waitaof_puts_the_grant_on_the_replicas_disks_where_the_server_has_it() {
    let (master, replica) = pair_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let waitaof = call(&mut master.client(), &["COMMAND", "INFO", "WAITAOF"]);
    if waitaof == Value::Array(vec![Value::Nil]) {
        return; // Redis 7.0 has no WAITAOF (7.2+, Valkey 8+)
    }
    let client = client(&master).await;
    let lock = Lock::new(&client, "k").with_sync(Sync::to_replicas().with_aof(true));
    let guard = lock.try_acquire(TTL).await.expect("acquire").expect("free");
    assert_eq!(fence(&replica, "k"), int(guard.token()));
    assert!(guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_the_replica_does_not_get_does_not_count_and_a_watched_holding_is_lost() {
    let (master, replica) = pair();
    quick(&master);
    let client = client(&master).await;
    let lock = synced_once(&client).await;
    let renewed = lock.try_acquire(TTL).await.expect("acquire").expect("free");
    let watched = Lock::new(&client, "w")
        .with_sync(Sync::to_replicas().timeout(QUICK))
        .with_watchdog(true);
    let lease = Duration::from_millis(1_500);
    let watched = watched.try_acquire(lease).await.expect("acquire");
    let watched = watched.expect("free");
    let (renewed_until, watched_until) = (renewed.lease_end(), watched.lease_end());
    let renewals = calls(&master, "lock.renew");
    replica.signal("STOP");

    let renewal = renewed.renew(TTL * 2).await;
    assert!(refused(&renewal, UNACKNOWLEDGED), "{renewal:?}");
    let message = renewal.as_ref().err().map(ToString::to_string);
    assert!(
        message
            .as_ref()
            .is_some_and(|m| m.contains("the renewal does not count")),
        "{message:?}"
    );
    assert_eq!(
        renewed.lease_end(),
        renewed_until,
        "the lease end it counts on"
    );
    assert!(renewed.is_held(), "held until that lease ends");

    // The watchdog keeps renewing, none counts: lost when its last synced lease ends.
    tokio::time::timeout(lease * 3, watched.lost())
        .await
        .expect("reported lost");
    let lost_at = Instant::now();
    assert!(lost_at >= watched_until, "not before its lease ended");
    assert!(
        lost_at - watched_until < Duration::from_millis(500),
        "{:?} after it ended",
        lost_at - watched_until
    );
    assert_eq!(watched.lease_end(), watched_until);
    assert!(
        calls(&master, "lock.renew") >= renewals + 3,
        "it kept trying"
    );
    replica.signal("CONT");
    // Stopped for over 2 s, the replica may have to rejoin the in-sync set first.
    let mut renewal = renewed.renew(TTL).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while matches!(renewal, Err(Error::NotReplicated { .. })) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        renewal = renewed.renew(TTL).await;
    }
    assert!(renewal.expect("renewed once the replica is back"));
    assert!(renewed.lease_end() > renewed_until);

    // A renewal that did not count may still have been made on the master: a shorter one
    // bounds the lease the holder counts on.
    replica.signal("STOP");
    let short = Duration::from_millis(300);
    let renewal = renewed.renew(short).await;
    assert!(
        matches!(renewal, Err(Error::NotReplicated { .. })),
        "{renewal:?}"
    );
    assert!(
        renewed.lease_end() <= Instant::now() + short,
        "at most the shorter lease"
    );
    replica.signal("CONT");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_acknowledged_only_after_its_lease_ended_is_not_returned() {
    let (master, replica) = pair();
    let client = client(&master).await;
    synced_once(&client).await;
    let lock = Lock::new(&client, "late").with_sync(Sync::to_replicas().timeout(TTL));
    replica.signal("STOP");
    let resumed = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        replica.signal("CONT");
        replica
    });
    // The replica acknowledges after 400 ms, within the sync timeout but past the 200 ms lease:
    // the lock may already have gone to another holder.
    let late = lock.try_acquire(Duration::from_millis(200)).await;
    assert!(
        refused(&late, "after its lease ended"),
        "{}",
        outcome(&late)
    );
    let _replica = resumed.join().expect("resumed");
    let next = Lock::new(&client, "late").try_acquire(TTL).await;
    assert!(next.expect("acquire").is_some(), "it was released");
}

/// Module arguments that drop a dead replica from the in-sync set within about 4 s.
const QUICK_DROP: [&str; 4] = ["insync-timeout-ms", "1000", "insync-drop-delay-ms", "500"];

/// [`QUICK_DROP`], and synced writes refused after 200 ms.
const QUICK_DROP_AND_SYNC: [&str; 6] = [
    "insync-timeout-ms",
    "1000",
    "insync-drop-delay-ms",
    "500",
    "sync-timeout-ms",
    "200",
];

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_dead_for_good_stops_counting_once_the_master_drops_it() {
    let (master, mut replicas) = group(&QUICK_DROP_AND_SYNC, 2);
    let before = client(&master).await;
    synced_once(&before).await;
    replicas[0].kill();
    let killed = Instant::now();
    let after = client(&master).await;

    // Until the master drops it, the dead replica is a member that acknowledges nothing.
    let tried = synced_once_more(&before).await;
    assert!(refused(&tried, UNACKNOWLEDGED), "{}", outcome(&tried));

    for client in [&before, &after] {
        loop {
            let tried = synced_once_more(client).await;
            if let Ok(Some(guard)) = tried {
                assert_eq!(insync_replicas(&master), Some(1), "granted before the drop");
                assert!(guard.release().await.expect("release"));
                break;
            }
            assert!(refused(&tried, ""), "{}", outcome(&tried));
            assert!(
                killed.elapsed() < Duration::from_secs(6),
                "still refused: {}",
                outcome(&tried)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watched_holding_outlives_a_replica_lost_for_good() {
    // Until the master drops the dead replica (about 3.5 s here, 25 s with the module's
    // defaults), no renewal counts; the watchdog keeps trying every 1.5 s (the sync timeout and
    // a pause), so one lands after the drop, well before the 9 s lease it last counted ends.
    let (master, mut replicas) = group(&QUICK_DROP, 2);
    let client = client(&master).await;
    let lease = Duration::from_secs(9);
    let lock = Lock::new(&client, "k").with_watchdog(true);
    let guard = lock
        .try_acquire(lease)
        .await
        .expect("acquire")
        .expect("free");
    let held = lock_info(&mut master.client(), "k").expect("held");
    replicas[0].kill();
    let killed = Instant::now();
    tokio::select! {
        () = guard.lost() => panic!("told lost {:?} after the replica died", killed.elapsed()),
        () = tokio::time::sleep(lease * 2) => {}
    }
    assert_eq!(
        insync_replicas(&master),
        Some(1),
        "the dead replica was dropped"
    );
    // Held after two leases: renewals counted again after the drop.
    assert!(guard.is_held());
    let after = lock_info(&mut master.client(), "k").expect("held");
    assert_eq!((&after.0, after.1), (&held.0, held.1), "owner and token");
    assert!(after.2 > 4_500, "renewed: {} ms left", after.2);
    assert_eq!(
        fence(&replicas[1], "k"),
        int(guard.token()),
        "on the replica left"
    );
}

/// A grant of `k` synced within 200 ms.
async fn synced_once_more(
    client: &Client,
) -> leasehold_client::Result<Option<leasehold_client::Guard>> {
    let lock = Lock::new(client, "k").with_sync(Sync::to_replicas().timeout(QUICK));
    lock.try_acquire(TTL).await
}

#[tokio::test(flavor = "multi_thread")]
async fn fewer_in_sync_replicas_than_the_master_requires_count_no_grant() {
    let args = [&["min-insync-replicas", "2"][..], &QUICK_DROP].concat();
    let (master, mut replicas) = group(&args, 2);
    let client = client(&master).await;
    synced_once(&client).await;
    replicas[1].kill();
    wait_insync(&master, 1);

    let tried = synced_once_more(&client).await;
    let named = "the master has 1 in-sync replicas, fewer than lock.min-insync-replicas (2)";
    assert!(refused(&tried, named), "{}", outcome(&tried));
    let message = tried
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
    assert!(message.contains("lock.min-insync-replicas"), "{message}");
    assert_eq!(holder(&mut master.client(), "k"), None, "released");

    let exactly = Lock::new(&client, "k").with_sync(Sync::exactly(1));
    let opted_out = exactly.try_acquire(TTL).await.expect("acquire");
    assert!(opted_out.is_some(), "a fixed count opts out");
}
