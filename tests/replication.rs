//! A real master–replica pair: the replica holds the same owner, token and lease deadline;
//! its reads work; the digest agrees; a promoted replica continues the counter; an old master
//! named master again without a command it sees still issues larger tokens.

mod common;

use common::{
    Server, acquire, call, error, info_field, lock_info, promote, wait_replicas, wait_until,
};
use redis::{Connection, Value};

fn expiretime(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME")
        .arg(key)
        .query(con)
        .expect("PEXPIRETIME")
}

fn pair() -> (Server, Server) {
    let master = Server::start(&[]);
    let replica = Server::start(&[]);
    replica.replicate(&master);
    (master, replica)
}

#[test]
fn the_replica_sees_the_same_owner_token_holds_and_deadline() {
    let (master, replica) = pair();
    let mut m = master.client();
    let mut r = replica.client();
    acquire(&mut m, "a", "alice", 60_000, &["NOSYNC"]).expect("a");
    acquire(&mut m, "a", "alice", 90_000, &["REENTRANT"]).expect("a again");
    acquire(&mut m, "b", "bob", 60_000, &["NOSYNC"]).expect("b");
    assert_eq!(
        call(&mut m, &["LOCK.RENEW", "b", "bob", "120000"]),
        Value::Int(1)
    );
    acquire(&mut m, "c", "carol", 60_000, &["NOSYNC"]).expect("c");
    acquire(&mut m, "c", "carol", 60_000, &["REENTRANT"]).expect("c again");
    assert_eq!(call(&mut m, &["LOCK.RELEASE", "c", "carol"]), Value::Int(1));
    acquire(&mut m, "d", "dave", 60_000, &["NOSYNC"]).expect("d");
    assert_eq!(call(&mut m, &["LOCK.RELEASE", "d", "dave"]), Value::Int(1));
    wait_replicas(&mut m, 1);

    for key in ["a", "b", "c"] {
        let on_master = lock_info(&mut m, key).expect("held on master");
        let on_replica = lock_info(&mut r, key).expect("held on replica");
        assert_eq!(
            (&on_master.0, on_master.1, on_master.3),
            (&on_replica.0, on_replica.1, on_replica.3)
        );
        assert_eq!(
            expiretime(&mut m, key),
            expiretime(&mut r, key),
            "same absolute deadline"
        );
        assert_eq!(
            call(&mut m, &["DEBUG", "DIGEST-VALUE", key]),
            call(&mut r, &["DEBUG", "DIGEST-VALUE", key])
        );
        assert_eq!(call(&mut r, &["LOCK.FENCE", key]), Value::Int(on_master.1));
    }
    assert_eq!(
        lock_info(&mut r, "d"),
        None,
        "a freed lock is gone on the replica too"
    );
    assert_eq!(
        call(&mut m, &["DEBUG", "DIGEST"]),
        call(&mut r, &["DEBUG", "DIGEST"])
    );
    assert!(error(&mut r, &["LOCK.ACQUIRE", "e", "eve", "1000"]).starts_with("READONLY"));
}

#[test]
fn a_replica_that_syncs_later_gets_the_locks_and_the_counter() {
    let master = Server::start(&[]);
    let mut m = master.client();
    let token = acquire(&mut m, "a", "alice", 60_000, &["NOSYNC"]).expect("a");
    let replica = Server::start(&[]);
    replica.replicate(&master);
    let mut r = replica.client();
    assert_eq!(lock_info(&mut r, "a").map(|i| i.1), Some(token));
    promote(&mut r);
    let next = acquire(&mut r, "b", "bob", 1_000, &["NOSYNC"]).expect("b");
    assert!(next > token);
}

#[test]
fn a_promoted_replica_issues_larger_tokens_than_its_old_master() {
    let (master, replica) = pair();
    let mut m = master.client();
    let mut last = 0;
    for i in 0..20 {
        last = acquire(&mut m, &format!("k{i}"), "alice", 60_000, &["NOSYNC"]).expect("granted");
    }
    wait_replicas(&mut m, 1);
    let mut r = replica.client();
    promote(&mut r);
    assert_eq!(
        lock_info(&mut r, "k19").map(|i| i.1),
        Some(last),
        "locks carried over"
    );
    let next = acquire(&mut r, "new", "bob", 1_000, &["NOSYNC"]).expect("granted");
    assert!(
        next > last,
        "promotion continues the counter: {next} after {last}"
    );
}

#[test]
fn an_old_master_named_master_again_unseen_issues_larger_tokens() {
    // The replica is promoted; the old master, not yet made a replica, is later named master
    // again by a Sentinel whose `SLAVEOF NO ONE` never reached it: it sees no command, only its
    // replica gone.
    let (master, replica) = pair();
    let mut m = master.client();
    acquire(&mut m, "before", "alice", 60_000, &["NOSYNC"]).expect("granted");
    wait_replicas(&mut m, 1);
    let mut r = replica.client();
    promote(&mut r);
    let mut newest = 0;
    for i in 0..20 {
        newest = acquire(&mut r, &format!("k{i}"), "bob", 60_000, &["NOSYNC"]).expect("granted");
    }
    wait_until("the old master saw its replica go", || {
        info_field(&mut m, "replication", "connected_slaves").as_deref() == Some("0")
    });
    std::thread::sleep(std::time::Duration::from_millis(5));
    let token = acquire(&mut m, "after", "carol", 60_000, &["NOSYNC"]).expect("granted");
    assert!(token > newest, "{token} after {newest}");
}

#[test]
fn a_replica_keeps_the_effects_in_its_own_aof_and_passes_them_to_its_replicas() {
    let master = Server::start(&[]);
    let mut replica = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    replica.replicate(&master);
    let sub_replica = Server::start(&[]);
    sub_replica.replicate(&replica);
    let mut m = master.client();
    let token = acquire(&mut m, "k", "alice", 600_000, &["NOSYNC"]).expect("granted");
    acquire(&mut m, "k", "alice", 600_000, &["REENTRANT"]).expect("re-entered");
    wait_replicas(&mut m, 1);
    let mut sub = sub_replica.client();
    common::wait_until("the sub-replica has both holds", || {
        lock_info(&mut sub, "k").is_some_and(|info| info.3 == 2)
    });
    assert_eq!(lock_info(&mut sub, "k").map(|info| info.1), Some(token));

    // Restarted alone, the replica rebuilds the lock from its own AOF.
    replica.kill();
    replica.restart();
    let mut r = replica.client();
    let info = lock_info(&mut r, "k").expect("restored from the replica's AOF");
    assert_eq!((info.0.as_str(), info.1, info.3), ("alice", token, 2));
    assert!(acquire(&mut r, "other", "bob", 1_000, &["NOSYNC"]).expect("granted") > token);
}

/// Whether `WAIT` on a waiter's own connection, right after a hand-over granted it the lock,
/// covers the grant: the grant was written by another client's `LOCK.RELEASE` or by a lease
/// timer, not by the waiter's command. With the replica stopped it must count 0 replicas.
#[test]
fn wait_after_a_hand_over_counts_only_replicas_that_have_the_grant() {
    let (master, replica) = pair();
    let mut admin = master.client();
    for (by_timer, replica_running) in [(false, false), (false, true), (true, false), (true, true)]
    {
        let key = format!("handed-over:{by_timer}:{replica_running}");
        let lease = if by_timer { 300 } else { 60_000 };
        let mut holder = master.client();
        acquire(&mut holder, &key, "holder", lease, &["NOSYNC"]).expect("free");
        wait_replicas(&mut holder, 1);
        let mut waiter = master.client();
        let waiting_key = key.clone();
        let waiting = std::thread::spawn(move || {
            let token: Option<i64> = redis::cmd("LOCK.ACQUIRE")
                .arg(&waiting_key)
                .arg("waiter")
                .arg(60_000)
                .arg("WAIT")
                .arg(10_000)
                .arg("NOSYNC")
                .query(&mut waiter)
                .expect("LOCK.ACQUIRE WAIT");
            let acked: i64 = redis::cmd("WAIT")
                .arg(1)
                .arg(500)
                .query(&mut waiter)
                .expect("WAIT");
            (token, acked)
        });
        common::queued(&mut admin, &key, 1);
        if !replica_running {
            replica.signal("STOP");
        }
        if !by_timer {
            call(&mut holder, &["LOCK.RELEASE", &key, "holder"]);
        }
        let (token, acked) = waiting.join().expect("the waiter");
        if !replica_running {
            replica.signal("CONT");
        }
        assert!(token.is_some(), "granted");
        assert_eq!(
            acked,
            i64::from(replica_running),
            "hand-over by {}, replica {}",
            if by_timer {
                "the lease timer"
            } else {
                "LOCK.RELEASE"
            },
            if replica_running {
                "running"
            } else {
                "stopped"
            }
        );
    }
}
