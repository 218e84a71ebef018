//! Synced writes on real servers (`SYNC`, `NOSYNC`, `lock.sync-writes`): a lock write that
//! counts replies only once the in-sync set has it — from a plain client, with one command.
//!
//! - A grant, a renewal, a set's grant and a `WAIT` hand-over reply once every member
//!   acknowledged them; with a member stopped they are refused after `lock.sync-timeout-ms`
//!   with `NOREPLICAS`, and a grant is released (a renewal's lease stands on the master, and the
//!   error says the one before it counts).
//! - A replica dead for good: refusals, then grants once the master dropped it.
//! - A client that disconnects while its grant waits leaves no lock behind.
//! - A `WAIT` grant, whose holder counts its lease from the reply: the replica's lease never
//!   ends before the holder's count, however late the reply; a hand-over on a master whose set
//!   is below its size is refused as a grant without `WAIT` is.
//! - `lock.sync-writes no` makes only `SYNC` wait; `NOSYNC` never waits; inside `MULTI`,
//!   `SYNC` is refused and the default does not apply.
//! - `LOCK.SYNC` behind pipelined `NOSYNC` writes replies once the replica has them all; with the
//!   replica stopped it is refused and undoes nothing (the writes are its client's); refused
//!   inside `MULTI`, scripts and on a replica.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::{Server, call, error, info_field, wait_for, wait_until};
use redis::{Connection, Value};

/// A 2 s lease and a 0.5 s drop delay: a dead member is dropped about 3 s after it died.
const FAST: &[&str] = &["insync-timeout-ms", "2000", "insync-drop-delay-ms", "500"];

/// A master and a replica in its in-sync set.
fn pair(args: &[&str]) -> (Server, Server) {
    let master = Server::with_module_args(args, &[]);
    let replica = Server::with_module_args(args, &[]);
    replica.replicate(&master);
    let mut m = master.client();
    let id = format!("127.0.0.1:{}", replica.port);
    wait_until("the replica is a member", || {
        info_field(&mut m, "lock", "lock_insync_members").as_deref() == Some(id.as_str())
    });
    (master, replica)
}

fn exists(con: &mut Connection, key: &str) -> bool {
    call(con, &["EXISTS", key]) == Value::Int(1)
}

#[test]
fn a_grant_replies_once_the_replica_has_it() {
    let (master, replica) = pair(&[]);
    let mut m = master.client();
    let token: i64 = redis::cmd("LOCK.ACQUIRE")
        .arg("order")
        .arg("alice")
        .arg(60_000)
        .query(&mut m)
        .expect("granted");
    // No WAIT, no second command: the replica had it before the reply.
    let fence: i64 = redis::cmd("LOCK.FENCE")
        .arg("order")
        .query(&mut replica.client())
        .expect("on the replica");
    assert_eq!(fence, token);
    assert_eq!(
        call(&mut m, &["LOCK.RENEW", "order", "alice", "60000", "SYNC"]),
        Value::Int(1)
    );
    let tokens = call(
        &mut m,
        &["LOCK.MACQUIRE", "2", "{set}:a", "{set}:b", "alice", "60000"],
    );
    assert!(
        matches!(tokens, Value::Array(ref t) if t.len() == 2),
        "{tokens:?}"
    );
    assert!(exists(&mut replica.client(), "{set}:b"));
}

#[test]
fn with_the_replica_stopped_writes_are_refused_and_grants_released() {
    let (master, replica) = pair(&[]);
    let mut m = master.client();
    call(&mut m, &["LOCK.ACQUIRE", "held", "alice", "60000"]);
    replica.signal("STOP");
    let started = Instant::now();
    let refused = error(&mut m, &["LOCK.ACQUIRE", "order", "bob", "60000"]);
    let waited = started.elapsed();
    assert_eq!(
        refused,
        "NOREPLICAS not every in-sync replica acknowledged within 1000 ms; the grant was released"
    );
    assert!(waited >= Duration::from_millis(950), "{waited:?}");
    assert!(!exists(&mut m, "order"), "released");
    let refused = error(&mut m, &["LOCK.RENEW", "held", "alice", "90000"]);
    assert!(
        refused.ends_with("the renewal does not count: the lease before it does"),
        "{refused}"
    );
    assert!(
        exists(&mut m, "held"),
        "a renewal that did not count releases nothing"
    );
    let refused = error(
        &mut m,
        &["LOCK.MACQUIRE", "2", "{s}:a", "{s}:b", "bob", "60000"],
    );
    assert!(refused.starts_with("NOREPLICAS"), "{refused}");
    assert!(
        !exists(&mut m, "{s}:a") && !exists(&mut m, "{s}:b"),
        "the set released"
    );
    // NOSYNC replies at once, unsynced.
    let token = call(&mut m, &["LOCK.ACQUIRE", "fast", "bob", "60000", "NOSYNC"]);
    assert!(matches!(token, Value::Int(t) if t > 0), "{token:?}");
    replica.signal("CONT");
}

#[test]
fn a_replica_dead_for_good_costs_grants_until_the_master_drops_it() {
    let master = Server::with_module_args(FAST, &[]);
    let keeper = Server::with_module_args(FAST, &[]);
    let mut doomed = Server::with_module_args(FAST, &[]);
    keeper.replicate(&master);
    doomed.replicate(&master);
    let mut m = master.client();
    wait_until("both replicas are members", || {
        info_field(&mut m, "lock", "lock_insync_replicas").as_deref() == Some("2")
    });
    doomed.kill();
    let died = Instant::now();
    let mut refusals = Vec::new();
    let token = loop {
        match redis::cmd("LOCK.ACQUIRE")
            .arg("order")
            .arg("alice")
            .arg(60_000)
            .query::<i64>(&mut m)
        {
            Ok(token) => break token,
            Err(refused) => refusals.push(refused.to_string()),
        }
        assert!(died.elapsed() < Duration::from_secs(10), "{refusals:?}");
    };
    eprintln!("granted again {:?} after the replica died", died.elapsed());
    assert!(
        !refusals.is_empty()
            && refusals
                .iter()
                .all(|r| r.contains("not every in-sync replica acknowledged")),
        "{refusals:?}"
    );
    let fence: i64 = redis::cmd("LOCK.FENCE")
        .arg("order")
        .query(&mut keeper.client())
        .expect("on the member left");
    assert_eq!(fence, token);
}

#[test]
fn a_client_that_disconnects_while_its_grant_waits_leaves_no_lock() {
    let (master, replica) = pair(&[]);
    replica.signal("STOP");
    let mut raw = TcpStream::connect(("127.0.0.1", master.port)).expect("connect");
    raw.write_all(b"*4\r\n$12\r\nLOCK.ACQUIRE\r\n$5\r\norder\r\n$5\r\nalice\r\n$5\r\n60000\r\n")
        .expect("sent");
    let mut m = master.client();
    wait_until("the grant is held", || exists(&mut m, "order"));
    drop(raw);
    wait_until("the grant is released", || !exists(&mut m, "order"));
    replica.signal("CONT");
}

#[test]
fn a_wait_hand_over_replies_once_the_replica_has_the_grant() {
    let (master, replica) = pair(&[]);
    let mut holder = master.client();
    call(&mut holder, &["LOCK.ACQUIRE", "order", "holder", "60000"]);
    for replica_running in [true, false] {
        let port = master.port;
        let waiting = thread::spawn(move || {
            let mut waiter = redis::Client::open(format!("redis://127.0.0.1:{port}"))
                .and_then(|client| client.get_connection())
                .expect("waiter");
            let reply = redis::cmd("LOCK.ACQUIRE")
                .arg("order")
                .arg("waiter")
                .arg(60_000)
                .arg("WAIT")
                .arg(10_000)
                .query::<i64>(&mut waiter)
                .map_err(|error| error.to_string());
            (reply, waiter)
        });
        common::queued(&mut holder, "order", 1);
        if !replica_running {
            replica.signal("STOP");
        }
        call(&mut holder, &["LOCK.RELEASE", "order", "holder"]);
        let (reply, mut waiter) = waiting.join().expect("the waiter");
        if replica_running {
            let token = reply.expect("granted");
            let fence: i64 = redis::cmd("LOCK.FENCE")
                .arg("order")
                .query(&mut replica.client())
                .expect("on the replica");
            assert_eq!(fence, token);
            call(&mut waiter, &["LOCK.RELEASE", "order", "waiter"]);
            call(&mut holder, &["LOCK.ACQUIRE", "order", "holder", "60000"]);
        } else {
            let refused = reply.expect_err("refused");
            assert!(refused.contains("the grant was released"), "{refused}");
            assert!(!exists(&mut holder, "order"), "released");
            replica.signal("CONT");
        }
    }
}

#[test]
fn the_setting_decides_unless_the_command_says() {
    let (master, replica) = pair(&[]);
    let mut m = master.client();
    replica.signal("STOP");
    call(&mut m, &["CONFIG", "SET", "lock.sync-writes", "no"]);
    let token = call(&mut m, &["LOCK.ACQUIRE", "a", "alice", "60000"]);
    assert!(matches!(token, Value::Int(_)), "not synced: {token:?}");
    let refused = error(&mut m, &["LOCK.ACQUIRE", "b", "alice", "60000", "SYNC"]);
    assert!(refused.starts_with("NOREPLICAS"), "{refused}");
    call(&mut m, &["CONFIG", "SET", "lock.sync-writes", "yes"]);
    let refused = error(&mut m, &["LOCK.ACQUIRE", "c", "alice", "60000"]);
    assert!(refused.starts_with("NOREPLICAS"), "{refused}");
    let token = call(&mut m, &["LOCK.ACQUIRE", "d", "alice", "60000", "NOSYNC"]);
    assert!(matches!(token, Value::Int(_)), "{token:?}");
    replica.signal("CONT");

    // Inside MULTI or a script a client cannot wait: the default does not apply, and SYNC is
    // refused.
    call(&mut m, &["MULTI"]);
    call(&mut m, &["LOCK.ACQUIRE", "f", "alice", "60000"]);
    let replies = call(&mut m, &["EXEC"]);
    assert!(
        matches!(&replies, Value::Array(r) if matches!(r[..], [Value::Int(_)])),
        "{replies:?}"
    );
    let script = "return redis.call('LOCK.ACQUIRE', KEYS[1], 'alice', '60000', ARGV[1])";
    let refused = error(&mut m, &["EVAL", script, "1", "e", "SYNC"]);
    assert!(
        refused.contains("SYNC cannot be used inside MULTI, scripts or functions"),
        "{refused}"
    );
    assert!(!exists(&mut m, "e") && exists(&mut m, "f"));
    assert_eq!(
        error(&mut m, &["CONFIG", "SET", "lock.sync-timeout-ms", "0"])
            .split(' ')
            .next(),
        Some("ERR")
    );
}

#[test]
fn a_lone_server_replies_at_once() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let token = call(&mut con, &["LOCK.ACQUIRE", "k", "me", "1000", "SYNC"]);
    assert!(matches!(token, Value::Int(_)), "{token:?}");
    assert_eq!(call(&mut con, &["LOCK.SYNC"]), Value::Okay);
}

#[test]
fn lock_sync_answers_for_the_nosync_writes_pipelined_before_it() {
    let (master, replica) = pair(&[]);
    let mut m = master.client();
    let (a, b, renewed, synced): (i64, i64, i64, String) = redis::pipe()
        .cmd("LOCK.ACQUIRE")
        .arg("a")
        .arg("alice")
        .arg(60_000)
        .arg("NOSYNC")
        .cmd("LOCK.ACQUIRE")
        .arg("b")
        .arg("bob")
        .arg(60_000)
        .arg("NOSYNC")
        .cmd("LOCK.RENEW")
        .arg("a")
        .arg("alice")
        .arg(90_000)
        .arg("NOSYNC")
        .cmd("LOCK.SYNC")
        .query(&mut m)
        .expect("granted and synced");
    assert_eq!((renewed, synced.as_str()), (1, "OK"));
    // No wait after the reply: the replica had both grants and the renewal before it.
    let mut r = replica.client();
    assert_eq!(call(&mut r, &["LOCK.FENCE", "a"]), Value::Int(a));
    assert_eq!(call(&mut r, &["LOCK.FENCE", "b"]), Value::Int(b));
    assert!(pttl(&mut r, "a") > 60_000, "the renewal is there too");

    replica.signal("STOP");
    let token = call(&mut m, &["LOCK.ACQUIRE", "c", "carol", "60000", "NOSYNC"]);
    assert!(matches!(token, Value::Int(_)), "{token:?}");
    assert_eq!(
        error(&mut m, &["LOCK.SYNC"]),
        "NOREPLICAS not every in-sync replica acknowledged within 1000 ms; the writes before it \
         do not count: release the grants they made"
    );
    assert!(exists(&mut m, "c"), "the grant is its client's to release");
    replica.signal("CONT");

    let script = "return redis.call('LOCK.SYNC')";
    let refused = error(&mut m, &["EVAL", script, "0"]);
    assert!(
        refused.contains("cannot be used inside MULTI, scripts") || refused.contains("not allowed"),
        "{refused}"
    );
    call(&mut m, &["MULTI"]);
    call(&mut m, &["LOCK.SYNC"]);
    let refused = error(&mut m, &["EXEC"]);
    assert!(refused.contains("cannot be used inside MULTI"), "{refused}");
    assert!(error(&mut r, &["LOCK.SYNC"]).starts_with("ERR LOCK.SYNC is answered by the master"));
    assert!(error(&mut m, &["LOCK.SYNC", "now"]).starts_with("ERR wrong number of arguments"));
}

/// The lease left on `key` (`PTTL`), ms.
fn pttl(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).expect("PTTL")
}

#[test]
fn a_wait_grant_replied_late_leaves_the_replica_a_lease_no_shorter_than_its_holder_counts() {
    let (master, replica) = pair(&[]);
    let mut holder = master.client();
    call(&mut holder, &["LOCK.ACQUIRE", "order", "holder", "60000"]);
    let waiter = wait_for(&master, "order", "waiter", 10_000);
    common::queued(&mut holder, "order", 1);
    // The hand-over is held while the replica is stopped: its reply comes ~0.5 s after it.
    replica.signal("STOP");
    call(&mut holder, &["LOCK.RELEASE", "order", "holder"]);
    thread::sleep(Duration::from_millis(500));
    replica.signal("CONT");
    let replied = Instant::now();
    common::granted(waiter);
    // The holder counts 60 s from the reply; the replica must have at least that left.
    let mut r = replica.client();
    let counted = 60_000 - i64::try_from(replied.elapsed().as_millis()).expect("ms");
    let left = pttl(&mut r, "order");
    assert!(
        left >= counted - 50,
        "replica {left} ms, holder counts {counted} ms"
    );
    // Once the grant counted, its lease is the one asked for, from then, on the master.
    let mut m = master.client();
    wait_until("the lease is set to what was asked", || {
        pttl(&mut m, "order") <= 60_000
    });
    assert!(pttl(&mut m, "order") > 59_000);
}

#[test]
fn a_wait_hand_over_on_a_master_below_its_set_size_is_refused_and_released() {
    let master = Server::with_module_args(FAST, &[]);
    let mut replica = Server::with_module_args(FAST, &[]);
    replica.replicate(&master);
    let mut m = master.client();
    wait_until("the replica is a member", || {
        info_field(&mut m, "lock", "lock_insync_replicas").as_deref() == Some("1")
    });
    call(
        &mut m,
        &["LOCK.ACQUIRE", "order", "holder", "60000", "NOSYNC"],
    );
    let waiter = wait_for(&master, "order", "waiter", 30_000);
    common::queued(&mut m, "order", 1);
    replica.kill();
    wait_until("the master dropped its dead member", || {
        info_field(&mut m, "lock", "lock_insync_replicas").as_deref() == Some("0")
    });
    call(&mut m, &["LOCK.RELEASE", "order", "holder"]);
    let refused = waiter
        .reply
        .join()
        .expect("waiter thread")
        .expect_err("refused")
        .to_string();
    assert!(
        refused.contains("fewer than lock.min-insync-replicas")
            && refused.contains("the grant was released"),
        "{refused}"
    );
    assert!(!exists(&mut m, "order"), "released");
}

#[test]
fn a_waiter_queued_before_the_master_had_a_replica_is_granted_synced_once_it_has_one() {
    let master = Server::with_module_args(&[], &[]);
    let mut m = master.client();
    call(&mut m, &["LOCK.ACQUIRE", "order", "holder", "60000"]);
    let waiter = wait_for(&master, "order", "waiter", 30_000);
    common::queued(&mut m, "order", 1);
    let replica = Server::with_module_args(&[], &[]);
    replica.replicate(&master);
    let id = format!("127.0.0.1:{}", replica.port);
    wait_until("the replica is a member", || {
        info_field(&mut m, "lock", "lock_insync_members").as_deref() == Some(id.as_str())
    });
    call(&mut m, &["LOCK.RELEASE", "order", "holder"]);
    let token = common::granted(waiter);
    let replied = Instant::now();
    let fence: i64 = redis::cmd("LOCK.FENCE")
        .arg("order")
        .query(&mut replica.client())
        .expect("on the replica");
    assert_eq!(fence, token, "the grant was synced");
    let counted = 60_000 - i64::try_from(replied.elapsed().as_millis()).expect("ms");
    let left = pttl(&mut replica.client(), "order");
    assert!(
        left >= counted - 50,
        "replica {left} ms, holder counts {counted} ms"
    );
}
