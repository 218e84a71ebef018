//! The client's locks against one real server with the module: every API item of `Lock`,
//! `ReadWriteLock`, `Semaphore` and `Guard`.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::borrow::Borrow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Server, call, holder, shared_info};
use leasehold_client::{Backoff, Client, Lock, ReadWriteLock, Semaphore, Waiting};
use redis::Value;

const TTL: Duration = Duration::from_secs(10);

async fn client(server: &Server) -> Client {
    Client::open(&server.url()).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_is_taken_released_and_taken_again_with_a_larger_token() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let mut con = server.client();
    let lock = Lock::new(&client, "order:1");
    let guard = lock.try_acquire(TTL).await.expect("acquire").expect("free");
    assert_eq!(holder(&mut con, "order:1").as_deref(), Some(guard.owner()));
    assert_eq!(
        call(&mut con, &["LOCK.FENCE", "order:1"]),
        Value::Int(i64::try_from(guard.token()).expect("below 2^53"))
    );
    assert_eq!(lock.owner(), None, "a new owner per acquire");
    assert!(
        lock.try_acquire(TTL).await.expect("acquire").is_none(),
        "the same handle again is another owner"
    );
    let other = Lock::new(&client, "order:1");
    assert!(other.try_acquire(TTL).await.expect("acquire").is_none());
    let first = guard.token();
    assert!(
        guard.release().await.expect("release"),
        "it still held the lock"
    );
    let next = other
        .try_acquire(TTL)
        .await
        .expect("acquire")
        .expect("free again");
    assert!(next.token() > first);
    assert!(next.renew(Duration::from_secs(20)).await.expect("renew"));
    drop(next);
    common::wait_until("the dropped guard released", || {
        holder(&mut con, "order:1").is_none()
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_reenters_through_its_guard_and_a_fixed_owner_is_the_holder_everywhere() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let mut con = server.client();
    let lock = Lock::new(&client, "k");
    let outer = lock.try_acquire(TTL).await.expect("acquire").expect("free");
    let inner = outer
        .reenter(TTL)
        .await
        .expect("reenter")
        .expect("the holder");
    assert_eq!(inner.token(), outer.token());
    assert_eq!(inner.owner(), outer.owner());
    assert_eq!(common::lock_info(&mut con, "k").map(|info| info.3), Some(2));
    assert!(inner.release().await.expect("release"));
    assert_eq!(
        holder(&mut con, "k").as_deref(),
        Some(outer.owner()),
        "one hold left"
    );
    assert!(outer.release().await.expect("release"));
    assert_eq!(holder(&mut con, "k"), None);
    let shared_owner = Lock::new(&client, "k").with_owner("host-a:42");
    assert_eq!(shared_owner.owner(), Some("host-a:42"));
    let taken = shared_owner
        .try_acquire(TTL)
        .await
        .expect("acquire")
        .expect("free");
    let same = Lock::new(&client, "k").with_owner("host-a:42");
    assert_eq!(
        same.try_acquire(TTL)
            .await
            .expect("acquire")
            .map(|g| g.token()),
        Some(taken.token()),
        "asked to share an owner"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn waiting_in_the_server_is_granted_in_arrival_order_or_times_out() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let holder_lock = Lock::new(&client, "k");
    let held = holder_lock
        .try_acquire(TTL)
        .await
        .expect("acquire")
        .expect("free");
    let lock = Lock::new(&client, "k");
    let timed_out = lock
        .acquire_timeout(TTL, Duration::from_millis(200))
        .await
        .expect("wait");
    assert!(timed_out.is_none(), "still held after the wait");
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire(TTL).await }
    });
    common::queued(&mut server.client(), "k", 1);
    let first = held.token();
    held.release().await.expect("release");
    let granted = waiter.await.expect("task").expect("granted");
    assert!(granted.token() > first);
}

#[tokio::test(flavor = "multi_thread")]
async fn retrying_with_backoff_also_gets_the_lock() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let held = Lock::new(&client, "k")
        .try_acquire(Duration::from_millis(300))
        .await
        .expect("acquire")
        .expect("free");
    let lock = Lock::new(&client, "k").with_waiting(Waiting::Retry(Backoff::default()));
    let granted = lock
        .acquire_timeout(TTL, Duration::from_secs(5))
        .await
        .expect("retries")
        .expect("the lease ended");
    assert!(granted.token() > held.token());
    drop(held);
}

#[tokio::test(flavor = "multi_thread")]
async fn release_after_the_lease_ran_out_says_so() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let guard = Lock::new(&client, "k")
        .try_acquire(Duration::from_millis(50))
        .await
        .expect("acquire")
        .expect("free");
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(!guard.renew(TTL).await.expect("renew"), "the lease ended");
    assert!(!guard.is_held());
    assert!(!guard.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread")]
async fn readers_share_and_a_writer_waits_for_them() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let mut con = server.client();
    let (first, second) = (
        ReadWriteLock::new(&client, "report"),
        ReadWriteLock::new(&client, "report"),
    );
    let r1 = first
        .read()
        .try_acquire(TTL)
        .await
        .expect("read")
        .expect("free");
    let r2 = second
        .read()
        .try_acquire(TTL)
        .await
        .expect("read")
        .expect("shared");
    assert!(r2.token() > r1.token());
    assert_eq!(
        shared_info(&mut con, "report").map(|info| info.holders),
        Some(2)
    );
    let writer = ReadWriteLock::new(&client, "report");
    assert!(
        writer
            .write()
            .try_acquire(TTL)
            .await
            .expect("write")
            .is_none()
    );
    let waiting = tokio::spawn({
        let writer = writer.clone();
        async move {
            writer
                .write()
                .acquire_timeout(TTL, Duration::from_secs(5))
                .await
        }
    });
    common::queued(&mut con, "report", 1);
    let last_reader = r2.token();
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    let mut written = waiting
        .await
        .expect("task")
        .expect("wait")
        .expect("granted");
    assert!(written.token() > last_reader);
    // The writer downgrades through its guard: same owner, same token, now a reader; another
    // reader joins, the upgrade waits for it to leave.
    assert!(written.downgrade(TTL).await.expect("downgrade"));
    let info = shared_info(&mut con, "report").expect("read");
    assert_eq!(info.owners[0].0, written.owner());
    assert_eq!(
        info.owners[0].1,
        i64::try_from(written.token()).expect("token")
    );
    let reader = writer.read().try_acquire(TTL).await.expect("read");
    let reader = reader.expect("readers share");
    assert!(
        !written.upgrade(TTL).await.expect("upgrade"),
        "another reads"
    );
    assert!(reader.release().await.expect("release"));
    let read_token = written.token();
    assert!(
        written.upgrade(TTL).await.expect("upgrade"),
        "the only reader"
    );
    assert!(
        written.token() > read_token,
        "exclusive writing starts anew"
    );
    assert_eq!(holder(&mut con, "report").as_deref(), Some(written.owner()));
    assert_eq!(
        call(&mut con, &["LOCK.FENCE", "report"]),
        Value::Int(i64::try_from(written.token()).expect("token"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_semaphore_hands_out_at_most_its_permits() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let pool = Semaphore::new(&client, "pool", 2);
    let a = pool.try_acquire(TTL).await.expect("permit").expect("free");
    let b = pool.try_acquire(TTL).await.expect("permit").expect("free");
    assert_ne!(a.token(), b.token(), "a permit of its own");
    assert!(pool.try_acquire(TTL).await.expect("permit").is_none());
    let waiting = tokio::spawn({
        let pool = pool.clone();
        async move { pool.acquire_timeout(TTL, Duration::from_secs(5)).await }
    });
    common::queued(&mut server.client(), "pool", 1);
    a.release().await.expect("release");
    let c = waiting
        .await
        .expect("task")
        .expect("wait")
        .expect("granted");
    assert!(c.token() > b.token());
    let other = Semaphore::new(&client, "pool", 3);
    let refused = other
        .try_acquire(TTL)
        .await
        .err()
        .expect("a different limit");
    assert!(
        refused.to_string().contains("differs from the lock's 2"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zero_lease_is_refused_before_asking() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let error = Lock::new(&client, "k")
        .try_acquire(Duration::from_micros(10))
        .await
        .err()
        .expect("too short");
    assert!(error.to_string().contains("too short"), "{error}");
}

/// Tasks that share one lock handle — each holds its `handle` (a clone, or the same `Arc`) —
/// each loop acquire → critical section → release: never two inside at once, and the tokens
/// strictly increase in grant order.
async fn tasks_sharing_a_handle_take_turns<H>(handles: Vec<H>)
where
    H: Borrow<Lock> + Send + 'static,
{
    const ROUNDS: usize = 10;
    let tasks = handles.len();
    let inside = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(Mutex::new(Vec::new()));
    let running: Vec<_> = handles
        .into_iter()
        .map(|handle| {
            let (inside, grants) = (Arc::clone(&inside), Arc::clone(&grants));
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = handle.borrow().acquire(TTL).await.expect("acquire");
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two inside at once"
                    );
                    grants.lock().expect("grants").push(guard.token());
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.release().await.expect("release"), "still held");
                }
            })
        })
        .collect();
    for task in running {
        task.await.expect("a task");
    }
    let grants = grants.lock().expect("grants");
    assert_eq!(grants.len(), tasks * ROUNDS);
    assert!(
        grants.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens in grant order: {grants:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn eight_tasks_on_clones_of_one_handle_exclude_each_other() {
    let server = Server::start(&[]);
    let lock = Lock::new(&client(&server).await, "invoice:42");
    tasks_sharing_a_handle_take_turns((0..8).map(|_| lock.clone()).collect()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn eight_tasks_on_one_handle_behind_an_arc_exclude_each_other() {
    let server = Server::start(&[]);
    let lock = Arc::new(Lock::new(&client(&server).await, "invoice:42"));
    tasks_sharing_a_handle_take_turns((0..8).map(|_| Arc::clone(&lock)).collect()).await;
}
