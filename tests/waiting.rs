//! `LOCK.ACQUIRE ... WAIT`: blocked clients are handed the lock in arrival order, on release,
//! lease expiry, `DEL`, `UNLINK` and `FLUSHALL`; nobody barges in; timeouts, disconnects and
//! `CLIENT UNBLOCK` take a waiter off the queue; `MULTI` and scripts never block; and a
//! hand-over replicates like any acquisition.

mod common;

use std::thread;
use std::time::Duration;

use common::{
    Server, acquire, call, error, granted, holder, lock_info, queued, sync_replicas, wait_for,
    wait_replicas, waiters,
};
use redis::{Connection, Value};

#[test]
fn waiters_are_granted_in_arrival_order() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let first = acquire(&mut con, "k", "holder", 60_000, &[]).expect("granted");
    let mut queue = vec![];
    for (i, owner) in ["w1", "w2", "w3", "w4"].into_iter().enumerate() {
        queue.push((owner, wait_for(&server, "k", owner, 0)));
        queued(&mut con, "k", i as i64 + 1);
    }
    let mut previous = ("holder", first);
    for (owner, waiting) in queue {
        assert_eq!(
            call(&mut con, &["LOCK.RELEASE", "k", previous.0]),
            Value::Int(1)
        );
        let token = granted(waiting);
        assert!(token > previous.1, "a new holding, a larger token");
        let info = lock_info(&mut con, "k").expect("handed over");
        assert_eq!((info.0.as_str(), info.1, info.3), (owner, token, 1));
        assert!(info.2 > 50_000, "the waiter's own lease, from the grant");
        previous = (owner, token);
    }
    assert_eq!(waiters(&mut con, "k"), 0);
}

#[test]
fn an_expired_lease_goes_to_the_first_waiter() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let first = acquire(&mut con, "k", "holder", 300, &[]).expect("granted");
    let waiting = wait_for(&server, "k", "next", 0);
    queued(&mut con, "k", 1);
    assert!(granted(waiting) > first);
    assert_eq!(holder(&mut con, "k"), Some("next".into()));
}

#[test]
fn a_renewed_lease_keeps_the_lock_from_the_waiter() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "k", "holder", 500, &[]).expect("granted");
    let waiting = wait_for(&server, "k", "next", 0);
    queued(&mut con, "k", 1);
    for _ in 0..8 {
        assert_eq!(
            call(&mut con, &["LOCK.RENEW", "k", "holder", "500"]),
            Value::Int(1)
        );
        thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        lock_info(&mut con, "k").map(|info| (info.0, info.4)),
        Some(("holder".into(), 1))
    );
    call(&mut con, &["LOCK.RELEASE", "k", "holder"]);
    granted(waiting);
}

#[test]
fn del_unlink_and_flushall_hand_the_lock_over() {
    let server = Server::start(&[]);
    let mut con = server.client();
    for freeing in [
        &["DEL", "k"][..],
        &["UNLINK", "k"],
        &["FLUSHALL"],
        &["FLUSHDB"],
    ] {
        acquire(&mut con, "k", "holder", 60_000, &[]).expect("granted");
        let waiting = wait_for(&server, "k", "next", 0);
        queued(&mut con, "k", 1);
        call(&mut con, freeing);
        granted(waiting);
        assert_eq!(holder(&mut con, "k"), Some("next".into()), "{freeing:?}");
        call(&mut con, &["LOCK.RELEASE", "k", "next"]);
    }
}

#[test]
fn nobody_barges_in_between_a_release_and_the_hand_over() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "k", "holder", 60_000, &[]).expect("granted");
    let waiting = wait_for(&server, "k", "patient", 0);
    queued(&mut con, "k", 1);
    let (released, barged): (i64, Option<i64>) = redis::pipe()
        .atomic()
        .cmd("LOCK.RELEASE")
        .arg("k")
        .arg("holder")
        .cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("barger")
        .arg(60_000)
        .query(&mut con)
        .expect("MULTI");
    assert_eq!((released, barged), (1, None));
    granted(waiting);
}

#[test]
fn nobody_barges_in_when_a_lease_expires() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "k", "holder", 150, &[]).expect("granted");
    let waiting = wait_for(&server, "k", "patient", 0);
    queued(&mut con, "k", 1);
    let mut barger = server.client();
    for _ in 0..300 {
        assert_eq!(acquire(&mut barger, "k", "barger", 60_000, &[]), None);
        thread::sleep(Duration::from_millis(1));
    }
    granted(waiting);
    assert_eq!(holder(&mut con, "k"), Some("patient".into()));
}

#[test]
fn a_free_lock_is_taken_at_once_with_or_without_wait() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let token = acquire(&mut con, "k", "a", 60_000, &["WAIT", "0"]).expect("free: no blocking");
    assert_eq!(
        acquire(&mut con, "k", "a", 60_000, &["WAIT", "0", "REENTRANT"]),
        Some(token)
    );
    assert_eq!(
        acquire(&mut con, "k", "a", 60_000, &["REENTRANT", "WAIT", "10"]),
        Some(token)
    );
    assert_eq!(lock_info(&mut con, "k").map(|info| info.3), Some(3));
}

#[test]
fn a_waiter_times_out_with_null_and_leaves_the_queue() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "k", "holder", 60_000, &[]).expect("granted");
    let waiting = wait_for(&server, "k", "impatient", 100);
    assert_eq!(waiting.reply.join().expect("thread").expect("reply"), None);
    assert_eq!(waiters(&mut con, "k"), 0);
    call(&mut con, &["LOCK.RELEASE", "k", "holder"]);
    assert_eq!(
        lock_info(&mut con, "k"),
        None,
        "the timed-out waiter never got it"
    );
}

#[test]
fn wait_zero_waits_without_limit() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "k", "holder", 60_000, &[]).expect("granted");
    let waiting = wait_for(&server, "k", "patient", 0);
    queued(&mut con, "k", 1);
    thread::sleep(Duration::from_millis(500));
    assert!(!waiting.reply.is_finished(), "still waiting");
    call(&mut con, &["LOCK.RELEASE", "k", "holder"]);
    granted(waiting);
}

#[test]
fn a_disconnected_waiter_leaves_the_queue_and_is_never_granted() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "k", "holder", 60_000, &[]).expect("granted");
    let gone = wait_for(&server, "k", "gone", 0);
    queued(&mut con, "k", 1);
    let next = wait_for(&server, "k", "next", 0);
    queued(&mut con, "k", 2);
    call(&mut con, &["CLIENT", "KILL", "ID", &gone.id.to_string()]);
    assert!(
        gone.reply.join().expect("thread").is_err(),
        "its connection was closed"
    );
    queued(&mut con, "k", 1);
    call(&mut con, &["LOCK.RELEASE", "k", "holder"]);
    granted(next);
    assert_eq!(holder(&mut con, "k"), Some("next".into()));
}

#[test]
fn client_unblock_replies_null_or_an_error_and_removes_the_waiter() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "k", "holder", 60_000, &[]).expect("granted");
    let plain = wait_for(&server, "k", "plain", 0);
    queued(&mut con, "k", 1);
    assert_eq!(
        call(&mut con, &["CLIENT", "UNBLOCK", &plain.id.to_string()]),
        Value::Int(1)
    );
    assert_eq!(plain.reply.join().expect("thread").expect("reply"), None);
    assert_eq!(waiters(&mut con, "k"), 0);

    let erred = wait_for(&server, "k", "erred", 0);
    queued(&mut con, "k", 1);
    call(
        &mut con,
        &["CLIENT", "UNBLOCK", &erred.id.to_string(), "ERROR"],
    );
    let refused = erred
        .reply
        .join()
        .expect("thread")
        .expect_err("an error reply");
    assert!(refused.to_string().contains("UNBLOCKED"), "{refused}");
    assert_eq!(waiters(&mut con, "k"), 0);
    call(&mut con, &["LOCK.RELEASE", "k", "holder"]);
    assert_eq!(lock_info(&mut con, "k"), None, "neither was granted");
}

#[test]
fn a_lease_that_ends_while_writes_are_paused_is_handed_over_after_the_pause() {
    // Redis expires nothing while writes are paused (CLIENT PAUSE WRITE, FAILOVER), and a
    // module write then would crash Redis 7.0 and 8.2.
    let server = Server::start(&[]);
    let mut con = server.client();
    let first = acquire(&mut con, "k", "holder", 200, &[]).expect("granted");
    acquire(&mut con, "rw", "brief", 200, &["SHARED"]).expect("granted");
    acquire(&mut con, "rw", "long", 60_000, &["SHARED"]).expect("granted");
    let waiting = wait_for(&server, "k", "next", 0);
    queued(&mut con, "k", 1);
    call(&mut con, &["CLIENT", "PAUSE", "1000", "WRITE"]);
    let paused = std::time::Instant::now();
    thread::sleep(Duration::from_millis(600));
    assert_eq!(
        call(&mut con, &["PING"]),
        Value::SimpleString("PONG".into())
    );
    assert!(
        !waiting.reply.is_finished(),
        "granted while writes were paused"
    );
    let token = granted(waiting);
    assert!(
        paused.elapsed() >= Duration::from_millis(950),
        "{:?}",
        paused.elapsed()
    );
    assert!(token > first);
    let readers: Vec<String> = common::shared_info(&mut con, "rw")
        .map(|info| info.owners.into_iter().map(|o| o.0).collect())
        .unwrap_or_default();
    assert_eq!(readers, ["long"]);
}

#[test]
fn waiters_on_a_master_that_becomes_a_replica_are_told_at_once() {
    let server = Server::start(&[]);
    let other = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "k", "holder", 60_000, &[]).expect("granted");
    let waiting = wait_for(&server, "k", "next", 0);
    queued(&mut con, "k", 1);
    server.replicate(&other);
    let reply = waiting.reply.join().expect("waiter thread");
    let error = reply.expect_err("no grant on a replica");
    assert_eq!(error.code(), Some("UNBLOCKED"), "{error}");
}

#[test]
fn multi_and_scripts_answer_at_once_instead_of_blocking() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "k", "holder", 60_000, &[]).expect("granted");
    let (in_multi,): (Option<i64>,) = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("other")
        .arg(1_000)
        .arg("WAIT")
        .arg(0)
        .query(&mut con)
        .expect("MULTI");
    assert_eq!(in_multi, None);
    let script = "return redis.call('LOCK.ACQUIRE', KEYS[1], 'other', 1000, 'WAIT', 0)";
    let in_script: Option<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("k")
        .query(&mut con)
        .expect("EVAL");
    assert_eq!(in_script, None);
    assert_eq!(waiters(&mut con, "k"), 0);
}

#[test]
fn wait_arguments_are_checked() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let cases: &[(&[&str], &str)] = &[
        (
            &["LOCK.ACQUIRE", "k", "o", "100", "WAIT", "-1"],
            "ERR timeout is negative",
        ),
        (
            &["LOCK.ACQUIRE", "k", "o", "100", "WAIT", "soon"],
            "ERR timeout is not an integer or out of range",
        ),
        (
            &["LOCK.ACQUIRE", "k", "o", "100", "WAIT", "1.5"],
            "ERR timeout is not an integer or out of range",
        ),
        (
            &["LOCK.ACQUIRE", "k", "o", "100", "WAIT"],
            "ERR syntax error",
        ),
        (
            &["LOCK.ACQUIRE", "k", "o", "100", "WAIT", "1", "WAIT", "2"],
            "ERR syntax error",
        ),
    ];
    for (args, expected) in cases {
        assert_eq!(error(&mut con, args), *expected, "{args:?}");
    }
    assert_eq!(call(&mut con, &["EXISTS", "k"]), Value::Int(0));
}

#[test]
fn a_hand_over_replicates_like_an_acquisition() {
    let master = Server::start(&[]);
    let replica = Server::start(&[]);
    replica.replicate(&master);
    let mut m = master.client();
    let mut r = replica.client();
    // A member of the in-sync set: each waiter's grant is held for it, made longer meanwhile,
    // and set to its lease once the replica had it (synced::Stretch), all replicated.
    common::wait_for_member(&mut m);
    // On release (inside the releasing command) and on expiry (from a timer).
    acquire(&mut m, "released", "holder", 60_000, &[]).expect("granted");
    acquire(&mut m, "expiring", "holder", 200, &[]).expect("granted");
    let after_release = wait_for(&master, "released", "next", 0);
    let after_expiry = wait_for(&master, "expiring", "next", 0);
    queued(&mut m, "released", 1);
    queued(&mut m, "expiring", 1);
    call(&mut m, &["LOCK.RELEASE", "released", "holder"]);
    let tokens = [granted(after_release), granted(after_expiry)];
    sync_replicas(&mut m);
    for (key, token) in ["released", "expiring"].into_iter().zip(tokens) {
        let on_replica = lock_info(&mut r, key).expect("held on the replica");
        assert_eq!(
            (on_replica.0.as_str(), on_replica.1, on_replica.3),
            ("next", token, 1),
            "{key}"
        );
        let expiretime = |con: &mut Connection| -> i64 {
            redis::cmd("PEXPIRETIME")
                .arg(key)
                .query(con)
                .expect("PEXPIRETIME")
        };
        assert_eq!(
            expiretime(&mut m),
            expiretime(&mut r),
            "{key}: same absolute deadline"
        );
    }
    assert_eq!(
        call(&mut m, &["DEBUG", "DIGEST"]),
        call(&mut r, &["DEBUG", "DIGEST"])
    );
}

#[test]
fn the_same_name_in_another_database_is_another_lock() {
    let server = Server::start(&[]);
    let in_db = |db: &str| {
        let mut con = server.client();
        call(&mut con, &["SELECT", db]);
        con
    };
    let (mut db0, mut db3) = (in_db("0"), in_db("3"));
    acquire(&mut db0, "k", "zero", 60_000, &[]).expect("db 0");
    let first = acquire(&mut db3, "k", "three", 200, &[]).expect("db 3");
    for (freeing, next) in [(None, "after-expiry"), (Some(["DEL", "k"]), "after-del")] {
        let mut waiter = in_db("3");
        let waiting =
            thread::spawn(move || acquire(&mut waiter, "k", next, 60_000, &["WAIT", "0"]));
        queued(&mut db3, "k", 1);
        assert_eq!(waiters(&mut db0, "k"), 0, "db 0's lock has no waiters");
        if let Some(freeing) = freeing {
            call(&mut db3, &freeing);
        }
        let token = waiting.join().expect("waiter thread").expect("granted");
        assert!(token > first);
        assert_eq!(holder(&mut db3, "k"), Some(next.into()));
    }
    let zero = lock_info(&mut db0, "k").expect("db 0's lock untouched");
    assert_eq!((zero.0.as_str(), zero.3), ("zero", 1));
}

#[test]
fn a_hand_over_in_another_database_replicates_there() {
    let master = Server::start(&[]);
    let replica = Server::start(&[]);
    replica.replicate(&master);
    let mut m = master.client();
    call(&mut m, &["SELECT", "3"]);
    acquire(&mut m, "k", "holder", 200, &[]).expect("granted");
    let mut waiter = master.client();
    call(&mut waiter, &["SELECT", "3"]);
    let waiting = thread::spawn(move || acquire(&mut waiter, "k", "next", 60_000, &["WAIT", "0"]));
    queued(&mut m, "k", 1);
    let token = waiting
        .join()
        .expect("waiter thread")
        .expect("granted at expiry");
    wait_replicas(&mut m, 1);
    let mut r = replica.client();
    call(&mut r, &["SELECT", "3"]);
    assert_eq!(
        lock_info(&mut r, "k").map(|info| (info.0, info.1)),
        Some(("next".into(), token))
    );
    call(&mut r, &["SELECT", "0"]);
    assert_eq!(
        call(&mut r, &["DBSIZE"]),
        Value::Int(0),
        "nothing in database 0"
    );
}
