//! The client against a real 3-master Redis Cluster: locks, read-write locks and semaphores on
//! keys spread over every master, waits on connections of their own, and the watchdog; a
//! holding's guarded and fenced commands on the master of their slot.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::cluster::cluster;
use leasehold_client::{Client, Error, Lock, ReadWriteLock, Semaphore};

const TTL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn every_lock_kind_works_on_every_master() {
    let nodes = cluster();
    let urls: Vec<String> = nodes.iter().map(common::Server::url).collect();
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = Client::cluster(&seeds).await.expect("cluster");
    let mut guards = Vec::new();
    for i in 0..12 {
        let name = format!("order:{i}");
        let lock = Lock::new(&client, &name).with_watchdog(true);
        let guard = lock.try_acquire(TTL).await.expect("acquire").expect("free");
        assert!(
            Lock::new(&client, &name)
                .try_acquire(TTL)
                .await
                .expect("acquire")
                .is_none()
        );
        guards.push(guard);
    }
    let held: Vec<usize> = nodes
        .iter()
        .map(|node| {
            let keys: i64 = redis::cmd("DBSIZE")
                .query(&mut node.client())
                .expect("DBSIZE");
            usize::try_from(keys).unwrap_or(0)
        })
        .collect();
    assert!(
        held.iter().all(|keys| *keys > 0),
        "spread over every master: {held:?}"
    );
    for guard in guards {
        assert!(guard.release().await.expect("release"));
    }

    let report = ReadWriteLock::new(&client, "report:{7}");
    let other = ReadWriteLock::new(&client, "report:{7}");
    let read = report
        .read()
        .try_acquire(TTL)
        .await
        .expect("read")
        .expect("free");
    let also = other
        .read()
        .try_acquire(TTL)
        .await
        .expect("read")
        .expect("shared");
    let writing = tokio::spawn({
        let writer = ReadWriteLock::new(&client, "report:{7}");
        async move {
            writer
                .write()
                .acquire_timeout(TTL, Duration::from_secs(5))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let readers = read.token().max(also.token());
    read.release().await.expect("release");
    also.release().await.expect("release");
    let written = writing
        .await
        .expect("task")
        .expect("wait")
        .expect("granted in the cluster");
    assert!(written.token() > readers);

    let pool = Semaphore::new(&client, "pool:{7}", 1);
    let permit = pool.try_acquire(TTL).await.expect("permit").expect("free");
    assert!(pool.try_acquire(TTL).await.expect("permit").is_none());
    drop(permit);
    let next = pool
        .acquire_timeout(TTL, Duration::from_secs(5))
        .await
        .expect("wait");
    assert!(next.is_some(), "the dropped permit was released");
}

#[tokio::test(flavor = "multi_thread")]
async fn guarded_and_fenced_commands_go_to_the_master_of_their_slot() {
    let nodes = cluster();
    let urls: Vec<String> = nodes.iter().map(common::Server::url).collect();
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = Client::cluster(&seeds).await.expect("cluster");
    for i in 0..12 {
        let (name, stock, fence) = (
            format!("{{order:{i}}}:lock"),
            format!("{{order:{i}}}:stock"),
            format!("{{order:{i}}}:fence"),
        );
        let decrby = redis::cmd("DECRBY").arg(&stock).arg(1).clone();
        let guard = Lock::new(&client, &name)
            .try_acquire(TTL)
            .await
            .expect("acquire")
            .expect("free");
        assert_eq!(guard.guard::<i64>(&decrby).await.expect("guard"), -1);
        assert_eq!(
            guard.fenced::<i64>(&fence, &decrby).await.expect("fenced"),
            -2
        );
        let stale = client.fenced::<i64>(&fence, 1, &decrby).await;
        assert!(matches!(stale, Err(Error::Stale { .. })), "{stale:?}");
        assert!(guard.release().await.expect("release"));
        let refused = guard_again(&client, &name, &decrby).await;
        assert!(matches!(refused, Err(Error::NotHeld { .. })), "{refused:?}");
    }
    let left: Vec<usize> = nodes
        .iter()
        .map(|node| {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("*:stock")
                .query(&mut node.client())
                .expect("KEYS");
            keys.len()
        })
        .collect();
    assert!(
        left.iter().all(|n| *n > 0),
        "spread over every master: {left:?}"
    );
}

/// A guarded command by a holding of `name` whose lease ended: the lock is free.
async fn guard_again(
    client: &Client,
    name: &str,
    command: &redis::Cmd,
) -> leasehold_client::Result<i64> {
    let lock = Lock::new(client, name);
    let short = lock
        .try_acquire(Duration::from_millis(100))
        .await?
        .expect("free");
    tokio::time::sleep(Duration::from_millis(200)).await;
    short.guard(command).await
}
