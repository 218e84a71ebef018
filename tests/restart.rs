//! A master that crashes and is restarted at once — `kill -9`, then the same command line a
//! supervisor runs again — with Redis's default persistence (the `save` points, no AOF) comes
//! back without the grants it made since its last snapshot, and its replicas resync from it and
//! lose them too (issue 52). The lease horizon it wrote before each reply
//! ([`leasehold_core::horizon`]) makes it grant nothing until every lease it may have granted
//! has ended; with the AOF it lacks nothing and waits for nothing.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{
    Server, acquire, call, error, holder, info_field, now_ms, try_acquire, wait_replicas,
};

/// Redis's default `save` points (`redis.conf`), which the harness turns off by default.
const DEFAULT_SAVE: [&str; 2] = ["--save", "3600 1 300 100 60 10000"];

/// The sequence of the issue: A holds `L` with a 40 s lease, synced to both replicas; the
/// master is killed and started again 0.3 s later with the same command line; B asks every
/// 100 ms. B is refused (`TRYAGAIN` with the time left) until A's lease has ended, then granted.
#[test]
fn a_master_crashed_and_restarted_at_once_grants_nothing_before_its_leases_end() {
    let mut master = Server::start(&DEFAULT_SAVE);
    let replicas = [Server::start(&DEFAULT_SAVE), Server::start(&DEFAULT_SAVE)];
    for replica in &replicas {
        replica.replicate(&master);
    }
    let mut con = master.client();
    wait_replicas(&mut con, 2);
    common::wait_until("both replicas are in the in-sync set", || {
        info_field(&mut con, "lock", "lock_insync_replicas").as_deref() == Some("2")
    });
    let lease_ms = 40_000;
    acquire(&mut con, "L", "a", lease_ms, &[]).expect("A's counted grant");
    let lease_end = now_ms() + i64::try_from(lease_ms).expect("ms");

    master.kill();
    thread::sleep(Duration::from_millis(300));
    master.restart();
    let mut b = master.client();
    let first = try_acquire(&mut b, "L", "b", lease_ms).expect_err("B refused at once");
    assert!(
        first.starts_with("TRYAGAIN the server restarted without the data of leases it granted"),
        "{first}"
    );
    let waiting: i64 = info_field(&mut b, "lock", "lock_restart_wait_until_ms")
        .and_then(|ms| ms.parse().ok())
        .expect("INFO lock says until when");
    assert!(
        waiting >= lease_end,
        "{waiting} before A's lease end {lease_end}"
    );
    assert!(
        master.log().contains("which its data lacks"),
        "the log says why"
    );

    let granted = loop {
        match try_acquire(&mut b, "L", "b", 10_000) {
            Ok(token) => break (now_ms(), token),
            Err(refused) => assert!(
                refused.starts_with("TRYAGAIN") || refused.starts_with("NOREPLICAS"),
                "{refused}"
            ),
        }
        assert!(now_ms() < lease_end + 30_000, "B never granted");
        thread::sleep(Duration::from_millis(100));
    };
    assert!(
        granted.0 >= lease_end,
        "B granted {} ms before A's lease ended",
        lease_end - granted.0
    );
}

/// With the AOF (`appendfsync everysec`, the default), a crash of the process loses no write
/// whose reply went out: A's lock is there after the restart and nothing waits.
#[test]
fn with_the_aof_the_lock_is_still_held_and_nothing_waits() {
    let mut server = Server::start(&["--appendonly", "yes"]);
    let mut con = server.client();
    acquire(&mut con, "L", "a", 40_000, &[]).expect("granted");
    server.kill();
    server.restart();
    let mut con = server.client();
    assert_eq!(holder(&mut con, "L").as_deref(), Some("a"));
    assert!(
        acquire(&mut con, "other", "b", 40_000, &[]).is_some(),
        "no wait"
    );
    assert_eq!(
        info_field(&mut con, "lock", "lock_restart_wait_until_ms").as_deref(),
        Some("0")
    );
    assert!(
        server
            .log()
            .contains("holds every grant of the last run: no wait")
    );
}

/// A lone development server (`make run`: no persistence) waits after `kill -9` only when it
/// granted leases that still run, and says so; one that shut down with its data saved, or
/// granted nothing, does not.
#[test]
fn a_lone_server_waits_only_for_leases_it_lost() {
    let mut server = Server::start(&[]);
    server.kill();
    server.restart();
    let mut con = server.client();
    assert!(
        acquire(&mut con, "first", "a", 2_000, &[]).is_some(),
        "granted nothing before"
    );

    server.kill();
    server.restart();
    let restarted = Instant::now();
    let mut con = server.client();
    let refused = error(&mut con, &["LOCK.ACQUIRE", "first", "b", "2000"]);
    assert!(refused.starts_with("TRYAGAIN"), "{refused}");
    let granted = acquire(&mut con, "first", "b", 30_000, &["WAIT", "5000"]);
    assert!(granted.is_some() && restarted.elapsed() < Duration::from_secs(4));

    call(&mut con, &["CONFIG", "SET", "save", "3600 1"]);
    server.shutdown("SAVE");
    server.restart();
    let mut con = server.client();
    assert_eq!(holder(&mut con, "first").as_deref(), Some("b"), "saved");
    assert!(
        acquire(&mut con, "second", "c", 2_000, &[]).is_some(),
        "no wait"
    );
}

/// A replica promoted while its master waits out the leases it lost: its data came from that
/// master, so it waits as long (the master's lists carry the wait: `notbefore:<ms>`), and says
/// so.
#[test]
fn a_replica_promoted_while_its_master_waits_waits_as_long() {
    let mut master = Server::start(&[]);
    let replica = Server::start(&[]);
    replica.replicate(&master);
    let mut r = replica.client();
    common::wait_until("the replica may be promoted", || {
        info_field(&mut r, "lock", "lock_insync_promotable").as_deref() == Some("1")
    });
    // Longer than the resync takes (repl-diskless-sync-delay, 5 s by default) and the wait for
    // the next list after it.
    let lease_ms = 20_000;
    acquire(&mut master.client(), "L", "a", lease_ms, &[]).expect("A's counted grant");
    let lease_end = now_ms() + i64::try_from(lease_ms).expect("ms");

    master.kill();
    master.restart();
    // The replica resyncs from it (losing A's lock) and is listed again, with the wait.
    common::wait_until(
        "the replica may be promoted again, knowing the wait",
        || {
            info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
                && info_field(&mut r, "lock", "lock_insync_promotable").as_deref() == Some("1")
                && replica.log().matches("sync: Finished with success").count() >= 2
        },
    );
    thread::sleep(Duration::from_millis(1_500));
    call(&mut r, &["REPLICAOF", "NO", "ONE"]);
    let refused = try_acquire(&mut r, "L", "b", 10_000).expect_err("B refused");
    assert!(refused.starts_with("TRYAGAIN"), "{refused}");
    assert!(
        replica.log().contains("promoted while its master"),
        "the log says why"
    );
    // NOSYNC: it has no replica left; this is about the wait.
    let granted = acquire(&mut r, "L", "b", 10_000, &["WAIT", "30000", "NOSYNC"]);
    assert!(
        granted.is_some() && now_ms() >= lease_end,
        "granted only after A's lease"
    );
}
