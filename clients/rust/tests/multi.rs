//! `Lock::multi`: a set of locks taken together against a real server — the guard's tokens,
//! tasks sharing one handle excluded from each other, crossed sets that never deadlock, the
//! watchdog renewing the whole set and telling when part of it is lost, release of all, and
//! the grant on the replica before it is returned.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod replicated;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Server, call, holder, info_field};
use leasehold_client::{Client, Error, Lock};
use redis::Value;

const TTL: Duration = Duration::from_secs(10);

async fn client(server: &Server) -> Client {
    Client::open(&server.url()).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_set_guard_holds_every_key_with_its_token_and_releases_them_all() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let mut con = server.client();
    let set = Lock::multi(&client, &["{t}:a", "{t}:b"]);
    assert_eq!(set.names(), ["{t}:a", "{t}:b"]);
    let guard = set.try_acquire(TTL).await.expect("acquire").expect("free");
    assert_eq!(guard.tokens().len(), 2);
    assert!(guard.tokens().iter().all(|token| *token == guard.token()));
    for key in ["{t}:a", "{t}:b"] {
        assert_eq!(holder(&mut con, key).as_deref(), Some(guard.owner()));
    }
    assert!(
        set.try_acquire(TTL).await.expect("acquire").is_none(),
        "a new owner: busy"
    );
    let single = Lock::new(&client, "{t}:b");
    assert!(single.try_acquire(TTL).await.expect("acquire").is_none());
    assert!(matches!(
        guard.reenter(TTL).await,
        Err(Error::NotOnSet("reenter"))
    ));
    assert!(guard.renew(TTL).await.expect("renew"));
    assert!(guard.release().await.expect("release"), "held both");
    assert_eq!(call(&mut con, &["EXISTS", "{t}:a", "{t}:b"]), Value::Int(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_sharing_a_set_handle_and_crossed_sets_never_overlap_or_deadlock() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let forward = Lock::multi(&client, &["{t}:a", "{t}:b"]);
    let backward = Arc::new(Lock::multi(&client, &["{t}:b", "{t}:a"]));
    let inside = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|n| {
            let (forward, backward, inside) =
                (forward.clone(), Arc::clone(&backward), Arc::clone(&inside));
            tokio::spawn(async move {
                for _ in 0..15 {
                    let lock = if n % 2 == 0 { &forward } else { &*backward };
                    let guard = lock
                        .acquire_timeout(TTL, Duration::from_secs(10))
                        .await
                        .expect("acquire")
                        .expect("no deadlock: granted well within 10 s");
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two inside at once"
                    );
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.release().await.expect("release"));
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task");
    }
    let multi = info_field(&mut server.client(), "lock", "lock_multi_acquisitions");
    assert_eq!(multi.as_deref(), Some("120"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_watchdog_keeps_the_whole_set_and_tells_when_part_of_it_is_lost() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    let mut con = server.client();
    let ttl = Duration::from_millis(300);
    let set = Lock::multi(&client, &["{w}:a", "{w}:b"]).with_watchdog(true);
    let guard = set.try_acquire(ttl).await.expect("acquire").expect("free");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(guard.is_held(), "renewed past three leases");
    assert_eq!(holder(&mut con, "{w}:b").as_deref(), Some(guard.owner()));
    call(&mut con, &["DEL", "{w}:a"]);
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("lost once a key is gone");
    common::wait_until("the rest runs out, not renewed", || {
        holder(&mut con, "{w}:b").is_none()
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn a_set_is_on_the_replica_when_it_is_returned() {
    // In the master's in-sync set: a replica outside it is not waited for (nor promotable).
    let (master, replica) = replicated::pair();
    let client = client(&master).await;
    let set = Lock::multi(&client, &["{r}:a", "{r}:b"]);
    let guard = set.try_acquire(TTL).await.expect("acquire").expect("free");
    for key in ["{r}:a", "{r}:b"] {
        let fenced = call(&mut replica.client(), &["LOCK.FENCE", key]);
        assert_eq!(
            fenced,
            Value::Int(i64::try_from(guard.token()).expect("below 2^53")),
            "{key}"
        );
    }
}
