//! Read-write locks and semaphores: `LOCK.ACQUIRE ... SHARED [LIMIT n]` — every clause of the
//! contract and every error, fairness across readers and writers, downgrade and upgrade,
//! per-holder leases, and the persistence and replication of shared holders.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{
    Server, SharedInfo, acquire, call, error, granted, holder, queued, shared_info, sync_replicas,
    wait_for, wait_until, wait_with,
};
use redis::{Connection, Value};

fn shared(con: &mut Connection, key: &str, owner: &str, ttl: u64, options: &[&str]) -> Option<i64> {
    acquire(con, key, owner, ttl, &[&["SHARED"], options].concat())
}

fn info(con: &mut Connection, key: &str) -> SharedInfo {
    shared_info(con, key).expect("held shared")
}

fn owners(con: &mut Connection, key: &str) -> Vec<String> {
    info(con, key).owners.into_iter().map(|o| o.0).collect()
}

fn release(con: &mut Connection, key: &str, owner: &str) -> Value {
    call(con, &["LOCK.RELEASE", key, owner])
}

#[test]
fn readers_share_the_lock_each_with_its_own_token_and_lease() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let a = shared(&mut con, "k", "a", 60_000, &[]).expect("a");
    let b = shared(&mut con, "k", "b", 30_000, &[]).expect("b");
    assert!(b > a, "a new token for every new holding");
    let held = info(&mut con, "k");
    assert_eq!(
        (held.limit, held.holders, held.token, held.waiters),
        (-1, 2, b, 0)
    );
    assert_eq!(held.owners[0].0, "a");
    assert!(held.owners[0].2 > 59_000 && held.owners[1].2 <= 30_000);
    assert!(
        held.ttl > 59_000,
        "PTTL is the longest lease left: {}",
        held.ttl
    );
    let pttl: i64 = redis::cmd("PTTL").arg("k").query(&mut con).expect("PTTL");
    assert!(pttl > 59_000);
    assert_eq!(
        call(&mut con, &["LOCK.FENCE", "k"]),
        Value::Int(b),
        "the largest"
    );
    assert_eq!(call(&mut con, &["LOCK.FENCE", "k", "a"]), Value::Int(a));
    assert_eq!(call(&mut con, &["LOCK.FENCE", "k", "c"]), Value::Nil);
    assert_eq!(
        call(&mut con, &["TYPE", "k"]),
        Value::SimpleString("leasehold".into())
    );
    assert_eq!(release(&mut con, "k", "a"), Value::Int(1));
    assert_eq!(owners(&mut con, "k"), ["b"]);
    assert_eq!(
        release(&mut con, "k", "a"),
        Value::Int(-1),
        "others hold it"
    );
    assert_eq!(release(&mut con, "k", "b"), Value::Int(1));
    assert_eq!(
        call(&mut con, &["EXISTS", "k"]),
        Value::Int(0),
        "nothing left behind"
    );
    assert_eq!(release(&mut con, "k", "b"), Value::Int(0));
}

#[test]
fn a_holder_asking_again_keeps_its_token_and_reentrant_counts_holds() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let a = shared(&mut con, "k", "a", 1_000, &[]).expect("a");
    shared(&mut con, "k", "b", 60_000, &[]).expect("b");
    assert_eq!(shared(&mut con, "k", "a", 50_000, &[]), Some(a));
    assert_eq!(shared(&mut con, "k", "a", 50_000, &["REENTRANT"]), Some(a));
    let held = info(&mut con, "k");
    assert_eq!((held.owners[0].1, held.owners[0].3), (a, 2));
    assert!(held.owners[0].2 > 49_000, "the lease was reset");
    assert_eq!(release(&mut con, "k", "a"), Value::Int(1));
    assert_eq!(info(&mut con, "k").owners[0].3, 1, "one hold left");
    assert_eq!(
        call(&mut con, &["LOCK.RENEW", "k", "a", "70000"]),
        Value::Int(1)
    );
    assert!(
        info(&mut con, "k").ttl > 69_000,
        "a renewal can make the key last longer"
    );
    assert_eq!(
        call(&mut con, &["LOCK.RENEW", "k", "c", "70000"]),
        Value::Int(-1)
    );
}

#[test]
fn a_semaphore_grants_at_most_limit_holders() {
    let server = Server::start(&[]);
    let mut con = server.client();
    for owner in ["a", "b", "c"] {
        shared(&mut con, "permits", owner, 60_000, &["LIMIT", "3"]).expect("a permit");
    }
    assert_eq!(
        shared(&mut con, "permits", "d", 60_000, &["LIMIT", "3"]),
        None
    );
    assert_eq!(info(&mut con, "permits").limit, 3);
    let waiting = wait_with(&server, "permits", "d", 0, &["SHARED", "LIMIT", "3"]);
    queued(&mut con, "permits", 1);
    assert_eq!(release(&mut con, "permits", "b"), Value::Int(1));
    let token = granted(waiting);
    assert_eq!(owners(&mut con, "permits"), ["a", "c", "d"]);
    assert_eq!(
        call(&mut con, &["LOCK.FENCE", "permits", "d"]),
        Value::Int(token)
    );
}

#[test]
fn a_different_limit_is_an_error_that_changes_nothing() {
    let server = Server::start(&[]);
    let mut con = server.client();
    shared(&mut con, "sem", "a", 60_000, &["LIMIT", "3"]).expect("a");
    shared(&mut con, "rw", "a", 60_000, &[]).expect("a");
    let before = (info(&mut con, "sem"), info(&mut con, "rw"));
    assert_eq!(
        error(
            &mut con,
            &["LOCK.ACQUIRE", "sem", "b", "1000", "SHARED", "LIMIT", "4"]
        ),
        "ERR LIMIT 4 differs from the lock's 3"
    );
    assert_eq!(
        error(&mut con, &["LOCK.ACQUIRE", "sem", "b", "1000", "SHARED"]),
        "ERR LIMIT none differs from the lock's 3"
    );
    assert_eq!(
        error(
            &mut con,
            &[
                "LOCK.ACQUIRE",
                "rw",
                "b",
                "1000",
                "LIMIT",
                "2",
                "SHARED",
                "WAIT",
                "100"
            ]
        ),
        "ERR LIMIT 2 differs from the lock's none"
    );
    let after = (info(&mut con, "sem"), info(&mut con, "rw"));
    assert_eq!(
        (before.0.owners.len(), before.1.owners.len(), before.0.token),
        (after.0.owners.len(), after.1.owners.len(), after.0.token)
    );
}

#[test]
fn options_are_checked() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let syntax = "ERR syntax error";
    let range = "ERR value is not an integer or out of range";
    for (args, expected) in [
        (&["LIMIT", "3"][..], syntax),
        (&["SHARED", "SHARED"], syntax),
        (&["SHARED", "LIMIT", "2", "LIMIT", "2"], syntax),
        (&["SHARED", "LIMIT"], syntax),
        (&["SHARED", "LIMIT", "0"], range),
        (&["SHARED", "LIMIT", "-1"], range),
        (&["SHARED", "LIMIT", "2147483648"], range),
        (&["SHARED", "LIMIT", "two"], range),
    ] {
        let command = [&["LOCK.ACQUIRE", "k", "o", "1000"][..], args].concat();
        assert_eq!(error(&mut con, &command), expected, "{args:?}");
    }
    assert_eq!(call(&mut con, &["EXISTS", "k"]), Value::Int(0));
    let any_order = [
        "LOCK.ACQUIRE",
        "k",
        "o",
        "1000",
        "LIMIT",
        "2147483647",
        "REENTRANT",
        "SHARED",
        "WAIT",
        "10",
    ];
    assert!(matches!(call(&mut con, &any_order), Value::Int(_)));
    call(&mut con, &["SET", "string", "x"]);
    assert!(
        error(&mut con, &["LOCK.ACQUIRE", "string", "o", "1000", "SHARED"])
            .starts_with("WRONGTYPE")
    );
}

#[test]
fn a_writer_waits_for_every_reader_and_readers_wait_for_the_writer() {
    let server = Server::start(&[]);
    let mut con = server.client();
    shared(&mut con, "k", "r1", 60_000, &[]).expect("r1");
    shared(&mut con, "k", "r2", 60_000, &[]).expect("r2");
    assert_eq!(acquire(&mut con, "k", "w", 60_000, &[]), None);
    let writer = wait_for(&server, "k", "w", 0);
    queued(&mut con, "k", 1);
    assert_eq!(
        shared(&mut con, "k", "r3", 60_000, &[]),
        None,
        "no reader barges past a queued writer"
    );
    assert_eq!(release(&mut con, "k", "r1"), Value::Int(1));
    thread::sleep(Duration::from_millis(50));
    assert_eq!(info(&mut con, "k").waiters, 1, "one reader still holds it");
    assert_eq!(release(&mut con, "k", "r2"), Value::Int(1));
    let token = granted(writer);
    assert_eq!(holder(&mut con, "k"), Some("w".into()));
    assert_eq!(call(&mut con, &["LOCK.FENCE", "k"]), Value::Int(token));
    assert_eq!(
        shared(&mut con, "k", "r3", 60_000, &[]),
        None,
        "the writer holds it"
    );
}

#[test]
fn the_queue_is_fifo_across_readers_and_writers() {
    // Readers queued together are granted together; a writer queued behind them is granted
    // before readers that came after it.
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "k", "w0", 60_000, &[]).expect("w0");
    let mut queue = Vec::new();
    for (i, (owner, reader)) in [("r1", true), ("r2", true), ("w1", false), ("r3", true)]
        .into_iter()
        .enumerate()
    {
        let options: &[&str] = if reader { &["SHARED"] } else { &[] };
        queue.push((owner, wait_with(&server, "k", owner, 0, options)));
        queued(&mut con, "k", i as i64 + 1);
    }
    let mut queue = queue.into_iter();
    assert_eq!(release(&mut con, "k", "w0"), Value::Int(1));
    let (r1, r2) = (queue.next().expect("r1"), queue.next().expect("r2"));
    let (t1, t2) = (granted(r1.1), granted(r2.1));
    assert!(t1 < t2);
    assert_eq!(owners(&mut con, "k"), ["r1", "r2"]);
    assert_eq!(info(&mut con, "k").waiters, 2, "w1, and r3 behind it");
    release(&mut con, "k", "r1");
    release(&mut con, "k", "r2");
    let w1 = queue.next().expect("w1");
    let t3 = granted(w1.1);
    assert!(t3 > t2);
    assert_eq!(holder(&mut con, "k"), Some("w1".into()));
    release(&mut con, "k", "w1");
    let r3 = queue.next().expect("r3");
    assert!(granted(r3.1) > t3);
    assert_eq!(owners(&mut con, "k"), ["r3"]);
}

#[test]
fn the_writer_downgrades_with_its_token_and_lets_queued_readers_in() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let w = acquire(&mut con, "k", "w", 60_000, &[]).expect("w");
    let r1 = wait_with(&server, "k", "r1", 0, &["SHARED"]);
    queued(&mut con, "k", 1);
    let r2 = wait_with(&server, "k", "r2", 0, &["SHARED"]);
    queued(&mut con, "k", 2);
    assert_eq!(shared(&mut con, "k", "w", 30_000, &["REENTRANT"]), Some(w));
    let (t1, t2) = (granted(r1), granted(r2));
    assert!(w < t1 && t1 < t2);
    let held = info(&mut con, "k");
    assert_eq!(held.owners[0], ("w".into(), w, held.owners[0].2, 2));
    assert_eq!(owners(&mut con, "k"), ["w", "r1", "r2"]);
}

#[test]
fn only_the_only_reader_upgrades_with_a_new_token() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let r = shared(&mut con, "k", "r", 60_000, &[]).expect("r");
    shared(&mut con, "k", "other", 60_000, &[]).expect("other");
    let asked = Instant::now();
    assert_eq!(
        acquire(&mut con, "k", "r", 60_000, &["WAIT", "5000"]),
        None,
        "two waiting upgraders would deadlock: null at once"
    );
    assert!(asked.elapsed() < Duration::from_secs(2), "it did not wait");
    assert_eq!(owners(&mut con, "k"), ["r", "other"], "nothing changed");
    release(&mut con, "k", "other");
    let upgraded = acquire(&mut con, "k", "r", 60_000, &[]).expect("the only reader");
    assert!(upgraded > r, "exclusive writing starts with a new token");
    assert_eq!(holder(&mut con, "k"), Some("r".into()));
}

#[test]
fn each_reader_lease_ends_on_its_own_and_the_writer_gets_it_at_once() {
    let server = Server::start(&["--notify-keyspace-events", "KEA"]);
    let mut con = server.client();
    let mut events = server.client();
    let mut events = events.as_pubsub();
    events.psubscribe("__keyspace@0__:k").expect("subscribe");
    shared(&mut con, "k", "short", 200, &[]).expect("short");
    let long = shared(&mut con, "k", "long", 600, &[]).expect("long");
    let writer = wait_for(&server, "k", "w", 0);
    queued(&mut con, "k", 1);
    wait_until("the short lease ends", || owners(&mut con, "k") == ["long"]);
    assert_eq!(call(&mut con, &["LOCK.FENCE", "k", "short"]), Value::Nil);
    assert_eq!(call(&mut con, &["LOCK.FENCE", "k"]), Value::Int(long));
    assert_eq!(
        call(&mut con, &["LOCK.RENEW", "k", "short", "5000"]),
        Value::Int(-1),
        "not brought back"
    );
    let deadline: i64 = redis::cmd("PEXPIRETIME")
        .arg("k")
        .query(&mut con)
        .expect("PEXPIRETIME");
    let token = granted(writer);
    let now = common::now_ms();
    assert!(token > long);
    assert!(
        now - deadline < 50,
        "granted {} ms after the last lease ended",
        now - deadline
    );
    events
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut seen = Vec::new();
    while let Ok(message) = events.get_message() {
        let event: String = message.get_payload().expect("event");
        seen.push(event.clone());
        if event == "lock.acquire" && seen.len() > 2 {
            break;
        }
    }
    // The last lease takes the key with it: Redis's `expired`, or `lock.expire` when the
    // module's lease timer gets there first.
    assert_eq!(
        seen[..3],
        ["lock.acquire", "lock.acquire", "lock.expire"],
        "{seen:?}"
    );
    assert!(
        ["expired", "lock.expire"].contains(&seen[3].as_str()),
        "{seen:?}"
    );
    assert_eq!(seen[4..], ["lock.acquire"], "{seen:?}");
}

#[test]
fn a_reader_leaves_when_its_lease_ends_without_anyone_touching_the_lock() {
    let server = Server::start(&["--notify-keyspace-events", "Kd"]);
    let mut con = server.client();
    let mut events = server.client();
    let mut events = events.as_pubsub();
    events.subscribe("__keyspace@0__:k").expect("subscribe");
    events
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    shared(&mut con, "k", "brief", 100, &[]).expect("brief");
    shared(&mut con, "k", "long", 60_000, &[]).expect("long");
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let message = events.get_message().expect("an event within 2 s");
        seen.push(message.get_payload::<String>().expect("event"));
    }
    assert_eq!(seen, ["lock.acquire", "lock.acquire", "lock.expire"]);
    assert_eq!(owners(&mut con, "k"), ["long"]);
}

#[test]
fn a_shared_lock_replicates_holder_by_holder() {
    let master = Server::start(&[]);
    let replica = Server::start(&[]);
    replica.replicate(&master);
    let mut m = master.client();
    let mut r = replica.client();
    shared(&mut m, "k", "a", 60_000, &["LIMIT", "5"]).expect("a");
    shared(&mut m, "k", "b", 300, &["LIMIT", "5"]).expect("b");
    shared(&mut m, "k", "c", 90_000, &["LIMIT", "5", "REENTRANT"]).expect("c");
    shared(&mut m, "k", "c", 90_000, &["LIMIT", "5", "REENTRANT"]).expect("c again");
    call(&mut m, &["LOCK.RENEW", "k", "a", "120000"]);
    sync_replicas(&mut m);
    let same = |m: &mut Connection, r: &mut Connection| {
        let (on_master, on_replica) = (info(m, "k"), info(r, "k"));
        assert_eq!(
            (
                on_master.limit,
                on_master.token,
                names_tokens_holds(&on_master)
            ),
            (
                on_replica.limit,
                on_replica.token,
                names_tokens_holds(&on_replica)
            )
        );
        assert_eq!(
            call(m, &["DEBUG", "DIGEST-VALUE", "k"]),
            call(r, &["DEBUG", "DIGEST-VALUE", "k"])
        );
        assert_eq!(
            call(m, &["PEXPIRETIME", "k"]),
            call(r, &["PEXPIRETIME", "k"])
        );
    };
    same(&mut m, &mut r);
    wait_until("b's lease ends on the master", || {
        owners(&mut m, "k") == ["a", "c"]
    });
    sync_replicas(&mut m);
    assert_eq!(
        owners(&mut r, "k"),
        ["a", "c"],
        "the end of a lease replicates as a removal"
    );
    same(&mut m, &mut r);
    release(&mut m, "k", "a");
    sync_replicas(&mut m);
    same(&mut m, &mut r);
    assert_eq!(
        call(&mut r, &["LOCK.FENCE", "k", "c"]),
        call(&mut m, &["LOCK.FENCE", "k", "c"])
    );
}

#[test]
fn downgrades_and_upgrades_replicate() {
    let master = Server::start(&[]);
    let replica = Server::start(&[]);
    replica.replicate(&master);
    let mut m = master.client();
    let mut r = replica.client();
    let w = acquire(&mut m, "k", "w", 60_000, &[]).expect("w");
    shared(&mut m, "k", "w", 60_000, &[]).expect("downgraded");
    shared(&mut m, "k", "r", 60_000, &[]).expect("r");
    sync_replicas(&mut m);
    assert_eq!(owners(&mut r, "k"), ["w", "r"]);
    assert_eq!(call(&mut r, &["LOCK.FENCE", "k", "w"]), Value::Int(w));
    release(&mut m, "k", "r");
    let upgraded = acquire(&mut m, "k", "w", 60_000, &[]).expect("upgraded");
    sync_replicas(&mut m);
    assert_eq!(holder(&mut r, "k"), Some("w".into()));
    assert_eq!(call(&mut r, &["LOCK.FENCE", "k"]), Value::Int(upgraded));
    assert_eq!(
        call(&mut m, &["DEBUG", "DIGEST-VALUE", "k"]),
        call(&mut r, &["DEBUG", "DIGEST-VALUE", "k"])
    );
    assert_eq!(
        call(&mut m, &["PEXPIRETIME", "k"]),
        call(&mut r, &["PEXPIRETIME", "k"])
    );
}

fn names_tokens_holds(info: &SharedInfo) -> Vec<(String, i64, i64)> {
    info.owners
        .iter()
        .map(|o| (o.0.clone(), o.1, o.3))
        .collect()
}

/// Holders, limit and leases as they were, within `elapsed_ms`.
fn assert_same_shared(before: &SharedInfo, after: &SharedInfo, elapsed_ms: i64) {
    assert_eq!(
        (after.limit, after.token, names_tokens_holds(after)),
        (before.limit, before.token, names_tokens_holds(before))
    );
    for (was, is) in before.owners.iter().zip(&after.owners) {
        assert!(
            is.2 <= was.2 && is.2 > was.2 - elapsed_ms,
            "lease {} then {}",
            was.2,
            is.2
        );
    }
}

fn take_shared(con: &mut Connection) -> SharedInfo {
    shared(con, "k", "a", 600_000, &["LIMIT", "4"]).expect("a");
    shared(con, "k", "b", 300_000, &["LIMIT", "4", "REENTRANT"]).expect("b");
    shared(con, "k", "b", 300_000, &["LIMIT", "4", "REENTRANT"]).expect("b again");
    shared(con, "k", "c", 400_000, &["LIMIT", "4"]).expect("c");
    release(con, "k", "a");
    info(con, "k")
}

#[test]
fn shared_holders_survive_rdb_and_aof_restarts() {
    for args in [
        &["--save", "3600 1"][..],
        &[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--aof-use-rdb-preamble",
            "no",
        ],
        &[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--aof-use-rdb-preamble",
            "yes",
        ],
    ] {
        let mut server = Server::start(args);
        let mut con = server.client();
        let before = take_shared(&mut con);
        if args.contains(&"--appendonly") {
            call(&mut con, &["BGREWRITEAOF"]);
            wait_until("AOF rewrite", || {
                common::info_field(&mut con, "persistence", "aof_rewrite_in_progress").as_deref()
                    == Some("0")
                    && common::info_field(&mut con, "persistence", "aof_rewrite_scheduled")
                        .as_deref()
                        == Some("0")
            });
            call(&mut con, &["LOCK.RENEW", "k", "c", "500000"]);
            server.kill();
        } else {
            server.shutdown("SAVE");
        }
        server.restart();
        let mut con = server.client();
        let after = info(&mut con, "k");
        if args.contains(&"--appendonly") {
            assert_eq!(
                names_tokens_holds(&after),
                names_tokens_holds(&before),
                "{args:?}"
            );
            assert!(
                after.owners[1].2 > 490_000,
                "the renewal after the rewrite, {args:?}"
            );
        } else {
            assert_same_shared(&before, &after, 30_000);
        }
        let next = shared(&mut con, "k", "d", 1_000, &["LIMIT", "4"]).expect("d");
        assert!(next > before.token, "{args:?}");
    }
}

#[test]
fn debug_reload_dump_restore_copy_and_memory_usage_keep_every_holder() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let before = take_shared(&mut con);
    call(&mut con, &["DEBUG", "RELOAD"]);
    assert_same_shared(&before, &info(&mut con, "k"), 30_000);
    let payload: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut con).expect("DUMP");
    let restored: String = redis::cmd("RESTORE")
        .arg("k2")
        .arg(0)
        .arg(&payload)
        .query(&mut con)
        .expect("RESTORE");
    assert_eq!(restored, "OK");
    assert_eq!(
        names_tokens_holds(&info(&mut con, "k2")),
        names_tokens_holds(&before)
    );
    assert_eq!(call(&mut con, &["COPY", "k", "k3"]), Value::Int(1));
    assert_eq!(
        call(&mut con, &["DEBUG", "DIGEST-VALUE", "k"]),
        call(&mut con, &["DEBUG", "DIGEST-VALUE", "k3"])
    );
    let usage = |con: &mut Connection| -> i64 {
        redis::cmd("MEMORY")
            .arg("USAGE")
            .arg("big")
            .query(con)
            .expect("MEMORY USAGE")
    };
    shared(&mut con, "big", "first", 60_000, &[]).expect("first");
    let one = usage(&mut con);
    let mut pipe = redis::pipe();
    for i in 0..1_000 {
        pipe.cmd("LOCK.ACQUIRE")
            .arg("big")
            .arg(format!("8d3c2f4e-1b2a-4c5d-9e8f-0a1b2c{i:06}:1"))
            .arg(60_000)
            .arg("SHARED");
    }
    let _: Vec<i64> = pipe.query(&mut con).expect("1000 readers");
    let per_holder = (usage(&mut con) - one) / 1_000;
    assert!(
        (64..=110).contains(&per_holder),
        "{per_holder} bytes per holder"
    );
}
