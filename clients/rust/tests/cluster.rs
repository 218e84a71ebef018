//! The client against a real 3-master Redis Cluster: locks, read-write locks and semaphores on
//! keys spread over every master, waits on connections of their own, and the watchdog.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::cluster::cluster;
use leasehold_client::{Client, Lock, ReadWriteLock, Semaphore};

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
