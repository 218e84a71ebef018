//! Grants and renewals synced to replicas before they count (`Sync`): on a real master and
//! replica, with the replica running, stopped (`SIGSTOP`) and detached.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod replicated;

use std::time::Duration;

use common::{Server, call, holder};
use leasehold_client::{Client, Error, Lock, Sync};
use redis::Value;
use replicated::{calls, pair, pair_with};
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

/// A lock whose grants wait up to 200 ms for the replicas, after a grant that learned the one
/// replica of `client`'s master.
async fn learned_one_replica(client: &Client) -> Lock {
    let lock = Lock::new(client, "k").with_sync(Sync::to_replicas().timeout(QUICK));
    let guard = lock.try_acquire(TTL).await.expect("learns 1 replica");
    assert!(guard.expect("free").release().await.expect("release"));
    lock
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lone_server_waits_for_nothing() {
    let server = Server::start(&[]);
    let lock = Lock::new(&client(&server).await, "k");
    let guard = lock.try_acquire(TTL).await.expect("acquire").expect("free");
    assert!(guard.renew(TTL).await.expect("renew"));
    assert!(guard.release().await.expect("release"));
    assert_eq!(waits(&server), 0, "no replicas: no WAIT");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_is_on_the_replica_when_it_is_returned_immediate_or_handed_over() {
    let (master, replica) = pair();
    let client = client(&master).await;
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
    assert!(waits(&master) >= 1);

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
    let client = client(&master).await;
    let lock = learned_one_replica(&client).await;
    replica.signal("STOP");
    let refused = lock.try_acquire(TTL).await;
    assert!(
        matches!(
            refused,
            Err(Error::NotReplicated {
                acked: 0,
                wanted: 1
            })
        ),
        "{:?}",
        refused.map(|g| g.map(|g| g.token()))
    );
    assert_eq!(holder(&mut master.client(), "k"), None, "released");

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
async fn a_replica_a_master_lost_still_counts_even_for_a_new_master() {
    let (mut master, replica) = pair();
    let client = client(&master).await;
    let lock = learned_one_replica(&client).await;
    // The replica leaves, as a promoted one would in a split brain: the master still wants it.
    call(&mut replica.client(), &["REPLICAOF", "NO", "ONE"]);
    for _ in 0..2 {
        let refused = lock.try_acquire(TTL).await;
        assert!(matches!(
            refused,
            Err(Error::NotReplicated {
                acked: 0,
                wanted: 1
            })
        ));
    }
    let exactly = lock.clone().with_sync(Sync::exactly(0));
    assert!(
        exactly.try_acquire(TTL).await.expect("acquire").is_some(),
        "set to 0"
    );
    // A restarted master (a new replication ID) with no replica waits for as many as the
    // master before had, until one attaches.
    master.kill();
    master.restart();
    let mut refused = None;
    for _ in 0..50 {
        match lock.try_acquire(TTL).await {
            Err(Error::NotReplicated { acked, wanted }) => {
                refused = Some((acked, wanted));
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert_eq!(refused, Some((0, 1)), "a new master without its replica");
    replica.replicate(&master);
    let mut granted = None;
    for _ in 0..50 {
        if let Ok(Some(guard)) = lock.try_acquire(TTL).await {
            granted = Some(guard);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(granted.is_some(), "synced once a replica attached");
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
    let client = client(&master).await;
    let lock = learned_one_replica(&client).await;
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

    let refused = renewed.renew(TTL * 2).await;
    assert!(
        matches!(
            refused,
            Err(Error::NotReplicated {
                acked: 0,
                wanted: 1
            })
        ),
        "{refused:?}"
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
    assert!(
        renewed
            .renew(TTL)
            .await
            .expect("renewed once the replica is back")
    );
    assert!(renewed.lease_end() > renewed_until);

    // A renewal that did not count may still have been made on the master: a shorter one
    // bounds the lease the holder counts on.
    replica.signal("STOP");
    let short = Duration::from_millis(300);
    let refused = renewed.renew(short).await;
    assert!(
        matches!(refused, Err(Error::NotReplicated { .. })),
        "{refused:?}"
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
    learned_one_replica(&client).await;
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
        matches!(late, Err(Error::NotReplicated { acked: 0, .. })),
        "{:?}",
        late.map(|guard| guard.map(|guard| guard.token()))
    );
    let _replica = resumed.join().expect("resumed");
    let next = Lock::new(&client, "late").try_acquire(TTL).await;
    assert!(next.expect("acquire").is_some(), "it was released");
}
