//! Sets of locks — `LOCK.MACQUIRE`, `LOCK.MRELEASE`, `LOCK.MRENEW` — on a real server: all
//! or nothing, one token for the keys taken together, every bad request refused with nothing
//! changed, fair waiting across keys ({A, B} and {B, A} never deadlock, a set is not starved by
//! single-key acquirers), keys deleted, expired and flushed under a waiting set, a demoted
//! master's set waiters told at once, and a set replicated and persisted as one transaction.

mod common;

use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::{
    Server, acquire, call, error, holder, info_field, lock_info, queued, sync_replicas, waiters,
};
use redis::{Connection, Value};

/// `LOCK.MACQUIRE numkeys keys... owner ttl [options]`: the tokens, or `None` when busy.
fn macquire(
    con: &mut Connection,
    keys: &[&str],
    owner: &str,
    ttl: u64,
    options: &[&str],
) -> Option<Vec<i64>> {
    redis::cmd("LOCK.MACQUIRE")
        .arg(keys.len())
        .arg(keys)
        .arg(owner)
        .arg(ttl)
        .arg(options)
        .query(con)
        .expect("LOCK.MACQUIRE")
}

/// `LOCK.MRELEASE` or `LOCK.MRENEW` (with `ttl`): how many locks it released or renewed.
fn set_command(
    con: &mut Connection,
    command: &str,
    keys: &[&str],
    owner: &str,
    ttl: &[u64],
) -> i64 {
    redis::cmd(command)
        .arg(keys.len())
        .arg(keys)
        .arg(owner)
        .arg(ttl)
        .query(con)
        .expect(command)
}

/// A client blocked in `LOCK.MACQUIRE ... WAIT timeout_ms`, and the thread with its reply.
fn wait_for_set(
    server: &Server,
    keys: &[&str],
    owner: &str,
    timeout_ms: u64,
) -> JoinHandle<redis::RedisResult<Option<Vec<i64>>>> {
    let mut con = server.client();
    let mut command = redis::cmd("LOCK.MACQUIRE");
    command
        .arg(keys.len())
        .arg(keys)
        .arg(owner)
        .arg(60_000)
        .arg("WAIT")
        .arg(timeout_ms);
    thread::spawn(move || command.query(&mut con))
}

/// Waits until `count` clients wait for any lock (`INFO lock`): a free lock's `LOCK.INFO` is
/// null, waiters or not.
fn queued_in_all(con: &mut Connection, count: usize) {
    common::wait_until(&format!("{count} waiters"), || {
        info_field(con, "lock", "lock_waiters") == Some(count.to_string())
    });
}

fn granted(waiting: JoinHandle<redis::RedisResult<Option<Vec<i64>>>>) -> Vec<i64> {
    waiting
        .join()
        .expect("waiter thread")
        .expect("reply")
        .expect("granted")
}

#[test]
fn a_set_is_taken_whole_with_one_new_token_or_not_at_all() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let before = acquire(&mut con, "solo", "x", 60_000, &[]).expect("free");
    let tokens = macquire(&mut con, &["a", "b", "c"], "o", 60_000, &[]).expect("all free");
    assert_eq!(tokens.len(), 3);
    assert!(
        tokens.iter().all(|t| *t == tokens[0] && *t > before),
        "{tokens:?}"
    );
    for key in ["a", "b", "c"] {
        let info = lock_info(&mut con, key).expect("held");
        assert_eq!((info.0.as_str(), info.1, info.3), ("o", tokens[0], 1));
        assert!(info.2 > 50_000);
    }

    // Busy on one key: nothing taken, nothing changed.
    assert_eq!(macquire(&mut con, &["d", "a"], "p", 60_000, &[]), None);
    assert_eq!(lock_info(&mut con, "d"), None);
    assert_eq!(holder(&mut con, "a"), Some("o".into()));

    // The owner asks again with one more key: its locks keep their token, their leases reset.
    call(&mut con, &["PEXPIRE", "a", "5000"]);
    let again = macquire(&mut con, &["e", "a"], "o", 60_000, &[]).expect("its own");
    assert!(again[0] > tokens[0], "a new token for the new key");
    assert_eq!(again[1], tokens[0], "the held key keeps its token");
    assert!(
        lock_info(&mut con, "a").expect("held").2 > 50_000,
        "lease reset"
    );

    let info = |field| info_field(&mut server.client(), "lock", field);
    assert_eq!(info("lock_multi_acquisitions"), Some("2".into()));
    assert_eq!(info("lock_acquisitions"), Some("3".into()), "each set once");
    assert_eq!(info("lock_contended_acquisitions"), Some("1".into()));
}

#[test]
fn mrelease_counts_what_it_released_and_mrenew_renews_all_or_none() {
    let server = Server::start(&[]);
    let mut con = server.client();
    macquire(&mut con, &["a", "b"], "o", 1_000, &[]).expect("free");
    acquire(&mut con, "c", "other", 60_000, &[]).expect("free");
    assert_eq!(
        set_command(&mut con, "LOCK.MRENEW", &["a", "b", "c"], "o", &[60_000]),
        0
    );
    assert!(
        lock_info(&mut con, "a").expect("held").2 <= 1_000,
        "none renewed"
    );
    assert_eq!(
        set_command(&mut con, "LOCK.MRENEW", &["b", "a"], "o", &[60_000]),
        2
    );
    assert!(lock_info(&mut con, "b").expect("held").2 > 50_000);
    assert_eq!(
        set_command(
            &mut con,
            "LOCK.MRELEASE",
            &["a", "b", "c", "free"],
            "o",
            &[]
        ),
        2,
        "c is another's, free is free"
    );
    assert_eq!(
        (lock_info(&mut con, "a"), lock_info(&mut con, "b")),
        (None, None)
    );
    assert_eq!(holder(&mut con, "c"), Some("other".into()));
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let server = Server::start(&[]);
    let mut con = server.client();
    call(&mut con, &["SET", "string", "x"]);
    acquire(&mut con, "held", "o", 60_000, &[]).expect("free");
    let cases: &[(&[&str], &str)] = &[
        (
            &["LOCK.MACQUIRE", "0", "a", "o", "100"],
            "ERR numkeys should be greater than 0",
        ),
        (
            &["LOCK.MACQUIRE", "-1", "a", "o", "100"],
            "ERR numkeys should be greater than 0",
        ),
        (
            &["LOCK.MACQUIRE", "x", "a", "o", "100"],
            "ERR numkeys should be greater than 0",
        ),
        (
            &["LOCK.MACQUIRE", "9", "a", "b", "o", "100"],
            "ERR Number of keys can't be greater than number of args",
        ),
        (
            &["LOCK.MACQUIRE", "3", "a", "b", "a", "o", "100"],
            "ERR duplicate key 'a'",
        ),
        (
            &["LOCK.MACQUIRE", "2", "a", "string", "o", "100"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            &["LOCK.MACQUIRE", "2", "a", "b", "o", "100", "SHARED"],
            "ERR SHARED is not supported by LOCK.MACQUIRE",
        ),
        (
            &["LOCK.MACQUIRE", "2", "a", "b", "o", "100", "reentrant"],
            "ERR REENTRANT is not supported by LOCK.MACQUIRE",
        ),
        (
            &["LOCK.MACQUIRE", "2", "a", "b", "o", "100", "LIMIT", "2"],
            "ERR LIMIT is not supported by LOCK.MACQUIRE",
        ),
        (
            &["LOCK.MACQUIRE", "2", "a", "b", "o", "100", "WAIT"],
            "ERR syntax error",
        ),
        (
            &["LOCK.MACQUIRE", "2", "a", "b", "o", "100", "WAIT", "-1"],
            "ERR timeout is negative",
        ),
        (
            &["LOCK.MACQUIRE", "2", "a", "b", "o", "100", "NX"],
            "ERR syntax error",
        ),
        (
            &["LOCK.MACQUIRE", "2", "a", "b", "o", "0"],
            "ERR invalid expire time in 'lock.macquire' command",
        ),
        (
            &["LOCK.MACQUIRE", "2", "a", "b", "o", "ten"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["LOCK.MACQUIRE", "2", "a", "b", "", "100"],
            "ERR owner must be 1 to 256 bytes",
        ),
        (
            &["LOCK.MACQUIRE", "2", "a", "b"],
            "ERR wrong number of arguments for 'lock.macquire' command",
        ),
        (
            &["LOCK.MRELEASE", "2", "held", "string", "o"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            &["LOCK.MRELEASE", "1", "held", "o", "extra"],
            "ERR wrong number of arguments for 'lock.mrelease' command",
        ),
        (
            &["LOCK.MRENEW", "2", "held", "held", "o", "100"],
            "ERR duplicate key 'held'",
        ),
        (
            &["LOCK.MRENEW", "1", "held", "o", "-5"],
            "ERR invalid expire time in 'lock.mrenew' command",
        ),
    ];
    for (args, expected) in cases {
        assert_eq!(&error(&mut con, args), expected, "{args:?}");
    }
    call(&mut con, &["CONFIG", "SET", "lock.max-multi-keys", "2"]);
    assert_eq!(
        error(&mut con, &["LOCK.MACQUIRE", "3", "a", "b", "c", "o", "100"]),
        "ERR numkeys exceeds lock.max-multi-keys (2)"
    );
    assert_eq!(
        call(&mut con, &["DBSIZE"]),
        Value::Int(2),
        "nothing created"
    );
    let held = lock_info(&mut con, "held").expect("held");
    assert_eq!((held.0.as_str(), held.3), ("o", 1));
    assert!(held.2 > 50_000, "the lease untouched");
}

#[test]
fn crossed_sets_asked_for_in_a_loop_never_deadlock() {
    let server = Server::start(&[]);
    let started = Instant::now();
    let clients: Vec<_> = [["a", "b"], ["b", "a"], ["a", "b"], ["b", "a"]]
        .into_iter()
        .enumerate()
        .map(|(n, keys)| {
            let mut con = server.client();
            thread::spawn(move || {
                let owner = format!("client-{n}");
                for _ in 0..100 {
                    // A lease far longer than the test: only a deadlock could make it wait out.
                    let tokens = macquire(&mut con, &keys, &owner, 60_000, &["WAIT", "10000"]);
                    assert!(tokens.is_some(), "{owner} waited 10 s for {keys:?}");
                    assert_eq!(
                        set_command(&mut con, "LOCK.MRELEASE", &keys, &owner, &[]),
                        2
                    );
                }
            })
        })
        .collect();
    for client in clients {
        client.join().expect("a client");
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    let mut con = server.client();
    assert_eq!(
        info_field(&mut con, "lock", "lock_multi_acquisitions"),
        Some("400".into())
    );
    assert_eq!(
        (waiters(&mut con, "a"), lock_info(&mut con, "b")),
        (-1, None)
    );
}

#[test]
fn a_waiting_set_is_not_starved_by_single_key_acquirers() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "a", "holder", 60_000, &[]).expect("free");
    let set = wait_for_set(&server, &["a", "b"], "set", 0);
    queued(&mut con, "a", 1);
    // A stream of acquirers on b, which is free: each finds the set queued ahead of it.
    for n in 0..20 {
        assert_eq!(
            acquire(&mut con, "b", &format!("single-{n}"), 60_000, &[]),
            None
        );
    }
    let behind = common::wait_for(&server, "b", "behind", 0);
    queued_in_all(&mut con, 2);
    call(&mut con, &["LOCK.RELEASE", "a", "holder"]);
    let tokens = granted(set);
    assert_eq!(tokens[0], tokens[1]);
    assert_eq!(
        (holder(&mut con, "a"), holder(&mut con, "b")),
        (Some("set".into()), Some("set".into()))
    );
    assert_eq!(
        set_command(&mut con, "LOCK.MRELEASE", &["a", "b"], "set", &[]),
        2
    );
    assert!(common::granted(behind) > tokens[0], "then the next in line");
}

#[test]
fn a_waiting_set_is_granted_when_a_key_is_deleted_expires_or_is_flushed() {
    let server = Server::start(&[]);
    let mut con = server.client();
    for (round, free_it) in ["DEL", "UNLINK", "expire", "FLUSHALL"]
        .into_iter()
        .enumerate()
    {
        let owner = format!("set-{round}");
        let ttl = if free_it == "expire" { 300 } else { 60_000 };
        acquire(&mut con, "a", "holder", ttl, &[]).expect("free");
        acquire(&mut con, "b", "holder", 60_000, &[]).expect("free");
        let set = wait_for_set(&server, &["b", "a"], &owner, 0);
        queued(&mut con, "a", 1);
        match free_it {
            "expire" => {}
            "FLUSHALL" => {
                call(&mut con, &["FLUSHALL"]);
            }
            command => {
                call(&mut con, &[command, "a"]);
                assert_eq!(waiters(&mut con, "b"), 1, "b is still held");
                call(&mut con, &["DEL", "b"]);
            }
        }
        if free_it == "expire" {
            call(&mut con, &["DEL", "b"]);
        }
        let tokens = granted(set);
        assert_eq!(tokens[0], tokens[1], "{free_it}");
        assert_eq!(holder(&mut con, "a"), Some(owner.clone()));
        assert_eq!(
            set_command(&mut con, "LOCK.MRELEASE", &["a", "b"], &owner, &[]),
            2
        );
    }
}

#[test]
fn a_set_waiter_that_times_out_leaves_every_queue() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "a", "holder", 60_000, &[]).expect("free");
    let set = wait_for_set(&server, &["a", "b"], "set", 200);
    queued(&mut con, "a", 1);
    assert_eq!(
        set.join().expect("thread").expect("reply"),
        None,
        "timed out"
    );
    assert_eq!(waiters(&mut con, "a"), 0);
    queued_in_all(&mut con, 0);
    assert_eq!(
        acquire(&mut con, "b", "next", 60_000, &[]).map(|t| t > 0),
        Some(true)
    );
}

#[test]
fn set_waiters_on_a_master_that_becomes_a_replica_are_told_at_once() {
    let server = Server::start(&[]);
    let other = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "a", "holder", 60_000, &[]).expect("free");
    let set = wait_for_set(&server, &["a", "b"], "set", 0);
    queued(&mut con, "a", 1);
    server.replicate(&other);
    let error = set
        .join()
        .expect("thread")
        .expect_err("no grant on a replica");
    assert_eq!(error.code(), Some("UNBLOCKED"), "{error}");
}

#[test]
fn a_set_reaches_replicas_and_the_aof_as_one_transaction() {
    let master = Server::start(&["--appendonly", "yes"]);
    let replica = Server::start(&[]);
    replica.replicate(&master);
    let mut con = master.client();
    common::wait_replicas(&mut con, 1);
    common::wait_for_member(&mut con);
    let tokens = macquire(&mut con, &["a", "b"], "o", 60_000, &[]).expect("free");
    acquire(&mut con, "c", "holder", 300, &[]).expect("free");
    // Handed over by the lease timer: the set is granted outside any command.
    let set = wait_for_set(&master, &["c", "d"], "later", 0);
    let later = granted(set);
    sync_replicas(&mut con);
    let mut read = replica.client();
    for (key, owner, token) in [
        ("a", "o", tokens[0]),
        ("b", "o", tokens[1]),
        ("c", "later", later[0]),
        ("d", "later", later[1]),
    ] {
        let info = lock_info(&mut read, key).expect("on the replica");
        assert_eq!((info.0.as_str(), info.1), (owner, token), "{key}");
    }
    let aof = std::fs::read_dir(master.dir().join("appendonlydir"))
        .expect("AOF dir")
        .filter_map(Result::ok)
        .find(|entry| entry.file_name().to_string_lossy().ends_with(".incr.aof"))
        .expect("an incremental AOF");
    let text = String::from_utf8_lossy(&std::fs::read(aof.path()).expect("AOF")).into_owned();
    // Each transaction's LOCK.APPLY count: the command's grant, then the timer's, then the
    // timer's grant set to its lease once the replica had it (it was made longer while its
    // reply was held: synced::Stretch).
    let mut transactions = Vec::new();
    let mut open: Option<usize> = None;
    for part in text.split("\r\n") {
        match (part, open.as_mut()) {
            ("MULTI", _) => open = Some(0),
            ("EXEC", Some(applies)) => {
                transactions.push(*applies);
                open = None;
            }
            ("LOCK.APPLY", Some(applies)) => *applies += 1,
            _ => {}
        }
    }
    assert_eq!(transactions, [2, 2, 2], "each set in one transaction");
}

#[test]
fn the_commands_describe_their_keys_as_numkeys_and_keys() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let keys = call(
        &mut con,
        &[
            "COMMAND",
            "GETKEYS",
            "LOCK.MACQUIRE",
            "2",
            "x",
            "y",
            "owner",
            "100",
        ],
    );
    assert_eq!(
        keys,
        Value::Array(vec![
            Value::BulkString(b"x".to_vec()),
            Value::BulkString(b"y".to_vec())
        ])
    );
    let keys = call(
        &mut con,
        &["COMMAND", "GETKEYS", "LOCK.MRELEASE", "1", "x", "owner"],
    );
    assert_eq!(keys, Value::Array(vec![Value::BulkString(b"x".to_vec())]));
}
