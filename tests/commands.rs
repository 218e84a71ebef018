//! The command contract of `LOCK.ACQUIRE`, `LOCK.RELEASE`, `LOCK.RENEW`, `LOCK.FENCE` and
//! `LOCK.INFO` on a real server, clause by clause, with every error case.

mod common;

use std::time::Duration;

use common::{Server, acquire, call, error, lock_info, raw_reply};
use redis::Value;

const TWO_TO_53: i64 = 1 << 53;

fn pttl(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).expect("PTTL")
}

#[test]
fn acquire_a_free_lock_creates_it_with_a_lease_and_a_token() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let token = acquire(&mut con, "order:1", "alice", 10_000, &[]).expect("granted");
    assert!(
        (1..TWO_TO_53).contains(&token),
        "token {token} out of range"
    );
    let ttl = pttl(&mut con, "order:1");
    assert!(
        (9_000..=10_000).contains(&ttl),
        "PTTL shows the lease: {ttl}"
    );
    assert_eq!(
        call(&mut con, &["TYPE", "order:1"]),
        Value::SimpleString("leasehold".into())
    );
    let (owner, info_token, _, holds, waiters) = lock_info(&mut con, "order:1").expect("held");
    assert_eq!(
        (owner.as_str(), info_token, holds, waiters),
        ("alice", token, 1, 0)
    );
}

#[test]
fn acquire_by_the_holder_resets_the_lease_and_keeps_the_token() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let token = acquire(&mut con, "k", "alice", 1_000, &[]).expect("granted");
    assert_eq!(acquire(&mut con, "k", "alice", 60_000, &[]), Some(token));
    assert!(pttl(&mut con, "k") > 50_000, "lease reset to the new TTL");
    assert_eq!(
        lock_info(&mut con, "k").map(|i| i.3),
        Some(1),
        "retry keeps holds at 1"
    );

    assert_eq!(
        acquire(&mut con, "k", "alice", 60_000, &["REENTRANT"]),
        Some(token)
    );
    assert_eq!(
        acquire(&mut con, "k", "alice", 60_000, &["reentrant"]),
        Some(token)
    );
    assert_eq!(lock_info(&mut con, "k").map(|i| i.3), Some(3));
    assert_eq!(acquire(&mut con, "k", "alice", 60_000, &[]), Some(token));
    assert_eq!(
        lock_info(&mut con, "k").map(|i| i.3),
        Some(3),
        "no REENTRANT, no change"
    );
}

#[test]
fn acquire_held_by_another_owner_changes_nothing() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let token = acquire(&mut con, "k", "alice", 5_000, &["REENTRANT"]).expect("granted");
    assert_eq!(acquire(&mut con, "k", "bob", 60_000, &[]), None);
    assert_eq!(acquire(&mut con, "k", "bob", 60_000, &["REENTRANT"]), None);
    let (owner, info_token, ttl, holds, _) = lock_info(&mut con, "k").expect("still held");
    assert_eq!((owner.as_str(), info_token, holds), ("alice", token, 1));
    assert!(ttl <= 5_000, "the lease was not extended: {ttl}");
}

#[test]
fn release_counts_holds_down_then_deletes_the_key() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "k", "alice", 60_000, &[]).expect("granted");
    acquire(&mut con, "k", "alice", 60_000, &["REENTRANT"]).expect("re-entered");
    assert_eq!(
        call(&mut con, &["LOCK.RELEASE", "k", "alice"]),
        Value::Int(1)
    );
    assert_eq!(lock_info(&mut con, "k").map(|i| i.3), Some(1));
    assert!(
        pttl(&mut con, "k") > 50_000,
        "a partial release keeps the lease"
    );
    assert_eq!(
        call(&mut con, &["LOCK.RELEASE", "k", "alice"]),
        Value::Int(1)
    );
    assert_eq!(
        call(&mut con, &["EXISTS", "k"]),
        Value::Int(0),
        "nothing left behind"
    );
    assert_eq!(
        call(&mut con, &["LOCK.RELEASE", "k", "alice"]),
        Value::Int(0)
    );
    assert_eq!(
        call(&mut con, &["LOCK.RELEASE", "never-taken", "alice"]),
        Value::Int(0)
    );
}

#[test]
fn release_by_another_owner_is_minus_one_and_changes_nothing() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let token = acquire(&mut con, "k", "alice", 60_000, &[]).expect("granted");
    assert_eq!(
        call(&mut con, &["LOCK.RELEASE", "k", "bob"]),
        Value::Int(-1)
    );
    let (owner, info_token, _, holds, _) = lock_info(&mut con, "k").expect("still held");
    assert_eq!((owner.as_str(), info_token, holds), ("alice", token, 1));
}

#[test]
fn an_expired_lease_frees_the_lock() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let first = acquire(&mut con, "k", "alice", 30, &[]).expect("granted");
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(lock_info(&mut con, "k"), None);
    assert_eq!(call(&mut con, &["LOCK.FENCE", "k"]), Value::Nil);
    assert_eq!(
        call(&mut con, &["LOCK.RELEASE", "k", "alice"]),
        Value::Int(0),
        "my lease ran out"
    );
    assert_eq!(
        call(&mut con, &["LOCK.RENEW", "k", "alice", "100"]),
        Value::Int(0)
    );
    let second = acquire(&mut con, "k", "bob", 1_000, &[]).expect("free again");
    assert!(second > first);
}

#[test]
fn renew_resets_the_lease_of_the_holder_only() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let token = acquire(&mut con, "k", "alice", 1_000, &["REENTRANT"]).expect("granted");
    acquire(&mut con, "k", "alice", 1_000, &["REENTRANT"]).expect("re-entered");
    assert_eq!(
        call(&mut con, &["LOCK.RENEW", "k", "alice", "60000"]),
        Value::Int(1)
    );
    let (_, info_token, ttl, holds, _) = lock_info(&mut con, "k").expect("held");
    assert!(ttl > 50_000, "renewed lease: {ttl}");
    assert_eq!((info_token, holds), (token, 2), "token and holds unchanged");

    assert_eq!(
        call(&mut con, &["LOCK.RENEW", "k", "bob", "90000"]),
        Value::Int(-1)
    );
    assert!(
        pttl(&mut con, "k") <= 60_000,
        "another owner cannot extend it"
    );
    assert_eq!(
        call(&mut con, &["LOCK.RENEW", "missing", "alice", "100"]),
        Value::Int(0)
    );
}

#[test]
fn fence_returns_the_holders_token_or_null() {
    let server = Server::start(&[]);
    let mut con = server.client();
    assert_eq!(call(&mut con, &["LOCK.FENCE", "k"]), Value::Nil);
    assert_eq!(call(&mut con, &["LOCK.FENCE", "k", "alice"]), Value::Nil);
    let token = acquire(&mut con, "k", "alice", 60_000, &[]).expect("granted");
    assert_eq!(call(&mut con, &["LOCK.FENCE", "k"]), Value::Int(token));
    assert_eq!(
        call(&mut con, &["LOCK.FENCE", "k", "alice"]),
        Value::Int(token)
    );
    assert_eq!(call(&mut con, &["LOCK.FENCE", "k", "bob"]), Value::Nil);
}

#[test]
fn tokens_increase_across_keys_release_expiry_del_and_flushall() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let mut tokens = vec![];
    for key in ["a", "b", "c"] {
        tokens.push(acquire(&mut con, key, "o", 60_000, &[]).expect("granted"));
    }
    call(&mut con, &["LOCK.RELEASE", "a", "o"]);
    tokens.push(acquire(&mut con, "a", "o", 20, &[]).expect("granted"));
    std::thread::sleep(Duration::from_millis(60));
    tokens.push(acquire(&mut con, "a", "p", 60_000, &[]).expect("after expiry"));
    call(&mut con, &["DEL", "a"]);
    tokens.push(acquire(&mut con, "a", "q", 60_000, &[]).expect("after DEL"));
    call(&mut con, &["FLUSHALL"]);
    tokens.push(acquire(&mut con, "a", "r", 60_000, &[]).expect("after FLUSHALL"));
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens: {tokens:?}");
    assert!(tokens.iter().all(|t| (1..TWO_TO_53).contains(t)));
}

#[test]
fn info_replies_a_map_in_resp3_and_a_flat_array_in_resp2() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let token = acquire(&mut con, "k", "alice", 60_000, &[]).expect("granted");
    let Value::Array(flat) = call(&mut con, &["LOCK.INFO", "k"]) else {
        panic!("RESP2 LOCK.INFO is an array");
    };
    assert_eq!(flat.len(), 14);
    let mut resp3 = server.resp3();
    let Value::Map(map) = call(&mut resp3, &["LOCK.INFO", "k"]) else {
        panic!("RESP3 LOCK.INFO is a map");
    };
    let mut names: Vec<String> = map
        .iter()
        .map(|(name, _)| match name {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::SimpleString(s) => s.clone(),
            other => panic!("field name {other:?}"),
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "holds", "mode", "owner", "session", "token", "ttl", "waiters"
        ]
    );
    assert!(map.contains(&(Value::BulkString(b"token".to_vec()), Value::Int(token))));
    assert_eq!(call(&mut resp3, &["LOCK.INFO", "free"]), Value::Nil);
}

#[test]
fn null_replies_are_resp2_nil_bulk_and_resp3_null() {
    let server = Server::start(&[]);
    let mut con = server.client();
    acquire(&mut con, "k", "alice", 60_000, &[]).expect("granted");
    for resp3 in [false, true] {
        let expected: &[u8] = if resp3 { b"_\r\n" } else { b"$-1\r\n" };
        for args in [
            &["LOCK.ACQUIRE", "k", "bob", "1000"][..],
            &["LOCK.FENCE", "free"],
            &["LOCK.FENCE", "k", "bob"],
            &["LOCK.INFO", "free"],
        ] {
            assert_eq!(
                raw_reply(server.port, resp3, args),
                expected,
                "{args:?} resp3={resp3}"
            );
        }
    }
}

#[test]
fn owners_are_binary_safe_and_up_to_256_bytes() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let long = "x".repeat(256);
    assert!(acquire(&mut con, "long", &long, 60_000, &[]).is_some());
    let binary: Vec<u8> = vec![0, 255, b'\n', b' '];
    let token: Option<i64> = redis::cmd("LOCK.ACQUIRE")
        .arg("bin")
        .arg(&binary)
        .arg(60_000)
        .query(&mut con)
        .expect("binary owner");
    let fenced: Option<i64> = redis::cmd("LOCK.FENCE")
        .arg("bin")
        .arg(&binary)
        .query(&mut con)
        .expect("fence");
    assert_eq!(fenced, token);
}

#[test]
fn bad_arguments_are_errors_that_change_nothing() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let token = acquire(&mut con, "k", "alice", 60_000, &[]).expect("granted");
    let too_long = "x".repeat(257);
    let cases: &[(&[&str], &str)] = &[
        (
            &["LOCK.ACQUIRE", "k", "alice"],
            "ERR wrong number of arguments for 'lock.acquire' command",
        ),
        (
            &["LOCK.ACQUIRE", "k"],
            "ERR wrong number of arguments for 'lock.acquire' command",
        ),
        (
            &["LOCK.RELEASE", "k"],
            "ERR wrong number of arguments for 'lock.release' command",
        ),
        (
            &["LOCK.RELEASE", "k", "alice", "x"],
            "ERR wrong number of arguments for 'lock.release' command",
        ),
        (
            &["LOCK.RENEW", "k", "alice"],
            "ERR wrong number of arguments for 'lock.renew' command",
        ),
        (&["LOCK.RENEW", "k", "alice", "1", "2"], "ERR syntax error"),
        (
            &[
                "LOCK.RENEW",
                "k",
                "alice",
                "1",
                "SESSION",
                "00000000000000ab",
                "x",
            ],
            "ERR syntax error",
        ),
        (
            &["LOCK.FENCE"],
            "ERR wrong number of arguments for 'lock.fence' command",
        ),
        (
            &["LOCK.FENCE", "k", "alice", "x"],
            "ERR wrong number of arguments for 'lock.fence' command",
        ),
        (
            &["LOCK.INFO"],
            "ERR wrong number of arguments for 'lock.info' command",
        ),
        (
            &["LOCK.INFO", "k", "x"],
            "ERR wrong number of arguments for 'lock.info' command",
        ),
        (
            &["LOCK.ACQUIRE", "k", "", "1000"],
            "ERR owner must be 1 to 256 bytes",
        ),
        (
            &["LOCK.ACQUIRE", "k", &too_long, "1000"],
            "ERR owner must be 1 to 256 bytes",
        ),
        (
            &["LOCK.RELEASE", "k", ""],
            "ERR owner must be 1 to 256 bytes",
        ),
        (
            &["LOCK.RENEW", "k", &too_long, "1000"],
            "ERR owner must be 1 to 256 bytes",
        ),
        (&["LOCK.FENCE", "k", ""], "ERR owner must be 1 to 256 bytes"),
        (
            &["LOCK.ACQUIRE", "k", "alice", "ten"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["LOCK.ACQUIRE", "k", "alice", "1.5"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["LOCK.ACQUIRE", "k", "alice", "99999999999999999999"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["LOCK.RENEW", "k", "alice", "x"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["LOCK.ACQUIRE", "k", "alice", "0"],
            "ERR invalid expire time in 'lock.acquire' command",
        ),
        (
            &["LOCK.ACQUIRE", "k", "alice", "-5"],
            "ERR invalid expire time in 'lock.acquire' command",
        ),
        (
            &["LOCK.ACQUIRE", "k", "alice", "9223372036854775807"],
            "ERR invalid expire time in 'lock.acquire' command",
        ),
        (
            &["LOCK.RENEW", "k", "alice", "0"],
            "ERR invalid expire time in 'lock.renew' command",
        ),
        (
            &["LOCK.RENEW", "k", "alice", "9223372036854775000"],
            "ERR invalid expire time in 'lock.renew' command",
        ),
        (
            &["LOCK.ACQUIRE", "k", "alice", "1000", "FOREVER"],
            "ERR syntax error",
        ),
        (
            &[
                "LOCK.ACQUIRE",
                "k",
                "alice",
                "1000",
                "REENTRANT",
                "REENTRANT",
            ],
            "ERR syntax error",
        ),
        (
            &["LOCK.ACQUIRE", "new", "alice", "1000", "REENTRANT", "x"],
            "ERR syntax error",
        ),
    ];
    for (args, expected) in cases {
        assert_eq!(error(&mut con, args), *expected, "{args:?}");
    }
    let (owner, info_token, ttl, holds, _) = lock_info(&mut con, "k").expect("untouched");
    assert_eq!((owner.as_str(), info_token, holds), ("alice", token, 1));
    assert!(ttl > 50_000, "lease untouched: {ttl}");
    assert_eq!(call(&mut con, &["EXISTS", "new"]), Value::Int(0));
    assert_eq!(
        call(&mut con, &["PING"]),
        Value::SimpleString("PONG".into())
    );
}

#[test]
fn every_command_refuses_keys_of_another_type() {
    let server = Server::start(&[]);
    let mut con = server.client();
    call(&mut con, &["SET", "string", "v"]);
    call(&mut con, &["RPUSH", "list", "v"]);
    const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
    for key in ["string", "list"] {
        for args in [
            &["LOCK.ACQUIRE", key, "alice", "1000"][..],
            &["LOCK.ACQUIRE", key, "alice", "1000", "REENTRANT"],
            &["LOCK.RELEASE", key, "alice"],
            &["LOCK.RENEW", key, "alice", "1000"],
            &["LOCK.FENCE", key],
            &["LOCK.FENCE", key, "alice"],
            &["LOCK.INFO", key],
        ] {
            assert_eq!(error(&mut con, args), WRONGTYPE, "{args:?}");
        }
    }
    assert_eq!(
        call(&mut con, &["GET", "string"]),
        Value::BulkString(b"v".to_vec())
    );
    assert_eq!(call(&mut con, &["LLEN", "list"]), Value::Int(1));
    assert_eq!(call(&mut con, &["PTTL", "string"]), Value::Int(-1));
}

#[test]
fn clients_cannot_call_the_replication_effect() {
    let server = Server::start(&[]);
    let mut con = server.client();
    for args in [
        &["LOCK.APPLY", "k", "mallory", "9007199254740990", "1"][..],
        &[
            "LOCK.APPLY",
            "k",
            "mallory",
            "5",
            "1",
            "PXAT",
            "99999999999999",
        ],
    ] {
        let refused = error(&mut con, args);
        assert!(refused.starts_with("ERR LOCK.APPLY"), "{refused}");
    }
    call(&mut con, &["MULTI"]);
    call(
        &mut con,
        &["LOCK.APPLY", "k", "mallory", "9007199254740990", "1"],
    );
    assert!(error(&mut con, &["EXEC"]).contains("LOCK.APPLY"));
    let script = error(
        &mut con,
        &[
            "EVAL",
            "return redis.call('LOCK.APPLY', KEYS[1], 'm', '9007199254740990', '1')",
            "1",
            "k",
        ],
    );
    assert!(script.contains("LOCK.APPLY"), "{script}");
    assert_eq!(call(&mut con, &["EXISTS", "k"]), Value::Int(0));
    let token = acquire(&mut con, "k", "alice", 1_000, &[]).expect("granted");
    assert!(
        token < 9_007_199_254_740_990,
        "the counter was not moved: {token}"
    );
}

#[test]
fn commands_declare_the_lock_name_as_their_key() {
    let server = Server::start(&[]);
    let mut con = server.client();
    for args in [
        &["LOCK.ACQUIRE", "lock:a", "o", "100", "REENTRANT"][..],
        &["LOCK.RELEASE", "lock:a", "o"],
        &["LOCK.RENEW", "lock:a", "o", "100"],
        &["LOCK.FENCE", "lock:a"],
        &["LOCK.FENCE", "lock:a", "o"],
        &["LOCK.INFO", "lock:a"],
    ] {
        let mut getkeys = vec!["COMMAND", "GETKEYS"];
        getkeys.extend_from_slice(args);
        assert_eq!(
            call(&mut con, &getkeys),
            Value::Array(vec![Value::BulkString(b"lock:a".to_vec())]),
            "{args:?}"
        );
    }
}

#[test]
fn keyspace_notifications_name_each_write() {
    let server = Server::start(&["--notify-keyspace-events", "Kd"]);
    let mut con = server.client();
    let mut subscriber = server.client();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.subscribe("__keyspace@0__:k").expect("subscribe");
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    acquire(&mut con, "k", "alice", 60_000, &[]).expect("granted");
    acquire(&mut con, "k", "bob", 60_000, &[]); // refused: no event
    call(&mut con, &["LOCK.RENEW", "k", "alice", "60000"]);
    call(&mut con, &["LOCK.RELEASE", "k", "bob"]); // refused: no event
    call(&mut con, &["LOCK.RELEASE", "k", "alice"]);
    let events: Vec<String> = (0..3)
        .map(|_| {
            pubsub
                .get_message()
                .expect("event")
                .get_payload()
                .expect("payload")
        })
        .collect();
    assert_eq!(events, ["lock.acquire", "lock.renew", "lock.release"]);
}

#[test]
fn lock_commands_work_inside_multi_and_scripts() {
    let server = Server::start(&[]);
    let mut con = server.client();
    let (first, second): (Option<i64>, Option<i64>) = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("alice")
        .arg(60_000)
        .cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("bob")
        .arg(60_000)
        .query(&mut con)
        .expect("MULTI");
    assert!(first.is_some());
    assert_eq!(second, None);
    let released: i64 = redis::cmd("EVAL")
        .arg("return redis.call('LOCK.RELEASE', KEYS[1], ARGV[1])")
        .arg(1)
        .arg("k")
        .arg("alice")
        .query(&mut con)
        .expect("EVAL");
    assert_eq!(released, 1);
}
