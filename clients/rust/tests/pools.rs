//! The client's dedicated connections, counted on real servers: waits and synced writes reuse
//! them, a connection whose reply was lost is closed and never lent again, and an exhausted
//! pool makes callers queue within their own budget without holding up a holder's renewal and
//! release; concurrent synced writes go in batches, one command each and one `LOCK.SYNC`
//! behind each batch, the server syncing them, and a caller that drops its future loses only
//! its own write, whose grant the client releases.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod replicated;

use std::time::{Duration, Instant};

use common::{Server, call, holder, info_field, queued, waiters};
use leasehold_client::{Client, ClientOptions, Error, Lock, Sync};
use replicated::{calls, pair};

const TTL: Duration = Duration::from_secs(10);

/// Connections the server has accepted so far, asked on `con` (opened beforehand).
fn accepted(con: &mut redis::Connection) -> u64 {
    info_field(con, "stats", "total_connections_received")
        .and_then(|count| count.parse().ok())
        .expect("INFO stats")
}

/// A client with `options` and sessions off: these tests count the pools' connections (the
/// session's is not one of them, and redials when a frozen server misses its heartbeats), and
/// a guard's lease end is then its lease's alone.
async fn client(server: &Server, options: ClientOptions) -> Client {
    Client::open_with(&server.url(), options.sessions(false))
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread")]
async fn synced_grants_and_waits_reuse_at_most_a_pools_worth_of_connections() {
    let (master, _replica) = pair();
    let mut con = master.client();
    let options = ClientOptions::new().wait_connections(4).sync_connections(2);
    let client = client(&master, options).await;
    let lock = Lock::new(&client, "k");
    let waits = calls(&master, "wait");
    let before = accepted(&mut con);
    for _ in 0..200 {
        let guard = lock.try_acquire(TTL).await.expect("acquire").expect("free");
        assert!(guard.release().await.expect("release"));
    }
    let granted = accepted(&mut con) - before;
    assert!(
        granted <= 2,
        "200 synced grants opened {granted} connections"
    );

    let before = accepted(&mut con);
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move {
                for _ in 0..25 {
                    let wait = Duration::from_secs(30);
                    let guard = lock.acquire_timeout(TTL, wait).await.expect("wait");
                    let guard = guard.expect("granted");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    assert!(guard.release().await.expect("release"));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("a worker");
    }
    let waited = accepted(&mut con) - before;
    assert!(waited <= 4, "100 waits opened {waited} connections");
    let waits = calls(&master, "wait") - waits;
    assert_eq!(waits, 0, "the server synced every grant: no WAIT");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wait_cancelled_in_flight_closes_its_connection() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let client = client(&server, ClientOptions::new()).await;
    let lock = Lock::new(&client, "k");
    let held = lock.try_acquire(TTL).await.expect("acquire").expect("free");
    let before = accepted(&mut con);
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire_timeout(TTL, Duration::from_secs(30)).await }
    });
    queued(&mut con, "k", 1);
    waiting.abort();
    assert!(waiting.await.is_err(), "cancelled");
    // The server saw the connection close: its waiter left the queue.
    queued(&mut con, "k", 0);
    next_wait_dials_anew(&lock, &mut con, before).await;
    assert!(held.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wait_whose_reply_timed_out_is_not_reused() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let client = client(&server, ClientOptions::new()).await;
    let lock = Lock::new(&client, "k").with_sync(Sync::off());
    let held = lock.try_acquire(TTL).await.expect("acquire").expect("free");
    let before = accepted(&mut con);
    let waiter = lock.clone().with_timeout_margin(Duration::from_millis(100));
    let waiting = tokio::spawn(async move {
        let wait = Duration::from_secs(1);
        waiter.acquire_timeout(TTL, wait).await
    });
    queued(&mut con, "k", 1);
    // Frozen past the wait and its margin: the client gives up on the reply first.
    server.signal("STOP");
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.signal("CONT");
    let outcome = waiting.await.expect("task").expect("recovered");
    assert!(outcome.is_none(), "still held by the first holder");
    next_wait_dials_anew(&lock, &mut con, before).await;
    assert!(held.release().await.expect("release"));
}

/// The wait after one whose reply was lost (the lock still held) needs a connection of its
/// own: the lost one's was closed, not lent again — two in all since `before`.
async fn next_wait_dials_anew(lock: &Lock, con: &mut redis::Connection, before: u64) {
    let short = Duration::from_millis(100);
    assert!(
        lock.acquire_timeout(TTL, short)
            .await
            .expect("wait")
            .is_none()
    );
    assert_eq!(
        accepted(con) - before,
        2,
        "the lost reply's connection was not reused"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exhausted_pool_makes_callers_queue_within_their_budget_and_never_holds_up_a_holder() {
    let (master, replica) = pair();
    let mut con = master.client();
    let options = ClientOptions::new().wait_connections(2).sync_connections(1);
    let client = client(&master, options).await;
    let lock = Lock::new(&client, "k");
    let held = lock.try_acquire(TTL).await.expect("acquire").expect("free");
    let waiting: Vec<_> = (0..2)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move {
                let wait = Duration::from_secs(60);
                let guard = lock.acquire_timeout(TTL, wait).await.expect("wait");
                guard.expect("served").release().await.expect("release")
            })
        })
        .collect();
    queued(&mut con, "k", 2);

    // Every wait connection is taken: a third waiter queues for one, and its budget runs out.
    let started = Instant::now();
    let budget = Duration::from_millis(500);
    let third = lock.acquire_timeout(TTL, budget).await.expect("no error");
    let took = started.elapsed();
    assert!(third.is_none(), "answered as a wait that timed out");
    assert!(took >= budget && took < budget * 4, "{took:?}");
    assert_eq!(waiters(&mut con, "k"), 2, "it never reached the server");

    // The holder's synced renewal and its release go through; the waiters are served in turn.
    let lease_end = held.lease_end();
    assert!(held.renew(TTL).await.expect("a synced renewal"));
    assert!(held.lease_end() > lease_end);
    assert!(held.release().await.expect("release"));
    for waiter in waiting {
        assert!(waiter.await.expect("task"), "held until released");
    }

    // The only sync connection waits for a stopped replica; another synced grant queues for it
    // within its own sync timeout, and is not synced. (The server waits up to 3 s.)
    let set = ["CONFIG", "SET", "lock.sync-timeout-ms", "3000"];
    assert_eq!(call(&mut con, &set), redis::Value::Okay);
    replica.signal("STOP");
    let slow = tokio::spawn({
        let lock = Lock::new(&client, "a").with_sync(Sync::to_replicas().timeout(budget * 6));
        async move { lock.try_acquire(TTL).await.map(|guard| guard.is_some()) }
    });
    common::wait_until("the first grant is made", || {
        holder(&mut con, "a").is_some()
    });
    let acquires = calls(&master, "lock.acquire");
    let quick = Lock::new(&client, "b").with_sync(Sync::to_replicas().timeout(budget));
    let started = Instant::now();
    let refused = quick.try_acquire(TTL).await;
    let took = started.elapsed();
    assert!(
        matches!(&refused, Err(Error::NotReplicated { reason, .. })
            if reason.starts_with("no sync connection was free")),
        "{:?}",
        refused.map(|guard| guard.is_some())
    );
    assert!(took >= budget && took < budget * 4, "{took:?}");
    assert_eq!(calls(&master, "lock.acquire"), acquires, "never sent");
    replica.signal("CONT");
    let slow = slow.await.expect("task").expect("acquire");
    assert!(
        slow,
        "acknowledged once the replica was back, within its timeout"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_synced_grants_go_in_batches_over_the_sync_pool() {
    let (master, replica) = pair();
    let mut con = master.client();
    let options = ClientOptions::new().sync_connections(8);
    let client = client(&master, options).await;
    let first = Lock::new(&client, "first").try_acquire(TTL).await;
    let first = first.expect("synced").expect("free");
    assert!(first.release().await.expect("release"));
    let (acquires, waits) = (calls(&master, "lock.acquire"), calls(&master, "wait"));
    let syncs = calls(&master, "lock.sync");
    let before = accepted(&mut con);

    // 64 tasks, each on a lock of its own, acquire and release 20 times: the grants waiting for
    // a connection go together, and the server holds each batch's `LOCK.SYNC` until the
    // replica has it, over at most 8 connections.
    let tasks: Vec<_> = (0..64)
        .map(|n| {
            let lock = Lock::new(&client, &format!("k{n}"));
            tokio::spawn(async move {
                for _ in 0..20 {
                    let guard = lock.try_acquire(TTL).await.expect("synced").expect("free");
                    assert!(guard.release().await.expect("release"));
                }
                let guard = lock.try_acquire(TTL).await.expect("synced").expect("free");
                (lock.name().to_owned(), guard)
            })
        })
        .collect();
    let mut guards = Vec::new();
    for task in tasks {
        guards.push(task.await.expect("task"));
    }
    let opened = accepted(&mut con) - before;
    assert!(opened <= 8, "{opened} connections opened");
    let grants = calls(&master, "lock.acquire") - acquires;
    assert_eq!(grants, 64 * 21, "one command per grant");
    let syncs = calls(&master, "lock.sync") - syncs;
    assert!(
        syncs < grants,
        "{syncs} LOCK.SYNC for {grants} grants: batched"
    );
    assert_eq!(calls(&master, "wait") - waits, 0, "no WAIT");
    assert_eq!(calls(&master, "lock.insync"), 0, "no LOCK.INSYNC");
    let mut on_replica = replica.client();
    for (name, guard) in &guards {
        let fence = call(&mut on_replica, &["LOCK.FENCE", name]);
        let token = i64::try_from(guard.token()).expect("below 2^63");
        assert_eq!(fence, redis::Value::Int(token), "{name} on the replica");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_caller_that_drops_its_future_loses_only_its_own_write_and_its_grant_is_released() {
    let (master, replica) = pair();
    let mut con = master.client();
    // The server would hold a grant's LOCK.SYNC 10 s for a stopped replica: a release sooner is
    // the one the client makes when the grant's caller left.
    let set = ["CONFIG", "SET", "lock.sync-timeout-ms", "10000"];
    assert_eq!(call(&mut con, &set), redis::Value::Okay);
    let client = client(&master, ClientOptions::new().sync_connections(1)).await;
    let long = Sync::to_replicas().timeout(Duration::from_secs(15));
    let first = Lock::new(&client, "first").with_sync(long);
    let first = first.try_acquire(TTL).await.expect("synced").expect("free");
    assert!(first.release().await.expect("release"));
    // Grants the module made (not `INFO commandstats`, where Redis 7.2 and later count a
    // blocked command only once it is answered, and a's never is).
    let granted = |con: &mut redis::Connection| {
        info_field(con, "lock", "lock_acquisitions")
            .and_then(|count| count.parse::<u64>().ok())
            .expect("lock_acquisitions")
    };
    let acquires = granted(&mut con);

    // The only sync connection carries a's grant, whose LOCK.SYNC waits for a stopped replica;
    // b and d queue for the connection.
    replica.signal("STOP");
    let try_acquire = |name: &str| {
        let lock = Lock::new(&client, name).with_sync(long);
        tokio::spawn(async move { lock.try_acquire(TTL).await.map(|guard| guard.is_some()) })
    };
    let a = try_acquire("a");
    common::wait_until("a's grant is made and held", || {
        holder(&mut con, "a").is_some()
    });
    let (b, d) = (try_acquire("b"), try_acquire("d"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Dropped while queued for a connection: never sent.
    d.abort();
    assert!(d.await.expect_err("aborted").is_cancelled());

    // Dropped with its grant held: its batch's only caller left, so the connection closes and
    // the client releases the grant.
    a.abort();
    let dropped = Instant::now();
    assert!(a.await.expect_err("aborted").is_cancelled());
    common::wait_until("a's grant is released", || holder(&mut con, "a").is_none());
    assert!(
        dropped.elapsed() < Duration::from_secs(3),
        "{:?}",
        dropped.elapsed()
    );

    // b goes on a new connection, and counts once the replica is back.
    common::wait_until("b's grant is made and held", || {
        holder(&mut con, "b").is_some()
    });
    replica.signal("CONT");
    let b = b.await.expect("task");
    assert!(b.expect("b's write is answered"), "b is granted, synced");
    assert_eq!(holder(&mut con, "d"), None);
    assert_eq!(granted(&mut con) - acquires, 2, "a and b, not d");
}
