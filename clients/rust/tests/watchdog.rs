//! The watchdog against a real server: it keeps a lock for as long as the guard lives, notices
//! at once when the lock is gone and never takes it back, sends nothing after release, and
//! survives its connection being killed; and a client-side timeout during a wait never leaves
//! a lock held by a caller who was told it did not get it.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::proxy::LinkProxy;
use common::{Server, call, holder, info_field, lock_info};
use leasehold_client::{Client, Lock, Lost, Sync};
use redis::Value;

const TTL: Duration = Duration::from_millis(300);

async fn client(url: &str) -> Client {
    Client::open(url).await.expect("connect")
}

fn renewals(con: &mut redis::Connection) -> i64 {
    info_field(con, "commandstats", "cmdstat_lock.renew")
        .and_then(|stats| {
            stats
                .split(',')
                .next()?
                .strip_prefix("calls=")?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Kills every normal connection but `admin`'s (`CLIENT KILL TYPE normal`), as a network blip
/// or a proxy restart does; returns how many.
fn blip(admin: &mut redis::Connection) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(admin)
        .expect("CLIENT KILL")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watched_lock_stays_held_for_ten_leases() {
    let server = Server::start(&[]);
    let client = client(&server.url()).await;
    let mut con = server.client();
    let lock = Lock::new(&client, "k").with_watchdog(true);
    let guard = lock.try_acquire(TTL).await.expect("acquire").expect("free");
    for _ in 0..10 {
        tokio::time::sleep(TTL).await;
        assert_eq!(holder(&mut con, "k").as_deref(), Some(guard.owner()));
        assert!(guard.is_held());
    }
    assert!(guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_deleted_behind_its_back_is_lost_at_once_and_never_taken_back() {
    let server = Server::start(&[]);
    let client = client(&server.url()).await;
    let mut con = server.client();
    let guard = Lock::new(&client, "k")
        .with_watchdog(true)
        .try_acquire(TTL)
        .await
        .expect("acquire")
        .expect("free");
    tokio::time::sleep(Duration::from_millis(50)).await;
    call(&mut con, &["DEL", "k"]);
    let deleted = Instant::now();
    tokio::time::timeout(TTL, guard.lost())
        .await
        .expect("lost within a renewal period");
    assert!(
        deleted.elapsed() <= TTL / 3 + Duration::from_millis(60),
        "{:?}",
        deleted.elapsed()
    );
    assert!(!guard.is_held());
    tokio::time::sleep(TTL * 3).await;
    assert_eq!(
        call(&mut con, &["EXISTS", "k"]),
        Value::Int(0),
        "nothing re-created it"
    );
    assert!(!guard.release().await.expect("release"), "it was not held");
}

#[tokio::test(flavor = "multi_thread")]
async fn no_renewal_is_sent_after_release_or_drop() {
    let server = Server::start(&[]);
    let client = client(&server.url()).await;
    let mut con = server.client();
    let lock = Lock::new(&client, "k").with_watchdog(true);
    let released = lock.try_acquire(TTL).await.expect("acquire").expect("free");
    tokio::time::sleep(TTL).await;
    assert!(released.release().await.expect("release"));
    let dropped = lock.try_acquire(TTL).await.expect("acquire").expect("free");
    tokio::time::sleep(TTL).await;
    drop(dropped);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = renewals(&mut con);
    assert!(after >= 4, "the watchdogs renewed while held: {after}");
    tokio::time::sleep(TTL * 3).await;
    assert_eq!(renewals(&mut con), after, "a renewal after the end");
    assert_eq!(holder(&mut con, "k"), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_watchdog_survives_its_connection_being_killed() {
    let server = Server::start(&[]);
    let client = client(&server.url()).await;
    let mut con = server.client();
    let lock = Lock::new(&client, "k").with_watchdog(true);
    let guard = lock
        .try_acquire(Duration::from_secs(1))
        .await
        .expect("acquire")
        .expect("free");
    for _ in 0..3 {
        // The client's shared one among them.
        let killed = blip(&mut con);
        assert!(killed >= 1, "killed {killed}");
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    assert!(guard.is_held());
    assert_eq!(holder(&mut con, "k").as_deref(), Some(guard.owner()));
    // The renewals went on the sync pool, which replaced its killed connection. The shared
    // connection (releases) was killed while idle: its next command fails and it reconnects.
    let probe = Lock::new(&client, "probe").with_sync(Sync::off());
    let _ = probe.try_acquire(Duration::from_secs(1)).await;
    assert!(guard.release().await.expect("release after reconnecting"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_hold_time_cap_ends_the_holding() {
    let server = Server::start(&[]);
    let client = client(&server.url()).await;
    let guard = Lock::new(&client, "k")
        .with_watchdog(true)
        .with_max_hold(Duration::from_millis(700))
        .try_acquire(TTL)
        .await
        .expect("acquire")
        .expect("free");
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("ends");
    let held = started.elapsed();
    assert!(
        held >= Duration::from_millis(650) && held < Duration::from_millis(1_100),
        "{held:?}"
    );
    // The holder counts its lease as ended a drift allowance (1% + 2 ms) before the server
    // does; the server's ends with the cap.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        holder(&mut server.client(), "k"),
        None,
        "its lease ended with the cap"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wait_whose_reply_never_comes_does_not_leave_the_lock_held_unknowingly() {
    // The waiter's connections go through a proxy. While it waits, its connection stalls, the
    // holder releases and the server grants the lock to the waiter; the reply is stuck, so the
    // client's timeout fires first. It must then find out that it holds the lock.
    let server = Server::start(&[]);
    let proxy = LinkProxy::to(server.port);
    let direct = client(&server.url()).await;
    let through_proxy = client(&format!("redis://127.0.0.1:{}", proxy.port)).await;
    let mut con = server.client();
    let first = Lock::new(&direct, "k")
        .try_acquire(Duration::from_secs(10))
        .await
        .expect("acquire")
        .expect("free");
    let first_owner = first.owner().to_owned();
    let waiter = Lock::new(&through_proxy, "k").with_timeout_margin(Duration::from_millis(300));
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .acquire_timeout(Duration::from_secs(10), Duration::from_millis(500))
                .await
        }
    });
    common::queued(&mut con, "k", 1);
    proxy.stall(proxy.accepted() - 1); // the wait's own connection, the last one opened
    assert!(first.release().await.expect("release"));
    common::wait_until("granted to the waiter in the server", || {
        holder(&mut con, "k").is_some_and(|owner| owner != first_owner)
    });
    let granted_to = holder(&mut con, "k");
    let outcome = waiting.await.expect("task").expect("recovered");
    let guard = outcome.expect("told it holds the lock it holds");
    assert_eq!(granted_to.as_deref(), Some(guard.owner()), "the same owner");
    assert!(guard.release().await.expect("release"));
}

/// The lease of the blip tests: renewed every 3 s.
const BLIP_LEASE: Duration = Duration::from_secs(9);

/// A holder with the watchdog and a waiter, each a client with the defaults (a session) of its
/// own, both syncing as `sync`, on one lock of one server. Every normal connection is killed
/// once ([`blip`]) halfway to the first renewal: that renewal finds its connection dead and
/// goes again at once on a fresh one (a tenth of the lease later would be too late for the
/// check), and for 3 s after the blip the holder is not told lost, the waiter is not granted
/// (it waits in the server again) and the holder keeps its lock, same owner and token.
async fn a_blip_loses_nothing(sync: Sync) {
    let server = Server::start(&[]);
    let mut admin = server.client();
    let holder_client = client(&server.url()).await;
    let lock = Lock::new(&holder_client, "k")
        .with_watchdog(true)
        .with_sync(sync);
    let guard = lock.try_acquire(BLIP_LEASE).await.expect("acquire");
    let guard = guard.expect("free");
    let granted = tokio::time::Instant::now();
    let held = lock_info(&mut admin, "k").expect("held");
    let waiter_client = client(&server.url()).await;
    let mut waiting = tokio::spawn(async move {
        let waiter = Lock::new(&waiter_client, "k").with_sync(sync);
        let wait = Duration::from_secs(30);
        let outcome = waiter.acquire_timeout(BLIP_LEASE, wait).await;
        outcome.map(|guard| guard.map(|guard| guard.token()))
    });
    common::queued(&mut admin, "k", 1);

    tokio::time::sleep_until(granted + BLIP_LEASE / 6).await;
    let killed = blip(&mut admin);
    let blipped = tokio::time::Instant::now();
    assert!(killed >= 3, "both sessions' and the wait's: {killed}");
    let lost = guard.lost_signal();
    let due = granted + BLIP_LEASE / 3 + Duration::from_millis(400);
    quiet_until(due, lost.clone(), &mut waiting, blipped).await;
    // 400 ms after the renewal was due, the server has it: more than 8 s of the 9 s lease left
    // (5.6 s without it).
    let (_, _, ttl, _, _) = lock_info(&mut admin, "k").expect("held");
    assert!(
        ttl > 8_000,
        "the renewal due {:?} after the blip has not come: {ttl} ms left",
        BLIP_LEASE / 6
    );
    let after_the_blip = blipped + Duration::from_secs(3);
    quiet_until(after_the_blip, lost, &mut waiting, blipped).await;
    assert!(guard.is_held());
    let after = lock_info(&mut admin, "k").expect("held");
    assert_eq!((&after.0, after.1), (&held.0, held.1), "owner and token");
    assert_eq!(after.4, 1, "the waiter waits in the server again");
    assert_eq!(u64::try_from(after.1).ok(), Some(guard.token()));
    // The release goes out though the connection it finds was killed by the blip, and the
    // waiter gets the lock at once.
    assert!(guard.release().await.expect("released"), "still held");
    let next = waiting.await.expect("the waiter").expect("granted");
    assert!(next.is_some_and(|token| token > held.1.unsigned_abs()));
}

/// Waits until `until`; fails if the holder is told it lost its lock (`lost`) or the waiter's
/// acquire ends (`waiting`) first, saying how long after the blip (at `blipped`).
async fn quiet_until<T: std::fmt::Debug>(
    until: tokio::time::Instant,
    lost: Lost,
    waiting: &mut tokio::task::JoinHandle<T>,
    blipped: tokio::time::Instant,
) {
    tokio::select! {
        () = lost.wait() => panic!("told lost {:?} after the blip", blipped.elapsed()),
        outcome = waiting => panic!("the waiter's acquire ended: {outcome:?}"),
        () = tokio::time::sleep_until(until) => {}
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blip_that_kills_every_connection_loses_no_watched_lock() {
    a_blip_loses_nothing(Sync::to_replicas()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blip_that_kills_every_connection_loses_no_watched_lock_with_syncing_off() {
    a_blip_loses_nothing(Sync::off()).await;
}
